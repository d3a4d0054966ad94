//! From the pass's totals to the report: intervals, distributions, the
//! judge's figures, the rows shown and the regression gates.

use std::collections::{BTreeMap, HashMap};

use rayon::prelude::*;
use refscore_core::metric::Direction;
use refscore_core::Error;
use refscore_stats::{bin_centre, Histogram as ValueHistogram, Tally};

use crate::agg::{FlipEntry, LowEntry};
use crate::bootstrap::{self, Method};
use crate::model::*;
use crate::pass::{Agg, Ctx, SliceSource};
use crate::texts::{self, Wanted};
use crate::{signed, Options};

/// "worse", "better" or "no clear change" for a change of `metric` whose
/// interval is `lo..hi`: a rise is better where higher is better, worse
/// where lower is (the metric registry's [`Direction`]).
fn verdict(metric: &str, lo: Option<f64>, hi: Option<f64>) -> &'static str {
    let (rise, fall) = if Direction::of(metric).lower_is_better() {
        ("worse", "better")
    } else {
        ("better", "worse")
    };
    match (lo, hi) {
        (_, Some(h)) if h < 0.0 => fall,
        (Some(l), _) if l > 0.0 => rise,
        _ => "no clear change",
    }
}

/// "token_f1 −0.031 [−0.040, −0.022]: worse".
fn line(metric: &str, diff: Option<f64>, lo: Option<f64>, hi: Option<f64>, v: &str) -> String {
    match (diff, lo, hi) {
        (Some(d), Some(l), Some(h)) => {
            let dec = if d.abs().max(l.abs()).max(h.abs()) >= 0.01 {
                3
            } else {
                4
            };
            format!(
                "{metric} {} [{}, {}]: {v}",
                signed(d, dec),
                signed(l, dec),
                signed(h, dec)
            )
        }
        _ => format!("{metric}: no paired rows"),
    }
}

const CHART_BINS: usize = 20;

/// An interval to compute: (metric, slice or None for all rows).
type Task = (usize, Option<usize>);

fn chart_hist(hists: &[&ValueHistogram]) -> (f64, f64) {
    let mut lo: f64 = 0.0;
    let mut hi: f64 = 1.0;
    for h in hists {
        let b = h.bins();
        if let (Some(first), Some(last)) = (b.first(), b.last()) {
            lo = lo.min(bin_centre(first.0));
            hi = hi.max(bin_centre(last.0));
        }
    }
    (lo, hi)
}

fn rebin(h: &ValueHistogram, lo: f64, hi: f64) -> Histogram {
    let mut counts = vec![0u64; CHART_BINS];
    let width = (hi - lo) / CHART_BINS as f64;
    for (b, c) in h.bins() {
        let v = bin_centre(b);
        let k = (((v - lo) / width).floor().max(0.0) as usize).min(CHART_BINS - 1);
        counts[k] += c;
    }
    Histogram { lo, hi, counts }
}

fn distribution(m: &Tally, h: &ValueHistogram, t: Option<f64>, range: (f64, f64)) -> Distribution {
    Distribution {
        count: m.count(),
        mean: m.mean(),
        median: h.median(),
        pass_rate: m.pass_rate(t),
        histogram: rebin(h, range.0, range.1),
    }
}

fn sorted_errors(map: HashMap<String, u64>) -> Vec<ErrorGroup> {
    let mut v: Vec<ErrorGroup> = map
        .into_iter()
        .map(|(reason, rows)| ErrorGroup { reason, rows })
        .collect();
    v.sort_by(|a, b| b.rows.cmp(&a.rows).then(a.reason.cmp(&b.reason)));
    v
}

/// Labelled rows listed per metric where it disagrees with its label.
const DISAGREEMENTS_SHOWN: usize = 50;

/// The report of one pass: its figures from `agg`, the rows it shows (their
/// texts fetched once, for every section), the gates' outcomes.
pub(crate) fn finish(ctx: &Ctx, agg: Agg, method: Option<&'static str>) -> Result<Report, Error> {
    let o = ctx.options;
    let has_base = ctx.base.is_some();
    let mut agg = agg;
    let intervals = intervals(ctx, &agg);
    let shown = Shown::take(&mut agg);
    let gold = crate::gold::figures(&ctx.cur.table, &o.gold, DISAGREEMENTS_SHOWN)?;
    // The baseline's labels, read the same way; a baseline without them (or
    // without the columns --gold names) has no corrected figures to compare.
    let base_gold = ctx
        .base
        .map(|b| crate::gold::figures(&b.table, &o.gold, 0).unwrap_or_default())
        .unwrap_or_default();
    let fetched = texts::fetch(o, ctx.cur, ctx.base, &shown.wanted(&agg, &gold))?;
    let views = Views(&fetched);
    let calibration = calibration(&agg, gold, &views);
    let mut metrics: Vec<MetricReport> = (0..ctx.metrics.len())
        .map(|k| metric_report(ctx, &agg, k, &intervals, &shown, &views))
        .collect();
    let slices = ctx
        .slices
        .as_ref()
        .map(|src| slice_reports(ctx, &agg, src, &intervals));
    let join = method.map(|method| join(&agg, method, &fetched));
    let judge = judge(ctx, &agg);
    for m in &mut metrics {
        compare_corrected(m, &calibration, &base_gold);
    }
    let gates = gate_results(o, &metrics);
    let figures: Vec<_> = calibration.iter().map(|g| g.figures.clone()).collect();
    let rate_gates = crate::rate_gate::check(&o.rate_gates, &figures, o.gate_confidence)?;
    let rubric_changes = ctx
        .base
        .map(|b| rubric_changes(&ctx.cur.defined, &b.defined))
        .unwrap_or_default();
    Ok(Report {
        calibration,
        rubric_changes,
        refscore_version: env!("CARGO_PKG_VERSION"),
        result: RunSummary {
            path: o.result.clone(),
            rows: agg.rows,
            statuses: status_map(&agg, &agg.statuses),
            errors: sorted_errors(agg.errors.clone()),
        },
        baseline: ctx.base.map(|b| RunSummary {
            path: b.shown.clone(),
            rows: agg.base_rows,
            statuses: status_map(&agg, &agg.base_statuses),
            errors: sorted_errors(agg.base_errors.clone()),
        }),
        join,
        metrics,
        slices,
        judge,
        bootstrap: has_base.then_some(Method {
            description: bootstrap::DESCRIPTION,
            replicates: o.replicates,
            seed: o.seed,
            confidence: 0.95,
            bin_width: refscore_stats::BIN_WIDTH,
        }),
        gates,
        rate_gates,
        texts_from: fetched.from,
    })
}

/// The bootstrap interval of each metric's change, overall and per slice
/// (empty without a baseline). Every (metric, slice) is independent: they
/// run in parallel.
fn intervals(ctx: &Ctx, agg: &Agg) -> HashMap<Task, Option<(f64, f64)>> {
    let o = ctx.options;
    let mut tasks: Vec<Task> = Vec::new();
    if ctx.base.is_some() {
        for k in 0..ctx.metrics.len() {
            tasks.push((k, None));
            for s in 0..agg.slices.len() {
                tasks.push((k, Some(s)));
            }
        }
    }
    tasks
        .par_iter()
        .map(|&(k, s)| {
            let p = match s {
                None => &agg.paired[k],
                Some(s) => &agg.slices[s].paired[k],
            };
            let seed = bootstrap::stream_seed(
                o.seed,
                &ctx.metrics[k],
                s.map(|s| agg.slicer.names[s].as_str()),
            );
            let ci = p
                .mean_diff()
                .and_then(|d| bootstrap::interval(&p.diff.bins(), d, seed, o.replicates));
            ((k, s), ci)
        })
        .collect()
}

/// A change's interval bounds (both `None` where it has none: no
/// baseline, or too few pairs).
fn interval(
    intervals: &HashMap<Task, Option<(f64, f64)>>,
    task: Task,
) -> (Option<f64>, Option<f64>) {
    let ci = intervals.get(&task).copied().flatten();
    (ci.map(|c| c.0), ci.map(|c| c.1))
}

/// The rows each metric shows: its lowest, and the rows that flipped
/// against the baseline, in order.
struct Shown {
    lowest: Vec<Vec<LowEntry>>,
    down: Vec<Vec<FlipEntry>>,
    up: Vec<Vec<FlipEntry>>,
}

impl Shown {
    /// Takes the kept rows out of the pass's totals, sorted.
    fn take(agg: &mut Agg) -> Shown {
        fn sorted<T: Ord>(lists: Vec<crate::agg::Lowest<T>>) -> Vec<Vec<T>> {
            lists.into_iter().map(|l| l.into_sorted()).collect()
        }
        Shown {
            lowest: sorted(std::mem::take(&mut agg.lowest)),
            down: sorted(std::mem::take(&mut agg.down)),
            up: sorted(std::mem::take(&mut agg.up)),
        }
    }

    /// Every row whose texts the report shows: these, the examples of rows
    /// only one side has, and the labelled rows that disagree.
    fn wanted(
        &self,
        agg: &Agg,
        gold: &[(
            refscore_stats::gold::Calibration,
            Vec<crate::gold::Disagreeing>,
        )],
    ) -> Wanted {
        let mut wanted = Wanted::default();
        for e in self.lowest.iter().flatten() {
            wanted.cur.push(e.1);
        }
        for e in self.down.iter().chain(self.up.iter()).flatten() {
            wanted.cur.push(e.1);
            wanted.base.push(e.2);
        }
        wanted.cur.extend(&agg.only_cur_examples);
        wanted.base.extend(&agg.only_base_examples);
        for (_, rows) in gold {
            wanted.cur.extend(rows.iter().map(|d| d.row));
        }
        wanted
    }
}

/// Shown rows with their fetched texts.
struct Views<'f>(&'f texts::Fetched);

impl Views<'_> {
    /// Row `row` of the result with `value`, beside the baseline's row and
    /// value where it is paired.
    fn view(&self, row: u64, value: f32, base: Option<(u64, f32)>) -> RowView {
        let t = self.0.cur.get(&row).cloned().unwrap_or_default();
        let b = base.and_then(|(r, _)| self.0.base.get(&r).cloned());
        RowView {
            row,
            id: t.id,
            value: value as f64,
            baseline_value: base.map(|(_, v)| v as f64),
            input: t.input,
            reference: t.reference,
            output: t.output,
            baseline_output: b.as_ref().and_then(|b| b.output.clone()),
            reason: t.reason,
            baseline_reason: b.and_then(|b| b.reason),
        }
    }

    fn flips(&self, entries: &[FlipEntry]) -> Vec<RowView> {
        entries
            .iter()
            .map(|e| self.view(e.1, f32::from_bits(e.3), Some((e.2, f32::from_bits(e.4)))))
            .collect()
    }
}

/// What each tier decided of a metric, from its source column.
fn tier_volume(agg: &Agg, metric: &str) -> BTreeMap<String, TierVolume> {
    let Some(counts) = agg.judge.sources.get(&format!("{metric}_source")) else {
        return BTreeMap::new();
    };
    let all: u64 = counts.values().sum();
    counts
        .iter()
        .filter(|(s, _)| refscore_core::schema::source::is_tier(s))
        .map(|(s, &n)| {
            let share = if all > 0 { n as f64 / all as f64 } else { 0.0 };
            (s.clone(), TierVolume { decided: n, share })
        })
        .collect()
}

/// Each labelled metric's figures, the tiers' shares and the rows that
/// disagree with their labels.
fn calibration(
    agg: &Agg,
    gold: Vec<(
        refscore_stats::gold::Calibration,
        Vec<crate::gold::Disagreeing>,
    )>,
    views: &Views,
) -> Vec<GoldReport> {
    gold.into_iter()
        .map(|(figures, rows)| GoldReport {
            tier_volume: tier_volume(agg, &figures.metric),
            figures,
            disagreements: rows
                .iter()
                .map(|d| Disagreement {
                    row: RowView {
                        value: d.value,
                        ..views.view(d.row, d.value as f32, None)
                    },
                    gold: d.gold,
                    p: d.p,
                })
                .collect(),
        })
        .collect()
}

/// Metric `k`: its distribution (and the baseline's), its change with
/// interval and verdict, its lowest and flipped rows.
fn metric_report(
    ctx: &Ctx,
    agg: &Agg,
    k: usize,
    intervals: &HashMap<Task, Option<(f64, f64)>>,
    shown: &Shown,
    views: &Views,
) -> MetricReport {
    let has_base = ctx.base.is_some();
    let name = &ctx.metrics[k];
    let t = agg.thresholds[k];
    let range = if has_base {
        chart_hist(&[&agg.cur_hist[k], &agg.base_hist[k]])
    } else {
        chart_hist(&[&agg.cur_hist[k]])
    };
    let change = has_base.then(|| {
        let p = &agg.paired[k];
        let (lo, hi) = interval(intervals, (k, None));
        let v = verdict(name, lo, hi);
        let pr = |passed: u64| (t.is_some() && p.pairs > 0).then(|| passed as f64 / p.pairs as f64);
        Change {
            pairs: p.pairs,
            mean_baseline: p.mean_base(),
            mean_result: p.mean_cur(),
            diff: p.mean_diff(),
            ci_low: lo,
            ci_high: hi,
            verdict: v,
            line: line(name, p.mean_diff(), lo, hi, v),
            pass_rate_baseline: pr(p.pass_base),
            pass_rate_result: pr(p.pass_cur),
            pass_to_fail: p.pass_to_fail,
            fail_to_pass: p.fail_to_pass,
            corrected: None,
            pass_to_fail_rows: views.flips(&shown.down[k]),
            fail_to_pass_rows: views.flips(&shown.up[k]),
        }
    });
    MetricReport {
        name: name.clone(),
        threshold: t,
        result: distribution(&agg.cur[k], &agg.cur_hist[k], t, range),
        baseline: has_base.then(|| distribution(&agg.base[k], &agg.base_hist[k], t, range)),
        lower_is_better: Direction::of(name).lower_is_better(),
        lowest: shown.lowest[k]
            .iter()
            .map(|e| {
                let value = crate::agg::unsortable(e.0) * crate::pass::worst_first(name);
                views.view(e.1, value, None)
            })
            .collect(),
        change,
    }
}

/// Each metric per slice of `--slice`'s column: most changed first with a
/// baseline, lowest mean first without.
fn slice_reports(
    ctx: &Ctx,
    agg: &Agg,
    src: &SliceSource,
    intervals: &HashMap<Task, Option<(f64, f64)>>,
) -> Slices {
    let has_base = ctx.base.is_some();
    let (column, source) = match src {
        SliceSource::Result(c) => (c.clone(), "result"),
        SliceSource::Input(_, _, c) => (c.clone(), "input"),
    };
    let per_metric = (0..ctx.metrics.len())
        .map(|k| {
            let mut rows: Vec<SliceRow> = (0..agg.slices.len())
                .map(|s| slice_row(ctx, agg, k, s, intervals))
                .collect();
            if has_base {
                let key = |r: &SliceRow| {
                    r.change
                        .as_ref()
                        .and_then(|c| c.diff)
                        .map_or(-1.0, f64::abs)
                };
                rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then(a.slice.cmp(&b.slice)));
            } else {
                let key = |r: &SliceRow| r.mean.unwrap_or(f64::INFINITY);
                rows.sort_by(|a, b| key(a).total_cmp(&key(b)).then(a.slice.cmp(&b.slice)));
            }
            SliceMetric {
                name: ctx.metrics[k].clone(),
                slices: rows,
            }
        })
        .collect();
    Slices {
        column,
        source,
        count: agg.slicer.names.len(),
        metrics: per_metric,
    }
}

/// Metric `k` in slice `s`.
fn slice_row(
    ctx: &Ctx,
    agg: &Agg,
    k: usize,
    s: usize,
    intervals: &HashMap<Task, Option<(f64, f64)>>,
) -> SliceRow {
    let acc = &agg.slices[s];
    let c = &acc.cur[k];
    let change = ctx.base.is_some().then(|| {
        let p = &acc.paired[k];
        let (lo, hi) = interval(intervals, (k, Some(s)));
        SliceChange {
            pairs: p.pairs,
            mean_baseline: p.mean_base(),
            mean_result: p.mean_cur(),
            diff: p.mean_diff(),
            ci_low: lo,
            ci_high: hi,
            verdict: verdict(&ctx.metrics[k], lo, hi),
            pass_to_fail: p.pass_to_fail,
            fail_to_pass: p.fail_to_pass,
        }
    });
    SliceRow {
        slice: agg.slicer.names[s].clone(),
        rows: acc.rows,
        count: c.count(),
        mean: c.mean(),
        pass_rate: c.pass_rate(agg.thresholds[k]),
        change,
    }
}

/// Rows per status, by the statuses' names (those with none left out).
fn status_map(agg: &Agg, counts: &[u64]) -> BTreeMap<String, u64> {
    agg.status_names
        .iter()
        .zip(counts)
        .filter(|(_, c)| **c > 0)
        .map(|(n, c)| (n.clone(), *c))
        .collect()
}

/// How the result's rows were paired with the baseline's: matched, on
/// one side only (with examples' ids), and how their statuses moved.
fn join(agg: &Agg, method: &'static str, fetched: &texts::Fetched) -> Join {
    let name_of = |s: u8| {
        agg.status_names
            .get(s as usize)
            .cloned()
            .unwrap_or_else(|| "(unknown)".into())
    };
    let mut changes: Vec<StatusChange> = agg
        .status_changes
        .iter()
        .map(|((f, t), rows)| StatusChange {
            from: name_of(*f),
            to: name_of(*t),
            rows: *rows,
        })
        .collect();
    changes.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
    let ids = |rows: &[u64], map: &HashMap<u64, texts::RowTexts>| {
        rows.iter()
            .map(|r| map.get(r).map(|t| t.id.clone()).unwrap_or_default())
            .collect()
    };
    Join {
        method,
        rows_matched: agg.matched,
        only_in_result: agg.only_cur,
        only_in_baseline: agg.only_base,
        only_in_result_examples: ids(&agg.only_cur_examples, &fetched.cur),
        only_in_baseline_examples: ids(&agg.only_base_examples, &fetched.base),
        duplicate_baseline_ids: agg.duplicates,
        status_changes: changes,
    }
}

/// The judge's figures, where the result has judge or source columns.
fn judge(ctx: &Ctx, agg: &Agg) -> Option<Judge> {
    (!ctx.cur.judge_cols.is_empty() || !ctx.cur.source_cols.is_empty()).then(|| Judge {
        rows_requested: agg.judge.requested,
        rows_judged: agg.judge.judged,
        prompt_tokens: agg.judge.sums[0],
        completion_tokens: agg.judge.sums[1],
        call_seconds: agg.judge.sums[2] as f64 / 1000.0,
        sources: agg.judge.sources.clone(),
        summary: texts::summary_judge(&ctx.options.result),
    })
}

/// A labelled metric's change judged on its corrected figures (both
/// nights with enough labels for an interval).
fn compare_corrected(
    m: &mut MetricReport,
    cur: &[GoldReport],
    base: &[(
        refscore_stats::gold::Calibration,
        Vec<crate::gold::Disagreeing>,
    )],
) {
    use refscore_stats::ppi::Z95;
    let Some(change) = m.change.as_mut() else {
        return;
    };
    let find = |c: &refscore_stats::gold::Calibration| {
        c.corrected
            .as_ref()
            .filter(|k| c.metric == m.name && k.note.is_none())
            .map(|k| (k.mean.estimate, (k.mean.high - k.mean.low) / (2.0 * Z95)))
    };
    let (Some(now), Some(then)) = (
        cur.iter().find_map(|g| find(&g.figures)),
        base.iter().find_map(|(c, _)| find(c)),
    ) else {
        return;
    };
    let diff = now.0 - then.0;
    let half = Z95 * (now.1 * now.1 + then.1 * then.1).sqrt();
    let (lo, hi) = (diff - half, diff + half);
    change.verdict = verdict(&m.name, Some(lo), Some(hi));
    change.line = format!(
        "{} (corrected for the judge's error)",
        line(&m.name, Some(diff), Some(lo), Some(hi), change.verdict)
    );
    change.corrected = Some(CorrectedChange {
        baseline: then.0,
        result: now.0,
        diff,
        ci_low: lo,
        ci_high: hi,
    });
}

fn gate_results(o: &Options, metrics: &[MetricReport]) -> Vec<GateResult> {
    let mut out = Vec::new();
    for g in &o.gates {
        for m in metrics
            .iter()
            .filter(|m| g.metric == "all" || g.metric == m.name)
        {
            let Some(c) = &m.change else { continue };
            let high = c.corrected.as_ref().map(|k| k.ci_high).or(c.ci_high);
            let low = c.corrected.as_ref().map(|k| k.ci_low).or(c.ci_low);
            // A regression is a change the wrong way: down where higher is
            // better, up where lower is.
            let lower_is_better = Direction::of(&m.name).lower_is_better();
            let failed = if lower_is_better {
                low.is_some_and(|l| l > g.delta)
            } else {
                high.is_some_and(|h| h < -g.delta)
            };
            let line = match (failed, lower_is_better) {
                (true, false) => format!(
                    "{}: regression: the interval lies wholly below −{}",
                    c.line, g.delta
                ),
                (true, true) => format!(
                    "{}: regression: the interval lies wholly above +{} (lower is better)",
                    c.line, g.delta
                ),
                (false, false) => format!("{}: within −{}", c.line, g.delta),
                (false, true) => format!("{}: within +{} (lower is better)", c.line, g.delta),
            };
            out.push(GateResult {
                metric: m.name.clone(),
                delta: g.delta,
                failed,
                line,
            });
        }
    }
    out
}

/// The defined judge metrics whose recorded version differs between the
/// result (`cur`) and the baseline (`base`), in words.
fn rubric_changes(
    cur: &serde_json::Map<String, serde_json::Value>,
    base: &serde_json::Map<String, serde_json::Value>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, now) in cur {
        if let Some(then) = base.get(name) {
            if then["version"] != now["version"] || then["threshold"] != now["threshold"] {
                out.push(format!(
                    "judge metric {name}: its definition changed between the runs (baseline {}, result {}); a change in its scores may be the rubric's",
                    then["version"].as_str().unwrap_or("?"),
                    now["version"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    out
}

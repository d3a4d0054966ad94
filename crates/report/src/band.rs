//! `refscore calibrate-band`: a band fitted on a result's labelled rows
//! ([`refscore_stats::band`]), and what it would have done to the whole
//! result: the rows it leaves to the judge, the calls it saves, and the
//! error it adds against the judge's own on the same labelled rows.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Float32Type};
use refscore_core::metric::Direction;
use refscore_core::Error;
use refscore_read::Table;
use refscore_stats::band::{fit_band_at, BandFit, BandGuarantee};
use refscore_stats::gold::{GoldState, LabelKind, LabelledRow};
use refscore_stats::ppi::MIN_LABELS;
use serde::Serialize;

use crate::gold::{self, GoldColumn};

/// What to fit.
#[derive(Debug, Clone)]
pub struct BandRequest {
    /// The verdict the band decides (e.g. `meaning_match`).
    pub metric: String,
    /// The score it reads (e.g. `cosine`).
    pub by: String,
    /// The label column; `None`: the one the result's footer records.
    pub gold: Option<String>,
    /// Largest error allowed on each side.
    pub max_error: f64,
    /// The confidence each side's upper Clopper-Pearson bound is held to
    /// `max_error` at (`--confidence`); None: today's point-estimate fit.
    pub confidence: Option<f64>,
}

/// A fitted band and its effect on the result it was fitted on.
#[derive(Debug, Clone, Serialize)]
pub struct BandReport {
    /// The verdict decided.
    pub metric: String,
    /// The score read.
    pub by: String,
    /// The label column.
    pub gold_column: String,
    /// The `--judge-band` value to use.
    pub judge_band: String,
    /// The fit and each side's measured error (`below` and `above` are
    /// the sides' places; where lower is better, below LO decides true and
    /// above HI false).
    #[serde(flatten)]
    pub fit: BandFit,
    /// Whether `by` is lower-is-better, which swaps what the sides decide.
    pub lower_is_better: bool,
    /// Labelled rows the band was fitted on: those the rules leave, with a
    /// value of `by`.
    pub labels_reaching: u64,
    /// What makes the figures weak (too few labelled rows), in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Rows of the result with a value of `by` (those a band can decide).
    pub rows: u64,
    /// Of them, rows inside the band: still judged.
    pub rows_inside: u64,
    /// rows_inside / rows.
    pub share_judged: f64,
    /// Judge calls made in this result for rows outside the band: the calls
    /// the band saves at this volume. One per row a single judge answered
    /// (source `judge`); for a panel, one per judge that answered the row
    /// (an escalated row costs each judge it reached, a jury every juror).
    pub calls_saved: u64,
    /// Labelled rows outside the band that the judge answered here: the
    /// rows the added error is measured on.
    pub labels_compared: u64,
    /// Of them, rows the band decides against their label.
    pub band_errors: u64,
    /// Of them, rows the judge answered against their label.
    pub judge_errors: u64,
    /// (band_errors − judge_errors) / labels_compared: the error the band
    /// adds where it replaces the judge (negative: it removes error).
    pub error_added: Option<f64>,
}

/// The label column of `r.metric` in `table` (given, or the one `score
/// --gold` recorded) and the columns it is read with.
pub(crate) fn label_columns(table: &Table, r: &BandRequest) -> Result<(String, GoldColumn), Error> {
    let spec = table.spec();
    let column = match &r.gold {
        Some(c) => c.clone(),
        None => {
            let recorded = table.footer_value(gold::FOOTER).ok_or_else(|| {
                Error::config(format!(
                    "{spec}: no labels recorded: pass --gold COLUMN (score it with --gold {}=COLUMN)",
                    r.metric
                ))
            })?;
            gold::mapping_from_json(recorded)?
                .into_iter()
                .find(|(m, _)| *m == r.metric)
                .map(|(_, c)| c)
                .ok_or_else(|| {
                    Error::config(format!(
                        "{spec}: the result records no labels for {}: pass --gold COLUMN",
                        r.metric
                    ))
                })?
        }
    };
    let g = gold::resolve(&table.schema(), &[(r.metric.clone(), column.clone())], spec)?.remove(0);
    if g.kind != LabelKind::Verdict {
        return Err(Error::usage(format!(
            "--metric {}: the band decides a verdict (meaning_match, or a defined verdict)",
            r.metric
        )));
    }
    Ok((column, g))
}

/// The position of score `by` among the label column's stand-ins.
pub(crate) fn stand_in(g: &GoldColumn, by: &str, spec: &str) -> Result<usize, Error> {
    g.stand_ins.iter().position(|s| *s == by).ok_or_else(|| {
        Error::usage(format!(
            "--by {by}: not a lexical, embedding or cross-encoder score of {spec} (it has: {})",
            g.stand_ins.join(", ")
        ))
    })
}

/// The labelled rows of `r.metric`, refused when there are none.
pub(crate) fn labelled(
    table: &Table,
    column: &str,
    g: &GoldColumn,
    r: &BandRequest,
) -> Result<GoldState, Error> {
    let state = gold::gather(table, std::slice::from_ref(g))?.remove(0);
    if state.rows.is_empty() {
        return Err(Error::config(format!(
            "{}: column '{column}' holds no labels on rows with a {} value",
            table.spec(),
            r.metric
        )));
    }
    Ok(state)
}

/// The labelled rows a tier can be handed in a run: those no rule decided
/// (the exact-match and empty-output rules settle theirs before any tier).
pub(crate) fn reach_tiers(row: &LabelledRow) -> bool {
    !row.by_rule
}

/// Refuses a fit that no labelled row reaches, saying why (rather than
/// letting the fit call the missing labels "all false").
pub(crate) fn some_reach(
    state: &GoldState,
    k: usize,
    by: &str,
    spec: &str,
    column: &str,
) -> Result<(), Error> {
    if state
        .rows
        .iter()
        .any(|row| reach_tiers(row) && row.stand_ins[k].is_some())
    {
        return Ok(());
    }
    let by_rule = state.rows.iter().filter(|row| row.by_rule).count();
    Err(Error::config(format!(
        "{spec}: column '{column}': none of the {} labelled rows reaches the band ({by_rule} decided by the rules, {} without a {by} value): label rows the rules leave to the tiers and the judge",
        state.rows.len(),
        state.rows.len() - by_rule
    )))
}

/// The warning for a band fitted on `n` labelled rows, if that is too few
/// for its measured error to mean much.
pub(crate) fn too_few(by: &str, n: usize) -> Option<String> {
    (n < MIN_LABELS as usize).then(|| {
        format!(
            "the band on {by} is fitted on {n} labelled rows: too few (at least {MIN_LABELS} are needed for its error to mean much); label more rows"
        )
    })
}

/// [`fit_band_at`] in the direction of the score: for a lower-is-better
/// one the band is fitted on the negated scores and turned back, so that
/// below LO decides true and above HI false (as the run's tier decides),
/// with `below` and `above` still the sides' places. Cut-offs are f32, as
/// the run compares.
pub(crate) fn fit_directed(
    pairs: &[(f64, bool)],
    r: &BandRequest,
    lower_is_better: bool,
) -> Result<BandFit, String> {
    if pairs.is_empty() {
        return Err("no labelled row reaches it".into());
    }
    let mut fit = if lower_is_better {
        let negated: Vec<(f64, bool)> = pairs.iter().map(|&(s, g)| (-s, g)).collect();
        let f = fit_band_at(&negated, r.max_error, r.confidence)?;
        BandFit {
            lo: -f.hi,
            hi: -f.lo,
            below: f.above,
            above: f.below,
            ..f
        }
    } else {
        fit_band_at(pairs, r.max_error, r.confidence)?
    };
    fit.lo = fit.lo as f32 as f64;
    fit.hi = fit.hi as f32 as f64;
    Ok(fit)
}

/// The verdict a band decides for a score `s` outside it.
pub(crate) fn decides_true(fit: &BandFit, s: f64, lower_is_better: bool) -> bool {
    if lower_is_better {
        s < fit.lo
    } else {
        s > fit.hi
    }
}

/// Fits the band on the labelled rows a run would hand it (those the rules
/// leave) and measures it on all the rows it would see.
pub fn calibrate(table: &Table, r: &BandRequest) -> Result<BandReport, Error> {
    let spec = table.spec();
    let (column, g) = label_columns(table, r)?;
    let k = stand_in(&g, &r.by, spec)?;
    let state = labelled(table, &column, &g, r)?;
    some_reach(&state, k, &r.by, spec, &column)?;
    let lower = Direction::of(&r.by).lower_is_better();
    let pairs: Vec<(f64, bool)> = state
        .rows
        .iter()
        .filter(|row| reach_tiers(row))
        .filter_map(|row| Some((row.stand_ins[k]?, row.gold >= 0.5)))
        .collect();
    let fit = fit_directed(&pairs, r, lower)
        .map_err(|e| Error::bad_input(format!("{spec}: --gold {}={column}: {e}", r.metric)))?;
    let outside = |s: f64| s < fit.lo || s > fit.hi;
    // The error added, on the labelled rows the judge itself answered.
    let (mut compared, mut band_errors, mut judge_errors) = (0u64, 0u64, 0u64);
    for row in state
        .rows
        .iter()
        .filter(|row| !row.by_band && reach_tiers(row))
    {
        let Some(s) = row.stand_ins[k].filter(|s| outside(*s)) else {
            continue;
        };
        compared += 1;
        let gold = row.gold >= 0.5;
        band_errors += (decides_true(&fit, s, lower) != gold) as u64;
        judge_errors += ((row.value >= 0.5) != gold) as u64;
    }
    let judges = panel_verdict_columns(table, &r.metric);
    let v = volume(
        table,
        &[&r.by],
        g.source_column.as_deref(),
        &judges,
        &[&fit],
    )?;
    let (rows, rows_inside, calls_saved) = (v.rows, v.left, v.saved[0]);
    let band = judge_band(&r.by, &fit);
    Ok(BandReport {
        metric: r.metric.clone(),
        by: r.by.clone(),
        gold_column: column,
        judge_band: band,
        rows,
        rows_inside,
        share_judged: if rows > 0 {
            rows_inside as f64 / rows as f64
        } else {
            0.0
        },
        calls_saved,
        labels_compared: compared,
        band_errors,
        judge_errors,
        error_added: (compared > 0)
            .then(|| (band_errors as f64 - judge_errors as f64) / compared as f64),
        fit,
        lower_is_better: lower,
        labels_reaching: pairs.len() as u64,
        warnings: too_few(&r.by, pairs.len()).into_iter().collect(),
    })
}

/// The `--judge-band` value of a band fitted over score `by`: its range,
/// and where it was fitted at a confidence and a side held, the guarantee
/// it carries (`,max_error=E,confidence=C,sides=S`), so that the runs it
/// is used in can say whether their labelled rows bear it out.
pub(crate) fn judge_band(by: &str, fit: &BandFit) -> String {
    let range = format!("{by}:{}..{}", shown(fit.lo), shown(fit.hi));
    match BandGuarantee::of_fit(fit) {
        Some(g) => format!("{range},{g}"),
        None => range,
    }
}

/// A cut-off as `--judge-band` reads it back: f32 digits, or ±inf.
pub(crate) fn shown(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        // The shortest digits that read back as the same f32.
        format!("{}", v as f32)
    }
}

/// A panel's per-judge verdict columns of `metric` (`<metric>__<judge>`,
/// Boolean; their `_p` companions are Float32): empty for a single judge.
pub(crate) fn panel_verdict_columns(table: &Table, metric: &str) -> Vec<String> {
    let prefix = format!("{metric}__");
    table
        .schema()
        .fields()
        .iter()
        .filter(|f| f.name().starts_with(&prefix) && f.data_type() == &DataType::Boolean)
        .map(|f| f.name().clone())
        .collect()
}

/// What a chain of fitted bands does to a whole result (one band is a chain
/// of one): each row is decided by the first tier whose score lies outside
/// its band; a row with no score at all, or one a rule decided (it never
/// reaches a tier), is not counted.
pub(crate) struct Volume {
    /// Rows with a value of at least one tier's score.
    pub rows: u64,
    /// Of them, rows no tier decides: still judged.
    pub left: u64,
    /// Per tier, the rows it decides.
    pub decided: Vec<u64>,
    /// Per tier, the judge calls made in this result for the rows it
    /// decides (see [`BandReport::calls_saved`]).
    pub saved: Vec<u64>,
}

/// The [`Volume`] of bands `fits` over scores `bys`, in order.
pub(crate) fn volume(
    table: &Table,
    bys: &[&str],
    source: Option<&str>,
    judges: &[String],
    fits: &[&BandFit],
) -> Result<Volume, Error> {
    let mut names: Vec<&str> = bys.to_vec();
    names.extend(source);
    let first_judge = names.len();
    names.extend(judges.iter().map(String::as_str));
    let mut v = Volume {
        rows: 0,
        left: 0,
        decided: vec![0; bys.len()],
        saved: vec![0; bys.len()],
    };
    for batch in table.batches(&names, 64 * 1024)? {
        let batch = batch?;
        let mut values = Vec::with_capacity(bys.len());
        for (k, by) in bys.iter().enumerate() {
            let column = batch.column(k);
            if column.data_type() != &DataType::Float32 {
                return Err(Error::bad_input(format!(
                    "{}: column '{by}' has type {}, not Float32",
                    table.spec(),
                    column.data_type()
                )));
            }
            values.push(column.as_primitive::<Float32Type>());
        }
        // Calls for row i: none unless a judge decided it (`judge`, a
        // panel's `judge:NAME` or `jury`; not a rule, tier or cache); then
        // one per judge whose own verdict the row holds.
        let calls = |i: usize| -> u64 {
            let Some(s) = source.and_then(|_| gold::string_at(batch.column(bys.len()), i)) else {
                return 0;
            };
            match (
                refscore_core::schema::source::is_judge(s),
                judges.is_empty(),
            ) {
                (false, _) => 0,
                (true, true) => 1,
                (true, false) => (first_judge..batch.num_columns())
                    .filter(|&c| batch.column(c).is_valid(i))
                    .count() as u64,
            }
        };
        let by_rule = |i: usize| {
            source.is_some()
                && gold::string_at(batch.column(bys.len()), i)
                    == Some(refscore_core::schema::source::RULE)
        };
        for i in 0..batch.num_rows() {
            if by_rule(i) {
                continue;
            }
            let score = |k: usize| {
                let c = values[k];
                (c.is_valid(i) && c.value(i).is_finite()).then(|| c.value(i) as f64)
            };
            if (0..bys.len()).all(|k| score(k).is_none()) {
                continue;
            }
            v.rows += 1;
            let tier = (0..bys.len())
                .find(|&k| score(k).is_some_and(|s| s < fits[k].lo || s > fits[k].hi));
            match tier {
                Some(k) => {
                    v.decided[k] += 1;
                    v.saved[k] += calls(i);
                }
                None => v.left += 1,
            }
        }
    }
    Ok(v)
}

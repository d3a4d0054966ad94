//! The band kind's fitting hook ([`TierFit`]): `calibrate-band` with one
//! score fits one band (`refscore_report::band`), with several a chain of
//! them (`refscore_report::chain`); this module runs the fit and says it in
//! words, the flags first.

use refscore_core::Error;
use refscore_report::band::{calibrate, BandReport, BandRequest};
use refscore_report::chain::{calibrate_chain, ChainReport};
use serde::Serialize;

use super::fit::{FitRequest, Fitted, TierFit};
use super::{flag, BAND};

/// The band kind's fitter, which [`super::BandKind::fitter`] offers.
pub(super) struct BandFit;

impl TierFit for BandFit {
    fn fit(&self, q: &FitRequest) -> Result<Fitted, Error> {
        let request = BandRequest {
            metric: q.metric.to_string(),
            by: q.by[0].clone(),
            gold: q.gold.map(String::from),
            max_error: q.max_error,
            confidence: q.confidence,
        };
        if q.by.len() == 1 {
            let report = calibrate(q.table, &request)?;
            Ok(Fitted {
                values: vec![report.judge_band.clone()],
                warnings: report.warnings.clone(),
                lines: lines(&report),
                json: json(&report),
            })
        } else {
            let report = calibrate_chain(q.table, &request, q.by)?;
            Ok(Fitted {
                values: report.judge_bands.clone(),
                warnings: report.warnings.clone(),
                lines: chain_lines(&report),
                json: json(&report),
            })
        }
    }
}

/// A fit's report as `--json` writes it.
fn json(report: &impl Serialize) -> String {
    serde_json::to_string_pretty(report).expect("serialisable")
}

/// What each side of a band decides, below LO then above HI: false then
/// true, the other way round where lower is better.
fn decided(lower_is_better: bool) -> (&'static str, &'static str) {
    if lower_is_better {
        ("true", "false")
    } else {
        ("false", "true")
    }
}

/// The chain's `--judge-band` flags, in order, on one line.
fn flags(r: &ChainReport) -> String {
    r.judge_bands
        .iter()
        .map(|b| format!("{} {b}", flag(&BAND)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A fitted chain in words: the flags, then per tier its band, share,
/// each side's error, and the error it adds; then what is left.
fn chain_lines(r: &ChainReport) -> String {
    let mut out = flags(r) + "\n";
    for (k, t) in r.tiers.iter().enumerate() {
        out += &format!(
            "tier {} {}: decides {} rows ({} of {}), {} judge calls saved; fitted on the {} labelled rows the tiers before left\n",
            k + 1,
            t.judge_band,
            t.rows_decided,
            pct(Some(t.share)),
            r.rows,
            t.calls_saved,
            t.labels_reaching
        );
        if let Some(why) = &t.open_because {
            out += &format!("  open: decides nothing ({why})\n");
            continue;
        }
        let (below, above) = decided(t.lower_is_better);
        out += &side_line("  below", t.fit.lo as f32, below, &t.fit.below, r.max_error);
        out += &side_line("  above", t.fit.hi as f32, above, &t.fit.above, r.max_error);
        if t.labels_compared > 0 {
            out += &added_line(
                "  ",
                "tier",
                (t.labels_compared, t.band_errors, t.judge_errors),
                t.error_added,
            );
        }
    }
    out += &format!(
        "rows still judged: {} ({} of {}); judge calls saved at this result's volume: {}\n",
        pct(Some(r.share_judged)),
        r.rows_left,
        r.rows,
        r.calls_saved
    );
    out
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{:.1}%", x * 100.0))
}

/// The error a band (or tier) adds where it replaces the judge: on the
/// `compared` labelled rows the judge answered, how many each got wrong.
fn added_line(
    indent: &str,
    who: &str,
    (compared, band_errors, judge_errors): (u64, u64, u64),
    added: Option<f64>,
) -> String {
    format!(
        "{indent}error added where the {who} replaces the judge ({compared} labelled rows the judge answered here): {who} wrong on {band_errors}, judge on {judge_errors}: {:+.1} points\n",
        added.unwrap_or(0.0) * 100.0
    )
}

/// One side of a band in words: its cut-off, the labelled rows it decides
/// and their error with its interval; at a confidence, the Clopper-Pearson
/// bounds, whether the guarantee held and, for an open side, the labels it
/// needs.
fn side_line(
    name: &str,
    at: f32,
    decided: &str,
    s: &refscore_stats::band::Side,
    max_error: f64,
) -> String {
    let asked = pct(Some(max_error));
    let Some(g) = &s.guarantee else {
        return if s.labels == 0 {
            format!("{name}: open (no cut-off keeps the error within {asked}): decides nothing\n")
        } else {
            format!(
                "{name} {at}: {} labelled rows decided {decided}, {} labelled otherwise: error {} [{}, {}] (asked at most {asked})\n",
                s.labels,
                s.errors,
                pct(s.error),
                pct(s.error_low),
                pct(s.error_high),
            )
        };
    };
    let c = pct(Some(g.confidence));
    if !g.held {
        let mut out = format!(
            "{name}: open (no cut-off's {c} upper bound of its error is within {asked}): decides nothing; guarantee not met\n"
        );
        if let Some(need) = &g.labels_needed {
            out += &format!("{name}: {}\n", needed_words(need, max_error));
        }
        return out;
    }
    format!(
        "{name} {at}: {} labelled rows ({} of those fitted on) decided {decided}, {} labelled otherwise: error {}, Clopper-Pearson [{}, {}] (each end {c} one-sided); upper bound within {asked}: guarantee held\n",
        s.labels,
        pct(s.share),
        s.errors,
        pct(s.error),
        pct(g.error_low),
        pct(g.error_high),
    )
}

/// How many labels an open side needs, in words, saying what the count
/// assumes.
fn needed_words(need: &refscore_stats::band::LabelsNeeded, max_error: f64) -> String {
    match (need.more_labels, need.error, need.at) {
        (Some(more), Some(error), Some(at)) => format!(
            "needs {more} more labels (at the observed error {} of the cut at {}, which would then decide {} labelled rows)",
            pct(Some(error)),
            at as f32,
            need.side_labels
        ),
        _ => format!(
            "needs at least {} labelled rows on this side, none of them wrong (a lower bound at zero errors: no cut's observed error is below {})",
            need.side_labels,
            pct(Some(max_error))
        ),
    }
}

/// The figures in words.
fn lines(r: &BandReport) -> String {
    let f = &r.fit;
    let mut out = format!("{} {}\n", flag(&BAND), r.judge_band);
    let (below, above) = decided(r.lower_is_better);
    out += &side_line("below", f.lo as f32, below, &f.below, f.max_error);
    out += &side_line("above", f.hi as f32, above, &f.above, f.max_error);
    out += &format!(
        "rows still judged: {} ({} of {} with a {} value); judge calls saved at this result's volume: {}\n",
        pct(Some(r.share_judged)),
        r.rows_inside,
        r.rows,
        r.by,
        r.calls_saved
    );
    if r.labels_compared > 0 {
        out += &added_line(
            "",
            "band",
            (r.labels_compared, r.band_errors, r.judge_errors),
            r.error_added,
        );
    }
    out
}

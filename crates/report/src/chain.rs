//! `refscore calibrate-band --by A,B,...`: a chain of bands fitted from a
//! result's labelled rows, one tier per score in the order given. Each tier
//! is fitted on the labelled rows the rules and the tiers before it leave
//! (as the run would hand them on), so that the rows it decides disagree
//! with their labels at most `--max-error` on each side; then the chain is
//! measured on the whole result: each tier's share, the calls it saves, the
//! rows left to the judge.

use refscore_core::metric::Direction;
use refscore_core::Error;
use refscore_read::Table;
use refscore_stats::band::{zero_error_labels, BandFit, Basis, Guarantee, LabelsNeeded};
use serde::Serialize;

use crate::band::{self, BandRequest};

/// One tier of a fitted chain.
#[derive(Debug, Clone, Serialize)]
pub struct TierFit {
    /// The score it reads.
    pub by: String,
    /// Its `--judge-band` value.
    pub judge_band: String,
    /// The fit, measured on the labelled rows that reach this tier.
    #[serde(flatten)]
    pub fit: BandFit,
    /// Whether its score is lower-is-better (below LO decides true).
    pub lower_is_better: bool,
    /// Why the tier decides nothing, where no band could be fitted on the
    /// rows left to it (e.g. their labels are all of one kind).
    pub open_because: Option<String>,
    /// Labelled rows that reach the tier with a value of its score.
    pub labels_reaching: u64,
    /// Rows of the result it decides.
    pub rows_decided: u64,
    /// rows_decided / the chain's rows.
    pub share: f64,
    /// Judge calls made in this result for the rows it decides.
    pub calls_saved: u64,
    /// Labelled rows it decides that the judge answered here.
    pub labels_compared: u64,
    /// Of them, rows the tier decides against their label.
    pub band_errors: u64,
    /// Of them, rows the judge answered against their label.
    pub judge_errors: u64,
    /// (band_errors − judge_errors) / labels_compared.
    pub error_added: Option<f64>,
}

/// A fitted chain and its effect on the result it was fitted on.
#[derive(Debug, Clone, Serialize)]
pub struct ChainReport {
    /// The verdict decided.
    pub metric: String,
    /// The label column.
    pub gold_column: String,
    /// The error asked for on each side of each tier.
    pub max_error: f64,
    /// The confidence each side's upper bound is held at (null: fitted at
    /// the point estimate).
    pub confidence: Option<f64>,
    /// The `--judge-band` values, in the order the run must try them.
    pub judge_bands: Vec<String>,
    /// The tiers, in order.
    pub tiers: Vec<TierFit>,
    /// Rows of the result with a value of at least one tier's score.
    pub rows: u64,
    /// Of them, rows no tier decides: still judged.
    pub rows_left: u64,
    /// rows_left / rows.
    pub share_judged: f64,
    /// Judge calls the chain saves at this result's volume.
    pub calls_saved: u64,
    /// What makes the figures weak (a tier fitted on too few labelled
    /// rows), in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Fits one band per score of `bys`, in order (see the module's text).
pub fn calibrate_chain(
    table: &Table,
    r: &BandRequest,
    bys: &[String],
) -> Result<ChainReport, Error> {
    let spec = table.spec();
    let (column, g) = band::label_columns(table, r)?;
    let ks: Vec<usize> = bys
        .iter()
        .map(|by| band::stand_in(&g, by, spec))
        .collect::<Result<_, _>>()?;
    let state = band::labelled(table, &column, &g, r)?;
    band::some_reach(&state, ks[0], &bys[0], spec, &column)?;
    // The labelled rows still in play: those no rule and no earlier tier
    // decided.
    let mut open: Vec<bool> = state.rows.iter().map(band::reach_tiers).collect();
    let mut tiers = Vec::with_capacity(bys.len());
    let mut warnings = Vec::new();
    for (t, (by, &k)) in bys.iter().zip(&ks).enumerate() {
        let lower = Direction::of(by).lower_is_better();
        let pairs: Vec<(f64, bool)> = state
            .rows
            .iter()
            .zip(&open)
            .filter(|(_, open)| **open)
            .filter_map(|(row, _)| Some((row.stand_ins[k]?, row.gold >= 0.5)))
            .collect();
        warnings.extend(band::too_few(by, pairs.len()));
        let (fit, open_because) = match band::fit_directed(&pairs, r, lower) {
            Ok(fit) => (fit, None),
            // The first tier fails as a single band does; a later one is
            // left open, deciding nothing, and says why.
            Err(e) if t == 0 => {
                return Err(Error::bad_input(format!(
                    "{spec}: --gold {}={column}: --by {by}: {e}",
                    r.metric
                )))
            }
            Err(e) => (open_band(r), Some(e)),
        };
        let outside = |s: f64| s < fit.lo || s > fit.hi;
        let (mut compared, mut band_errors, mut judge_errors) = (0u64, 0u64, 0u64);
        for (row, open) in state.rows.iter().zip(open.iter_mut()) {
            let Some(s) = row.stand_ins[k].filter(|s| *open && outside(*s)) else {
                continue;
            };
            *open = false;
            if row.by_band {
                continue; // decided by a tier in this result: no judge answer to compare
            }
            compared += 1;
            let gold = row.gold >= 0.5;
            band_errors += u64::from(band::decides_true(&fit, s, lower) != gold);
            judge_errors += u64::from((row.value >= 0.5) != gold);
        }
        tiers.push(TierFit {
            by: by.clone(),
            judge_band: band::judge_band(by, &fit),
            labels_reaching: pairs.len() as u64,
            fit,
            lower_is_better: lower,
            open_because,
            rows_decided: 0,
            share: 0.0,
            calls_saved: 0,
            labels_compared: compared,
            band_errors,
            judge_errors,
            error_added: (compared > 0)
                .then(|| (band_errors as f64 - judge_errors as f64) / compared as f64),
        });
    }
    let judges = band::panel_verdict_columns(table, &r.metric);
    let names: Vec<&str> = bys.iter().map(String::as_str).collect();
    let fits: Vec<&BandFit> = tiers.iter().map(|t| &t.fit).collect();
    let v = band::volume(table, &names, g.source_column.as_deref(), &judges, &fits)?;
    let share = |n: u64| {
        if v.rows > 0 {
            n as f64 / v.rows as f64
        } else {
            0.0
        }
    };
    for (k, tier) in tiers.iter_mut().enumerate() {
        tier.rows_decided = v.decided[k];
        tier.share = share(v.decided[k]);
        tier.calls_saved = v.saved[k];
    }
    Ok(ChainReport {
        metric: r.metric.clone(),
        gold_column: column,
        max_error: r.max_error,
        confidence: r.confidence,
        judge_bands: tiers.iter().map(|t| t.judge_band.clone()).collect(),
        rows: v.rows,
        rows_left: v.left,
        share_judged: share(v.left),
        calls_saved: v.saved.iter().sum(),
        tiers,
        warnings,
    })
}

/// A band that decides nothing (both sides open): no labelled row reaches
/// it, so at a confidence neither side holds.
fn open_band(r: &BandRequest) -> BandFit {
    let mut none = refscore_stats::band::side(0, 0);
    none.guarantee = r.confidence.map(|confidence| Guarantee {
        confidence,
        max_error: None,
        error_low: None,
        error_high: None,
        held: false,
        status: None,
        labels_needed: Some(LabelsNeeded {
            basis: Basis::ZeroErrors,
            error: None,
            side_labels: zero_error_labels(r.max_error, confidence),
            more_labels: None,
            at: None,
        }),
    });
    BandFit {
        lo: f64::NEG_INFINITY,
        hi: f64::INFINITY,
        below: none,
        above: none,
        max_error: r.max_error,
        confidence: r.confidence,
    }
}

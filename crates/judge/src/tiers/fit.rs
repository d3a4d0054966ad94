//! A tier kind's fitting hook for `refscore calibrate-band`: given a
//! labelled result, the verdict, the scores and the error (and confidence)
//! to hold, a kind that can be fitted gives its option's values and a
//! report of the fit, in words and as JSON. `calibrate-band` asks each
//! kind of [`super::KINDS`] that offers one ([`super::TierKind::fitter`]),
//! so a new kind's fit needs no change to the command.
//!
//! The hook lives here, beside [`super::TierKind`], rather than in the
//! report crate: a kind's fit reads the result through the report crate's
//! fitting code (`refscore_report::band`, `chain`), so the judge crate
//! depends on the report crate; the report crate does not depend on the
//! judge, and no import circle appears.

use refscore_core::Error;
use refscore_read::Table;

/// What `calibrate-band` asks a kind to fit: its flags, with the result
/// opened.
pub struct FitRequest<'a> {
    /// The labelled result (`RESULT`).
    pub table: &'a Table,
    /// The verdict the tiers decide (`--metric`).
    pub metric: &'a str,
    /// The scores read, in order (`--by`): one tier each.
    pub by: &'a [String],
    /// The label column (`--gold`); None: the one the result's footer
    /// records.
    pub gold: Option<&'a str>,
    /// The largest error allowed on each side of a tier (`--max-error`).
    pub max_error: f64,
    /// The confidence each side's error bound is held at (`--confidence`);
    /// None: a point estimate.
    pub confidence: Option<f64>,
}

/// A kind's fit, ready to show.
pub struct Fitted {
    /// The kind's option values, in order (each follows its flag, as
    /// [`super::flag`] spells it).
    pub values: Vec<String>,
    /// What makes the fit's figures weak (too few labels), for stderr.
    pub warnings: Vec<String>,
    /// The fit in words: the flags, then its figures, one per line.
    pub lines: String,
    /// The fit as JSON (`--json`).
    pub json: String,
}

/// How tiers of one kind are fitted to labelled rows: what
/// [`super::TierKind::fitter`] offers `calibrate-band`.
pub trait TierFit: Sync {
    /// Fits the kind's tiers as `request` asks; the error is the command's
    /// (a missing column, too few labels to fit anything).
    fn fit(&self, request: &FitRequest) -> Result<Fitted, Error>;
}

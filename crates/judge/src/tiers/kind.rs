//! What a kind of tier declares about itself, so that nothing outside
//! `tiers/` names a kind: its name (the `[[judge.tier]]` key and the first
//! part of its `<metric>_source`), its option (flag, config key, Python
//! keyword), the shape of its value, and how a value becomes a tier. The
//! tier then says what it reads, how it checks itself against the run and
//! what it records (see [`super::Tier`]).

use std::sync::Arc;

use refscore_core::metric::{self, MetricSet};
use refscore_core::Error;

use super::{Tier, TierFit};
use crate::options::JudgeArgs;

/// One kind of tier (a band, …): an entry of [`super::KINDS`].
pub trait TierKind: Sync {
    /// Its name: the key of a `[[judge.tier]]` table (`band = "..."`) and
    /// the KIND of the `KIND:SCORE` source its tiers write
    /// (`refscore_core::schema::source::tier`).
    fn name(&self) -> &'static str;
    /// The id of its option in the judge's options: clap's argument id,
    /// the flat config key and Python keyword (`judge_band`; the flag is
    /// `--judge-band`, see [`flag`]).
    fn key(&self) -> &'static str;
    /// Its value's shape, for messages (`METRIC:LO..HI`).
    fn shape(&self) -> &'static str;
    /// A value of that shape, for messages (`cosine:0.3..0.9`).
    fn example(&self) -> &'static str;
    /// Takes its values, in the order given, out of the run's options (the
    /// field of [`JudgeArgs`] its flag fills).
    fn take_specs(&self, args: &mut JudgeArgs) -> Vec<String>;
    /// Reads one value as a tier; the error says why, without the flag's
    /// name (the caller adds it, or the config line).
    fn parse(&self, spec: &str) -> Result<Arc<dyn Tier>, String>;
    /// How `calibrate-band` fits its tiers to labelled rows, where they can
    /// be fitted (see [`TierFit`]); none by default.
    fn fitter(&self) -> Option<&'static dyn TierFit> {
        None
    }
}

/// `kind`'s flag as the command line spells it (`--judge-band`).
pub fn flag(kind: &dyn TierKind) -> String {
    format!("--{}", kind.key().replace('_', "-"))
}

/// The check most tiers make against the run: each score `tier` reads is a
/// lexical, embedding or cross-encoder score (so it is computed before the
/// judge), the run computes it, and the run has a judge metric a tier
/// decides (`decidable`). `spec` is the tier as given.
pub fn check_reads(
    tier: &(impl Tier + ?Sized),
    spec: &str,
    metrics: &MetricSet,
    decidable: bool,
) -> Result<(), Error> {
    let flag = flag(tier.kind());
    let readable =
        |m: &metric::Metric| m.group != metric::Group::Judge && m.kind == metric::Kind::Score;
    for score in tier.reads() {
        let Some(read) = metric::find(score).filter(|m| readable(m)) else {
            let scores: Vec<&str> = metric::BUILTIN
                .iter()
                .filter(|m| readable(m))
                .map(|m| m.name.as_str())
                .collect();
            return Err(Error::config(format!(
                "{flag} {spec}: a tier reads a lexical, embedding or cross-encoder score ({}), not '{score}'",
                scores.join(", "),
            )));
        };
        if !(decidable && metrics.contains(&read)) {
            return Err(Error::config(format!(
                "{flag} {spec} needs the {score} metric and a judge metric a tier decides (meaning_match, or one defined with band = true) in the run",
            )));
        }
    }
    Ok(())
}

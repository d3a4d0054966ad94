//! The cheap decisions taken before any call: an empty output, an output
//! that says exactly what the reference says, and the cosine band.

use crate::columns::Verdict;

/// True when the output gives the reference's answer so plainly that no
/// judge is needed for Meaning Match.
pub(crate) fn same_answer(reference: &str, output: &str) -> bool {
    refscore_lexical::normalize(reference) == refscore_lexical::normalize(output)
}

/// The verdict a rule gives metric `metric` (indexed like [`crate::METRICS`]),
/// if one does: an empty output fails every metric; an output that is the
/// same answer as the reference passes Meaning Match.
pub(crate) fn by_rule(metric: usize, empty: bool, same: bool) -> Option<Verdict> {
    if empty {
        return Some(match metric {
            0 => Verdict::Meaning(false, "the output is empty".into()),
            1 => Verdict::Similarity(0, "the output is empty".into()),
            _ => Verdict::Facts(None),
        });
    }
    (metric == 0 && same).then(|| Verdict::Meaning(true, "normalised exact match".into()))
}

/// The Meaning Match verdict of `--judge-band cosine:LO..HI` for a row whose
/// cosine is `c`: decided by the side when outside the band, else `None`.
pub(crate) fn by_band(c: f32, (lo, hi): (f32, f32)) -> Option<Verdict> {
    if !(c < lo || c > hi) {
        return None; // inside the band, or NaN: the judge decides
    }
    let side = c > hi;
    let why = format!(
        "cosine {c:.3} is {} the band {lo}..{hi}",
        if side { "above" } else { "below" }
    );
    Some(Verdict::Meaning(side, why))
}

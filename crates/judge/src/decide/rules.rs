//! The cheap decisions taken before any call, the first decision step: an
//! empty output, an output that says exactly what the reference says (the
//! tiers after them live in `tiers/`).

use unicode_normalization::UnicodeNormalization;

use crate::definition::Answer;
use crate::metric::JudgeMetric;
use crate::JudgeStage;

use super::{DecisionStep, Outcome, Pending, Row, Source, Step};

/// The rules as a decision step, counted as `decided_by_rule`.
pub(crate) struct ByRule;

impl DecisionStep for ByRule {
    fn decide(&self, stage: &mut JudgeStage, row: &mut Row<'_>, _: &mut Pending) -> Step {
        match by_rule(row.metric, row.answers.empty, row.answers.same) {
            Some(outcome) => {
                stage.counts().decided_by_rule += 1;
                Step::Settled(outcome, Source::Rule)
            }
            None => Step::Pass,
        }
    }
}

/// True when the output gives the reference's answer so plainly that no
/// judge is needed for Meaning Match: equal after a normalisation that only
/// removes what cannot change a meaning (see [`conservative`]). The lexical
/// metrics' SQuAD normalisation drops all punctuation, which turns `2.5`
/// into `25`, `-5` into `5` and `C++` into `c`; good enough for a
/// similarity score, wrong for a rule that replaces the judge.
pub(crate) fn same_answer(reference: &str, output: &str) -> bool {
    let (r, o) = (conservative(reference), conservative(output));
    if !r.is_empty() || !o.is_empty() {
        return r == o;
    }
    // Both are only articles: those are the answer ("A" as a grade).
    let (r, o) = (
        conservative_keep_articles(reference),
        conservative_keep_articles(output),
    );
    !r.is_empty() && r == o
}

/// Quotes, stripped from both ends of an answer.
fn is_quote(c: char) -> bool {
    matches!(
        c,
        '"' | '\'' | '`' | '“' | '”' | '‘' | '’' | '«' | '»' | '„'
    )
}

/// Characters stripped from the end of an answer: sentence-final
/// punctuation and quotes, which close an answer without changing it. (Not
/// from the start: `.5` is not `5`.)
fn is_final(c: char) -> bool {
    is_quote(c) || matches!(c, '.' | '!' | '?' | ',' | ';' | ':' | '。' | '！' | '？')
}

/// NFKC, whole-string lowercase, whitespace collapsed, quotes stripped
/// from both ends and sentence-final punctuation from the end; nothing
/// inside the answer changes.
fn conservative_keep_articles(text: &str) -> String {
    let nfkc: String = text.nfkc().collect();
    let lower = nfkc.to_lowercase();
    let collapsed = lower.split_whitespace().collect::<Vec<_>>().join(" ");
    collapsed
        .trim_start_matches(|c: char| is_quote(c) || c.is_whitespace())
        .trim_end_matches(|c: char| is_final(c) || c.is_whitespace())
        .to_string()
}

/// The words of [`conservative_keep_articles`] without the articles a, an
/// and the.
fn words(text: &str) -> Vec<String> {
    conservative_keep_articles(text)
        .split(' ')
        .filter(|w| !matches!(*w, "a" | "an" | "the") && !w.is_empty())
        .map(String::from)
        .collect()
}

/// The conservative normalisation the Meaning Match rule compares:
/// [`conservative_keep_articles`] with the articles removed.
pub(crate) fn conservative(text: &str) -> String {
    words(text).join(" ")
}

/// The value a rule gives `jm`, if one does: an empty output fails every
/// judge metric (verdict false, the scale's lowest score, a fact ratio of
/// 0); an output that is the same answer as the reference passes where the
/// metric's rules say so.
pub(crate) fn by_rule(jm: &JudgeMetric, empty: bool, same: bool) -> Option<Outcome> {
    if empty {
        let reason = Some("the output is empty".to_string());
        return Some(match jm {
            JudgeMetric::Rubric(r) => match r.answer {
                Answer::Verdict => Outcome::Verdict {
                    verdict: false,
                    p_true: None,
                    reason,
                },
                Answer::Score { min, .. } => Outcome::Score {
                    score: min,
                    expected: None,
                    reason,
                },
            },
            JudgeMetric::FactRatio => Outcome::Facts(None),
        });
    }
    let passes = matches!(jm, JudgeMetric::Rubric(r) if r.same_answer_passes);
    (passes && same).then(|| Outcome::Verdict {
        verdict: true,
        p_true: None,
        reason: Some("normalised exact match".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_fires_only_when_nothing_meaningful_was_removed() {
        for (r, o) in [
            ("2.5", "25"),
            ("-5", "5"),
            ("C#", "C"),
            ("C++", "C"),
            ("10:30", "1030"),
            ("1/2", "12"),
            (".5", "5"),
        ] {
            assert!(!same_answer(r, o), "{r} vs {o} must go to the judge");
            assert!(!same_answer(o, r), "{o} vs {r} must go to the judge");
        }
        for (r, o) in [
            ("Paris", "paris."),
            ("The Eiffel Tower", "eiffel tower"),
            ("  New   York ", "\"new york\""),
            ("2.5", "2.5."),
            ("Ｆｕｌｌ", "full"),
            ("ΟΔΟΣ", "οδος"),
        ] {
            assert!(same_answer(r, o), "{r} vs {o} is the same answer");
        }
        assert!(!same_answer("A", "The"), "articles alone are the answer");
        assert!(same_answer("A", "a."));
        assert!(!same_answer("", ""));
    }
}

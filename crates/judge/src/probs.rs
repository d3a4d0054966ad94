//! Verdicts and scores read from the judge's token probabilities instead of
//! from one sampled answer: P(true) of a Meaning Match verdict and the
//! probability-weighted expected similarity score (G-Eval style).
//!
//! Only the alternatives the server lists for a position are known (the top
//! 20), so every figure is renormalised over the spellings that count as an
//! answer ("true", " True", "yes", …); the mass of other tokens ("To", "The")
//! says nothing about the answer and is left out.

use crate::transport::Token;

/// The verdict a token spells, when it spells one: `true`/`yes` or
/// `false`/`no` in any case, with any spaces, quotes or punctuation around.
pub(crate) fn verdict_word(text: &str) -> Option<bool> {
    match trimmed(text).to_ascii_lowercase().as_str() {
        "true" | "yes" => Some(true),
        "false" | "no" => Some(false),
        _ => None,
    }
}

fn trimmed(text: &str) -> &str {
    text.trim_matches(|c: char| !c.is_alphanumeric())
}

/// P(true) at one position: the listed mass of verdict spellings that mean
/// true over the listed mass of all verdict spellings; `None` when no
/// verdict spelling is listed there.
pub(crate) fn verdict_p(token: &Token) -> Option<f64> {
    let (mut yes, mut all) = (0.0, 0.0);
    for (text, logprob) in &token.alternatives {
        if let Some(v) = verdict_word(text) {
            let p = logprob.exp();
            all += p;
            if v {
                yes += p;
            }
        }
    }
    (all > 0.0).then(|| (yes / all).clamp(0.0, 1.0))
}

/// The score on `min..=max` a token spells, when it spells one.
fn score_word(text: &str, (min, max): (u8, u8)) -> Option<u8> {
    let t = trimmed(text);
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse::<u8>().ok().filter(|s| (min..=max).contains(s))
}

/// The expected score on the scale `min..=max` (at most 10) from the
/// score's first token at `at` and, where the scale reaches 10, for
/// tokenisers that write "10" as "1","0" (Qwen, Llama 2), the next one.
///
/// On such a scale a listed "1" stands for 1 or for the start of 10. When
/// "1" is the token the server generated, the next position tells them
/// apart: its "0" is the share of 10, its non-digits the share of 1 (a "1"
/// followed by another digit is no score). When another score was
/// generated, the next position says nothing about "1", and its mass goes to
/// the end of the scale nearer that score (10 for a generated 6..=10, else
/// 1): a judge's distribution is close to unimodal around its answer.
pub(crate) fn expected_score(tokens: &[Token], at: usize, scale: (u8, u8)) -> Option<f64> {
    let (min, max) = scale;
    debug_assert!(min < max && max <= 10, "scales reach at most 10");
    let first = tokens.get(at)?;
    let generated = score_word(&first.text, scale);
    let p_ten_given_one = if max < 10 {
        0.0
    } else if trimmed(&first.text) == "1" {
        match tokens.get(at + 1) {
            Some(next) => {
                let (mut zero, mut digits) = (0.0, 0.0);
                for (text, logprob) in &next.alternatives {
                    let t = trimmed(text);
                    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
                        digits += logprob.exp();
                        if t == "0" {
                            zero += logprob.exp();
                        }
                    }
                }
                let end = (1.0 - digits).max(0.0);
                if zero + end > 0.0 {
                    zero / (zero + end)
                } else {
                    0.0
                }
            }
            // Nothing generated after the "1": the answer was 1.
            None => 0.0,
        }
    } else if generated.is_some_and(|s| s >= 6) {
        1.0
    } else {
        0.0
    };
    // On a scale reaching 10 a listed "1" splits: its share that starts
    // "10" counts as 10, the rest as 1 where 1 is on the scale (on [5,10]
    // it is off the scale and that share is left out, as any off-scale
    // number is).
    let one_is_score = (min..=max).contains(&1);
    let (mut weighted, mut mass) = (0.0, 0.0);
    for (text, logprob) in &first.alternatives {
        let p = logprob.exp();
        if max == 10 && trimmed(text) == "1" {
            weighted += p * p_ten_given_one * 10.0;
            mass += p * p_ten_given_one;
            if one_is_score {
                weighted += p * (1.0 - p_ten_given_one);
                mass += p * (1.0 - p_ten_given_one);
            }
            continue;
        }
        let Some(score) = score_word(text, scale) else {
            continue;
        };
        weighted += p * f64::from(score);
        mass += p;
    }
    (mass > 0.0).then(|| (weighted / mass).clamp(f64::from(min), f64::from(max)))
}

/// The position of the token holding the first character of the value of
/// `"key":` in a JSON reply, so a verdict written inside a longer JSON
/// answer can be read from its own token's alternatives.
pub(crate) fn value_token(tokens: &[Token], key: &str) -> Option<usize> {
    let mut text = String::new();
    let mut starts = Vec::with_capacity(tokens.len());
    for t in tokens {
        starts.push(text.len());
        text.push_str(&t.text);
    }
    let quoted = format!("\"{key}\"");
    let after_key = text.find(&quoted)? + quoted.len();
    let colon = after_key + text[after_key..].find(':')? + 1;
    let value = colon + text[colon..].find(|c: char| !c.is_whitespace() && c != '"')?;
    starts.iter().rposition(|s| *s <= value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str, alternatives: &[(&str, f64)]) -> Token {
        Token {
            text: text.into(),
            alternatives: alternatives
                .iter()
                .map(|(t, p)| (t.to_string(), p.ln()))
                .collect(),
        }
    }

    #[test]
    fn verdict_probability_pools_spellings_and_ignores_other_tokens() {
        // As llama.cpp lists them: capitalised and lower-case spellings.
        let t = token(
            "false",
            &[
                ("True", 0.48),
                ("False", 0.47),
                ("false", 0.015),
                ("To", 0.011),
                ("true", 0.011),
            ],
        );
        let p = verdict_p(&t).unwrap();
        assert!((p - 0.491 / 0.976).abs() < 1e-9, "{p}");
        assert_eq!(verdict_p(&token("The", &[("The", 0.9), ("To", 0.1)])), None);
        assert_eq!(verdict_word(" \"Yes\","), Some(true));
        assert_eq!(verdict_word("No."), Some(false));
        assert_eq!(verdict_word("Not"), None);
    }

    #[test]
    fn expected_score_weights_the_listed_scores() {
        let t = [token("8", &[("8", 0.6), ("7", 0.3), ("9", 0.1)])];
        let e = expected_score(&t, 0, (0, 10)).unwrap();
        assert!((e - 7.8).abs() < 1e-9, "{e}");
    }

    #[test]
    fn a_split_ten_is_told_from_a_one_by_the_next_token() {
        // "10" written as "1","0": after the "1", 0.75 says "0", 0.25 ends.
        let t = [
            token("1", &[("1", 0.8), ("9", 0.2)]),
            token("0", &[("0", 0.75), ("<|im_end|>", 0.25)]),
        ];
        let e = expected_score(&t, 0, (0, 10)).unwrap();
        // 0.8 * (0.75 * 10 + 0.25 * 1) + 0.2 * 9
        assert!((e - (0.8 * 7.75 + 1.8)).abs() < 1e-9, "{e}");
        // A lone "1" (the reply ended after it) is the score 1.
        let t = [token("1", &[("1", 0.9), ("2", 0.1)])];
        assert!((expected_score(&t, 0, (0, 10)).unwrap() - 1.1).abs() < 1e-9);
        // Generated 9: a listed "1" is taken as the start of 10.
        let t = [token("9", &[("9", 0.5), ("1", 0.5)])];
        assert!((expected_score(&t, 0, (0, 10)).unwrap() - 9.5).abs() < 1e-9);
        // Generated 2: a listed "1" is 1.
        let t = [token("2", &[("2", 0.5), ("1", 0.5)])];
        assert!((expected_score(&t, 0, (0, 10)).unwrap() - 1.5).abs() < 1e-9);
    }

    #[test]
    fn a_split_ten_counts_on_a_scale_that_starts_above_one() {
        // [5,10]: "1","0" with 0.8 on "1" and 0.2 on "9", then a sure "0":
        // the "1" is the start of 10, so 0.8 * 10 + 0.2 * 9.
        let t = [
            token("1", &[("1", 0.8), ("9", 0.2)]),
            token("0", &[("0", 1.0)]),
        ];
        for scale in [(0, 10), (2, 10), (5, 10)] {
            let e = expected_score(&t, 0, scale).unwrap();
            assert!((e - 9.8).abs() < 1e-9, "{scale:?}: {e}");
        }
        // Half of the "1" ends there: on [5,10] that half is the score 1,
        // off the scale, and left out; on [0,10] it counts as 1.
        let t = [
            token("1", &[("1", 0.8), ("9", 0.2)]),
            token("0", &[("0", 0.5), ("<|im_end|>", 0.5)]),
        ];
        let e = expected_score(&t, 0, (5, 10)).unwrap();
        assert!((e - (0.4 * 10.0 + 0.2 * 9.0) / 0.6).abs() < 1e-9, "{e}");
        let e = expected_score(&t, 0, (0, 10)).unwrap();
        assert!((e - (0.4 * 10.0 + 0.4 + 0.2 * 9.0)).abs() < 1e-9, "{e}");
    }

    #[test]
    fn a_scale_below_ten_reads_a_one_as_one() {
        // 1-5: a listed "1" is the score 1 whatever was generated, and
        // numbers off the scale do not count.
        let t = [token("5", &[("5", 0.5), ("1", 0.25), ("7", 0.25)])];
        let e = expected_score(&t, 0, (1, 5)).unwrap();
        assert!((e - (0.5 * 5.0 + 0.25) / 0.75).abs() < 1e-9, "{e}");
        // A "0" is no score on 1-5.
        let t = [token("0", &[("0", 0.9), ("2", 0.1)])];
        assert!((expected_score(&t, 0, (1, 5)).unwrap() - 2.0).abs() < 1e-9);
    }

    #[test]
    fn the_value_of_a_json_key_is_found_across_token_boundaries() {
        let texts = [
            "{\"",
            "me",
            "aning",
            "_match",
            "\":",
            " true",
            ",",
            " \"reason",
        ];
        let tokens: Vec<Token> = texts.iter().map(|t| token(t, &[(t, 1.0)])).collect();
        assert_eq!(value_token(&tokens, "meaning_match"), Some(5));
        let texts = ["{\"score\": ", "8", ",", "\"rationale\": \"x\"}"];
        let tokens: Vec<Token> = texts.iter().map(|t| token(t, &[(t, 1.0)])).collect();
        assert_eq!(value_token(&tokens, "score"), Some(1));
        assert_eq!(value_token(&tokens, "missing"), None);
    }
}

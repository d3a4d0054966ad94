//! NLTK's `word_tokenize` (NLTK 3.10): Punkt's sentences, each split by
//! `NLTKWordTokenizer` (the improved Treebank tokenizer: quotes, punctuation,
//! brackets, dashes and clitics split off by a fixed list of substitutions).
//! FactCG measures its chunks in these tokens, so only their number is used;
//! the substitutions are NLTK's, in NLTK's order, with Python's `\1` as `${1}`.
//!
//! No maintained crate does this (searched 2026-11-28): `punkt` splits
//! sentences only; `rnltk`'s `tokenize_sentence` and `natural`'s
//! `tokenize` drop punctuation (and `rnltk` lowercases), where NLTK keeps
//! each mark as a token and splits clitics; `nltk-porter` is a stemmer. The counts are checked against NLTK on the 53 texts of
//! `tests/fixtures/punkt-english.jsonl`.

use std::sync::OnceLock;

use fancy_regex::Regex;

use super::punkt::{py_space, Punkt};

/// One substitution: the pattern and its replacement.
struct Sub(Regex, &'static str);

fn subs(list: &[(&str, &'static str)]) -> Vec<Sub> {
    list.iter()
        .map(|(p, r)| Sub(Regex::new(p).expect("NLTK's pattern"), r))
        .collect()
}

/// `NLTKWordTokenizer`'s substitutions, in the order `tokenize` applies
/// them; the text gains a space on each side before the ending quotes.
struct Treebank {
    before: Vec<Sub>,
    after: Vec<Sub>,
}

fn treebank() -> &'static Treebank {
    static T: OnceLock<Treebank> = OnceLock::new();
    T.get_or_init(|| Treebank {
        before: subs(&[
            // STARTING_QUOTES
            (r"([«“‘„]|[`]+)", " ${1} "),
            (r#"^""#, "``"),
            (r"(``)", " ${1} "),
            (r#"([ (\[{<])("|'{2})"#, "${1} `` "),
            (r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", "${1} "),
            // PUNCTUATION
            (r#"([^.])(\.)([\])}>"'»”’ ]*+)\s*$"#, "${1} ${2} ${3} "),
            (r"([:,])([^\d])", " ${1} ${2}"),
            (r"([:,])$", " ${1} "),
            (r"\.{2,}", " ${0} "),
            (r"[;@#$%&]", " ${0} "),
            (r"[\x{2012}-\x{2015}]", " ${0} "),
            (r#"([^.])(\.)([\])}>"']*)\s*$"#, "${1} ${2}${3} "),
            (r"[?!]", " ${0} "),
            (r"([^'])' ", "${1} ' "),
            (r"[*]", " ${0} "),
            // PARENS_BRACKETS
            (r"[\]\[(){}<>]", " ${0} "),
            // DOUBLE_DASHES
            (r"--", " -- "),
        ]),
        after: subs(&[
            // ENDING_QUOTES
            (r"([»”’])", " ${1} "),
            (r"''", " '' "),
            (r#"""#, " '' "),
            (r"\s+", " "),
            (r"([^' ])('[sS]|'[mM]|'[dD]|') ", "${1} ${2} "),
            (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", "${1} ${2} "),
            // CONTRACTIONS2
            (r"(?i)\b(can)(not)\b", " ${1} ${2} "),
            (r"(?i)\b(d)('ye)\b", " ${1} ${2} "),
            (r"(?i)\b(gim)(me)\b", " ${1} ${2} "),
            (r"(?i)\b(gon)(na)\b", " ${1} ${2} "),
            (r"(?i)\b(got)(ta)\b", " ${1} ${2} "),
            (r"(?i)\b(lem)(me)\b", " ${1} ${2} "),
            (r"(?i)\b(more)('n)\b", " ${1} ${2} "),
            (r"(?i)\b(wan)(na)(?=\s)", " ${1} ${2} "),
            // CONTRACTIONS3
            (r"(?i) ('t)(is)\b", " ${1} ${2} "),
            (r"(?i) ('t)(was)\b", " ${1} ${2} "),
        ]),
    })
}

fn apply(list: &[Sub], mut text: String) -> String {
    for Sub(re, with) in list {
        text = re.replace_all(&text, *with).into_owned();
    }
    text
}

/// `NLTKWordTokenizer().tokenize(sentence)`.
pub fn treebank_tokens(sentence: &str) -> Vec<String> {
    let t = treebank();
    let text = apply(&t.before, sentence.to_string());
    let text = apply(&t.after, format!(" {text} "));
    text.split(py_space)
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// `len(nltk.word_tokenize(text))`: the tokens of each Punkt sentence.
pub fn word_count(text: &str) -> usize {
    Punkt::english()
        .sentences(text)
        .into_iter()
        .map(|s| treebank_tokens(s).len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nltk_docstring_example() {
        let s = "Good muffins cost $3.88 (roughly 3,36 euros)\nin New York.  Please buy me\ntwo of them.\nThanks.";
        assert_eq!(
            treebank_tokens(s),
            [
                "Good", "muffins", "cost", "$", "3.88", "(", "roughly", "3,36", "euros", ")", "in",
                "New", "York.", "Please", "buy", "me", "two", "of", "them.", "Thanks", "."
            ]
        );
        assert_eq!(
            treebank_tokens("They'll cannot \"quote\" it."),
            ["They", "'ll", "can", "not", "``", "quote", "''", "it", "."]
        );
    }
}

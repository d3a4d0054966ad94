//! Premise chunking as a checker's authors do it: the premise split into
//! sentences (Punkt over the whole text, or per line as MiniCheck does), the
//! sentences packed greedily into chunks of at most `size` units (NLTK word
//! tokens, the model's tokens, or whitespace words), with the packing's edge
//! rules of each author's code; or, without sentence alignment, windows of
//! `size` words that overlap by `overlap`.

use serde::{Deserialize, Serialize};

use super::punkt::{py_strip, Punkt};
use super::words::word_count;

/// How the premise is cut into sentences before packing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sentences {
    /// `nltk.sent_tokenize(text)` (FactCG).
    Punkt,
    /// Each line (`text.split('\n')`) through `sent_tokenize`, a `"\n"`
    /// kept between lines as a sentence of its own (MiniCheck's
    /// `sent_tokenize_with_newlines`).
    PunktLines,
    /// No sentence alignment: windows of words.
    None,
}

/// What a chunk's size counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// `len(nltk.word_tokenize(sentence))` (FactCG).
    NltkWords,
    /// The model's tokens without special tokens, as
    /// `len(tokenizer(sentence, add_special_tokens=False, truncation=True,
    /// max_length=L)["input_ids"])` (MiniCheck): at most the recipe's
    /// length L.
    Tokens,
    /// `len(sentence.split())`: whitespace-separated words.
    Words,
}

/// The packing's edge rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pack {
    /// FactCG's `chunking_src`: a sentence joins the chunk while the sum
    /// stays at most `size`; chunks are joined with `join` and stripped of
    /// newlines at both ends; a first sentence over `size` leaves an empty
    /// chunk before it (scored, as FactCG scores it); the last chunk, kept
    /// when its count is above 0, also has `" \n "` made `"\n"` and
    /// whitespace stripped.
    Factcg,
    /// MiniCheck's `chunks`: a sentence joins while the sum stays at most
    /// `size`; each chunk is its sentences joined with `join`, then `" \n "`
    /// made `"\n"` and whitespace stripped; empty chunks are dropped.
    Minicheck,
    /// Windows of `size` words starting every `size - overlap` words,
    /// joined with `join` (no sentence alignment).
    Window,
}

/// A recipe's chunking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chunking {
    pub sentences: Sentences,
    pub unit: Unit,
    pub size: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub overlap: usize,
    pub join: String,
    pub pack: Pack,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Chunking {
    /// Checks the combination; the error says what is wrong.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.size == 0 {
            return Err("chunk.size must be at least 1".into());
        }
        match (self.pack, self.sentences) {
            (Pack::Window, Sentences::None) => {
                if self.unit != Unit::Words {
                    return Err("chunk.pack \"window\" counts words (unit \"words\")".into());
                }
                if self.overlap >= self.size {
                    return Err("chunk.overlap must be below chunk.size".into());
                }
            }
            (Pack::Window, _) => {
                return Err("chunk.pack \"window\" has no sentence alignment (sentences \"none\")".into())
            }
            (_, Sentences::None) => {
                return Err(
                    "chunk.sentences \"none\" goes with pack \"window\" (sentence packing needs sentences)".into(),
                )
            }
            _ if self.overlap > 0 => {
                return Err("chunk.overlap applies to pack \"window\" only (the authors' sentence packings do not overlap)".into())
            }
            _ => {}
        }
        Ok(())
    }

    /// The chunks of `premise`; `tokens` counts a text's model tokens
    /// (for unit `tokens`). Never empty: a premise that gives no chunk
    /// gives one empty chunk, as MiniCheck's LLM path does (its encoder
    /// path and FactCG's raise on such a premise).
    pub fn chunks(&self, premise: &str, tokens: &dyn Fn(&str) -> usize) -> Vec<String> {
        let count = |s: &str| match self.unit {
            Unit::NltkWords => word_count(s),
            Unit::Tokens => tokens(s),
            Unit::Words => s
                .split(super::punkt::py_space)
                .filter(|w| !w.is_empty())
                .count(),
        };
        let mut out = match self.pack {
            Pack::Window => self.windows(premise),
            Pack::Factcg => self.factcg(&sentences(premise, self.sentences), count),
            Pack::Minicheck => self.minicheck(&sentences(premise, self.sentences), count),
        };
        if out.is_empty() {
            out.push(String::new());
        }
        out
    }

    fn factcg(&self, sentences: &[&str], count: impl Fn(&str) -> usize) -> Vec<String> {
        let mut chunks = Vec::new();
        let mut chunk = String::new();
        let mut size = 0usize;
        for s in sentences {
            let n = count(s);
            if size + n <= self.size {
                chunk = format!("{chunk}{}{s}", self.join)
                    .trim_matches('\n')
                    .to_string();
                size += n;
            } else {
                chunks.push(chunk.trim_matches('\n').to_string());
                chunk = s.to_string();
                size = n;
            }
        }
        if size > 0 {
            chunks.push(py_strip(chunk.replace(" \n ", "\n").trim_matches('\n')).to_string());
        }
        chunks
    }

    fn minicheck(&self, sentences: &[&str], count: impl Fn(&str) -> usize) -> Vec<String> {
        // `doc_sents or ['']`.
        let sentences: Vec<&str> = if sentences.is_empty() {
            vec![""]
        } else {
            sentences.to_vec()
        };
        let mut joined = Vec::new();
        let mut current: Vec<&str> = Vec::new();
        let mut size = 0usize;
        for s in sentences {
            let n = count(s);
            if size + n > self.size {
                joined.push(current.join(&self.join));
                current = vec![s];
                size = n;
            } else {
                current.push(s);
                size += n;
            }
        }
        if !current.is_empty() {
            joined.push(current.join(&self.join));
        }
        joined
            .into_iter()
            .map(|c| py_strip(&c.replace(" \n ", "\n")).to_string())
            .filter(|c| !c.is_empty())
            .collect()
    }

    fn windows(&self, premise: &str) -> Vec<String> {
        let words: Vec<&str> = premise
            .split(super::punkt::py_space)
            .filter(|w| !w.is_empty())
            .collect();
        let step = self.size - self.overlap;
        let mut out = Vec::new();
        let mut start = 0;
        while start < words.len() {
            let end = (start + self.size).min(words.len());
            out.push(words[start..end].join(&self.join));
            if end == words.len() {
                break;
            }
            start += step;
        }
        out
    }
}

/// The premise's sentences as `how` splits it.
fn sentences(text: &str, how: Sentences) -> Vec<&str> {
    let punkt = Punkt::english();
    match how {
        Sentences::Punkt => punkt.sentences(text),
        Sentences::PunktLines => {
            let mut out = Vec::new();
            for (k, block) in text.split('\n').enumerate() {
                if k > 0 {
                    out.push("\n");
                }
                out.extend(punkt.sentences(block));
            }
            out
        }
        Sentences::None => vec![text],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunking(pack: Pack, size: usize) -> Chunking {
        Chunking {
            sentences: if pack == Pack::Factcg {
                Sentences::Punkt
            } else {
                Sentences::PunktLines
            },
            unit: Unit::Words,
            size,
            overlap: 0,
            join: if pack == Pack::Factcg { "\n" } else { " " }.into(),
            pack,
        }
    }

    #[test]
    fn packing_follows_each_authors_edge_rules() {
        let none = |_: &str| 0;
        let text = "One two three. Four five. Six seven eight nine.";
        // FactCG: sentences joined by newlines; a too-long first sentence
        // leaves an empty chunk first.
        assert_eq!(
            chunking(Pack::Factcg, 5).chunks(text, &none),
            ["One two three.\nFour five.", "Six seven eight nine."]
        );
        assert_eq!(
            chunking(Pack::Factcg, 2).chunks(text, &none),
            ["", "One two three.", "Four five.", "Six seven eight nine."]
        );
        // MiniCheck: joined by spaces, empty chunks dropped.
        assert_eq!(
            chunking(Pack::Minicheck, 2).chunks(text, &none),
            ["One two three.", "Four five.", "Six seven eight nine."]
        );
        assert_eq!(
            chunking(Pack::Minicheck, 5).chunks("A b.\nC d e.", &none),
            ["A b.\nC d e."]
        );
        assert_eq!(chunking(Pack::Minicheck, 5).chunks("", &none), [""]);
        let w = Chunking {
            sentences: Sentences::None,
            unit: Unit::Words,
            size: 3,
            overlap: 1,
            join: " ".into(),
            pack: Pack::Window,
        };
        assert_eq!(w.chunks("a b c d e", &none), ["a b c", "c d e"]);
    }
}

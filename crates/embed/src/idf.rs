//! IDF weights over a model's token ids (`--idf`), counted over the
//! references of the whole input before scoring.

use std::collections::HashMap;

use refscore_core::{Error, TextColumn};

use crate::EmbeddingStage;

/// IDF weights over word-pieces, from the references of the whole input.
#[derive(Debug, Clone)]
pub struct Idf {
    rows: u64,
    df: Vec<u32>,
}

impl Idf {
    /// idf(w) = ln((M+1)/(df(w)+1)); unseen pieces get ln(M+1).
    pub(crate) fn weight(&self, id: u32) -> f32 {
        let df = self.df.get(id as usize).copied().unwrap_or(0) as f64;
        ((self.rows as f64 + 1.0) / (df + 1.0)).ln() as f32
    }

    /// Rows counted (M).
    pub fn rows(&self) -> u64 {
        self.rows
    }
}

impl EmbeddingStage {
    /// Computes IDF weights from every non-null reference of the input
    /// (`--idf`); call before scoring.
    pub fn fit_idf(
        &mut self,
        references: impl Iterator<Item = Result<TextColumn, Error>>,
    ) -> Result<&Idf, Error> {
        let mut df = vec![0u32; self.model.vocab_size()];
        let mut rows = 0u64;
        for column in references {
            let column = column?;
            // Each distinct text is tokenised once and counted once per row
            // holding it: a reference repeated over thousands of rows (a
            // dictionary-encoded column) is not tokenised thousands of times.
            let mut counts: HashMap<&str, u32> = HashMap::new();
            for text in (0..column.len()).filter_map(|i| column.get(i)) {
                *counts.entry(text).or_insert(0) += 1;
                rows += 1;
            }
            let (texts, counts): (Vec<&str>, Vec<u32>) = counts.into_iter().unzip();
            for (tokens, count) in self.tokenize(&texts)?.into_iter().zip(counts) {
                let mut ids = tokens.scored().to_vec();
                ids.sort_unstable();
                ids.dedup();
                for id in ids {
                    if let Some(c) = df.get_mut(id as usize) {
                        *c += count;
                    }
                }
            }
        }
        Ok(self.idf.insert(Idf { rows, df }))
    }

    /// The IDF weights, when fitted.
    pub fn idf(&self) -> Option<&Idf> {
        self.idf.as_ref()
    }
}

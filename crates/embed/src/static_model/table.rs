//! A static model's vectors, read once from its safetensors file and
//! checked against its tokenizer: one row per token id, with model2vec's
//! `mapping` and per-token `weights` folded in, as both libraries average
//! them; and the same rows at unit length, which BERTScore matches.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use refscore_core::Error;

use super::StaticLayout;

/// The vectors of a static model, one row per token id.
pub(crate) struct Table {
    /// `ids × width` rows as the libraries average them (the embedding row
    /// the id maps to, times the id's weight).
    pub(crate) rows: Vec<f32>,
    /// The same rows, each scaled to unit length (a zero row stays zero).
    pub(crate) unit: Vec<f32>,
    /// Which ids' rows are all zeros (they match nothing, themselves
    /// included).
    zero: Vec<bool>,
    /// Width of each row.
    pub(crate) width: usize,
    /// Whether the file stores half-precision vectors: the libraries then
    /// return the mean rounded to half precision.
    pub(crate) half: bool,
    /// Whether the folder had per-token weights or a mapping.
    pub(crate) weighted: bool,
    pub(crate) mapped: bool,
}

impl Table {
    /// Reads the table of `layout` for a tokenizer of `vocab` ids.
    pub(crate) fn load(layout: &StaticLayout, vocab: usize) -> Result<Table, Error> {
        let path = &layout.weights;
        let tensors = candle_core::safetensors::load(path, &Device::Cpu)
            .map_err(|e| bad(path, &e.to_string()))?;
        let table = tensors
            .get(layout.table)
            .ok_or_else(|| bad(path, &format!("no tensor '{}'", layout.table)))?;
        let half = matches!(table.dtype(), DType::F16 | DType::BF16);
        if !matches!(
            table.dtype(),
            DType::F16 | DType::BF16 | DType::F32 | DType::F64
        ) {
            return Err(bad(
                path,
                &format!(
                    "tensor '{}' holds {:?} values; refscore reads float16, bfloat16, float32 and float64 tables",
                    layout.table,
                    table.dtype()
                ),
            ));
        }
        let (rows, width) = (layout.rows, layout.width);
        let stored = floats(table, path, layout.table)?;
        let mapping = match tensors.get("mapping") {
            Some(t) => Some(indexes(t, path, rows, vocab)?),
            None => None,
        };
        let weights = match tensors.get("weights") {
            Some(t) => {
                let w = floats(t, path, "weights")?;
                if w.len() != vocab {
                    return Err(bad(
                        path,
                        &format!(
                            "tensor 'weights' has {} values for a vocabulary of {vocab} tokens",
                            w.len()
                        ),
                    ));
                }
                Some(w)
            }
            None => None,
        };
        if mapping.is_none() && rows < vocab {
            return Err(bad(
                path,
                &format!(
                    "the tokenizer has {vocab} tokens but tensor '{}' only {rows} rows (and no 'mapping')",
                    layout.table
                ),
            ));
        }
        let mut folded = vec![0f32; vocab * width];
        for (id, row) in folded.chunks_exact_mut(width).enumerate() {
            let from = mapping.as_ref().map_or(id, |m| m[id]);
            row.copy_from_slice(&stored[from * width..(from + 1) * width]);
            if let Some(w) = &weights {
                row.iter_mut().for_each(|v| *v *= w[id]);
            }
        }
        let mut unit = folded.clone();
        let mut zero = vec![false; vocab];
        for (row, zero) in unit.chunks_exact_mut(width).zip(&mut zero) {
            let norm = row
                .iter()
                .map(|&v| (v as f64) * (v as f64))
                .sum::<f64>()
                .sqrt();
            if norm > 0.0 {
                row.iter_mut().for_each(|v| *v = (*v as f64 / norm) as f32);
            } else {
                *zero = true;
            }
        }
        Ok(Table {
            rows: folded,
            unit,
            zero,
            width,
            half,
            weighted: weights.is_some(),
            mapped: mapping.is_some(),
        })
    }

    /// The row of `id` as averaged.
    pub(crate) fn row(&self, id: u32) -> &[f32] {
        let at = id as usize * self.width;
        &self.rows[at..at + self.width]
    }

    /// Whether the row of `id` is all zeros (its unit row too).
    pub(crate) fn is_zero(&self, id: u32) -> bool {
        self.zero[id as usize]
    }

    /// The unit-length row of `id`.
    pub(crate) fn unit_row(&self, id: u32) -> &[f32] {
        let at = id as usize * self.width;
        &self.unit[at..at + self.width]
    }
}

fn bad(path: &Path, why: &str) -> Error {
    Error::config(format!("{}: {why}", path.display()))
}

/// A tensor's values as f32, in row-major order.
fn floats(t: &Tensor, path: &Path, name: &str) -> Result<Vec<f32>, Error> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(|e| bad(path, &format!("tensor '{name}': {e}")))
}

/// model2vec's `mapping`: for each token id, the table row it uses.
fn indexes(t: &Tensor, path: &Path, rows: usize, vocab: usize) -> Result<Vec<usize>, Error> {
    let values = t
        .to_dtype(DType::I64)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<i64>())
        .map_err(|e| bad(path, &format!("tensor 'mapping': {e}")))?;
    if values.len() != vocab {
        return Err(bad(
            path,
            &format!(
                "tensor 'mapping' has {} entries for a vocabulary of {vocab} tokens",
                values.len()
            ),
        ));
    }
    values
        .iter()
        .enumerate()
        .map(|(id, &v)| {
            usize::try_from(v).ok().filter(|&v| v < rows).ok_or_else(|| {
                bad(
                    path,
                    &format!("tensor 'mapping' sends token {id} to row {v}; the table has {rows} rows"),
                )
            })
        })
        .collect()
}

//! The sentence-transformers modules after the Pooling (Dense layers and
//! Normalize), loaded and applied to each pooled vector: distiluse's
//! 768→512 Dense with Tanh, EmbeddingGemma's two Identity Dense layers.
//! Without them a folder's cosine would compare the wrong vectors. One
//! matrix-vector product per text and module, next to a whole forward pass:
//! plain loops are enough.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use refscore_core::Error;

use crate::math::{dot, normalize};
use crate::model::{Activation, AfterPooling, DenseFiles, ModelFiles};

/// One module after the Pooling, ready to apply.
enum Step {
    Dense {
        /// `outputs × inputs`, row-major (torch's `Linear.weight`).
        weight: Vec<f32>,
        bias: Option<Vec<f32>>,
        inputs: usize,
        activation: Activation,
    },
    Normalize,
    /// The first N values, as sentence-transformers' `truncate_dim` cuts
    /// the embedding `encode` returns (a Matryoshka model's shorter vector).
    Truncate(usize),
}

/// What turns a pooled vector into the folder's sentence embedding.
/// Exists so that cosine compares the vectors sentence-transformers'
/// `encode` returns, whatever modules follow the pooling.
pub(crate) struct SentenceHead {
    steps: Vec<Step>,
    width: usize,
}

impl SentenceHead {
    /// Loads the Dense weights `files` lists, checking each module's shape
    /// against the width before it (`hidden` for the first).
    pub(crate) fn load(files: &ModelFiles, hidden: usize) -> Result<SentenceHead, Error> {
        let mut width = hidden;
        let mut steps = Vec::with_capacity(files.after_pooling.len());
        for module in &files.after_pooling {
            steps.push(match module {
                AfterPooling::Normalize => Step::Normalize,
                AfterPooling::Dense(d) => {
                    let step = load_dense(&files.dir, d, width)?;
                    width = d.outputs;
                    step
                }
            });
        }
        Ok(SentenceHead { steps, width })
    }

    /// Cuts the sentence embedding to its first `dims` values after every
    /// module (`--truncate-dim`). The error names the width there is.
    pub(crate) fn truncate(&mut self, dims: usize) -> Result<(), Error> {
        if dims == 0 || dims > self.width {
            return Err(Error::usage(format!(
                "--truncate-dim {dims}: expected 1 to {}, the model's sentence embedding width",
                self.width
            )));
        }
        if dims < self.width {
            self.steps.push(Step::Truncate(dims));
            self.width = dims;
        }
        Ok(())
    }

    /// The width of the sentence embedding.
    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// The pooled vector through every module, in order.
    pub(crate) fn apply(&self, pooled: Vec<f32>) -> Vec<f32> {
        self.steps.iter().fold(pooled, |x, step| match step {
            Step::Normalize => {
                let mut x = x;
                normalize(&mut x);
                x
            }
            Step::Truncate(n) => {
                let mut x = x;
                x.truncate(*n);
                x
            }
            Step::Dense {
                weight,
                bias,
                inputs,
                activation,
            } => weight
                .chunks_exact(*inputs)
                .enumerate()
                .map(|(k, row)| {
                    let y = dot(row, &x) + bias.as_ref().map_or(0.0, |b| b[k]);
                    activate(*activation, y)
                })
                .collect(),
        })
    }
}

fn activate(a: Activation, y: f32) -> f32 {
    match a {
        Activation::Identity => y,
        Activation::Tanh => y.tanh(),
        Activation::Relu => y.max(0.0),
        Activation::Gelu => crate::kernels::gelu(y),
        Activation::Sigmoid => 1.0 / (1.0 + (-y).exp()),
    }
}

/// A Dense module's weights, checked against its config and the width it
/// is given.
fn load_dense(dir: &Path, d: &DenseFiles, width: usize) -> Result<Step, Error> {
    let path = dir.join(&d.weights);
    let bad = |why: String| Error::config(format!("{}: {why}", path.display()));
    if d.inputs != width {
        return Err(Error::config(format!(
            "{}: in_features is {}, but the vector before it has {width} values",
            dir.join(&d.config).display(),
            d.inputs
        )));
    }
    let mut tensors: HashMap<String, Tensor> = if d.weights.extension().is_some_and(|e| e == "bin")
    {
        candle_core::pickle::read_all(&path)
            .map_err(|e| bad(e.to_string()))?
            .into_iter()
            .collect()
    } else {
        candle_core::safetensors::load(&path, &Device::Cpu).map_err(|e| bad(e.to_string()))?
    };
    let mut take = |name: &str, shape: &[usize]| -> Result<Vec<f32>, Error> {
        let t = tensors
            .remove(name)
            .ok_or_else(|| bad(format!("no tensor '{name}'")))?;
        if t.dims() != shape {
            return Err(bad(format!(
                "'{name}' has shape {:?}, the config says {shape:?}",
                t.dims()
            )));
        }
        t.to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1())
            .map_err(|e| bad(e.to_string()))
    };
    let weight = take("linear.weight", &[d.outputs, d.inputs])?;
    let bias = if d.bias {
        Some(take("linear.bias", &[d.outputs])?)
    } else {
        None
    };
    Ok(Step::Dense {
        weight,
        bias,
        inputs: d.inputs,
        activation: d.activation,
    })
}

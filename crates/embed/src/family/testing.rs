//! Test helpers for the families: seeded random weights built in memory,
//! and the checks every family's model must pass.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use super::transformer::LayerNames;
use super::{EncoderModel, Loader};
use crate::precision::Precision;

/// A tiny random model of a family, built in memory: 2 layers, hidden 32,
/// 4 heads, feed-forward 64, a 50-token vocabulary.
pub(crate) struct Tiny {
    /// Where the encoder's weights sit (`""`, `"roberta."`).
    pub prefix: &'static str,
    /// Where the layers sit under the prefix (`encoder.layer`).
    pub layers: &'static str,
    pub names: LayerNames,
    pub positions: usize,
    /// Token-type rows, where the family has them.
    pub types: Option<usize>,
    /// The family's own config keys, as JSON members (`"model_type": ...`).
    pub config: &'static str,
    /// Whether `config` adds to BERT's size keys (`hidden_size`…), or
    /// names the sizes itself under the family's own keys.
    pub shared_config: bool,
    /// The family's own tensors beyond the shared ones, under the prefix.
    pub extra: &'static [(&'static str, &'static [usize])],
    pub seed: u64,
}

impl Tiny {
    /// The model through the family's loader, with its products in `precision`.
    pub(crate) fn load(&self, loader: Loader, precision: Precision) -> Box<dyn EncoderModel> {
        let config = if self.shared_config {
            format!(
                r#"{{"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
                    "max_position_embeddings": {}, {}}}"#,
                self.positions, self.config
            )
        } else {
            format!("{{{}}}", self.config)
        };
        let mut w = Weights::new(self.seed);
        let p = self.prefix;
        w.embeddings(
            &format!("{p}embeddings."),
            50,
            self.positions,
            self.types,
            32,
        );
        for l in 0..2 {
            w.layer(&format!("{p}{}.{l}.", self.layers), &self.names, 32, 64);
        }
        for (name, shape) in self.extra {
            w.add(&format!("{p}{name}"), shape, 0.0);
        }
        let vb = VarBuilder::from_tensors(w.into_tensors(), DType::F32, &Device::Cpu);
        loader(&config, vb, precision).unwrap()
    }

    /// The checks every family passes: [`packed_matches_padded`] and
    /// [`reduced_precisions_near_fp32`].
    pub(crate) fn check(&self, loader: Loader) {
        packed_matches_padded(self.load(loader, Precision::Fp32).as_ref());
        reduced_precisions_near_fp32(|p| self.load(loader, p));
    }
}

/// Seeded random weights by name, so every test run sees the same model.
struct Weights {
    state: u64,
    tensors: HashMap<String, Tensor>,
}

impl Weights {
    fn new(seed: u64) -> Weights {
        Weights {
            state: seed,
            tensors: HashMap::new(),
        }
    }

    /// Adds a tensor of values uniform in `centre ± 0.5`.
    fn add(&mut self, name: &str, shape: &[usize], centre: f32) {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|_| {
                self.state = self
                    .state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (self.state >> 40) as f32 / (1u64 << 24) as f32 - 0.5 + centre
            })
            .collect();
        let t = Tensor::from_vec(values, shape, &Device::Cpu).unwrap();
        self.tensors.insert(name.to_string(), t);
    }

    /// Word, position, optional token-type embeddings and their norm.
    fn embeddings(
        &mut self,
        p: &str,
        vocab: usize,
        positions: usize,
        types: Option<usize>,
        h: usize,
    ) {
        self.add(&format!("{p}word_embeddings.weight"), &[vocab, h], 0.0);
        self.add(
            &format!("{p}position_embeddings.weight"),
            &[positions, h],
            0.0,
        );
        if let Some(types) = types {
            self.add(
                &format!("{p}token_type_embeddings.weight"),
                &[types, h],
                0.0,
            );
        }
        self.add(&format!("{p}LayerNorm.weight"), &[h], 1.0);
        self.add(&format!("{p}LayerNorm.bias"), &[h], 0.0);
    }

    /// One layer's weights under the family's names.
    fn layer(&mut self, p: &str, names: &LayerNames, h: usize, inner: usize) {
        for m in [names.query, names.key, names.value, names.attn_out] {
            self.add(&format!("{p}{m}.weight"), &[h, h], 0.0);
            self.add(&format!("{p}{m}.bias"), &[h], 0.0);
        }
        self.add(&format!("{p}{}.weight", names.ff_in), &[inner, h], 0.0);
        self.add(&format!("{p}{}.bias", names.ff_in), &[inner], 0.0);
        self.add(&format!("{p}{}.weight", names.ff_out), &[h, inner], 0.0);
        self.add(&format!("{p}{}.bias", names.ff_out), &[h], 0.0);
        for norm in [names.attn_norm, names.ff_norm] {
            self.add(&format!("{p}{norm}.weight"), &[h], 1.0);
            self.add(&format!("{p}{norm}.bias"), &[h], 0.0);
        }
    }

    fn into_tensors(self) -> HashMap<String, Tensor> {
        self.tensors
    }
}

fn flat(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

/// Sequences of mixed lengths over a 50-token vocabulary.
fn sequences() -> Vec<Vec<u32>> {
    vec![
        (2..=24).collect(),
        vec![7, 3, 9],
        (5..22).rev().collect(),
        vec![42],
    ]
}

/// The fused packed CPU path and the plain-Candle padded path (what other
/// devices run) compute the same function, at every layer: for single texts
/// and for pairs (the second text from each sequence's middle on).
fn packed_matches_padded(model: &dyn EncoderModel) {
    assert!(model.packs());
    let seqs = sequences();
    let taps: Vec<usize> = (0..=model.layers()).collect();
    let lengths: Vec<usize> = seqs.iter().map(Vec::len).collect();
    let halves: Vec<usize> = lengths.iter().map(|l| l / 2).collect();
    let t = *lengths.iter().max().unwrap();
    let packed_ids: Vec<u32> = seqs.iter().flatten().copied().collect();
    let mut padded_ids = vec![1u32; seqs.len() * t];
    for (k, s) in seqs.iter().enumerate() {
        padded_ids[k * t..k * t + s.len()].copy_from_slice(s);
    }
    let ids = Tensor::from_vec(padded_ids, (seqs.len(), t), &Device::Cpu).unwrap();
    for second in [None, Some(halves.as_slice())] {
        let packed = model
            .forward_packed(&packed_ids, &lengths, second, &taps)
            .unwrap();
        let padded = model.forward_padded(&ids, &lengths, second, &taps).unwrap();
        assert_eq!((packed.len(), padded.len()), (taps.len(), taps.len()));
        let rows: usize = lengths.iter().sum();
        for (tap, (packed, padded)) in packed.iter().zip(&padded).enumerate() {
            // Both leave the padding out: the same rows, in the same order.
            assert_eq!(padded.dims(), &[rows, model.hidden()], "layer {tap}");
            let worst = flat(packed)
                .iter()
                .zip(&flat(padded))
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 1e-4,
                "layer {tap}, pairs {}: worst difference {worst}",
                second.is_some()
            );
        }
    }
}

/// bf16 and int8 run the same model through the same packed path, off fp32
/// by a rounding-sized amount (and not by nothing: the products really
/// changed).
fn reduced_precisions_near_fp32(load: impl Fn(Precision) -> Box<dyn EncoderModel>) {
    let ids: Vec<u32> = (1..=23).chain([7, 3, 9]).collect();
    let lengths = [23, 3];
    let run = |m: &dyn EncoderModel| -> Vec<f32> {
        let out = m
            .forward_packed(&ids, &lengths, None, &[m.layers()])
            .unwrap();
        flat(&out[0])
    };
    let reference = run(load(Precision::Fp32).as_ref());
    for (precision, bound) in [(Precision::Bf16, 0.1f32), (Precision::Int8, 0.3)] {
        let got = run(load(precision).as_ref());
        let worst = got
            .iter()
            .zip(&reference)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("{precision:?}: worst {worst}");
        assert!(worst > 0.0 && worst < bound, "{precision:?}: worst {worst}");
    }
}

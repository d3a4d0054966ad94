//! What the families that run as plain Candle operations on padded batches
//! share (DeBERTa, GTE/NomicBERT, ModernBERT, Qwen3, Gemma 3): the argument
//! checks, loading a linear map or a norm, rotary tables, grouped-query
//! attention, the padding and window masks, and the linear maps in the
//! run's precision.

use candle_core::{Device, Module, Tensor};
use candle_nn::{Linear, VarBuilder};

use super::accelerator::Affine;
use super::ops::{Attention, Glu};
use super::EncoderModel;
use crate::kernels::AttentionShape;
pub(super) use crate::kernels::GateActivation;
use crate::precision::{Precision, Projection};

type Result<T> = candle_core::Result<T>;

/// Refuses a batch longer than the model's positions, or taps out of
/// order or past the last layer.
pub(super) fn check(t: usize, max_tokens: usize, taps: &[usize], layers: usize) -> Result<()> {
    if t > max_tokens {
        candle_core::bail!(
            "a sequence of {t} tokens is longer than the model's {max_tokens} positions"
        );
    }
    if taps.windows(2).any(|w| w[0] >= w[1]) || taps.last() > Some(&layers) {
        candle_core::bail!("layers {taps:?}: expected ascending, at most {layers}");
    }
    Ok(())
}

/// A token-type table, for the families that add one to every token's
/// embedding: row 0 to a single text, and to a pair's second text the row
/// its tokenizer gives it (1 in BERT's template), as transformers adds
/// `token_type_embeddings(token_type_ids)`.
pub(super) struct TokenTypes {
    table: candle_nn::Embedding,
    first: Tensor,
}

impl TokenTypes {
    /// `rows` rows of `width` under `token_type_embeddings.weight`; none
    /// when `rows` is 0.
    pub(super) fn load(vb: &VarBuilder, rows: usize, width: usize) -> Result<Option<TokenTypes>> {
        if rows == 0 {
            return Ok(None);
        }
        let table = vb.get((rows, width), "token_type_embeddings.weight")?;
        Ok(Some(TokenTypes {
            first: table.get(0)?,
            table: candle_nn::Embedding::new(table, width),
        }))
    }

    /// `x` `[b, t, width]` with each token's type row added: `types`
    /// `[b, t]` when a pair's second text is in the batch, else row 0.
    pub(super) fn add(&self, x: &Tensor, types: Option<&Tensor>) -> Result<Tensor> {
        match types {
            Some(types) => x + self.table.forward(types)?,
            None => x.broadcast_add(&self.first),
        }
    }
}

/// Each token's type `[b, t]` in a padded batch: 1 from a sequence's
/// `second` entry (where its second text starts) to its end, 0 before it
/// and on padding.
fn segment_ids(lengths: &[usize], second: &[usize], t: usize, device: &Device) -> Result<Tensor> {
    let ids: Vec<u32> = lengths
        .iter()
        .zip(second)
        .flat_map(|(&len, &from)| (0..t).map(move |k| u32::from(k >= from && k < len)))
        .collect();
    Tensor::from_vec(ids, (lengths.len(), t), device)
}

/// A linear map `inp → out`, with its bias when `bias`.
pub(super) fn linear(vb: VarBuilder, inp: usize, out: usize, bias: bool) -> Result<Linear> {
    let b = if bias {
        Some(vb.get(out, "bias")?)
    } else {
        None
    };
    Ok(Linear::new(vb.get((out, inp), "weight")?, b))
}

/// One of a layer's linear maps in the run's `--precision`: Candle's own
/// product in fp32 (the reference numbers, unchanged), the bf16 or int8
/// products of [`crate::precision`] on the CPU, a half-precision product
/// (tensor cores, f32 accumulation) on an accelerator; the bias added in
/// f32. Exists so that every padded family runs its per-token products in
/// the precision asked for through one type, as the BERT-shaped body does.
pub(super) enum Dense {
    Fp32(Affine),
    Reduced {
        weight: Projection,
        bias: Option<Tensor>,
    },
    /// On an accelerator: the map with its weight and bias in a half
    /// format (the bias folded into the product, as in fp32); the input is
    /// rounded to it at the product and the output widened back to f32.
    Half(Affine),
}

impl Dense {
    /// `linear` (loaded, stacked or scaled as the family needs) prepared
    /// for `precision` on the device it lives on.
    pub(super) fn new(linear: Linear, precision: Precision) -> Result<Dense> {
        if precision == Precision::Fp32 {
            return Ok(Dense::Fp32(Affine::new(linear)?));
        }
        let device = linear.weight().device().clone();
        let dtype = precision.device_dtype(&device)?;
        if !device.is_cpu() {
            return Ok(Dense::Half(Affine::new(in_dtype(&linear, dtype)?)?));
        }
        Ok(Dense::Reduced {
            weight: Projection::new(linear.weight(), precision)?,
            bias: linear.bias().cloned(),
        })
    }

    /// [`linear`] then [`Dense::new`].
    pub(super) fn load(
        vb: VarBuilder,
        inp: usize,
        out: usize,
        bias: bool,
        precision: Precision,
    ) -> Result<Dense> {
        Dense::new(linear(vb, inp, out, bias)?, precision)
    }
}

impl Module for Dense {
    /// `x · weightᵀ + bias` over the last dimension of `x`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Dense::Fp32(linear) => linear.forward(x),
            Dense::Half(linear) => linear
                .forward(&x.to_dtype(linear.linear().weight().dtype())?)?
                .to_dtype(x.dtype()),
            Dense::Reduced { weight, bias } => {
                let mut dims = x.dims().to_vec();
                let inp = dims.pop().unwrap_or(1);
                let rows = dims.iter().product::<usize>();
                let y = weight.apply(&x.reshape((rows, inp))?)?;
                let y = match bias {
                    Some(b) => y.broadcast_add(b)?,
                    None => y,
                };
                dims.push(y.dim(1)?);
                y.reshape(dims)
            }
        }
    }
}

/// `linear` with its weight and bias in `dtype`.
pub(super) fn in_dtype(linear: &Linear, dtype: candle_core::DType) -> Result<Linear> {
    Ok(Linear::new(
        linear.weight().to_dtype(dtype)?,
        linear.bias().map(|b| b.to_dtype(dtype)).transpose()?,
    ))
}

/// A gated feed-forward's middle: act(one half of `x`'s last dimension) ·
/// the other half (the activated half first when `act_first`). One fused
/// pass on the CPU ([`super::ops::Glu`]); Candle's operations on other
/// devices.
pub(super) fn gated(x: &Tensor, act: GateActivation, act_first: bool) -> Result<Tensor> {
    let inner = x.dim(candle_core::D::Minus1)? / 2;
    if x.device().is_cpu() {
        return x.contiguous()?.apply_op1_no_bwd(&Glu {
            inner,
            act,
            act_first,
        });
    }
    let last = x.rank() - 1;
    let (gate, other) = if act_first { (0, inner) } else { (inner, 0) };
    let gate = x.narrow(last, gate, inner)?;
    let gate = match act {
        GateActivation::GeluErf => gate.gelu_erf()?,
        GateActivation::GeluTanh => gate.gelu()?,
        GateActivation::Silu => candle_nn::ops::silu(&gate)?,
    };
    gate * x.narrow(last, other, inner)?
}

/// A layer norm over the last dimension.
pub(super) struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

/// A layer norm's weight and bias, under their names or the older `gamma`
/// and `beta` (which transformers renames when it loads a checkpoint, and
/// writes back for DeBERTa when it saves one).
pub(super) fn norm_params(vb: &VarBuilder, size: usize) -> Result<(Tensor, Tensor)> {
    if !vb.contains_tensor("weight") && vb.contains_tensor("gamma") {
        return Ok((vb.get(size, "gamma")?, vb.get(size, "beta")?));
    }
    Ok((vb.get(size, "weight")?, vb.get(size, "bias")?))
}

impl LayerNorm {
    pub(super) fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<LayerNorm> {
        let (weight, bias) = norm_params(&vb, size)?;
        Ok(LayerNorm {
            weight,
            bias,
            eps: eps as f32,
        })
    }

    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::layer_norm(&x.contiguous()?, &self.weight, &self.bias, self.eps)
    }
}

/// What an additive mask adds to a score a query must not see. Infinite,
/// so that softmax's exponential of it is 0 at once (a large finite value
/// takes libm's underflow path, which sets errno, for every masked
/// score); the masks leave every query at least one key ([`visible`]), so
/// no row is all infinite.
pub(super) const MASKED: f32 = f32::NEG_INFINITY;

/// Whether key `j` is one of a text's `len` tokens, or, for a text with
/// none, the first slot, so that every query row sees a key. Padding rows
/// are dropped after attention ([`Rows::unpad`]), so what they see does
/// not change a real token's state.
pub(super) fn visible(j: usize, len: usize) -> bool {
    j < len.max(1)
}

/// The additive key mask of a padded batch, `[b, 1, 1, t]`: 0 for a
/// text's tokens, [`MASKED`] past its end.
pub(super) fn key_mask(lengths: &[usize], t: usize, device: &Device) -> Result<Tensor> {
    let mask: Vec<f32> = lengths
        .iter()
        .flat_map(|&l| (0..t).map(move |k| if visible(k, l) { 0.0 } else { MASKED }))
        .collect();
    Tensor::from_vec(mask, (lengths.len(), 1, 1, t), device)
}

/// Where a padded batch's real tokens sit. Attention needs each text's
/// tokens side by side (`[b, t, w]`, padded to the longest); every other
/// step works token by token, so it runs on the packed rows
/// (`[Σ lengths, w]`) and no product, norm or activation is spent on
/// padding. Exists to move states between the two layouts in one gather.
pub(super) struct Rows {
    b: usize,
    t: usize,
    /// Whether every text fills the batch: the layouts then differ in
    /// shape only.
    full: bool,
    /// For each padded slot, the packed row it copies (a padding slot
    /// copies a real token of its text: finite, and masked or dropped).
    pad: Tensor,
    /// For each packed row, its padded slot.
    unpad: Tensor,
}

impl Rows {
    /// The layouts of texts of `lengths` (each at most `t`, not all 0).
    pub(super) fn new(lengths: &[usize], t: usize, device: &Device) -> Result<Rows> {
        let n: usize = lengths.iter().sum();
        if n == 0 || lengths.iter().any(|&l| l > t) {
            candle_core::bail!("texts of lengths {lengths:?} in a batch {t} tokens wide");
        }
        let mut pad = Vec::with_capacity(lengths.len() * t);
        let mut unpad = Vec::with_capacity(n);
        let mut start = 0;
        for (row, &len) in lengths.iter().enumerate() {
            for k in 0..t {
                pad.push((start + k.min(len.saturating_sub(1))).min(n - 1) as u32);
            }
            unpad.extend((row * t..row * t + len).map(|slot| slot as u32));
            start += len;
        }
        Ok(Rows {
            b: lengths.len(),
            t,
            full: n == lengths.len() * t,
            pad: Tensor::from_vec(pad, lengths.len() * t, device)?,
            unpad: Tensor::from_vec(unpad, n, device)?,
        })
    }

    /// Packed rows `[Σ lengths, w]` as `[b, t, w]`.
    pub(super) fn pad(&self, x: &Tensor) -> Result<Tensor> {
        let w = x.dim(1)?;
        let x = if self.full {
            x.clone()
        } else {
            x.index_select(&self.pad, 0)?
        };
        x.reshape((self.b, self.t, w))
    }

    /// `[b, t, w]` (or `[b·t, w]`) as the packed rows `[Σ lengths, w]`.
    pub(super) fn unpad(&self, x: &Tensor) -> Result<Tensor> {
        let w = x.dim(candle_core::D::Minus1)?;
        let x = x.reshape((self.b * self.t, w))?;
        if self.full {
            Ok(x)
        } else {
            x.index_select(&self.unpad, 0)
        }
    }
}

/// Rotary positions' frequencies (half rotation, transformers' default
/// rope), computed in f32 as torch does.
pub(super) struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    /// For heads of width `dim` and base `theta`.
    pub(super) fn new(theta: f64, dim: usize) -> Rope {
        let theta = theta as f32;
        Rope {
            inv_freq: (0..dim / 2)
                .map(|i| 1.0 / theta.powf((2 * i) as f32 / dim as f32))
                .collect(),
        }
    }

    /// new-impl's fixed NTK scaling (`rope_scaling` `{"type": "ntk"}`,
    /// gte-*-en-v1.5): the base times `factor`, then every frequency
    /// divided by factor^(2/dim), at every length. A factor of at most 1
    /// leaves the plain frequencies, as new-impl does.
    pub(super) fn ntk(theta: f64, dim: usize, factor: f64) -> Rope {
        if factor <= 1.0 {
            return Rope::new(theta, dim);
        }
        let mut rope = Rope::new(theta * factor, dim);
        let shrink = factor.powf(2.0 / dim as f64) as f32;
        for f in &mut rope.inv_freq {
            *f /= shrink;
        }
        rope
    }

    /// cos and sin of positions `0..t`, `[t, dim/2]` each, for Candle's
    /// `rope`.
    pub(super) fn tables(&self, t: usize, device: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let angles: Vec<f32> = (0..t)
            .flat_map(|p| self.inv_freq.iter().map(move |f| p as f32 * f))
            .collect();
        let cos = angles.iter().map(|a| a.cos()).collect();
        let sin = angles.iter().map(|a| a.sin()).collect();
        Ok((
            Tensor::from_vec(cos, (t, half), device)?,
            Tensor::from_vec(sin, (t, half), device)?,
        ))
    }
}

impl LayerNorm {
    /// A layer norm from its weight and bias (zeros where a family has
    /// none).
    pub(super) fn new(weight: Tensor, bias: Tensor, eps: f64) -> LayerNorm {
        LayerNorm {
            weight,
            bias,
            eps: eps as f32,
        }
    }
}

/// RMSNorm over the last dimension, computed in f32 as transformers does.
pub(super) struct RmsNorm {
    weight: Tensor,
    eps: f32,
}

impl RmsNorm {
    /// From the scale it multiplies by (Gemma's `1 + weight` included).
    pub(super) fn new(weight: Tensor, eps: f64) -> RmsNorm {
        RmsNorm {
            weight,
            eps: eps as f32,
        }
    }

    pub(super) fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<RmsNorm> {
        Ok(RmsNorm::new(vb.get(size, "weight")?, eps))
    }

    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::rms_norm(&x.contiguous()?, &self.weight, self.eps)
    }
}

/// The heads of a grouped-query attention layer (Qwen3, Gemma 3): query
/// head j reads key/value head j / (heads / kv_heads).
#[derive(Clone, Copy)]
pub(super) struct Heads {
    pub heads: usize,
    pub kv_heads: usize,
    pub dim: usize,
}

impl Heads {
    /// A projection's packed rows `[Σ lengths, n·dim]` as `[b, n, t, dim]`.
    pub(super) fn split_plain(&self, y: &Tensor, n: usize, rows: &Rows) -> Result<Tensor> {
        rows.pad(y)?
            .reshape((rows.b, rows.t, n, self.dim))?
            .transpose(1, 2)?
            .contiguous()
    }

    /// As [`Heads::split_plain`], each head normalised by `norm` first
    /// when given, then rotated by `rope`'s tables.
    pub(super) fn split(
        &self,
        y: &Tensor,
        n: usize,
        norm: Option<&RmsNorm>,
        rope: &(Tensor, Tensor),
        rows: &Rows,
    ) -> Result<Tensor> {
        let y = match norm {
            Some(norm) => {
                let tokens = y.dim(0)?;
                norm.forward(&y.reshape((tokens, n, self.dim))?)?
                    .reshape((tokens, n * self.dim))?
            }
            None => y.clone(),
        };
        candle_nn::rotary_emb::rope(&self.split_plain(&y, n, rows)?, &rope.0, &rope.1)
    }

    /// A fused Q/K/V projection's packed rows `[Σ lengths, 3·heads·dim]`
    /// (GTE's and NomicBERT's stacked rows, ModernBERT's `Wqkv`) as
    /// queries, keys and values, `[b, heads, t, dim]` each, queries and
    /// keys rotated by `rope`.
    pub(super) fn split_fused(
        &self,
        qkv: &Tensor,
        rope: &(Tensor, Tensor),
        rows: &Rows,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let qkv = rows
            .pad(qkv)?
            .reshape((rows.b, rows.t, 3, self.heads, self.dim))?
            .permute((2, 0, 3, 1, 4))?;
        let part = |i: usize| qkv.get(i)?.contiguous();
        let (cos, sin) = rope;
        Ok((
            candle_nn::rotary_emb::rope(&part(0)?, cos, sin)?,
            candle_nn::rotary_emb::rope(&part(1)?, cos, sin)?,
            part(2)?,
        ))
    }

    /// softmax(q·kᵀ·scale + mask)·v over `[b, heads, t, dim]` queries and
    /// `[b, kv_heads, t, dim]` keys and values, as packed rows
    /// `[Σ lengths, heads·dim]`.
    pub(super) fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: &Tensor,
        scale: f64,
        rows: &Rows,
    ) -> Result<Tensor> {
        let (b, _, t, _) = q.dims4()?;
        let groups = self.heads / self.kv_heads;
        let repeat = |x: &Tensor| -> Result<Tensor> {
            if groups == 1 {
                return Ok(x.clone());
            }
            x.unsqueeze(2)?
                .broadcast_as((b, self.kv_heads, groups, t, self.dim))?
                .reshape((b, self.heads, t, self.dim))
        };
        let (k, v) = (repeat(k)?, repeat(v)?);
        let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(mask)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        rows.unpad(&probs.matmul(&v.contiguous()?)?.transpose(1, 2)?.reshape((
            b,
            t,
            self.heads * self.dim,
        ))?)
    }

    /// Attention on the CPU's fused kernel, straight off the packed rows:
    /// `qkv` `[Σ lengths, 3·heads·dim]` (a fused projection's output, its
    /// biases added) to the context `[Σ lengths, heads·dim]`, queries and
    /// keys rotated by `rope` first; `reach`: the keys a query sees on
    /// either side, where a layer has a window (none outside it is scored).
    /// No padding, mask or per-head copy: what a padded batch spends
    /// around attention's products. Needs as many key heads as query heads.
    pub(super) fn attend_packed(
        &self,
        qkv: &Tensor,
        rope: &PackedRope,
        lengths: &[usize],
        reach: Option<usize>,
    ) -> Result<Tensor> {
        if self.kv_heads != self.heads {
            candle_core::bail!("the fused attention needs as many key heads as query heads");
        }
        let n = qkv.dim(0)?;
        let h = self.heads * self.dim;
        let turn = |part: usize, (cos, sin): &(Tensor, Tensor)| -> Result<Tensor> {
            let x = qkv
                .narrow(1, part * h, h)?
                .contiguous()?
                .reshape((1, n, self.heads, self.dim))?;
            candle_nn::rotary_emb::rope_thd(&x, cos, sin)?.reshape((n, h))
        };
        let qkv = Tensor::cat(
            &[
                turn(0, &rope.q)?,
                turn(1, &rope.k)?,
                qkv.narrow(1, 2 * h, h)?,
            ],
            1,
        )?;
        let zeros = vec![0f32; 3 * h];
        qkv.apply_op1_no_bwd(&Attention {
            shape: AttentionShape {
                heads: self.heads,
                head_dim: self.dim,
                qkv_bias: &zeros,
                reach,
            },
            lengths,
            bias: None,
            pairs: None,
        })
    }
}

/// Rotary tables by packed row, for attention on the CPU's fused kernel
/// ([`Heads::attend_packed`]): row r holds the angles of its token's
/// position in its own text. The queries' tables carry attention's
/// 1/√dim, so the rotation also scales them, as the kernel expects.
pub(super) struct PackedRope {
    q: (Tensor, Tensor),
    k: (Tensor, Tensor),
}

impl PackedRope {
    /// `rope`'s tables for the packed rows of texts of `lengths`, the
    /// queries' scaled by `scale`.
    pub(super) fn new(
        rope: &Rope,
        lengths: &[usize],
        scale: f64,
        device: &Device,
    ) -> Result<PackedRope> {
        let longest = lengths.iter().copied().max().unwrap_or(0).max(1);
        let positions: Vec<u32> = lengths.iter().flat_map(|&l| 0..l as u32).collect();
        let positions = Tensor::from_vec(positions, lengths.iter().sum::<usize>(), device)?;
        let (cos, sin) = rope.tables(longest, device)?;
        let (cos, sin) = (
            cos.index_select(&positions, 0)?,
            sin.index_select(&positions, 0)?,
        );
        // Where the scale is folded into the weights, the queries share
        // the keys' tables.
        let q = if scale == 1.0 {
            (cos.clone(), sin.clone())
        } else {
            ((&cos * scale)?, (&sin * scale)?)
        };
        Ok(PackedRope { q, k: (cos, sin) })
    }
}

/// Which of a text's tokens a layer attends to: all of them, or those
/// within a window (ModernBERT's local layers, Gemma 3's sliding ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Span {
    Global,
    Window,
}

/// A batch's rotary tables and additive masks (`[b, 1, t, t]`) for each
/// [`Span`], in families whose two kinds of layer differ in both.
pub(super) struct SpanBatch {
    global: ((Tensor, Tensor), Tensor),
    window: ((Tensor, Tensor), Tensor),
}

impl SpanBatch {
    /// Global layers rotate by `global` and see every token of a text;
    /// window layers rotate by `window` and see those within `reach` on
    /// either side.
    pub(super) fn new(
        global: &Rope,
        window: &Rope,
        lengths: &[usize],
        t: usize,
        reach: usize,
        device: &Device,
    ) -> Result<SpanBatch> {
        let b = lengths.len();
        let mut all = vec![0f32; b * t * t];
        let mut near = vec![0f32; b * t * t];
        for (row, &len) in lengths.iter().enumerate() {
            for i in 0..t {
                for j in 0..t {
                    let k = (row * t + i) * t + j;
                    if !visible(j, len) {
                        all[k] = MASKED;
                        near[k] = MASKED;
                    } else if i < len && i.abs_diff(j) > reach {
                        // A padding row (i ≥ len) keeps every key of its
                        // text, so it sees one.
                        near[k] = MASKED;
                    }
                }
            }
        }
        Ok(SpanBatch {
            global: (
                global.tables(t, device)?,
                Tensor::from_vec(all, (b, 1, t, t), device)?,
            ),
            window: (
                window.tables(t, device)?,
                Tensor::from_vec(near, (b, 1, t, t), device)?,
            ),
        })
    }

    /// The rotary tables and mask of a layer of `span`.
    pub(super) fn of(&self, span: Span) -> (&(Tensor, Tensor), &Tensor) {
        let (rope, mask) = match span {
            Span::Global => &self.global,
            Span::Window => &self.window,
        };
        (rope, mask)
    }
}

/// A family that runs as Candle operations on padded batches, told as its
/// parts: the embedding, one layer, what a tap holds. [`Padded`] turns it
/// into an [`EncoderModel`], so the argument checks and the walk through
/// the layers are written once.
pub(super) trait PaddedEncoder: Send + Sync {
    /// What a batch's layers share (masks, rotary tables).
    type Batch;

    /// The family's name, for messages.
    const NAME: &'static str;

    fn hidden(&self) -> usize;

    fn layers(&self) -> usize;

    /// Tokens a sequence may have.
    fn max_tokens(&self) -> usize;

    /// `ids` `[b, t]` (each row padded after its `lengths` entry) embedded,
    /// `[b, t, hidden]`, and what the layers share. `types`: each token's
    /// type `[b, t]`, given to a family with several
    /// ([`PaddedEncoder::token_types`]) when a pair's second text is in the
    /// batch; `None` means type 0 throughout.
    fn embed(
        &self,
        ids: &Tensor,
        lengths: &[usize],
        types: Option<&Tensor>,
    ) -> Result<(Tensor, Self::Batch)>;

    /// Layer `index` (from 0) on the packed rows `x` (`[Σ lengths,
    /// hidden]`), laid out by `rows` for attention.
    fn layer(&self, index: usize, x: &Tensor, batch: &Self::Batch, rows: &Rows) -> Result<Tensor>;

    /// A tap's states from the stream's packed rows `x` (a final norm,
    /// where the family has one: bert_score's layer N of such a model).
    fn tap(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.clone())
    }

    /// Rows of the token-type table (0 where the family has none): with
    /// more than one, a pair's second text is embedded with its own row, so
    /// [`PaddedEncoder::embed`] is given each token's type.
    fn token_types(&self) -> usize {
        0
    }
}

/// A [`PaddedEncoder`] as an [`EncoderModel`].
pub(super) struct Padded<T>(pub T);

impl<T: PaddedEncoder> EncoderModel for Padded<T> {
    fn hidden(&self) -> usize {
        self.0.hidden()
    }

    fn layers(&self) -> usize {
        self.0.layers()
    }

    fn packs(&self) -> bool {
        false
    }

    fn forward_packed(
        &self,
        _: &[u32],
        _: &[usize],
        _: Option<&[usize]>,
        _: &[usize],
    ) -> Result<Vec<Tensor>> {
        candle_core::bail!("{} runs on padded batches only", T::NAME)
    }

    fn forward_padded(
        &self,
        ids: &Tensor,
        lengths: &[usize],
        second: Option<&[usize]>,
        taps: &[usize],
    ) -> Result<Vec<Tensor>> {
        let model = &self.0;
        let t = ids.dim(1)?;
        check(t, model.max_tokens(), taps, model.layers())?;
        let rows = Rows::new(lengths, t, ids.device())?;
        let types = match second {
            Some(second)
                if model.token_types() > 1 && super::has_second_segment(lengths, Some(second)) =>
            {
                Some(segment_ids(lengths, second, t, ids.device())?)
            }
            _ => None,
        };
        let (x, batch) = model.embed(ids, lengths, types.as_ref())?;
        let mut x = rows.unpad(&x)?;
        let mut out = Vec::with_capacity(taps.len());
        let last = taps.last().copied().unwrap_or(0);
        for depth in 0..=last {
            if depth > 0 {
                x = model.layer(depth - 1, &x, &batch, &rows)?;
            }
            if taps.contains(&depth) {
                out.push(model.tap(&x)?);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows 0..n of width 2, row r holding (r, 10·r).
    fn packed(n: usize) -> Tensor {
        let v: Vec<f32> = (0..n).flat_map(|r| [r as f32, 10.0 * r as f32]).collect();
        Tensor::from_vec(v, (n, 2), &Device::Cpu).unwrap()
    }

    #[test]
    fn rows_move_between_the_layouts_and_back() {
        // Ragged, with an empty text in the middle.
        let rows = Rows::new(&[3, 0, 1], 3, &Device::Cpu).unwrap();
        let x = packed(4);
        let wide = rows.pad(&x).unwrap();
        assert_eq!(wide.dims(), &[3, 3, 2]);
        let slots: Vec<Vec<Vec<f32>>> = wide.to_vec3().unwrap();
        // Each text's tokens in its row, from its first slot on.
        assert_eq!(
            slots[0],
            vec![vec![0.0, 0.0], vec![1.0, 10.0], vec![2.0, 20.0]]
        );
        assert_eq!(slots[2][0], vec![3.0, 30.0]);
        // Padding copies a real row: finite.
        assert!(slots.iter().flatten().flatten().all(|v| v.is_finite()));
        let back = rows.unpad(&wide).unwrap();
        assert_eq!(back.to_vec2::<f32>().unwrap(), x.to_vec2::<f32>().unwrap());
        // A full batch differs in shape only.
        let full = Rows::new(&[2, 2], 2, &Device::Cpu).unwrap();
        let x = packed(4);
        let wide = full.pad(&x).unwrap();
        assert_eq!(wide.dims(), &[2, 2, 2]);
        assert_eq!(
            full.unpad(&wide).unwrap().to_vec2::<f32>().unwrap(),
            x.to_vec2::<f32>().unwrap()
        );
        // Lengths past the width, or no token at all, are refused.
        assert!(Rows::new(&[4], 3, &Device::Cpu).is_err());
        assert!(Rows::new(&[0, 0], 3, &Device::Cpu).is_err());
    }

    #[test]
    fn every_query_row_sees_a_key() {
        // Window layers: a padding row far past its text's end, and an
        // empty text, still see one key, so no softmax row is all masked.
        let rope = Rope::new(10_000.0, 4);
        let batch = SpanBatch::new(&rope, &rope, &[1, 0, 6], 6, 1, &Device::Cpu).unwrap();
        let t = 6;
        for span in [Span::Global, Span::Window] {
            let (_, mask) = batch.of(span);
            let flat: Vec<f32> = mask.flatten_all().unwrap().to_vec1().unwrap();
            for (r, row) in flat.chunks_exact(t).enumerate() {
                assert!(row.contains(&0.0), "{span:?}, row {r}: {row:?}");
            }
            if span == Span::Window {
                // A real token's window: the third text's first token
                // sees tokens 0 and 1 only.
                assert_eq!(flat[2 * t * t..][..3], [0.0, 0.0, MASKED]);
                // The first text's padding row 5 sees its one token.
                assert_eq!(flat[5 * t..][..2], [0.0, MASKED]);
            }
        }
        let keys = key_mask(&[2, 0], 3, &Device::Cpu).unwrap();
        let keys: Vec<f32> = keys.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(keys, vec![0.0, 0.0, MASKED, 0.0, MASKED, MASKED]);
    }
}

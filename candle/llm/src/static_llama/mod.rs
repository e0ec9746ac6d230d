//! candle-transformers' llama with a decode step whose shapes never change, so that the step
//! can be captured once into a device graph and replayed at every position.
//!
//! The same weights (by the same names) as `candle_transformers::models::llama::Llama`; what
//! differs is the decode step's form:
//! - the KV cache is preallocated to `max_len` positions and written in place by a scatter
//!   whose index is a device tensor (the position), not by a concatenation that grows;
//! - the rotary tables are read at the position by `index_select`, not `narrow`;
//! - attention runs in f32, as the llama's does, in one kernel over the cache
//!   (`rocm_backend::attention::cached_attention`), each query seeing the positions up to its
//!   own, read on the device; prompts (from `PROMPT_GEMM_ATTENTION_FROM` tokens) run flash
//!   attention over the filled positions where the cache is 16-bit (rocm-attention's kernel on
//!   the matrix units, no (T x positions) buffer), and with an f32 cache, as every step under
//!   [`StaticLlama::with_unfused_attention`], the ops (scores by a gemm over all `max_len`
//!   positions, an additive mask built on the device from the position, softmax, a second
//!   gemm) while their scores stay under `FLASH_F32_SCORES_FROM` bytes, flash attention in f32
//!   beyond (long prompts);
//! - the step ends by writing its greedy token and the next position into its own inputs,
//!   so replays advance by themselves.
//!
//! Every kernel argument is then the same at every position: a captured step replays as is.
//! The prompt runs in one pass of the same form (its positions and causal mask on the device).
//!
//! [`StaticLlama::from_gguf`] loads the same model from a GGUF file (llama.cpp's names): the
//! projections stay quantized (`QMatMul`), q/k/v and gate/up as separate products, activations
//! in f32 and rotary embeddings in GGUF's interleaved form, as candle-transformers'
//! `quantized_llama` runs them.
//!
//! With a communicator ([`StaticLlama::load_sharded`]) the model is tensor-parallel over the
//! ranks, as Candle's `llama_multiprocess` splits it: q/k/v and gate/up by output rows (each
//! rank its heads and its slice of the MLP), o and down by input columns, followed by an
//! all-reduce; embeddings, norms and the head replicated. The all-reduces are part of a
//! captured step too.

use std::sync::Arc;

use candle_core::quantized::{gguf_file, QMatMul, QTensor};
use candle_core::rocm_backend::attention::{cached_attention, rope_kv_write, CacheMask};
use candle_core::rocm_backend::collective::{Comm, ReduceOp};
use candle_core::rocm_backend::flash_attention::flash_attn;
use candle_core::rocm_backend::fused::add_rms_norm;
use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::{Embedding, Init, Linear, RmsNorm, VarBuilder};
use candle_transformers::models::llama::Config;

use crate::architecture::{Architecture, GgufHyperParams};
use crate::gguf_reader::TensorReader;
use crate::rope::{inverse_frequencies, rotary_tables, RopeScaling};
use crate::sampling::Sampler;
mod attention;
mod decode;
mod experts;
mod fused;
mod load;

pub use decode::{greedy, Decoder};

/// A bias-free projection: dense weights, or GGUF blocks multiplied as they are.
enum Proj {
    Dense(Linear),
    Quantized(QMatMul),
}

impl Proj {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Proj::Dense(l) => l.forward(x),
            Proj::Quantized(q) => q.forward(x),
        }
    }
}

struct Layer {
    /// The decode step's fused form, where the projections are GGUF blocks (see
    /// [`StaticLlama::forward_fused`]).
    fused: Option<FusedLayer>,
    input_norm: RmsNorm,
    /// q, k and v: stacked by rows into one gemm (dense weights), or three products.
    qkv: Vec<Proj>,
    /// Their biases (f32), one a product of `qkv`, or none.
    qkv_bias: Vec<Tensor>,
    /// Rms norms of each head of q and of k, before the rotary embedding.
    qk_norm: Option<(RmsNorm, RmsNorm)>,
    o: Proj,
    post_norm: RmsNorm,
    ffn: FeedForward,
}

/// A layer's feed-forward part.
enum FeedForward {
    /// The gated MLP: gate and up stacked by rows into one gemm, or two products; down.
    Gated { gate_up: Vec<Proj>, down: Proj },
    /// Routed experts (GGUF blocks, gate and up joined).
    Experts(experts::Experts),
}

impl Layer {
    /// The q/k/v products of `h` (one stacked, or three), their biases added.
    fn qkv_outputs(&self, h: &Tensor) -> Result<Vec<Tensor>> {
        let mut out = Vec::with_capacity(self.qkv.len());
        for (n, p) in self.qkv.iter().enumerate() {
            let y = p.forward(h)?;
            out.push(match self.qkv_bias.get(n) {
                Some(b) => y.broadcast_add(&b.to_dtype(y.dtype())?)?,
                None => y,
            });
        }
        Ok(out)
    }
}

/// A layer's quantized projections and norm weights for the fused decode step: each norm
/// writes the q8 activations of the product after it (the residual add folded into it), the
/// rotary embedding writes the cache, the gated MLP writes the down projection's activations.
struct FusedLayer {
    input_norm: Tensor,
    post_norm: Tensor,
    qkv: Arc<QTensor>,
    /// q and k's per-head norm weights (qwen3), applied before the rotary embedding.
    qk_norm: Option<(Tensor, Tensor)>,
    ffn: FusedFfn,
}

/// The feed-forward part of a [`FusedLayer`].
enum FusedFfn {
    Gated {
        gate_up: Arc<QTensor>,
        down: Arc<QTensor>,
    },
    /// The layer's experts (`FeedForward::Experts`).
    Experts,
}

impl FusedLayer {
    /// The fused form of a layer whose q/k/v is a single product of one block type and whose
    /// feed-forward is routed experts or a gate/up product and a down product of block types,
    /// else None.
    fn of(
        qkv: &[Proj],
        ffn: &FeedForward,
        norms: (&Tensor, &Tensor),
        qk_norm: Option<(Tensor, Tensor)>,
    ) -> Option<Self> {
        let blocks = |p: &Proj| match p {
            Proj::Quantized(QMatMul::QTensor(t)) if t.dtype().block_size() > 1 => Some(t.clone()),
            _ => None,
        };
        let ffn = match ffn {
            FeedForward::Gated { gate_up, down } => match gate_up.as_slice() {
                [gate_up] => FusedFfn::Gated {
                    gate_up: blocks(gate_up)?,
                    down: blocks(down)?,
                },
                _ => return None,
            },
            FeedForward::Experts(e) => {
                if e.gate_up.dtype().block_size() == 1 || e.down.dtype().block_size() == 1 {
                    return None;
                }
                FusedFfn::Experts
            }
        };
        match qkv {
            [qkv] => Some(FusedLayer {
                input_norm: norms.0.clone(),
                post_norm: norms.1.clone(),
                qkv: blocks(qkv)?,
                qk_norm,
                ffn,
            }),
            _ => None,
        }
    }
}

/// What the ops' form of a step (the rotary embedding by candle-nn, the cache written by
/// scatters) needs of the positions: their rotary rows and the scatter's index.
struct OpsInputs {
    cos: Tensor,
    sin: Tensor,
    slot: Tensor,
}

/// One sequence's attention inputs at its positions (see `StaticLlama::attention_inputs`).
struct AttentionInputs<'s> {
    state: &'s DecodeState,
    positions: &'s Tensor,
    t: usize,
    mask: Option<Tensor>,
    /// Flash attention over the first this many cached positions (a prompt whose positions
    /// follow the filled ones).
    flash: Option<usize>,
    ops: Option<OpsInputs>,
}

/// Linear layers of the same input stacked by output rows (one gemm computes them all).
fn stacked(parts: &[Linear]) -> Result<Linear> {
    let weights: Vec<&Tensor> = parts.iter().map(|l| l.weight()).collect();
    Ok(Linear::new(Tensor::cat(&weights, 0)?, None))
}

/// GGUF projections of the same input (`names`, in order) as one quantized product: where all
/// have one block type and width, their blocks joined by rows (ggml's rows are whole blocks),
/// so that one mat-vec computes them all and fills the device with their rows together; else
/// one product each.
fn stacked_gguf<R: std::io::Read + std::io::Seek>(
    gguf: &mut TensorReader<'_, R>,
    names: &[String],
    device: &Device,
) -> Result<Vec<Proj>> {
    let first = gguf.info(&names[0])?;
    let width = first.shape.dims().last().copied();
    let mut same = true;
    for name in names {
        let t = gguf.info(name)?;
        same &= t.ggml_dtype == first.ggml_dtype
            && t.shape.rank() == 2
            && t.shape.dims().last().copied() == width;
    }
    let projs = if same {
        vec![gguf.stacked(names, device)?]
    } else {
        names
            .iter()
            .map(|n| gguf.tensor(n, device))
            .collect::<Result<_>>()?
    };
    projs
        .into_iter()
        .map(|w| Ok(Proj::Quantized(QMatMul::from_qtensor(w)?)))
        .collect()
}

/// The token embedding: a float table, or a GGUF table kept in its blocks on the device, each
/// looked-up row dequantized as it is read (the same values as the dequantized table, without
/// its f32 copy: 805 MB for an 8B shape with a 49K vocabulary).
enum TokenEmbedding {
    Dense(Embedding),
    Quantized(Arc<QTensor>),
}

impl TokenEmbedding {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        match self {
            TokenEmbedding::Dense(e) => e.forward(ids),
            TokenEmbedding::Quantized(q) => q.embedding(ids),
        }
    }
}

/// The model; [`DecodeState`] holds what one sequence owns.
pub struct StaticLlama {
    embed: TokenEmbedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Proj,
    /// `[max_len, head_dim / 2]`, f32 (q and k are roped in f32).
    cos: Tensor,
    sin: Tensor,
    /// This rank's query and key-value heads.
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    max_len: usize,
    device: Device,
    comm: Option<Arc<Comm>>,
    /// q's weights carry the attention scale.
    q_prescaled: bool,
    /// Attention in one kernel (else a gemm, a mask, a softmax and a gemm).
    fused_attention: bool,
    /// Prompts through flash attention where it applies (see the module's text).
    flash_prompts: bool,
    /// Rotary embeddings on interleaved pairs (GGUF's llama), else on halves.
    rope_interleaved: bool,
    /// The norms' epsilon (the fused decode step's norms).
    eps: f32,
    /// The KV cache's dtype (f32, or f16/bf16: half the bytes, values rounded as stored).
    cache_dtype: DType,
    /// The activations' dtype (the dense weights', f32 for GGUF).
    dtype: DType,
    /// The rotary tables in the activations' 16-bit dtype, where the cache is in it too: a
    /// decode step's q, k and v then stay in that dtype (no casts around the attention).
    native_tables: Option<(Tensor, Tensor)>,
    /// The GGUF file's architecture (None: loaded from a llama's safetensors).
    architecture: Option<Architecture>,
}

/// A bias-free linear layer of `vb`'s `weight` (out x in), this rank's `part` of `parts`
/// along `dim` (0: output rows, 1: input columns), cut on the host before it reaches the
/// device.
fn linear_part(
    vb: &VarBuilder<'_>,
    (out_dim, in_dim): (usize, usize),
    dim: usize,
    (part, parts): (usize, usize),
    device: &Device,
) -> Result<Linear> {
    // the hint candle-nn's linear layers give (a backend drawing weights draws them)
    let w = vb.get_with_hints(
        (out_dim, in_dim),
        "weight",
        candle_nn::init::DEFAULT_KAIMING_NORMAL,
    )?;
    let len = w.dim(dim)? / parts;
    let w = w
        .narrow(dim, part * len, len)?
        .contiguous()?
        .to_device(device)?;
    Ok(Linear::new(w, None))
}

/// `x + pending` (x alone without it) and its norm: on ROCm one launch for both (the values of
/// the add and the norm, bit for bit), elsewhere the two ops.
fn add_norm(x: Tensor, pending: Option<Tensor>, norm: &RmsNorm) -> Result<(Tensor, Tensor)> {
    match pending {
        None => {
            let h = norm.forward(&x)?;
            Ok((x, h))
        }
        Some(p) if x.device().is_rocm() => add_rms_norm(&p, &x, norm.weight(), norm.eps() as f32),
        Some(p) => {
            let sum = (p + x)?;
            let h = norm.forward(&sum)?;
            Ok((sum, h))
        }
    }
}

/// candle-nn's `silu(gate) * up`: one launch on ROCm.
fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if gate.device().is_rocm() {
        candle_core::rocm_backend::fused::silu_mul(gate, up)
    } else {
        candle_nn::ops::silu(gate)? * up
    }
}

/// One sequence: its KV cache (`[1, kv_heads, max_len, head_dim]` a layer, in the model's
/// cache dtype) and the step's inputs, which each step rewrites in place for the next.
pub struct DecodeState {
    pub(crate) k: Vec<Tensor>,
    pub(crate) v: Vec<Tensor>,
    /// u32 `[1, 1]`: the token the next step reads.
    pub(crate) token: Tensor,
    /// u32 `[1]`: its position.
    pub(crate) position: Tensor,
    /// u32 `[max_len]`: 0, 1, ... (the mask's comparison).
    pub(crate) positions: Tensor,
    pub(crate) one: Tensor,
    pub(crate) zeros: Tensor,
    pub(crate) minus_inf: Tensor,
    /// Positions filled so far (host-side bound check).
    pub(crate) filled: usize,
    pub(crate) max_len: usize,
}

/// What one step left on the device: its logits (`[vocab]`, the model's dtype) and greedy
/// token (u32 `[1]`).
#[derive(Clone)]
pub struct StepOutput {
    pub logits: Tensor,
    pub next: Tensor,
}

impl StaticLlama {
    /// Whether a decode step runs the fused kernels ([`StaticLlama::forward_fused`]): on ROCm,
    /// one rank, every layer with GGUF projections of the fused form.
    pub(crate) fn decodes_fused(&self) -> bool {
        self.device.is_rocm()
            && self.fused_attention
            && self.comm.is_none()
            && self.layers.iter().all(|l| l.fused.is_some())
    }

    /// `count` empty caches of a layer (`[count, kv_heads, max_len, head_dim]` in the cache
    /// dtype), one per layer.
    pub(crate) fn caches(&self, count: usize) -> Result<Vec<Tensor>> {
        (0..self.layers.len())
            .map(|_| {
                Tensor::zeros(
                    (count, self.kv_heads, self.max_len, self.head_dim),
                    self.cache_dtype,
                    &self.device,
                )
            })
            .collect()
    }

    /// A new sequence: an empty cache, position 0, token `first`.
    pub fn new_state(&self, first: u32) -> Result<DecodeState> {
        let dev = &self.device;
        Ok(DecodeState {
            k: self.caches(1)?,
            v: self.caches(1)?,
            token: Tensor::new(&[[first]], dev)?,
            position: Tensor::new(&[0u32], dev)?,
            positions: Tensor::arange(0u32, self.max_len as u32, dev)?,
            one: Tensor::new(&[1u32], dev)?,
            zeros: Tensor::zeros(self.max_len, DType::F32, dev)?,
            minus_inf: Tensor::full(f32::NEG_INFINITY, self.max_len, dev)?,
            filled: 0,
            max_len: self.max_len,
        })
    }

    /// One decode step for `state`'s token at its position, all on the device: the step
    /// writes its greedy token and the next position into `state`'s inputs. The shapes and
    /// every kernel argument are the same at every position, so the step can be captured
    /// (`RocmDevice::capture`) and replayed. Does not check the position: see
    /// [`DecodeState::advance`].
    pub fn step(&self, state: &DecodeState) -> Result<StepOutput> {
        let logits = self.forward(state, &state.token, &state.position)?;
        let next = logits.argmax(D::Minus1)?.reshape(1)?;
        state.token.slice_set(&next.reshape((1, 1))?, 0, 0)?;
        state
            .position
            .slice_set(&(&state.position + &state.one)?, 0, 0)?;
        Ok(StepOutput { logits, next })
    }

    /// The prompt in one pass (positions 0..): fills the cache, and leaves the greedy token
    /// after it and the next position in `state`'s inputs.
    pub fn prefill(&self, state: &mut DecodeState, prompt: &[u32]) -> Result<StepOutput> {
        let t = prompt.len();
        if t == 0 || state.filled + t > self.max_len {
            candle_core::bail!(
                "static llama: a prompt of {t} tokens after {} of {} positions",
                state.filled,
                self.max_len
            );
        }
        let start = state.filled as u32;
        let positions = Tensor::arange(start, start + t as u32, &self.device)?;
        let tokens = Tensor::new(prompt, &self.device)?.unsqueeze(0)?;
        let logits = self.forward(state, &tokens, &positions)?;
        let next = logits.argmax(D::Minus1)?.reshape(1)?;
        state.token.slice_set(&next.reshape((1, 1))?, 0, 0)?;
        state
            .position
            .slice_set(&Tensor::new(&[start + t as u32], &self.device)?, 0, 0)?;
        state.filled += t;
        Ok(StepOutput { logits, next })
    }

    /// `tokens` (u32 `[1, T]`) at `positions` (u32 `[T]`) through the model: their keys and
    /// values written into the cache, attention over the whole cache under a causal mask
    /// built from the positions; the last token's logits (`[vocab]`, the model's dtype).
    fn forward(&self, state: &DecodeState, tokens: &Tensor, positions: &Tensor) -> Result<Tensor> {
        // the fused kernels are ROCm's: elsewhere every step runs the ops
        if self.decodes_fused() && positions.dim(0)? == 1 {
            return self
                .forward_fused((&state.k, &state.v), tokens, positions)?
                .flatten_all();
        }
        let t = positions.dim(0)?;
        let inputs = self.attention_inputs(state, positions)?;
        let mut x = self.embed.forward(tokens)?; // [1, T, hidden]
                                                 // the last sublayer's output, added to x by the next norm
        let mut pending: Option<Tensor> = None;
        for (n, layer) in self.layers.iter().enumerate() {
            let h;
            (x, h) = add_norm(x, pending.take(), &layer.input_norm)?;
            let y = self.attend(layer, n, layer.qkv_outputs(&h)?, &inputs, x.dtype())?;
            let o = self.all_reduce(layer.o.forward(&y)?)?;
            let h;
            (x, h) = add_norm(x, Some(o), &layer.post_norm)?;
            pending = Some(self.all_reduce(self.feed_forward(layer, &h, t > 1)?)?);
        }
        let last = |x: Tensor| x.narrow(1, t - 1, 1);
        let (_, h) = add_norm(last(x)?, pending.map(last).transpose()?, &self.norm)?;
        self.lm_head.forward(&h)?.flatten_all()
    }

    /// One decode step of several sequences together, each at its own position: the
    /// projections and the MLP of all their tokens in one product each (the weights read once
    /// for all), each sequence's attention over its own cache. Each state's inputs advance as
    /// [`StaticLlama::step`] advances them; the outputs are in the states' order. Runs the
    /// ops' form (no capture).
    pub fn step_many(&self, states: &[&DecodeState]) -> Result<Vec<StepOutput>> {
        if states.is_empty() {
            return Ok(Vec::new());
        }
        if self.comm.is_some() {
            candle_core::bail!("static llama: several sequences on a tensor-parallel model");
        }
        let inputs = states
            .iter()
            .map(|s| self.attention_inputs(s, &s.position))
            .collect::<Result<Vec<_>>>()?;
        let tokens: Vec<Tensor> = states.iter().map(|s| s.token.clone()).collect();
        let mut x = self.embed.forward(&Tensor::cat(&tokens, 0)?)?; // [B, 1, hidden]
        let mut pending: Option<Tensor> = None;
        for (n, layer) in self.layers.iter().enumerate() {
            let h;
            (x, h) = add_norm(x, pending.take(), &layer.input_norm)?;
            let outputs = layer.qkv_outputs(&h)?;
            let ys = inputs
                .iter()
                .enumerate()
                .map(|(i, one)| {
                    let rows = outputs
                        .iter()
                        .map(|o| o.narrow(0, i, 1)?.contiguous())
                        .collect::<Result<Vec<_>>>()?;
                    self.attend(layer, n, rows, one, x.dtype())
                })
                .collect::<Result<Vec<_>>>()?;
            let o = layer.o.forward(&Tensor::cat(&ys, 0)?)?;
            let h;
            (x, h) = add_norm(x, Some(o), &layer.post_norm)?;
            pending = Some(self.feed_forward(layer, &h, false)?);
        }
        let (_, h) = add_norm(x, pending, &self.norm)?;
        let logits = self.lm_head.forward(&h)?.squeeze(1)?; // [B, vocab]
        let mut out = Vec::with_capacity(states.len());
        for (i, state) in states.iter().enumerate() {
            let logits = logits.get(i)?;
            let next = logits.argmax(D::Minus1)?.reshape(1)?;
            state.token.slice_set(&next.reshape((1, 1))?, 0, 0)?;
            state
                .position
                .slice_set(&(&state.position + &state.one)?, 0, 0)?;
            out.push(StepOutput { logits, next });
        }
        Ok(out)
    }

    /// The layer's feed-forward output for `h` (`prefill`: several tokens of one sequence).
    fn feed_forward(&self, layer: &Layer, h: &Tensor, prefill: bool) -> Result<Tensor> {
        let (gate_up, down) = match &layer.ffn {
            FeedForward::Experts(moe) => return moe.forward(h, prefill),
            FeedForward::Gated { gate_up, down } => (gate_up, down),
        };
        let gated = match gate_up.as_slice() {
            [gate_up] => {
                let gate_up = gate_up.forward(h)?;
                let width = gate_up.dim(D::Minus1)? / 2;
                silu_mul(
                    &gate_up.narrow(D::Minus1, 0, width)?,
                    &gate_up.narrow(D::Minus1, width, width)?,
                )?
            }
            [gate, up] => silu_mul(&gate.forward(h)?, &up.forward(h)?)?,
            _ => candle_core::bail!("static llama: gate/up as one or two projections"),
        };
        down.forward(&gated)
    }

    /// The sum of the ranks' partial outputs of a row-parallel layer, in place.
    fn all_reduce(&self, y: Tensor) -> Result<Tensor> {
        if let Some(comm) = &self.comm {
            comm.all_reduce_(&y, ReduceOp::Sum)?;
        }
        Ok(y)
    }

    /// Positions the cache holds.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The GGUF file's architecture (None where the model was loaded from safetensors, which
    /// are llama's).
    pub fn architecture(&self) -> Option<Architecture> {
        self.architecture
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

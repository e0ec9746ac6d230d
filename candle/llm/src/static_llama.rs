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
use candle_transformers::fused_moe::FusedMoeGGUF;
use candle_transformers::models::llama::Config;

use crate::architecture::{Architecture, GgufHyperParams};
use crate::gguf_reader::TensorReader;
use crate::rope::{inverse_frequencies, rotary_tables, RopeScaling};
use crate::sampling::Sampler;

/// Query rows from which the static llama's attention runs as matrix products instead of
/// `cached_attention` (prompts; decode steps are one row).
const PROMPT_GEMM_ATTENTION_FROM: usize = 16;

/// With an f32 cache a prompt's attention runs as matrix products (the faster f32 path) while
/// their f32 scores (`heads x T x max_len`) take less than this; flash attention in f32 beyond,
/// so a long prompt needs no (T x positions) buffer.
const FLASH_F32_SCORES_FROM: usize = 1 << 30;

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
    /// Routed experts (candle-transformers' GGUF mixture of experts).
    Experts(FusedMoeGGUF),
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
    gate_up: Arc<QTensor>,
    down: Arc<QTensor>,
}

impl FusedLayer {
    /// The fused form of a layer whose q/k/v and gate/up are single products of one block type
    /// (the down projection's too), else None.
    fn of(qkv: &[Proj], gate_up: &[Proj], down: &Proj, norms: (&Tensor, &Tensor)) -> Option<Self> {
        let blocks = |p: &Proj| match p {
            Proj::Quantized(QMatMul::QTensor(t)) if t.dtype().block_size() > 1 => Some(t.clone()),
            _ => None,
        };
        match (qkv, gate_up) {
            ([qkv], [gate_up]) => Some(FusedLayer {
                input_norm: norms.0.clone(),
                post_norm: norms.1.clone(),
                qkv: blocks(qkv)?,
                gate_up: blocks(gate_up)?,
                down: blocks(down)?,
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
    /// Loads the llama's weights from `vb` (the names of candle-transformers' llama) with a
    /// cache of `max_len` positions (at most the config's `max_position_embeddings`).
    pub fn load(vb: VarBuilder<'_>, config: &Config, max_len: usize) -> Result<Self> {
        let device = vb.device().clone();
        Self::load_sharded(vb, config, max_len, &device, None)
    }

    /// This rank's part of the tensor-parallel model on `device` (`vb` may hold the weights
    /// on the host: each rank cuts its part there). Heads, key-value heads and the MLP width
    /// must divide by the number of ranks.
    pub fn load_sharded(
        vb: VarBuilder<'_>,
        config: &Config,
        max_len: usize,
        device: &Device,
        comm: Option<Arc<Comm>>,
    ) -> Result<Self> {
        let device = device.clone();
        if max_len == 0 || max_len > config.max_position_embeddings {
            candle_core::bail!(
                "static llama: max_len {max_len} must be in 1..={}",
                config.max_position_embeddings
            );
        }
        let (rank, ranks) = comm.as_ref().map_or((0, 1), |c| (c.rank(), c.size()));
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let heads = config.num_attention_heads;
        let kv_heads = config.num_key_value_heads;
        if !heads.is_multiple_of(ranks)
            || !kv_heads.is_multiple_of(ranks)
            || !i.is_multiple_of(ranks)
        {
            candle_core::bail!(
                "static llama: {heads} heads, {kv_heads} kv heads and width {i} do not split over {ranks} ranks"
            );
        }
        let head_dim = h / heads;
        let kv_dim = kv_heads * head_dim;
        let eps = config.rms_norm_eps;
        let part = (rank, ranks);
        let rows = |vb: &VarBuilder<'_>, shape| linear_part(vb, shape, 0, part, &device);
        let cols = |vb: &VarBuilder<'_>, shape| linear_part(vb, shape, 1, part, &device);
        let norm = |n: usize, vb: VarBuilder<'_>| -> Result<RmsNorm> {
            let w = vb
                .get_with_hints(n, "weight", Init::Const(1.))?
                .to_device(&device)?;
            Ok(RmsNorm::new(w, eps))
        };
        // Attention's 1/sqrt(head_dim) folded into q's weights where it is a power of two: the
        // scaling is then exact (the same bits as scaling the scores) and costs no kernel.
        let scale = 1.0 / (head_dim as f64).sqrt();
        let q_prescaled = scale.log2().fract() == 0.0;
        let prescaled = |q: Linear| -> Result<Linear> {
            if q_prescaled {
                Ok(Linear::new((q.weight() * scale)?, None))
            } else {
                Ok(q)
            }
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for n in 0..config.num_hidden_layers {
            let vb = vb.pp(format!("model.layers.{n}"));
            let (att, mlp) = (vb.pp("self_attn"), vb.pp("mlp"));
            layers.push(Layer {
                fused: None,
                input_norm: norm(h, vb.pp("input_layernorm"))?,
                qkv: vec![Proj::Dense(stacked(&[
                    prescaled(rows(&att.pp("q_proj"), (h, h))?)?,
                    rows(&att.pp("k_proj"), (kv_dim, h))?,
                    rows(&att.pp("v_proj"), (kv_dim, h))?,
                ])?)],
                qkv_bias: Vec::new(),
                qk_norm: None,
                o: Proj::Dense(cols(&att.pp("o_proj"), (h, h))?),
                post_norm: norm(h, vb.pp("post_attention_layernorm"))?,
                ffn: FeedForward::Gated {
                    gate_up: vec![Proj::Dense(stacked(&[
                        rows(&mlp.pp("gate_proj"), (i, h))?,
                        rows(&mlp.pp("up_proj"), (i, h))?,
                    ])?)],
                    down: Proj::Dense(cols(&mlp.pp("down_proj"), (h, i))?),
                },
            });
        }
        let embedding_init = Init::Randn {
            mean: 0.,
            stdev: 1.,
        };
        let embed = Embedding::new(
            vb.pp("model.embed_tokens")
                .get_with_hints((config.vocab_size, h), "weight", embedding_init)?
                .to_device(&device)?,
            h,
        );
        let whole = (0, 1);
        let lm_head = Proj::Dense(if config.tie_word_embeddings {
            Linear::new(embed.embeddings().clone(), None)
        } else {
            linear_part(&vb.pp("lm_head"), (config.vocab_size, h), 0, whole, &device)?
        });
        let scaling = match &config.rope_scaling {
            Some(llama3) => RopeScaling::llama3(llama3, head_dim, config.rope_theta),
            None => RopeScaling::None,
        };
        let inv_freq = inverse_frequencies(head_dim, config.rope_theta, &scaling)?;
        let (cos, sin) = rotary_tables(&inv_freq, max_len, &device)?;
        Ok(Self {
            embed: TokenEmbedding::Dense(embed),
            layers,
            norm: norm(h, vb.pp("model.norm"))?,
            lm_head,
            cos,
            sin,
            heads: heads / ranks,
            kv_heads: kv_heads / ranks,
            head_dim,
            max_len,
            device,
            comm,
            q_prescaled,
            fused_attention: true,
            flash_prompts: true,
            rope_interleaved: false,
            eps: config.rms_norm_eps as f32,
            cache_dtype: DType::F32,
            dtype: vb.dtype(),
            native_tables: None,
            architecture: None,
        })
    }

    /// The model of a GGUF file (`content` read from `reader`; llama.cpp's tensor names and
    /// metadata) on `device`, with a cache of `max_len` positions: any [`Architecture`]
    /// (`general.architecture`; another is an [`crate::UnsupportedArchitecture`] error). The
    /// projections and the head stay quantized; the token embedding stays in its blocks, each
    /// looked-up row dequantized; norms and biases are dequantized to f32, and activations run
    /// in f32, as in candle-transformers' `quantized_*` models.
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        device: &Device,
        max_len: usize,
    ) -> Result<Self> {
        Self::from_gguf_with_progress(content, reader, device, max_len, &mut |_, _| {})
    }

    /// [`StaticLlama::from_gguf`], calling `progress(layers loaded, layers)` as each layer
    /// reaches the device.
    pub fn from_gguf_with_progress<R: std::io::Read + std::io::Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        device: &Device,
        max_len: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let hp = GgufHyperParams::read(content, reader)?;
        Self::from_tensors(
            hp,
            TensorReader::new(content, reader),
            device,
            max_len,
            progress,
        )
    }

    /// [`StaticLlama::from_gguf`] out of the file `content` was read from, each tensor read by
    /// several threads at once: the fastest load.
    pub fn from_gguf_file(
        content: &gguf_file::Content,
        file: &std::fs::File,
        device: &Device,
        max_len: usize,
    ) -> Result<Self> {
        Self::from_gguf_file_with_progress(content, file, device, max_len, &mut |_, _| {})
    }

    /// [`StaticLlama::from_gguf_file`], calling `progress(layers loaded, layers)` as each layer
    /// reaches the device.
    pub fn from_gguf_file_with_progress(
        content: &gguf_file::Content,
        file: &std::fs::File,
        device: &Device,
        max_len: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let hp = GgufHyperParams::read(content, &mut &*file)?;
        let tensors = TensorReader::from_file(content, file);
        Self::from_tensors(hp, tensors, device, max_len, progress)
    }

    fn from_tensors<R: std::io::Read + std::io::Seek>(
        hp: GgufHyperParams,
        mut gguf: TensorReader<'_, R>,
        device: &Device,
        max_len: usize,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let arch = hp.architecture;
        if let Some(context) = hp.context {
            if max_len > context {
                candle_core::bail!("static llama: max_len {max_len} over the context of {context}");
            }
        }
        if max_len == 0 {
            candle_core::bail!("static llama: a cache of 0 positions");
        }
        let (heads, kv_heads, head_dim, hidden, eps) =
            (hp.heads, hp.kv_heads, hp.head_dim, hp.hidden, hp.rms_eps);
        let norm = |w: QTensor| -> Result<(RmsNorm, Tensor)> {
            let w = w.dequantize(device)?;
            Ok((RmsNorm::new(w.clone(), eps), w))
        };
        let f32_tensor = |gguf: &mut TensorReader<'_, R>, name: &str| -> Result<Tensor> {
            gguf.tensor(name, device)?
                .dequantize(device)?
                .to_dtype(DType::F32)
        };
        let embed_q = Arc::new(gguf.tensor("token_embd.weight", device)?);
        if embed_q.shape().dims2()?.1 != hidden {
            candle_core::bail!(
                "static llama: token_embd.weight is {:?}, not (vocab, {hidden})",
                embed_q.shape()
            );
        }
        // tied to the embedding where the file has no output matrix
        let lm_head = if gguf.has("output.weight") {
            Arc::new(gguf.tensor("output.weight", device)?)
        } else {
            embed_q.clone()
        };
        let mut blocks = Vec::with_capacity(hp.layers);
        for n in 0..hp.layers {
            let name = |part: &str| format!("blk.{n}.{part}.weight");
            let proj = |gguf: &mut TensorReader<'_, R>, part: &str| -> Result<Proj> {
                let w = gguf.tensor(&name(part), device)?;
                Ok(Proj::Quantized(QMatMul::from_qtensor(w)?))
            };
            let o = proj(&mut gguf, "attn_output")?;
            let qkv = if arch.packed_projections() {
                vec![proj(&mut gguf, "attn_qkv")?]
            } else {
                stacked_gguf(
                    &mut gguf,
                    &[name("attn_q"), name("attn_k"), name("attn_v")],
                    device,
                )?
            };
            let ffn = match hp.experts {
                Some((_, used)) => {
                    let mut experts = |part: &str| -> Result<Arc<QTensor>> {
                        Ok(Arc::new(gguf.tensor(&name(part), device)?))
                    };
                    let (gate_experts, up_experts, down_experts) = (
                        experts("ffn_gate_exps")?,
                        experts("ffn_up_exps")?,
                        experts("ffn_down_exps")?,
                    );
                    let router = f32_tensor(&mut gguf, &name("ffn_gate_inp"))?;
                    FeedForward::Experts(FusedMoeGGUF {
                        gate: Linear::new(router, None),
                        gate_experts,
                        up_experts,
                        down_experts,
                        act: candle_nn::Activation::Silu,
                        norm_topk_prob: true,
                        num_experts_per_tok: used,
                        dtype: DType::F32,
                    })
                }
                None => {
                    let down = proj(&mut gguf, "ffn_down")?;
                    let gate_up = if arch.packed_projections() {
                        vec![proj(&mut gguf, "ffn_up")?]
                    } else {
                        stacked_gguf(&mut gguf, &[name("ffn_gate"), name("ffn_up")], device)?
                    };
                    FeedForward::Gated { gate_up, down }
                }
            };
            // biases follow the products: one joined by rows where q/k/v are one product
            let qkv_bias = if arch.qkv_bias() {
                let parts = ["attn_q", "attn_k", "attn_v"]
                    .map(|p| f32_tensor(&mut gguf, &format!("blk.{n}.{p}.bias")))
                    .into_iter()
                    .collect::<Result<Vec<_>>>()?;
                match qkv.len() {
                    1 => vec![Tensor::cat(&parts, 0)?],
                    _ => parts,
                }
            } else {
                Vec::new()
            };
            let qk_norm = if arch.qk_norm() {
                let q = f32_tensor(&mut gguf, &name("attn_q_norm"))?;
                let k = f32_tensor(&mut gguf, &name("attn_k_norm"))?;
                Some((RmsNorm::new(q, eps), RmsNorm::new(k, eps)))
            } else {
                None
            };
            let (input_norm, input_w) = norm(gguf.tensor(&name("attn_norm"), device)?)?;
            let (post_norm, post_w) = norm(gguf.tensor(&name("ffn_norm"), device)?)?;
            // the fused decode step computes the plain layer: no biases, no q/k norms, a gated
            // MLP
            let fused = match &ffn {
                FeedForward::Gated { gate_up, down }
                    if qkv_bias.is_empty() && qk_norm.is_none() =>
                {
                    FusedLayer::of(&qkv, gate_up, down, (&input_w, &post_w))
                }
                _ => None,
            };
            blocks.push(Layer {
                fused,
                input_norm,
                qkv,
                qkv_bias,
                qk_norm,
                o,
                post_norm,
                ffn,
            });
            progress(n + 1, hp.layers);
        }
        let inv_freq = inverse_frequencies(head_dim, hp.rope_base, &hp.rope_scaling)?;
        let (cos, sin) = rotary_tables(&inv_freq, max_len, device)?;
        Ok(Self {
            embed: TokenEmbedding::Quantized(embed_q),
            layers: blocks,
            norm: norm(gguf.tensor("output_norm.weight", device)?)?.0,
            eps: eps as f32,
            lm_head: Proj::Quantized(QMatMul::from_arc(lm_head)?),
            cos,
            sin,
            heads,
            kv_heads,
            head_dim,
            max_len,
            device: device.clone(),
            comm: None,
            q_prescaled: false,
            fused_attention: true,
            flash_prompts: true,
            rope_interleaved: arch.rope_interleaved(),
            cache_dtype: DType::F32,
            dtype: DType::F32,
            native_tables: None,
            architecture: Some(arch),
        })
    }

    /// Attention as separate ops (a gemm over every cached position, an additive mask, a
    /// softmax and a second gemm) instead of one kernel: the form the fused kernel replaced,
    /// kept for comparison.
    pub fn with_unfused_attention(mut self) -> Self {
        self.fused_attention = false;
        self
    }

    /// Prompts' attention through flash attention (`true`, the default) or as the products
    /// over the cache (`false`: the form before flash attention, for comparisons).
    pub fn with_flash_prompts(mut self, on: bool) -> Self {
        self.flash_prompts = on;
        self
    }

    /// The KV cache in `dtype`: f32 (the default), or f16/bf16 (as llama.cpp's f16 cache:
    /// half the bytes, keys and values rounded as they are stored; scores and sums in f32).
    /// A 16-bit cache in the dtype of a 16-bit model (as candle-transformers' llama keeps it)
    /// also keeps a decode step's q, k and v in that dtype: roped in f32 arithmetic and
    /// rounded to it, the attention's output in it, no casts around the attention.
    pub fn with_cache_dtype(mut self, dtype: DType) -> Result<Self> {
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            candle_core::bail!("static llama: a KV cache of {dtype:?}: f32, f16 or bf16")
        }
        self.cache_dtype = dtype;
        self.native_tables = if dtype == self.dtype && dtype != DType::F32 {
            Some((self.cos.to_dtype(dtype)?, self.sin.to_dtype(dtype)?))
        } else {
            None
        };
        Ok(self)
    }

    /// The KV cache's dtype.
    pub fn cache_dtype(&self) -> DType {
        self.cache_dtype
    }

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

    /// What a sequence's attention at `positions` needs besides the layer: the mask over its
    /// cache where attention runs as products, the rotary rows and the scatter's index where
    /// the ops rope and write the cache.
    fn attention_inputs<'s>(
        &self,
        state: &'s DecodeState,
        positions: &'s Tensor,
    ) -> Result<AttentionInputs<'s>> {
        let (kv_heads, hd, max) = (self.kv_heads, self.head_dim, self.max_len);
        let t = positions.dim(0)?;
        // A prompt's attention as matrix products over the cache (the BLAS, every query of a
        // kv head in one product); a few tokens' through `cached_attention`, one block a query
        // row, made for decode (8B, 512-token prompt: 6924 tokens/s through it against 10484
        // for quantized_llama's products; bench/results/2026-11-26-h100-gguf-8b-second.md).
        let gemm_attention =
            !self.device.is_rocm() || !self.fused_attention || t >= PROMPT_GEMM_ATTENTION_FROM;
        // A prompt on ROCm: flash attention where the cache is 16-bit, or where an f32 cache's
        // scores would be large. Its positions follow the filled ones (`prefill` builds them
        // so; every other caller steps one token).
        let f32_scores = self.heads * t * max * DType::F32.size_in_bytes();
        let flash = (self.device.is_rocm()
            && self.fused_attention
            && self.flash_prompts
            && t >= PROMPT_GEMM_ATTENTION_FROM
            && (self.cache_dtype != DType::F32 || f32_scores >= FLASH_F32_SCORES_FROM))
            .then_some(state.filled + t);
        let mask = if !gemm_attention || flash.is_some() {
            None
        } else {
            // Cached position j is visible from the token at position p when j <= p.
            let visible = state
                .positions
                .reshape((1, max))?
                .broadcast_as((t, max))?
                .le(&positions.reshape((t, 1))?.broadcast_as((t, max))?)?;
            Some(visible.where_cond(
                &state.zeros.broadcast_as((t, max))?,
                &state.minus_inf.broadcast_as((t, max))?,
            )?)
        };
        // Without a mask (a few tokens), one stacked q/k/v product a layer and no collective,
        // `rope_kv_write` ropes and writes the cache; else the ops below, with the rotary rows
        // of the positions and the scatter's index (each token's position at every element of
        // its `[1, kv, 1, hd]`).
        let written = mask.is_none()
            && flash.is_none()
            && self.comm.is_none()
            && self
                .layers
                .iter()
                .all(|l| l.qkv.len() == 1 && l.qk_norm.is_none());
        let ops = if written {
            None
        } else {
            Some(OpsInputs {
                cos: self.cos.index_select(positions, 0)?,
                sin: self.sin.index_select(positions, 0)?,
                slot: positions
                    .reshape((1, 1, t, 1))?
                    .broadcast_as((1, kv_heads, t, hd))?
                    .contiguous()?,
            })
        };
        Ok(AttentionInputs {
            state,
            positions,
            t,
            mask,
            flash,
            ops,
        })
    }

    /// Layer `n`'s attention for one sequence from its q/k/v products `qkv` (`[1, T, ..]`,
    /// one stacked or three): q and k roped, k and v written into the sequence's cache, and
    /// the attention's output as `[1, T, heads * hd]` in `dtype`.
    fn attend(
        &self,
        layer: &Layer,
        n: usize,
        qkv: Vec<Tensor>,
        inputs: &AttentionInputs<'_>,
        dtype: DType,
    ) -> Result<Tensor> {
        let (heads, kv_heads, hd, max) = (self.heads, self.kv_heads, self.head_dim, self.max_len);
        let group = heads / kv_heads;
        let (state, t) = (inputs.state, inputs.t);
        let scale = 1.0 / (hd as f64).sqrt();
        // q, k, v as `[1, heads, T, hd]` in f32 (attention runs in f32, as the llama's
        // does), or with `native_tables` in the model's dtype (scores and sums in f32)
        let q = match &inputs.ops {
            None => {
                let qkv = qkv.into_iter().next().ok_or_else(|| {
                    candle_core::Error::Msg("static llama: no q/k/v product".into())
                })?;
                let qkv = if self.native_tables.is_some() {
                    qkv
                } else {
                    qkv.to_dtype(DType::F32)?
                };
                self.rope_kv_write(&qkv, inputs.positions, (&state.k[n], &state.v[n]))?
            }
            Some(ops) => {
                let (q, k, v) = self.roped_qkv(layer, &qkv, ops, t)?;
                state.k[n].scatter_set(&ops.slot, &k.to_dtype(self.cache_dtype)?, 2)?;
                state.v[n].scatter_set(&ops.slot, &v.to_dtype(self.cache_dtype)?, 2)?;
                q
            }
        };
        let y = match (&inputs.mask, inputs.flash) {
            // the filled positions in the cache's dtype (f32 with an f32 cache), causal: query
            // i of the prompt sits at position len - T + i; kv heads read in place
            (_, Some(len)) => {
                let cached = |c: &Tensor| c.narrow(2, 0, len)?.transpose(1, 2);
                let q = q.to_dtype(self.cache_dtype)?.transpose(1, 2)?;
                let scale = if self.q_prescaled { 1.0 } else { scale as f32 };
                flash_attn(
                    &q,
                    &cached(&state.k[n])?,
                    &cached(&state.v[n])?,
                    scale,
                    true,
                )?
                .transpose(1, 2)?
            }
            // Query head h reads kv head h / group, as the llama's repeat_kv has it.
            (None, None) => cached_attention(
                &q,
                &state.k[n],
                &state.v[n],
                CacheMask::Positions(inputs.positions),
                if self.q_prescaled { 1.0 } else { scale as f32 },
            )?,
            (Some(mask), None) => {
                let q = q.reshape((1, kv_heads, group * t, hd))?;
                // the gemms in f32 (a 16-bit cache widened: the values it stored)
                let scores = q.matmul(&state.k[n].to_dtype(DType::F32)?.t()?)?;
                let scores = if self.q_prescaled {
                    scores
                } else {
                    (scores * scale)?
                };
                let scores = scores
                    .reshape((1, kv_heads, group, t, max))?
                    .broadcast_add(mask)?;
                candle_nn::ops::softmax_last_dim(&scores)?
                    .reshape((1, kv_heads, group * t, max))?
                    .matmul(&state.v[n].to_dtype(DType::F32)?)?
            }
        };
        y.to_dtype(dtype)?
            .reshape((1, heads, t, hd))?
            .transpose(1, 2)?
            .reshape((1, t, heads * hd))
    }

    /// A layer's stacked q/k/v output at `positions` through `rope_kv_write`: k roped and v
    /// written into the layer's caches, q roped returned as `[1, heads, T, hd]` (f32, or the
    /// model's dtype with `native_tables`); with a cache a token (`[T, ..]`, T sequences),
    /// `[T, heads, 1, hd]`.
    fn rope_kv_write(
        &self,
        qkv: &Tensor,
        positions: &Tensor,
        (k_cache, v_cache): (&Tensor, &Tensor),
    ) -> Result<Tensor> {
        let (cos, sin) = match &self.native_tables {
            Some((cos, sin)) if qkv.dtype() == cos.dtype() => (cos, sin),
            _ => (&self.cos, &self.sin),
        };
        rope_kv_write(
            qkv,
            cos,
            sin,
            positions,
            k_cache,
            v_cache,
            self.heads,
            self.rope_interleaved,
        )
    }

    /// A layer's q, k and v in f32 as `[1, heads, T, hd]`, q and k roped by the ops: one cast
    /// of the stacked output, q and k roped together; views for one token, copies for a prompt.
    fn roped_qkv(
        &self,
        layer: &Layer,
        outputs: &[Tensor],
        ops: &OpsInputs,
        t: usize,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let (heads, kv_heads, hd) = (self.heads, self.kv_heads, self.head_dim);
        let rope = |x: &Tensor| {
            if self.rope_interleaved {
                candle_nn::rotary_emb::rope_i(x, &ops.cos, &ops.sin)
            } else {
                candle_nn::rotary_emb::rope(x, &ops.cos, &ops.sin)
            }
        };
        // `[1, T, n * hd]` as `[1, n, T, hd]`
        let split_heads = |x: &Tensor, n: usize| -> Result<Tensor> {
            x.reshape((1, t, n, hd))?.transpose(1, 2)?.contiguous()
        };
        // q and k normed per head (qwen3) before the rotary embedding
        let normed = |x: Tensor, which: usize| -> Result<Tensor> {
            match &layer.qk_norm {
                Some(norms) => [&norms.0, &norms.1][which].forward(&x),
                None => Ok(x),
            }
        };
        match outputs {
            [qkv] => {
                let qkv = qkv.to_dtype(DType::F32)?;
                let part = |from: usize, n: usize| -> Result<Tensor> {
                    split_heads(&qkv.narrow(2, from * hd, n * hd)?, n)
                };
                let v = part(heads + kv_heads, kv_heads)?;
                if layer.qk_norm.is_some() {
                    let q = rope(&normed(part(0, heads)?, 0)?)?;
                    let k = rope(&normed(part(heads, kv_heads)?, 1)?)?;
                    return Ok((q, k, v));
                }
                let qk = rope(&part(0, heads + kv_heads)?)?;
                Ok((qk.narrow(1, 0, heads)?, qk.narrow(1, heads, kv_heads)?, v))
            }
            [q, k, v] => {
                let f32_heads = |x: &Tensor, n: usize| -> Result<Tensor> {
                    split_heads(&x.to_dtype(DType::F32)?, n)
                };
                Ok((
                    rope(&normed(f32_heads(q, heads)?, 0)?)?,
                    rope(&normed(f32_heads(k, kv_heads)?, 1)?)?,
                    f32_heads(v, kv_heads)?,
                ))
            }
            _ => candle_core::bail!("static llama: q/k/v as one or three projections"),
        }
    }

    /// One token through the model with GGUF projections, in 9 launches a layer where the ops'
    /// form takes 19: each rms norm (the residual add before it folded in) writes the q8
    /// activations the next mat-vec reads; q/k/v and gate/up are one mat-vec each; the rotary
    /// embedding writes k and v into the cache and q for the attention, which combines its
    /// runs in its own launch; o quantizes its input in its own blocks; the gated MLP writes
    /// the down projection's activations. The arithmetic is the ops' (the q8 bytes those would
    /// quantize), to the rounding of the norms' sums of squares. (The norms in the o and down
    /// projections' last block instead, 6 launches a layer, measured 1-2.5% slower:
    /// bench/results/2026-11-25-h100-gguf-8b-norms-ab.md.)
    ///
    /// `tokens` (u32 `[B, 1]`) are B sequences' tokens at `positions` (u32 `[B]`), each over
    /// its own cache (`caches`: a layer's `[B, kv_heads, max_len, head_dim]`); the logits are
    /// `[B, vocab]`.
    pub(crate) fn forward_fused(
        &self,
        (k_caches, v_caches): (&[Tensor], &[Tensor]),
        tokens: &Tensor,
        positions: &Tensor,
    ) -> Result<Tensor> {
        use candle_core::quantized::rocm::{matmul_q8, rms_norm_q8, swiglu_q8};
        let (heads, hd) = (self.heads, self.head_dim);
        let scale = if self.q_prescaled {
            1.0
        } else {
            1.0 / (hd as f32).sqrt()
        };
        let b = tokens.dim(0)?;
        let mut x = self.embed.forward(tokens)?; // [B, 1, hidden]
                                                 // the last sublayer's output, added to x by the next norm
        let mut pending: Option<Tensor> = None;
        for (n, layer) in self.layers.iter().enumerate() {
            let Some(f) = &layer.fused else {
                candle_core::bail!("static llama: layer {n} has no fused form")
            };
            let norm = |x: &Tensor, pending: Option<&Tensor>, w: &Tensor, next: &QTensor| {
                // rms_norm_q8 norms its first operand plus the residual
                match pending {
                    Some(p) => rms_norm_q8(p, Some(x), w, self.eps, next),
                    None => rms_norm_q8(x, None, w, self.eps, next),
                }
            };
            let (sum, hq) = norm(&x, pending.as_ref(), &f.input_norm, &f.qkv)?;
            if let Some(sum) = sum {
                x = sum;
            }
            let qkv = matmul_q8(&f.qkv, &hq)?;
            let (k_cache, v_cache) = (&k_caches[n], &v_caches[n]);
            // [B, heads, 1, hd]: each sequence's query at its own position
            let q = self.rope_kv_write(&qkv, positions, (k_cache, v_cache))?;
            let y = cached_attention(&q, k_cache, v_cache, CacheMask::Positions(positions), scale)?
                .reshape((b, 1, heads * hd))?;
            let o = layer.o.forward(&y)?;
            let (sum, hg) = norm(&x, Some(&o), &f.post_norm, &f.gate_up)?;
            if let Some(sum) = sum {
                x = sum;
            }
            let gate_up = matmul_q8(&f.gate_up, &hg)?;
            let hd_q8 = swiglu_q8(&gate_up, &f.down)?;
            pending = Some(matmul_q8(&f.down, &hd_q8)?);
        }
        let (_, h) = add_norm(x, pending, &self.norm)?;
        let logits = self.lm_head.forward(&h)?;
        let vocab = logits.dim(D::Minus1)?;
        logits.reshape((b, vocab))
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

impl DecodeState {
    /// `sampler`'s token from a step's logits, written as the next step's input (greedy
    /// samplers keep the step's own token), and counted among the sampler's recent ones.
    pub fn choose(&self, out: &StepOutput, sampler: &mut Sampler) -> Result<u32> {
        let token = if sampler.is_greedy() {
            out.next.to_vec1::<u32>()?[0]
        } else {
            let drawn = sampler.sample(&out.logits)?;
            self.token.slice_set(&drawn.reshape((1, 1))?, 0, 0)?;
            drawn.to_vec1::<u32>()?[0]
        };
        sampler.accept(token);
        Ok(token)
    }

    /// Positions of the cache used so far.
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// Counts one step about to run; an error once the cache is full.
    pub fn advance(&mut self) -> Result<()> {
        if self.filled >= self.max_len {
            candle_core::bail!("static llama: the cache holds {} positions", self.max_len);
        }
        self.filled += 1;
        Ok(())
    }

    /// Forgets every position from `to` on: the next prefill writes from there (what the
    /// cache held past it is masked by position until overwritten).
    pub fn rewind(&mut self, to: usize) {
        self.filled = self.filled.min(to);
    }
}

/// Greedy decoding of one sequence, the prompt in one pass, then a token a step, each token
/// read back: eagerly, or (`captured`) by replaying a decode step captured once (after one
/// eager step, which loads its kernels and fills the pool with the step's block sizes).
pub struct Decoder<'a> {
    model: &'a StaticLlama,
    state: DecodeState,
    captured: bool,
    graph: Option<(candle_core::rocm_backend::RocmGraph, StepOutput)>,
    first_logits: Vec<f32>,
    warm: bool,
}

impl<'a> Decoder<'a> {
    /// A sequence (nothing runs yet; `first` is a placeholder token the prompt replaces).
    pub fn new(model: &'a StaticLlama, first: u32, captured: bool) -> Result<Self> {
        Ok(Self {
            model,
            state: model.new_state(first)?,
            captured,
            graph: None,
            first_logits: Vec::new(),
            warm: false,
        })
    }

    /// Runs `prompt` (whose first token the decoder started with) in one pass; the first
    /// generated token.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<u32> {
        let out = self.model.prefill(&mut self.state, prompt)?;
        self.first_logits = out.logits.to_dtype(DType::F32)?.to_vec1::<f32>()?;
        Ok(out.next.to_vec1::<u32>()?[0])
    }

    /// The next greedy token.
    pub fn next_token(&mut self) -> Result<u32> {
        Ok(self.run_step()?.next.to_vec1::<u32>()?[0])
    }

    /// Runs `prompt` in one pass and draws the first generated token with `sampler` from the
    /// logits on the device (the row is not read back; the prompt's tokens join the sampler's
    /// recent ones first).
    pub fn prefill_sampled(&mut self, prompt: &[u32], sampler: &mut Sampler) -> Result<u32> {
        let out = self.model.prefill(&mut self.state, prompt)?;
        prompt.iter().for_each(|&t| sampler.accept(t));
        self.choose(&out, sampler)
    }

    /// The next token drawn by `sampler` (a step, eager or replayed, then the draw on the
    /// device, which replaces the step's greedy token as the next step's input).
    pub fn next_token_sampled(&mut self, sampler: &mut Sampler) -> Result<u32> {
        let out = self.run_step()?;
        self.choose(&out, sampler)
    }

    /// `sampler`'s token from a step's logits, written as the next step's input; greedy
    /// samplers keep the step's own token.
    fn choose(&mut self, out: &StepOutput, sampler: &mut Sampler) -> Result<u32> {
        self.state.choose(out, sampler)
    }

    /// Positions of the cache used so far.
    pub fn filled(&self) -> usize {
        self.state.filled
    }

    /// Forgets the positions from `to` on (see [`DecodeState::rewind`]).
    pub fn rewind(&mut self, to: usize) {
        self.state.rewind(to)
    }

    /// The model it decodes.
    pub fn model(&self) -> &'a StaticLlama {
        self.model
    }

    /// One step on the token the state holds: eagerly, or (captured) an eager step first, then
    /// the step captured once and replayed.
    fn run_step(&mut self) -> Result<StepOutput> {
        self.state.advance()?;
        if !self.captured || !self.warm {
            self.warm = true;
            return self.model.step(&self.state);
        }
        if self.graph.is_none() {
            let Device::Rocm(rocm) = &self.model.device else {
                candle_core::bail!("static llama: capture needs Device::Rocm");
            };
            let (model, state) = (self.model, &self.state);
            self.graph = Some(rocm.capture(|| model.step(state))?);
        }
        let (graph, out) = self
            .graph
            .as_ref()
            .ok_or_else(|| candle_core::Error::Msg("static llama: no captured step".into()))?;
        graph.replay()?;
        Ok(out.clone())
    }

    /// Teacher forcing: the logits (f32) after `prompt`, then after each of `tokens` but the
    /// last, each fed as the next step's input in place of the greedy token; one vector per
    /// token of `tokens`. `prompt` starts with the decoder's first token.
    pub fn forced_logits(&mut self, prompt: &[u32], tokens: &[u32]) -> Result<Vec<Vec<f32>>> {
        let Some((_, fed)) = tokens.split_last() else {
            return Ok(Vec::new());
        };
        self.prefill(prompt)?;
        let mut out = vec![self.first_logits.clone()];
        for &token in fed {
            let input = Tensor::new(&[[token]], &self.model.device)?;
            self.state.token.slice_set(&input, 0, 0)?;
            let step = self.run_step()?;
            out.push(step.logits.to_dtype(DType::F32)?.to_vec1::<f32>()?);
        }
        Ok(out)
    }

    /// `steps` more replays of the captured step without reading the tokens back (to time
    /// the device's work alone); an error before the step was captured.
    pub fn replay(&mut self, steps: usize) -> Result<()> {
        for _ in 0..steps {
            self.state.advance()?;
            let (graph, _) = self.graph.as_ref().ok_or_else(|| {
                candle_core::Error::Msg("static llama: no captured step to replay".into())
            })?;
            graph.replay()?;
        }
        Ok(())
    }

    /// The logits after the prompt.
    pub fn first_logits(&self) -> &[f32] {
        &self.first_logits
    }
}

/// `steps` greedy tokens after `prompt` and the logits after the prompt.
pub fn greedy(
    model: &StaticLlama,
    prompt: &[u32],
    steps: usize,
    captured: bool,
) -> Result<(Vec<u32>, Vec<f32>)> {
    let first = *prompt
        .first()
        .ok_or_else(|| candle_core::Error::Msg("static llama: empty prompt".into()))?;
    let mut decoder = Decoder::new(model, first, captured)?;
    let mut tokens = vec![decoder.prefill(prompt)?];
    while tokens.len() < steps {
        tokens.push(decoder.next_token()?);
    }
    tokens.truncate(steps);
    Ok((tokens, decoder.first_logits))
}

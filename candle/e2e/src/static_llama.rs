//! candle-transformers' llama with a decode step whose shapes never change, so that the step
//! can be captured once into a device graph and replayed at every position.
//!
//! The same weights (by the same names) as `candle_transformers::models::llama::Llama`; what
//! differs is the decode step's form:
//! - the KV cache is preallocated to `max_len` positions and written in place by a scatter
//!   whose index is a device tensor (the position), not by a concatenation that grows;
//! - the rotary tables are read at the position by `index_select`, not `narrow`;
//! - attention runs over all `max_len` cached positions with an additive mask built on the
//!   device from the position (0 up to it, -inf after), in f32 as the llama does;
//! - the step ends by writing its greedy token and the next position into its own inputs,
//!   so replays advance by themselves.
//!
//! Every kernel argument is then the same at every position: a captured step replays as is.

use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::{embedding, linear_no_bias, rms_norm, Embedding, Linear, RmsNorm, VarBuilder};
use candle_transformers::models::llama::Config;

struct Layer {
    input_norm: RmsNorm,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    post_norm: RmsNorm,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// The model; [`DecodeState`] holds what one sequence owns.
pub struct StaticLlama {
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Linear,
    /// `[max_len, head_dim / 2]` in the model's dtype.
    cos: Tensor,
    sin: Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    max_len: usize,
    device: Device,
}

/// One sequence: its KV cache (f32, `[1, kv_heads, max_len, head_dim]` a layer) and the
/// step's inputs, which each step rewrites in place for the next.
pub struct DecodeState {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    /// u32 `[1, 1]`: the token the next step reads.
    token: Tensor,
    /// u32 `[1]`: its position.
    position: Tensor,
    /// u32 `[max_len]`: 0, 1, ... (the mask's comparison).
    positions: Tensor,
    one: Tensor,
    zeros: Tensor,
    minus_inf: Tensor,
    /// Positions filled so far (host-side bound check).
    filled: usize,
    max_len: usize,
}

/// What one step left on the device: its logits (f32 `[vocab]`) and greedy token (u32 `[1]`).
pub struct StepOutput {
    pub logits: Tensor,
    pub next: Tensor,
}

impl StaticLlama {
    /// Loads the llama's weights from `vb` (the names of candle-transformers' llama) with a
    /// cache of `max_len` positions (at most the config's `max_position_embeddings`).
    pub fn load(vb: VarBuilder<'_>, config: &Config, max_len: usize) -> Result<Self> {
        let device = vb.device().clone();
        let dtype = vb.dtype();
        if max_len == 0 || max_len > config.max_position_embeddings {
            candle_core::bail!(
                "static llama: max_len {max_len} must be in 1..={}",
                config.max_position_embeddings
            );
        }
        let (h, i) = (config.hidden_size, config.intermediate_size);
        let heads = config.num_attention_heads;
        let kv_heads = config.num_key_value_heads;
        let head_dim = h / heads;
        let kv_dim = kv_heads * head_dim;
        let eps = config.rms_norm_eps;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for n in 0..config.num_hidden_layers {
            let vb = vb.pp(format!("model.layers.{n}"));
            let (att, mlp) = (vb.pp("self_attn"), vb.pp("mlp"));
            layers.push(Layer {
                input_norm: rms_norm(h, eps, vb.pp("input_layernorm"))?,
                q: linear_no_bias(h, h, att.pp("q_proj"))?,
                k: linear_no_bias(h, kv_dim, att.pp("k_proj"))?,
                v: linear_no_bias(h, kv_dim, att.pp("v_proj"))?,
                o: linear_no_bias(h, h, att.pp("o_proj"))?,
                post_norm: rms_norm(h, eps, vb.pp("post_attention_layernorm"))?,
                gate: linear_no_bias(h, i, mlp.pp("gate_proj"))?,
                up: linear_no_bias(h, i, mlp.pp("up_proj"))?,
                down: linear_no_bias(i, h, mlp.pp("down_proj"))?,
            });
        }
        let embed = embedding(config.vocab_size, h, vb.pp("model.embed_tokens"))?;
        let lm_head = if config.tie_word_embeddings {
            Linear::new(embed.embeddings().clone(), None)
        } else {
            linear_no_bias(h, config.vocab_size, vb.pp("lm_head"))?
        };
        // The llama's rotary tables: theta_i = base^(-2i/d), angles position * theta_i.
        let inv_freq: Vec<f32> = (0..head_dim)
            .step_by(2)
            .map(|i| 1f32 / config.rope_theta.powf(i as f32 / head_dim as f32))
            .collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, head_dim / 2), &device)?;
        let angles = Tensor::arange(0u32, max_len as u32, &device)?
            .to_dtype(DType::F32)?
            .reshape((max_len, 1))?
            .matmul(&inv_freq)?;
        Ok(Self {
            embed,
            layers,
            norm: rms_norm(h, eps, vb.pp("model.norm"))?,
            lm_head,
            cos: angles.cos()?.to_dtype(dtype)?,
            sin: angles.sin()?.to_dtype(dtype)?,
            heads,
            kv_heads,
            head_dim,
            max_len,
            device,
        })
    }

    /// A new sequence: an empty cache, position 0, token `first`.
    pub fn new_state(&self, first: u32) -> Result<DecodeState> {
        let dev = &self.device;
        let cache = || {
            Tensor::zeros(
                (1, self.kv_heads, self.max_len, self.head_dim),
                DType::F32,
                dev,
            )
        };
        let layers = self.layers.len();
        Ok(DecodeState {
            k: (0..layers).map(|_| cache()).collect::<Result<_>>()?,
            v: (0..layers).map(|_| cache()).collect::<Result<_>>()?,
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
        let (heads, kv_heads, hd) = (self.heads, self.kv_heads, self.head_dim);
        let group = heads / kv_heads;
        let position = &state.position;
        let cos = self.cos.index_select(position, 0)?;
        let sin = self.sin.index_select(position, 0)?;
        // The scatter's index: the position at every element of a `[1, kv, 1, hd]` update.
        let slot = position
            .reshape((1, 1, 1, 1))?
            .broadcast_as((1, kv_heads, 1, hd))?
            .contiguous()?;
        let visible = state.positions.le(&position.broadcast_as(self.max_len)?)?;
        let mask = visible.where_cond(&state.zeros, &state.minus_inf)?;
        let scale = 1.0 / (hd as f64).sqrt();

        let mut x = self.embed.forward(&state.token)?; // [1, 1, hidden]
        for (n, layer) in self.layers.iter().enumerate() {
            let residual = &x;
            let h = layer.input_norm.forward(&x)?;
            let q = layer.q.forward(&h)?.reshape((1, heads, 1, hd))?;
            let k = layer.k.forward(&h)?.reshape((1, kv_heads, 1, hd))?;
            let v = layer.v.forward(&h)?.reshape((1, kv_heads, 1, hd))?;
            let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
            state.k[n].scatter_set(&slot, &k.to_dtype(DType::F32)?, 2)?;
            state.v[n].scatter_set(&slot, &v.to_dtype(DType::F32)?, 2)?;
            // Query heads kv * group + j share kv head kv, as the llama's repeat_kv has it.
            let q = q.to_dtype(DType::F32)?.reshape((1, kv_heads, group, hd))?;
            let scores = (q.matmul(&state.k[n].t()?)? * scale)?;
            let weights = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(&mask)?)?;
            let y =
                weights
                    .matmul(&state.v[n])?
                    .to_dtype(x.dtype())?
                    .reshape((1, 1, heads * hd))?;
            x = (layer.o.forward(&y)? + residual)?;
            let residual = &x;
            let h = layer.post_norm.forward(&x)?;
            let mlp = (candle_nn::ops::silu(&layer.gate.forward(&h)?)? * layer.up.forward(&h)?)?;
            x = (layer.down.forward(&mlp)? + residual)?;
        }
        let logits = self
            .lm_head
            .forward(&self.norm.forward(&x)?)?
            .flatten_all()?
            .to_dtype(DType::F32)?;
        let next = logits.argmax(D::Minus1)?.reshape(1)?;
        state.token.slice_set(&next.reshape((1, 1))?, 0, 0)?;
        state.position.slice_set(&(position + &state.one)?, 0, 0)?;
        Ok(StepOutput { logits, next })
    }

    /// Positions the cache holds.
    pub fn max_len(&self) -> usize {
        self.max_len
    }
}

impl DecodeState {
    /// Counts one step about to run; an error once the cache is full.
    pub fn advance(&mut self) -> Result<()> {
        if self.filled >= self.max_len {
            candle_core::bail!("static llama: the cache holds {} positions", self.max_len);
        }
        self.filled += 1;
        Ok(())
    }

    /// Replaces the token the next step reads (a prompt token), in place.
    pub fn set_token(&self, token: u32) -> Result<()> {
        let dev = self.token.device();
        self.token.slice_set(&Tensor::new(&[[token]], dev)?, 0, 0)
    }
}

/// Greedy decoding of one sequence, a token a step (the prompt too), each token read back:
/// eagerly, or (`captured`) by replaying a decode step captured once after the prompt (whose
/// eager steps load every kernel and fill the pool with the step's block sizes).
pub struct Decoder<'a> {
    model: &'a StaticLlama,
    state: DecodeState,
    captured: bool,
    graph: Option<(candle_core::rocm_backend::RocmGraph, StepOutput)>,
    first_logits: Vec<f32>,
}

impl<'a> Decoder<'a> {
    /// A sequence starting with `first` (nothing runs yet).
    pub fn new(model: &'a StaticLlama, first: u32, captured: bool) -> Result<Self> {
        Ok(Self {
            model,
            state: model.new_state(first)?,
            captured,
            graph: None,
            first_logits: Vec::new(),
        })
    }

    /// Runs `prompt` (whose first token the decoder started with); the first generated token.
    pub fn prefill(&mut self, prompt: &[u32]) -> Result<u32> {
        let mut last = None;
        for (i, _) in prompt.iter().enumerate() {
            self.state.advance()?;
            let out = self.model.step(&self.state)?;
            if let Some(&t) = prompt.get(i + 1) {
                self.state.set_token(t)?;
            }
            last = Some(out);
        }
        let out =
            last.ok_or_else(|| candle_core::Error::Msg("static llama: empty prompt".into()))?;
        self.first_logits = out.logits.to_vec1::<f32>()?;
        Ok(out.next.to_vec1::<u32>()?[0])
    }

    /// The next greedy token.
    pub fn next_token(&mut self) -> Result<u32> {
        self.state.advance()?;
        if !self.captured {
            return Ok(self.model.step(&self.state)?.next.to_vec1::<u32>()?[0]);
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
        Ok(out.next.to_vec1::<u32>()?[0])
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

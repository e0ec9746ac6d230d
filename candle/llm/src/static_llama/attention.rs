//! The attention of a step or a prompt: q, k and v roped and written to the cache, then
//! attention over the cache (one kernel, the ops, or flash attention).

use super::*;

/// Query rows from which the static llama's attention runs as matrix products instead of
/// `cached_attention` (prompts; decode steps are one row).
const PROMPT_GEMM_ATTENTION_FROM: usize = 16;

/// With an f32 cache a prompt's attention runs as matrix products (the faster f32 path) while
/// their f32 scores (`heads x T x max_len`) take less than this; flash attention in f32 beyond,
/// so a long prompt needs no (T x positions) buffer.
const FLASH_F32_SCORES_FROM: usize = 1 << 30;

impl StaticLlama {
    /// What a sequence's attention at `positions` needs besides the layer: the mask over its
    /// cache where attention runs as products, the rotary rows and the scatter's index where
    /// the ops rope and write the cache.
    pub(super) fn attention_inputs<'s>(
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
            && self.layers.iter().all(|l| l.qkv.len() == 1);
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
    pub(super) fn attend(
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
                let qk_norm = layer
                    .qk_norm
                    .as_ref()
                    .map(|(q, k)| (q.weight(), k.weight()));
                self.rope_kv_write(&qkv, inputs.positions, (&state.k[n], &state.v[n]), qk_norm)?
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
    /// `[T, heads, 1, hd]`. `qk_norm` (q's and k's per-head norm weights, qwen3's) norms q's
    /// and k's heads first, in the same launch.
    pub(super) fn rope_kv_write(
        &self,
        qkv: &Tensor,
        positions: &Tensor,
        (k_cache, v_cache): (&Tensor, &Tensor),
        qk_norm: Option<(&Tensor, &Tensor)>,
    ) -> Result<Tensor> {
        let (cos, sin) = match &self.native_tables {
            Some((cos, sin)) if qkv.dtype() == cos.dtype() => (cos, sin),
            _ => (&self.cos, &self.sin),
        };
        // the weights in qkv's dtype (the same tensors where qkv is f32, as the fused step's is)
        let norms = match qk_norm {
            Some((q, k)) => Some((q.to_dtype(qkv.dtype())?, k.to_dtype(qkv.dtype())?)),
            None => None,
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
            norms.as_ref().map(|(q, k)| (q, k, f64::from(self.eps))),
        )
    }

    /// A layer's q, k and v in f32 as `[1, heads, T, hd]`, q and k roped by the ops: one cast
    /// of the stacked output, q and k roped together; views for one token, copies for a prompt.
    pub(super) fn roped_qkv(
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
}

//! The fused decode step of GGUF models on ROCm: norms writing the next product's q8
//! activations, joined q/k/v and gate/up products, the residual adds folded into the norms;
//! routed experts with their routing on the device.

use super::*;

impl StaticLlama {
    /// One token through the model with GGUF projections, in 9 launches a layer where the ops'
    /// form takes 19: each rms norm (the residual add before it folded in) writes the q8
    /// activations the next mat-vec reads; q/k/v and gate/up are one mat-vec each; the rotary
    /// embedding writes k and v into the cache and q for the attention, which combines its
    /// runs in its own launch; o quantizes its input in its own blocks; the gated MLP writes
    /// the down projection's activations. The arithmetic is the ops' (the q8 bytes those would
    /// quantize), to the rounding of the norms' sums of squares. (The norms in the o and down
    /// projections' last block instead, 6 launches a layer, measured 1-2.5% slower:
    /// bench/results/2026-11-25-h100-gguf-8b-norms-ab.md.) Qwen3's per-head q/k norms are the
    /// rotary embedding's (no launch of their own); routed experts (qwen3moe) take the
    /// float norm for the router from the q8 norm's launch and four launches
    /// (`Experts::forward_fused`) for the gated MLP.
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
        use candle_core::quantized::rocm::{
            matmul_q8, rms_norm_q8, rms_norm_q8_and_float, swiglu_q8,
        };
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
            // [B, heads, 1, hd]: each sequence's query at its own position (qwen3's per-head
            // q/k norms in the same launch)
            let qk_norm = f.qk_norm.as_ref().map(|(q, k)| (q, k));
            let q = self.rope_kv_write(&qkv, positions, (k_cache, v_cache), qk_norm)?;
            let y = cached_attention(&q, k_cache, v_cache, CacheMask::Positions(positions), scale)?
                .reshape((b, 1, heads * hd))?;
            let o = layer.o.forward(&y)?;
            match (&f.ffn, &layer.ffn) {
                (FusedFfn::Gated { gate_up, down }, _) => {
                    let (sum, hg) = norm(&x, Some(&o), &f.post_norm, gate_up)?;
                    if let Some(sum) = sum {
                        x = sum;
                    }
                    let gate_up = matmul_q8(gate_up, &hg)?;
                    let hd_q8 = swiglu_q8(&gate_up, down)?;
                    pending = Some(matmul_q8(down, &hd_q8)?);
                }
                (FusedFfn::Experts, FeedForward::Experts(experts)) => {
                    // the router reads the float norm, the experts its q8 form: one launch
                    let (sum, h, hq) = rms_norm_q8_and_float(
                        &o,
                        Some(&x),
                        &f.post_norm,
                        self.eps,
                        &experts.gate_up,
                    )?;
                    if let Some(sum) = sum {
                        x = sum;
                    }
                    pending = Some(experts.forward_fused(&h, &hq)?);
                }
                (FusedFfn::Experts, FeedForward::Gated { .. }) => {
                    candle_core::bail!("static llama: layer {n}'s fused form has no experts")
                }
            }
        }
        let (_, h) = add_norm(x, pending, &self.norm)?;
        let logits = self.lm_head.forward(&h)?;
        let vocab = logits.dim(D::Minus1)?;
        logits.reshape((b, vocab))
    }
}

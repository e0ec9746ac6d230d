//! A mixture-of-experts feed-forward (qwen3moe): a router picks `top` of the experts for each
//! token, whose gated MLPs' outputs are summed with the router's weights. Gate and up are one
//! tensor, joined by rows within each expert (`TensorReader::experts_joined`), so one product
//! computes both.

use super::*;
use candle_core::quantized::rocm::{
    moe_matmul_q8, moe_router_topk, moe_topk, swiglu_q8, Q8Activations, MOE_ROUTER_MAX_EXPERTS,
};
use candle_nn::moe::moe_gemm_gguf;

/// The most tokens whose router runs as one launch (`moe_router_topk`, a block an expert reading
/// every token's row); more take the router's gemm and `moe_topk`.
const FUSED_ROUTER_MAX_TOKENS: usize = 8;

/// A layer's routed experts: the router (f32 `[experts, hidden]`), gate and up joined
/// (`[experts, 2 * ffn, hidden]`, each expert's gate rows then its up rows), down
/// (`[experts, hidden, ffn]`).
pub(super) struct Experts {
    pub(super) router: Linear,
    pub(super) gate_up: Arc<QTensor>,
    pub(super) down: Arc<QTensor>,
    /// Experts a token.
    pub(super) top: usize,
    /// Whether the picked experts' weights are divided by their sum (qwen3moe's
    /// `norm_topk_prob`).
    pub(super) renorm: bool,
}

impl Experts {
    /// The experts' output for `h` (`[B, T, hidden]`) through the ops, as candle-transformers'
    /// `FusedMoeGGUF` computes it (the router's softmax, top-k and renormalization, the pairs
    /// sorted by expert, the products through candle-nn's `moe_gemm_gguf`), gate and up in one
    /// product.
    pub(super) fn forward(&self, h: &Tensor, prefill: bool) -> Result<Tensor> {
        let (b, t, hidden) = h.dims3()?;
        let xs = h.reshape((b * t, hidden))?.to_dtype(DType::F32)?;
        let probs = candle_nn::ops::softmax_last_dim(&self.router.forward(&xs)?)?;
        let ids = probs
            .arg_sort_last_dim(false)?
            .narrow(D::Minus1, 0, self.top)?
            .contiguous()?;
        let mut weights = probs.gather(&ids, D::Minus1)?;
        if self.renorm {
            weights = weights.broadcast_div(&weights.sum_keepdim(D::Minus1)?)?;
        }
        let (expert_ids, sorted) = ids.flatten_all()?.sort_last_dim(true)?;
        let gate_up = moe_gemm_gguf(
            &xs,
            &self.gate_up,
            &None,
            &sorted,
            &expert_ids,
            self.top,
            prefill,
            DType::F32,
        )?;
        let ffn = gate_up.dim(D::Minus1)? / 2;
        let gated = (gate_up.narrow(D::Minus1, ffn, ffn)?
            * candle_nn::ops::silu(&gate_up.narrow(D::Minus1, 0, ffn)?)?)?;
        moe_gemm_gguf(
            &gated,
            &self.down,
            &Some(weights),
            &sorted,
            &expert_ids,
            self.top,
            prefill,
            DType::F32,
        )?
        .reshape((b * t, self.top, hidden))?
        .sum(D::Minus2)?
        .reshape((b, t, hidden))?
        .to_dtype(h.dtype())
    }

    /// The fused decode step's form on ROCm, in four launches where the ops take about twenty:
    /// `h` (the float norm, `[B, 1, hidden]`) for the router and `hq` (its q8 form) for the
    /// experts; the router's product, softmax, top-k and renormalization in one kernel, gate
    /// and up of every picked expert of every token in one product, the gated activations
    /// written in q8 form, and down with its weighted sum over the picked experts in one
    /// product.
    pub(super) fn forward_fused(&self, h: &Tensor, hq: &Q8Activations) -> Result<Tensor> {
        let (b, t, hidden) = h.dims3()?;
        let router = self.router.weight();
        let (ids, weights) = match self.router.bias() {
            // the router's product and the choice in one launch: a decode step's few tokens (a
            // block an expert reads them all), the router in h's dtype
            None if b * t <= FUSED_ROUTER_MAX_TOKENS
                && router.dim(0)? <= MOE_ROUTER_MAX_EXPERTS
                && router.dtype() == h.dtype() =>
            {
                moe_router_topk(&h.reshape((b * t, hidden))?, router, self.top, self.renorm)?
            }
            _ => {
                let logits = self.router.forward(h)?.reshape((b * t, ()))?;
                moe_topk(&logits, self.top, self.renorm)?
            }
        };
        let gate_up = moe_matmul_q8(&self.gate_up, hq, &ids, None)?;
        let gated = swiglu_q8(&gate_up, &self.down)?;
        moe_matmul_q8(&self.down, &gated, &ids, Some(&weights))?.reshape((b, t, hidden))
    }
}

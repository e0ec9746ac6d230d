//! `softmax(q k^T * scale) v` of queries over a key/value cache in one launch, on Candle
//! tensors: the attention of a decode step without a gemm, a mask, a softmax and a second
//! gemm. Grouped-query heads are read in place (no repeated kv heads). No gradient.

use crate::op::BackpropOp;
use crate::{Result, Storage, Tensor};

/// Which cache positions each query of [`cached_attention`] sees.
#[derive(Debug, Clone, Copy)]
pub enum CacheMask<'a> {
    /// Every position.
    None,
    /// The queries are the cache's last positions, each seeing those up to its own.
    Causal,
    /// Query i sees positions `0..=positions[i]` (u32 `[queries]` on the same device, read
    /// there: a cache preallocated to its maximum length and filled up to a position the host
    /// need not know, as a captured decode step has it).
    Positions(&'a Tensor),
}

/// `q` `[batch, heads, queries, head_dim]` over `k` and `v` `[batch, kv_heads, cache_len,
/// head_dim]` (`heads` a multiple of `kv_heads`; query head h reads kv head
/// `h / (heads / kv_heads)`), every tensor on one ROCm device; the output has q's shape and
/// dtype (bf16, f16, f32 or f64; scores and sums in f32 for the 16-bit dtypes). Heads of up
/// to 256 elements.
pub fn cached_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: CacheMask<'_>,
    scale: f32,
) -> Result<Tensor> {
    const OP: &str = "cached_attention";
    let positions = match mask {
        CacheMask::Positions(p) => Some(p),
        _ => None,
    };
    for other in [Some(k), Some(v), positions].into_iter().flatten() {
        if !other.device().same_device(q.device()) {
            return Err(crate::Error::DeviceMismatchBinaryOp {
                lhs: q.device().location(),
                rhs: other.device().location(),
                op: OP,
            }
            .bt());
        }
    }
    let (qs, ql) = q.storage_and_layout();
    let (ks, kl) = k.storage_and_layout();
    let (vs, vl) = v.storage_and_layout();
    let ps = positions.map(|p| p.storage_and_layout());
    let (Storage::Rocm(qs), Storage::Rocm(ks), Storage::Rocm(vs)) = (&*qs, &*ks, &*vs) else {
        return Err(crate::Error::Msg(format!("{OP}: the tensors are not on a ROCm device")).bt());
    };
    let (kl, vl) = (super::layout(kl), super::layout(vl));
    let pl = ps.as_ref().map(|(_, l)| super::layout(l));
    let rocm_mask = match (&ps, &pl) {
        (Some((p, _)), Some(pl)) => match &**p {
            Storage::Rocm(p) => candle_rocm::CacheMask::Positions(p.inner(), pl),
            _ => {
                return Err(crate::Error::Msg(format!(
                    "{OP}: the positions are not on a ROCm device"
                ))
                .bt())
            }
        },
        _ if matches!(mask, CacheMask::Causal) => candle_rocm::CacheMask::Causal,
        _ => candle_rocm::CacheMask::None,
    };
    let out = qs.wrap(qs.inner().cached_attention(
        &super::layout(ql),
        (ks.inner(), &kl),
        (vs.inner(), &vl),
        rocm_mask,
        scale,
    ))?;
    Ok(crate::tensor::from_storage(
        Storage::Rocm(out),
        q.shape().clone(),
        BackpropOp::none(),
        false,
    ))
}

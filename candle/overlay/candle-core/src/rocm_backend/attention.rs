//! `softmax(q k^T * scale) v` of queries over a key/value cache in one launch, on Candle
//! tensors: the attention of a decode step without a gemm, a mask, a softmax and a second
//! gemm. Grouped-query heads are read in place (no repeated kv heads). No gradient.

use crate::op::BackpropOp;
use crate::{Result, Storage, Tensor};

/// Which cache positions each query of [`cached_attention`] sees. With `Positions(p)`, query i
/// sees positions `0..=p[i]` (u32 `[queries]` on the same device, read there: a cache
/// preallocated to its maximum length and filled up to a position the host need not know, as a
/// captured decode step has it); `[batch, queries]` positions give each batch its own
/// (sequences decoding together).
pub type CacheMask<'a> = candle_rocm::AttentionMask<&'a Tensor>;

/// `q` `[batch, heads, queries, head_dim]` over `k` and `v` `[batch, kv_heads, cache_len,
/// head_dim]` (`heads` a multiple of `kv_heads`; query head h reads kv head
/// `h / (heads / kv_heads)`), every tensor on one ROCm device; the output has q's shape and
/// dtype (bf16, f16, f32 or f64; scores and sums in f32 for the 16-bit dtypes). k and v are in
/// q's dtype, or f16/bf16 under f32 queries (a cache of half the bytes). Heads of up to 256
/// elements.
pub fn cached_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: CacheMask<'_>,
    scale: f32,
) -> Result<Tensor> {
    const OP: &str = "cached_attention";
    let positions = mask.positions().copied();
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
            Storage::Rocm(p) => candle_rocm::CacheMask::Positions((p.inner(), pl)),
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

/// A decode step's rotary embedding and cache write in one launch, in place of roping q and k,
/// splitting the heads and scattering k and v into the caches: `qkv` (`[1, t, (heads +
/// 2 kv_heads) * head_dim]`) holds each token's q, k and v heads, token i at `positions[i]`
/// (u32 `[t]`, read on the device); `cos` and `sin` (`[max_len, head_dim / 2]`) are the rotary
/// tables; `k_cache` and `v_cache` (`[1, kv_heads, cache_len, head_dim]`, contiguous) receive
/// k roped and v at the positions, in place. Returns q roped, `[1, heads, t, head_dim]`. With
/// caches of `[t, kv_heads, cache_len, head_dim]` each token is a sequence of its own (a batch's
/// decode step): token i writes cache i, and q comes back as `[t, heads, 1, head_dim]`. Pairs
/// as candle-nn's `rope_i` (`interleaved`) or `rope`. One dtype for all, except that the caches
/// may be f16/bf16 under an f32 `qkv`; every tensor on one ROCm device. No gradient. With
/// `qk_norm` (`(q_weight, k_weight, eps)`, each weight `[head_dim]` in qkv's dtype) q's and k's
/// heads are rms-normed first, as candle-nn's `rms_norm` of each head would (qwen3's per-head
/// norms), in the same launch.
#[allow(clippy::too_many_arguments)]
pub fn rope_kv_write(
    qkv: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    positions: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    heads: usize,
    interleaved: bool,
    qk_norm: Option<(&Tensor, &Tensor, f64)>,
) -> Result<Tensor> {
    const OP: &str = "rope_kv_write";
    let norms: Vec<&Tensor> = qk_norm.iter().flat_map(|(q, k, _)| [*q, *k]).collect();
    for other in [cos, sin, positions, k_cache, v_cache]
        .into_iter()
        .chain(norms.iter().copied())
    {
        if !other.device().same_device(qkv.device()) {
            return Err(crate::Error::DeviceMismatchBinaryOp {
                lhs: qkv.device().location(),
                rhs: other.device().location(),
                op: OP,
            }
            .bt());
        }
    }
    let guards: Vec<_> = [qkv, cos, sin, positions, k_cache, v_cache]
        .into_iter()
        .chain(norms.iter().copied())
        .map(|t| t.storage_and_layout())
        .collect();
    let mut parts = Vec::with_capacity(guards.len());
    for (s, l) in &guards {
        match &**s {
            Storage::Rocm(s) => parts.push((s, super::layout(l))),
            _ => {
                return Err(crate::Error::Msg(format!(
                    "{OP}: the tensors are not on a ROCm device"
                ))
                .bt())
            }
        }
    }
    let part = |i: usize| (parts[i].0.inner(), &parts[i].1);
    let (qs, ql) = &parts[0];
    let out = qs.wrap(qs.inner().rope_kv_write(
        ql,
        part(1),
        part(2),
        part(3),
        part(4),
        part(5),
        heads,
        interleaved,
        qk_norm.map(|(_, _, eps)| (part(6), part(7), eps as f32)),
    ))?;
    let head_dim = k_cache.dims().last().copied().unwrap_or(0);
    let t = positions.elem_count();
    // a cache a token (the dims before the last three, checked below): each token its own
    // sequence
    let dims = k_cache.dims();
    let per_token = dims[..dims.len().saturating_sub(3)]
        .iter()
        .product::<usize>()
        != 1;
    let shape = if per_token {
        (t, heads, 1, head_dim)
    } else {
        (1, heads, t, head_dim)
    };
    Ok(crate::tensor::from_storage(
        Storage::Rocm(out),
        shape,
        BackpropOp::none(),
        false,
    ))
}

//! candle-flash-attn's functions on `Device::Rocm` (rocm-attention's forward kernel): the same
//! names, arguments and semantics, so that a model calls them as it calls candle-flash-attn's.
//! q is `(batch, seq_len_q, num_heads_q, head_size)` and k, v `(batch, seq_len_kv,
//! num_heads_kv, head_size)` (the varlen forms: `(total, num_heads, head_size)` with `seqlens_*`
//! the u32 cumulative lengths, `batch + 1` of them); bf16, f16 or f32; head sizes up to 256.
//! `softmax(q k^T * softmax_scale) v`, grouped- and multi-query heads in place; windows as
//! flash-attn's (`window_size_left = None` with `window_size_right = Some(0)` is causal); ALiBi
//! slopes f32 `(num_heads_q)` or `(batch, num_heads_q)`; a softcap `c` makes each scaled score
//! `c * tanh(s / c)`. No gradient.

use super::fused::{output, rocm, same_device};
use crate::{Result, Tensor};

const OP: &str = "flash_attn";

/// The windows, softcap and slopes of one call.
struct Bias<'a> {
    alibi: Option<&'a Tensor>,
    window_left: Option<usize>,
    window_right: Option<usize>,
    softcap: Option<f32>,
}

/// Packed sequences: cumulative lengths and their bounds.
struct Packed<'a> {
    seqlens_q: &'a Tensor,
    seqlens_k: &'a Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
}

fn run(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    softmax_scale: f32,
    bias: Bias<'_>,
    packed: Option<Packed<'_>>,
) -> Result<Tensor> {
    let mut others = vec![k, v];
    others.extend(bias.alibi);
    if let Some(p) = &packed {
        others.extend([p.seqlens_q, p.seqlens_k]);
    }
    same_device(OP, q, &others)?;
    let (qs, ql) = q.storage_and_layout();
    let (ks, kl) = k.storage_and_layout();
    let (vs, vl) = v.storage_and_layout();
    let alibi = bias.alibi.map(|a| a.storage_and_layout());
    let lens = packed.as_ref().map(|p| {
        (
            p.seqlens_q.storage_and_layout(),
            p.seqlens_k.storage_and_layout(),
        )
    });
    let qr = rocm(OP, &qs)?;
    let (kl, vl) = (super::layout(kl), super::layout(vl));
    let alibi_l = alibi.as_ref().map(|(_, l)| super::layout(l));
    let args = candle_rocm::FlashArgs {
        scale: softmax_scale,
        causal: false,
        window_left: bias.window_left,
        window_right: bias.window_right,
        softcap: bias.softcap,
        alibi: match (&alibi, &alibi_l) {
            (Some((s, _)), Some(l)) => Some((rocm(OP, s)?.inner(), l)),
            _ => None,
        },
    };
    let lens_l = lens
        .as_ref()
        .map(|((_, lq), (_, lk))| (super::layout(lq), super::layout(lk)));
    let varlen = match (&lens, &lens_l, &packed) {
        (Some(((sq, _), (sk, _))), Some((lq, lk)), Some(p)) => Some(candle_rocm::FlashVarLen {
            cu_q: (rocm(OP, sq)?.inner(), lq),
            cu_k: (rocm(OP, sk)?.inner(), lk),
            max_q: p.max_seqlen_q,
            max_k: p.max_seqlen_k,
        }),
        _ => None,
    };
    let out = qr.wrap(qr.inner().flash_attention(
        &super::layout(ql),
        (rocm(OP, &ks)?.inner(), &kl),
        (rocm(OP, &vs)?.inner(), &vl),
        &args,
        varlen.as_ref(),
    ))?;
    Ok(output(out, q))
}

/// The window of a causal call (`causal`) or of none.
fn causal_window(causal: bool) -> Option<usize> {
    causal.then_some(0)
}

/// `softmax(q k^T * softmax_scale) v`, causal or not.
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    flash_attn_windowed(q, k, v, softmax_scale, None, causal_window(causal))
}

/// Each query sees the keys within `window_size_left` before and `window_size_right` after its
/// position (`None`: no limit on that side).
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    flash_attn_alibi_windowed_softcap_opt(
        q,
        k,
        v,
        None,
        softmax_scale,
        (window_size_left, window_size_right),
        None,
    )
}

/// With ALiBi slopes, causal or not.
pub fn flash_attn_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    flash_attn_alibi_windowed(
        q,
        k,
        v,
        alibi_slopes,
        softmax_scale,
        None,
        causal_window(causal),
    )
}

/// With ALiBi slopes and windows.
pub fn flash_attn_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    flash_attn_alibi_windowed_softcap_opt(
        q,
        k,
        v,
        Some(alibi_slopes),
        softmax_scale,
        (window_size_left, window_size_right),
        None,
    )
}

/// With optional ALiBi slopes, windows and a softcap (Gemma's).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    flash_attn_alibi_windowed_softcap_opt(
        q,
        k,
        v,
        alibi_slopes,
        softmax_scale,
        (window_size_left, window_size_right),
        Some(softcap),
    )
}

fn flash_attn_alibi_windowed_softcap_opt(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi: Option<&Tensor>,
    softmax_scale: f32,
    (window_left, window_right): (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> Result<Tensor> {
    let bias = Bias {
        alibi,
        window_left,
        window_right,
        softcap,
    };
    run((q, k, v), softmax_scale, bias, None)
}

/// Packed sequences of variable lengths (`seqlens_q`, `seqlens_k`: u32 cumulative lengths),
/// causal or not.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    flash_attn_varlen_windowed(
        q,
        k,
        v,
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        None,
        causal_window(causal),
    )
}

/// Packed sequences with windows.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    flash_attn_varlen_alibi_windowed_softcap_opt(
        (q, k, v),
        None,
        (seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k),
        softmax_scale,
        (window_size_left, window_size_right),
        None,
    )
}

/// Packed sequences with ALiBi slopes, causal or not.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    flash_attn_varlen_alibi_windowed_softcap_opt(
        (q, k, v),
        Some(alibi_slopes),
        (seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k),
        softmax_scale,
        (None, causal_window(causal)),
        None,
    )
}

/// Packed sequences with ALiBi slopes and windows.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    flash_attn_varlen_alibi_windowed_softcap_opt(
        (q, k, v),
        Some(alibi_slopes),
        (seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k),
        softmax_scale,
        (window_size_left, window_size_right),
        None,
    )
}

/// Packed sequences with optional ALiBi slopes, windows and a softcap.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    flash_attn_varlen_alibi_windowed_softcap_opt(
        (q, k, v),
        alibi_slopes,
        (seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k),
        softmax_scale,
        (window_size_left, window_size_right),
        Some(softcap),
    )
}

fn flash_attn_varlen_alibi_windowed_softcap_opt(
    qkv: (&Tensor, &Tensor, &Tensor),
    alibi: Option<&Tensor>,
    (seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k): (&Tensor, &Tensor, usize, usize),
    softmax_scale: f32,
    (window_left, window_right): (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> Result<Tensor> {
    let bias = Bias {
        alibi,
        window_left,
        window_right,
        softcap,
    };
    let packed = Packed {
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    };
    run(qkv, softmax_scale, bias, Some(packed))
}

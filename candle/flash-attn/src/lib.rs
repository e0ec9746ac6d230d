//! candle-flash-attn 0.11.1's public functions on `Device::Rocm`, with its names, arguments and
//! semantics: a model that calls `candle_flash_attn::flash_attn(..)` runs on a ROCm device by
//! depending on this crate under candle-flash-attn's name
//! (`candle-flash-attn = { package = "candle-flash-attn-rocm", .. }`), as the patched
//! candle-transformers does for its `flash-attn` feature.
//!
//! q is `(batch, seq_len_q, num_heads_q, head_size)` and k, v `(batch, seq_len_kv,
//! num_heads_kv, head_size)`; the varlen forms take `(total, num_heads, head_size)` with
//! `seqlens_q` / `seqlens_k` the u32 cumulative lengths (`batch + 1`). bf16 and f16 run on the
//! matrix units (MFMA, WMMA; mma.sync on the nvidia platform); f32 runs too (a slower kernel
//! that candle-flash-attn does not have). Head sizes up to 256, grouped- and multi-query heads
//! in place, windows as flash-attn's, ALiBi slopes f32 `(num_heads_q)` or
//! `(batch, num_heads_q)`, softcap. Forward only. Tensors on another device are an error that
//! names the device.

pub use candle_core::rocm_backend::flash_attention::{
    flash_attn, flash_attn_alibi, flash_attn_alibi_windowed, flash_attn_alibi_windowed_softcap,
    flash_attn_varlen, flash_attn_varlen_alibi, flash_attn_varlen_alibi_windowed,
    flash_attn_varlen_alibi_windowed_softcap, flash_attn_varlen_windowed, flash_attn_windowed,
};

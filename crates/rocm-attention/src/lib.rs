//! Forward attention over whole sequences without a (seq x seq) buffer (flash attention):
//! `softmax(q k^T * scale + bias) v` for q `[batch, seq_q, heads, head_dim]` and k, v
//! `[batch, seq_k, kv_heads, head_dim]` (Candle's layout, as candle-flash-attn takes it), or
//! packed sequences of variable lengths (`[tokens, heads, head_dim]` with cumulative lengths).
//! Grouped- and multi-query heads are read in place (query head h reads kv head
//! `h / (heads / kv_heads)`), causal and sliding windows, ALiBi slopes and a softcap as
//! flash-attn defines them (see [`FlashOptions`]). bf16, f16 and f32; the softmax and the sums in
//! f32; head dims up to 256.
//!
//! Two kernels (`flash_attention.hip`, see [`FlashKernel`]): bf16 and f16 run on the matrix
//! units where the device has them (compat.h's tile operation: mma.sync, MFMA, WMMA), 64 query
//! rows a block with key and value tiles in shared memory; f32, and devices without matrix
//! units, take the portable form, a warp a query row.
//!
//! A decode step's attention over a key/value cache is [`cached`]: [`cached_attention`] (one
//! launch for the step's queries over the cache) and [`rope_kv_write`] (the step's rotary
//! embedding and cache write in one launch).

pub mod cached;

pub use cached::{
    cached_attention, cached_attention_via, rope_kv_write, AttentionMask, AttentionPath, KvCache,
    QkNorm, GROUPED_PARTIAL_BYTES,
};
pub use rocm_device::{Buffer, DType, Device, Error, Layout, Operand, Result};
use rocm_device::{LaunchConfig, Platform, MAX_GRID_YZ};
use rocm_elementwise::OperandCopy;
use rocm_kernels::flash_attention as abi;

/// What each query sees and how its scores are made, as flash-attn has it. Query i of a
/// sequence of `len_q` queries over `len_k` keys sits at key position `p = i + len_k - len_q`
/// (the queries are the keys' last positions) and sees keys j with
/// `p - window_left <= j <= p + window_right` (`None`: no limit on that side; `causal` sets the
/// right window to 0). Its score for key j is `q.k_j * scale`, with a softcap c
/// `c * tanh(q.k_j * scale / c)`, with ALiBi minus `slope * |p - j|` (slopes f32 `[heads]` or
/// `[batch, heads]`). A query that sees no key gets zeros.
#[derive(Debug, Clone, Copy)]
pub struct FlashOptions<'a> {
    pub scale: f32,
    pub causal: bool,
    pub window_left: Option<usize>,
    pub window_right: Option<usize>,
    pub softcap: Option<f32>,
    pub alibi: Option<Operand<'a>>,
}

impl FlashOptions<'_> {
    /// Plain attention with `scale` (no mask, no bias).
    pub fn new(scale: f32) -> Self {
        FlashOptions {
            scale,
            causal: false,
            window_left: None,
            window_right: None,
            softcap: None,
            alibi: None,
        }
    }
}

/// Sequences of variable lengths packed one after another: sequence b's queries are rows
/// `cu_q[b] .. cu_q[b + 1]` of q and its keys rows `cu_k[b] .. cu_k[b + 1]` of k and v (u32
/// `[batch + 1]`, from 0 to the rows' count, non-decreasing); `max_q` and `max_k` bound the
/// lengths (as flash-attn's `max_seqlen_q` / `max_seqlen_k`).
#[derive(Debug, Clone, Copy)]
pub struct VarLen<'a> {
    pub cu_q: Operand<'a>,
    pub cu_k: Operand<'a>,
    pub max_q: usize,
    pub max_k: usize,
}

const OP: &str = "flash_attention";

/// Which kernel runs a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlashKernel {
    /// The tiled form for bf16 and f16 where the device has matrix units, else the portable.
    #[default]
    Auto,
    /// A warp a query row, no matrix units: every dtype, every device (the reference form).
    Portable,
    /// The tiled form on the matrix units: bf16 and f16 only, an error elsewhere.
    Tiled,
}

fn shape_error(detail: String) -> Error {
    Error::ShapeMismatch { op: OP, detail }
}

/// The forward attention of q over k and v (see the crate's text): q, k and v of one dtype
/// (bf16, f16 or f32), `[batch, seq, heads, head_dim]` each, or with `varlen`
/// `[tokens, heads, head_dim]`; the output is a new contiguous buffer of q's shape and dtype.
/// Every bad shape, dtype, head dim, window or length is a typed error. With `varlen` the
/// cumulative lengths are read back and checked first (a synchronising copy).
pub fn flash_attention(
    device: &Device,
    qkv: (Operand<'_>, Operand<'_>, Operand<'_>),
    options: &FlashOptions<'_>,
    varlen: Option<&VarLen<'_>>,
) -> Result<Buffer> {
    flash_attention_with(device, qkv, options, varlen, FlashKernel::Auto)
}

/// [`flash_attention`] on the kernel `kernel` names (`Tiled` on f32 or on a device without
/// matrix units is an error).
pub fn flash_attention_with(
    device: &Device,
    (q, k, v): (Operand<'_>, Operand<'_>, Operand<'_>),
    options: &FlashOptions<'_>,
    varlen: Option<&VarLen<'_>>,
    kernel: FlashKernel,
) -> Result<Buffer> {
    let dtype = q.dtype;
    if !matches!(dtype, DType::BF16 | DType::F16 | DType::F32) {
        return Err(Error::UnsupportedDType { op: OP, dtype });
    }
    for (name, x) in [("k", &k), ("v", &v)] {
        if x.dtype != dtype {
            return Err(Error::DTypeMismatch {
                op: OP,
                detail: format!("q {dtype}, {name} {}", x.dtype),
            });
        }
    }
    if k.layout.dims != v.layout.dims {
        return Err(shape_error(format!(
            "k has dims {:?}, v {:?}",
            k.layout.dims, v.layout.dims
        )));
    }
    // (batch, seq_q, seq_k, heads, kv_heads, head_dim)
    let (batch, seq_q, seq_k, heads, kv_heads, head_dim) = match varlen {
        None => match (q.layout.dims.as_slice(), k.layout.dims.as_slice()) {
            (&[b, sq, h, d], &[bk, sk, hk, dk]) if b == bk && d == dk => (b, sq, sk, h, hk, d),
            _ => {
                return Err(shape_error(format!(
                "q {:?} and k {:?}: not [batch, seq, heads, head_dim] of one batch and head_dim",
                q.layout.dims, k.layout.dims
            )))
            }
        },
        Some(lens) => match (q.layout.dims.as_slice(), k.layout.dims.as_slice()) {
            (&[_, h, d], &[_, hk, dk]) if d == dk => {
                let batch = check_lengths(device, lens, q.layout.dims[0], k.layout.dims[0])?;
                (batch, lens.max_q, lens.max_k, h, hk, d)
            }
            _ => {
                return Err(shape_error(format!(
                    "q {:?} and k {:?}: not [tokens, heads, head_dim] of one head_dim",
                    q.layout.dims, k.layout.dims
                )))
            }
        },
    };
    if head_dim == 0 || head_dim > abi::MAX_HEAD_DIM as usize {
        return Err(shape_error(format!(
            "head_dim {head_dim}: from 1 to {}",
            abi::MAX_HEAD_DIM
        )));
    }
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(shape_error(format!(
            "{heads} query heads are not a multiple of {kv_heads} kv heads"
        )));
    }
    let bad_option = |detail: String| Error::InvalidArgument { op: OP, detail };
    if !options.scale.is_finite() {
        return Err(bad_option(format!("softmax scale {}", options.scale)));
    }
    let softcap = match options.softcap {
        None => 0.0,
        Some(c) if c.is_finite() && c > 0.0 => c,
        Some(c) => return Err(bad_option(format!("softcap {c}: a finite value above 0"))),
    };
    let window = |w: Option<usize>, side: &str| -> Result<i32> {
        match w {
            None => Ok(-1),
            Some(w) => i32::try_from(w).map_err(|_| bad_option(format!("{side} window {w}"))),
        }
    };
    let window_left = window(options.window_left, "left")?;
    let window_right = if options.causal {
        0
    } else {
        window(options.window_right, "right")?
    };
    let alibi = match &options.alibi {
        None => None,
        Some(a) => {
            let per_batch = match *a.layout.dims.as_slice() {
                [h] if h == heads => false,
                [b, h] if b == batch && h == heads => true,
                _ => {
                    return Err(shape_error(format!(
                        "alibi slopes {:?}: not [{heads}] or [{batch}, {heads}]",
                        a.layout.dims
                    )))
                }
            };
            if a.dtype != DType::F32 {
                return Err(Error::DTypeMismatch {
                    op: OP,
                    detail: format!("alibi slopes {}, not f32", a.dtype),
                });
            }
            Some((a.contiguous(OP)?, per_batch))
        }
    };
    let can_tile = dtype != DType::F32 && device.info().matrix_units();
    let tiled = match kernel {
        FlashKernel::Auto => can_tile,
        FlashKernel::Portable => false,
        FlashKernel::Tiled if can_tile => true,
        FlashKernel::Tiled => {
            return Err(bad_option(format!(
                "the tiled kernel takes bf16 and f16 on matrix units ({dtype} on {})",
                device.info().arch
            )))
        }
    };
    let fit = |what: &str, n: usize| {
        u32::try_from(n).map_err(|_| shape_error(format!("{what} {n} is over u32")))
    };
    let out = device.alloc(q.elem_count() * dtype.size_in_bytes())?;
    if q.elem_count() == 0 || batch == 0 || seq_q == 0 {
        return Ok(out);
    }
    if batch > MAX_GRID_YZ as usize || heads > MAX_GRID_YZ as usize {
        return Err(shape_error(format!(
            "{batch} sequences of {heads} heads: at most {MAX_GRID_YZ} of each"
        )));
    }
    let (qc, kc, vc) = (q.contiguous(OP)?, k.contiguous(OP)?, v.contiguous(OP)?);
    let cu = varlen
        .map(|l| -> Result<_> { Ok((l.cu_q.contiguous(OP)?, l.cu_k.contiguous(OP)?)) })
        .transpose()?;
    let params = abi::Params {
        q: qc.ptr()?,
        k: kc.ptr()?,
        v: vc.ptr()?,
        out: out.ptr(),
        alibi: alibi.as_ref().map(|(a, _)| a.ptr()).transpose()?,
        cu_q: cu.as_ref().map(|(c, _)| c.ptr()).transpose()?,
        cu_k: cu.as_ref().map(|(_, c)| c.ptr()).transpose()?,
        heads: fit("heads", heads)?,
        kv_heads: fit("kv_heads", kv_heads)?,
        head_dim: head_dim as u32,
        seq_q: fit("seq_q", seq_q)?,
        seq_k: fit("seq_k", seq_k)?,
        alibi_batch_stride: match &alibi {
            Some((_, true)) => fit("heads", heads)?,
            _ => 0,
        },
        scale: options.scale,
        softcap,
        window_left,
        window_right,
    };
    let info = device.info();
    let warp = info.warp_size.max(1);
    // (entry, query rows a block, warps a block, dynamic shared memory)
    let (entry, rows, warps, shared) =
        match abi::TILED.iter().position(|(d, _)| head_dim <= *d as usize) {
            Some(at) if tiled => {
                // mma.sync's shapes on NVIDIA's own warps; AMD's (and the wave64 emulation's)
                // within 64 KiB, with the warps' scratch tiles
                let sync = info.platform == Platform::Nvidia && warp == 32;
                let shape = if sync {
                    abi::TILED_SYNC[at]
                } else {
                    abi::TILED_LDS[at]
                };
                (
                    abi::TILED[at].1,
                    shape.rows(),
                    abi::TILED_WARPS,
                    shape.shared_bytes(!sync),
                )
            }
            _ => (abi::FLASH, abi::ROWS, abi::ROWS, 0),
        };
    let config = LaunchConfig {
        grid: [
            fit("query blocks", seq_q.div_ceil(rows as usize))?,
            heads as u32,
            batch as u32,
        ],
        block: [warps * warp, 1, 1],
        shared_mem_bytes: shared,
    };
    let _span = tracing::debug_span!(
        "op", op = OP, %dtype, batch, seq_q, seq_k, heads, kv_heads, head_dim, tiled
    )
    .entered();
    device.launch_entry(entry, dtype.as_str(), config, &params)?;
    Ok(out)
}

/// Checks the cumulative lengths of `lens` against the packed rows (`rows_q`, `rows_k`) and
/// their bounds (read back from the device); the number of sequences.
fn check_lengths(
    device: &Device,
    lens: &VarLen<'_>,
    rows_q: usize,
    rows_k: usize,
) -> Result<usize> {
    let read = |name: &str, x: &Operand<'_>, rows: usize, most: usize| -> Result<Vec<u32>> {
        if x.dtype != DType::U32 || x.layout.dims.len() != 1 || x.layout.dims[0] == 0 {
            return Err(shape_error(format!(
                "{name} is {} {:?}, not u32 [batch + 1]",
                x.dtype, x.layout.dims
            )));
        }
        let c = x.contiguous(OP)?;
        let mut bytes = vec![0u8; x.elem_count() * 4];
        device.copy_dtoh(c.buffer(), c.start() * 4, &mut bytes)?;
        let cu: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let ok = cu[0] == 0
            && cu.last() == Some(&(rows as u32))
            && cu
                .windows(2)
                .all(|w| w[0] <= w[1] && (w[1] - w[0]) as usize <= most);
        if !ok {
            return Err(shape_error(format!(
                "{name} {cu:?}: not from 0 to the {rows} rows, non-decreasing, each length at most {most}"
            )));
        }
        Ok(cu)
    };
    let cu_q = read("cu_seqlens_q", &lens.cu_q, rows_q, lens.max_q)?;
    let cu_k = read("cu_seqlens_k", &lens.cu_k, rows_k, lens.max_k)?;
    if cu_q.len() != cu_k.len() {
        return Err(shape_error(format!(
            "{} query and {} key sequences",
            cu_q.len() - 1,
            cu_k.len() - 1
        )));
    }
    Ok(cu_q.len() - 1)
}

//! Attention of a decode step over a key/value cache: [`cached_attention`] (`softmax(q k^T *
//! scale) v` of queries over the cache in one launch: grouped-query heads, no mask, causal, or
//! a position per query read on the device) and [`rope_kv_write`] (the step's rotary
//! embedding and cache write in one launch).

use crate::{Buffer, DType, Device, Error, Operand, Result};
use rocm_device::{require_float, same_dtype, LaunchConfig};
use rocm_elementwise::OperandCopy;
use rocm_kernels as kernels;
use rocm_kernels::attention::Cache;

/// The cache of queries of `dtype` over the caches `k` and `v` (one dtype), or a typed error.
fn cache_kind(
    op: &'static str,
    dtype: DType,
    (k_name, k): (&str, &Operand<'_>),
    (v_name, v): (&str, &Operand<'_>),
) -> Result<Cache> {
    same_dtype(op, (k_name, k), &[(v_name, v)])?;
    match (dtype, k.dtype) {
        (q, c) if q == c => Ok(Cache::Same),
        (DType::F32, DType::F16) => Ok(Cache::F16),
        (DType::F32, DType::BF16) => Ok(Cache::Bf16),
        (q, c) => Err(Error::DTypeMismatch {
            op,
            detail: format!(
                "queries of {q} over a cache of {c}: the cache is the queries' dtype, or f16/bf16 under f32"
            ),
        }),
    }
}

/// Which cache positions each query of [`cached_attention`] sees. `P` is how the positions
/// are held: an [`Operand`] here, a storage and its layout or a tensor in the layers above,
/// which map it down ([`AttentionMask::map`]).
#[derive(Debug, Clone, Copy)]
pub enum AttentionMask<P> {
    /// Every position.
    None,
    /// The queries are the cache's last positions, each seeing those up to its own (the
    /// causal mask of a prompt appended to the cache).
    Causal,
    /// Query i sees positions `0..=positions[i]` (u32, one per query, read on the device and
    /// clamped to the cache): a cache preallocated to its maximum length and filled up to a
    /// position only the device knows, as a captured decode step has it. `[queries]` positions
    /// serve every batch; `[batch, queries]` give each batch its own (sequences decoding
    /// together, each at its own position).
    Positions(P),
}

impl<P> AttentionMask<P> {
    /// The same mask with its positions turned into `Q` by `f`.
    pub fn map<Q>(self, f: impl FnOnce(P) -> Q) -> AttentionMask<Q> {
        match self {
            AttentionMask::None => AttentionMask::None,
            AttentionMask::Causal => AttentionMask::Causal,
            AttentionMask::Positions(p) => AttentionMask::Positions(f(p)),
        }
    }

    /// The positions, where the mask has them.
    pub fn positions(&self) -> Option<&P> {
        match self {
            AttentionMask::Positions(p) => Some(p),
            _ => None,
        }
    }
}

/// `softmax(q k^T * scale) v` in one launch, for queries over a key/value cache: `q` is
/// `[batch, heads, queries, head_dim]`, `k` and `v` are `[batch, kv_heads, cache_len,
/// head_dim]` with `heads` a multiple of `kv_heads` (query head h reads kv head
/// `h / (heads / kv_heads)`, as grouped-query attention's repeated kv heads have it). `mask`
/// picks the positions each query sees. The output is `[batch, heads, queries, head_dim]` in
/// q's dtype; scores, softmax and sums are f32 for bf16/f16 (f64 for f64). The cache is in q's
/// dtype, or f16/bf16 under f32 queries (half the bytes; values widened to f32 as read). Heads of
/// up to 256 elements.
pub fn cached_attention(
    device: &Device,
    q: Operand<'_>,
    k: Operand<'_>,
    v: Operand<'_>,
    mask: AttentionMask<Operand<'_>>,
    scale: f32,
) -> Result<Buffer> {
    cached_attention_via(device, (q, k, v), mask, scale, AttentionPath::Auto)
}

/// How [`cached_attention_via`] spreads the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionPath {
    /// Split over the cache where the query rows are fewer than twice the multiprocessors and
    /// the cache is longer than one run of it (a decode step), else one block a row.
    Auto,
    /// One block a query row, the whole cache in it.
    OneBlockARow,
    /// Runs of the cache in blocks of their own, then a combining launch (flash-decoding).
    Split,
}

/// Threads of a split-form block for cache rows of `head_dim` elements of `elem_bytes`: the
/// whole warps that score a run of keys in one round of loads (each key read by the fewest
/// power of two of lanes, at most a warp, that covers its 16-byte packs, or its elements where
/// the row is not whole packs; SPLIT_UNROLL keys a lane), at most SPLIT_THREADS.
fn split_threads(head_dim: usize, elem_bytes: usize, warp: u32) -> u32 {
    use kernels::attention as abi;
    // rows of whole 16-byte packs are read a pack at a time, others an element at a time
    let row_bytes = head_dim * elem_bytes;
    let packs = if row_bytes % 16 == 0 {
        row_bytes / 16
    } else {
        head_dim
    }
    .max(1) as u32;
    let lanes_per_key = packs.next_power_of_two().min(warp);
    let threads = abi::SPLIT_KEYS / abi::SPLIT_UNROLL * lanes_per_key;
    threads
        .div_ceil(warp)
        .max(1)
        .saturating_mul(warp)
        .min(abi::SPLIT_THREADS)
}

/// [`cached_attention`] through a chosen path (for tests and benchmarks).
pub fn cached_attention_via(
    device: &Device,
    (q, k, v): (Operand<'_>, Operand<'_>, Operand<'_>),
    mask: AttentionMask<Operand<'_>>,
    scale: f32,
    path: AttentionPath,
) -> Result<Buffer> {
    const OP: &str = "cached_attention";
    use kernels::attention as abi;
    let dtype = q.dtype;
    require_float(OP, dtype)?;
    let cache = cache_kind(OP, dtype, ("k", &k), ("v", &v))?;
    let shape_error = |detail: String| Error::ShapeMismatch { op: OP, detail };
    let dims4 = |name: &str, x: &Operand<'_>| -> Result<[usize; 4]> {
        <[usize; 4]>::try_from(x.layout.dims.as_slice()).map_err(|_| {
            shape_error(format!(
                "{name} has dims {:?}, not [batch, heads, len, head_dim]",
                x.layout.dims
            ))
        })
    };
    let [batch, heads, queries, head_dim] = dims4("q", &q)?;
    let [k_batch, kv_heads, cache_len, k_head_dim] = dims4("k", &k)?;
    if v.layout.dims != k.layout.dims {
        return Err(shape_error(format!(
            "k has dims {:?}, v {:?}",
            k.layout.dims, v.layout.dims
        )));
    }
    if k_batch != batch || k_head_dim != head_dim {
        return Err(shape_error(format!(
            "q has dims {:?}, k {:?}: batch and head_dim differ",
            q.layout.dims, k.layout.dims
        )));
    }
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(shape_error(format!(
            "{heads} query heads are not a multiple of {kv_heads} kv heads"
        )));
    }
    if head_dim > abi::MAX_HEAD_DIM as usize {
        return Err(shape_error(format!(
            "head_dim {head_dim} is over {}",
            abi::MAX_HEAD_DIM
        )));
    }
    let rows = batch * heads * queries;
    let out_bytes = rows * head_dim * dtype.size_in_bytes();
    if rows == 0 || head_dim == 0 {
        return device.alloc(out_bytes);
    }
    if cache_len == 0 {
        return Err(shape_error(
            "the cache is empty: no position to attend".into(),
        ));
    }
    let fit = |what: &str, n: usize| {
        u32::try_from(n).map_err(|_| shape_error(format!("{what} {n} is over u32")))
    };
    let (mode, positions) = match mask {
        AttentionMask::None => (abi::MODE_ALL, None),
        AttentionMask::Causal if queries > cache_len => {
            return Err(shape_error(format!(
                "causal: {queries} queries are more than the cache's {cache_len} positions"
            )))
        }
        AttentionMask::Causal => (abi::MODE_CAUSAL, None),
        AttentionMask::Positions(p) => {
            let shared = p.elem_count() == queries;
            if p.dtype != DType::U32 || !(shared || p.elem_count() == batch * queries) {
                return Err(shape_error(format!(
                    "positions are {} {:?}, not u32 [{queries}] or [{batch} x {queries}]",
                    p.dtype, p.layout.dims
                )));
            }
            (abi::MODE_POSITIONS, Some((p.contiguous(OP)?, shared)))
        }
    };
    let (qc, kc, vc) = (q.contiguous(OP)?, k.contiguous(OP)?, v.contiguous(OP)?);
    let out = device.alloc(out_bytes)?;
    let split_keys = abi::SPLIT_KEYS as usize;
    let split = match path {
        AttentionPath::Auto => {
            rows < 2 * device.info().multiprocessor_count.max(1) as usize && cache_len > split_keys
        }
        AttentionPath::OneBlockARow => false,
        AttentionPath::Split => true,
    };
    // Without positions the kernel never reads the pointer: q's stands in. Shared positions
    // serve every batch (a stride of 0), else each batch has its queries' own.
    let positions_stride = match &positions {
        Some((_, false)) => queries,
        _ => 0,
    };
    let positions = positions.as_ref().map_or(&qc, |(p, _)| p).ptr()?;
    let (heads, kv_heads, queries) = (
        fit("heads", heads)?,
        fit("kv_heads", kv_heads)?,
        fit("queries", queries)?,
    );
    let mut params = kernels::attention::Params {
        q: qc.ptr()?,
        k: kc.ptr()?,
        v: vc.ptr()?,
        positions,
        // the one-block form reads neither: out's address stands in
        partial: out.ptr(),
        out: out.ptr(),
        tickets: out.ptr(),
        heads,
        kv_heads,
        queries,
        head_dim: head_dim as u32,
        cache_len: fit("cache_len", cache_len)?,
        scale,
        mode,
        positions_stride: fit("queries", positions_stride)?,
    };
    if !split {
        let config = LaunchConfig {
            grid: [fit("rows", rows)?, 1, 1],
            block: [abi::BLOCK, 1, 1],
            shared_mem_bytes: 0,
        };
        let entry = kernels::attention::cached(cache);
        return device
            .launch_entry(entry, dtype.as_str(), config, &params)
            .map(|()| out);
    }
    // (rows, splits, head_dim + 2) runs in the accumulator type (f64 for f64, else f32),
    // combined into the output by each row's last block (a ticket a row)
    let splits = cache_len.div_ceil(split_keys);
    let acc_bytes = if dtype == DType::F64 { 8 } else { 4 };
    let partial = device.alloc(rows * splits * (head_dim + 2) * acc_bytes)?;
    let tickets = device.tickets(rows)?;
    params.partial = partial.ptr();
    params.tickets = tickets.ptr();
    let warp = device.info().warp_size.max(1);
    let config = LaunchConfig {
        grid: [fit("rows", rows)?, fit("splits", splits)?, 1],
        block: [split_threads(head_dim, k.dtype.size_in_bytes(), warp), 1, 1],
        shared_mem_bytes: 0,
    };
    let entry = kernels::attention::split(cache);
    device
        .launch_entry(entry, dtype.as_str(), config, &params)
        .map(|()| out)
}

/// Where [`rope_kv_write`] puts a step's keys and values: the key and value caches, each
/// contiguous `[kv_heads, cache_len, head_dim]` (any leading dims of 1) in q's dtype, written in
/// place; or `[t, kv_heads, cache_len, head_dim]`, a cache for each of the t tokens (sequences
/// decoding together, a token each).
#[derive(Debug, Clone, Copy)]
pub struct KvCache<'a> {
    pub k: Operand<'a>,
    pub v: Operand<'a>,
}

/// A decode step's rotary embedding and cache write in one launch, in place of roping q and k,
/// splitting the heads and scattering k and v into the caches: `qkv` (.., t, (heads +
/// 2 kv_heads) * head_dim) holds each token's q, k and v heads; token i sits at `positions[i]`
/// (u32 `[t]`, read on the device); `cos` and `sin` (`[max_len, head_dim / 2]`, at least the
/// cache's length) are the rotary tables. Returns q roped, `[heads, t, head_dim]` (with a
/// cache a token, `[t, heads, head_dim]`: each token's own sequence); writes k
/// roped and v into the caches' rows at the positions (a position past the cache writes
/// nothing and leaves its q unrotated). Pairs are (2i, 2i + 1) with `interleaved` (candle-nn's `rope_i`), else (i, i +
/// head_dim / 2) (`rope`). The caches are in qkv's dtype, or f16/bf16 under f32 (k roped in f32,
/// rounded to f32 and then to the cache's dtype, as a cast of the roped k would be).
pub fn rope_kv_write(
    device: &Device,
    qkv: Operand<'_>,
    (cos, sin): (Operand<'_>, Operand<'_>),
    positions: Operand<'_>,
    cache: KvCache<'_>,
    heads: usize,
    interleaved: bool,
) -> Result<Buffer> {
    const OP: &str = "rope_kv_write";
    let dtype = qkv.dtype;
    require_float(OP, dtype)?;
    let shape_error = |detail: String| Error::ShapeMismatch { op: OP, detail };
    same_dtype(OP, ("qkv", &qkv), &[("cos", &cos), ("sin", &sin)])?;
    let entry = kernels::attention::rope_kv(cache_kind(
        OP,
        dtype,
        ("k_cache", &cache.k),
        ("v_cache", &cache.v),
    )?);
    // (caches, kv_heads, cache_len, head_dim): the leading dims' product is the caches
    let cache_dims = |x: &Operand<'_>| -> Option<[usize; 4]> {
        let d = &x.layout.dims;
        let n = d.len().checked_sub(3)?;
        Some([d[..n].iter().product(), d[n], d[n + 1], d[n + 2]])
    };
    let [caches, kv_heads, cache_len, head_dim] = match (cache_dims(&cache.k), cache_dims(&cache.v))
    {
        (Some(k), Some(v)) if k == v => k,
        _ => {
            return Err(shape_error(format!(
                "caches of dims {:?} and {:?}, not both [.., kv_heads, cache_len, head_dim]",
                cache.k.layout.dims, cache.v.layout.dims
            )))
        }
    };
    if !cache.k.layout.is_contiguous() || !cache.v.layout.is_contiguous() {
        return Err(shape_error(
            "the caches are written in place: contiguous ones".into(),
        ));
    }
    let width = (heads + 2 * kv_heads) * head_dim;
    let t = positions.elem_count();
    if positions.dtype != DType::U32
        || qkv.layout.dims.last() != Some(&width)
        || qkv.elem_count() != t * width
    {
        return Err(shape_error(format!(
            "qkv {:?} and {} positions {:?}: not (t, ({heads} + 2 x {kv_heads}) x {head_dim}) and u32 [t]",
            qkv.layout.dims, positions.dtype, positions.layout.dims
        )));
    }
    // one cache for all the tokens (a sequence's), or one a token (a batch's decode step)
    let per_token_cache = caches != 1;
    if per_token_cache && caches != t {
        return Err(shape_error(format!(
            "{t} tokens over caches of dims {:?}: one cache, or one a token",
            cache.k.layout.dims
        )));
    }
    if head_dim % 2 != 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(shape_error(format!(
            "{heads} heads over {kv_heads} kv heads of {head_dim} values"
        )));
    }
    for (name, x) in [("cos", &cos), ("sin", &sin)] {
        let ok = matches!(x.layout.dims.as_slice(), [len, half] if *len >= cache_len && *half == head_dim / 2);
        if !ok {
            return Err(shape_error(format!(
                "{name} has dims {:?}, not [>= {cache_len}, {}]",
                x.layout.dims,
                head_dim / 2
            )));
        }
    }
    let out = device.alloc(heads * t * head_dim * dtype.size_in_bytes())?;
    let items = (t * (heads + kv_heads) * head_dim / 2 + t * kv_heads * head_dim) as u64;
    if items == 0 {
        return Ok(out);
    }
    let fit = |what: &str, n: usize| {
        u32::try_from(n).map_err(|_| shape_error(format!("{what} {n} is over u32")))
    };
    let (qc, cc, sc, pc) = (
        qkv.contiguous(OP)?,
        cos.contiguous(OP)?,
        sin.contiguous(OP)?,
        positions.contiguous(OP)?,
    );
    let (kc, vc) = (cache.k.contiguous(OP)?, cache.v.contiguous(OP)?);
    let params = kernels::attention::RopeKvParams {
        qkv: qc.ptr()?,
        cos: cc.ptr()?,
        sin: sc.ptr()?,
        positions: pc.ptr()?,
        q_out: out.ptr(),
        k_cache: kc.ptr()?,
        v_cache: vc.ptr()?,
        t: fit("tokens", t)?,
        heads: fit("heads", heads)?,
        kv_heads: fit("kv_heads", kv_heads)?,
        d: fit("head_dim", head_dim)?,
        cache_len: fit("cache_len", cache_len)?,
        interleaved: u32::from(interleaved),
        per_token_cache: u32::from(per_token_cache),
    };
    let config = LaunchConfig::for_elements(items, device.info());
    device.launch_entry(entry, dtype.as_str(), config, &params)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_16_bit_cache_picks_its_own_entries() {
        use kernels::attention::{cached, rope_kv, split};
        assert_eq!(cached(Cache::Same).op, "cached_attention");
        assert_eq!(split(Cache::F16).op, "attention_split_cache_f16");
        assert_eq!(rope_kv(Cache::Bf16).op, "rope_kv_write_cache_bf16");
    }

    #[test]
    fn split_attention_blocks_score_a_run_in_one_round() {
        // head_dim 128: f32 rows are 32 packs (a warp a key, 8 warps), f16 rows 16 (4 warps)
        assert_eq!(split_threads(128, 4, 32), 256);
        assert_eq!(split_threads(128, 2, 32), 128);
        assert_eq!(split_threads(64, 4, 32), 128);
        // 64-lane wavefronts: whole wavefronts, at most the launch bound
        assert_eq!(split_threads(128, 4, 64), 256);
        assert_eq!(split_threads(16, 2, 64), 64);
        assert_eq!(split_threads(256, 8, 32), 256);
        assert_eq!(split_threads(7, 4, 32), 64);
    }
}

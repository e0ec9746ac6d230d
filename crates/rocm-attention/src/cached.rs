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
    /// The matrix form where it is worth its start (16-bit caches, enough tiles a wave), else
    /// the grouped split where the query heads of a kv head are several (grouped-query
    /// attention), their groups are at least a quarter of the multiprocessors (a batch of
    /// sequences; fewer leave the device idle) or share long caches, and its runs fit
    /// [`GROUPED_PARTIAL_BYTES`];
    /// else the split where the query rows are fewer than twice the multiprocessors and the
    /// cache is longer than one run of it (a decode step), else one block a row.
    Auto,
    /// One block a query row, the whole cache in it.
    OneBlockARow,
    /// Runs of 64 cache positions in blocks of their own, a query row a block, combined in
    /// the same launch by each row's last block (flash-decoding).
    Split,
    /// The split with the query heads of a kv head (up to 8 of them: the largest divisor of
    /// heads / kv_heads) in one block, which reads each cache row once for all of them.
    GroupedSplit,
    /// The grouped split on the matrix units: up to 16 query heads of a kv head (the rows of
    /// one tile) a block, each of its warps scoring its own tiles of 16 cache positions with the
    /// tile operation, the next tile's copies in flight meanwhile. For 16-bit caches (of bf16 or
    /// f16 queries, or under f32 queries, which it carries in two 16-bit parts) on devices with
    /// matrix units, heads a multiple of 8 elements wide and caches at 16-byte aligned
    /// addresses; elsewhere the grouped split.
    MatrixSplit,
}

/// The most bytes of runs [`AttentionPath::Auto`] lets the grouped split write (each query row
/// head_dim + 2 values a run): past it, one block a row.
pub const GROUPED_PARTIAL_BYTES: usize = 256 << 20;

/// Blocks a split launch aims at, per multiprocessor: runs are made long enough (whole tiles)
/// that the launch has about this many blocks a multiprocessor, and no longer (each run
/// writes head_dim + 2 values a query row, which the last block reads back).
const SPLIT_BLOCKS_PER_MULTIPROCESSOR: usize = 8;

/// How a split launch cuts the cache: (run_keys, splits) for `block_rows` groups of rows over
/// `cache_len` positions in tiles of `tile` keys.
fn split_runs(
    cache_len: usize,
    tile: usize,
    block_rows: usize,
    multiprocessors: usize,
) -> (usize, usize) {
    let tiles = cache_len.div_ceil(tile);
    let want = SPLIT_BLOCKS_PER_MULTIPROCESSOR * multiprocessors.max(1);
    let splits = want.div_ceil(block_rows.max(1)).clamp(1, tiles);
    let run = tiles.div_ceil(splits) * tile;
    (run, cache_len.div_ceil(run))
}

/// A matrix-form block's start and end (q, the first copies' wait, the combine through shared
/// memory, the ticket), in the time of one tile a warp.
const MATRIX_BLOCK_COST_TILES: usize = 4;

/// How the matrix form cuts the cache: (run_keys, splits) for `block_rows` groups of rows over
/// `cache_len` positions in block tiles of `tile` keys (one tile a warp) when the device holds
/// `wave` blocks at once: the splits that take the fewest tile times, counting whole waves of
/// blocks (a block's runs stream at the rate of its copies, so a wave takes its longest run) and
/// each block's start and end.
fn matrix_runs(cache_len: usize, tile: usize, block_rows: usize, wave: usize) -> (usize, usize) {
    let tiles = cache_len.div_ceil(tile);
    let cost = |s: usize| {
        (block_rows.max(1) * s).div_ceil(wave.max(1))
            * (MATRIX_BLOCK_COST_TILES + tiles.div_ceil(s))
    };
    let splits = (1..=tiles.min(256))
        .min_by_key(|&s| (cost(s), s))
        .unwrap_or(1);
    let run = tiles.div_ceil(splits) * tile;
    (run, cache_len.div_ceil(run))
}

/// A grouped split block's launch shape for rows of `head_dim` elements of `elem_bytes` (16-byte
/// packs where `wide`, else elements): (threads, tile_keys, shared bytes) with a thread a pack
/// at least and the longest tile whose key rows fit GROUP_TILE_BYTES and whose shared memory
/// (of either read width: the kernel picks by the pointers' alignment) fits `budget`, or the
/// shortest tile.
fn group_block(
    (head_dim, elem_bytes, wide): (usize, usize, bool),
    group_heads: u32,
    acc_bytes: usize,
    warp: usize,
    budget: u32,
) -> (u32, usize, u32) {
    use kernels::attention as abi;
    let width = 16 / elem_bytes;
    let packs = if wide { head_dim / width } else { head_dim };
    let threads = (packs.div_ceil(warp) * warp).max(abi::GROUP_THREADS as usize) as u32;
    let shared = |tile: u32| {
        let at = |width: usize| {
            abi::group_shared_bytes(
                (head_dim as u32, elem_bytes as u32, width as u32),
                tile,
                threads,
                group_heads,
                acc_bytes as u32,
            )
        };
        if wide {
            at(width).max(at(1))
        } else {
            at(1)
        }
    };
    let row_bytes = (head_dim * elem_bytes) as u32;
    let tile = [128u32, 64, 32, 16, 8, 4, 2]
        .into_iter()
        .find(|&t| t * row_bytes <= abi::GROUP_TILE_BYTES && shared(t) <= budget)
        .unwrap_or(2);
    (threads, tile as usize, shared(tile))
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

/// Query heads a block takes for `group` query heads a kv head: the largest divisor of it up to
/// `most` (GROUP_HEADS for the grouped split, MATRIX_ROWS for its matrix form).
fn heads_a_block(group: usize, most: u32) -> usize {
    let most = most as usize;
    (1..=group.min(most))
        .rev()
        .find(|d| group % d == 0)
        .unwrap_or(1)
}

/// The matrix form's block for heads of `head_dim` elements under queries of `dtype`: (the
/// widest head of its entry, warps, shared bytes) with as many warps as fit `budget` bytes of
/// shared memory (at least one), or `None` where no entry takes the width.
fn matrix_block(head_dim: usize, dtype: DType, budget: u32) -> Option<(u32, u32, u32)> {
    use kernels::attention as abi;
    let (dmax, _) = abi::MATRIX.iter().find(|(d, _)| head_dim <= *d as usize)?;
    // f32 queries are carried in two 16-bit parts
    let q_parts = if dtype == DType::F32 { 2 } else { 1 };
    let shared = |w| abi::matrix_shared_bytes(*dmax, q_parts, w);
    let warps = (1..=abi::MATRIX_MAX_WARPS)
        .rev()
        .find(|&w| shared(w) <= budget)
        .unwrap_or(1);
    Some((*dmax, warps, shared(warps)))
}

/// A matrix-form launch: its entry's widest head, warps a block, shared bytes a block, the runs
/// (`matrix_runs`) and whether Auto takes it (`matrix_worth`).
#[derive(Debug, Clone, Copy)]
struct MatrixPlan {
    dmax: u32,
    warps: u32,
    shared: u32,
    run_keys: usize,
    splits: usize,
    worth: bool,
}

/// Whether [`AttentionPath::Auto`] takes the matrix form: its launch has at least three waves'
/// worth of block tiles (`block_tiles`: tiles a warp over all block rows; fewer leave each block's
/// start and end uncovered) and each group's last block combines at most 256 runs of rows
/// (`row_runs`: runs x rows a block; the combine reads them one after another). Measured on an
/// H200 (bench/results/2026-11-28-decode-attention-matrix.md): elsewhere the one-row split was
/// faster; on every measured shape the form taken was within 5% of the fastest.
fn matrix_worth(block_tiles: usize, row_runs: usize, wave: usize) -> bool {
    block_tiles >= 3 * wave && row_runs <= 256
}

/// Whether [`AttentionPath::Auto`] takes the grouped split over the one-row split: its blocks
/// (`kv_rows`: query rows / heads a block) are at least a quarter of the multiprocessors, or
/// at least 16 of them share 128K cache positions or more (a few sequences' long caches: each
/// reads a cache row once for its heads, where the one-row split reads it once a head).
/// Measured on an H200 (f32 caches, 4 sequences of 8B's heads at 4K and 16K: 0.75x and 0.47x
/// the one-row split's time; bench/results/2026-11-28-decode-attention-matrix-raw/decode.jsonl,
/// and the same again a session later); below those sizes the one-row split was as fast or
/// faster.
fn grouped_worth(kv_rows: usize, cache_len: usize, sms: usize) -> bool {
    4 * kv_rows >= sms || (kv_rows >= 16 && kv_rows * cache_len >= 128 << 10)
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
    let group = heads_a_block(heads / kv_heads, abi::GROUP_HEADS);
    let sms = device.info().multiprocessor_count.max(1) as usize;
    let acc_bytes = if dtype == DType::F64 { 8 } else { 4 };
    let elem = k.dtype.size_in_bytes();
    let warp = device.info().warp_size.max(1);
    // the grouped split's block (its kernel reads 16-byte packs where every row is whole
    // aligned packs) and runs
    let wide = head_dim % (16 / elem) == 0;
    let budget = abi::GROUP_SHARED_BYTES.min(device.info().shared_mem_per_block as u32);
    let block = group_block(
        (head_dim, elem, wide),
        abi::GROUP_HEADS,
        acc_bytes,
        warp as usize,
        budget,
    );
    let (run_keys, splits) = split_runs(cache_len, block.1, rows / group, sms);
    let partial_bytes = |splits: usize| rows * splits * (head_dim + 2) * acc_bytes;
    let split_keys = abi::SPLIT_KEYS as usize;
    // the matrix form's block and runs, where it takes the cache: 16-bit, heads of whole
    // 16-byte packs at aligned addresses, a device with matrix units
    let matrix_group = heads_a_block(heads / kv_heads, abi::MATRIX_ROWS);
    let aligned = kc.ptr()?.addr % 16 == 0 && vc.ptr()?.addr % 16 == 0;
    let matrix = (matches!(k.dtype, DType::BF16 | DType::F16)
        && head_dim % 8 == 0
        && aligned
        && device.info().matrix_units())
    .then(|| matrix_block(head_dim, dtype, budget))
    .flatten()
    .map(|(dmax, warps, shared)| {
        let tile = (abi::MATRIX_KEYS * warps) as usize;
        // blocks a multiprocessor holds at once, by shared memory
        let resident = (device.info().shared_mem_per_block / shared as usize).clamp(1, 8);
        let wave = resident * sms;
        let block_rows = rows / matrix_group;
        let (run_keys, splits) = matrix_runs(cache_len, tile, block_rows, wave);
        let worth = matrix_worth(
            block_rows * cache_len.div_ceil(tile),
            splits * matrix_group,
            wave,
        );
        MatrixPlan {
            dmax,
            warps,
            shared,
            run_keys,
            splits,
            worth,
        }
    });
    let grouped = |group: usize, splits: usize| {
        group > 1
            && grouped_worth(rows / group, cache_len, sms)
            && partial_bytes(splits) <= GROUPED_PARTIAL_BYTES
    };
    let path = match path {
        AttentionPath::Auto
            if matrix.is_some_and(|m| {
                matrix_group > 1 && m.worth && partial_bytes(m.splits) <= GROUPED_PARTIAL_BYTES
            }) =>
        {
            AttentionPath::MatrixSplit
        }
        AttentionPath::Auto if grouped(group, splits) => AttentionPath::GroupedSplit,
        AttentionPath::Auto if rows < 2 * sms && cache_len > split_keys => AttentionPath::Split,
        AttentionPath::Auto => AttentionPath::OneBlockARow,
        AttentionPath::MatrixSplit if matrix.is_none() && group == 1 => AttentionPath::Split,
        AttentionPath::MatrixSplit if matrix.is_none() => AttentionPath::GroupedSplit,
        AttentionPath::GroupedSplit if group == 1 => AttentionPath::Split,
        path => path,
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
        group: 1,
        tile_keys: 0,
        run_keys: 0,
    };
    if path == AttentionPath::OneBlockARow {
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
    // combined into the output by each group's last block (a ticket a group of rows)
    let (entry, config) = if let (AttentionPath::MatrixSplit, Some(plan)) = (path, matrix) {
        let dmax = plan.dmax;
        let entry = abi::split_matrix(dmax, cache)
            .ok_or_else(|| shape_error(format!("no matrix-form entry for heads of {dmax}")))?;
        let block_rows = rows / matrix_group;
        params.group = matrix_group as u32;
        params.tile_keys = abi::MATRIX_KEYS;
        params.run_keys = fit("run_keys", plan.run_keys)?;
        let config = LaunchConfig {
            grid: [fit("rows", block_rows)?, fit("splits", plan.splits)?, 1],
            block: [plan.warps * warp, 1, 1],
            shared_mem_bytes: plan.shared,
        };
        (entry, config)
    } else if path == AttentionPath::GroupedSplit {
        let (threads, tile_keys, shared_mem_bytes) = block;
        let block_rows = rows / group;
        params.group = group as u32;
        params.tile_keys = tile_keys as u32;
        params.run_keys = fit("run_keys", run_keys)?;
        let config = LaunchConfig {
            grid: [fit("rows", block_rows)?, fit("splits", splits)?, 1],
            block: [threads, 1, 1],
            shared_mem_bytes,
        };
        (kernels::attention::split_grouped(cache), config)
    } else {
        let config = LaunchConfig {
            grid: [
                fit("rows", rows)?,
                fit("splits", cache_len.div_ceil(split_keys))?,
                1,
            ],
            block: [split_threads(head_dim, k.dtype.size_in_bytes(), warp), 1, 1],
            shared_mem_bytes: 0,
        };
        (kernels::attention::split(cache), config)
    };
    let partial = device.alloc(partial_bytes(config.grid[1] as usize))?;
    let tickets = device.tickets(config.grid[0] as usize)?;
    params.partial = partial.ptr();
    params.tickets = tickets.ptr();
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

/// Per-head rms norms of q and k before the rotary embedding (qwen3's): a weight of
/// `head_dim` values each, in qkv's dtype, and the norm's epsilon.
#[derive(Debug, Clone, Copy)]
pub struct QkNorm<'a> {
    pub q: Operand<'a>,
    pub k: Operand<'a>,
    pub eps: f32,
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
/// rounded to f32 and then to the cache's dtype, as a cast of the roped k would be). With
/// `qk_norm`, each q and k head is rms-normed first (the normed values rounded to qkv's dtype,
/// as candle-nn's `rms_norm` writes them), in the same launch.
#[allow(clippy::too_many_arguments)]
pub fn rope_kv_write(
    device: &Device,
    qkv: Operand<'_>,
    (cos, sin): (Operand<'_>, Operand<'_>),
    positions: Operand<'_>,
    cache: KvCache<'_>,
    heads: usize,
    interleaved: bool,
    qk_norm: Option<QkNorm<'_>>,
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
    if let Some(norm) = &qk_norm {
        same_dtype(
            OP,
            ("qkv", &qkv),
            &[("q_norm", &norm.q), ("k_norm", &norm.k)],
        )?;
        for (name, w) in [("q_norm", &norm.q), ("k_norm", &norm.k)] {
            if w.elem_count() != head_dim || w.layout.dims.len() != 1 {
                return Err(shape_error(format!(
                    "{name} has dims {:?}, not [{head_dim}]",
                    w.layout.dims
                )));
            }
        }
    }
    let out = device.alloc(heads * t * head_dim * dtype.size_in_bytes())?;
    // a warp a head: q's and k's, then v's
    let rows = (t * (heads + 2 * kv_heads)) as u64;
    if rows == 0 || head_dim == 0 {
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
    let norms = match &qk_norm {
        Some(n) => Some((n.q.contiguous(OP)?, n.k.contiguous(OP)?)),
        None => None,
    };
    let (q_norm, k_norm) = match &norms {
        Some((q, k)) => (q.ptr()?, k.ptr()?),
        // unread without the norm
        None => (qc.ptr()?, qc.ptr()?),
    };
    let params = kernels::attention::RopeKvParams {
        qkv: qc.ptr()?,
        cos: cc.ptr()?,
        sin: sc.ptr()?,
        positions: pc.ptr()?,
        q_out: out.ptr(),
        k_cache: kc.ptr()?,
        v_cache: vc.ptr()?,
        q_norm,
        k_norm,
        t: fit("tokens", t)?,
        heads: fit("heads", heads)?,
        kv_heads: fit("kv_heads", kv_heads)?,
        d: fit("head_dim", head_dim)?,
        cache_len: fit("cache_len", cache_len)?,
        interleaved: u32::from(interleaved),
        per_token_cache: u32::from(per_token_cache),
        normed: u32::from(qk_norm.is_some()),
        eps: qk_norm.map_or(0.0, |n| n.eps),
    };
    let config =
        LaunchConfig::for_elements(rows * u64::from(device.info().warp_size), device.info());
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
    fn split_runs_fill_the_device_in_whole_tiles() {
        // one sequence of the 8B llama at 4K (8 groups) in tiles of 16: 128 runs of 2 tiles
        assert_eq!(split_runs(4096, 16, 8, 132), (32, 128));
        // 16 sequences (128 groups): 9 runs of 29 tiles, about 8 blocks a multiprocessor
        assert_eq!(split_runs(4096, 16, 128, 132), (464, 9));
        // a short cache: one run of its one tile
        assert_eq!(split_runs(5, 64, 4, 132), (64, 1));
        for (len, groups) in [(1, 1), (700, 3), (4097, 64), (16384, 512)] {
            let (run, splits) = split_runs(len, 32, groups, 132);
            assert_eq!(run % 32, 0);
            assert!(splits * run >= len && (splits - 1) * run < len);
        }
    }

    #[test]
    fn matrix_runs_take_whole_waves() {
        // 16 sequences of the 8B llama at 4K (128 groups), three warps (tiles of 48), a wave of
        // 396 blocks: three runs of 29 tiles, one wave (four would take two)
        assert_eq!(matrix_runs(4096, 48, 128, 396), (1392, 3));
        // 64 sequences at 16K (512 groups): three runs each, four waves (3.9 of them)
        assert_eq!(matrix_runs(16384, 48, 512, 396), (5472, 3));
        // one sequence: short runs in one wave
        let (run, splits) = matrix_runs(4096, 48, 8, 396);
        assert!(splits * 8 <= 396 && run <= 96, "{run} {splits}");
        for (len, groups) in [(1, 1), (700, 3), (4097, 64), (16384, 512)] {
            let (run, splits) = matrix_runs(len, 48, groups, 396);
            assert_eq!(run % 48, 0);
            assert!(splits * run >= len && (splits - 1) * run < len);
        }
    }

    #[test]
    fn the_matrix_form_is_taken_where_it_was_measured_faster() {
        // (batch, kv heads, context, faster): the 8B llama's heads (groups of 4) and groups of 8,
        // three warps (tiles of 48), a wave of 396 blocks
        for (batch, kv_heads, context, faster) in [
            (1, 8, 1024, false),
            (1, 8, 4096, false),
            (1, 8, 16384, true),
            (1, 4, 16384, false),
            (4, 8, 1024, false),
            (4, 8, 4096, true),
            (4, 4, 16384, true),
            (16, 4, 1024, true),
            (16, 8, 4096, true),
            (64, 4, 16384, true),
        ] {
            let (group, wave) = (32 / kv_heads, 396);
            let block_rows = batch * kv_heads;
            let (_, splits) = matrix_runs(context, 48, block_rows, wave);
            let tiles = block_rows * context.div_ceil(48);
            assert_eq!(
                matrix_worth(tiles, splits * group, wave),
                faster,
                "{batch} x {kv_heads} kv heads at {context}"
            );
        }
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

    #[test]
    fn grouped_blocks_take_the_longest_tiles_that_fit() {
        let budget = kernels::attention::GROUP_SHARED_BYTES;
        // f32 rows of 128: a thread a pack (32), 128 threads, tiles of 32 keys (16 KiB)
        let (threads, tile, shared) = group_block((128, 4, true), 8, 4, 32, budget);
        assert_eq!((threads, tile), (128, 32));
        assert!(shared <= budget);
        // f16 rows: tiles of 64; rows of 256 elements read an element at a time: 256 threads
        assert_eq!(group_block((128, 2, true), 8, 4, 32, budget).1, 64);
        assert_eq!(group_block((250, 4, false), 8, 4, 64, budget).0, 256);
        // every head size and dtype of the tests fits AMD's 64 KiB
        for (hd, elem, acc) in [(7, 4, 4), (64, 2, 4), (80, 2, 4), (256, 8, 8), (256, 4, 4)] {
            for heads in [1, 8] {
                let wide = hd % (16 / elem) == 0;
                let (_, _, shared) = group_block((hd, elem, wide), heads, acc, 64, budget);
                assert!(shared <= budget, "{hd} {elem} {heads}: {shared}");
            }
        }
    }

    #[test]
    fn auto_takes_the_grouped_split_where_it_was_measured_faster() {
        // (sequences, query heads a kv head, positions): H200's 132 multiprocessors, 32 heads
        let grouped =
            |seqs: usize, group: usize, len: usize| grouped_worth(seqs * 32 / group, len, 132);
        // faster grouped: 4 sequences at 4K and 16K (groups of 4), 16K (groups of 8); any
        // length from 16 sequences
        for (seqs, group, len) in [
            (4, 4, 4096),
            (4, 4, 16384),
            (4, 8, 16384),
            (16, 4, 1024),
            (16, 8, 1024),
        ] {
            assert!(grouped(seqs, group, len), "{seqs} {group} {len}");
        }
        // the one-row split as fast or faster
        for (seqs, group, len) in [(1, 4, 16384), (1, 8, 16384), (4, 4, 1024), (4, 8, 4096)] {
            assert!(!grouped(seqs, group, len), "{seqs} {group} {len}");
        }
    }

    #[test]
    fn grouped_blocks_take_the_largest_divisor_up_to_eight_heads() {
        let groups = [1, 2, 3, 4, 6, 7, 8, 12, 16, 32, 11];
        let got = groups.map(|g| heads_a_block(g, kernels::attention::GROUP_HEADS));
        assert_eq!(got, [1, 2, 3, 4, 6, 7, 8, 6, 8, 8, 1]);
        // the matrix form: up to a tile's 16 rows
        let got = groups.map(|g| heads_a_block(g, kernels::attention::MATRIX_ROWS));
        assert_eq!(got, [1, 2, 3, 4, 6, 7, 8, 12, 16, 16, 11]);
    }

    #[test]
    fn matrix_blocks_take_the_warps_that_fit() {
        let budget = kernels::attention::GROUP_SHARED_BYTES;
        // heads of 64: four warps; 128: three (two under f32 queries, q in two parts); 256: one
        let shape = |hd, dtype| matrix_block(hd, dtype, budget).map(|(d, w, _)| (d, w));
        assert_eq!(shape(64, DType::BF16), Some((64, 4)));
        assert_eq!(shape(80, DType::F16), Some((128, 3)));
        assert_eq!(shape(128, DType::F32), Some((128, 3)));
        assert_eq!(shape(256, DType::F32), Some((256, 1)));
        assert_eq!(shape(264, DType::F32), None);
        for (hd, dtype) in [(64, DType::F32), (128, DType::BF16), (256, DType::F16)] {
            let (dmax, warps, shared) = matrix_block(hd, dtype, budget).unwrap();
            let parts = if dtype == DType::F32 { 2 } else { 1 };
            assert_eq!(
                shared,
                kernels::attention::matrix_shared_bytes(dmax, parts, warps)
            );
            assert!(shared <= budget);
        }
    }
}

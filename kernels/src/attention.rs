//! The launch shape and argument values of `cached_attention` (attention.hip's `ATTN_*`
//! defines; a test checks the two agree), and the family's entries and parameter lists.

use crate::{DevicePtr, Entry, EntryGroup, KernelModule, KernelParams, HEADERS};

/// Attention of queries over a key/value cache in one launch (`cached_attention_<dtype>`), and a
/// decode step's rotary embedding with its cache write (`rope_kv_write_<dtype>`); the cache in
/// the queries' dtype, or a 16-bit cache under f32 queries (`<op>_cache_f16_f32`, `..._bf16_f32`).
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "attention",
    source: include_str!("attention.hip"),
    groups: &[
        EntryGroup {
            ops: &[
                "cached_attention",
                "attention_split",
                "attention_split_grouped",
                "rope_kv_write",
            ],
            dtypes: &["bf16", "f16", "f32", "f64"],
        },
        // the grouped split on the matrix units over a cache of the queries' 16-bit dtype
        EntryGroup {
            ops: &[MATRIX[0].1 .0, MATRIX[1].1 .0, MATRIX[2].1 .0],
            dtypes: &["bf16", "f16"],
        },
        // f32 queries over a 16-bit cache: `<op>_cache_<cache dtype>` (CACHE_OPS)
        EntryGroup {
            ops: &[
                "cached_attention_cache_f16",
                "attention_split_cache_f16",
                "attention_split_grouped_cache_f16",
                "rope_kv_write_cache_f16",
                "cached_attention_cache_bf16",
                "attention_split_cache_bf16",
                "attention_split_grouped_cache_bf16",
                "rope_kv_write_cache_bf16",
                MATRIX[0].1 .1,
                MATRIX[0].1 .2,
                MATRIX[1].1 .1,
                MATRIX[1].1 .2,
                MATRIX[2].1 .1,
                MATRIX[2].1 .2,
            ],
            dtypes: &["f32"],
        },
    ],
    params: &[Params::DECL, RopeKvParams::DECL],
};

crate::kernel_params! {
    /// `cached_attention` and its split form: `heads` query heads of `queries` rows each
    /// over a cache of `cache_len` positions of `kv_heads` heads (contiguous q, k, v, out);
    /// `mode` one of the `MODE_*` (positions: u32, query i of batch b at
    /// `positions[b * positions_stride + i]`, read with `MODE_POSITIONS` only; a stride of 0
    /// gives every batch the same positions). The split forms write each block's runs to
    /// `partial` (the accumulator type's head_dim + 2 values a run of a query row), combined
    /// by the last block of a group of rows to finish (a ticket a group); the grouped split
    /// form's groups are `group` query heads of one kv head (a divisor of heads / kv_heads, at
    /// most [`GROUP_HEADS`]), the other forms' one row. A run is `run_keys` cache positions, a
    /// multiple of `tile_keys`, the positions a tile of shared memory holds
    /// ([`group_shared_bytes`]). The one-block form reads none of partial, tickets, group,
    /// tile_keys and run_keys.
    pub struct Params = "ATTN_PARAMS(T, C)" {
        q: DevicePtr = "const T*",
        k: DevicePtr = "const C*",
        v: DevicePtr = "const C*",
        positions: DevicePtr = "const u32*",
        partial: DevicePtr = "void*",
        out: DevicePtr = "T*",
        tickets: DevicePtr = "u32*",
        heads: u32,
        kv_heads: u32,
        queries: u32,
        head_dim: u32,
        cache_len: u32,
        scale: f32,
        mode: u32,
        positions_stride: u32,
        group: u32,
        tile_keys: u32,
        run_keys: u32,
    }
}

crate::kernel_params! {
    /// `rope_kv_write`: `t` tokens' stacked q/k/v rows, q roped to `q_out`, k roped and v
    /// written into the caches at the tokens' positions. With `per_token_cache` each token
    /// is a sequence of its own: token i writes cache i of `t` (`[t, kv_heads, cache_len,
    /// d]`) and q_out is `[t, heads, d]`; else one cache and q_out `[heads, t, d]`. With
    /// `normed`, q's and k's heads are rms-normed by `q_norm` / `k_norm` (`[d]`, eps `eps`)
    /// first (the pointers are unread otherwise).
    pub struct RopeKvParams = "ROPE_KV_PARAMS(T, C)" {
        qkv: DevicePtr = "const T*",
        cos: DevicePtr = "const T*",
        sin: DevicePtr = "const T*",
        positions: DevicePtr = "const u32*",
        q_out: DevicePtr = "T*",
        k_cache: DevicePtr = "C*",
        v_cache: DevicePtr = "C*",
        q_norm: DevicePtr = "const T*",
        k_norm: DevicePtr = "const T*",
        t: u32,
        heads: u32,
        kv_heads: u32,
        d: u32,
        cache_len: u32,
        interleaved: u32,
        per_token_cache: u32,
        normed: u32,
        eps: f32,
    }
}

/// The cache of an attention entry: in the queries' dtype, or f16/bf16 under f32 queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cache {
    Same,
    F16,
    Bf16,
}

/// `cached_attention` over a cache of `cache`.
pub const fn cached(cache: Cache) -> Entry<Params> {
    Entry::new(&MODULE, CACHE_OPS[0].pick(cache))
}

/// `attention_split` over a cache of `cache`.
pub const fn split(cache: Cache) -> Entry<Params> {
    Entry::new(&MODULE, CACHE_OPS[1].pick(cache))
}

/// `attention_split_grouped` over a cache of `cache`.
pub const fn split_grouped(cache: Cache) -> Entry<Params> {
    Entry::new(&MODULE, CACHE_OPS[2].pick(cache))
}

/// `attention_split_matrix` for heads of up to `dmax` elements (one of [`MATRIX`]'s) over a
/// 16-bit cache of `cache`; `None` for other widths.
pub fn split_matrix(dmax: u32, cache: Cache) -> Option<Entry<Params>> {
    MATRIX
        .iter()
        .find(|(d, _)| *d == dmax)
        .map(|(_, ops)| Entry::new(&MODULE, ops.pick(cache)))
}

/// `rope_kv_write` into a cache of `cache`.
pub const fn rope_kv(cache: Cache) -> Entry<RopeKvParams> {
    Entry::new(&MODULE, CACHE_OPS[3].pick(cache))
}

/// An op's entries by cache: (in the queries' dtype, f16, bf16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheOps(pub &'static str, pub &'static str, pub &'static str);

impl CacheOps {
    const fn pick(&self, cache: Cache) -> &'static str {
        match cache {
            Cache::Same => self.0,
            Cache::F16 => self.1,
            Cache::Bf16 => self.2,
        }
    }
}

/// Threads a block: the kernel is built for exactly this many.
pub const BLOCK: u32 = 512;
/// The longest head the kernel holds (one block of threads).
pub const MAX_HEAD_DIM: u32 = 256;
/// Every query sees the whole cache.
pub const MODE_ALL: u32 = 0;
/// The queries are the cache's last positions, each seeing those up to its own.
pub const MODE_CAUSAL: u32 = 1;
/// Query i sees positions `0..=positions[i]` (a u32 tensor on the device).
pub const MODE_POSITIONS: u32 = 2;
/// Threads a block of the one-row split form (`attention_split`), at most (its launch bound).
pub const SPLIT_THREADS: u32 = 256;
/// Key rows a lane of the one-row split form loads at once.
pub const SPLIT_UNROLL: u32 = 8;
/// Cache positions a block of the one-row split form takes.
pub const SPLIT_KEYS: u32 = 64;
/// Threads a block of the grouped split form, where a cache row has at most as many packs.
pub const GROUP_THREADS: u32 = 128;
/// Threads a block of the grouped split form, at most (its launch bound): rows of up to 256
/// elements read an element at a time.
pub const GROUP_MAX_THREADS: u32 = 256;
/// Query heads a block of the grouped split form takes, at most.
pub const GROUP_HEADS: u32 = 8;
/// The grouped split on the matrix units by the widest head each entry takes, narrowest first
/// (16-bit caches only: over the queries' own dtype for bf16 and f16, else under f32 queries).
pub const MATRIX: [(u32, CacheOps); 3] = [
    (
        64,
        CacheOps(
            "attention_split_matrix_d64",
            "attention_split_matrix_d64_cache_f16",
            "attention_split_matrix_d64_cache_bf16",
        ),
    ),
    (
        128,
        CacheOps(
            "attention_split_matrix_d128",
            "attention_split_matrix_d128_cache_f16",
            "attention_split_matrix_d128_cache_bf16",
        ),
    ),
    (
        256,
        CacheOps(
            "attention_split_matrix_d256",
            "attention_split_matrix_d256_cache_f16",
            "attention_split_matrix_d256_cache_bf16",
        ),
    ),
];
/// Cache positions a warp's tile of the matrix form holds.
pub const MATRIX_KEYS: u32 = 16;
/// Query heads a block of the matrix form takes, at most (one tile's rows).
pub const MATRIX_ROWS: u32 = 16;
/// Tiles a warp of the matrix form has in shared memory (one loading while one is scored).
pub const MATRIX_STAGES: u32 = 2;
/// Warps a block of the matrix form has, at most (its launch bound, with 64-lane warps).
pub const MATRIX_MAX_WARPS: u32 = 4;
/// The shared memory of a matrix-form block for heads of up to `dmax` elements with `warps`
/// warps, q in `q_parts` 16-bit parts (2 under f32 queries): q's parts (16 rows of dmax + 8
/// elements each), each row's power of two (16 f32), then a warp's stages (a key and a value
/// tile each) and its scratch tile (attention.hip's `attention_split_matrix_impl` lays them out
/// so; the warps' states at the end reuse their stages).
pub const fn matrix_shared_bytes(dmax: u32, q_parts: u32, warps: u32) -> u32 {
    let ld = dmax + 8;
    let warp = MATRIX_STAGES * 2 * MATRIX_KEYS * ld + 16 * crate::flash_attention::SCRATCH_LD;
    2 * (q_parts * 16 * ld) + 4 * 16 + 2 * warps * warp
}
/// The ops and their entries over a 16-bit cache (under f32 queries: the second group of
/// [`ATTENTION`](MODULE)).
pub const CACHE_OPS: [CacheOps; 4] = [
    CacheOps(
        "cached_attention",
        "cached_attention_cache_f16",
        "cached_attention_cache_bf16",
    ),
    CacheOps(
        "attention_split",
        "attention_split_cache_f16",
        "attention_split_cache_bf16",
    ),
    CacheOps(
        "attention_split_grouped",
        "attention_split_grouped_cache_f16",
        "attention_split_grouped_cache_bf16",
    ),
    CacheOps(
        "rope_kv_write",
        "rope_kv_write_cache_f16",
        "rope_kv_write_cache_bf16",
    ),
];
/// A grouped split block's shared memory for rows of `head_dim` elements of `elem_bytes`, read
/// `width` elements at a time (a 16-byte pack, or 1), in tiles of `tile_keys` rows, with
/// `threads` threads, up to `group_heads` heads and accumulators of `acc_bytes`: a key tile and
/// a value tile (rows padded by 16 bytes, each tile rounded up to 16 bytes), then in the
/// accumulator type q, the scores' parts, the weights, three values a head and the key groups'
/// sums (attention.hip's `attention_split_grouped_impl` lays them out so).
pub const fn group_shared_bytes(
    (head_dim, elem_bytes, width): (u32, u32, u32),
    tile_keys: u32,
    threads: u32,
    group_heads: u32,
    acc_bytes: u32,
) -> u32 {
    let packs = head_dim / width;
    let pack_bytes = width * elem_bytes;
    let pad = if 16 / pack_bytes > 1 {
        16 / pack_bytes
    } else {
        1
    };
    let tile = (tile_keys * (packs + pad) * pack_bytes).div_ceil(16) * 16;
    let parts = threads / tile_keys;
    let key_groups = threads / packs;
    2 * tile
        + acc_bytes
            * (group_heads * head_dim
                + parts * group_heads * tile_keys
                + tile_keys * group_heads
                + 3 * group_heads
                + key_groups * head_dim)
}
/// The shared memory a grouped split block takes at most where the device allows it (AMD's
/// workgroups have 64 KiB): its tiles are the longest that fit, from 128 keys down, with a key
/// tile of at most GROUP_TILE_BYTES (several blocks a multiprocessor).
pub const GROUP_SHARED_BYTES: u32 = 64 << 10;
/// The most bytes of a grouped split block's key tile (as many of value rows beside it).
pub const GROUP_TILE_BYTES: u32 = 16 << 10;

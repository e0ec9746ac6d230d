//! The launch shape of `flash_attention` (flash_attention.hip's `FA_*` defines; a test checks
//! the two agree) and its parameter list.

use crate::{DevicePtr, Entry, EntryGroup, KernelModule, KernelParams, HEADERS};

/// Forward attention over whole sequences without a (seq x seq) buffer
/// (`flash_attention_<dtype>`): grouped-query heads, causal and sliding windows, ALiBi, softcap,
/// variable lengths.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "flash_attention",
    source: include_str!("flash_attention.hip"),
    groups: &[
        EntryGroup {
            ops: &["flash_attention"],
            dtypes: &["bf16", "f16", "f32"],
        },
        EntryGroup {
            ops: &["flash_tiled_d64", "flash_tiled_d128", "flash_tiled_d256"],
            dtypes: &["bf16", "f16"],
        },
    ],
    params: &[Params::DECL],
};

crate::kernel_params! {
    /// `flash_attention_<dtype>`: q `[tokens_q, heads, head_dim]`, k and v `[tokens_k,
    /// kv_heads, head_dim]`, out q's shape; sequence b's rows from `cu_q[b]` / `cu_k[b]`
    /// (null: `b * seq_q` / `b * seq_k`, every sequence `seq_q` / `seq_k` long); ALiBi
    /// slopes (null: none) at `b * alibi_batch_stride + h`; a softcap of 0 is none; a
    /// negative window is no limit on that side (causal: `window_right` 0).
    pub struct Params = "FLASH_PARAMS(T)" {
        q: DevicePtr = "const T*",
        k: DevicePtr = "const T*",
        v: DevicePtr = "const T*",
        out: DevicePtr = "T*",
        alibi: Option<DevicePtr> = "const float*",
        cu_q: Option<DevicePtr> = "const u32*",
        cu_k: Option<DevicePtr> = "const u32*",
        heads: u32,
        kv_heads: u32,
        head_dim: u32,
        seq_q: u32,
        seq_k: u32,
        alibi_batch_stride: u32,
        scale: f32,
        softcap: f32,
        window_left: i32,
        window_right: i32,
    }
}

/// Keyed by the dtype of q, k, v and out.
pub const FLASH: Entry<Params> = Entry::new(&MODULE, "flash_attention");
/// Query rows a block takes (a warp each).
pub const ROWS: u32 = 8;
/// The longest head.
pub const MAX_HEAD_DIM: u32 = 256;

/// The tiled form on the matrix units (bf16 and f16), by the widest head each takes
/// (`(widest head, entry)`, narrowest first); the same parameters as [`FLASH`].
pub const TILED: [(u32, Entry<Params>); 3] = [
    (64, Entry::new(&MODULE, "flash_tiled_d64")),
    (128, Entry::new(&MODULE, "flash_tiled_d128")),
    (256, Entry::new(&MODULE, "flash_tiled_d256")),
];
/// Warps (wavefronts) a block of the tiled form has (`FT_WARPS`).
pub const TILED_WARPS: u32 = 4;
/// The row stride of a warp's scratch tile for handing scores over as an operand where the
/// accumulator's layout is not the operand's (compat.h's `MMA_SCRATCH_LD`, AMD's layouts).
pub const SCRATCH_LD: u32 = 24;

/// The tiled form's shape at one widest head (flash_attention.hip's `FT_<set>_*_<dmax>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TiledShape {
    pub dmax: u32,
    /// 16-row query tiles a warp (`MT`).
    pub row_tiles: u32,
    /// Keys a tile (`BC`).
    pub key_rows: u32,
    /// q read from shared memory at every tile (`QS`), else held in registers.
    pub q_shared: bool,
}

impl TiledShape {
    /// Query rows a block takes.
    pub const fn rows(&self) -> u32 {
        16 * self.row_tiles * TILED_WARPS
    }

    /// The dynamic shared memory a block takes: a key and a value tile, q where it is read
    /// from there, and the warps' scratch tiles where `scratch` (layouts other than mma.sync's).
    pub const fn shared_bytes(&self, scratch: bool) -> u32 {
        let ld = self.dmax + 8;
        let q_rows = if self.q_shared { self.rows() } else { 0 };
        let scratch = if scratch {
            TILED_WARPS * 16 * SCRATCH_LD
        } else {
            0
        };
        2 * ((2 * self.key_rows + q_rows) * ld + scratch)
    }
}

const fn shape(dmax: u32, row_tiles: u32, key_rows: u32, q_shared: bool) -> TiledShape {
    TiledShape {
        dmax,
        row_tiles,
        key_rows,
        q_shared,
    }
}

/// The shapes on NVIDIA's mma.sync (set `SYNC`: blocks past 48 KiB of shared memory).
pub const TILED_SYNC: [TiledShape; 3] = [
    shape(64, 2, 64, false),
    shape(128, 2, 32, true),
    shape(256, 1, 32, true),
];
/// The shapes within AMD's 64 KiB workgroups (set `LDS`: MFMA, WMMA and the wave64 emulation).
pub const TILED_LDS: [TiledShape; 3] = [
    shape(64, 2, 64, false),
    shape(128, 2, 32, true),
    shape(256, 1, 16, true),
];

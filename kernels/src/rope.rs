//! The rotary embeddings' entries and parameters (rope.hip).

use crate::{DevicePtr, Entry, EntryGroup, KernelModule, KernelParams, HEADERS};

/// Rotary embeddings (candle-nn's rope_i, rope, rope_thd).
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "rope",
    source: include_str!("rope.hip"),
    groups: &[EntryGroup {
        ops: &["rope_i", "rope", "rope_thd"],
        dtypes: &["bf16", "f16", "f32", "f64"],
    }],
    params: &[Params::DECL],
};

crate::kernel_params! {
    /// The parameters of every rotary embedding: x, the cos/sin tables and the output
    /// (contiguous), the tensor's first three dims (b, h, t; b, t, h for `rope_thd`),
    /// the head dim and the tables' batch stride (0: one table for the batch).
    pub struct Params = "ROPE_PARAMS(T)" {
        x: DevicePtr = "const T*",
        cos: DevicePtr = "const T*",
        sin: DevicePtr = "const T*",
        out: DevicePtr = "T*",
        d0: u64,
        d1: u64,
        d2: u64,
        d: u64,
        cs_batch_stride: u64,
    }
}

/// Pairs interleaved (candle-nn's `rope_i`).
pub const ROPE_I: Entry<Params> = Entry::new(&MODULE, "rope_i");
/// Pairs across the halves of a head (candle-nn's `rope`).
pub const ROPE: Entry<Params> = Entry::new(&MODULE, "rope");
/// Halves, (b, t, h, d) layout (candle-nn's `rope_thd`).
pub const ROPE_THD: Entry<Params> = Entry::new(&MODULE, "rope_thd");

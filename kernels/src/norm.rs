//! The row kernels' entries and their one parameter list (norm.hip).

use crate::{DevicePtr, Entry, EntryGroup, KernelModule, KernelParams, HEADERS};

/// softmax / log-softmax over the last dim, rms_norm, add_rms_norm, layer_norm: one block per row
/// (`<op>_<dtype>`), or rows held in registers as 16-byte packs (`<op>_regpack_<dtype>`) or
/// elements (`<op>_regelem_<dtype>`); every entry takes [`RowParams`].
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "norm",
    source: include_str!("norm.hip"),
    groups: &[EntryGroup {
        ops: &ROW_KERNELS,
        dtypes: &["bf16", "f16", "f32", "f64"],
    }],
    params: &[RowParams::DECL],
};

crate::kernel_params! {
    /// Every row kernel's parameters, over `rows` contiguous rows of `len`: softmax and
    /// log_softmax read x and write out; rms_norm also reads alpha (and eps);
    /// add_rms_norm norms x + r and writes that sum too; layer_norm reads alpha and beta
    /// (`has_beta` 0: no beta). `group`: the threads that hold a row in the register
    /// forms (unused by the block form). A pointer an op does not read is never read.
    pub struct RowParams = "ROW_PARAMS(T)" {
        x: DevicePtr = "const T*",
        r: DevicePtr = "const T*",
        alpha: DevicePtr = "const T*",
        beta: DevicePtr = "const T*",
        sum: DevicePtr = "T*",
        out: DevicePtr = "T*",
        rows: u64,
        len: u64,
        eps: f32,
        has_beta: u32,
        group: u32,
    }
}

/// The row ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowOp {
    Softmax,
    LogSoftmax,
    RmsNorm,
    AddRmsNorm,
    LayerNorm,
}

impl RowOp {
    pub const fn name(self) -> &'static str {
        ROW_KERNELS[self as usize * 3]
    }
}

/// How a kernel covers its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowShape {
    /// A block a row.
    Block,
    /// A group of threads a row, in registers, 16-byte packs.
    RegPack,
    /// A group of threads a row, in registers, an element at a time.
    RegElem,
}

/// The kernels, by op (in [`RowOp`]'s order) and shape (in [`RowShape`]'s).
pub const ROW_KERNELS: [&str; 15] = [
    "softmax",
    "softmax_regpack",
    "softmax_regelem",
    "log_softmax",
    "log_softmax_regpack",
    "log_softmax_regelem",
    "rms_norm",
    "rms_norm_regpack",
    "rms_norm_regelem",
    "add_rms_norm",
    "add_rms_norm_regpack",
    "add_rms_norm_regelem",
    "layer_norm",
    "layer_norm_regpack",
    "layer_norm_regelem",
];

/// The kernel of `op` in `shape`.
pub const fn entry(op: RowOp, shape: RowShape) -> Entry<RowParams> {
    Entry::new(&MODULE, ROW_KERNELS[op as usize * 3 + shape as usize])
}

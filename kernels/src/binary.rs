//! The parameters of the binary module's entries (binary.hip).

use crate::{
    DevicePtr, EntryGroup, KernelLayout, KernelModule, KernelParams, DTYPES, FLOAT_DTYPES, HEADERS,
};

crate::op_list! {
    /// Candle's `BinaryOpT` ops.
    pub enum BinaryOp {
        Add = "add",
        Sub = "sub",
        Mul = "mul",
        Div = "div",
        Maximum = "maximum",
        Minimum = "minimum",
    }
}

crate::op_list! {
    /// Candle's `CmpOp`; results are u8 (1 or 0).
    pub enum CmpOp {
        Eq = "eq",
        Ne = "ne",
        Lt = "lt",
        Le = "le",
        Gt = "gt",
        Ge = "ge",
    }
}

/// The binary module's ops of every dtype: arithmetic, then comparisons.
const ALL_DTYPE_OPS: [&str; 12] = crate::concat_names(BinaryOp::NAMES, CmpOp::NAMES);

/// Binary arithmetic and comparisons (comparisons write u8); `silu_mul` (silu(a) * b) for
/// floats.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "binary",
    source: include_str!("binary.hip"),
    groups: &[
        EntryGroup {
            ops: &ALL_DTYPE_OPS,
            dtypes: &DTYPES,
        },
        EntryGroup {
            ops: &["silu_mul"],
            dtypes: &FLOAT_DTYPES,
        },
    ],
    params: &[Params::DECL, CmpParams::DECL],
};

crate::kernel_params! {
    /// `<op>_<dtype>` (arithmetic, `silu_mul`): out[i] = a[i] op b[i] over `n` elements
    /// of two layouts of the same dims, written contiguously.
    pub struct Params = "BINARY_PARAMS(T)" {
        a: DevicePtr = "const T*",
        b: DevicePtr = "const T*",
        out: DevicePtr = "T*",
        n: u64,
        la: KernelLayout,
        lb: KernelLayout,
    }
}

crate::kernel_params! {
    /// `<cmp>_<dtype>`: as [`Params`], the result 1 or 0 as u8.
    pub struct CmpParams = "CMP_PARAMS(T)" {
        a: DevicePtr = "const T*",
        b: DevicePtr = "const T*",
        out: DevicePtr = "u8*",
        n: u64,
        la: KernelLayout,
        lb: KernelLayout,
    }
}

//! The parameters of the unary module's entries (unary.hip).

use crate::{
    DevicePtr, Entry, EntryGroup, KernelLayout, KernelModule, KernelParams, DTYPES, FLOAT_DTYPES,
    HEADERS, INT_DTYPES,
};

crate::op_list! {
    /// Unary ops of Candle's `UnaryOpT` plus normcdf and candle-nn's sigmoid.
    pub enum UnaryOp {
        Neg = "neg",
        Recip = "recip",
        Exp = "exp",
        Log = "log",
        Sin = "sin",
        Cos = "cos",
        Tanh = "tanh",
        Erf = "erf",
        Ceil = "ceil",
        Floor = "floor",
        Round = "round",
        NormCdf = "normcdf",
        Abs = "abs",
        Sqr = "sqr",
        Sqrt = "sqrt",
        /// The tanh approximation.
        Gelu = "gelu",
        GeluErf = "gelu_erf",
        Relu = "relu",
        Silu = "silu",
        Sign = "sign",
        Sigmoid = "sigmoid",
    }
}

impl UnaryOp {
    /// Whether the op is defined for `dtype` (floats: all; integers: what the CPU backend
    /// computes for them).
    pub fn supports(self, dtype: rocm_device::DType) -> bool {
        dtype.is_float() || UNARY_INT_OPS.contains(&self.name())
    }
}

/// Math ops that only floats have: the unary ops, elu and powf.
pub const UNARY_FLOAT_OPS: [&str; 23] = crate::concat_names(UnaryOp::NAMES, ["elu", "powf"]);

/// Unary ops Candle's CPU backend also computes for integers.
pub const UNARY_INT_OPS: [&str; 10] = [
    "abs", "ceil", "floor", "round", "relu", "sign", "gelu", "gelu_erf", "erf", "silu",
];

/// Unary math, elu, powf and affine.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "unary",
    source: include_str!("unary.hip"),
    groups: &[
        EntryGroup {
            ops: &UNARY_FLOAT_OPS,
            dtypes: &FLOAT_DTYPES,
        },
        EntryGroup {
            ops: &UNARY_INT_OPS,
            dtypes: &INT_DTYPES,
        },
        EntryGroup {
            ops: &["affine"],
            dtypes: &DTYPES,
        },
    ],
    params: &[Params::DECL, AffineParams::DECL],
};

crate::kernel_params! {
    /// `<op>_<dtype>`: out[i] = op(input at i of `l`) over `n` elements, written
    /// contiguously; `p` is the op's parameter (elu's alpha, powf's exponent; 0 for the
    /// others).
    pub struct Params = "UNARY_PARAMS(T)" {
        input: DevicePtr = "const T*",
        out: DevicePtr = "T*",
        n: u64,
        l: KernelLayout,
        p: f64,
    }
}

crate::kernel_params! {
    /// `affine_<dtype>`: out[i] = input[i] * mul + add (both rounded to the dtype first).
    pub struct AffineParams = "AFFINE_PARAMS(T)" {
        input: DevicePtr = "const T*",
        out: DevicePtr = "T*",
        n: u64,
        l: KernelLayout,
        mul: f64,
        add: f64,
    }
}

/// `x * mul + add`.
pub const AFFINE: Entry<AffineParams> = Entry::new(&MODULE, "affine");

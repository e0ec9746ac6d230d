//! The parameters of the unary module's entries (unary.hip).

use crate::{
    DevicePtr, Entry, EntryGroup, KernelLayout, KernelModule, KernelParams, DTYPES, FLOAT_DTYPES,
    HEADERS, INT_DTYPES,
};

/// Math ops that only floats have.
pub const UNARY_FLOAT_OPS: [&str; 23] = [
    "neg", "recip", "exp", "log", "sin", "cos", "tanh", "erf", "ceil", "floor", "round", "normcdf",
    "abs", "sqr", "sqrt", "gelu", "gelu_erf", "relu", "silu", "sign", "sigmoid", "elu", "powf",
];

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

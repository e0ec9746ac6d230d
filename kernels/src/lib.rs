//! The kernel sources of candle-rocm, embedded as strings.
//!
//! Each op family is one `.hip` file whose templates are instantiated per dtype as
//! `extern "C"` entry points named `<op>_<dtype>` (dtype names as Candle's `DType::as_str`).
//! The runtime compiles a module with [`prelude`] in front: `compat.h`, the only place where
//! the AMD (hiprtc) and NVIDIA (NVRTC) builds differ, then the shared layout, elementwise-loop
//! and reduction headers.

pub use rocm_device::kernel::{
    concat_names, layout, params, ArgSink, DevicePtr, Entry, EntryGroup, Family, KernelArg,
    KernelLayout, KernelModule, KernelParams, LayoutError, ParamsDecl, MAX_DIMS,
};
use rocm_device::DType;
pub use rocm_device::{kernel_params, op_list};

/// `compat.h`: per-platform types, shuffles, ballots and narrow atomics.
pub const COMPAT_H: &str = include_str!("../include/compat.h");
/// `layout.h`: the by-value strided layout struct and its index decoding.
pub const LAYOUT_H: &str = include_str!("../include/layout.h");
/// `map.h`: grid-stride elementwise loops with 16-byte contiguous paths.
pub const MAP_H: &str = include_str!("../include/map.h");
/// `reduce.h`: the warp and block combines of every kernel that reduces.
pub const REDUCE_H: &str = include_str!("../include/reduce.h");

/// The names of `dtypes` (`DType::as_str`), evaluated at compile time: the dtype lists below
/// are rocm-device's `DType::ALL`, not a second spelling of it.
const fn names<const N: usize>(dtypes: [DType; N]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = dtypes[i].as_str();
        i += 1;
    }
    out
}

/// `dtypes` of one kind (float or not), in `DType::ALL`'s order.
const fn of_kind<const N: usize>(float: bool) -> [DType; N] {
    let mut out = [DType::U8; N];
    let (mut i, mut n) = (0, 0);
    while i < DType::ALL.len() {
        if DType::ALL[i].is_float() == float {
            out[n] = DType::ALL[i];
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "the dtype kind's count");
    out
}

/// Dtype names as Candle 0.11.1's `DType::as_str`, in the order modules instantiate them.
pub const DTYPES: [&str; 10] = names(DType::ALL);
/// Floating-point dtypes (math ops are defined for these only).
pub const FLOAT_DTYPES: [&str; 5] = names(of_kind(true));
/// Integer dtypes.
pub const INT_DTYPES: [&str; 5] = names(of_kind(false));
/// Dtypes a `where_cond` condition may have (Candle's CPU backend accepts these).
pub const CONDITION_DTYPES: [&str; 5] = INT_DTYPES;

/// The headers every module is compiled with, `(file name, text)`, in order.
pub const HEADERS: &[(&str, &str)] = &[
    ("compat.h", COMPAT_H),
    ("layout.h", LAYOUT_H),
    ("map.h", MAP_H),
    ("reduce.h", REDUCE_H),
];

/// [`HEADERS`] as one text, each under its own `#line` name: what every module's source
/// follows (for sources compiled outside the table, such as tests' own kernels).
pub fn prelude() -> String {
    rocm_device::kernel::prelude_of(HEADERS)
}

pub mod attention;
pub mod binary;
pub mod cast;
pub mod conv;
pub mod fill;
pub mod flash_attention;
pub mod gemm;
pub mod indexing;
pub mod matrix;
pub mod norm;
pub mod quantized;
pub mod random;
pub mod reduce;
pub mod rope;
pub mod sort;
pub mod ternary;
pub mod unary;
pub mod upsample;

pub use attention::MODULE as ATTENTION;
pub use binary::MODULE as BINARY;
pub use cast::MODULE as CAST;
pub use conv::MODULE as CONV;
pub use fill::MODULE as FILL;
pub use flash_attention::MODULE as FLASH_ATTENTION;
pub use gemm::MODULE as GEMM;
pub use indexing::MODULE as INDEXING;
pub use matrix::MODULE as MATRIX;
pub use norm::MODULE as NORM;
pub use quantized::{GGML_BLOCK_TYPES, GGML_FLOAT_TYPES, GGML_TYPES, MODULE as QUANTIZED};
pub use random::{MODULE as RANDOM, RANDOM_DTYPES};
pub use reduce::MODULE as REDUCE;
pub use rope::MODULE as ROPE;
pub use sort::MODULE as SORT;
pub use ternary::MODULE as TERNARY;
pub use unary::{MODULE as UNARY, UNARY_FLOAT_OPS, UNARY_INT_OPS};
pub use upsample::MODULE as UPSAMPLE;

/// Element widths: the filter keys of kernels that only move bytes (one instantiation serves
/// every dtype of that size; a run of elements may also travel as one wider unit).
pub const WIDTHS: [&str; 5] = ["w1", "w2", "w4", "w8", "w16"];

/// The width key of `bytes`-byte elements.
pub fn width_key(bytes: usize) -> Option<&'static str> {
    WIDTHS.into_iter().find(|w| w[1..].parse() == Ok(bytes))
}

/// Index dtypes the indexing kernels take (every one Candle's CPU backend accepts somewhere).
pub const ID_DTYPES: [&str; 5] = ["u8", "u32", "i16", "i32", "i64"];

/// Modules nearly every model of a dtype uses: when the first kernel of a key is needed, the
/// runtime compiles these modules' variants of that key in the background ([`companions`]).
pub const PREFETCH_MODULES: [&str; 9] = [
    "unary", "binary", "cast", "fill", "reduce", "norm", "indexing", "ternary", "rope",
];

/// The module variants to compile in the background once a kernel of `key` is first needed:
/// every [`PREFETCH_MODULES`] module built for `key`, and the byte-moving ones (keyed by
/// width) at the width of `key`'s elements (`element_bytes`, where `key` names a dtype) and
/// at 16 bytes, the unit contiguous runs travel in.
pub fn companions(
    key: &str,
    element_bytes: Option<usize>,
) -> Vec<(&'static KernelModule, &'static str)> {
    let widths: Vec<&'static str> = element_bytes
        .and_then(width_key)
        .into_iter()
        .chain(width_key(16))
        .collect();
    ALL_MODULES
        .iter()
        .copied()
        .filter(|m| PREFETCH_MODULES.contains(&m.name))
        .flat_map(|m| {
            let keys = m.filter_keys();
            let own = keys.iter().copied().find(|k| *k == key);
            own.into_iter()
                .chain(widths.iter().copied().filter(move |w| keys.contains(w)))
                .map(move |k| (m, k))
        })
        .collect()
}

/// Every module, for the compile tiers to iterate over.
pub const ALL_MODULES: &[&KernelModule] = &[
    &FILL,
    &UNARY,
    &BINARY,
    &CAST,
    &TERNARY,
    &ROPE,
    &REDUCE,
    &NORM,
    &INDEXING,
    &UPSAMPLE,
    &SORT,
    &CONV,
    &RANDOM,
    &QUANTIZED,
    &ATTENTION,
    &FLASH_ATTENTION,
    &MATRIX,
    &GEMM,
];

#[cfg(test)]
mod tests;

//! candle-rocm: the ROCm backend of Candle as one device and one storage type.
//!
//! [`RocmDevice`] and [`RocmStorage`] compose the op crates (rocm-elementwise, rocm-reduce,
//! rocm-indexing, rocm-blas, rocm-dnn over rocm-device) in the shape of Candle 0.11.1's
//! `BackendDevice` (13 methods) and `BackendStorage` (31 methods): same names, same
//! semantics, same error cases, with Candle-agnostic argument types, so that the glue inside
//! candle-core is one call per method. Nothing here depends on candle-core.
//!
//! Also here: random draws for bf16/f16/f32/f64 (Philox4x32-10, reproducible for a seed),
//! transfers between devices, the fused ops candle-nn calls (softmax, rms_norm, layer_norm,
//! rope variants, sigmoid), arg_sort, and the memory pool's statistics.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod collective;
mod device;
pub mod quantized;
mod storage;

pub use device::{Options, RocmDevice, DEFAULT_SEED};
pub use rocm_attention::AttentionMask;
pub use rocm_blas::{BlasOptions, ReducedPrecision};
pub use rocm_device::host_time;
pub use rocm_device::{
    Config, DType, Error, Graph, Layout, MemoryStats, Operand, Platform, Result, Scalar,
};
pub use rocm_dnn::{
    Conv1dParams, Conv2dParams, ConvTranspose1dParams, ConvTranspose2dParams, DnnOptions, DnnPath,
};
pub use rocm_elementwise::{BinaryOp, CmpOp, Copy2d, RopeVariant, UnaryOp};
pub use rocm_indexing::IndexOptions;
pub use rocm_reduce::ReduceOp;
pub use storage::{binary_op_from_name, unary_op_from_name, CacheMask, RocmStorage};
pub use storage::{FlashArgs, FlashVarLen};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candle_op_names_map_to_ops() {
        for name in [
            "neg", "recip", "exp", "log", "sin", "cos", "tanh", "erf", "ceil", "floor", "round",
            "abs", "sqr", "sqrt", "gelu", "gelu_erf", "relu", "silu", "sign", "sigmoid",
        ] {
            let op = unary_op_from_name(name).unwrap();
            assert_eq!(op.name(), name);
        }
        for name in ["add", "sub", "mul", "div", "maximum", "minimum"] {
            assert_eq!(binary_op_from_name(name).unwrap().name(), name);
        }
        assert!(unary_op_from_name("nonsense").is_none());
    }
}

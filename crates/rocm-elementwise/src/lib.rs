//! rocm-elementwise: the elementwise op family of candle-rocm.
//!
//! Unary math, `elu`, `powf`, `affine`, binary arithmetic and comparisons, casts between all
//! ten dtypes, `where_cond`, `silu_mul` (candle-nn's gated MLP in one launch), constant set, 2-D copies, and candle-nn's rotary embeddings
//! (strided copies are the runtime's: `Operand::copy_to`). Inputs are [`Operand`]s (a buffer,
//! its dtype and a [`Layout`] of dims, strides and start offset in elements); outputs are fresh contiguous buffers (or a caller's buffer for the `_into`
//! forms, which may be the input itself). Semantics are those of Candle 0.11.1's CPU backend:
//! an op the CPU backend does not compute for a dtype is an [`Error::UnsupportedDType`], a
//! layout that reaches past its buffer is an [`Error::SizeMismatch`], never a fault.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod copy;
mod ops;
pub mod random;
mod rope;

pub use copy::OperandCopy;
pub use ops::{
    affine, affine_into, binary, binary_into, cast, cast_into, cmp, const_set, copy2d, copy2d_many,
    elu, powf, silu_mul, unary, unary_into, where_cond, BinaryOp, CmpOp, Copy2d, UnaryOp,
};
pub use rocm_device::{Buffer, DType, Device, Error, Layout, Operand, Result, Scalar};
pub use rope::{rope, RopeVariant};

//! Pairs of ops a transformer block runs back to back, each in one launch on Candle tensors,
//! with the values the two ops give: a residual add with the next rms norm, and the gated
//! MLP's `silu(gate) * up`. No gradient.

use crate::backend::BackendStorage;
use crate::op::BackpropOp;
use crate::{Result, Storage, Tensor};

/// Checks that `others` are on `first`'s device.
pub(super) fn same_device(op: &'static str, first: &Tensor, others: &[&Tensor]) -> Result<()> {
    for t in others {
        if !t.device().same_device(first.device()) {
            return Err(crate::Error::DeviceMismatchBinaryOp {
                lhs: first.device().location(),
                rhs: t.device().location(),
                op,
            }
            .bt());
        }
    }
    Ok(())
}

/// The ROCm storage of a tensor's storage, or an error naming `op`.
pub(super) fn rocm<'a>(op: &'static str, s: &'a Storage) -> Result<&'a super::RocmStorage> {
    match s {
        Storage::Rocm(s) => Ok(s),
        _ => Err(crate::Error::Msg(format!("{op}: the tensors are not on a ROCm device")).bt()),
    }
}

pub(super) fn output(storage: super::RocmStorage, like: &Tensor) -> Tensor {
    crate::tensor::from_storage(
        Storage::Rocm(storage),
        like.shape().clone(),
        BackpropOp::none(),
        false,
    )
}

/// `sum = x + residual` and candle-nn's `rms_norm(sum, alpha, eps)` over the last dim in one
/// launch; returns `(sum, normed)`, bit for bit what `(x + residual)?` and `rms_norm` give on
/// ROCm. `x` and `residual` of one shape and float dtype, `alpha` of the last dim's length.
pub fn add_rms_norm(
    x: &Tensor,
    residual: &Tensor,
    alpha: &Tensor,
    eps: f32,
) -> Result<(Tensor, Tensor)> {
    const OP: &str = "add_rms_norm";
    same_device(OP, x, &[residual, alpha])?;
    let ((xs, xl), (rs, rl), (a, al)) = (
        x.storage_and_layout(),
        residual.storage_and_layout(),
        alpha.storage_and_layout(),
    );
    let (xs, rs, a) = (rocm(OP, &xs)?, rocm(OP, &rs)?, rocm(OP, &a)?);
    let (sum, normed) = xs
        .inner()
        .add_rms_norm(
            &super::layout(xl),
            (rs.inner(), &super::layout(rl)),
            (a.inner(), &super::layout(al)),
            eps,
        )
        .map_err(super::wrap)?;
    let device = xs.device();
    Ok((
        output(device.wrap_storage(sum), x),
        output(device.wrap_storage(normed), x),
    ))
}

/// `silu(gate) * up` elementwise in one launch, bit for bit what candle-nn's `silu` then a
/// mul give on ROCm: `gate` and `up` of one shape and float dtype, any layouts (the two
/// halves of a stacked gate/up projection as views).
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    const OP: &str = "silu_mul";
    same_device(OP, gate, &[up])?;
    let ((gs, gl), (us, ul)) = (gate.storage_and_layout(), up.storage_and_layout());
    let (gs, us) = (rocm(OP, &gs)?, rocm(OP, &us)?);
    let out = gs.wrap(
        gs.inner()
            .silu_mul(&super::layout(gl), (us.inner(), &super::layout(ul))),
    )?;
    Ok(output(out, gate))
}

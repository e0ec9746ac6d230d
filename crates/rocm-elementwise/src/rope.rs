//! Host side of rope.hip: candle-nn's rotary embeddings.

use rocm_device::{Buffer, DType, Device, Error, LaunchConfig, Operand, Result};
use rocm_kernels as kernels;

/// Which of candle-nn's three rotary embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeVariant {
    /// `rope_i`: x is (b, h, t, d), rotated pairs are interleaved (2k, 2k + 1).
    Interleaved,
    /// `rope`: x is (b, h, t, d), element k pairs with k + d/2.
    Halves,
    /// `rope_thd`: x is (b, t, h, d), halves as in `rope`.
    Thd,
}

impl RopeVariant {
    pub const fn name(self) -> &'static str {
        match self {
            RopeVariant::Interleaved => "rope_i",
            RopeVariant::Halves => "rope",
            RopeVariant::Thd => "rope_thd",
        }
    }
}

/// Rotates `x` by the angles whose cosines and sines are in `cos` / `sin`, which are either
/// (seq, d/2) or per batch entry (b, seq, d/2), with seq >= the sequence length of `x`.
/// Every input must be contiguous and of one dtype (candle-nn demands it too); the output is
/// new.
pub fn rope(
    device: &Device,
    variant: RopeVariant,
    x: Operand<'_>,
    cos: Operand<'_>,
    sin: Operand<'_>,
) -> Result<Buffer> {
    let op = variant.name();
    let dtype = x.dtype;
    if !matches!(dtype, DType::BF16 | DType::F16 | DType::F32 | DType::F64) {
        return Err(Error::UnsupportedDType { op, dtype });
    }
    if cos.dtype != dtype || sin.dtype != dtype {
        return Err(Error::DTypeMismatch {
            op,
            detail: format!("x {dtype}, cos {}, sin {}", cos.dtype, sin.dtype),
        });
    }
    let (x_l, cos_l, sin_l) = (x.layout, cos.layout, sin.layout);
    let shape_err = |detail: String| Error::ShapeMismatch { op, detail };
    let &[d0, d1, d2, d] = x_l.dims.as_slice() else {
        return Err(shape_err(format!("x must be 4-D, got {:?}", x_l.dims)));
    };
    let (b, t) = match variant {
        RopeVariant::Thd => (d0, d1),
        _ => (d0, d2),
    };
    let batched = cos_l.dims.len() == 3 && sin_l.dims.len() == 3;
    for (name, l) in [("cos", cos_l), ("sin", sin_l)] {
        let (seq, half) = match l.dims.as_slice() {
            &[s, h] => (s, h),
            &[bb, s, h] if bb == b => (s, h),
            other => {
                return Err(shape_err(format!(
                    "{name} must be (seq, d/2) or ({b}, seq, d/2), got {other:?}"
                )))
            }
        };
        if half * 2 != d || seq < t {
            return Err(shape_err(format!(
                "x {:?} does not match {name} {:?}",
                x_l.dims, l.dims
            )));
        }
    }
    for (name, operand) in [("x", x), ("cos", cos), ("sin", sin)] {
        let l = operand.layout;
        if !l.is_contiguous() {
            return Err(Error::InvalidLayout(format!(
                "{op}: {name} must be contiguous, got dims {:?} strides {:?}",
                l.dims, l.strides
            )));
        }
        operand.check(op)?;
    }
    let n = x_l.elem_count();
    let out = device.alloc(n * dtype.size_in_bytes())?;
    if n == 0 {
        return Ok(out);
    }
    // The CPU backend steps through per-batch tables with t * d/2, whatever their seq length.
    let cs_batch_stride = if batched { t * (d / 2) } else { 0 };
    let size = dtype.size_in_bytes();
    let params = kernels::rope::Params {
        x: x.buffer.ptr_at(x_l.start * size)?,
        cos: cos.buffer.ptr_at(cos_l.start * size)?,
        sin: sin.buffer.ptr_at(sin_l.start * size)?,
        out: out.ptr(),
        d0: d0 as u64,
        d1: d1 as u64,
        d2: d2 as u64,
        d: d as u64,
        cs_batch_stride: cs_batch_stride as u64,
    };
    let entry = match variant {
        RopeVariant::Interleaved => kernels::rope::ROPE_I,
        RopeVariant::Halves => kernels::rope::ROPE,
        RopeVariant::Thd => kernels::rope::ROPE_THD,
    };
    let _span = tracing::debug_span!("op", op, dtype = %dtype, n).entered();
    device.launch_entry(
        entry,
        dtype.as_str(),
        LaunchConfig::for_elements((n / 2) as u64, device.info()),
        &params,
    )?;
    Ok(out)
}

//! Nearest and bilinear upsampling of (b, c, [h,] w) tensors of any layout.

use rocm_device::{Buffer, DType, Device, Error, KernelLayout, LaunchConfig, Operand, Result};
use rocm_kernels::upsample::{self, Params};
use rocm_kernels::{self as kernels, Entry};

/// (batch, channel) layout with the start offset, then the spatial (dim, stride) pairs.
fn split(
    op: &'static str,
    src: Operand<'_>,
    rank: usize,
) -> Result<(KernelLayout, Vec<(usize, usize)>)> {
    let l = src.layout;
    if l.dims.len() != rank {
        return Err(Error::ShapeMismatch {
            op,
            detail: format!("expects a rank-{rank} tensor, got dims {:?}", l.dims),
        });
    }
    if l.dims[2..].contains(&0) && l.dims[..2].iter().all(|&d| d > 0) {
        return Err(Error::ShapeMismatch {
            op,
            detail: format!("cannot upsample the empty spatial dims of {:?}", l.dims),
        });
    }
    let outer = KernelLayout::new(&l.dims[..2], &l.strides[..2], l.start)?;
    let spatial = l.dims[2..]
        .iter()
        .copied()
        .zip(l.strides[2..].iter().copied())
        .collect();
    Ok((outer, spatial))
}

fn width(dtype: DType) -> Result<&'static str> {
    kernels::width_key(dtype.size_in_bytes()).ok_or(Error::UnsupportedDType {
        op: "upsample",
        dtype,
    })
}

/// (b, c, w) -> (b, c, w_out), each output taking input `min(w - 1, floor(x * w / w_out))`.
pub fn upsample_nearest1d(device: &Device, src: Operand<'_>, w_out: usize) -> Result<Buffer> {
    const OP: &str = "upsample_nearest1d";
    let dtype = src.dtype;
    src.check(OP)?;
    let (outer, sp) = split(OP, src, 3)?;
    let (b, c) = (src.layout.dims[0], src.layout.dims[1]);
    let n = b * c * w_out;
    let out = device.alloc(n * dtype.size_in_bytes())?;
    if n == 0 {
        return Ok(out);
    }
    let (w_in, sw) = sp[0];
    let params = Params {
        src: src.buffer.ptr(),
        out: out.ptr(),
        n: n as u64,
        outer,
        stride_h: 0,
        stride_w: sw as u64,
        h_in: 1,
        w_in: w_in as u64,
        h_out: 1,
        w_out: w_out as u64,
        scale_h: 1.0,
        scale_w: w_in as f64 / w_out as f64,
        align_corners: 0,
    };
    launch(device, upsample::NEAREST_1D, width(dtype)?, &params)?;
    Ok(out)
}

/// (b, c, h, w) -> (b, c, h_out, w_out), nearest source pixel as [`upsample_nearest1d`] per axis.
pub fn upsample_nearest2d(
    device: &Device,
    src: Operand<'_>,
    h_out: usize,
    w_out: usize,
) -> Result<Buffer> {
    const OP: &str = "upsample_nearest2d";
    src.check(OP)?;
    resize2d(device, (OP, src), (h_out, w_out), None)
}

/// Bilinear resize parameters, as PyTorch's `interpolate(mode="bilinear")` takes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bilinear {
    pub h_out: usize,
    pub w_out: usize,
    /// Corner pixels of input and output aligned (scale (in - 1) / (out - 1)).
    pub align_corners: bool,
    /// Explicit scale factors (PyTorch's `scale_factor`) for height and width: without
    /// align_corners, an axis with one uses 1 / factor instead of in / out.
    pub scale_factors: (Option<f64>, Option<f64>),
}

/// The source step per output pixel, as PyTorch's area_pixel_compute_scale.
fn bilinear_scale(n_in: usize, n_out: usize, align_corners: bool, factor: Option<f64>) -> f64 {
    if align_corners {
        if n_out > 1 {
            (n_in - 1) as f64 / (n_out - 1) as f64
        } else {
            0.0
        }
    } else if let Some(f) = factor {
        1.0 / f
    } else {
        n_in as f64 / n_out as f64
    }
}

/// (b, c, h, w) -> (b, c, h_out, w_out) by bilinear interpolation computed in f64 (rounded
/// step by step as the CPU backend rounds it). Same size in and out is a copy.
pub fn upsample_bilinear2d(device: &Device, src: Operand<'_>, p: Bilinear) -> Result<Buffer> {
    const OP: &str = "upsample_bilinear2d";
    src.check(OP)?;
    let (h_in, w_in) = (src.layout.dims.get(2), src.layout.dims.get(3));
    let same_size = (h_in, w_in) == (Some(&p.h_out), Some(&p.w_out));
    let bilinear = (!same_size).then_some(p);
    resize2d(device, (OP, src), (p.h_out, p.w_out), bilinear)
}

/// Nearest (`bilinear` None: also the exact copy of a same-size bilinear) or bilinear resize
/// of a (b, c, h, w) view to (b, c, h_out, w_out).
fn resize2d(
    device: &Device,
    (op, src): (&'static str, Operand<'_>),
    (h_out, w_out): (usize, usize),
    bilinear: Option<Bilinear>,
) -> Result<Buffer> {
    let dtype = src.dtype;
    let (outer, sp) = split(op, src, 4)?;
    let ((h_in, sh), (w_in, sw)) = (sp[0], sp[1]);
    let (b, c) = (src.layout.dims[0], src.layout.dims[1]);
    let n = b * c * h_out * w_out;
    let out = device.alloc(n * dtype.size_in_bytes())?;
    if n == 0 {
        return Ok(out);
    }
    let axis_scales = |p: Bilinear| {
        let (fh, fw) = p.scale_factors;
        (
            bilinear_scale(h_in, h_out, p.align_corners, fh),
            bilinear_scale(w_in, w_out, p.align_corners, fw),
        )
    };
    let ((scale_h, scale_w), align_corners) = match bilinear {
        None => ((h_in as f64 / h_out as f64, w_in as f64 / w_out as f64), 0),
        Some(p) => (axis_scales(p), u32::from(p.align_corners)),
    };
    let params = Params {
        src: src.buffer.ptr(),
        out: out.ptr(),
        n: n as u64,
        outer,
        stride_h: sh as u64,
        stride_w: sw as u64,
        h_in: h_in as u64,
        w_in: w_in as u64,
        h_out: h_out as u64,
        w_out: w_out as u64,
        scale_h,
        scale_w,
        align_corners,
    };
    match bilinear {
        None => launch(device, upsample::NEAREST_2D, width(dtype)?, &params)?,
        Some(_) => launch(device, upsample::BILINEAR_2D, dtype.as_str(), &params)?,
    }
    Ok(out)
}

/// An upsample entry over `params.n` outputs, a thread each.
fn launch(device: &Device, entry: Entry<Params>, key: &'static str, params: &Params) -> Result<()> {
    let config = LaunchConfig::for_elements(params.n, device.info());
    device.launch_entry(entry, key, config, params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_scales_follow_pytorch() {
        assert_eq!(bilinear_scale(4, 8, false, None), 0.5);
        assert_eq!(bilinear_scale(4, 8, true, None), 3.0 / 7.0);
        assert_eq!(bilinear_scale(4, 1, true, None), 0.0);
        assert_eq!(bilinear_scale(4, 10, false, Some(2.5)), 0.4);
    }
}

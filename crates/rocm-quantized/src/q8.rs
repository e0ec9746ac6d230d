//! Activations in q8 form: quantized as Candle's CPU quantizes them, alone or fused into an
//! rms norm or a SwiGLU.

use crate::*;

/// Bytes of the q8 form of m rows of k activations: m * k signed bytes, then one 8-byte record
/// (f32 scale, two i16 sums of 16 bytes) per 32 values.
pub fn q8_bytes(m: usize, k: usize) -> usize {
    m * k + m * k / 32 * 8
}

/// The contiguous (m, k) activations `x` (f32, f16 or bf16; k a multiple of the scheme's
/// block) in q8 form (see [`q8_bytes`]), quantized as `scheme` says.
pub fn quantize_q8(device: &Device, x: Operand<'_>, scheme: Q8Scheme) -> Result<Buffer> {
    const OP: &str = "quantize_q8";
    let (m, k) = activation_rows(OP, &x)?;
    if k % scheme.block() != 0 {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "input dims {:?}: {k} is not a multiple of {} ({scheme:?})",
                x.layout.dims,
                scheme.block()
            ),
        });
    }
    let xc = x.contiguous(OP)?;
    quantize_rows(device, (&xc, x.dtype), (m, k), scheme)
}

pub(crate) fn quantize_rows(
    device: &Device,
    (x, dtype): (&Contiguous<'_>, DType),
    (m, k): (usize, usize),
    scheme: Q8Scheme,
) -> Result<Buffer> {
    const OP: &str = "quantize_q8";
    let key = out_key(OP, dtype)?;
    let out = device.alloc(q8_bytes(m, k))?;
    let subs = (m * k / 32) as u64;
    if subs == 0 {
        return Ok(out);
    }
    let params = quantized::QuantizeQ8Params {
        x: x.ptr()?,
        out: out.ptr(),
        m: m as u64,
        k: k as u64,
        scheme: scheme.code(),
    };
    device.launch_entry_elements(quantized::QUANTIZE_Q8, key, subs, &params)?;
    Ok(out)
}

/// Activations in q8 form for the integer mat-vec: `rows` rows of `k` values quantized as
/// `scheme` says ([`q8_bytes`] bytes; see [`quantize_q8`]), as the fused producers
/// ([`rms_norm_q8`], [`swiglu_q8`]) write them.
#[derive(Debug)]
pub struct Q8Activations {
    pub buffer: Buffer,
    pub rows: usize,
    pub k: usize,
    pub scheme: Q8Scheme,
}

/// The (m, k) float operand `x` of `op` (f32, f16 or bf16, k a multiple of the scheme's block)
/// as contiguous rows.
fn q8_source<'a>(
    op: &'static str,
    x: &Operand<'a>,
    scheme: Q8Scheme,
) -> Result<(Contiguous<'a>, usize, usize)> {
    out_key(op, x.dtype)?;
    let (m, k) = activation_rows(op, x)?;
    if k % scheme.block() != 0 {
        return Err(Error::ShapeMismatch {
            op,
            detail: format!(
                "input dims {:?}: {k} is not a multiple of {} ({scheme:?})",
                x.layout.dims,
                scheme.block()
            ),
        });
    }
    Ok((x.contiguous(op)?, m, k))
}

/// Most threads a block of [`rms_norm_q8`]: quantized.hip's `RMS_Q8_MAX_THREADS`, the bound
/// its kernels are built for (a test checks the two agree).
pub const RMS_Q8_MAX_THREADS: usize = 512;

/// What [`rms_norm_q8`] writes.
#[derive(Debug)]
pub struct NormQ8 {
    /// x + the residual (with a residual).
    pub sum: Option<Buffer>,
    /// The norm in q8 form.
    pub q8: Q8Activations,
    /// The norm in x's dtype (where asked for).
    pub normed: Option<Buffer>,
}

/// candle-nn's `rms_norm` of x (.., k) with `alpha` (k) written straight in q8 form for the
/// integer mat-vec of weights whose activations are `scheme`: one launch in place of the norm
/// and the quantization. With a residual r (x's dims), x + r is normed instead and also
/// returned (the residual stream's next value): the add fused in too. With `float`, the norm
/// is also written in x's dtype (the input of a float product beside the quantized ones, such
/// as a router's). The q8 bytes are those [`quantize_q8`] writes from the float norm rounded to
/// x's dtype (to the rounding of the sum of squares, whose order differs).
pub fn rms_norm_q8(
    device: &Device,
    x: Operand<'_>,
    residual: Option<Operand<'_>>,
    alpha: Operand<'_>,
    (eps, scheme): (f32, Q8Scheme),
    float: bool,
) -> Result<NormQ8> {
    const OP: &str = "rms_norm_q8";
    let (xc, m, k) = q8_source(OP, &x, scheme)?;
    let dtype = x.dtype;
    let same = |name: &str, o: &Operand<'_>, dims: &[usize]| -> Result<()> {
        if o.dtype != dtype {
            return Err(Error::DTypeMismatch {
                op: OP,
                detail: format!("x {dtype}, {name} {}", o.dtype),
            });
        }
        if o.layout.dims != dims {
            return Err(Error::ShapeMismatch {
                op: OP,
                detail: format!("x has dims {:?}, {name} {:?}", x.layout.dims, o.layout.dims),
            });
        }
        Ok(())
    };
    same("alpha", &alpha, &[k])?;
    if let Some(r) = &residual {
        same("the residual", r, &x.layout.dims)?;
    }
    let ac = alpha.contiguous(OP)?;
    let rc = residual.as_ref().map(|r| r.contiguous(OP)).transpose()?;
    let sum = match residual {
        Some(_) => Some(device.alloc(m * k * dtype.size_in_bytes())?),
        None => None,
    };
    let normed = match float {
        true => Some(device.alloc(m * k * dtype.size_in_bytes())?),
        false => None,
    };
    let out = device.alloc(q8_bytes(m, k))?;
    let done = |sum, out, normed| NormQ8 {
        sum,
        q8: Q8Activations {
            buffer: out,
            rows: m,
            k,
            scheme,
        },
        normed,
    };
    if m * k == 0 {
        return Ok(done(sum, out, normed));
    }
    let params = quantized::RmsNormQ8Params {
        x: xc.ptr()?,
        // without a residual (or the float norm) the kernel reads neither r nor sum (normed):
        // x and the output stand in
        r: rc.as_ref().unwrap_or(&xc).ptr()?,
        sum: sum.as_ref().unwrap_or(&out).ptr(),
        alpha: ac.ptr()?,
        out: out.ptr(),
        normed: normed.as_ref().unwrap_or(&out).ptr(),
        m: m as u64,
        k: k as u64,
        eps,
        scheme: scheme.code(),
        has_residual: u32::from(rc.is_some()),
        has_normed: u32::from(normed.is_some()),
    };
    let warp = device.info().warp_size.max(1) as usize;
    // a run of 8 values a thread
    let threads = (k / 8).div_ceil(warp) * warp;
    let config = LaunchConfig {
        grid: [
            u32::try_from(m)
                .unwrap_or(u32::MAX)
                .min(rocm_device::MAX_GRID_YZ),
            1,
            1,
        ],
        block: [threads.clamp(warp, RMS_Q8_MAX_THREADS) as u32, 1, 1],
        shared_mem_bytes: 0,
    };
    device.launch_entry(quantized::RMS_NORM_Q8, out_key(OP, dtype)?, config, &params)?;
    Ok(done(sum, out, normed))
}

/// candle-nn's `silu(g) * u` for `gate_up` (.., 2w) holding [g | u] in each row, written straight
/// in q8 form for the integer mat-vec of weights whose activations are `scheme`: one launch in
/// place of the silu, the product and the quantization.
pub fn swiglu_q8(device: &Device, gate_up: Operand<'_>, scheme: Q8Scheme) -> Result<Q8Activations> {
    const OP: &str = "swiglu_q8";
    let (gc, m, k2) = q8_source(OP, &gate_up, Q8Scheme::Q8_0)?;
    let w = k2 / 2;
    if k2 % 2 != 0 || w % scheme.block() != 0 {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "gate_up dims {:?}: halves of {w} values are not a multiple of {} ({scheme:?})",
                gate_up.layout.dims,
                scheme.block()
            ),
        });
    }
    let out = device.alloc(q8_bytes(m, w))?;
    // a run of 8 values a thread
    let runs = (m * w / 8) as u64;
    if runs > 0 {
        let params = quantized::SwigluQ8Params {
            gate_up: gc.ptr()?,
            out: out.ptr(),
            m: m as u64,
            w: w as u64,
            scheme: scheme.code(),
        };
        let key = out_key(OP, gate_up.dtype)?;
        device.launch_entry_elements(quantized::SWIGLU_Q8, key, runs, &params)?;
    }
    Ok(Q8Activations {
        buffer: out,
        rows: m,
        k: w,
        scheme,
    })
}

//! The portable path: im2col + gemm for convolutions, gemm + col2im for transposed ones, and
//! our own pooling kernels. Runs on both platforms; every gemm goes through rocm-blas.

use rocm_blas::{Blas, MatmulShape, OutputLayout};
use rocm_device::{Buffer, DType, Device, Error, Layout, Operand, Result};
use rocm_elementwise::OperandCopy;
use rocm_kernels as kernels;
use rocm_kernels::conv::{self, ConvGeometry, Strides4};

use crate::params::{ConvSpec, Direction, Pool2dParams};

/// Bytes of column matrix one chunk of batch entries may take; larger batches run in chunks.
pub const COL_BUDGET_BYTES: usize = 256 << 20;

/// Per-axis window settings of a geometry: kernel, stride, padding, dilation as (h, w).
type Window = [(usize, usize); 4];

/// The geometry of an image (b, c, h, w) laid out as `image` (4-D), with column side (oh, ow).
fn geometry(
    op: &'static str,
    image: &Layout,
    cols: (usize, usize),
    win: Window,
) -> Result<ConvGeometry> {
    let u = |v: usize| {
        u32::try_from(v).map_err(|_| Error::InvalidLayout(format!("{op}: {v} exceeds 32 bits")))
    };
    let [kernel, step, pad, dil] = win;
    let d = &image.dims;
    let s = &image.strides;
    Ok(ConvGeometry {
        start: image.start as u64,
        stride_b: s[0] as u64,
        stride_c: s[1] as u64,
        stride_h: s[2] as u64,
        stride_w: s[3] as u64,
        c: u(d[1])?,
        h: u(d[2])?,
        w: u(d[3])?,
        kh: u(kernel.0)?,
        kw: u(kernel.1)?,
        oh: u(cols.0)?,
        ow: u(cols.1)?,
        step_h: u(step.0)?,
        step_w: u(step.1)?,
        pad_h: u(pad.0)?,
        pad_w: u(pad.1)?,
        dil_h: u(dil.0)?,
        dil_w: u(dil.1)?,
        fits_u32: 0,
    })
}

/// The geometry of a convolution spec; `image` is the image side's 4-D layout.
fn spec_geometry(spec: &ConvSpec, image: &Layout) -> Result<ConvGeometry> {
    geometry(
        spec.op,
        image,
        spec.cols,
        [spec.kernel, spec.stride, spec.padding, spec.dilation],
    )
}

/// `g` for a launch over `n` elements whose buffers (image, columns, output) are addressed
/// below `extent` elements: 32-bit index math where no index or offset can wrap (31 bits: the grid-stride loop adds the thread count to indices below `n`).
fn for_launch(mut g: ConvGeometry, n: usize, extent: usize) -> ConvGeometry {
    let limit = (u32::MAX / 2) as usize;
    g.fits_u32 = u32::from(n <= limit && extent <= limit);
    g
}

/// One past the largest element offset a layout addresses (0 when empty).
fn span(l: &Layout) -> usize {
    if l.dims.contains(&0) {
        return 0;
    }
    l.start
        + l.dims
            .iter()
            .zip(&l.strides)
            .map(|(&d, &s)| (d - 1) * s)
            .sum::<usize>()
        + 1
}

/// (b, c, h, w) with each (h, w) plane contiguous: the plane is one gemm row of length h * w.
fn planes_are_rows(l: &Layout) -> bool {
    let (h, w) = (l.dims[2], l.dims[3]);
    (w <= 1 || l.strides[3] == 1) && (h <= 1 || l.strides[2] == w)
}

/// Batch entries per chunk so that the column matrix stays within `budget` bytes.
fn chunk(spec: &ConvSpec, dtype: DType, budget: usize) -> usize {
    let per_entry = spec.col_rows() * spec.col_len() * dtype.size_in_bytes();
    (budget / per_entry.max(1)).clamp(1, spec.batch.max(1))
}

/// A convolution through im2col + gemm. `input` has its 4-D layout; column matrices take at
/// most `budget` bytes (at least one batch entry).
pub fn conv_forward(
    blas: &Blas,
    budget: usize,
    spec: &ConvSpec,
    input: Operand<'_>,
    kernel: Operand<'_>,
) -> Result<Buffer> {
    debug_assert_eq!(spec.direction, Direction::Forward);
    let device = blas.device();
    let dtype = input.dtype;
    let size = dtype.size_in_bytes();
    let [b, c_out, oh, ow] = spec.output_dims();
    let out = device.alloc(b * c_out * oh * ow * size)?;
    if b * c_out * oh * ow == 0 {
        return Ok(out);
    }
    let k_data = kernel.contiguous(spec.op)?;
    let (kernel, k_start) = (k_data.buffer(), k_data.start());
    let input_l = input.layout;
    let g = spec.groups;
    let l = spec.col_len();
    let (rows, cout_g) = (spec.col_rows(), c_out / g);
    let k_g = rows / g;
    // Group g's weights: rows g * cout_g.. of the (c_out, k_g) kernel, shared by the batch.
    let weights = |nb: usize, grp: usize| {
        Layout::new(
            &[nb, cout_g, k_g],
            &[0, k_g, 1],
            k_start + grp * cout_g * k_g,
        )
    };
    let output = |b0: usize, grp: usize| OutputLayout {
        offset: (b0 * c_out + grp * cout_g) * l,
        ld: l,
        batch_stride: c_out * l,
    };
    let shape = |nb: usize| MatmulShape {
        batch: nb,
        m: cout_g,
        n: l,
        k: k_g,
    };
    if spec.is_pointwise() && planes_are_rows(input_l) {
        // The input is its own column matrix: (b, c_in, h * w) with rows of whole planes.
        let (sb, sc) = (input_l.strides[0], input_l.strides[1]);
        for grp in 0..g {
            let x = Layout::new(&[b, k_g, l], &[sb, sc, 1], input_l.start + grp * k_g * sc);
            let wl = weights(b, grp);
            blas.matmul_into(
                Operand::new(kernel, dtype, &wl),
                Operand::new(input.buffer, dtype, &x),
                shape(b),
                (&out, output(0, grp)),
            )?;
        }
        return Ok(out);
    }
    let geometry = spec_geometry(spec, input_l)?;
    let key = kernels::width_key(size).ok_or(Error::UnsupportedDType { op: spec.op, dtype })?;
    let per = chunk(spec, dtype, budget);
    let col = device.alloc(per * rows * l * size)?;
    for b0 in (0..b).step_by(per) {
        let nb = per.min(b - b0);
        // One thread per (batch entry, channel, column position).
        let n = nb * spec.image.0 * l;
        let extent = span(input_l).max(per * rows * l);
        let params = conv::Im2colParams {
            x: input.buffer.ptr(),
            col: col.ptr(),
            n: n as u64,
            b0: b0 as u64,
            g: for_launch(geometry, n, extent),
        };
        device.launch_entry_elements(conv::IM2COL, key, n as u64, &params)?;
        for grp in 0..g {
            let cols = Layout::new(&[nb, k_g, l], &[rows * l, l, 1], grp * k_g * l);
            let wl = weights(nb, grp);
            blas.matmul_into(
                Operand::new(kernel, dtype, &wl),
                Operand::new(&col, dtype, &cols),
                shape(nb),
                (&out, output(b0, grp)),
            )?;
        }
    }
    Ok(out)
}

/// A transposed convolution through gemm + col2im. `input` has its 4-D layout; column
/// matrices take at most `budget` bytes (at least one batch entry).
pub fn conv_transpose(
    blas: &Blas,
    budget: usize,
    spec: &ConvSpec,
    input: Operand<'_>,
    kernel: Operand<'_>,
) -> Result<Buffer> {
    debug_assert_eq!(spec.direction, Direction::Transpose);
    let device = blas.device();
    let dtype = input.dtype;
    let size = dtype.size_in_bytes();
    let [b, c_out, oh, ow] = spec.output_dims();
    let out = device.alloc(b * c_out * oh * ow * size)?;
    if b * c_out * oh * ow == 0 {
        return Ok(out);
    }
    let key = dtype.as_str();
    if kernels::CONV.entry_point(conv::COL2IM.op, key).is_none() {
        return Err(Error::UnsupportedDType { op: spec.op, dtype });
    }
    let k_data = kernel.contiguous(spec.op)?;
    let (kernel, k_start) = (k_data.buffer(), k_data.start());
    // The gemm reads each input plane as one row; other layouts are copied first.
    let x_data = if planes_are_rows(input.layout) {
        None
    } else {
        Some(input.contiguous(spec.op)?)
    };
    let (input, x_l) = match &x_data {
        None => (input.buffer, input.layout.clone()),
        Some(c) => (
            c.buffer(),
            Layout::contiguous_at(&input.layout.dims, c.start()),
        ),
    };
    let g = spec.groups;
    let (c_in, l, rows) = (spec.channels, spec.col_len(), spec.col_rows());
    let (cin_g, m_g) = (c_in / g, rows / g);
    let image = Layout::contiguous(&spec.output_dims());
    let geometry = spec_geometry(spec, &image)?;
    let per = chunk(spec, dtype, budget);
    let col = device.alloc(per * rows * l * size)?;
    let (sb, sc) = (x_l.strides[0], x_l.strides[1]);
    for b0 in (0..b).step_by(per) {
        let nb = per.min(b - b0);
        for grp in 0..g {
            // col[b][group rows] = kernel_g^T (m_g x cin_g) . x_g[b] (cin_g x l)
            let wt = Layout::new(&[nb, m_g, cin_g], &[0, 1, m_g], k_start + grp * cin_g * m_g);
            let x = Layout::new(
                &[nb, cin_g, l],
                &[sb, sc, 1],
                x_l.start + b0 * sb + grp * cin_g * sc,
            );
            let shape = MatmulShape {
                batch: nb,
                m: m_g,
                n: l,
                k: cin_g,
            };
            let into = OutputLayout {
                offset: grp * m_g * l,
                ld: l,
                batch_stride: rows * l,
            };
            blas.matmul_into(
                Operand::new(kernel, dtype, &wt),
                Operand::new(input, dtype, &x),
                shape,
                (&col, into),
            )?;
        }
        let n = nb * c_out * oh * ow;
        let params = conv::Col2imParams {
            col: col.ptr(),
            image: out.ptr(),
            n: n as u64,
            b0: b0 as u64,
            g: for_launch(geometry, n, (b * c_out * oh * ow).max(per * rows * l)),
        };
        device.launch_entry_elements(conv::COL2IM, key, n as u64, &params)?;
    }
    Ok(out)
}

/// A 4-D layout's start and strides as conv.hip takes them.
fn strides4(l: &Layout) -> Strides4 {
    let s = |i: usize| l.strides[i] as u64;
    Strides4 {
        start: l.start as u64,
        strides: [s(0), s(1), s(2), s(3)],
    }
}

/// Transposed convolutions of floats up to this many multiply-adds run directly (one launch):
/// below it a gemm's and a col2im's launches cost more than the arithmetic.
pub const DIRECT_TRANSPOSE_MAX_MACS: usize = 1 << 20;

/// A transposed convolution computed directly, one thread per output element: integers (no
/// BLAS path: no integer gemm) with wrapping sums, and small float ones with sums in the
/// accumulator type; `input` and `kernel` are the 4-D layouts, of any strides.
pub fn conv_transpose_direct(
    device: &Device,
    spec: &ConvSpec,
    input: Operand<'_>,
    kernel: Operand<'_>,
) -> Result<Buffer> {
    let dtype = input.dtype;
    debug_assert_eq!(spec.direction, Direction::Transpose);
    let dims = spec.output_dims();
    let n: usize = dims.iter().product();
    let out = device.alloc(n * dtype.size_in_bytes())?;
    if n == 0 {
        return Ok(out);
    }
    let key = dtype.as_str();
    if kernels::CONV
        .entry_point(conv::TRANSPOSE_DIRECT.op, key)
        .is_none()
    {
        return Err(Error::UnsupportedDType { op: spec.op, dtype });
    }
    let geometry = spec_geometry(spec, &Layout::contiguous(&dims))?;
    let u = |v: usize| {
        u32::try_from(v)
            .map_err(|_| Error::InvalidLayout(format!("{}: {v} exceeds 32 bits", spec.op)))
    };
    let params = conv::TransposeDirectParams {
        x: input.buffer.ptr(),
        w: kernel.buffer.ptr(),
        out: out.ptr(),
        n: n as u64,
        g: for_launch(geometry, n, n),
        xs: strides4(input.layout),
        ws: strides4(kernel.layout),
        c_in: u(spec.channels)?,
        groups: u(spec.groups)?,
    };
    device.launch_entry_elements(conv::TRANSPOSE_DIRECT, key, n as u64, &params)?;
    Ok(out)
}

/// Max or average pooling of a 4-D input of any layout into a contiguous output.
pub fn pool2d(
    device: &Device,
    is_max: bool,
    input: Operand<'_>,
    p: &Pool2dParams,
    out_hw: (usize, usize),
) -> Result<Buffer> {
    let (dtype, input_l) = (input.dtype, input.layout);
    let op = if is_max { "max_pool2d" } else { "avg_pool2d" };
    let [b, c] = [input_l.dims[0], input_l.dims[1]];
    let n = b * c * out_hw.0 * out_hw.1;
    let out = device.alloc(n * dtype.size_in_bytes())?;
    if n == 0 {
        return Ok(out);
    }
    let geometry = geometry(op, input_l, out_hw, [p.kernel, p.stride, (0, 0), (1, 1)])?;
    let entry = if is_max {
        conv::POOL_MAX2D
    } else {
        conv::POOL_AVG2D
    };
    let params = conv::PoolParams {
        x: input.buffer.ptr(),
        out: out.ptr(),
        n: n as u64,
        g: for_launch(geometry, n, span(input_l).max(n)),
    };
    device.launch_entry_elements(entry, dtype.as_str(), n as u64, &params)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_geometry_of_a_layout() {
        let l = Layout::new(&[2, 3, 1, 7], &[30, 10, 0, 1], 4);
        let g = geometry("conv1d", &l, (1, 5), [(1, 3), (1, 1), (0, 0), (1, 1)]).unwrap();
        assert_eq!(
            (g.start, g.stride_h, g.c, g.h, g.w, g.ow),
            (4, 0, 3, 1, 7, 5)
        );
        assert_eq!(for_launch(g, 100, 1000).fits_u32, 1);
        assert_eq!(for_launch(g, 1 << 31, 1000).fits_u32, 0);
        assert_eq!(for_launch(g, 100, 1 << 31).fits_u32, 0);
        assert_eq!(span(&l), 4 + 30 + 20 + 6 + 1);
        assert_eq!(span(&Layout::contiguous(&[2, 0, 3])), 0);
        let huge = Layout::new(&[1, 1, 1, 1 << 33], &[0, 0, 0, 1], 0);
        assert!(geometry("conv1d", &huge, (1, 1), [(1, 1); 4]).is_err());
    }

    #[test]
    fn planes_that_are_rows() {
        assert!(planes_are_rows(&Layout::contiguous(&[2, 3, 4, 5])));
        // a channel slice keeps whole planes
        assert!(planes_are_rows(&Layout::new(
            &[2, 3, 4, 5],
            &[200, 20, 5, 1],
            20
        )));
        // a cropped width does not
        assert!(!planes_are_rows(&Layout::new(
            &[2, 3, 4, 5],
            &[216, 72, 6, 1],
            0
        )));
        // a 1-D input with its unit height
        assert!(planes_are_rows(&Layout::new(
            &[2, 3, 1, 5],
            &[15, 5, 0, 1],
            0
        )));
    }
}

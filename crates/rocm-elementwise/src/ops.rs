//! Host side of unary.hip, binary.hip, cast.hip, ternary.hip and fill.hip.

use rocm_device::{Buffer, DType, Device, Error, LaunchConfig, Layout, Operand, Result, Scalar};
use rocm_kernels::{self as kernels, DevicePtr, Entry, KernelLayout, KernelParams};

pub use rocm_kernels::binary::{BinaryOp, CmpOp};
pub use rocm_kernels::unary::UnaryOp;

/// Where a kernel writes: a buffer and an element offset into it.
struct Out<'a> {
    buffer: &'a Buffer,
    offset: usize,
}

/// Checks that `n` elements of `dtype` fit in `out` from its offset.
fn check_out(op: &'static str, dtype: DType, out: &Out<'_>, n: usize) -> Result<()> {
    let have = out.buffer.len() / dtype.size_in_bytes();
    if out.offset.checked_add(n).is_none_or(|end| end > have) {
        return Err(Error::SizeMismatch {
            op,
            detail: format!(
                "{n} {dtype} elements at offset {} do not fit an output of {have}",
                out.offset
            ),
        });
    }
    Ok(())
}

/// The output's address at its element offset.
fn out_ptr(dtype: DType, out: &Out<'_>) -> Result<DevicePtr> {
    out.buffer.ptr_at(out.offset * dtype.size_in_bytes())
}

/// Launches `entry` for `key` (the dtype the module variant is built for) grid-stride over
/// `n` elements (nothing when `n` is 0).
fn launch_elements<P: KernelParams>(
    device: &Device,
    entry: Entry<P>,
    key: DType,
    n: usize,
    params: &P,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let _span = tracing::debug_span!("op", op = entry.op, dtype = %key, n).entered();
    device.launch_entry_elements(entry, key.as_str(), n as u64, params)
}

fn alloc_out(device: &Device, dtype: DType, n: usize) -> Result<Buffer> {
    let bytes = n
        .checked_mul(dtype.size_in_bytes())
        .ok_or_else(|| Error::SizeMismatch {
            op: "alloc",
            detail: format!("{n} {dtype} elements overflow"),
        })?;
    device.alloc(bytes)
}

/// A one-input map's checks: `src`'s kernel layout and element count, and room for them in
/// `out`.
fn map1_shape(
    op: &'static str,
    src: &Operand<'_>,
    out_dtype: DType,
    out: &Out<'_>,
) -> Result<(KernelLayout, usize)> {
    let l = src.kernel_layout(op)?;
    let n = src.elem_count();
    check_out(op, out_dtype, out, n)?;
    Ok((l, n))
}

/// The unary kernel `kernel` (an op of unary.hip) with its parameter `p`.
fn unary_launch(
    device: &Device,
    (op, kernel): (&'static str, &'static str),
    src: Operand<'_>,
    out: Out<'_>,
    p: f64,
) -> Result<()> {
    let (l, n) = map1_shape(op, &src, src.dtype, &out)?;
    let params = kernels::unary::Params {
        input: src.buffer.ptr(),
        out: out_ptr(src.dtype, &out)?,
        n: n as u64,
        l,
        p,
    };
    let entry = Entry::new(&kernels::UNARY, kernel);
    launch_elements(device, entry, src.dtype, n, &params)
}

fn unary_checked(op: UnaryOp, dtype: DType) -> Result<()> {
    if op.supports(dtype) {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op: op.name(),
            dtype,
        })
    }
}

/// `op(src)` into a new contiguous buffer.
pub fn unary(device: &Device, op: UnaryOp, src: Operand<'_>) -> Result<Buffer> {
    unary_checked(op, src.dtype)?;
    let out = alloc_out(device, src.dtype, src.elem_count())?;
    unary_into(device, op, src, &out, 0)?;
    Ok(out)
}

/// `op(src)` written contiguously into `dst` from element `dst_offset` (`dst` may be `src`).
pub fn unary_into(
    device: &Device,
    op: UnaryOp,
    src: Operand<'_>,
    dst: &Buffer,
    dst_offset: usize,
) -> Result<()> {
    unary_checked(op, src.dtype)?;
    let out = Out {
        buffer: dst,
        offset: dst_offset,
    };
    unary_launch(device, (op.name(), op.name()), src, out, 0.0)
}

fn float_param_op(
    device: &Device,
    op: &'static str,
    src: Operand<'_>,
    param: f64,
) -> Result<Buffer> {
    if !src.dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: src.dtype,
        });
    }
    let out = alloc_out(device, src.dtype, src.elem_count())?;
    let target = Out {
        buffer: &out,
        offset: 0,
    };
    unary_launch(device, (op, op), src, target, param)?;
    Ok(out)
}

/// `x >= 0 ? x : alpha * (exp(x) - 1)` (floats only, as the CPU backend).
pub fn elu(device: &Device, src: Operand<'_>, alpha: f64) -> Result<Buffer> {
    float_param_op(device, "elu", src, alpha)
}

/// `x.powf(e)` (floats only, as the CPU backend).
pub fn powf(device: &Device, src: Operand<'_>, e: f64) -> Result<Buffer> {
    float_param_op(device, "powf", src, e)
}

/// `x * mul + add` for every dtype; `mul` and `add` are first converted to the dtype (so an
/// integer affine truncates them, as Candle's `T::from_f64`), integers wrap.
pub fn affine(device: &Device, src: Operand<'_>, mul: f64, add: f64) -> Result<Buffer> {
    let out = alloc_out(device, src.dtype, src.elem_count())?;
    affine_into(device, src, (mul, add), &out, 0)?;
    Ok(out)
}

/// [`affine`] with `(mul, add)` written into `dst` from element `dst_offset` (`dst` may be
/// `src`).
pub fn affine_into(
    device: &Device,
    src: Operand<'_>,
    (mul, add): (f64, f64),
    dst: &Buffer,
    dst_offset: usize,
) -> Result<()> {
    let out = Out {
        buffer: dst,
        offset: dst_offset,
    };
    let (l, n) = map1_shape("affine", &src, src.dtype, &out)?;
    let params = kernels::unary::AffineParams {
        input: src.buffer.ptr(),
        out: out_ptr(src.dtype, &out)?,
        n: n as u64,
        l,
        mul,
        add,
    };
    launch_elements(device, kernels::unary::AFFINE, src.dtype, n, &params)
}

/// Convert every element of `src` (any layout) to `to`, into a new contiguous buffer.
pub fn cast(device: &Device, src: Operand<'_>, to: DType) -> Result<Buffer> {
    let out = alloc_out(device, to, src.elem_count())?;
    cast_into(device, src, to, &out, 0)?;
    Ok(out)
}

/// [`cast`] written into `dst` from element `dst_offset`.
pub fn cast_into(
    device: &Device,
    src: Operand<'_>,
    to: DType,
    dst: &Buffer,
    dst_offset: usize,
) -> Result<()> {
    let entry =
        kernels::cast::CAST
            .entry(&[src.dtype.as_str()])
            .ok_or(Error::UnsupportedDType {
                op: "to_dtype",
                dtype: src.dtype,
            })?;
    let out = Out {
        buffer: dst,
        offset: dst_offset,
    };
    let (l, n) = map1_shape("to_dtype", &src, to, &out)?;
    let params = kernels::cast::Params {
        input: src.buffer.ptr(),
        out: out_ptr(to, &out)?,
        n: n as u64,
        l,
    };
    // The module variant is the destination dtype's (the entry's last part).
    launch_elements(device, entry, to, n, &params)
}

fn same_dims(op: &'static str, a: &Layout, b: &Layout) -> Result<()> {
    if a.dims != b.dims {
        return Err(Error::ShapeMismatch {
            op,
            detail: format!("lhs {:?}, rhs {:?}", a.dims, b.dims),
        });
    }
    Ok(())
}

fn same_dtype(op: &'static str, a: DType, b: DType) -> Result<()> {
    if a != b {
        return Err(Error::DTypeMismatch {
            op,
            detail: format!("lhs {a}, rhs {b}"),
        });
    }
    Ok(())
}

/// The addresses, element count and layouts a binary-family entry takes.
type Map2Values = ([DevicePtr; 3], u64, [KernelLayout; 2]);

/// Arithmetic entries' list (the output in the operands' dtype).
fn arithmetic_params(([a, b, out], n, [la, lb]): Map2Values) -> kernels::binary::Params {
    kernels::binary::Params {
        a,
        b,
        out,
        n,
        la,
        lb,
    }
}

/// Comparison entries' list (the output u8).
fn cmp_params(([a, b, out], n, [la, lb]): Map2Values) -> kernels::binary::CmpParams {
    kernels::binary::CmpParams {
        a,
        b,
        out,
        n,
        la,
        lb,
    }
}

/// The binary-family launch of the op `op` (binary.hip), its list built by `params`.
fn map2_launch<P: KernelParams>(
    device: &Device,
    op: &'static str,
    (lhs, rhs): (Operand<'_>, Operand<'_>),
    (out_dtype, out): (DType, Out<'_>),
    params: fn(Map2Values) -> P,
) -> Result<()> {
    same_dims(op, lhs.layout, rhs.layout)?;
    same_dtype(op, lhs.dtype, rhs.dtype)?;
    let la = lhs.kernel_layout(op)?;
    let lb = rhs.kernel_layout(op)?;
    let n = lhs.elem_count();
    check_out(op, out_dtype, &out, n)?;
    let pointers = [
        lhs.buffer.ptr(),
        rhs.buffer.ptr(),
        out_ptr(out_dtype, &out)?,
    ];
    let params = params((pointers, n as u64, [la, lb]));
    let entry = Entry::new(&kernels::BINARY, op);
    launch_elements(device, entry, lhs.dtype, n, &params)
}

/// `lhs op rhs` elementwise; both layouts have the same dims (broadcasts use stride 0).
pub fn binary(device: &Device, op: BinaryOp, lhs: Operand<'_>, rhs: Operand<'_>) -> Result<Buffer> {
    same_dims(op.name(), lhs.layout, rhs.layout)?;
    let out = alloc_out(device, lhs.dtype, lhs.elem_count())?;
    binary_into(device, op, (lhs, rhs), &out, 0)?;
    Ok(out)
}

/// [`binary`] written into `dst` from element `dst_offset` (`dst` may be an input).
pub fn binary_into(
    device: &Device,
    op: BinaryOp,
    (lhs, rhs): (Operand<'_>, Operand<'_>),
    dst: &Buffer,
    dst_offset: usize,
) -> Result<()> {
    let out = Out {
        buffer: dst,
        offset: dst_offset,
    };
    map2_launch(
        device,
        op.name(),
        (lhs, rhs),
        (lhs.dtype, out),
        arithmetic_params,
    )
}

/// `silu(gate) * up` elementwise (candle-nn's gated MLP), floats only, each op rounded as
/// [`unary`]'s silu and [`binary`]'s mul round it: the two ops' result in one launch.
pub fn silu_mul(device: &Device, gate: Operand<'_>, up: Operand<'_>) -> Result<Buffer> {
    const OP: &str = "silu_mul";
    if !gate.dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: gate.dtype,
        });
    }
    same_dims(OP, gate.layout, up.layout)?;
    let out = alloc_out(device, gate.dtype, gate.elem_count())?;
    let target = Out {
        buffer: &out,
        offset: 0,
    };
    map2_launch(
        device,
        OP,
        (gate, up),
        (gate.dtype, target),
        arithmetic_params,
    )?;
    Ok(out)
}

/// `lhs op rhs` elementwise as u8 (1 or 0).
pub fn cmp(device: &Device, op: CmpOp, lhs: Operand<'_>, rhs: Operand<'_>) -> Result<Buffer> {
    same_dims(op.name(), lhs.layout, rhs.layout)?;
    let out = alloc_out(device, DType::U8, lhs.elem_count())?;
    let target = Out {
        buffer: &out,
        offset: 0,
    };
    map2_launch(
        device,
        op.name(),
        (lhs, rhs),
        (DType::U8, target),
        cmp_params,
    )?;
    Ok(out)
}

/// `cond != 0 ? on_true : on_false`, three layouts of the same dims.
pub fn where_cond(
    device: &Device,
    cond: Operand<'_>,
    on_true: Operand<'_>,
    on_false: Operand<'_>,
) -> Result<Buffer> {
    const OP: &str = "where_cond";
    let entry = kernels::ternary::WHERE
        .entry(&[cond.dtype.as_str()])
        .ok_or(Error::UnsupportedDType {
            op: OP,
            dtype: cond.dtype,
        })?;
    same_dims(OP, cond.layout, on_true.layout)?;
    same_dims(OP, cond.layout, on_false.layout)?;
    same_dtype(OP, on_true.dtype, on_false.dtype)?;
    let lc = cond.kernel_layout(OP)?;
    let lt = on_true.kernel_layout(OP)?;
    let lf = on_false.kernel_layout(OP)?;
    let dtype = on_true.dtype;
    let n = cond.elem_count();
    let out = alloc_out(device, dtype, n)?;
    let params = kernels::ternary::WhereParams {
        cond: cond.buffer.ptr(),
        t: on_true.buffer.ptr(),
        f: on_false.buffer.ptr(),
        out: out.ptr(),
        n: n as u64,
        lc,
        lt,
        lf,
    };
    launch_elements(device, entry, dtype, n, &params)?;
    Ok(out)
}

/// Sets every element of `dst`'s layout to `value`; the value's dtype must be `dst`'s.
pub fn const_set(device: &Device, dst: Operand<'_>, value: Scalar) -> Result<()> {
    const OP: &str = "const_set";
    same_dtype(OP, dst.dtype, value.dtype())?;
    let kl = dst.kernel_layout(OP)?;
    let n = dst.elem_count();
    let params = kernels::fill::ConstSetParams {
        dst: dst.buffer.ptr(),
        value: value.to_arg_bits(),
        n: n as u64,
        l: kl,
    };
    launch_elements(device, kernels::fill::CONST_SET, dst.dtype, n, &params)
}

/// A `rows x cols` block of elements, rows `src_stride` / `dst_stride` elements apart,
/// starting at the given element offsets (Candle's `copy2d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copy2d {
    pub rows: usize,
    pub cols: usize,
    pub src_stride: usize,
    pub dst_stride: usize,
    pub src_offset: usize,
    pub dst_offset: usize,
}

use kernels::fill::Copy2dBlocks;
/// Most blocks [`copy2d_many`] copies in one launch (fill.hip's `COPY2D_MAX_BLOCKS`).
pub use kernels::fill::COPY2D_MAX_BLOCKS;

/// Copies the [`Copy2d`] block of `dtype` elements from `src` to `dst`.
pub fn copy2d(device: &Device, dtype: DType, src: &Buffer, dst: &Buffer, c: &Copy2d) -> Result<()> {
    copy2d_many(device, dtype, dst, &[(src, *c)])
}

/// Copies every `(source, block)` pair of `dtype` elements into `dst` (Candle's `cat`): one
/// launch for each run of up to [`COPY2D_MAX_BLOCKS`] blocks with the same rows and
/// destination stride, moving the widest unit (up to 16 bytes) that divides every block's
/// sizes, strides and offsets.
pub fn copy2d_many(
    device: &Device,
    dtype: DType,
    dst: &Buffer,
    parts: &[(&Buffer, Copy2d)],
) -> Result<()> {
    const OP: &str = "copy2d";
    let size = dtype.size_in_bytes();
    let parts: Vec<&(&Buffer, Copy2d)> = parts
        .iter()
        .filter(|(_, c)| c.rows > 0 && c.cols > 0)
        .collect();
    for (src, c) in &parts {
        // The block as a layout, for the same bounds checks as every other op.
        Layout::new(&[c.rows, c.cols], &[c.src_stride, 1], c.src_offset)
            .check_fits(OP, dtype, src)?;
        Layout::new(&[c.rows, c.cols], &[c.dst_stride, 1], c.dst_offset)
            .check_fits(OP, dtype, dst)?;
    }
    let mut rest = &parts[..];
    while let Some(((_, first), _)) = rest.split_first() {
        let run = rest
            .iter()
            .take(COPY2D_MAX_BLOCKS)
            .take_while(|(_, c)| c.rows == first.rows && c.dst_stride == first.dst_stride)
            .count();
        let (now, later) = rest.split_at(run);
        launch_copy2d(device, size, dst, now)?;
        rest = later;
    }
    Ok(())
}

/// One launch of up to [`COPY2D_MAX_BLOCKS`] checked blocks of equal rows and destination
/// stride.
fn launch_copy2d(
    device: &Device,
    size: usize,
    dst: &Buffer,
    parts: &[&(&Buffer, Copy2d)],
) -> Result<()> {
    const OP: &str = "copy2d";
    let first = parts[0].1;
    // The widest unit dividing every byte count and address of the launch.
    let mut common = (first.dst_stride * size) as u64 | dst.device_ptr();
    for (src, c) in parts {
        common |= ((c.cols | c.src_stride | c.src_offset | c.dst_offset) * size) as u64
            | src.device_ptr();
    }
    let unit = [16u64, 8, 4, 2, 1]
        .into_iter()
        .find(|u| common % u == 0)
        .unwrap_or(1);
    let units = |elements: usize| (elements * size) as u64 / unit;
    let mut blocks: Copy2dBlocks = bytemuck::Zeroable::zeroed();
    let mut widest = 0;
    for (b, (src, c)) in parts.iter().enumerate() {
        blocks.src[b] = src.device_ptr() + (c.src_offset * size) as u64;
        blocks.cols[b] = units(c.cols);
        blocks.src_stride[b] = units(c.src_stride);
        blocks.dst_col[b] = units(c.dst_offset);
        widest = widest.max(blocks.cols[b]);
    }
    // The sources travel as addresses inside a struct, so their device is checked here.
    if let Some((src, _)) = parts.iter().find(|(s, _)| s.device().id() != device.id()) {
        return Err(Error::DeviceMismatch {
            op: OP,
            left: format!("{device:?}"),
            right: format!("a source on {:?}", src.device()),
        });
    }
    let params = kernels::fill::Copy2dParams {
        dst: dst.ptr(),
        rows: first.rows as u64,
        dst_stride: units(first.dst_stride),
        blocks,
    };
    let block = rocm_device::DEFAULT_BLOCK;
    let info = device.info();
    let col_blocks = widest.div_ceil(u64::from(block));
    let budget = (u64::from(info.multiprocessor_count.max(1)) * 32 / parts.len() as u64).max(1);
    let grid_x = col_blocks.clamp(1, budget);
    let grid_y = (first.rows as u64).clamp(
        1,
        (budget / grid_x).clamp(1, u64::from(rocm_device::MAX_GRID_YZ)),
    );
    let config = LaunchConfig {
        grid: [grid_x as u32, grid_y as u32, parts.len() as u32],
        block: [block, 1, 1],
        shared_mem_bytes: 0,
    };
    let _span = tracing::debug_span!("op", op = OP, blocks = parts.len(), rows = first.rows, unit)
        .entered();
    let width = rocm_kernels::width_key(unit as usize).ok_or_else(|| Error::InvalidLaunch {
        function: OP.to_string(),
        reason: format!("no copy of {unit}-byte units"),
    })?;
    device.launch_entry(kernels::fill::COPY2D, width, config, &params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unary_support_follows_the_cpu_backend() {
        assert!(UnaryOp::Exp.supports(DType::F8E4M3));
        assert!(!UnaryOp::Exp.supports(DType::U8));
        assert!(UnaryOp::Abs.supports(DType::I16));
        assert!(UnaryOp::Gelu.supports(DType::I64));
        assert!(!UnaryOp::Sqrt.supports(DType::U32));
        assert_eq!(UnaryOp::ALL.len(), 21);
    }

    #[test]
    fn every_op_has_its_kernel_in_the_table() {
        for op in UnaryOp::ALL {
            assert!(kernels::UNARY.ops().any(|k| k == op.name()), "{op:?}");
        }
        for name in BinaryOp::ALL
            .iter()
            .map(|o| o.name())
            .chain(CmpOp::ALL.iter().map(|o| o.name()))
        {
            assert!(kernels::BINARY.ops().any(|k| k == name), "{name}");
        }
        for from in DType::ALL {
            assert!(kernels::cast::CAST.entry(&[from.as_str()]).is_some());
        }
    }
}

//! Host side of unary.hip, binary.hip, cast.hip, ternary.hip and fill.hip.

use rocm_device::kernels::{self, KernelModule};
use rocm_device::{
    Buffer, DType, Device, Error, KernelLayout, LaunchArgs, LaunchConfig, Layout, Result, Scalar,
};

/// Unary ops of Candle's `UnaryOpT` plus normcdf and candle-nn's sigmoid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Recip,
    Exp,
    Log,
    Sin,
    Cos,
    Tanh,
    Erf,
    Ceil,
    Floor,
    Round,
    NormCdf,
    Abs,
    Sqr,
    Sqrt,
    /// The tanh approximation.
    Gelu,
    GeluErf,
    Relu,
    Silu,
    Sign,
    Sigmoid,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 21] = [
        UnaryOp::Neg,
        UnaryOp::Recip,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Erf,
        UnaryOp::Ceil,
        UnaryOp::Floor,
        UnaryOp::Round,
        UnaryOp::NormCdf,
        UnaryOp::Abs,
        UnaryOp::Sqr,
        UnaryOp::Sqrt,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
        UnaryOp::Relu,
        UnaryOp::Silu,
        UnaryOp::Sign,
        UnaryOp::Sigmoid,
    ];

    /// The kernel name (and Candle's op name where Candle has the op).
    pub const fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Recip => "recip",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Erf => "erf",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Floor => "floor",
            UnaryOp::Round => "round",
            UnaryOp::NormCdf => "normcdf",
            UnaryOp::Abs => "abs",
            UnaryOp::Sqr => "sqr",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluErf => "gelu_erf",
            UnaryOp::Relu => "relu",
            UnaryOp::Silu => "silu",
            UnaryOp::Sign => "sign",
            UnaryOp::Sigmoid => "sigmoid",
        }
    }

    /// Whether the op is defined for `dtype` (floats: all; integers: what the CPU backend
    /// computes for them).
    pub fn supports(self, dtype: DType) -> bool {
        dtype.is_float() || kernels::UNARY_INT_OPS.contains(&self.name())
    }
}

/// Candle's `BinaryOpT` ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 6] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        }
    }
}

/// Candle's `CmpOp`; results are u8 (1 or 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

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

fn push_out(args: &mut LaunchArgs, dtype: DType, out: &Out<'_>) -> Result<()> {
    args.push_buffer_at(out.buffer, out.offset * dtype.size_in_bytes())?;
    Ok(())
}

/// Launches a grid-stride kernel over `n` elements (nothing when `n` is 0).
fn launch_elements(
    device: &Device,
    module: &KernelModule,
    variant: DType,
    entry: &str,
    n: usize,
    args: &mut LaunchArgs,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let _span = tracing::debug_span!("op", entry, n).entered();
    let function = device.dtype_function(module, variant.as_str(), entry)?;
    device.launch(
        &function,
        LaunchConfig::for_elements(n as u64, device.info()),
        args,
    )
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

fn kernel_layout(op: &'static str, dtype: DType, buf: &Buffer, l: &Layout) -> Result<KernelLayout> {
    l.check_fits(op, dtype, buf)?;
    l.kernel_layout()
}

/// The unary-family launch: `entry(in, out, n, layout, params...)`.
#[allow(clippy::too_many_arguments)]
fn map1_launch(
    device: &Device,
    module: &KernelModule,
    op: &'static str,
    entry: &str,
    dtype: DType,
    out_dtype: DType,
    src: &Buffer,
    layout: &Layout,
    out: Out<'_>,
    params: &[f64],
) -> Result<()> {
    let kl = kernel_layout(op, dtype, src, layout)?;
    let n = layout.elem_count();
    check_out(op, out_dtype, &out, n)?;
    let mut args = LaunchArgs::new();
    args.push_buffer(src);
    push_out(&mut args, out_dtype, &out)?;
    args.push(n as u64).push(kl);
    for &p in params {
        args.push(p);
    }
    launch_elements(device, module, dtype, entry, n, &mut args)
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
pub fn unary(
    device: &Device,
    op: UnaryOp,
    dtype: DType,
    src: &Buffer,
    layout: &Layout,
) -> Result<Buffer> {
    unary_checked(op, dtype)?;
    let out = alloc_out(device, dtype, layout.elem_count())?;
    unary_into(device, op, dtype, src, layout, &out, 0)?;
    Ok(out)
}

/// `op(src)` written contiguously into `dst` from element `dst_offset` (`dst` may be `src`).
pub fn unary_into(
    device: &Device,
    op: UnaryOp,
    dtype: DType,
    src: &Buffer,
    layout: &Layout,
    dst: &Buffer,
    dst_offset: usize,
) -> Result<()> {
    unary_checked(op, dtype)?;
    let entry = format!("{}_{}", op.name(), dtype.as_str());
    let out = Out {
        buffer: dst,
        offset: dst_offset,
    };
    map1_launch(
        device,
        &kernels::UNARY,
        op.name(),
        &entry,
        dtype,
        dtype,
        src,
        layout,
        out,
        &[0.0],
    )
}

fn float_param_op(
    device: &Device,
    op: &'static str,
    dtype: DType,
    src: &Buffer,
    layout: &Layout,
    param: f64,
) -> Result<Buffer> {
    if !dtype.is_float() {
        return Err(Error::UnsupportedDType { op, dtype });
    }
    let out = alloc_out(device, dtype, layout.elem_count())?;
    let entry = format!("{op}_{}", dtype.as_str());
    let target = Out {
        buffer: &out,
        offset: 0,
    };
    map1_launch(
        device,
        &kernels::UNARY,
        op,
        &entry,
        dtype,
        dtype,
        src,
        layout,
        target,
        &[param],
    )?;
    Ok(out)
}

/// `x >= 0 ? x : alpha * (exp(x) - 1)` (floats only, as the CPU backend).
pub fn elu(
    device: &Device,
    dtype: DType,
    src: &Buffer,
    layout: &Layout,
    alpha: f64,
) -> Result<Buffer> {
    float_param_op(device, "elu", dtype, src, layout, alpha)
}

/// `x.powf(e)` (floats only, as the CPU backend).
pub fn powf(
    device: &Device,
    dtype: DType,
    src: &Buffer,
    layout: &Layout,
    e: f64,
) -> Result<Buffer> {
    float_param_op(device, "powf", dtype, src, layout, e)
}

/// `x * mul + add` for every dtype; `mul` and `add` are first converted to the dtype (so an
/// integer affine truncates them, as Candle's `T::from_f64`), integers wrap.
pub fn affine(
    device: &Device,
    dtype: DType,
    src: &Buffer,
    layout: &Layout,
    mul: f64,
    add: f64,
) -> Result<Buffer> {
    let out = alloc_out(device, dtype, layout.elem_count())?;
    affine_into(device, dtype, src, layout, mul, add, &out, 0)?;
    Ok(out)
}

/// [`affine`] written into `dst` from element `dst_offset` (`dst` may be `src`).
#[allow(clippy::too_many_arguments)]
pub fn affine_into(
    device: &Device,
    dtype: DType,
    src: &Buffer,
    layout: &Layout,
    mul: f64,
    add: f64,
    dst: &Buffer,
    dst_offset: usize,
) -> Result<()> {
    let entry = format!("affine_{}", dtype.as_str());
    let out = Out {
        buffer: dst,
        offset: dst_offset,
    };
    map1_launch(
        device,
        &kernels::UNARY,
        "affine",
        &entry,
        dtype,
        dtype,
        src,
        layout,
        out,
        &[mul, add],
    )
}

/// Convert every element of `src` (any layout) to `to`, into a new contiguous buffer.
pub fn cast(
    device: &Device,
    from: DType,
    to: DType,
    src: &Buffer,
    layout: &Layout,
) -> Result<Buffer> {
    let out = alloc_out(device, to, layout.elem_count())?;
    cast_into(device, from, to, src, layout, &out, 0)?;
    Ok(out)
}

/// [`cast`] written into `dst` from element `dst_offset`.
pub fn cast_into(
    device: &Device,
    from: DType,
    to: DType,
    src: &Buffer,
    layout: &Layout,
    dst: &Buffer,
    dst_offset: usize,
) -> Result<()> {
    let entry = format!("cast_{}_{}", from.as_str(), to.as_str());
    let out = Out {
        buffer: dst,
        offset: dst_offset,
    };
    map1_launch(
        device,
        &kernels::CAST,
        "to_dtype",
        &entry,
        from,
        to,
        src,
        layout,
        out,
        &[],
    )
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

#[allow(clippy::too_many_arguments)]
fn map2_launch(
    device: &Device,
    op: &'static str,
    entry: &str,
    dtype: DType,
    out_dtype: DType,
    lhs: &Buffer,
    lhs_l: &Layout,
    rhs: &Buffer,
    rhs_l: &Layout,
    out: Out<'_>,
) -> Result<()> {
    same_dims(op, lhs_l, rhs_l)?;
    let la = kernel_layout(op, dtype, lhs, lhs_l)?;
    let lb = kernel_layout(op, dtype, rhs, rhs_l)?;
    let n = lhs_l.elem_count();
    check_out(op, out_dtype, &out, n)?;
    let mut args = LaunchArgs::new();
    args.push_buffer(lhs).push_buffer(rhs);
    push_out(&mut args, out_dtype, &out)?;
    args.push(n as u64).push(la).push(lb);
    launch_elements(device, &kernels::BINARY, dtype, entry, n, &mut args)
}

/// `lhs op rhs` elementwise; both layouts have the same dims (broadcasts use stride 0).
#[allow(clippy::too_many_arguments)]
pub fn binary(
    device: &Device,
    op: BinaryOp,
    dtype: DType,
    lhs: &Buffer,
    lhs_l: &Layout,
    rhs: &Buffer,
    rhs_l: &Layout,
) -> Result<Buffer> {
    same_dims(op.name(), lhs_l, rhs_l)?;
    let out = alloc_out(device, dtype, lhs_l.elem_count())?;
    binary_into(device, op, dtype, lhs, lhs_l, rhs, rhs_l, &out, 0)?;
    Ok(out)
}

/// [`binary`] written into `dst` from element `dst_offset` (`dst` may be an input).
#[allow(clippy::too_many_arguments)]
pub fn binary_into(
    device: &Device,
    op: BinaryOp,
    dtype: DType,
    lhs: &Buffer,
    lhs_l: &Layout,
    rhs: &Buffer,
    rhs_l: &Layout,
    dst: &Buffer,
    dst_offset: usize,
) -> Result<()> {
    let entry = format!("{}_{}", op.name(), dtype.as_str());
    let out = Out {
        buffer: dst,
        offset: dst_offset,
    };
    map2_launch(
        device,
        op.name(),
        &entry,
        dtype,
        dtype,
        lhs,
        lhs_l,
        rhs,
        rhs_l,
        out,
    )
}

/// `lhs op rhs` elementwise as u8 (1 or 0).
#[allow(clippy::too_many_arguments)]
pub fn cmp(
    device: &Device,
    op: CmpOp,
    dtype: DType,
    lhs: &Buffer,
    lhs_l: &Layout,
    rhs: &Buffer,
    rhs_l: &Layout,
) -> Result<Buffer> {
    same_dims(op.name(), lhs_l, rhs_l)?;
    let out = alloc_out(device, DType::U8, lhs_l.elem_count())?;
    let entry = format!("{}_{}", op.name(), dtype.as_str());
    let target = Out {
        buffer: &out,
        offset: 0,
    };
    map2_launch(
        device,
        op.name(),
        &entry,
        dtype,
        DType::U8,
        lhs,
        lhs_l,
        rhs,
        rhs_l,
        target,
    )?;
    Ok(out)
}

/// `cond != 0 ? on_true : on_false`, three layouts of the same dims.
#[allow(clippy::too_many_arguments)]
pub fn where_cond(
    device: &Device,
    cond_dtype: DType,
    cond: &Buffer,
    cond_l: &Layout,
    dtype: DType,
    on_true: &Buffer,
    true_l: &Layout,
    on_false: &Buffer,
    false_l: &Layout,
) -> Result<Buffer> {
    const OP: &str = "where_cond";
    if cond_dtype.is_float() {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: cond_dtype,
        });
    }
    same_dims(OP, cond_l, true_l)?;
    same_dims(OP, cond_l, false_l)?;
    let lc = kernel_layout(OP, cond_dtype, cond, cond_l)?;
    let lt = kernel_layout(OP, dtype, on_true, true_l)?;
    let lf = kernel_layout(OP, dtype, on_false, false_l)?;
    let n = cond_l.elem_count();
    let out = alloc_out(device, dtype, n)?;
    let mut args = LaunchArgs::new();
    args.push_buffer(cond)
        .push_buffer(on_true)
        .push_buffer(on_false)
        .push_buffer(&out)
        .push(n as u64)
        .push(lc)
        .push(lt)
        .push(lf);
    let entry = format!("where_{}_{}", cond_dtype.as_str(), dtype.as_str());
    launch_elements(device, &kernels::TERNARY, dtype, &entry, n, &mut args)?;
    Ok(out)
}

/// Sets every element of `layout` inside `dst` to `value` (its dtype is the buffer's).
pub fn const_set(device: &Device, dst: &Buffer, layout: &Layout, value: Scalar) -> Result<()> {
    let dtype = value.dtype();
    let kl = kernel_layout("const_set", dtype, dst, layout)?;
    let n = layout.elem_count();
    let mut args = LaunchArgs::new();
    args.push_buffer(dst)
        .push(value.to_arg_bits())
        .push(n as u64)
        .push(kl);
    let entry = format!("const_set_{}", dtype.as_str());
    launch_elements(device, &kernels::FILL, dtype, &entry, n, &mut args)
}

/// Copies the elements of `src_l` (any layout) contiguously into `dst` from `dst_offset`.
/// Transposes (a unit-stride axis that is not the last, with at most one batch axis) go
/// through a tiled kernel, everything else through the elementwise strided copy.
pub fn copy_strided(
    device: &Device,
    dtype: DType,
    src: &Buffer,
    src_l: &Layout,
    dst: &Buffer,
    dst_offset: usize,
) -> Result<()> {
    let kl = kernel_layout("copy_strided", dtype, src, src_l)?;
    if let Some(t) = Transpose::of(&kl) {
        let n = src_l.elem_count();
        let out = Out {
            buffer: dst,
            offset: dst_offset,
        };
        check_out("copy_strided", dtype, &out, n)?;
        return t.launch(device, dtype, src, &out);
    }
    let entry = format!("copy_strided_{}", dtype.as_str());
    let out = Out {
        buffer: dst,
        offset: dst_offset,
    };
    map1_launch(
        device,
        &kernels::FILL,
        "copy_strided",
        &entry,
        dtype,
        dtype,
        src,
        src_l,
        out,
        &[],
    )
}

/// A (batch, d0, d1) view whose d0 axis has stride 1: the tiled transpose kernel's case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Transpose {
    batch: u64,
    d0: u64,
    d1: u64,
    batch_stride: u64,
    s1: u64,
    start: u64,
}

impl Transpose {
    const TILE: u64 = 32;

    fn of(kl: &KernelLayout) -> Option<Self> {
        let nd = kl.ndim as usize;
        if !(2..=3).contains(&nd) || kl.strides[nd - 2] != 1 || kl.strides[nd - 1] == 1 {
            return None;
        }
        let (batch, batch_stride) = if nd == 3 {
            (kl.dims[0], kl.strides[0])
        } else {
            (1, 0)
        };
        let t = Transpose {
            batch,
            d0: kl.dims[nd - 2],
            d1: kl.dims[nd - 1],
            batch_stride,
            s1: kl.strides[nd - 1],
            start: kl.start,
        };
        // Narrow tiles waste most of the block; the grid's y axis bounds d1.
        (t.d0 >= 8 && t.d1 >= 8 && t.d1.div_ceil(Self::TILE) <= 65_535).then_some(t)
    }

    /// Whether the pair kernel applies: elements of at most 4 bytes and every pair aligned.
    fn pairs_fit(&self, dtype: DType, dst_offset: usize) -> bool {
        let even = |v: u64| v % 2 == 0;
        dtype.size_in_bytes() <= 4
            && even(self.start)
            && even(self.s1)
            && even(self.d1)
            && (self.batch == 1 || even(self.batch_stride))
            && dst_offset % 2 == 0
    }

    fn launch(&self, device: &Device, dtype: DType, src: &Buffer, out: &Out<'_>) -> Result<()> {
        let mut args = LaunchArgs::new();
        args.push_buffer(src);
        push_out(&mut args, dtype, out)?;
        for v in [
            self.batch,
            self.d0,
            self.d1,
            self.batch_stride,
            self.s1,
            self.start,
        ] {
            args.push(v);
        }
        let (op, tile) = if self.pairs_fit(dtype, out.offset) {
            ("transpose_pairs", 2 * Self::TILE)
        } else {
            ("transpose", Self::TILE)
        };
        let config = LaunchConfig {
            grid: [
                self.d0.div_ceil(tile) as u32,
                self.d1.div_ceil(tile) as u32,
                self.batch.min(65_535) as u32,
            ],
            block: [Self::TILE as u32, 8, 1],
            shared_mem_bytes: 0,
        };
        let entry = format!("{op}_{}", dtype.as_str());
        let _span = tracing::debug_span!("op", entry = %entry, batch = self.batch, d0 = self.d0, d1 = self.d1).entered();
        let function = device.dtype_function(&kernels::FILL, dtype.as_str(), &entry)?;
        device.launch(&function, config, &mut args)
    }
}

/// A `rows x cols` block copy with row strides in elements (Candle's `copy2d`).
#[allow(clippy::too_many_arguments)]
pub fn copy2d(
    device: &Device,
    dtype: DType,
    src: &Buffer,
    dst: &Buffer,
    rows: usize,
    cols: usize,
    src_stride: usize,
    dst_stride: usize,
    src_offset: usize,
    dst_offset: usize,
) -> Result<()> {
    const OP: &str = "copy2d";
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    // The block as a layout, for the same bounds checks as every other op.
    Layout::new(&[rows, cols], &[src_stride, 1], src_offset).check_fits(OP, dtype, src)?;
    Layout::new(&[rows, cols], &[dst_stride, 1], dst_offset).check_fits(OP, dtype, dst)?;
    let size = dtype.size_in_bytes();
    let mut args = LaunchArgs::new();
    args.push_buffer_at(src, src_offset * size)?;
    args.push_buffer_at(dst, dst_offset * size)?;
    args.push(rows as u64)
        .push(cols as u64)
        .push(src_stride as u64)
        .push(dst_stride as u64);
    let block = rocm_device::DEFAULT_BLOCK;
    let info = device.info();
    let col_blocks = (cols as u64).div_ceil(u64::from(block));
    let budget = u64::from(info.multiprocessor_count.max(1)) * 32;
    let grid_x = col_blocks.clamp(1, budget);
    let grid_y = (rows as u64).clamp(1, (budget / grid_x).clamp(1, 65_535));
    let config = LaunchConfig {
        grid: [grid_x as u32, grid_y as u32, 1],
        block: [block, 1, 1],
        shared_mem_bytes: 0,
    };
    let entry = format!("copy2d_{}", dtype.as_str());
    let _span = tracing::debug_span!("op", entry = %entry, rows, cols).entered();
    let function = device.dtype_function(&kernels::FILL, dtype.as_str(), &entry)?;
    device.launch(&function, config, &mut args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kl(dims: &[usize], strides: &[usize], start: usize) -> KernelLayout {
        Layout::new(dims, strides, start).kernel_layout().unwrap()
    }

    #[test]
    fn transposes_are_recognised() {
        // (64, 48) transposed view of a (48, 64) tensor
        let t = Transpose::of(&kl(&[64, 48], &[1, 64], 5)).unwrap();
        assert_eq!((t.batch, t.d0, t.d1, t.s1, t.start), (1, 64, 48, 64, 5));
        // batched: (3, 33, 17) view of (3, 17, 33)
        let t = Transpose::of(&kl(&[3, 33, 17], &[561, 1, 33], 0)).unwrap();
        assert_eq!(
            (t.batch, t.batch_stride, t.d0, t.d1, t.s1),
            (3, 561, 33, 17, 33)
        );
        // contiguous, broadcast, too narrow, too many dims: not this kernel's case
        assert_eq!(Transpose::of(&kl(&[64, 48], &[48, 1], 0)), None);
        assert_eq!(Transpose::of(&kl(&[64, 48], &[0, 1], 0)), None);
        assert_eq!(Transpose::of(&kl(&[64, 4], &[1, 64], 0)), None);
        // pairs need even start, strides, d1 and destination offset, and small elements
        let t = Transpose::of(&kl(&[64, 48], &[1, 64], 0)).unwrap();
        assert!(t.pairs_fit(DType::BF16, 0) && t.pairs_fit(DType::F32, 2));
        assert!(!t.pairs_fit(DType::F64, 0) && !t.pairs_fit(DType::F16, 1));
        assert!(!Transpose::of(&kl(&[64, 48], &[1, 64], 3))
            .unwrap()
            .pairs_fit(DType::U8, 0));
        assert!(!Transpose::of(&kl(&[64, 47], &[1, 64], 0))
            .unwrap()
            .pairs_fit(DType::U8, 0));
        assert_eq!(
            Transpose::of(&kl(&[2, 3, 64, 48], &[10000, 3333, 1, 64], 0)),
            None
        );
        // batch dims that merge into one are fine
        assert_eq!(
            Transpose::of(&kl(&[2, 3, 64, 48], &[9999, 3333, 1, 64], 0))
                .unwrap()
                .batch,
            6
        );
    }

    #[test]
    fn unary_support_follows_the_cpu_backend() {
        assert!(UnaryOp::Exp.supports(DType::F8E4M3));
        assert!(!UnaryOp::Exp.supports(DType::U8));
        assert!(UnaryOp::Abs.supports(DType::I16));
        assert!(UnaryOp::Gelu.supports(DType::I64));
        assert!(!UnaryOp::Sqrt.supports(DType::U32));
        assert_eq!(UnaryOp::ALL.len(), 21);
    }
}

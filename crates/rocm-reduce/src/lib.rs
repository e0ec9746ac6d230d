//! rocm-reduce: reductions and the fused row ops of candle-rocm.
//!
//! - [`reduce`]: sum, min, max, argmin, argmax over any set of dims of any layout, for all ten
//!   dtypes, with Candle's CPU semantics (integer sums wrap; min/max keep the first of equal
//!   values; a NaN wins only as element 0; min/max/arg* of an empty tensor are
//!   [`Error::EmptyTensor`]). Long reductions with few outputs are split over many blocks and
//!   finished by a second pass, so a whole-tensor sum uses the whole GPU.
//! - [`softmax_last_dim`], [`log_softmax_last_dim`], [`rms_norm`], [`add_rms_norm`],
//!   [`layer_norm`]: rows of up to 8 K units (16-byte packs, or elements) are held in
//!   registers by a group of threads and read once; longer rows get one block each. f32 statistics for the 16-bit floats,
//!   max-subtracted softmax, variance from deviations (never E[x^2] - mean^2). Strided inputs
//!   are copied to contiguous ones first (rocm-elementwise's `OperandCopy::contiguous`).

#![cfg_attr(test, allow(clippy::unwrap_used))]

use rocm_device::{require_float, Contiguous, KernelLayout, LaunchConfig};
pub use rocm_device::{Buffer, DType, Device, Error, Layout, Operand, Result};
use rocm_elementwise::OperandCopy;
use rocm_kernels as kernels;
use rocm_kernels::norm::{RowOp, RowParams, RowShape};

/// Candle's `ReduceOp`, in the order of the kernel tables (`kernels::reduce::FIRST_PASS`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Min,
    Max,
    ArgMin,
    ArgMax,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::ArgMin,
        ReduceOp::ArgMax,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::ArgMin => "argmin",
            ReduceOp::ArgMax => "argmax",
        }
    }

    /// The output dtype for an input of `dtype`.
    pub fn out_dtype(self, dtype: DType) -> DType {
        match self {
            ReduceOp::ArgMin | ReduceOp::ArgMax => DType::U32,
            _ => dtype,
        }
    }
}

/// Fewest and most threads a reduction block has: multiples of 64, so every warp is full on
/// wave32 and wave64.
const BLOCK_THREADS: (u64, u64) = (64, 256);

/// Threads per block for a reduction of `len` elements.
fn block_for(len: u64) -> u32 {
    (len.next_power_of_two()
        .clamp(BLOCK_THREADS.0, BLOCK_THREADS.1)) as u32
}

/// 16-byte packs a thread loads together in the kernels' `block_visit` (VISIT_BATCH).
const VISIT_BATCH: u64 = 4;

/// Threads per block for a reduction of `len` elements of `elem_bytes` each: enough for
/// VISIT_BATCH 16-byte packs per thread, so short rows get small blocks that keep several
/// loads in flight per thread and combine over fewer warps.
fn block_for_row(len: u64, elem_bytes: u64) -> u32 {
    let per_pack = (16 / elem_bytes.max(1)).max(1);
    block_for(len.div_ceil(per_pack * VISIT_BATCH))
}

/// How a reduction is spread: output blocks x chunks of the reduction per output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReducePlan {
    pub n_out: u64,
    pub red_len: u64,
    pub block: u32,
    pub chunks: u64,
    pub chunk_len: u64,
}

impl ReducePlan {
    /// Enough blocks to fill `multiprocessors` several times over.
    pub fn new(n_out: u64, red_len: u64, elem_bytes: u64, multiprocessors: u32) -> Self {
        let block = block_for_row(red_len, elem_bytes);
        let target = u64::from(multiprocessors.max(1)) * 8;
        let mut chunks = 1;
        if n_out < target {
            // at least 8192 elements per chunk (32 per thread of a full block): splitting a
            // short reduction costs a second launch (about 4 us of host time) that its few
            // loads do not repay
            let by_work = red_len.div_ceil(8192);
            chunks = target
                .div_ceil(n_out.max(1))
                .min(by_work)
                .clamp(1, u64::from(rocm_device::MAX_GRID_YZ));
        }
        // chunks start on 16-element boundaries so each keeps 16-byte loads
        let chunk_len = red_len.div_ceil(chunks).next_multiple_of(16).max(1);
        let chunks = red_len.div_ceil(chunk_len).max(1);
        ReducePlan {
            n_out,
            red_len,
            block,
            chunks,
            chunk_len,
        }
    }
}

/// Outputs a multiprocessor below which a block an output keeps the device busier than a
/// thread an output.
const COLUMNS_OUTPUTS_PER_MULTIPROCESSOR: u64 = 512;
/// Reductions up to this long take a thread an output even where their elements are contiguous
/// (a block of 64 threads for 8 elements leaves most of it idle).
const COLUMNS_SHORT_LEN: u64 = 32;
/// Threads a block of the thread-an-output kernels.
const COLUMNS_BLOCK: u32 = 256;

/// Whether a reduction runs a thread an output (`<op>_columns`): many outputs, and a reduction
/// that is short or not contiguous (a sum over dim -2, where a block an output reads one
/// element a thread at the reduction's stride).
pub fn by_columns(n_out: u64, red_len: u64, red_contiguous: bool, multiprocessors: u32) -> bool {
    n_out >= u64::from(multiprocessors.max(1)) * COLUMNS_OUTPUTS_PER_MULTIPROCESSOR
        && (!red_contiguous || red_len <= COLUMNS_SHORT_LEN)
}

/// Splits `layout` into the kept dims (with the start offset) and the reduced dims.
fn split_layout(op: &'static str, layout: &Layout, dims: &[usize]) -> Result<(Layout, Layout)> {
    let nd = layout.dims.len();
    let mut seen = vec![false; nd];
    for &d in dims {
        if d >= nd || seen[d] {
            return Err(Error::ShapeMismatch {
                op,
                detail: format!("reduce dims {dims:?} for a tensor of rank {nd}"),
            });
        }
        seen[d] = true;
    }
    let pick = |keep: bool| -> (Vec<usize>, Vec<usize>) {
        (0..nd)
            .filter(|&i| seen[i] != keep)
            .map(|i| (layout.dims[i], layout.strides[i]))
            .unzip()
    };
    let (kd, ks) = pick(true);
    let (rd, rs) = pick(false);
    Ok((
        Layout::new(&kd, &ks, layout.start),
        Layout::new(&rd, &rs, 0),
    ))
}

/// `op` over `reduce_dims` of `src`; the output is contiguous with those dims kept as size 1
/// (u32 for argmin/argmax).
pub fn reduce(
    device: &Device,
    op: ReduceOp,
    src: Operand<'_>,
    reduce_dims: &[usize],
) -> Result<Buffer> {
    let name = op.name();
    let (dtype, layout) = (src.dtype, src.layout);
    src.check(name)?;
    let (kept, red) = split_layout(name, layout, reduce_dims)?;
    let n_out = kept.elem_count() as u64;
    let red_len = red.elem_count() as u64;
    let out_dtype = op.out_dtype(dtype);
    let out = device.alloc(n_out as usize * out_dtype.size_in_bytes())?;
    if layout.elem_count() == 0 {
        if op != ReduceOp::Sum {
            return Err(Error::EmptyTensor { op: "reduce" });
        }
        if n_out > 0 {
            device.memset(&out, 0, out.len(), 0)?;
        }
        return Ok(out);
    }
    let (kept_kl, red_kl): (KernelLayout, KernelLayout) =
        (kept.kernel_layout()?, red.kernel_layout()?);
    let multiprocessors = device.info().multiprocessor_count;
    // the kernels' own test of a contiguous reduction (reduce.hip's block path)
    let red_contiguous = red_kl.ndim == 0 || (red_kl.ndim == 1 && red_kl.strides[0] == 1);
    if by_columns(n_out, red_len, red_contiguous, multiprocessors) {
        let _span =
            tracing::debug_span!("reduce by columns", op = name, %dtype, n_out, red_len).entered();
        let params = kernels::reduce::ColumnsParams {
            input: src.buffer.ptr(),
            out: out.ptr(),
            n_out,
            red_len,
            kept: kept_kl,
            red: red_kl,
        };
        let config = LaunchConfig {
            grid: [
                n_out
                    .div_ceil(COLUMNS_BLOCK.into())
                    .min(rocm_device::GRID_X_CAP) as u32,
                1,
                1,
            ],
            block: [COLUMNS_BLOCK, 1, 1],
            shared_mem_bytes: 0,
        };
        let entry = kernels::reduce::COLUMNS[op as usize];
        device.launch_entry(entry, dtype.as_str(), config, &params)?;
        return Ok(out);
    }
    let plan = ReducePlan::new(
        n_out,
        red_len,
        dtype.size_in_bytes() as u64,
        multiprocessors,
    );
    let _span =
        tracing::debug_span!("reduce", op = name, %dtype, n_out, red_len, chunks = plan.chunks)
            .entered();
    // Partial states of the first pass: at most 16 bytes each.
    let partials = if plan.chunks > 1 {
        Some(device.alloc((n_out * plan.chunks * 16) as usize)?)
    } else {
        None
    };
    let grid_x = n_out.min(rocm_device::GRID_X_CAP) as u32;
    let params = kernels::reduce::ReduceParams {
        input: src.buffer.ptr(),
        out: out.ptr(),
        // without partials (one chunk) the kernel is given the output's address and writes
        // no partial state
        partials: partials.as_ref().unwrap_or(&out).ptr(),
        n_out,
        red_len,
        kept: kept_kl,
        red: red_kl,
        chunk_len: plan.chunk_len,
    };
    let config = LaunchConfig {
        grid: [grid_x, plan.chunks as u32, 1],
        block: [plan.block, 1, 1],
        shared_mem_bytes: 0,
    };
    let entry = kernels::reduce::FIRST_PASS[op as usize];
    device.launch_entry(entry, dtype.as_str(), config, &params)?;
    if let Some(p) = &partials {
        let params = kernels::reduce::FinishParams {
            partials: p.ptr(),
            out: out.ptr(),
            n_out,
            chunks: plan.chunks,
        };
        let config = LaunchConfig {
            grid: [grid_x, 1, 1],
            block: [block_for(plan.chunks), 1, 1],
            shared_mem_bytes: 0,
        };
        let entry = kernels::reduce::FINISH[op as usize];
        device.launch_entry(entry, dtype.as_str(), config, &params)?;
    }
    Ok(out)
}

/// (rows, row length) of a layout whose last dim is the row.
fn rows_of(op: &'static str, l: &Layout) -> Result<(u64, u64)> {
    let Some(&len) = l.dims.last() else {
        return Err(Error::ShapeMismatch {
            op,
            detail: "a scalar has no last dim".into(),
        });
    };
    let n = l.elem_count() as u64;
    Ok((if len == 0 { 0 } else { n / len as u64 }, len as u64))
}

/// Units (16-byte packs or single elements) each thread of a register-row kernel holds
/// (ROW_UNITS in norm.hip).
const ROW_UNITS: u64 = 8;
/// The widest block the register-row kernels use, holding one row (less where the device
/// allows fewer threads a block).
const MAX_ROW_GROUP: u64 = 1024;

/// Below this many threads in all (rows x group), a register-row launch gives each row more
/// threads: a decode step's single row otherwise sits on one warp, its latency set by one
/// thread's 8 sequential units.
const FEW_ROW_THREADS: u64 = 4096;

/// How a softmax or norm kernel covers its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowPlan {
    /// A group of `group` threads holds each row in registers, in units of `unit_elems`
    /// elements (a 16-byte pack, or 1 where the row or a buffer is not pack-aligned); a block
    /// of `block` threads holds `block / group` rows.
    Registers {
        unit_elems: u64,
        group: u32,
        block: u32,
    },
    /// Rows too long for registers: one block per row, its threads striding over it.
    Block { block: u32 },
}

impl RowPlan {
    /// The plan for rows of `len` elements of `elem_bytes`; `aligned`: every buffer the
    /// kernel touches starts on a 16-byte boundary; `max_block`: the device's threads a block.
    pub fn new(len: u64, elem_bytes: u64, aligned: bool, max_block: u32) -> Self {
        let pack = (16 / elem_bytes.max(1)).max(1);
        let unit_elems = if aligned && len % pack == 0 { pack } else { 1 };
        let units = len / unit_elems;
        // a power of two, so groups tile the block
        let max_group = 1u64 << MAX_ROW_GROUP.min(u64::from(max_block.max(1))).ilog2();
        if units <= ROW_UNITS * max_group {
            let group = units.div_ceil(ROW_UNITS).max(1).next_power_of_two();
            return RowPlan::Registers {
                unit_elems,
                group: group as u32,
                block: group.max(256.min(max_group)) as u32,
            };
        }
        // Small blocks with several 16-byte loads per thread keep many rows in flight per SM.
        RowPlan::Block {
            block: (len / 32).next_power_of_two().clamp(64, 256) as u32,
        }
    }

    /// [`RowPlan::new`] for a launch of `rows` rows: when they are too few to fill the
    /// device, each row's units are spread over up to one thread each.
    pub fn for_rows(len: u64, elem_bytes: u64, aligned: bool, max_block: u32, rows: u64) -> Self {
        let plan = Self::new(len, elem_bytes, aligned, max_block);
        match plan {
            RowPlan::Registers {
                unit_elems, group, ..
            } if rows.saturating_mul(u64::from(group)) < FEW_ROW_THREADS => {
                let max_group = 1u64 << MAX_ROW_GROUP.min(u64::from(max_block.max(1))).ilog2();
                let wide = (len / unit_elems).next_power_of_two().min(max_group);
                RowPlan::Registers {
                    unit_elems,
                    group: wide as u32,
                    block: wide.max(256.min(max_group)) as u32,
                }
            }
            other => other,
        }
    }
}

/// Launches the row kernel of `op` over `params.rows` rows of `params.len` in the shape the
/// [`RowPlan`] picks (which sets `params.group`); `addresses`: every address the kernel reads
/// or writes from.
fn row_launch(
    device: &Device,
    (op, dtype): (RowOp, DType),
    mut params: RowParams,
    addresses: &[u64],
) -> Result<()> {
    let (rows, len) = (params.rows, params.len);
    if rows == 0 || len == 0 {
        return Ok(());
    }
    let plan = RowPlan::for_rows(
        len,
        dtype.size_in_bytes() as u64,
        addresses.iter().all(|a| a % 16 == 0),
        device.info().max_threads_per_block,
        rows,
    );
    let (shape, group, block) = match plan {
        RowPlan::Registers {
            unit_elems: 1,
            group,
            block,
        } => (RowShape::RegElem, group, block),
        RowPlan::Registers { group, block, .. } => (RowShape::RegPack, group, block),
        RowPlan::Block { block } => (RowShape::Block, block, block),
    };
    params.group = group;
    let config = LaunchConfig {
        grid: [
            rows.div_ceil(u64::from(block / group))
                .min(rocm_device::GRID_X_CAP) as u32,
            1,
            1,
        ],
        block: [block, 1, 1],
        shared_mem_bytes: 0,
    };
    device.launch_entry(
        kernels::norm::entry(op, shape),
        dtype.as_str(),
        config,
        &params,
    )
}

/// The row kernels' parameters reading `x` and writing `out`; the other pointers (read by
/// none of the ops that leave them so) are x's and out's.
fn row_params(x: &Contiguous<'_>, out: &Buffer, (rows, len): (u64, u64)) -> Result<RowParams> {
    let (x, out) = (x.ptr()?, out.ptr());
    Ok(RowParams {
        x,
        r: x,
        alpha: x,
        beta: x,
        sum: out,
        out,
        rows,
        len,
        eps: 0.0,
        has_beta: 0,
        group: 0,
    })
}

fn softmax_impl(device: &Device, src: Operand<'_>, op: RowOp) -> Result<Buffer> {
    let dtype = src.dtype;
    require_float(op.name(), dtype)?;
    let (rows, len) = rows_of(op.name(), src.layout)?;
    let x = src.contiguous(op.name())?;
    let out = device.alloc(src.elem_count() * dtype.size_in_bytes())?;
    let params = row_params(&x, &out, (rows, len))?;
    let addresses = [x.address(), out.device_ptr()];
    row_launch(device, (op, dtype), params, &addresses)?;
    Ok(out)
}

/// `exp(x - max) / sum(exp(x - max))` over the last dim.
pub fn softmax_last_dim(device: &Device, src: Operand<'_>) -> Result<Buffer> {
    softmax_impl(device, src, RowOp::Softmax)
}

/// `x - max - log(sum(exp(x - max)))` over the last dim.
pub fn log_softmax_last_dim(device: &Device, src: Operand<'_>) -> Result<Buffer> {
    softmax_impl(device, src, RowOp::LogSoftmax)
}

/// A weight of a norm: the row's length, the input's dtype, contiguous.
fn weight<'a>(
    op: &'static str,
    name: &str,
    w: Operand<'a>,
    x: &Operand<'_>,
    len: u64,
) -> Result<Contiguous<'a>> {
    if w.elem_count() as u64 != len {
        return Err(Error::ShapeMismatch {
            op,
            detail: format!(
                "{name} has dims {:?}, the rows have {len} elements",
                w.layout.dims
            ),
        });
    }
    if w.dtype != x.dtype {
        return Err(Error::DTypeMismatch {
            op,
            detail: format!("x {}, {name} {}", x.dtype, w.dtype),
        });
    }
    w.contiguous(op)
}

/// `x / sqrt(mean(x^2) + eps) * alpha` over the last dim (`alpha` has the row's length).
pub fn rms_norm(device: &Device, x: Operand<'_>, alpha: Operand<'_>, eps: f32) -> Result<Buffer> {
    const OP: RowOp = RowOp::RmsNorm;
    let dtype = x.dtype;
    require_float(OP.name(), dtype)?;
    let (rows, len) = rows_of(OP.name(), x.layout)?;
    let a = weight(OP.name(), "alpha", alpha, &x, len)?;
    let xc = x.contiguous(OP.name())?;
    let out = device.alloc(x.elem_count() * dtype.size_in_bytes())?;
    let params = RowParams {
        alpha: a.ptr()?,
        eps,
        ..row_params(&xc, &out, (rows, len))?
    };
    let addresses = [xc.address(), a.address(), out.device_ptr()];
    row_launch(device, (OP, dtype), params, &addresses)?;
    Ok(out)
}

/// `sum = x + residual` (rounded to the dtype, as Candle's add) and `rms_norm(sum, alpha,
/// eps)` over the last dim in one launch: a pre-norm block's residual add and the next norm.
/// Both outputs are bit for bit those of an add then [`rms_norm`] (the same sums of squares
/// in the same order). Returns `(sum, normed)`.
pub fn add_rms_norm(
    device: &Device,
    x: Operand<'_>,
    residual: Operand<'_>,
    alpha: Operand<'_>,
    eps: f32,
) -> Result<(Buffer, Buffer)> {
    const OP: RowOp = RowOp::AddRmsNorm;
    let dtype = x.dtype;
    require_float(OP.name(), dtype)?;
    if residual.layout.dims != x.layout.dims {
        return Err(Error::ShapeMismatch {
            op: OP.name(),
            detail: format!(
                "x has dims {:?}, the residual {:?}",
                x.layout.dims, residual.layout.dims
            ),
        });
    }
    if residual.dtype != dtype {
        return Err(Error::DTypeMismatch {
            op: OP.name(),
            detail: format!("x {dtype}, residual {}", residual.dtype),
        });
    }
    let (rows, len) = rows_of(OP.name(), x.layout)?;
    let a = weight(OP.name(), "alpha", alpha, &x, len)?;
    let xc = x.contiguous(OP.name())?;
    let rc = residual.contiguous(OP.name())?;
    let bytes = x.elem_count() * dtype.size_in_bytes();
    let (sum, out) = (device.alloc(bytes)?, device.alloc(bytes)?);
    let params = RowParams {
        r: rc.ptr()?,
        alpha: a.ptr()?,
        sum: sum.ptr(),
        eps,
        ..row_params(&xc, &out, (rows, len))?
    };
    let addresses = [
        xc.address(),
        rc.address(),
        a.address(),
        sum.device_ptr(),
        out.device_ptr(),
    ];
    row_launch(device, (OP, dtype), params, &addresses)?;
    Ok((sum, out))
}

/// `(x - mean) / sqrt(var + eps) * alpha + beta` over the last dim; `beta` is optional.
pub fn layer_norm(
    device: &Device,
    x: Operand<'_>,
    alpha: Operand<'_>,
    beta: Option<Operand<'_>>,
    eps: f32,
) -> Result<Buffer> {
    const OP: RowOp = RowOp::LayerNorm;
    let dtype = x.dtype;
    require_float(OP.name(), dtype)?;
    let (rows, len) = rows_of(OP.name(), x.layout)?;
    let a = weight(OP.name(), "alpha", alpha, &x, len)?;
    let b = beta
        .map(|b| weight(OP.name(), "beta", b, &x, len))
        .transpose()?;
    let xc = x.contiguous(OP.name())?;
    let out = device.alloc(x.elem_count() * dtype.size_in_bytes())?;
    // Without beta the kernel is given alpha's address and reads none (has_beta = 0).
    let b_ref = b.as_ref().unwrap_or(&a);
    let params = RowParams {
        alpha: a.ptr()?,
        beta: b_ref.ptr()?,
        eps,
        has_beta: u32::from(b.is_some()),
        ..row_params(&xc, &out, (rows, len))?
    };
    let addresses = [xc.address(), a.address(), b_ref.address(), out.device_ptr()];
    row_launch(device, (OP, dtype), params, &addresses)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_tables_follow_reduce_ops_order() {
        for op in ReduceOp::ALL {
            let i = op as usize;
            assert_eq!(kernels::reduce::FIRST_PASS[i].op, op.name());
            assert_eq!(
                kernels::reduce::FINISH[i].op,
                format!("{}_finish", op.name())
            );
            assert_eq!(
                kernels::reduce::COLUMNS[i].op,
                format!("{}_columns", op.name())
            );
        }
        for (op, shape, name) in [
            (RowOp::LogSoftmax, RowShape::Block, "log_softmax"),
            (RowOp::RmsNorm, RowShape::RegElem, "rms_norm_regelem"),
            (RowOp::AddRmsNorm, RowShape::RegPack, "add_rms_norm_regpack"),
            (RowOp::LayerNorm, RowShape::RegElem, "layer_norm_regelem"),
        ] {
            assert_eq!(kernels::norm::entry(op, shape).op, name);
        }
    }

    #[test]
    fn many_short_or_strided_reductions_take_a_thread_an_output() {
        // the MoE block's sum of each token's expert rows: 512 x 2048 outputs of 8, strided
        assert!(by_columns(512 * 2048, 8, false, 132));
        // contiguous and short, or strided and long: many outputs
        assert!(by_columns(1 << 20, 8, true, 132));
        assert!(by_columns(1 << 20, 4096, false, 132));
        // contiguous rows of more than COLUMNS_SHORT_LEN keep a block a row
        assert!(!by_columns(1 << 20, 33, true, 132));
        // too few outputs to fill the device
        assert!(!by_columns(132 * 512 - 1, 8, false, 132));
    }

    #[test]
    fn long_reductions_with_few_outputs_are_split() {
        let p = ReducePlan::new(1, 1 << 26, 4, 132);
        assert!(p.chunks >= 132 * 8 && p.chunks * p.chunk_len >= 1 << 26);
        assert!((p.chunks - 1) * p.chunk_len < 1 << 26);
        assert_eq!(p.block, 256);
        let p = ReducePlan::new(1 << 20, 1024, 4, 132);
        assert_eq!(p.chunks, 1);
        let p = ReducePlan::new(1, 1, 4, 132);
        assert_eq!((p.chunks, p.chunk_len, p.block), (1, 16, 64));
        assert_eq!(block_for(33) % 64, 0);
    }

    #[test]
    fn short_rows_get_blocks_of_four_packs_per_thread() {
        // rows of 4096: bf16 is 512 packs, f32 1024, f64 2048
        assert_eq!(block_for_row(4096, 2), 128);
        assert_eq!(block_for_row(4096, 4), 256);
        assert_eq!(block_for_row(4096, 8), 256);
        assert_eq!(block_for_row(1024, 2), 64);
        assert_eq!(block_for_row(1 << 20, 1) % 64, 0);
        assert_eq!(ReducePlan::new(1 << 15, 4096, 2, 132).block, 128);
        // a few short rows stay one launch, whatever their block
        let p = ReducePlan::new(4, 1024, 4, 132);
        assert_eq!((p.chunks, p.block), (1, 64));
    }

    #[test]
    fn rows_up_to_8k_units_are_held_in_registers() {
        let regs = |unit_elems, group, block| RowPlan::Registers {
            unit_elems,
            group,
            block,
        };
        // f32 rows of 1024: 256 packs, 8 per thread, 8 rows per block of 256
        assert_eq!(RowPlan::new(1024, 4, true, 1024), regs(4, 32, 256));
        assert_eq!(RowPlan::new(4096, 2, true, 1024), regs(8, 64, 256));
        assert_eq!(RowPlan::new(32768, 4, true, 1024), regs(4, 1024, 1024));
        assert_eq!(RowPlan::new(65536, 2, true, 1024), regs(8, 1024, 1024));
        // tiny rows: one thread per row
        assert_eq!(RowPlan::new(1, 4, true, 1024), regs(1, 1, 256));
        assert_eq!(RowPlan::new(8, 8, true, 1024), regs(2, 1, 256));
        // a length that is not a whole number of packs, or an unaligned buffer: elements
        assert_eq!(RowPlan::new(4097, 4, true, 1024), regs(1, 1024, 1024));
        assert_eq!(RowPlan::new(1024, 4, false, 1024), regs(1, 128, 256));
        // longer rows: a block each
        assert_eq!(
            RowPlan::new(32772, 4, true, 1024),
            RowPlan::Block { block: 256 }
        );
        assert_eq!(
            RowPlan::new(65537, 2, true, 1024),
            RowPlan::Block { block: 256 }
        );
        // a device of 512 threads a block (the emulated wavefronts) holds half as much
        assert_eq!(RowPlan::new(16384, 4, true, 512), regs(4, 512, 512));
        assert_eq!(
            RowPlan::new(16388, 4, true, 512),
            RowPlan::Block { block: 256 }
        );
        assert_eq!(RowPlan::new(1024, 4, true, 512), regs(4, 32, 256));
        // few rows: a thread per unit (a decode step's one row of 2048 bf16: 256 threads)
        assert_eq!(RowPlan::for_rows(2048, 2, true, 1024, 1), regs(8, 256, 256));
        assert_eq!(
            RowPlan::for_rows(2048, 2, true, 1024, 4096),
            regs(8, 32, 256)
        );
        assert_eq!(RowPlan::for_rows(32768, 2, true, 512, 1), regs(8, 512, 512));
        assert_eq!(
            RowPlan::for_rows(642, 4, false, 1024, 1),
            regs(1, 1024, 1024)
        );
        assert_eq!(RowPlan::for_rows(3, 4, false, 1024, 1), regs(1, 4, 256));
        assert_eq!(
            RowPlan::new(1 << 20, 8, true, 1024),
            RowPlan::Block { block: 256 }
        );
    }

    #[test]
    fn layouts_split_into_kept_and_reduced() {
        let l = Layout::new(&[2, 3, 4], &[12, 4, 1], 5);
        let (k, r) = split_layout("sum", &l, &[1]).unwrap();
        assert_eq!((k.dims, k.strides, k.start), (vec![2, 4], vec![12, 1], 5));
        assert_eq!((r.dims, r.strides, r.start), (vec![3], vec![4], 0));
        assert!(split_layout("sum", &l, &[3]).is_err());
        assert!(split_layout("sum", &l, &[1, 1]).is_err());
        let (k, r) = split_layout("sum", &l, &[0, 1, 2]).unwrap();
        assert_eq!((k.elem_count(), r.elem_count()), (1, 24));
    }
}

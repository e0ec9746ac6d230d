//! Few-row products on the project's own kernel (`gemv.hip`) instead of the BLAS: lhs rows
//! and rhs columns both contiguous along k (a linear layer's `x . w^T`, attention scores
//! `q . k^T` over a cache), at most [`kernels::gemv::MAX_ROWS`] rows a matrix. A vendor gemm
//! of one row reads such a matrix well below the copy bandwidth (a 2048 x 2048 bf16 weight at
//! 32% of it on an H100); the kernel streams the weights once with 16-byte loads.

use rocm_device::kernels;
use rocm_device::{Buffer, DType, Device, LaunchArgs, LaunchConfig, Result};

use crate::plan::{GemmPlan, Op};

/// Threads a block of the gemv kernels (whole warps of 32 and 64 lanes).
const BLOCK: u32 = 256;
/// Weight rows (outputs of a matrix times the batch) a device's multiprocessors must have at
/// least this many of, each, before the kernel takes a product: fewer rows than that leave
/// the device idle unless k is split, which the BLAS does.
const MIN_ROWS_PER_MULTIPROCESSOR: usize = 4;

/// One gemv launch: the plan of a product the kernel can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemvPlan {
    /// Activation rows (lhs rows of one matrix).
    pub rows: usize,
    /// Lanes a weight row: a power of two dividing the warp.
    pub group: u32,
    /// Every row start 16-byte aligned and k a whole number of packs.
    pub packed: bool,
}

impl GemvPlan {
    /// The kernel's plan for `p`, if it takes it: f32/f16/bf16, rhs read along k (transposed
    /// in the column-major call), lhs row-major, at most `MAX_ROWS` rows, enough outputs to
    /// fill the device. `ptrs` are the device addresses of rhs, lhs and the output.
    pub fn of(
        p: &GemmPlan,
        dtype: DType,
        ptrs: [u64; 3],
        warp_size: u32,
        multiprocessors: u32,
    ) -> Option<Self> {
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
            || p.a.op != Op::Transpose
            || p.b.op != Op::None
            || p.n > kernels::gemv::MAX_ROWS as usize
            || p.m * p.batch < MIN_ROWS_PER_MULTIPROCESSOR * multiprocessors as usize
        {
            return None;
        }
        let pack = 16 / dtype.size_in_bytes();
        let whole = |v: usize| v % pack == 0;
        let packed = whole(p.k)
            && [p.a.offset, p.a.ld, p.a.batch_stride]
                .into_iter()
                .chain([p.b.offset, p.b.ld, p.b.batch_stride])
                .all(whole)
            && ptrs[..2].iter().all(|ptr| ptr % 16 == 0);
        // the fewest lanes that give each lane a share of the row, at most a warp
        let per_row = if packed { p.k.div_ceil(pack) } else { p.k };
        let group = per_row.next_power_of_two().clamp(1, warp_size as usize) as u32;
        Some(GemvPlan {
            rows: p.n,
            group,
            packed,
        })
    }

    /// Queues the product: `rhs`, `lhs` and `out` are the buffers the plan's offsets are
    /// relative to; the output is f32 where `out_f32`, else the inputs' dtype.
    pub fn launch(
        &self,
        device: &Device,
        p: &GemmPlan,
        dtype: DType,
        (rhs, lhs, out): (&Buffer, &Buffer, &Buffer),
        out_f32: bool,
    ) -> Result<()> {
        let size = dtype.size_in_bytes();
        let out_size = if out_f32 { 4 } else { size };
        let op = if self.rows == 1 { "gemv1" } else { "gemv" };
        let f = device.kernel(&kernels::GEMV, op, dtype.as_str())?;
        let u64_of = |v: usize| v as u64;
        let mut args = LaunchArgs::new();
        args.push_buffer_at(rhs, p.a.offset * size)?
            .push_buffer_at(lhs, p.b.offset * size)?
            .push_buffer_at(out, p.offset_c * out_size)?;
        for v in [
            p.m,
            p.k,
            p.batch,
            p.a.ld,
            p.a.batch_stride,
            p.b.ld,
            p.b.batch_stride,
            p.ldc,
            p.stride_c,
        ] {
            args.push(u64_of(v));
        }
        args.push(self.rows as u32)
            .push(self.group)
            .push(u32::from(self.packed))
            .push(u32::from(out_f32));
        let groups = p.m * p.batch;
        let groups_per_block = (BLOCK / self.group) as usize;
        let config = LaunchConfig {
            grid: [groups.div_ceil(groups_per_block).min(1 << 20) as u32, 1, 1],
            block: [BLOCK, 1, 1],
            shared_mem_bytes: 0,
        };
        device.launch(&f, config, &mut args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{GemmOperand, MatmulShape};

    fn plan(m: usize, n: usize, k: usize, ld: usize) -> GemmPlan {
        let shape = MatmulShape { batch: 1, m, n, k };
        let lhs = GemmOperand {
            op: Op::None,
            ld: k,
            batch_stride: m * k,
            offset: 0,
        };
        let rhs = GemmOperand {
            op: Op::Transpose,
            ld,
            batch_stride: 0,
            offset: 0,
        };
        GemmPlan::new(shape, lhs, rhs).unwrap()
    }

    #[test]
    fn few_rows_over_many_outputs_take_the_kernel() {
        let of = |p: &GemmPlan, dtype| GemvPlan::of(p, dtype, [0, 0, 0], 32, 132);
        let g = of(&plan(1, 2048, 2048, 2048), DType::BF16).unwrap();
        assert_eq!((g.rows, g.group, g.packed), (1, 32, true));
        // head dim 64 in f16: 8 packs a row, 8 lanes
        let g = of(&plan(4, 4096, 64, 64), DType::F16).unwrap();
        assert_eq!((g.rows, g.group, g.packed), (4, 8, true));
        // a row stride off the 16-byte grid: value by value
        let g = of(&plan(1, 4096, 64, 65), DType::F16).unwrap();
        assert_eq!((g.group, g.packed), (32, false));
        // too many rows, too few outputs, f64: the BLAS
        assert_eq!(of(&plan(9, 4096, 64, 64), DType::F32), None);
        assert_eq!(of(&plan(1, 527, 4096, 4096), DType::F32), None);
        assert_eq!(of(&plan(1, 4096, 64, 64), DType::F64), None);
        // a misaligned address
        let g = GemvPlan::of(&plan(1, 4096, 64, 64), DType::F32, [4, 0, 0], 32, 132).unwrap();
        assert!(!g.packed);
    }
}

//! One-row products on the project's own kernel (`gemv.hip`) instead of the BLAS: the lhs row
//! and the rhs columns both contiguous along k (a linear layer's `x . w^T` at batch 1,
//! attention scores `q . k^T` over a cache, a matrix a batch entry). On an H100 it reads a
//! 2048 x 2048 bf16 weight at 37% of the copy bandwidth where cuBLAS reaches 32%, and the
//! attention scores' many small matrices in one launch; from two rows on, the BLAS's tensor
//! cores are faster (bench/results/2026-11-26-h100-gemv.md), so those stay with it.

use rocm_device::kernels;
use rocm_device::{Buffer, DType, Device, LaunchArgs, LaunchConfig, Result};

use crate::plan::{GemmPlan, Op};

/// Threads a block of the gemv kernel.
const BLOCK: u32 = kernels::gemv::BLOCK;
/// Weight rows a device's multiprocessors must have at least this many of, each, before the
/// kernel takes a product: fewer leave the device idle unless k is split far more than a
/// block can, which the BLAS does.
const MIN_ROWS_PER_MULTIPROCESSOR: usize = 4;
/// Warps a multiprocessor should have at work (half of what an H100's holds): rows over few
/// outputs are split over several warps until the device has them.
const WARPS_PER_MULTIPROCESSOR: usize = 32;
/// Blocks a multiprocessor holds at once (2048 threads of 256-thread blocks); the grid is at
/// most this many a multiprocessor and its blocks loop over the rows.
const BLOCKS_PER_MULTIPROCESSOR: usize = 8;

/// One gemv launch: the plan of a product the kernel can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemvPlan {
    /// Lanes a weight row: a power of two, at most a block.
    pub group: u32,
    /// Every row start 16-byte aligned and k a whole number of packs.
    pub packed: bool,
    /// Blocks of the launch.
    pub blocks: u32,
}

impl GemvPlan {
    /// The kernel's plan for `p`, if it takes it: f32/f16/bf16, one lhs row (per batch entry)
    /// read along k, rhs read along k (transposed in the column-major call), enough outputs to
    /// fill the device. `ptrs` are the device addresses of rhs, lhs and the output.
    pub fn of(
        p: &GemmPlan,
        dtype: DType,
        ptrs: [u64; 3],
        warp_size: u32,
        multiprocessors: u32,
    ) -> Option<Self> {
        let mps = multiprocessors as usize;
        let rows = p.m * p.batch;
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
            || p.a.op != Op::Transpose
            || p.b.op != Op::None
            || p.n != 1
            || rows < MIN_ROWS_PER_MULTIPROCESSOR * mps
        {
            return None;
        }
        let pack = 16 / dtype.size_in_bytes();
        let whole = |v: usize| v % pack == 0;
        let packed = whole(p.k)
            && [
                p.a.offset,
                p.a.ld,
                p.a.batch_stride,
                p.b.offset,
                p.b.batch_stride,
            ]
            .into_iter()
            .all(whole)
            && ptrs[..2].iter().all(|ptr| ptr % 16 == 0);
        let per_row = if packed { p.k.div_ceil(pack) } else { p.k };
        let warp = warp_size as usize;
        let group = if per_row <= warp {
            // short rows: the fewest lanes that give each a value or pack, several rows a warp
            per_row.next_power_of_two()
        } else {
            // long rows: whole warps, split further where the rows alone give the device too
            // few warps, each lane keeping at least an unrolled round of packs
            let wanted = (WARPS_PER_MULTIPROCESSOR * mps).div_ceil(rows);
            let most = (BLOCK as usize / warp)
                .min(per_row.div_ceil(warp * kernels::gemv::UNROLL as usize))
                .max(1)
                .next_power_of_two();
            warp * wanted.next_power_of_two().clamp(1, most)
        };
        let rows_per_block = BLOCK as usize / group;
        let blocks = rows
            .div_ceil(rows_per_block)
            .min(BLOCKS_PER_MULTIPROCESSOR * mps);
        Some(GemvPlan {
            group: group as u32,
            packed,
            blocks: blocks as u32,
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
        let f = device.kernel(&kernels::GEMV, "gemv", dtype.as_str())?;
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
            p.b.batch_stride,
            p.stride_c,
        ] {
            args.push(v as u64);
        }
        args.push(self.group)
            .push(u32::from(self.packed))
            .push(u32::from(out_f32));
        let config = LaunchConfig {
            grid: [self.blocks, 1, 1],
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
    fn one_row_over_many_outputs_takes_the_kernel() {
        let of = |p: &GemmPlan, dtype| GemvPlan::of(p, dtype, [0, 0, 0], 32, 132);
        // a 16384 x 2048 bf16 weight: a warp a row, the grid what the device holds
        let g = of(&plan(1, 16384, 2048, 2048), DType::BF16).unwrap();
        assert_eq!((g.group, g.packed, g.blocks), (32, true, 8 * 132));
        // 2048 rows of 8192: four warps a row (4224 warps wanted of 2048 rows)
        let g = of(&plan(1, 2048, 8192, 8192), DType::BF16).unwrap();
        assert_eq!((g.group, g.blocks), (128, 1024));
        // 2048 rows of 2048: split only as far as an unrolled round a lane
        assert_eq!(
            of(&plan(1, 2048, 2048, 2048), DType::BF16).unwrap().group,
            64
        );
        // head dim 64 in f16: 8 packs a row, 8 lanes, 32 rows a block
        let g = of(&plan(1, 4096, 64, 64), DType::F16).unwrap();
        assert_eq!((g.group, g.packed, g.blocks), (8, true, 128));
        // a row stride off the 16-byte grid: value by value
        let g = of(&plan(1, 4096, 64, 65), DType::F16).unwrap();
        assert_eq!((g.group, g.packed), (32, false));
        // two rows, too few outputs, f64: the BLAS
        assert_eq!(of(&plan(2, 4096, 64, 64), DType::F32), None);
        assert_eq!(of(&plan(1, 527, 4096, 4096), DType::F32), None);
        assert_eq!(of(&plan(1, 4096, 64, 64), DType::F64), None);
        // a misaligned address
        let g = GemvPlan::of(&plan(1, 4096, 64, 64), DType::F32, [4, 0, 0], 32, 132).unwrap();
        assert!(!g.packed);
    }
}

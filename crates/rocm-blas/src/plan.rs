//! How a row-major batched matmul with Candle-style layouts maps onto one column-major
//! strided-batched gemm call (pure logic, shared by rocBLAS and cuBLAS).
//!
//! C (m x n, row-major) = A (m x k) . B (k x n) is, read column-major, C^T = B^T . A^T: the
//! call multiplies rhs by lhs with m and n swapped. A row-major operand is "no transpose" in
//! that call, a transposed view (unit stride on its rows) is "transpose"; neither needs a copy.

use rocm_device::{Error, Layout, Result};

/// Transpose flag of one operand in the column-major call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    None,
    Transpose,
}

/// One operand as the gemm call sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmOperand {
    pub op: Op,
    /// Leading dimension, in elements.
    pub ld: usize,
    /// Elements between consecutive batch entries (0: one matrix broadcast over the batch).
    pub batch_stride: usize,
    /// Element offset of the first matrix.
    pub offset: usize,
}

/// The column-major call: `C[b] = op(A[b]) . op(B[b])` with A = rhs, B = lhs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmPlan {
    /// Rows of the column-major result (= n).
    pub m: usize,
    /// Columns of the column-major result (= m).
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    /// The rhs operand.
    pub a: GemmOperand,
    /// The lhs operand.
    pub b: GemmOperand,
    /// Element offset, leading dimension and batch stride of the (batch, m, n) output.
    pub offset_c: usize,
    pub ldc: usize,
    pub stride_c: usize,
}

/// Where a (batch, m, n) result goes: row-major rows `ld` elements apart, matrices
/// `batch_stride` apart, the first at `offset` (a slice of a larger tensor, such as one
/// group's channels of a convolution output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLayout {
    pub offset: usize,
    pub ld: usize,
    pub batch_stride: usize,
}

impl OutputLayout {
    /// A fresh contiguous (batch, m, n) tensor.
    pub fn contiguous(shape: MatmulShape) -> Self {
        OutputLayout {
            offset: 0,
            ld: shape.n.max(1),
            batch_stride: shape.m * shape.n,
        }
    }

    /// Elements a buffer needs to hold this output; errors on rows or matrices that overlap.
    pub fn required_len(&self, shape: MatmulShape) -> Result<usize> {
        let MatmulShape { batch, m, n, .. } = shape;
        if batch * m * n == 0 {
            return Ok(self.offset);
        }
        let matrix = (m - 1) * self.ld + n;
        if (m > 1 && self.ld < n) || (batch > 1 && self.batch_stride < matrix) {
            return Err(Error::InvalidLayout(format!(
                "matmul output {self:?} overlaps itself for {shape:?}"
            )));
        }
        Ok(self.offset + (batch - 1) * self.batch_stride + matrix)
    }
}

/// The matmul shape Candle passes: (batch, m, n, k).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulShape {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

/// Checks a layout against (batch..., rows, cols).
pub fn check_operand(name: &str, l: &Layout, batch: usize, rows: usize, cols: usize) -> Result<()> {
    let nd = l.dims.len();
    let ok = nd >= 2
        && l.dims[nd - 2] == rows
        && l.dims[nd - 1] == cols
        && l.dims[..nd - 2].iter().product::<usize>() == batch;
    if ok {
        Ok(())
    } else {
        Err(Error::ShapeMismatch {
            op: "matmul",
            detail: format!(
                "{name} has dims {:?}, expected (batch {batch}, {rows}, {cols})",
                l.dims
            ),
        })
    }
}

/// The single stride that walks every batch dim of `l`, if there is one.
fn batch_stride(l: &Layout, rows: usize, cols: usize) -> Option<usize> {
    let nd = l.dims.len();
    let dims: Vec<(usize, usize)> = l.dims[..nd - 2]
        .iter()
        .zip(&l.strides[..nd - 2])
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .collect();
    let Some(&(_, last)) = dims.last() else {
        return Some(rows * cols);
    };
    if dims.iter().all(|&(_, s)| s == 0) {
        return Some(0);
    }
    // Consecutive batch dims must chain: stride[i] = stride[i + 1] * dim[i + 1].
    dims.windows(2)
        .all(|w| w[0].1 == w[1].1 * w[1].0)
        .then_some(last)
}

/// How an operand of `rows x cols` per batch entry enters the call, or None when no gemm
/// call can read it (it must be made contiguous first).
pub fn operand(l: &Layout, rows: usize, cols: usize) -> Option<GemmOperand> {
    let nd = l.dims.len();
    let (sr, sc) = (l.strides[nd - 2], l.strides[nd - 1]);
    let batch_stride = batch_stride(l, rows, cols)?;
    // Row-major: unit stride along a row; a size-1 axis may have any stride.
    if (sc == 1 || cols <= 1) && (rows <= 1 || sr >= cols.max(1)) {
        let ld = if rows <= 1 { cols.max(1) } else { sr };
        return Some(GemmOperand {
            op: Op::None,
            ld,
            batch_stride,
            offset: l.start,
        });
    }
    if (sr == 1 || rows <= 1) && (cols <= 1 || sc >= rows.max(1)) {
        let ld = if cols <= 1 { rows.max(1) } else { sc };
        return Some(GemmOperand {
            op: Op::Transpose,
            ld,
            batch_stride,
            offset: l.start,
        });
    }
    None
}

impl GemmPlan {
    /// The call for lhs (batch, m, k) and rhs (batch, k, n) already reduced to operands,
    /// writing a contiguous output.
    pub fn new(shape: MatmulShape, lhs: GemmOperand, rhs: GemmOperand) -> Result<Self> {
        Self::with_output(shape, lhs, rhs, OutputLayout::contiguous(shape))
    }

    /// As [`GemmPlan::new`], writing the output where `out` says.
    pub fn with_output(
        shape: MatmulShape,
        lhs: GemmOperand,
        rhs: GemmOperand,
        out: OutputLayout,
    ) -> Result<Self> {
        let mut plan = GemmPlan {
            m: shape.n,
            n: shape.m,
            k: shape.k,
            batch: shape.batch,
            a: rhs,
            b: lhs,
            offset_c: out.offset,
            ldc: out.ld.max(1),
            stride_c: out.batch_stride,
        };
        // One weight for the whole batch and lhs rows that run on from one batch entry to the
        // next (a decode step: (b, 1, k) x (k, n)): one gemm of batch * m rows instead of b
        // skinny ones, several times faster.
        if shape.batch > 1
            && rhs.batch_stride == 0
            && lhs.op == Op::None
            && lhs.batch_stride == shape.m * lhs.ld
            && out.batch_stride == shape.m * out.ld
        {
            plan.n = shape.batch * shape.m;
            plan.batch = 1;
            plan.stride_c = plan.n * out.ld;
        }
        // The 32-bit arguments of the vendor calls.
        let fits = |v: usize| v <= i32::MAX as usize;
        if ![
            plan.m, plan.n, plan.k, plan.batch, plan.a.ld, plan.b.ld, plan.ldc,
        ]
        .into_iter()
        .all(fits)
        {
            return Err(Error::InvalidLayout(format!(
                "matmul {shape:?}: a size or leading dimension exceeds the 32-bit gemm interface"
            )));
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(
        dims: &[usize],
        strides: &[usize],
        start: usize,
        rows: usize,
        cols: usize,
    ) -> Option<GemmOperand> {
        operand(&Layout::new(dims, strides, start), rows, cols)
    }

    #[test]
    fn row_major_and_transposed_operands_need_no_copy() {
        // (2, 3, 4) contiguous
        let o = op(&[2, 3, 4], &[12, 4, 1], 5, 3, 4).unwrap();
        assert_eq!((o.op, o.ld, o.batch_stride, o.offset), (Op::None, 4, 12, 5));
        // the transpose of a (2, 4, 3) tensor
        let o = op(&[2, 3, 4], &[12, 1, 3], 0, 3, 4).unwrap();
        assert_eq!((o.op, o.ld, o.batch_stride), (Op::Transpose, 3, 12));
        // a narrowed row-major matrix keeps its row stride as ld
        let o = op(&[3, 4], &[10, 1], 2, 3, 4).unwrap();
        assert_eq!((o.op, o.ld), (Op::None, 10));
    }

    #[test]
    fn batch_dims_collapse_or_broadcast() {
        // (2, 3) batch dims that chain
        let o = op(&[2, 3, 4, 5], &[60, 20, 5, 1], 0, 4, 5).unwrap();
        assert_eq!(o.batch_stride, 20);
        // broadcast over the batch
        let o = op(&[2, 3, 4, 5], &[0, 0, 5, 1], 0, 4, 5).unwrap();
        assert_eq!(o.batch_stride, 0);
        // partly broadcast: no single stride
        assert_eq!(op(&[2, 3, 4, 5], &[0, 20, 5, 1], 0, 4, 5), None);
        // size-1 batch dims are ignored
        let o = op(&[1, 3, 1, 4, 5], &[999, 20, 7, 5, 1], 0, 4, 5).unwrap();
        assert_eq!(o.batch_stride, 20);
    }

    #[test]
    fn size_one_axes_take_any_stride() {
        // a (1, k) row vector with a junk row stride
        let o = op(&[1, 7], &[3, 1], 0, 1, 7).unwrap();
        assert_eq!((o.op, o.ld), (Op::None, 7));
        // a (k, 1) column
        let o = op(&[7, 1], &[1, 1], 0, 7, 1).unwrap();
        assert_eq!(o.op, Op::None);
        assert_eq!(o.ld, 1);
        // a column with a large stride: read as a transposed (1, 7) row
        let o = op(&[7, 1], &[9, 9], 0, 7, 1).unwrap();
        assert_eq!((o.op, o.ld), (Op::None, 9));
    }

    #[test]
    fn layouts_no_call_can_read_are_refused() {
        // both strides > 1: a strided slice in both directions
        assert_eq!(op(&[3, 4], &[8, 2], 0, 3, 4), None);
        // overlapping rows (ld smaller than the row length)
        assert_eq!(op(&[3, 4], &[2, 1], 0, 3, 4), None);
    }

    #[test]
    fn the_call_swaps_lhs_and_rhs() {
        let shape = MatmulShape {
            batch: 2,
            m: 3,
            n: 5,
            k: 4,
        };
        let lhs = op(&[2, 3, 4], &[12, 4, 1], 0, 3, 4).unwrap();
        let rhs = op(&[2, 4, 5], &[20, 5, 1], 0, 4, 5).unwrap();
        let p = GemmPlan::new(shape, lhs, rhs).unwrap();
        assert_eq!(
            (p.m, p.n, p.k, p.batch, p.ldc, p.stride_c),
            (5, 3, 4, 2, 5, 15)
        );
        assert_eq!((p.a.ld, p.b.ld), (5, 4));
        let big = MatmulShape {
            batch: 1,
            m: 1 << 31,
            n: 1,
            k: 1,
        };
        assert!(GemmPlan::new(big, lhs, rhs).is_err());
        let l = Layout::contiguous(&[2, 3, 4]);
        assert!(check_operand("lhs", &l, 2, 3, 4).is_ok());
        assert!(check_operand("lhs", &l, 3, 3, 4).is_err());
    }

    #[test]
    fn outputs_may_be_slices_of_a_larger_tensor() {
        let shape = MatmulShape {
            batch: 2,
            m: 3,
            n: 5,
            k: 4,
        };
        // the second group of 3 rows in a (2, 6, 5) tensor
        let out = OutputLayout {
            offset: 15,
            ld: 5,
            batch_stride: 30,
        };
        assert_eq!(out.required_len(shape).unwrap(), 15 + 30 + 15);
        let w = op(&[2, 3, 4], &[0, 4, 1], 0, 3, 4).unwrap();
        let x = op(&[2, 4, 5], &[20, 5, 1], 0, 4, 5).unwrap();
        let p = GemmPlan::with_output(shape, w, x, out).unwrap();
        assert_eq!((p.offset_c, p.ldc, p.stride_c, p.batch), (15, 5, 30, 2));
        // a broadcast weight would fold the batch into rows, which the slice forbids
        let lhs = op(&[2, 3, 4], &[12, 4, 1], 0, 3, 4).unwrap();
        let bcast = op(&[2, 4, 5], &[0, 5, 1], 0, 4, 5).unwrap();
        assert_eq!(
            GemmPlan::with_output(shape, lhs, bcast, out).unwrap().batch,
            2
        );
        assert_eq!(GemmPlan::new(shape, lhs, bcast).unwrap().batch, 1);
        // overlapping rows or matrices are refused
        let rows = OutputLayout { ld: 4, ..out };
        assert!(rows.required_len(shape).is_err());
        let mats = OutputLayout {
            batch_stride: 10,
            ..out
        };
        assert!(mats.required_len(shape).is_err());
    }
}

//! rocm-quantized: GGUF (ggml) blocks on the device, for every `GgmlDType` of Candle 0.11.1.
//!
//! The blocks stay in ggml's byte layout in a device buffer ([`QWeights`]); nothing comes back
//! to the host.
//! - [`dequantize`]: the values as f32, f16 or bf16, bit-exact with Candle's CPU dequantize
//!   (then its cast, for f16 and bf16).
//! - [`embedding`]: rows of a (rows, k) table picked by u32 ids; only those rows are
//!   dequantized.
//! - [`matmul`]: `x . w^T` for activations x (.., k) of f32, f16 or bf16, as `QMatMul` does:
//!   for 1 to 8 rows (decode) a mat-vec kernel reads the blocks in place (f32 accumulation),
//!   for more rows the weights are dequantized to x's dtype and one gemm runs (rocm-blas).

#![cfg_attr(test, allow(clippy::unwrap_used))]

use rocm_blas::{Blas, MatmulShape};
use rocm_device::{kernels, Contiguous, LaunchArgs, LaunchConfig};
pub use rocm_device::{Buffer, DType, Device, Error, Layout, Operand, Result};

/// Candle's `GgmlDType`: the block types of GGUF files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
}

impl GgmlType {
    pub const ALL: [GgmlType; 15] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Q8K,
    ];

    /// The kernels' key (`q4_0`, `q4k`, ...), one of `rocm_kernels::GGML_TYPES`.
    pub const fn key(self) -> &'static str {
        match self {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::BF16 => "bf16",
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q8_1 => "q8_1",
            GgmlType::Q2K => "q2k",
            GgmlType::Q3K => "q3k",
            GgmlType::Q4K => "q4k",
            GgmlType::Q5K => "q5k",
            GgmlType::Q6K => "q6k",
            GgmlType::Q8K => "q8k",
        }
    }

    /// Values per block.
    pub const fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1 => 32,
            _ => 256,
        }
    }

    /// Bytes per block (ggml's layout).
    pub const fn type_size(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q8_1 => 36,
            GgmlType::Q2K => 84,
            GgmlType::Q3K => 110,
            GgmlType::Q4K => 144,
            GgmlType::Q5K => 176,
            GgmlType::Q6K => 210,
            GgmlType::Q8K => 292,
        }
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

/// A (rows, k) matrix of `ty` blocks in `buffer`, row after row (a row is k / block_size
/// blocks).
#[derive(Debug, Clone, Copy)]
pub struct QWeights<'a> {
    pub buffer: &'a Buffer,
    pub ty: GgmlType,
    pub rows: usize,
    pub k: usize,
}

impl QWeights<'_> {
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.k / self.ty.block_size() * self.ty.type_size()
    }

    /// `k` is a whole number of blocks and the buffer holds every row, or a typed error naming
    /// `op`, the type and the shape.
    pub fn check(&self, op: &'static str) -> Result<()> {
        if self.k % self.ty.block_size() != 0 {
            return Err(Error::ShapeMismatch {
                op,
                detail: format!(
                    "{} rows of {} {} values: {} is not a multiple of the block size {}",
                    self.rows,
                    self.k,
                    self.ty,
                    self.k,
                    self.ty.block_size()
                ),
            });
        }
        let need = self
            .rows
            .checked_mul(self.row_bytes())
            .ok_or_else(|| Error::SizeMismatch {
                op,
                detail: format!(
                    "{} rows of {} {} values overflow",
                    self.rows, self.k, self.ty
                ),
            })?;
        if need > self.buffer.len() {
            return Err(Error::SizeMismatch {
                op,
                detail: format!(
                    "({}, {}) {} needs {need} bytes, the buffer holds {}",
                    self.rows,
                    self.k,
                    self.ty,
                    self.buffer.len()
                ),
            });
        }
        Ok(())
    }
}

/// The output dtypes of dequantize and embedding.
fn out_key(op: &'static str, dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::F16 => Ok("f16"),
        DType::BF16 => Ok("bf16"),
        _ => Err(Error::UnsupportedDType { op, dtype }),
    }
}

/// The kernel `<op>_<out>` of the quantized module for `ty`.
fn kernel_op(op: &'static str, out: DType) -> Result<&'static str> {
    kernels::QUANTIZED
        .op_named(&[op, out_key(op, out)?])
        .ok_or(Error::UnsupportedDType { op, dtype: out })
}

/// Every value of `w` as a new contiguous (rows, k) buffer of `out` (f32, f16 or bf16).
pub fn dequantize(device: &Device, w: QWeights<'_>, out: DType) -> Result<Buffer> {
    const OP: &str = "dequantize";
    w.check(OP)?;
    let kernel = kernel_op(OP, out)?;
    let n = w.rows * w.k;
    let y = device.alloc(n * out.size_in_bytes())?;
    if n == 0 {
        return Ok(y);
    }
    let _span = tracing::debug_span!("op", op = OP, ty = %w.ty, %out, n).entered();
    let mut args = LaunchArgs::new();
    args.push_buffer(w.buffer).push_buffer(&y).push(n as u64);
    device.launch_elements(
        (&kernels::QUANTIZED, kernel, w.ty.key()),
        n as u64,
        &mut args,
    )?;
    Ok(y)
}

/// The rows `ids` (u32, contiguous, any dims) of the (rows, k) table `w` as a new contiguous
/// (ids, k) buffer of `out`. An id past the table gives a zero row, or with `check_ids`
/// `Error::IndexOutOfRange` (one sync).
pub fn embedding(
    device: &Device,
    w: QWeights<'_>,
    ids: Operand<'_>,
    (out, check_ids): (DType, bool),
) -> Result<Buffer> {
    const OP: &str = "embedding";
    w.check(OP)?;
    if ids.dtype != DType::U32 {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: ids.dtype,
        });
    }
    let ids_data = ids.contiguous(OP)?;
    let kernel = kernel_op(OP, out)?;
    let n_ids = ids.elem_count();
    let y = device.alloc(n_ids * w.k * out.size_in_bytes())?;
    if n_ids * w.k == 0 {
        return Ok(y);
    }
    let bad = if check_ids {
        Some(device.alloc_zeroed(4)?)
    } else {
        None
    };
    let mut args = LaunchArgs::new();
    args.push_buffer(w.buffer);
    ids_data.push(&mut args)?;
    args.push_buffer(&y)
        .push(n_ids as u64)
        .push(w.rows as u64)
        .push(w.k as u64);
    match &bad {
        Some(b) => args.push_buffer(b),
        None => args.push(0u64),
    };
    let n = (n_ids * w.k) as u64;
    device.launch_elements((&kernels::QUANTIZED, kernel, w.ty.key()), n, &mut args)?;
    if let Some(b) = bad {
        let mut count = [0u8; 4];
        device.copy_dtoh(&b, 0, &mut count)?;
        let count = u32::from_le_bytes(count);
        if count > 0 {
            // The error path only: the ids come back to name the first bad one.
            let mut raw = vec![0u8; n_ids * 4];
            device.copy_dtoh(ids_data.buffer(), ids_data.start() * 4, &mut raw)?;
            let index = raw
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .find(|&id| id as usize >= w.rows)
                .map_or(-1, i64::from);
            return Err(Error::IndexOutOfRange {
                op: OP,
                index,
                size: w.rows,
                count: u64::from(count),
            });
        }
    }
    Ok(y)
}

/// `x . w^T`: x is (.., k) of f32, f16 or bf16, w is (n, k); the result is a new contiguous
/// (.., n) buffer of x's dtype. Up to 8 rows of x: the mat-vec kernel; more: the weights are
/// dequantized to x's dtype on the device, then one gemm runs.
pub fn matmul(blas: &Blas, w: QWeights<'_>, x: Operand<'_>) -> Result<Buffer> {
    const OP: &str = "quantized matmul";
    w.check(OP)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(Error::UnsupportedDType { op: OP, dtype });
    }
    let Some(&k) = x.layout.dims.last() else {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: "the input is a scalar".into(),
        });
    };
    if k != w.k {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "input dims {:?} against ({}, {}) {} weights",
                x.layout.dims, w.rows, w.k, w.ty
            ),
        });
    }
    let m = x.elem_count().checked_div(k).unwrap_or(0);
    let device = blas.device();
    let xc = x.contiguous(OP)?;
    if (1..=MATVEC_MAX_ROWS).contains(&m) {
        return matvec(device, w, (&xc, dtype), m);
    }
    let wd = dequantize(device, w, dtype)?;
    let n = w.rows;
    let x_l = Layout::contiguous_at(&[1, m, k], xc.start());
    // w^T as a (k, n) view of the (n, k) rows.
    let w_l = Layout::new(&[1, k, n], &[n * k, 1, k], 0);
    blas.matmul(
        Operand::new(xc.buffer(), dtype, &x_l),
        Operand::new(&wd, dtype, &w_l),
        MatmulShape { batch: 1, m, n, k },
    )
}

/// Most activation rows the mat-vec kernel takes (MATVEC_MAX_ROWS in quantized.hip); more
/// rows go through a dequantize and the BLAS.
pub const MATVEC_MAX_ROWS: usize = 8;

/// `m` (1 to 8) contiguous rows of activations times the weights read in place: one warp per
/// weight row.
fn matvec(
    device: &Device,
    w: QWeights<'_>,
    (x, dtype): (&Contiguous<'_>, DType),
    m: usize,
) -> Result<Buffer> {
    const OP: &str = "quantized matvec";
    let kernel = kernel_op("matvec", dtype)?;
    let n = w.rows;
    let y = device.alloc(m * n * dtype.size_in_bytes())?;
    if n == 0 || w.k == 0 {
        if w.k == 0 {
            device.memset(&y, 0, y.len(), 0)?;
        }
        return Ok(y);
    }
    let _span = tracing::debug_span!("op", op = OP, ty = %w.ty, %dtype, m, n, k = w.k).entered();
    let f = device.kernel(&kernels::QUANTIZED, kernel, w.ty.key())?;
    let block = 256u32;
    let rows_per_block = u64::from(block / device.info().warp_size.max(1));
    let cap = u64::from(device.info().multiprocessor_count.max(1)) * 16;
    let config = LaunchConfig {
        grid: [
            (n as u64).div_ceil(rows_per_block).clamp(1, cap) as u32,
            1,
            1,
        ],
        block: [block, 1, 1],
        shared_mem_bytes: 0,
    };
    let mut args = LaunchArgs::new();
    args.push_buffer(w.buffer);
    x.push(&mut args)?;
    args.push_buffer(&y)
        .push(n as u64)
        .push(w.k as u64)
        .push(m as u32);
    device.launch(&f, config, &mut args)?;
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_its_kernels_in_the_table() {
        for ty in GgmlType::ALL {
            assert!(kernels::GGML_TYPES.contains(&ty.key()), "{ty}");
            for op in ["dequantize", "embedding", "matvec"] {
                for out in [DType::F32, DType::F16, DType::BF16] {
                    let kernel = kernel_op(op, out).unwrap();
                    assert!(kernels::QUANTIZED.entry_point(kernel, ty.key()).is_some());
                }
            }
        }
        assert_eq!(GgmlType::ALL.len(), kernels::GGML_TYPES.len());
        assert!(kernel_op("dequantize", DType::U8).is_err());
    }

    #[test]
    fn block_sizes_are_ggmls() {
        // bytes per value, as the GGUF files store them
        assert_eq!(
            GgmlType::Q4_0.type_size() * 8 / GgmlType::Q4_0.block_size(),
            4
        );
        assert_eq!(GgmlType::Q4K.type_size(), 2 + 2 + 12 + 128);
        assert_eq!(GgmlType::Q6K.type_size(), 128 + 64 + 16 + 2);
        assert_eq!(GgmlType::Q8K.type_size(), 4 + 256 + 32);
        assert!(GgmlType::ALL.iter().all(|t| t.type_size() % 2 == 0));
    }
}

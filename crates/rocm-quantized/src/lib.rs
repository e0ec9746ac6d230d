//! rocm-quantized: GGUF (ggml) blocks on the device, for every `GgmlDType` of Candle 0.11.1.
//!
//! On the device the blocks are held in a layout of their own ([`layout`]: every block's packed
//! values first, 16-byte aligned, then the blocks' scales and other fields), made from ggml's
//! bytes on the way in ([`upload`]) and turned back into them bit for bit on the way out
//! ([`download`]); nothing else comes back to the host.
//! - [`dequantize`]: the values as f32, f16 or bf16, bit-exact with Candle's CPU dequantize
//!   (then its cast, for f16 and bf16).
//! - [`embedding`]: rows of a (rows, k) table picked by u32 ids; only those rows are
//!   dequantized.
//! - [`matmul`]: `x . w^T` for activations x (.., k) of f32, f16 or bf16, as `QMatMul` does:
//!   for few rows (decode, short prompts) x is quantized to q8 as Candle's CPU quantizes it
//!   and a kernel reads the blocks in place with integer dot products (dp4a / dot4); for more
//!   rows the weights are dequantized to 16-bit floats a slice of rows at a time and gemms on
//!   the matrix units run (rocm-blas).
//! - [`moe_matvec`]: Candle's `indexed_moe_forward` (one expert matrix per token and slot; a
//!   prompt's pairs grouped by expert).

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod layout;

pub use layout::{device_layout_range, download, to_device_layout, to_ggml_layout, upload};
use rocm_blas::{Blas, MatmulShape, OutputLayout};
pub use rocm_device::{Buffer, DType, Device, Error, Layout, Operand, Result};
use rocm_device::{Contiguous, LaunchConfig};
use rocm_elementwise::OperandCopy;
use rocm_kernels::{self as kernels, quantized, Entry, Family, KernelParams};

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

    /// A block type (quantized values with per-block scales), not a plain float type.
    pub const fn is_block(self) -> bool {
        !matches!(self, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
    }

    /// The activation form the integer dot products pair with this block type: Candle's CPU
    /// `VecDotType` (None for the float types).
    pub const fn q8_scheme(self) -> Option<Q8Scheme> {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => None,
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => Some(Q8Scheme::Q8_0),
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 => Some(Q8Scheme::Q8_1),
            _ => Some(Q8Scheme::Q8K),
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

/// How activations are quantized for the integer dot products, as Candle's CPU quantizes them
/// for each weight type (so the integer sums are the CPU's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Q8Scheme {
    /// Per 32 values d = amax / 127 (kept as f16), bytes round(x / d).
    Q8_0,
    /// Q8_0's bytes and scale; the dot rebuilds the CPU's f16 sum term.
    Q8_1,
    /// Per 256 values d = max / -127 for the value of largest magnitude (f32), bytes
    /// round(x / d) clamped to i8.
    Q8K,
}

impl Q8Scheme {
    /// The kernels' scheme number (Q8_SCHEME_* in quantized.hip).
    const fn code(self) -> u32 {
        match self {
            Q8Scheme::Q8_0 => 0,
            Q8Scheme::Q8_1 => 1,
            Q8Scheme::Q8K => 2,
        }
    }

    /// Values per scale.
    pub const fn block(self) -> usize {
        match self {
            Q8Scheme::Q8K => 256,
            _ => 32,
        }
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

/// A (rows, k) matrix of `ty` blocks in `buffer` in the device layout ([`layout`]), row after
/// row (a row is k / block_size blocks).
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

    /// Blocks in the buffer: where the device layout puts the blocks' other fields depends on
    /// it.
    pub fn buffer_blocks(&self) -> usize {
        self.buffer.len() / self.ty.type_size()
    }

    /// `k` is a whole number of blocks and the buffer holds every row in whole blocks, or a
    /// typed error naming `op`, the type and the shape.
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
        if self.buffer.len() % self.ty.type_size() != 0 {
            return Err(Error::SizeMismatch {
                op,
                detail: format!(
                    "a buffer of {} bytes is not a whole number of {}-byte {} blocks",
                    self.buffer.len(),
                    self.ty.type_size(),
                    self.ty
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

/// The kernel `<family>_<out>` of the quantized module.
fn family_entry<P: KernelParams>(
    op: &'static str,
    family: Family<P>,
    out: DType,
) -> Result<Entry<P>> {
    family
        .entry(&[out_key(op, out)?])
        .ok_or(Error::UnsupportedDType { op, dtype: out })
}

/// Starts compiling, on background threads, the kernel variants matrices of `ty` need: their
/// block type's, and the quantizer of f32 activations (`Device::compile_in_background`).
pub fn compile_in_background(device: &Device, ty: GgmlType) {
    let quantized = &kernels::QUANTIZED;
    device.compile_in_background(&[(quantized, ty.key()), (quantized, DType::F32.as_str())]);
}

/// Every value of `w` as a new contiguous (rows, k) buffer of `out` (f32, f16 or bf16).
pub fn dequantize(device: &Device, w: QWeights<'_>, out: DType) -> Result<Buffer> {
    w.check("dequantize")?;
    dequantize_rows(device, w, 0..w.rows, (out, 0))
}

/// The rows `rows` of a checked `w` as a new contiguous (rows.len(), k) buffer of `out`, its
/// block sized for at least `capacity_rows` rows.
fn dequantize_rows(
    device: &Device,
    w: QWeights<'_>,
    rows: std::ops::Range<usize>,
    (out, capacity_rows): (DType, usize),
) -> Result<Buffer> {
    const OP: &str = "dequantize";
    let entry = family_entry(OP, quantized::DEQUANTIZE, out)?;
    let n = rows.len() * w.k;
    let y = device.alloc(rows.len().max(capacity_rows) * w.k * out.size_in_bytes())?;
    if n == 0 {
        return Ok(y);
    }
    let _span = tracing::debug_span!("op", op = OP, ty = %w.ty, %out, n).entered();
    let params = quantized::DequantizeParams {
        w: w.buffer.ptr(),
        total: w.buffer_blocks() as u64,
        // Rows are whole blocks, so a row range starts on a block.
        first: (rows.start * (w.k / w.ty.block_size())) as u64,
        out: y.ptr(),
        n: n as u64,
    };
    device.launch_entry_elements(entry, w.ty.key(), n as u64, &params)?;
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
    let entry = family_entry(OP, quantized::EMBEDDING, out)?;
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
    let params = quantized::EmbeddingParams {
        t: w.buffer.ptr(),
        total: w.buffer_blocks() as u64,
        ids: ids_data.ptr()?,
        out: y.ptr(),
        n_ids: n_ids as u64,
        rows: w.rows as u64,
        k: w.k as u64,
        bad: bad.as_ref().map(Buffer::ptr),
    };
    let n = (n_ids * w.k) as u64;
    device.launch_entry_elements(entry, w.ty.key(), n, &params)?;
    if let Some(b) = bad {
        check_ids_counter(device, &b, (&ids_data, n_ids), (OP, w.rows))?;
    }
    Ok(y)
}

/// How [`matmul_via`] computes `x . w^T`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulPath {
    /// The integer mat-vec for up to [`INTEGER_MAX_ROWS`] rows of a block type (its warps per
    /// weight row chosen by the number of rows, x quantized in the mat-vec's own launch for one
    /// row), the float mat-vec for up to [`MATVEC_MAX_ROWS`] rows of a float type, else
    /// dequantize + gemm.
    Auto,
    /// Block types: q8 activations and integer dot products, any number of rows (each weight
    /// row read from memory once; the activation rows in groups of 8), `warps_per_row` warps
    /// on each weight row (1, 2, 4 or 8, at most a block's warps; 0 picks: one where x is
    /// quantized in the mat-vec's launch, else by the number of weight rows). With `fused`,
    /// each block quantizes x into its shared memory (one launch) where it fits and no graph is
    /// being captured; else a launch of its own quantizes x once. Float types: the float
    /// mat-vec.
    Integer { warps_per_row: usize, fused: bool },
    /// The weights dequantized to x's dtype on the device, then one gemm.
    DequantizeGemm,
}

/// `x . w^T`: x is (.., k) of f32, f16 or bf16, w is (n, k); the result is a new contiguous
/// (.., n) buffer of x's dtype. Block types with up to [`INTEGER_MAX_ROWS`] rows of x: x is
/// quantized to q8 as Candle's CPU quantizes it for that type and integer dot products run
/// (the CPU's integer sums; f32 accumulation); float types up to 8 rows: the float mat-vec;
/// otherwise the weights are dequantized to x's dtype on the device and one gemm runs.
pub fn matmul(blas: &Blas, w: QWeights<'_>, x: Operand<'_>) -> Result<Buffer> {
    matmul_via(blas, w, x, MatmulPath::Auto)
}

/// Most activation rows of a block type for which [`matmul`] takes the integer kernel. It is
/// Candle's CPU arithmetic (the CPU's q8 activations and integer sums), so up to here results
/// equal the CPU's `QMatMul` to f32 rounding; the bf16 gemm path above it moves a model's
/// logits by more than the CPU's own rounding does (SmolLM2: a 37-token prompt through it gave
/// 24 of 32 greedy tokens equal to the CPU's, through this path 32 of 32). On speed alone the
/// paths cross between 21 and 31 rows (H100, `quantized_bench`, llama shapes, Q4_0/Q4_K/Q8_0:
/// at 32 rows the integer kernel takes 0.85-1.3x the gemm path's time, at 48 about 1.5x), so
/// prompts of 25 to 48 tokens pay that for the CPU's results.
pub const INTEGER_MAX_ROWS: usize = 48;

/// [`matmul`] through a chosen path (for benchmarks and tests).
pub fn matmul_via(
    blas: &Blas,
    w: QWeights<'_>,
    x: Operand<'_>,
    path: MatmulPath,
) -> Result<Buffer> {
    const OP: &str = "quantized matmul";
    w.check(OP)?;
    let (m, k) = activation_rows(OP, &x)?;
    let dtype = x.dtype;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(Error::UnsupportedDType { op: OP, dtype });
    }
    if k != w.k {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "input dims {:?} against ({}, {}) {} weights",
                x.layout.dims, w.rows, w.k, w.ty
            ),
        });
    }
    let device = blas.device();
    let xc = x.contiguous(OP)?;
    // Auto: one row (decode) quantizes x in the mat-vec's own launch. With more rows every
    // block quantizing all of x costs more than the launch it saves (H100: 1.4-1.8x the two
    // launches' time at 4 and 8 rows).
    let plan = match path {
        MatmulPath::Auto => {
            let most = if w.ty.is_block() {
                INTEGER_MAX_ROWS
            } else {
                MATVEC_MAX_ROWS
            };
            (1..=most).contains(&m).then_some(MatvecPlan {
                warps_per_row: 0,
                fused: m == 1,
            })
        }
        MatmulPath::Integer {
            warps_per_row,
            fused,
        } => (m > 0 && (w.ty.is_block() || m <= MATVEC_MAX_ROWS)).then_some(MatvecPlan {
            warps_per_row,
            fused,
        }),
        MatmulPath::DequantizeGemm => None,
    };
    if let Some(plan) = plan {
        return matvec(device, w, (&xc, dtype), m, plan);
    }
    dequantize_gemm(blas, w, (&xc, dtype), m)
}

/// Bytes of 16-bit weights [`matmul`] dequantizes at a time: the gemm runs over a slice of
/// weight rows at once, so a large matrix (an output head of 128K rows) never exists in
/// floating point whole.
pub const DEQUANTIZE_SLICE_BYTES: usize = 64 << 20;

/// The dtype in which [`matmul`]'s gemm path multiplies `ty` weights by `x` activations: bf16
/// for f32 activations of a block type (f32's range, rounding finer than the 8-bit activations
/// of the integer path; the gemm accumulates and writes f32), else x's own dtype.
pub fn gemm_dtype(ty: GgmlType, x: DType) -> DType {
    if ty.is_block() && x == DType::F32 {
        DType::BF16
    } else {
        x
    }
}

/// `x . w^T` for many rows: each slice of weight rows is dequantized to the [`gemm_dtype`] and
/// one gemm writes its columns of the output.
fn dequantize_gemm(
    blas: &Blas,
    w: QWeights<'_>,
    (x, dtype): (&Contiguous<'_>, DType),
    m: usize,
) -> Result<Buffer> {
    let device = blas.device();
    let (n, k) = (w.rows, w.k);
    let g = gemm_dtype(w.ty, dtype);
    let y = device.alloc(m * n * dtype.size_in_bytes())?;
    if m * n == 0 {
        return Ok(y);
    }
    let x_l = Layout::contiguous_at(&[1, m, k], x.start());
    // A cast writes a fresh contiguous buffer from element 0.
    let cast_l = Layout::contiguous(&[1, m, k]);
    let x_cast;
    let xg = if dtype == g {
        Operand::new(x.buffer(), dtype, &x_l)
    } else {
        x_cast = rocm_elementwise::cast(device, Operand::new(x.buffer(), dtype, &x_l), g)?;
        Operand::new(&x_cast, g, &cast_l)
    };
    let slice_rows = (DEQUANTIZE_SLICE_BYTES / (k * g.size_in_bytes()).max(1)).max(1);
    // Every slice of a matrix over half a slice takes a whole slice's block (the pool's class
    // of DEQUANTIZE_SLICE_BYTES), so that a model's matrices share one cached block instead of
    // a block of each size (8B llama: 64 MiB in place of 48 + 32 + 64 MiB).
    let capacity_rows = if n * k * g.size_in_bytes() > DEQUANTIZE_SLICE_BYTES / 2 {
        slice_rows
    } else {
        0
    };
    for r0 in (0..n).step_by(slice_rows) {
        let rows = slice_rows.min(n - r0);
        let wd = dequantize_rows(device, w, r0..r0 + rows, (g, capacity_rows))?;
        // w^T as a (k, rows) view of the (rows, k) slice.
        let w_l = Layout::new(&[1, k, rows], &[rows * k, 1, k], 0);
        let shape = MatmulShape {
            batch: 1,
            m,
            n: rows,
            k,
        };
        let columns = OutputLayout {
            offset: r0,
            ld: n,
            batch_stride: m * n,
        };
        blas.matmul_into_as(xg, Operand::new(&wd, g, &w_l), shape, (&y, columns), dtype)?;
    }
    Ok(y)
}

/// (rows, k) of activations x (.., k), or a typed error for a scalar.
fn activation_rows(op: &'static str, x: &Operand<'_>) -> Result<(usize, usize)> {
    let Some(&k) = x.layout.dims.last() else {
        return Err(Error::ShapeMismatch {
            op,
            detail: "the input is a scalar".into(),
        });
    };
    Ok((x.elem_count().checked_div(k).unwrap_or(0), k))
}

/// Rows of activations the mat-vec kernels hold at once (MATVEC_MAX_ROWS in quantized.hip);
/// the float mat-vec takes at most this many, the integer one takes more in groups of it.
pub const MATVEC_MAX_ROWS: usize = 8;

/// Pairs of one expert the grouped mixture of experts dots at once (MOE_GROUP_PAIRS in
/// quantized.hip).
const MOE_GROUP_PAIRS: usize = 8;
/// The most experts its routing sorts on the device (MOE_ROUTE_MAX_EXPERTS); more take the
/// per-pair kernel.
const MOE_ROUTE_MAX_EXPERTS: usize = 4096;
/// Threads of the one block that sorts the pairs by expert, at most (any count sorts them).
const MOE_ROUTE_BLOCK: u32 = 1024;

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

fn quantize_rows(
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

/// Threads a block of the mat-vec kernels.
const MATVEC_BLOCK: u32 = 256;
/// Blocks a multiprocessor of the mat-vec kernels' grids, at most.
const MATVEC_BLOCKS_PER_CU: u64 = 16;
/// Warps the integer mat-vec aims to have in flight per multiprocessor: with fewer weight rows
/// than that, each row gets several warps (one warp a row on 4096 rows fills half an H100's
/// warp slots, and reads at 30-43% of the copy ceiling against 78-83% on 128K rows).
const MATVEC_WARPS_PER_CU: usize = 48;
/// The same for one row of activations, where a warp's sub-blocks are the fewest: more warps a
/// row only add the combining of their sums, so they are used where the rows would not give
/// every multiprocessor a block (H100, x quantized apart, one warp a row against two: Q4_0
/// 4096x14336 49.2% of the copy ceiling against 46.9%, 4096x4096 28.0% against 25.9%, Q4_K
/// 47.1% against 45.2%; four and eight warps slower at all but one shape;
/// bench/results/2026-11-26-h100-matvec-warps-sweep.md).
const MATVEC1_WARPS_PER_CU: usize = 8;
/// Blocks of the fused mat-vec a multiprocessor runs at once (its registers allow 5-6 of 256
/// threads on an H100, 4 kept as the safe side): a fused grid of at most this many a
/// multiprocessor is one wave.
const FUSED_WAVE_BLOCKS_PER_CU: usize = 4;
/// Widest x a fused mat-vec quantizes in each block: past it, quantizing once apart costs
/// less (H100, Q4_0, 4096 rows, one row of x: k = 4096 fused 10.8 us against 8.9 + 4.1 apart,
/// k = 14336 fused 26.7 against 20.2 + 4.7; bench/results/2026-11-26-h100-quantized-llama-step.md).
const FUSED_MAX_K: usize = 8192;
/// Most warps on one weight row.
pub const MATVEC_MAX_WARPS_PER_ROW: usize = 8;

/// Launch shape of the mat-vec kernels: `warps_per_row` warps on each weight row, 256 threads a
/// block, at most 16 blocks per multiprocessor (`pairs` blocks along y).
fn matvec_config(device: &Device, n: usize, warps_per_row: usize, pairs: u32) -> LaunchConfig {
    let warps = u64::from(MATVEC_BLOCK / device.info().warp_size.max(1)).max(1);
    let rows_per_block = (warps / warps_per_row.max(1) as u64).max(1);
    let cap = u64::from(device.info().multiprocessor_count.max(1)) * MATVEC_BLOCKS_PER_CU;
    LaunchConfig {
        grid: [
            (n as u64).div_ceil(rows_per_block).clamp(1, cap) as u32,
            pairs,
            1,
        ],
        block: [MATVEC_BLOCK, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// Whether the fused mat-vec's grid over `n` weight rows (one warp a row) is at most one wave
/// of blocks ([`FUSED_WAVE_BLOCKS_PER_CU`] a multiprocessor): then every block quantizing x
/// costs about one quantization's time, less than a launch of its own.
fn fused_grid_is_one_wave(device: &Device, n: usize) -> bool {
    let rows_per_block = (MATVEC_BLOCK / device.info().warp_size.max(1)).max(1) as usize;
    let wave = device.info().multiprocessor_count.max(1) as usize * FUSED_WAVE_BLOCKS_PER_CU;
    n.div_ceil(rows_per_block) <= wave
}

/// How the integer mat-vec spreads its work (see [`MatmulPath::Integer`]).
#[derive(Debug, Clone, Copy)]
struct MatvecPlan {
    warps_per_row: usize,
    fused: bool,
}

/// Warps per weight row for `n` rows: the fewest (a power of two, at most
/// [`MATVEC_MAX_WARPS_PER_ROW`] and a block's warps) that give the device
/// [`MATVEC_WARPS_PER_CU`] warps a multiprocessor ([`MATVEC1_WARPS_PER_CU`] for `m` = 1 row
/// of activations).
fn matvec_warps_per_row(device: &Device, n: usize, m: usize) -> usize {
    let info = device.info();
    let block_warps = (MATVEC_BLOCK / info.warp_size.max(1)).max(1) as usize;
    let per_cu = if m == 1 {
        MATVEC1_WARPS_PER_CU
    } else {
        MATVEC_WARPS_PER_CU
    };
    let target = info.multiprocessor_count.max(1) as usize * per_cu;
    let mut wpr = 1;
    while wpr * n.max(1) < target && wpr * 2 <= MATVEC_MAX_WARPS_PER_ROW.min(block_warps) {
        wpr *= 2;
    }
    wpr
}

/// `m` contiguous rows of activations (at most 8 for float types) times the weights read in
/// place: `warps_per_row` warps per weight row (0: one where x is quantized in this launch,
/// else by the rows, see [`matvec_warps_per_row`]);
/// block types through q8 activations and integer dot products, x quantized in the mat-vec's
/// own launch with `fused` (where it fits and no graph is being captured).
fn matvec(
    device: &Device,
    w: QWeights<'_>,
    (x, dtype): (&Contiguous<'_>, DType),
    m: usize,
    plan: MatvecPlan,
) -> Result<Buffer> {
    const OP: &str = "quantized matvec";
    let n = w.rows;
    // x is quantized once, by a launch of its own, unless the fused grid (one warp a row) is
    // at most one wave of blocks, whose quantizations then run side by side in less time than
    // a launch (H100, Q4_0 4096x4096, 512 blocks: 10.2 us fused against 13.0 apart; 14336x4096,
    // 1792 blocks: 26.5 against 22.0; bench/results/2026-11-25-h100-matvec-final.md). Eager
    // decode of an 8B model is bound by the device too, so the launch saved on the large
    // matrices is worth less than the device time (quantized_llama's step under ncu:
    // bench/results/2026-11-26-h100-quantized-llama-step.md).
    let fused = plan.fused
        && w.ty.is_block()
        && q8_bytes(m, w.k) <= fused_shared_limit(device)
        && w.k <= FUSED_MAX_K
        && fused_grid_is_one_wave(device, n);
    let block_warps = (MATVEC_BLOCK / device.info().warp_size.max(1)).max(1) as usize;
    let wpr = match plan.warps_per_row {
        // Where every block quantizes x, more warps a row make more blocks and so more
        // quantizations: one warp a row (H100, Q4_0 4096x4096, one row: 935 GB/s with one warp
        // a row against 676 with two; bench/results/2026-11-25-h100-matvec-warps-per-row.md).
        0 if fused => 1,
        0 => matvec_warps_per_row(device, n, m),
        r if r.is_power_of_two() && r <= MATVEC_MAX_WARPS_PER_ROW.min(block_warps) => r,
        r => {
            return Err(Error::ShapeMismatch {
                op: OP,
                detail: format!(
                    "{r} warps a weight row: the mat-vec takes 1, 2, 4 or 8, at most the {block_warps} warps of a block"
                ),
            })
        }
    };
    // the float mat-vec takes one warp a row
    let wpr = if w.ty.is_block() { wpr } else { 1 };
    if n == 0 || w.k == 0 {
        let y = device.alloc(m * n * dtype.size_in_bytes())?;
        if w.k == 0 {
            device.memset(&y, 0, y.len(), 0)?;
        }
        return Ok(y);
    }
    if let (Some(scheme), false) = (w.ty.q8_scheme(), fused) {
        let xq = quantize_rows(device, (x, dtype), (m, w.k), scheme)?;
        return launch_matvec_q8(device, w, &xq, m, dtype, wpr);
    }
    let y = device.alloc(m * n * dtype.size_in_bytes())?;
    let _span =
        tracing::debug_span!("op", op = OP, ty = %w.ty, %dtype, m, n, k = w.k, wpr).entered();
    let mut config = matvec_config(device, n, wpr, 1);
    if fused {
        config.shared_mem_bytes = q8_bytes(m, w.k) as u32;
    }
    let (total, x, out) = (w.buffer_blocks() as u64, x.ptr()?, y.ptr());
    let key = w.ty.key();
    if w.ty.is_block() {
        // block types here are fused (the others returned above)
        let family = if m == 1 {
            quantized::MATVEC1_Q8F
        } else {
            quantized::MATVEC_Q8F
        };
        let params = quantized::MatvecQ8fParams {
            w: w.buffer.ptr(),
            total,
            x,
            y: out,
            n: n as u64,
            k: w.k as u64,
            rows: m as u32,
            wpr: wpr as u32,
        };
        let entry = family_entry(OP, family, dtype)?;
        device.launch_entry(entry, key, config, &params)?;
    } else {
        // the float mat-vec: one warp a row
        let params = quantized::MatvecParams {
            w: w.buffer.ptr(),
            total,
            x,
            y: out,
            n: n as u64,
            k: w.k as u64,
            rows: m as u32,
        };
        let entry = family_entry(OP, quantized::MATVEC, dtype)?;
        device.launch_entry(entry, key, config, &params)?;
    }
    Ok(y)
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

/// candle-nn's `rms_norm` of x (.., k) with `alpha` (k) written straight in q8 form for the
/// integer mat-vec of weights whose activations are `scheme`, without the float result: one
/// launch in place of the norm and the quantization. With a residual r (x's dims), x + r is
/// normed instead and also returned (the residual stream's next value): the add fused in too.
/// The q8 bytes are those [`quantize_q8`] writes from the float norm rounded to x's dtype (to
/// the rounding of the sum of squares, whose order differs).
pub fn rms_norm_q8(
    device: &Device,
    x: Operand<'_>,
    residual: Option<Operand<'_>>,
    alpha: Operand<'_>,
    eps: f32,
    scheme: Q8Scheme,
) -> Result<(Option<Buffer>, Q8Activations)> {
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
    let out = device.alloc(q8_bytes(m, k))?;
    let q8 = |buffer| Q8Activations {
        buffer,
        rows: m,
        k,
        scheme,
    };
    if m * k == 0 {
        return Ok((sum, q8(out)));
    }
    let params = quantized::RmsNormQ8Params {
        x: xc.ptr()?,
        // without a residual the kernel reads neither r nor sum: x and the output stand in
        r: rc.as_ref().unwrap_or(&xc).ptr()?,
        sum: sum.as_ref().unwrap_or(&out).ptr(),
        alpha: ac.ptr()?,
        out: out.ptr(),
        m: m as u64,
        k: k as u64,
        eps,
        scheme: scheme.code(),
        has_residual: u32::from(rc.is_some()),
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
    Ok((sum, q8(out)))
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

/// `x . w^T` for activations already in q8 form (their scheme the one `w`'s type pairs with,
/// their width `w.k`): a new contiguous (x.rows, n) buffer of `out` (f32, f16 or bf16), the
/// integer mat-vec's result without its quantizing launch.
pub fn matmul_q8(
    device: &Device,
    w: QWeights<'_>,
    x: &Q8Activations,
    out: DType,
) -> Result<Buffer> {
    const OP: &str = "quantized matmul (q8 activations)";
    w.check(OP)?;
    out_key(OP, out)?;
    if w.ty.q8_scheme() != Some(x.scheme) || x.k != w.k || x.buffer.len() < q8_bytes(x.rows, x.k) {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "{} rows of {} {:?} activations ({} bytes) against ({}, {}) {} weights (activations {:?})",
                x.rows,
                x.k,
                x.scheme,
                x.buffer.len(),
                w.rows,
                w.k,
                w.ty,
                w.ty.q8_scheme()
            ),
        });
    }
    let wpr = matvec_warps_per_row(device, w.rows, x.rows);
    launch_matvec_q8(device, w, &x.buffer, x.rows, out, wpr)
}

/// The integer mat-vec of `m` rows of q8 activations `xq` with `wpr` warps a weight row.
fn launch_matvec_q8(
    device: &Device,
    w: QWeights<'_>,
    xq: &Buffer,
    m: usize,
    dtype: DType,
    wpr: usize,
) -> Result<Buffer> {
    let n = w.rows;
    let y = device.alloc(m * n * dtype.size_in_bytes())?;
    if n == 0 || m == 0 {
        return Ok(y);
    }
    let _span =
        tracing::debug_span!("op", op = "matvec_q8", ty = %w.ty, %dtype, m, n, k = w.k, wpr)
            .entered();
    // one activation row: the entry without the other rows' accumulators
    let family = if m == 1 {
        quantized::MATVEC1_Q8
    } else {
        quantized::MATVEC_Q8
    };
    let entry = family_entry("matvec_q8", family, dtype)?;
    let params = quantized::MatvecQ8Params {
        w: w.buffer.ptr(),
        total: w.buffer_blocks() as u64,
        xq: xq.ptr(),
        y: y.ptr(),
        n: n as u64,
        k: w.k as u64,
        rows: m as u32,
        wpr: wpr as u32,
    };
    let config = matvec_config(device, n, wpr, 1);
    device.launch_entry(entry, w.ty.key(), config, &params)?;
    Ok(y)
}

/// Most shared memory the fused mat-vec takes for the q8 form of x: 48 KiB (the most a
/// launch gets on NVIDIA without opting in; AMD's workgroups have 64 KiB), or less where the
/// device has less, less the kernel's static shared memory (its warps' partial sums, 1 KiB, and
/// the wave64 emulation's exchange slots, 4 KiB): one row fits for k up to 35K.
fn fused_shared_limit(device: &Device) -> usize {
    device
        .info()
        .shared_mem_per_block
        .min(48 << 10)
        .saturating_sub(FUSED_STATIC_SHARED_BYTES)
}

/// The fused mat-vec's static shared memory, at most (see [`fused_shared_limit`]).
const FUSED_STATIC_SHARED_BYTES: usize = 5 << 10;

/// `experts` weight matrices of (n, k) one after the other (`weights.rows` = experts * n), as
/// a mixture-of-experts layer stores them.
#[derive(Debug, Clone, Copy)]
pub struct QExperts<'a> {
    pub weights: QWeights<'a>,
    pub experts: usize,
}

/// Candle's `indexed_moe_forward`: for x (tokens, slots, k) with slots = top or 1 and u32 ids
/// (tokens, top) naming an expert per token and slot, y[t, e, :] = experts[ids[t, e]] .
/// x[t, e or 0, :]^T, a new contiguous (tokens, top, n) buffer of x's dtype (f32, f16, bf16).
/// Block types only. One token: a mat-vec per pair (`moe_q8`); more: the pairs sorted by expert
/// on the device (`moe_route`) and a block per chunk of up to 8 pairs of one
/// expert (`moe_grouped_q8`), the same results bit for bit. An id past the experts gives a zero
/// row, or with `check_ids` `Error::IndexOutOfRange` (one sync).
pub fn moe_matvec(
    device: &Device,
    w: QExperts<'_>,
    (x, ids): (Operand<'_>, Operand<'_>),
    check_ids: bool,
) -> Result<Buffer> {
    const OP: &str = "indexed_moe_forward";
    w.weights.check(OP)?;
    let QExperts { weights, experts } = w;
    let dtype = x.dtype;
    if !weights.ty.is_block() {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "{} weights: the experts must be a quantized block type",
                weights.ty
            ),
        });
    }
    if ids.dtype != DType::U32 {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: ids.dtype,
        });
    }
    let (&[tokens, slots, k], &[id_tokens, top]) =
        (x.layout.dims.as_slice(), ids.layout.dims.as_slice())
    else {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "x {:?} must be (tokens, slots, k) and ids {:?} (tokens, top)",
                x.layout.dims, ids.layout.dims
            ),
        });
    };
    let n = weights.rows.checked_div(experts).unwrap_or(0);
    if k != weights.k
        || tokens != id_tokens
        || !(slots == 1 || slots == top)
        || experts == 0
        || n * experts != weights.rows
    {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "x {:?}, ids {:?} against {experts} experts of ({n}, {}) {} ({} rows)",
                x.layout.dims, ids.layout.dims, weights.k, weights.ty, weights.rows
            ),
        });
    }
    let pairs = tokens * top;
    // A token's experts are distinct: one token reads each of its experts once either way, and
    // moe_q8's grid over the pairs alone fills the device; more tokens share experts, whose
    // pairs the grouped kernel takes together (its grid holds a block row per chunk of pairs)
    let chunks = pairs.div_ceil(MOE_GROUP_PAIRS) + experts + 1;
    let grouped = tokens > 1
        && experts <= MOE_ROUTE_MAX_EXPERTS
        && chunks <= rocm_device::MAX_GRID_YZ as usize;
    // the entries exist for every float output (checked before any allocation)
    let moe = family_entry(OP, quantized::MOE_Q8, dtype)?;
    let moe_grouped = family_entry(OP, quantized::MOE_GROUPED_Q8, dtype)?;
    let y = device.alloc(pairs * n * dtype.size_in_bytes())?;
    if pairs * n == 0 {
        return Ok(y);
    }
    if k == 0 {
        device.memset(&y, 0, y.len(), 0)?;
        return Ok(y);
    }
    let _span =
        tracing::debug_span!("op", op = OP, ty = %weights.ty, %dtype, pairs, n, k).entered();
    let xc = x.contiguous(OP)?;
    // block types only (checked above)
    let scheme = weights.ty.q8_scheme().unwrap_or(Q8Scheme::Q8_0);
    let xq = quantize_rows(device, (&xc, dtype), (tokens * slots, k), scheme)?;
    let ids_data = ids.contiguous(OP)?;
    let bad = if check_ids {
        Some(device.alloc_zeroed(4)?)
    } else {
        None
    };
    // the pairs sorted by expert, with where each expert's pairs and chunks start
    let route = if grouped {
        let route = device.alloc((pairs + 2 * (experts + 2)) * 4)?;
        let params = quantized::MoeRouteParams {
            ids: ids_data.ptr()?,
            route: route.ptr(),
            pairs: pairs as u64,
            experts: experts as u64,
        };
        // (the wave64 emulation's blocks hold fewer threads)
        let block = MOE_ROUTE_BLOCK.min(device.info().max_threads_per_block);
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [block, 1, 1],
            shared_mem_bytes: 0,
        };
        device.launch_entry(quantized::MOE_ROUTE, weights.ty.key(), config, &params)?;
        Some(route)
    } else {
        None
    };
    let key = weights.ty.key();
    let (w, total) = (weights.buffer.ptr(), weights.buffer_blocks() as u64);
    let (xq, y_ptr, bad_ptr) = (xq.ptr(), y.ptr(), bad.as_ref().map(Buffer::ptr));
    let (n64, k64, experts64, top64) = (n as u64, k as u64, experts as u64, top as u64);
    match &route {
        Some(route) => {
            let params = quantized::MoeGroupedQ8Params {
                w,
                total,
                xq,
                route: route.ptr(),
                y: y_ptr,
                n: n64,
                k: k64,
                experts: experts64,
                top: top64,
                x_slots: slots as u64,
                pairs: pairs as u64,
                bad: bad_ptr,
            };
            let config = moe_grouped_config(device, n, chunks);
            device.launch_entry(moe_grouped, key, config, &params)?;
        }
        None => {
            let params = quantized::MoeQ8Params {
                w,
                total,
                xq,
                ids: ids_data.ptr()?,
                y: y_ptr,
                n: n64,
                k: k64,
                experts: experts64,
                top: top64,
                x_slots: slots as u64,
                pairs: pairs as u64,
                bad: bad_ptr,
            };
            let config = matvec_config(
                device,
                n,
                1,
                pairs.min(rocm_device::MAX_GRID_YZ as usize) as u32,
            );
            device.launch_entry(moe, key, config, &params)?;
        }
    }
    if let Some(b) = bad {
        check_ids_counter(device, &b, (&ids_data, pairs), (OP, experts))?;
    }
    Ok(y)
}

/// The grouped mixture of experts' grid: a block row per chunk of pairs (`chunks` at most;
/// the rows past the route's last chunk return at once), and as many blocks a row as make
/// about four times the device's [`MATVEC_BLOCKS_PER_CU`] blocks a multiprocessor in all, no
/// more than the rows need.
fn moe_grouped_config(device: &Device, n: usize, chunks: usize) -> LaunchConfig {
    let warps = u64::from(MATVEC_BLOCK / device.info().warp_size.max(1)).max(1);
    let slots = u64::from(device.info().multiprocessor_count.max(1)) * MATVEC_BLOCKS_PER_CU;
    let per_chunk = (4 * slots)
        .div_ceil(chunks.max(1) as u64)
        .clamp(1, (n as u64).div_ceil(warps).max(1));
    LaunchConfig {
        grid: [per_chunk as u32, chunks as u32, 1],
        block: [MATVEC_BLOCK, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// After a kernel that counted out-of-range ids into `bad`: Ok when none were, else
/// `IndexOutOfRange` naming the first bad id of the `n_ids` ids (read back on the error path
/// only).
fn check_ids_counter(
    device: &Device,
    bad: &Buffer,
    (ids, n_ids): (&Contiguous<'_>, usize),
    (op, size): (&'static str, usize),
) -> Result<()> {
    let mut count = [0u8; 4];
    device.copy_dtoh(bad, 0, &mut count)?;
    let count = u32::from_le_bytes(count);
    if count == 0 {
        return Ok(());
    }
    let mut raw = vec![0u8; n_ids * 4];
    device.copy_dtoh(ids.buffer(), ids.start() * 4, &mut raw)?;
    let index = raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .find(|&id| id as usize >= size)
        .map_or(-1, i64::from);
    Err(Error::IndexOutOfRange {
        op,
        index,
        size,
        count: u64::from(count),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_its_kernels_in_the_table() {
        for ty in GgmlType::ALL {
            assert!(kernels::GGML_TYPES.contains(&ty.key()), "{ty}");
            let families: Vec<(&str, Option<&'static str>)> = [DType::F32, DType::F16, DType::BF16]
                .into_iter()
                .flat_map(|out| {
                    let key = [out_key("test", out).unwrap()];
                    let mut ops = vec![
                        (
                            "dequantize",
                            quantized::DEQUANTIZE.entry(&key).map(|e| e.op),
                        ),
                        ("embedding", quantized::EMBEDDING.entry(&key).map(|e| e.op)),
                    ];
                    if ty.is_block() {
                        ops.extend([
                            ("matvec_q8", quantized::MATVEC_Q8.entry(&key).map(|e| e.op)),
                            (
                                "matvec1_q8",
                                quantized::MATVEC1_Q8.entry(&key).map(|e| e.op),
                            ),
                            (
                                "matvec_q8f",
                                quantized::MATVEC_Q8F.entry(&key).map(|e| e.op),
                            ),
                            (
                                "matvec1_q8f",
                                quantized::MATVEC1_Q8F.entry(&key).map(|e| e.op),
                            ),
                            ("moe_q8", quantized::MOE_Q8.entry(&key).map(|e| e.op)),
                            (
                                "moe_grouped_q8",
                                quantized::MOE_GROUPED_Q8.entry(&key).map(|e| e.op),
                            ),
                        ]);
                    } else {
                        ops.push(("matvec", quantized::MATVEC.entry(&key).map(|e| e.op)));
                    }
                    ops
                })
                .collect();
            for (family, op) in families {
                let op = op.unwrap_or_else(|| panic!("no {family} entry"));
                let entry = kernels::QUANTIZED.entry_point(op, ty.key());
                assert!(entry.is_some(), "{op} {ty}");
            }
            // activations are quantized by the kernels keyed by their float dtype
            let q8 = kernels::QUANTIZED.entry_point("quantize_q8", ty.key());
            assert_eq!(q8.is_some(), !ty.is_block(), "{ty}");
        }
        assert_eq!(GgmlType::ALL.len(), kernels::GGML_TYPES.len());
        assert!(family_entry("dequantize", quantized::DEQUANTIZE, DType::U8).is_err());
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

    #[test]
    fn launch_constants_are_the_kernel_sources() {
        let define = |name: &str| {
            kernels::QUANTIZED
                .define(name)
                .unwrap_or_else(|| panic!("quantized.hip defines no {name}")) as usize
        };
        assert_eq!(define("MATVEC_MAX_ROWS"), MATVEC_MAX_ROWS);
        assert_eq!(define("RMS_Q8_MAX_THREADS"), RMS_Q8_MAX_THREADS);
        assert_eq!(define("MOE_GROUP_PAIRS"), MOE_GROUP_PAIRS);
        assert_eq!(define("MOE_ROUTE_MAX_EXPERTS"), MOE_ROUTE_MAX_EXPERTS);
    }
}

//! `x . w^T` with quantized weights: integer mat-vec kernels over q8 activations for few
//! rows, dequantized slices and the BLAS's gemm for more.

use crate::*;

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
    /// Block types on a device with matrix units: x quantized to q8 as for the mat-vec, then
    /// the product on the int8 matrix units (the CPU's integer sums, any number of rows).
    /// `Auto` takes it for [`MMQ_MIN_ROWS`] to [`MMQ_MAX_ROWS`] rows.
    Mmq,
}

/// `x . w^T`: x is (.., k) of f32, f16 or bf16, w is (n, k); the result is a new contiguous
/// (.., n) buffer of x's dtype. Block types with up to [`INTEGER_MAX_ROWS`] rows of x: x is
/// quantized to q8 as Candle's CPU quantizes it for that type and integer dot products run
/// (the CPU's integer sums; f32 accumulation), on the int8 matrix units from [`MMQ_MIN_ROWS`]
/// to [`MMQ_MAX_ROWS`] rows where the device has them ([`auto_path`]); float types up to 8
/// rows: the float mat-vec; otherwise the weights are dequantized to x's dtype on the device
/// and one gemm runs.
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

/// Rows of activations from which [`matmul`] takes the int8 matrix units where they apply
/// (up to [`MMQ_MAX_ROWS`]), the integer mat-vec below (its most rows are 8). H200,
/// `quantized_bench` (8B llama shapes, Q4_0/Q4_K/Q6_K/Q8_0;
/// bench/results/2026-11-28-h200-mmq-staging.md): at 9 rows the int8 product takes 0.63-0.87x
/// the mat-vec's time, at 16 rows 0.40-0.56x.
pub const MMQ_MIN_ROWS: usize = 9;
/// Most rows of activations for which [`matmul`] takes the int8 matrix units: at 64 rows they
/// take 0.38-0.51x dequantize + gemm's time, at 512 rows 1.4-1.9x (same measurement).
pub const MMQ_MAX_ROWS: usize = 64;

/// The path [`matmul`] takes for `m` rows of activations times `ty` weights: the int8 matrix
/// units for [`MMQ_MIN_ROWS`] to [`MMQ_MAX_ROWS`] rows where they apply (the CPU's integer
/// sums, as the mat-vec), else `Auto` (the mat-vec up to [`INTEGER_MAX_ROWS`] rows of a block
/// type or 8 of a float type, dequantize + gemm above).
pub fn auto_path(device: &Device, ty: GgmlType, m: usize) -> MatmulPath {
    if (MMQ_MIN_ROWS..=MMQ_MAX_ROWS).contains(&m) && mmq_applies(device, ty) {
        MatmulPath::Mmq
    } else {
        MatmulPath::Auto
    }
}

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
    let path = match path {
        MatmulPath::Auto => auto_path(device, w.ty, m),
        p => p,
    };
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
        MatmulPath::DequantizeGemm | MatmulPath::Mmq => None,
    };
    let mmq = match path {
        MatmulPath::Mmq => {
            require_mmq(OP, device, w.ty)?;
            true
        }
        _ => false,
    };
    if mmq {
        let scheme =
            w.ty.q8_scheme()
                .ok_or(Error::UnsupportedDType { op: OP, dtype })?;
        let xq = quantize_rows(device, (&xc, dtype), (m, k), scheme)?;
        return launch_mmq(device, w, &xq, m, dtype);
    }
    if let Some(plan) = plan {
        return matvec(device, w, (&xc, dtype), m, plan);
    }
    dequantize_gemm(blas, w, (&xc, dtype), m)
}

/// Pairs an expert the mixture of experts' product has on average, at least, before it takes
/// the int8 matrix units (where they apply) in place of chunks of 8 pairs on integer dot
/// products. A layer's three expert products of Qwen3-30B-A3B (8 of 128 experts; gate, up,
/// down) take, against the chunks of 8: at 8 pairs (128 tokens) 0.63-0.94x their time, at 32
/// 0.23-0.33x, at 4 0.99-1.46x (H200, Q8_0 and Q4_K, quantized_bench's QBENCH_MOE:
/// bench/results/2026-11-28-h200-mmq.md).
pub const MOE_MMQ_MIN_PAIRS_PER_EXPERT: usize = 8;

/// Whether [`moe_matvec`] multiplies `pairs` (token, slot) pairs over `experts` of type `ty`
/// on the int8 matrix units.
pub fn moe_takes_mmq(device: &Device, ty: GgmlType, pairs: usize, experts: usize) -> bool {
    pairs >= MOE_MMQ_MIN_PAIRS_PER_EXPERT * experts && mmq_applies(device, ty)
}

/// Whether the int8 matrix-unit product runs for `ty` weights on `device`: a block type, and
/// matrix units (every NVIDIA GPU the nvidia platform takes; CDNA and RDNA3/4).
pub fn mmq_applies(device: &Device, ty: GgmlType) -> bool {
    ty.is_block() && device.info().matrix_units()
}

/// Ok where [`mmq_applies`], else a typed error naming `op`, the type and the device.
pub(crate) fn require_mmq(op: &'static str, device: &Device, ty: GgmlType) -> Result<()> {
    if mmq_applies(device, ty) {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op,
        detail: format!(
            "the int8 matrix-unit product needs a block type on a device with matrix units ({ty} weights on {})",
            device.info().arch
        ),
    })
}

/// Weight rows and activation rows of one block of the int8 product (MMQ_BM, MMQ_BN and
/// MMQ_WARPS in quantized.hip; a test reads them there).
pub const MMQ_BLOCK_ROWS: usize = 64;
pub const MMQ_BLOCK_COLS: usize = 64;
pub const MMQ_WARPS: u32 = 4;

/// The int8 matrix-unit product of `m` rows of q8 activations `xq` (the scheme `w`'s type
/// pairs with) by `w`: a new contiguous (m, n) buffer of `dtype`.
fn launch_mmq(
    device: &Device,
    w: QWeights<'_>,
    xq: &Buffer,
    m: usize,
    dtype: DType,
) -> Result<Buffer> {
    const OP: &str = "mmq";
    let n = w.rows;
    let y = device.alloc(m * n * dtype.size_in_bytes())?;
    if n == 0 || m == 0 {
        return Ok(y);
    }
    if w.k == 0 {
        device.memset(&y, 0, y.len(), 0)?;
        return Ok(y);
    }
    let _span = tracing::debug_span!("op", op = OP, ty = %w.ty, %dtype, m, n, k = w.k).entered();
    let entry = family_entry(OP, quantized::MMQ, dtype)?;
    let row_tiles = n.div_ceil(MMQ_BLOCK_ROWS);
    let col_tiles = m.div_ceil(MMQ_BLOCK_COLS);
    let block_threads = MMQ_WARPS * device.info().warp_size;
    let per_cu = device.max_active_blocks(entry, w.ty.key(), block_threads, 0)?;
    let (splits, ksplit) = mmq_split(device, per_cu, row_tiles * col_tiles, w.k / 32);
    let ws = if splits > 1 {
        Some(device.alloc(splits * m * n * 4)?)
    } else {
        None
    };
    let params = quantized::MmqParams {
        w: w.buffer.ptr(),
        total: w.buffer_blocks() as u64,
        xq: xq.ptr(),
        y: y.ptr(),
        n: n as u64,
        k: w.k as u64,
        m: m as u64,
        ws: ws.as_ref().map(Buffer::ptr),
        ksplit: ksplit as u64,
    };
    let config = LaunchConfig {
        grid: [
            u32::try_from(row_tiles).map_err(|_| too_large(OP, n, m))?,
            u32::try_from(col_tiles)
                .ok()
                .filter(|&c| c <= 65_535)
                .ok_or_else(|| too_large(OP, n, m))?,
            splits as u32,
        ],
        block: [block_threads, 1, 1],
        shared_mem_bytes: 0,
    };
    device.launch_entry(entry, w.ty.key(), config, &params)?;
    if let Some(ws) = &ws {
        let params = quantized::MmqReduceParams {
            ws: ws.ptr(),
            y: y.ptr(),
            count: (m * n) as u64,
            splits: splits as u32,
        };
        device.launch_entry_elements(
            quantized::MMQ_REDUCE,
            out_key(OP, dtype)?,
            (m * n) as u64,
            &params,
        )?;
    }
    Ok(y)
}

/// Sub-blocks of 32 values a k step of the int8 product takes (MMQ_KSUBS in quantized.hip).
pub const MMQ_KSUBS: usize = 4;
/// The fewest k steps a split of the int8 product takes.
const MMQ_MIN_STEPS_PER_SPLIT: usize = 4;

/// How the int8 product of `tiles` output tiles over `subs` sub-blocks of k splits k, where a
/// multiprocessor holds `per_cu` of its blocks at once (the kernel's registers decide: 4 for
/// the legacy types and Q4_K on the H200, 3 for Q2_K, Q3_K and Q6_K): (splits, sub-blocks a
/// split). Where the tiles alone fill the device, or k is short, one split.
fn mmq_split(device: &Device, per_cu: u32, tiles: usize, subs: usize) -> (usize, usize) {
    let multiprocessors = device.info().multiprocessor_count.max(1) as usize;
    mmq_split_for(multiprocessors * per_cu.max(1) as usize, tiles, subs)
}

/// A split's fixed cost in k steps: its first step's loads, which nothing overlaps, and its
/// partial sums written and added. With it the wave model below picks what was measured
/// fastest on the H200 (bench/results/2026-11-29-h200-mmq-split-waves.md).
const MMQ_SPLIT_FIXED_STEPS: usize = 2;

/// [`mmq_split`] for a device that holds `wave` blocks at once: the split count whose whole
/// waves of blocks times each block's steps is least (a second wave a quarter full costs as
/// much as a full one), the fewer splits among equals.
fn mmq_split_for(wave: usize, tiles: usize, subs: usize) -> (usize, usize) {
    let (steps, tiles, wave) = (subs.div_ceil(MMQ_KSUBS).max(1), tiles.max(1), wave.max(1));
    // a full wave of tiles or more: splits would only add partial sums
    if tiles >= wave {
        return (1, steps * MMQ_KSUBS);
    }
    let most = (steps / MMQ_MIN_STEPS_PER_SPLIT).clamp(1, wave);
    let cost = |s: usize| (tiles * s).div_ceil(wave) * (steps.div_ceil(s) + MMQ_SPLIT_FIXED_STEPS);
    let splits = (1..=most).min_by_key(|&s| (cost(s), s)).unwrap_or(1);
    let ksplit = steps.div_ceil(splits) * MMQ_KSUBS;
    (subs.div_ceil(ksplit).max(1), ksplit)
}

fn too_large(op: &'static str, n: usize, m: usize) -> Error {
    Error::ShapeMismatch {
        op,
        detail: format!("{m} rows of activations by {n} weight rows exceed one launch's grid"),
    }
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
pub(crate) fn activation_rows(op: &'static str, x: &Operand<'_>) -> Result<(usize, usize)> {
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

/// Threads a block of the mat-vec kernels (MATVEC_BLOCK in quantized.hip: the launch bounds of
/// the mixture of experts' mat-vecs).
pub(crate) const MATVEC_BLOCK: u32 = 256;
/// Blocks a multiprocessor of the mat-vec kernels' grids, at most.
pub(crate) const MATVEC_BLOCKS_PER_CU: u64 = 16;
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
pub(crate) fn matvec_config(
    device: &Device,
    n: usize,
    warps_per_row: usize,
    pairs: u32,
) -> LaunchConfig {
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

/// `x . w^T` for activations already in q8 form (their scheme the one `w`'s type pairs with,
/// their width `w.k`): a new contiguous (x.rows, n) buffer of `out` (f32, f16 or bf16), the
/// integer sums of [`matmul`] without its quantizing launch: on the int8 matrix units where
/// [`auto_path`] takes them for `x.rows` (a decode step of 9 to 64 sequences), else the
/// integer mat-vec.
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
    if auto_path(device, w.ty, x.rows) == MatmulPath::Mmq {
        return launch_mmq(device, w, &x.buffer, x.rows, out);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_of_k_fills_whole_waves() {
        // an H200's 132 multiprocessors at 4 blocks each: 528 blocks a wave
        let wave = 528;
        // 14336 rows (224 tiles) over k 4096 (128 sub-blocks): 2 splits of 64, not 3 of 44
        assert_eq!(mmq_split_for(wave, 224, 128), (2, 64));
        // 4096 rows (64 tiles): k 4096 takes the most splits of 4 steps, 8
        assert_eq!(mmq_split_for(wave, 64, 128), (8, 16));
        // ... and k 14336 8 splits of 56 sub-blocks (9 would make a second wave)
        assert_eq!(mmq_split_for(wave, 64, 448), (8, 56));
        // half a wave of tiles: split in two; a wave or more, and short k: one split
        assert_eq!(mmq_split_for(wave, 264, 128), (2, 64));
        assert_eq!(mmq_split_for(wave, 512, 128), (1, 128));
        assert_eq!(mmq_split_for(wave, 2004, 128), (1, 128));
        assert_eq!(mmq_split_for(wave, 8, 8), (1, 8));
        // 3 blocks a multiprocessor (Q6_K's registers), 396 a wave: 14336 rows take 3 splits
        // (2 would need two waves of 16 steps)
        assert_eq!(mmq_split_for(396, 224, 128), (3, 44));
        for wave in [8, 396, 528, 1024] {
            for tiles in 1..600 {
                for subs in [8, 64, 128, 448, 1000] {
                    let (splits, ksplit) = mmq_split_for(wave, tiles, subs);
                    assert!(splits >= 1 && ksplit % MMQ_KSUBS == 0, "{tiles} {subs}");
                    assert!(splits * ksplit >= subs && (splits - 1) * ksplit < subs);
                    // never more whole waves of work than one split takes
                    let waves = (tiles * splits).div_ceil(wave);
                    assert!(
                        waves * (ksplit / MMQ_KSUBS)
                            <= tiles.div_ceil(wave) * subs.div_ceil(MMQ_KSUBS),
                        "{wave} {tiles} {subs}: {splits} splits"
                    );
                }
            }
        }
    }
}

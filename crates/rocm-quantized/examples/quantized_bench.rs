//! The quantized matmul on llama shapes, timed with device events; one JSON object per line,
//! the first the device-to-device copy ceiling. Bandwidth counts the weight bytes only (the
//! activations are a rounding error beside them). Weights rotate over copies that together
//! pass 200 MB, so every call reads them from memory, as in a model. Then the prefill path at
//! 512 rows of bf16 activations, in TFLOP/s beside one bf16 gemm of the same shape on weights
//! already in bf16 (the BLAS ceiling), and with f32 activations (Candle's quantized models).
//! Beside each mat-vec line, the host time to queue one call; after it the same product with x
//! quantized by a launch of its own (a captured step's form), with one warp a weight row (the
//! kernel before rows got several warps), and with 2 and 4 weight rows a warp.

use rocm_bench_support::{report_bandwidth, time_ms};
use rocm_blas::{Blas, MatmulShape};
use rocm_quantized::{
    self as rq, Buffer, DType, Device, GgmlType, Layout, MatmulPath, Operand, QWeights,
};

const ITERS: usize = 20;
const ROTATE_BYTES: usize = 200 << 20;

fn filled(d: &Device, bytes: usize, byte: u8) -> rocm_quantized::Result<Buffer> {
    let b = d.alloc(bytes)?;
    d.memset(&b, 0, bytes, byte)?;
    Ok(b)
}

fn main() -> rocm_quantized::Result<()> {
    let d = Device::new(0)?;
    let blas = Blas::new(&d)?;
    let bytes = 256 << 20;
    let (a, b) = (d.alloc(bytes)?, d.alloc(bytes)?);
    let ms = time_ms(&d, ITERS, || d.copy_dtod(&a, 0, &b, 0, bytes))?;
    report_bandwidth("copy (ceiling)", "-", 2 * bytes, ms);
    drop((a, b));
    // QBENCH_MOE=1: the mixture of experts' products alone
    if std::env::var("QBENCH_MOE").is_ok() {
        return moe(&d);
    }
    // QBENCH_ONLY=<type>:<n>x<k>,... (e.g. q4_0:4096x14336): those matrices alone, for a profiler
    let only = std::env::var("QBENCH_ONLY").ok();
    let wanted = |ty: GgmlType, n: usize, k: usize| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|o| o == format!("{}:{n}x{k}", ty.key())))
    };
    // an 8B llama's projections: attention, gate/up, down, the output head
    for ty in [GgmlType::Q4_0, GgmlType::Q4K, GgmlType::Q6K, GgmlType::Q8_0] {
        for (n, k) in [
            (4096usize, 4096usize),
            (14336, 4096),
            (4096, 14336),
            (128256, 4096),
        ] {
            if !wanted(ty, n, k) {
                continue;
            }
            let row_bytes = k / ty.block_size() * ty.type_size();
            let w_bytes = n * row_bytes;
            let copies = ROTATE_BYTES.div_ceil(w_bytes).max(1);
            // 0x11 bytes: finite f16 scales (0x1111), small quants
            let ws: Vec<Buffer> = (0..copies)
                .map(|_| filled(&d, w_bytes, 0x11))
                .collect::<rocm_quantized::Result<_>>()?;
            for m in [1usize, 2, 4, 8] {
                let x = filled(&d, m * k * 4, 0x3c)?;
                let xl = Layout::contiguous(&[m, k]);
                let x = Operand::new(&x, DType::F32, &xl);
                let ms = time_rotated(&blas, (&ws, ty), (n, k), (x, MatmulPath::Auto))?;
                report_bandwidth(&format!("matvec {n}x{k} batch {m}"), ty.key(), w_bytes, ms);
                // the same with x quantized by a launch of its own (a captured step's form),
                // and with one warp a row
                let variants = [
                    (
                        "x quantized apart",
                        MatmulPath::Integer {
                            warps_per_row: 0,
                            fused: false,
                        },
                    ),
                    (
                        "one warp a row",
                        MatmulPath::Integer {
                            warps_per_row: 1,
                            fused: m == 1,
                        },
                    ),
                ];
                // QBENCH_WPR=1: one row of x, x quantized apart, 1/2/4/8 warps a weight row
                let sweep: Vec<(String, MatmulPath)> =
                    if m == 1 && std::env::var("QBENCH_WPR").is_ok() {
                        [1usize, 2, 4, 8]
                            .into_iter()
                            .map(|w| {
                                (
                                    format!("x quantized apart, {w} warps a row"),
                                    MatmulPath::Integer {
                                        warps_per_row: w,
                                        fused: false,
                                    },
                                )
                            })
                            .collect()
                    } else {
                        Vec::new()
                    };
                for (what, path) in sweep {
                    let ms = time_rotated(&blas, (&ws, ty), (n, k), (x, path))?;
                    report_bandwidth(
                        &format!("matvec {n}x{k} batch {m}, {what}"),
                        ty.key(),
                        w_bytes,
                        ms,
                    );
                }
                for (what, path) in variants {
                    let ms = time_rotated(&blas, (&ws, ty), (n, k), (x, path))?;
                    let op = format!("matvec {n}x{k} batch {m}, {what}");
                    report_bandwidth(&op, ty.key(), w_bytes, ms);
                }
                let host = host_ms(&blas, (&ws, ty), (n, k), x)?;
                println!(
                    "{{\"op\": \"host matvec {n}x{k} batch {m}\", \"dtype\": \"{}\", \"host_ms\": {host:.4}}}",
                    ty.key()
                );
            }
            crossover(&d, &blas, (&ws, ty), (n, k))?;
            prefill(&d, &blas, (&ws, ty), (n, k))?;
        }
    }
    Ok(())
}

/// Milliseconds per `matmul_via(.., path)` of `x` times the (n, k) weights of `ty`, each call
/// on the next copy of `ws` (so the weights come from memory).
fn time_rotated(
    blas: &Blas,
    (ws, ty): (&[Buffer], GgmlType),
    (n, k): (usize, usize),
    (x, path): (Operand<'_>, MatmulPath),
) -> rocm_quantized::Result<f64> {
    let mut next = 0;
    time_ms(blas.device(), ITERS, || {
        next += 1;
        rq::matmul_via(blas, rotated((ws, ty), (n, k), next), x, path).map(drop)
    })
}

/// Call `i`'s copy of the (n, k) weights of `ty`.
fn rotated((ws, ty): (&[Buffer], GgmlType), (n, k): (usize, usize), i: usize) -> QWeights<'_> {
    QWeights {
        buffer: &ws[i % ws.len()],
        ty,
        rows: n,
        k,
    }
}

/// Host milliseconds to queue one `matmul` (device work left to run behind): where this is
/// near the event time above, the host, not the kernels, sets the pace.
fn host_ms(
    blas: &Blas,
    (ws, ty): (&[Buffer], GgmlType),
    (n, k): (usize, usize),
    x: Operand<'_>,
) -> rocm_quantized::Result<f64> {
    let d = blas.device();
    d.synchronize()?;
    let t = std::time::Instant::now();
    for i in 0..ITERS {
        drop(rq::matmul(blas, rotated((ws, ty), (n, k), i), x)?);
    }
    let ms = t.elapsed().as_secs_f64() * 1e3 / ITERS as f64;
    d.synchronize()?;
    Ok(ms)
}

/// 9 to 64 rows of f32 activations through the integer mat-vec, the int8 matrix units (where
/// the device has them) and dequantize + gemm: where `INTEGER_MAX_ROWS` comes from, and why
/// `MatmulPath::Auto` leaves the int8 product out for one matrix.
fn crossover(
    d: &Device,
    blas: &Blas,
    (ws, ty): (&[Buffer], GgmlType),
    (n, k): (usize, usize),
) -> rocm_quantized::Result<()> {
    let mmq = rq::mmq_applies(d, ty);
    for m in [9usize, 16, 32, 64] {
        let x = filled(d, m * k * 4, 0x3c)?;
        let xl = Layout::contiguous(&[m, k]);
        let integer = MatmulPath::Integer {
            warps_per_row: 0,
            fused: false,
        };
        let mut ms = [f64::NAN; 3];
        for (i, path) in [integer, MatmulPath::Mmq, MatmulPath::DequantizeGemm]
            .into_iter()
            .enumerate()
        {
            if path == MatmulPath::Mmq && !mmq {
                continue;
            }
            let xo = Operand::new(&x, DType::F32, &xl);
            ms[i] = time_rotated(blas, (ws, ty), (n, k), (xo, path))?;
        }
        println!(
            "{{\"op\": \"rows {n}x{k} batch {m}\", \"dtype\": \"{}\", \"integer_ms\": {:.4}, \"mmq_ms\": {}, \"dequantize_gemm_ms\": {:.4}}}",
            ty.key(),
            ms[0],
            if ms[1].is_nan() { "null".to_string() } else { format!("{:.4}", ms[1]) },
            ms[2]
        );
    }
    Ok(())
}

/// 512 rows of bf16 activations times the (n, k) weights of `ty`, against one bf16 gemm.
fn prefill(
    d: &Device,
    blas: &Blas,
    (ws, ty): (&[Buffer], GgmlType),
    (n, k): (usize, usize),
) -> rocm_quantized::Result<()> {
    const M: usize = 512;
    let x = filled(d, M * k * 2, 0x3c)?;
    let xl = Layout::contiguous(&[M, k]);
    let xo = Operand::new(&x, DType::BF16, &xl);
    let ours = time_rotated(blas, (ws, ty), (n, k), (xo, MatmulPath::Auto))?;
    // f32 activations, as Candle's quantized models run (0x3c3c3c3c: about 0.0115)
    let x32 = filled(d, M * k * 4, 0x3c)?;
    let x32o = Operand::new(&x32, DType::F32, &xl);
    let ours_f32 = time_rotated(blas, (ws, ty), (n, k), (x32o, MatmulPath::Auto))?;
    // the two many-row paths apart (Auto takes the int8 matrix units where they apply)
    let dequantize_gemm = time_rotated(blas, (ws, ty), (n, k), (x32o, MatmulPath::DequantizeGemm))?;
    let mmq = if rq::mmq_applies(d, ty) {
        format!(
            "{:.4}",
            time_rotated(blas, (ws, ty), (n, k), (x32o, MatmulPath::Mmq))?
        )
    } else {
        "null".to_string()
    };
    let wb = filled(d, n * k * 2, 0x3c)?;
    let x3 = Layout::contiguous(&[1, M, k]);
    let w3 = Layout::new(&[1, k, n], &[n * k, 1, k], 0);
    let gemm = time_ms(d, ITERS, || {
        blas.matmul(
            Operand::new(&x, DType::BF16, &x3),
            Operand::new(&wb, DType::BF16, &w3),
            MatmulShape {
                batch: 1,
                m: M,
                n,
                k,
            },
        )
        .map(drop)
    })?;
    let tflops = |ms: f64| 2.0 * (M * n * k) as f64 / (ms * 1e-3) / 1e12;
    println!(
        "{{\"op\": \"prefill {n}x{k} batch {M}\", \"dtype\": \"{}\", \"ours_ms\": {ours:.4}, \"ours_f32_ms\": {ours_f32:.4}, \"f32_dequantize_gemm_ms\": {dequantize_gemm:.4}, \"f32_mmq_ms\": {mmq}, \"bf16_gemm_ms\": {gemm:.4}, \"ours_tflops\": {:.1}, \"ours_f32_tflops\": {:.1}, \"bf16_gemm_tflops\": {:.1}}}",
        ty.key(),
        tflops(ours),
        tflops(ours_f32),
        tflops(gemm)
    );
    Ok(())
}

/// Qwen3-30B-A3B's expert products (128 experts of ffn 768 on hidden 2048, 8 a token, ids
/// drawn uniformly): gate (and up) and down for 16 to 512 tokens, through the 8-pair chunks on
/// integer dot products and the 64-pair chunks on the int8 matrix units. GFLOP/s count the
/// products of the pairs (2 * pairs * n * k).
fn moe(d: &Device) -> rocm_quantized::Result<()> {
    let (experts, top, hidden, ffn) = (128usize, 8usize, 2048usize, 768usize);
    let mut state = 7u64;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    for ty in [GgmlType::Q4K, GgmlType::Q8_0] {
        for (what, n, k) in [("gate", ffn, hidden), ("down", hidden, ffn)] {
            let rows = experts * n;
            let w_bytes = rows * k / ty.block_size() * ty.type_size();
            let wb = filled(d, w_bytes, 0x11)?;
            let weights = rq::QExperts {
                weights: QWeights {
                    buffer: &wb,
                    ty,
                    rows,
                    k,
                },
                experts,
            };
            for tokens in [16usize, 64, 128, 256, 512] {
                // distinct experts a token, as a router picks them
                let mut ids = Vec::with_capacity(tokens * top);
                for _ in 0..tokens {
                    let mut mine: Vec<u32> = Vec::new();
                    while mine.len() < top {
                        let e = (next() % experts) as u32;
                        if !mine.contains(&e) {
                            mine.push(e);
                        }
                    }
                    ids.extend(mine);
                }
                let ids = d.htod(&ids)?;
                let slots = if what == "gate" { 1 } else { top };
                let x = filled(d, tokens * slots * k * 4, 0x3c)?;
                let xl = Layout::contiguous(&[tokens, slots, k]);
                let il = Layout::contiguous(&[tokens, top]);
                let args = (
                    Operand::new(&x, DType::F32, &xl),
                    Operand::new(ids.as_buffer(), DType::U32, &il),
                );
                let mut ms = [f64::NAN; 2];
                for (i, path) in [rq::MoePath::Grouped, rq::MoePath::Mmq]
                    .into_iter()
                    .enumerate()
                {
                    if path == rq::MoePath::Mmq && !rq::mmq_applies(d, ty) {
                        continue;
                    }
                    ms[i] = time_ms(d, ITERS, || {
                        rq::moe_matvec_via(d, weights, args, false, path).map(drop)
                    })?;
                }
                let gflops = |ms: f64| 2.0 * (tokens * top * n * k) as f64 / (ms * 1e-3) / 1e9;
                println!(
                    "{{\"op\": \"moe {what} {experts}x{n}x{k} top {top}, {tokens} tokens\", \"dtype\": \"{}\", \"grouped_ms\": {:.4}, \"mmq_ms\": {:.4}, \"grouped_gflops\": {:.0}, \"mmq_gflops\": {:.0}}}",
                    ty.key(),
                    ms[0],
                    ms[1],
                    gflops(ms[0]),
                    gflops(ms[1])
                );
            }
        }
    }
    Ok(())
}

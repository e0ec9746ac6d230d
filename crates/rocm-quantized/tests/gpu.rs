//! GPU tests of rocm-quantized against Candle 0.11.1's CPU backend: the same quantized blocks
//! (Candle's own `QTensor::quantize` of random values) on both sides.
//!
//! One file, one test binary: each GPU test binary links Candle's CPU reference and travels in
//! the GPU pack, so a crate's GPU suite stays one target (the pack's size and link time).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::{DType as C, Device as Cpu, IndexOp, Tensor};
use rand::{Rng, SeedableRng};
use rocm_blas::Blas;
use rocm_quantized::{self as rq, DType, Error, GgmlType, Layout, Operand, Q8Scheme, QWeights};
use rocm_test_support::*;

mod common;
use common::quantized;

fn bytes_of_dtype(t: &Tensor, dtype: DType) -> Vec<u8> {
    let t = match dtype {
        DType::F16 => t.to_dtype(C::F16).unwrap(),
        DType::BF16 => t.to_dtype(C::BF16).unwrap(),
        _ => t.clone(),
    };
    bytes_of(&t)
}

/// The q8 form of rows of values as the kernels define it, written from Candle's CPU
/// quantization (k_quants.rs, `from_float` of BlockQ8_0, BlockQ8_1, BlockQ8K).
struct Q8Model {
    bytes: Vec<i8>,
    /// One scale per 32 values.
    scales: Vec<f32>,
    sums: Vec<[i16; 2]>,
}

impl Q8Model {
    fn of(x: &[f32], scheme: Q8Scheme) -> Q8Model {
        let mut bytes = Vec::new();
        let mut scales = Vec::new();
        for block in x.chunks(scheme.block()) {
            match scheme {
                Q8Scheme::Q8K => {
                    let (mut amax, mut max) = (0f32, 0f32);
                    for &v in block {
                        if amax < v.abs() {
                            amax = v.abs();
                            max = v;
                        }
                    }
                    let iscale = if amax == 0.0 { 0.0 } else { -127f32 / max };
                    bytes.extend(
                        block
                            .iter()
                            .map(|v| (iscale * v).round().clamp(-128.0, 127.0) as i8),
                    );
                    let d = if amax == 0.0 { 0.0 } else { 1.0 / iscale };
                    scales.extend([d; 8]);
                }
                Q8Scheme::Q8_0 | Q8Scheme::Q8_1 => {
                    let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
                    let d = amax / 127.0;
                    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
                    bytes.extend(block.iter().map(|v| (v * id).round() as i8));
                    scales.push(half::f16::from_f32(d).to_f32());
                }
            }
        }
        let sum = |h: &[i8]| h.iter().map(|&b| i16::from(b)).sum::<i16>();
        let sums = bytes
            .chunks(32)
            .map(|b| [sum(&b[..16]), sum(&b[16..])])
            .collect();
        Q8Model {
            bytes,
            scales,
            sums,
        }
    }

    /// The values the form stands for: scale * byte.
    fn values(&self) -> Vec<f32> {
        self.bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| self.scales[i / 32] * f32::from(b))
            .collect()
    }

    /// The form's bytes as the device lays them out.
    fn layout(&self) -> Vec<u8> {
        let mut out: Vec<u8> = self.bytes.iter().map(|&b| b as u8).collect();
        for (d, s) in self.scales.iter().zip(&self.sums) {
            out.extend(d.to_le_bytes());
            out.extend(s[0].to_le_bytes());
            out.extend(s[1].to_le_bytes());
        }
        out
    }
}

#[test]
fn quantize_q8_is_the_cpus_quantization() {
    let d = device();
    let (m, k) = (3, 512);
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut xs: Vec<f32> = (0..m * k)
        .map(|i| (rng.random::<f32>() * 2.0 - 1.0) * [0.001f32, 1.0, 500.0][i / 600])
        .collect();
    xs[256..512].iter_mut().for_each(|v| *v = 0.0); // an all-zero block: scale 0
    xs[100] = 0.5; // a half to round
    xs[700] = -900.0; // a negative value of largest magnitude (Q8K's sign)
    let x = Tensor::from_vec(xs, (m, k), &Cpu::Cpu).unwrap();
    for scheme in [Q8Scheme::Q8_0, Q8Scheme::Q8_1, Q8Scheme::Q8K] {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let xd = x.to_dtype(cdtype(dtype)).unwrap();
            let seen: Vec<f32> = xd
                .to_dtype(C::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let want = Q8Model::of(&seen, scheme).layout();
            let xb = upload(&d, &xd);
            let xl = Layout::contiguous(&[m, k]);
            let xo = Operand::new(&xb, dtype, &xl);
            let got = rq::quantize_q8(&d, xo, scheme).unwrap();
            assert_eq!(got.len(), rq::q8_bytes(m, k));
            let got = download(&d, &got);
            assert!(
                got == want,
                "quantize_q8 {scheme:?} {dtype}: first difference at byte {:?}",
                got.iter().zip(&want).position(|(a, b)| a != b)
            );
        }
    }
    let x16 = d.alloc(64 * 4).unwrap();
    let e = rq::quantize_q8(
        &d,
        Operand::new(&x16, DType::F32, &Layout::contiguous(&[16])),
        Q8Scheme::Q8_0,
    )
    .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = rq::quantize_q8(
        &d,
        Operand::new(&x16, DType::F32, &Layout::contiguous(&[64])),
        Q8Scheme::Q8K,
    )
    .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
}

#[test]
fn dequantize_is_bit_exact_with_the_cpu_for_every_type() {
    let d = device();
    let mut checked = 0;
    for ty in GgmlType::ALL {
        for (rows, k) in [(1, 256), (3, 512), (17, 4096)] {
            let q = quantized(ty, rows, k, (rows * k) as u64);
            let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
            let want = q.dequantize(&Cpu::Cpu).unwrap();
            let w = QWeights {
                buffer: &blocks,
                ty,
                rows,
                k,
            };
            for out in [DType::F32, DType::F16, DType::BF16] {
                let got = rq::dequantize(&d, w, out).unwrap();
                let got = download(&d, &got);
                let want = bytes_of_dtype(&want, out);
                assert!(
                    got == want,
                    "dequantize {ty} ({rows}, {k}) to {out}: first difference at byte {:?}",
                    got.iter().zip(&want).position(|(a, b)| a != b)
                );
                checked += 1;
            }
        }
    }
    println!("dequantize: {checked} type x shape x dtype cases bit-exact with the CPU");
}

#[test]
fn embedding_picks_rows_as_the_cpu_does() {
    let d = device();
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q6K,
        GgmlType::F16,
    ] {
        let (rows, k) = (50, 512);
        let q = quantized(ty, rows, k, 7);
        let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
        let ids_host: Vec<u32> = vec![3, 0, 49, 3, 17, 22];
        let ids = d.htod(&ids_host).unwrap();
        let il = Layout::contiguous(&[2, 3]);
        let w = QWeights {
            buffer: &blocks,
            ty,
            rows,
            k,
        };
        let ids_op = Operand::new(ids.as_buffer(), DType::U32, &il);
        let got = rq::embedding(&d, w, ids_op, (DType::F32, true)).unwrap();
        let cpu_ids = Tensor::new(&[[3u32, 0, 49], [3, 17, 22]], &Cpu::Cpu).unwrap();
        let want = q.embedding(&cpu_ids).unwrap();
        assert!(download(&d, &got) == bytes_of(&want), "embedding {ty}");
        // an id past the table: zero row unchecked, an error checked
        let bad = d.htod(&[1u32, 50]).unwrap();
        let bl = Layout::contiguous(&[2]);
        let bad_op = Operand::new(bad.as_buffer(), DType::U32, &bl);
        let rows_out = rq::embedding(&d, w, bad_op, (DType::F32, false)).unwrap();
        let out = download(&d, &rows_out);
        assert!(out[k * 4..].iter().all(|&b| b == 0), "{ty}: masked row");
        let e = rq::embedding(&d, w, bad_op, (DType::F32, true)).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfRange { .. }), "{e}");
    }
}

/// f64 values of a CPU tensor.
fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_dtype(C::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn matmul_matches_the_cpu_qmatmul() {
    // Every type x activation dtype x batch (the CPU's integer sums up to INTEGER_MAX_ROWS,
    // and on the int8 matrix units to MMQ_MAX_ROWS; dequantize + gemm above) x k, 33 weight rows. Two references: Candle's CPU QMatMul (which quantizes
    // the activations as the integer path does) and the activations times the CPU's
    // dequantized weights, both rounded to the gemm's dtype, in f64 (what the gemm path
    // computes): the path's own reference to f32 rounding, the other to 2% of the output's
    // scale.
    let d = device();
    let blas = Blas::new(&d).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    // 33 rows: Candle's CPU QMatMul repacks Q8_0/Q4_K weights of n % 16 == 0 rows on
    // AVX512-VNNI hosts and then quantizes activations to Q8K (host-dependent results)
    let n = 33;
    let mut checked = 0;
    for k in [256, 4096, 11008] {
        for ty in GgmlType::ALL {
            let q = quantized(ty, n, k, (n + k) as u64);
            let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
            let wd = q.dequantize(&Cpu::Cpu).unwrap().to_dtype(C::F64).unwrap();
            let cpu_qmm = candle_core::quantized::QMatMul::from_qtensor(q).unwrap();
            let w = QWeights {
                buffer: &blocks,
                ty,
                rows: n,
                k,
            };
            for m in [1, 2, 3, 8, 9, 17, 25, 48, 49, 64, 65, 512] {
                let xs: Vec<f32> = (0..m * k)
                    .map(|_| rng.random::<f32>() * 2.0 - 1.0)
                    .collect();
                let x = Tensor::from_vec(xs, (m, k), &Cpu::Cpu).unwrap();
                for dtype in [DType::F32, DType::F16, DType::BF16] {
                    // the activations as the kernels load them
                    let xr = x.to_dtype(cdtype(dtype)).unwrap().to_dtype(C::F32).unwrap();
                    let cpu = f64s(&candle_core::Module::forward(&cpu_qmm, &xr).unwrap());
                    // the gemm path's operands: both in its dtype
                    let g = cdtype(rq::gemm_dtype(ty, dtype));
                    let rounded = |t: &Tensor| t.to_dtype(g).unwrap().to_dtype(C::F64).unwrap();
                    let (xg, wg) = (rounded(&xr), rounded(&wd));
                    let exact = f64s(&xg.matmul(&wg.t().unwrap()).unwrap());
                    // sum |x||w| of each output: the scale of its accumulation error
                    let abs_dot = f64s(
                        &xg.abs()
                            .unwrap()
                            .matmul(&wg.abs().unwrap().t().unwrap())
                            .unwrap(),
                    );
                    // integer path: Candle's CPU quantization, so the CPU's QMatMul is exact
                    let integer = ty.is_block()
                        && (m <= rq::INTEGER_MAX_ROWS
                            || rq::auto_path(&d, ty, m) == rq::MatmulPath::Mmq);
                    let (want, loose) = if integer {
                        (&cpu, &exact)
                    } else {
                        (&exact, &cpu)
                    };
                    let xb = upload(&d, &x.to_dtype(cdtype(dtype)).unwrap());
                    let xl = Layout::contiguous(&[m, k]);
                    let got = rq::matmul(&blas, w, Operand::new(&xb, dtype, &xl)).unwrap();
                    let got = values(&download(&d, &got), dtype);
                    let scale = want.iter().fold(1e-3f64, |a, v| a.max(v.abs()));
                    // f32 outputs: f32 rounding of the integer path's scaled sums, of the
                    // gemm's accumulation (the matrix units' order); 16-bit outputs: their
                    // rounding
                    let tol = match dtype {
                        DType::F32 if integer => 1e-5,
                        DType::F32 => 2e-5,
                        _ => 1e-2,
                    };
                    for (i, ((g, w), l)) in got.iter().zip(want).zip(loose).enumerate() {
                        let bound = if integer { scale } else { abs_dot[i].max(1e-3) };
                        assert!(
                            (g - w).abs() <= tol * bound,
                            "{ty} {dtype} ({m}, {n}, {k}) at {i}: {g} vs {w} (integer path: {integer})"
                        );
                        assert!(
                            (g - l).abs() <= 2e-2 * scale,
                            "{ty} {dtype} ({m}, {n}, {k}) at {i}: {g} vs {l} (integer path: {integer})"
                        );
                    }
                    checked += 1;
                }
            }
        }
    }
    println!("quantized matmul: {checked} k x type x batch x dtype cases");
}

#[test]
fn integer_matvec_plans_match_the_cpu_qmatmul() {
    // The integer mat-vec of every block type: batch 1 to 8, 1 to 8 warps a weight row, x
    // quantized by each block or by a launch of its own, an odd number of weight rows (37: the
    // last block's rows are partial), k from one block to an 8B model's down projection, rows
    // of a number of blocks that is not a multiple of 16 bytes in ggml's layout (Q6_K and Q3_K
    // at k = 256 and 11008, the 32-value types at k = 288). Against Candle's CPU QMatMul, which quantizes the activations as the
    // kernel does: equal to f32 rounding of the scaled integer sums.
    let d = device();
    let blas = Blas::new(&d).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let n = 37;
    // a block holds 8 warps of 32 lanes, 4 wavefronts of 64
    let most = rq::MATVEC_MAX_WARPS_PER_ROW.min(256 / d.info().warp_size as usize);
    let mut checked = 0;
    for ty in GgmlType::ALL.into_iter().filter(|t| t.is_block()) {
        let ks: &[usize] = if ty.block_size() == 32 {
            &[288, 4096, 11008, 14336]
        } else {
            &[256, 4096, 11008, 14336]
        };
        for &k in ks {
            let q = quantized(ty, n, k, (7 * n + k) as u64);
            let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
            let cpu_qmm = candle_core::quantized::QMatMul::from_qtensor(q).unwrap();
            let w = QWeights {
                buffer: &blocks,
                ty,
                rows: n,
                k,
            };
            for m in 1..=rq::MATVEC_MAX_ROWS {
                let xs: Vec<f32> = (0..m * k)
                    .map(|_| rng.random::<f32>() * 2.0 - 1.0)
                    .collect();
                let x = Tensor::from_vec(xs, (m, k), &Cpu::Cpu).unwrap();
                for dtype in [DType::F32, DType::BF16] {
                    let xr = x.to_dtype(cdtype(dtype)).unwrap().to_dtype(C::F32).unwrap();
                    let want = f64s(&candle_core::Module::forward(&cpu_qmm, &xr).unwrap());
                    let scale = want.iter().fold(1e-3f64, |a, v| a.max(v.abs()));
                    let tol = if dtype == DType::F32 { 1e-5 } else { 1e-2 };
                    let xb = upload(&d, &x.to_dtype(cdtype(dtype)).unwrap());
                    let xl = Layout::contiguous(&[m, k]);
                    // (warps a row, fused)
                    let plans: Vec<(usize, bool)> = if dtype == DType::F32 {
                        (0..=most.trailing_zeros())
                            .flat_map(|p| [(1 << p, false), (1 << p, true)])
                            .collect()
                    } else {
                        vec![(0, m == 1)]
                    };
                    for (warps_per_row, fused) in plans {
                        let path = rq::MatmulPath::Integer {
                            warps_per_row,
                            fused,
                        };
                        let got =
                            rq::matmul_via(&blas, w, Operand::new(&xb, dtype, &xl), path).unwrap();
                        let got = values(&download(&d, &got), dtype);
                        assert_eq!(got.len(), want.len());
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (g - w).abs() <= tol * scale,
                                "{ty} {dtype} ({m}, {n}, {k}) {warps_per_row} warps a row, fused {fused}, at {i}: {g} vs {w}"
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    // a count of warps a row that is not a power of two or more than a block holds
    let q = quantized(GgmlType::Q4_0, 4, 256, 1);
    let blocks = rq::upload(&d, GgmlType::Q4_0, &q.data().unwrap()).unwrap();
    let w = QWeights {
        buffer: &blocks,
        ty: GgmlType::Q4_0,
        rows: 4,
        k: 256,
    };
    let x = d.alloc_zeroed(2 * 256 * 4).unwrap();
    let xl = Layout::contiguous(&[2, 256]);
    for warps_per_row in [3, 2 * most] {
        let path = rq::MatmulPath::Integer {
            warps_per_row,
            fused: false,
        };
        let e = rq::matmul_via(&blas, w, Operand::new(&x, DType::F32, &xl), path).unwrap_err();
        assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    }
    println!("integer mat-vec: {checked} type x k x batch x plan cases");
}

#[test]
fn mmq_matches_the_cpu_qmatmul() {
    // The int8 matrix-unit product of every block type: 1 to 513 rows of activations (partial
    // tiles of 64 both ways: 37 and 131 weight rows), k from one block to an 8B model's down
    // projection (the 32-value types also at k = 288, not a multiple of 256), f32 and bf16
    // activations. Against Candle's CPU QMatMul, which quantizes the activations as the kernel
    // does: equal to f32 rounding of the scaled integer sums, as the integer mat-vec is.
    let d = device();
    let blas = Blas::new(&d).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    if !d.info().matrix_units() {
        let q = quantized(GgmlType::Q4_0, 4, 256, 1);
        let blocks = rq::upload(&d, GgmlType::Q4_0, &q.data().unwrap()).unwrap();
        let w = QWeights {
            buffer: &blocks,
            ty: GgmlType::Q4_0,
            rows: 4,
            k: 256,
        };
        let x = d.alloc_zeroed(16 * 256 * 4).unwrap();
        let xl = Layout::contiguous(&[16, 256]);
        let e = rq::matmul_via(
            &blas,
            w,
            Operand::new(&x, DType::F32, &xl),
            rq::MatmulPath::Mmq,
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        println!(
            "{}: no matrix units, the int8 product refuses",
            d.info().arch
        );
        return;
    }
    let mut checked = 0;
    for ty in GgmlType::ALL.into_iter().filter(|t| t.is_block()) {
        let ks: &[usize] = if ty.block_size() == 32 {
            &[288, 4096, 14336]
        } else {
            &[256, 4096, 14336]
        };
        for &k in ks {
            for n in [37, 131] {
                let q = quantized(ty, n, k, (5 * n + k) as u64);
                let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
                let cpu_qmm = candle_core::quantized::QMatMul::from_qtensor(q).unwrap();
                let w = QWeights {
                    buffer: &blocks,
                    ty,
                    rows: n,
                    k,
                };
                let ms: &[usize] = if k > 4096 {
                    &[7, 65]
                } else {
                    &[1, 7, 8, 33, 256, 513]
                };
                for &m in ms {
                    let xs: Vec<f32> = (0..m * k)
                        .map(|_| rng.random::<f32>() * 2.0 - 1.0)
                        .collect();
                    let x = Tensor::from_vec(xs, (m, k), &Cpu::Cpu).unwrap();
                    for dtype in [DType::F32, DType::BF16] {
                        let xr = x.to_dtype(cdtype(dtype)).unwrap().to_dtype(C::F32).unwrap();
                        let want = f64s(&candle_core::Module::forward(&cpu_qmm, &xr).unwrap());
                        let scale = want.iter().fold(1e-3f64, |a, v| a.max(v.abs()));
                        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-2 };
                        let xb = upload(&d, &x.to_dtype(cdtype(dtype)).unwrap());
                        let xl = Layout::contiguous(&[m, k]);
                        let got = rq::matmul_via(
                            &blas,
                            w,
                            Operand::new(&xb, dtype, &xl),
                            rq::MatmulPath::Mmq,
                        )
                        .unwrap();
                        let got = values(&download(&d, &got), dtype);
                        assert_eq!(got.len(), want.len());
                        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                            assert!(
                                (g - w).abs() <= tol * scale,
                                "{ty} {dtype} ({m}, {n}, {k}) at {i} (token {}, row {}): {g} vs {w}",
                                i / n,
                                i % n
                            );
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    println!("int8 matrix-unit product: {checked} type x k x rows x batch x dtype cases");
}

#[test]
fn blocks_come_back_from_the_device_layout_as_ggml_wrote_them() {
    let d = device();
    for ty in GgmlType::ALL {
        let q = quantized(ty, 5, 512, 3);
        let ggml = q.data().unwrap();
        let blocks = rq::upload(&d, ty, &ggml).unwrap();
        assert_eq!(rq::download(&d, ty, &blocks).unwrap(), &ggml[..], "{ty}");
        if ty.is_block() {
            // the device holds the other layout
            assert_ne!(download(&d, &blocks), &ggml[..], "{ty}");
        }
    }
    let e = rq::upload(&d, GgmlType::Q4K, &[0u8; 145]).unwrap_err();
    assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
}

#[test]
fn matmul_of_a_strided_input_is_the_contiguous_ones() {
    let d = device();
    let blas = Blas::new(&d).unwrap();
    let (n, k) = (40, 512);
    for ty in [GgmlType::Q4_0, GgmlType::Q6K, GgmlType::F16] {
        let q = quantized(ty, n, k, 9);
        let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
        let w = QWeights {
            buffer: &blocks,
            ty,
            rows: n,
            k,
        };
        for m in [3, 20] {
            // x^T stored (k, m): the (m, k) operand is a transposed view
            let xt = Tensor::from_vec(
                (0..m * k)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                    .collect::<Vec<f32>>(),
                (k, m),
                &Cpu::Cpu,
            )
            .unwrap();
            let xb = upload(&d, &xt);
            let strided = Layout::new(&[m, k], &[1, m], 0);
            let got = rq::matmul(&blas, w, Operand::new(&xb, DType::F32, &strided)).unwrap();
            let xc = upload(&d, &xt.t().unwrap().contiguous().unwrap());
            let want = rq::matmul(
                &blas,
                w,
                Operand::new(&xc, DType::F32, &Layout::contiguous(&[m, k])),
            )
            .unwrap();
            assert!(download(&d, &got) == download(&d, &want), "{ty} batch {m}");
        }
    }
}

/// `experts` (n, k) matrices of `ty` one after the other in `blocks`.
fn experts_of(
    blocks: &rocm_quantized::Buffer,
    ty: GgmlType,
    (experts, n, k): (usize, usize, usize),
) -> rq::QExperts<'_> {
    rq::QExperts {
        weights: QWeights {
            buffer: blocks,
            ty,
            rows: experts * n,
            k,
        },
        experts,
    }
}

/// `len` values uniform in [-1, 1).
fn uniform(rng: &mut rand::rngs::StdRng, len: usize) -> Vec<f32> {
    (0..len).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect()
}

#[test]
fn moe_matvec_picks_each_tokens_experts() {
    let d = device();
    let (experts, n, k, tokens, top) = (4, 40, 512, 3, 2);
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let ids_host: Vec<u32> = vec![2, 0, 3, 3, 1, 2];
    let ids = d.htod(&ids_host).unwrap();
    let il = Layout::contiguous(&[tokens, top]);
    let mut checked = 0;
    for ty in GgmlType::ALL.into_iter().filter(|t| t.is_block()) {
        let q = quantized(ty, experts * n, k, 21);
        let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
        let wd: Vec<f32> = q
            .dequantize(&Cpu::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let scheme = ty.q8_scheme().unwrap();
        let w = experts_of(&blocks, ty, (experts, n, k));
        for slots in [1, top] {
            let xs = uniform(&mut rng, tokens * slots * k);
            let x = Tensor::from_vec(xs, (tokens, slots, k), &Cpu::Cpu).unwrap();
            for dtype in [DType::F32, DType::BF16] {
                let xr = x.to_dtype(cdtype(dtype)).unwrap().to_dtype(C::F32).unwrap();
                let xb = upload(&d, &x.to_dtype(cdtype(dtype)).unwrap());
                let xl = Layout::contiguous(&[tokens, slots, k]);
                let got = rq::moe_matvec(
                    &d,
                    w,
                    (
                        Operand::new(&xb, dtype, &xl),
                        Operand::new(ids.as_buffer(), DType::U32, &il),
                    ),
                    true,
                )
                .unwrap();
                let got = values(&download(&d, &got), dtype);
                assert_eq!(got.len(), tokens * top * n);
                for (p, &e) in ids_host.iter().enumerate() {
                    // the activations in the CPU's q8 form times expert e's dequantized rows,
                    // in f64; Q8_1's f16 sum term (Q4_1, Q5_1) leaves a difference of ~2^-11
                    // of the min term, hence its looser bound
                    let slot = if slots == 1 { 0 } else { p % top };
                    let row: Vec<f32> = xr.i((p / top, slot)).unwrap().to_vec1().unwrap();
                    let xq = Q8Model::of(&row, scheme).values();
                    let want: Vec<f64> = (0..n)
                        .map(|j| {
                            let wrow = &wd[(e as usize * n + j) * k..][..k];
                            wrow.iter()
                                .zip(&xq)
                                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                                .sum()
                        })
                        .collect();
                    let scale = want.iter().fold(1e-3f64, |a, v| a.max(v.abs()));
                    let tol = match (dtype, scheme) {
                        (DType::F32, Q8Scheme::Q8_1) => 1e-3,
                        (DType::F32, _) => 1e-5,
                        _ => 1e-2,
                    };
                    for (j, w) in want.iter().enumerate() {
                        let g = got[p * n + j];
                        assert!(
                            (g - w).abs() <= tol * scale,
                            "moe {ty} {dtype} slots {slots} pair {p} row {j}: {g} vs {w}"
                        );
                    }
                }
                checked += 1;
            }
        }
        // an expert id past the experts: a zero row unchecked, an error checked
        let bad = d.htod(&[1u32, 4]).unwrap();
        let bl = Layout::contiguous(&[1, 2]);
        let x1 = d.alloc_zeroed(k * 4).unwrap();
        let x1l = Layout::contiguous(&[1, 1, k]);
        let args = (
            Operand::new(&x1, DType::F32, &x1l),
            Operand::new(bad.as_buffer(), DType::U32, &bl),
        );
        let out = rq::moe_matvec(&d, w, args, false).unwrap();
        assert!(
            download(&d, &out).iter().all(|&b| b == 0),
            "{ty}: masked pair"
        );
        let e = rq::moe_matvec(&d, w, args, true).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfRange { index: 4, .. }), "{e}");
    }
    println!("indexed moe: {checked} type x slots x dtype cases");
}

#[test]
fn grouped_moe_is_each_tokens_own_product() {
    // More than one token takes the kernel that groups the pairs by expert; one token the
    // per-pair kernel. The grouped results must be the per-pair ones bit for bit; with
    // MOE_MMQ_MIN_PAIRS_PER_EXPERT pairs an expert, where the device has matrix units, the int8
    // product groups 64 pairs a block: the same integer sums, scaled in another order, so
    // equal to f32 rounding of the output's scale. 8 and 300 tokens x 4 slots over 6 experts
    // (more pairs than one window of ids, runs of an expert longer than a pass), one id past
    // the experts (a zero row, or the error with checks).
    let d = device();
    let (experts, n, k, top) = (6, 72, 512, 4);
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    for tokens in [8, 300] {
        let mut ids_host: Vec<u32> = (0..tokens * top)
            .map(|_| rng.random_range(0..experts as u32))
            .collect();
        let bad_pair = tokens * top - 5;
        ids_host[bad_pair] = experts as u32 + 3;
        let ids = d.htod(&ids_host).unwrap();
        let il = Layout::contiguous(&[tokens, top]);
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q4K,
            GgmlType::Q6K,
        ] {
            let mmq = rq::moe_takes_mmq(&d, ty, tokens * top, experts);
            assert_eq!(mmq, tokens == 300 && d.info().matrix_units());
            let q = quantized(ty, experts * n, k, 23);
            let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
            let w = experts_of(&blocks, ty, (experts, n, k));
            for slots in [1, top] {
                let xs = uniform(&mut rng, tokens * slots * k);
                let xb = d.htod(&xs).unwrap();
                let xl = Layout::contiguous(&[tokens, slots, k]);
                let args = (
                    Operand::new(xb.as_buffer(), DType::F32, &xl),
                    Operand::new(ids.as_buffer(), DType::U32, &il),
                );
                let all = download(&d, &rq::moe_matvec(&d, w, args, false).unwrap());
                let e = rq::moe_matvec(&d, w, args, true).unwrap_err();
                assert!(
                    matches!(e, Error::IndexOutOfRange { index, .. } if index == experts as i64 + 3),
                    "{e}"
                );
                let all_values = values(&all, DType::F32);
                let scale = all_values.iter().fold(1e-3f64, |a, v| a.max(v.abs()));
                let row_bytes = n * 4;
                for t in 0..tokens {
                    let xt = Layout::new(&[1, slots, k], &[slots * k, k, 1], t * slots * k);
                    let it = Layout::new(&[1, top], &[top, 1], t * top);
                    let one = rq::moe_matvec(
                        &d,
                        w,
                        (
                            Operand::new(xb.as_buffer(), DType::F32, &xt),
                            Operand::new(ids.as_buffer(), DType::U32, &it),
                        ),
                        false,
                    )
                    .unwrap();
                    let one = download(&d, &one);
                    let at = t * top * row_bytes;
                    if mmq {
                        let one = values(&one, DType::F32);
                        let rows = &all_values[t * top * n..(t + 1) * top * n];
                        for (i, (a, b)) in rows.iter().zip(&one).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-5 * scale,
                                "{ty} slots {slots}: token {t} at {i}: {a} (int8 product) vs {b} (its own)"
                            );
                        }
                    } else {
                        assert!(
                            one == all[at..at + top * row_bytes],
                            "{ty} slots {slots}: token {t}'s rows differ from its own product"
                        );
                    }
                }
                let bad = bad_pair * row_bytes;
                assert!(all[bad..bad + row_bytes].iter().all(|&b| b == 0), "{ty}");
            }
        }
    }
}

/// A router choice's ids (u32) and weights (f32), downloaded.
fn choice_values(d: &rq::Device, (ids, weights): (rq::Buffer, rq::Buffer)) -> (Vec<f64>, Vec<f64>) {
    (
        values(&download(d, &ids), DType::U32),
        values(&download(d, &weights), DType::F32),
    )
}

/// The CPU's choice from logits (tokens, experts): softmax, stable descending sort, gather and
/// (with `renorm`) renormalization; the ids and weights, (tokens, top).
fn cpu_topk(
    logits: &[f32],
    (tokens, experts): (usize, usize),
    top: usize,
    renorm: bool,
) -> (Vec<u32>, Vec<f32>) {
    let cpu = Tensor::from_vec(logits.to_vec(), (tokens, experts), &Cpu::Cpu).unwrap();
    let probs = softmax_rows(&cpu);
    let ids = probs
        .arg_sort_last_dim(false)
        .unwrap()
        .narrow(1, 0, top)
        .unwrap()
        .contiguous()
        .unwrap();
    let mut w = probs.gather(&ids, 1).unwrap();
    if renorm {
        w = w.broadcast_div(&w.sum_keepdim(1).unwrap()).unwrap();
    }
    (
        ids.flatten_all().unwrap().to_vec1().unwrap(),
        w.flatten_all().unwrap().to_vec1().unwrap(),
    )
}

#[test]
fn router_topk_is_the_router_product_then_the_choice() {
    // moe_router_topk against the router's product in f64 (rounded to the dtype, as the
    // product's output is) and the CPU's choice from those logits: the ids equal, the weights to
    // f32 rounding. f32 rows of random values (the logits' f32 sums off by about 1e-7, far
    // below the gaps between the chosen); bf16 rows of sixteenths in -1/2..1/2, whose sums are
    // exact and whose logits, rounded to bf16, tie often (the lower expert first). Hidden widths
    // with and without a
    // tail past the runs of 8; up to 9 tokens (the last block's four warps take several each).
    let d = device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(37);
    let (mut checked, mut worst) = (0, 0.0f64);
    for (tokens, experts, hidden, top) in [
        (1, 128, 2048, 8),
        (4, 64, 520, 8),
        (3, 6, 100, 2),
        (9, 8, 256, 1),
    ] {
        for dtype in [DType::F32, DType::BF16] {
            let mut draw = |n: usize| -> Vec<f32> {
                (0..n)
                    .map(|_| match dtype {
                        DType::F32 => (rng.random::<f32>() * 2.0 - 1.0) / (hidden as f32).sqrt(),
                        _ => f32::from(rng.random_range(-8i8..=8)) / 16.0,
                    })
                    .collect()
            };
            let (h, w) = (draw(tokens * hidden), draw(experts * hidden));
            let up = |v: &[f32], dims: &[usize]| {
                let t = Tensor::from_vec(v.to_vec(), dims, &Cpu::Cpu).unwrap();
                upload(&d, &t.to_dtype(cdtype(dtype)).unwrap())
            };
            let (hb, wb) = (up(&h, &[tokens, hidden]), up(&w, &[experts, hidden]));
            let (hl, wl) = (
                Layout::contiguous(&[tokens, hidden]),
                Layout::contiguous(&[experts, hidden]),
            );
            let logits: Vec<f32> = (0..tokens * experts)
                .map(|i| {
                    let (t, e) = (i / experts, i % experts);
                    let dot: f64 = (0..hidden)
                        .map(|j| f64::from(h[t * hidden + j]) * f64::from(w[e * hidden + j]))
                        .sum();
                    rounded(dot as f32, dtype)
                })
                .collect();
            for renorm in [true, false] {
                let (ids, weights) = choice_values(
                    &d,
                    rq::moe_router_topk(
                        &d,
                        Operand::new(&hb, dtype, &hl),
                        Operand::new(&wb, dtype, &wl),
                        top,
                        renorm,
                    )
                    .unwrap(),
                );
                let (want_ids, want_w) = cpu_topk(&logits, (tokens, experts), top, renorm);
                let what =
                    format!("{tokens}x{experts} hidden {hidden} top {top} {dtype} renorm {renorm}");
                for i in 0..tokens * top {
                    assert_eq!(ids[i] as u32, want_ids[i], "{what} at {i}");
                    let (g, w) = (weights[i], f64::from(want_w[i]));
                    worst = worst.max((g - w).abs() / w.abs().max(1e-3));
                    assert!(
                        (g - w).abs() <= 4e-6 * w.abs().max(1e-3),
                        "{what} at {i}: {g} vs {w}"
                    );
                }
                checked += 1;
            }
        }
    }
    // the router in another dtype than h, a width of its own, more experts than a block holds
    let buf = d.alloc(1 << 16).unwrap();
    let call = |r_dtype: DType, r_dims: &[usize], top: usize| {
        let (hl, rl) = (Layout::contiguous(&[2, 64]), Layout::contiguous(r_dims));
        rq::moe_router_topk(
            &d,
            Operand::new(&buf, DType::F32, &hl),
            Operand::new(&buf, r_dtype, &rl),
            top,
            true,
        )
    };
    assert!(call(DType::F32, &[8, 64], 2).is_ok());
    let e = call(DType::BF16, &[8, 64], 2).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    for (dims, top) in [
        (&[8usize, 32][..], 2),
        (&[8, 64], 9),
        (&[513, 8], 2),
        (&[8, 64], 0),
    ] {
        let e = call(DType::F32, dims, top).unwrap_err();
        assert!(
            matches!(e, Error::ShapeMismatch { .. }),
            "{dims:?} top {top}: {e}"
        );
    }
    println!("moe_router_topk: {checked} shape x dtype x renorm cases, weights within {worst:.2e} (relative)");
}

#[test]
fn decode_moe_kernels_are_the_ops_they_replace() {
    // moe_topk against the CPU's softmax, stable descending sort, gather and renormalization
    // (the ids equal, the weights to f32 rounding: the softmax sums in another order; equal
    // logits pick the lower experts); moe_matvec_q8 on activations quantized apart against
    // moe_matvec of the float rows (bit for bit), and with weights against the pairs' products
    // scaled and summed in slot order (bit for bit); a bad id adds nothing, or is an error.
    let d = device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(31);
    let mut worst = 0.0f64;
    for (tokens, experts, top) in [(5, 64, 8), (3, 128, 8), (2, 8, 1), (1, 6, 6)] {
        let mut logits = uniform(&mut rng, tokens * experts)
            .into_iter()
            .map(|v| v * 4.0)
            .collect::<Vec<f32>>();
        // the last row all equal: the first `top` experts, each 1 / top
        logits[(tokens - 1) * experts..].fill(0.5);
        let lb = d.htod(&logits).unwrap();
        let ll = Layout::contiguous(&[tokens, experts]);
        for renorm in [true, false] {
            let (ids, weights) = choice_values(
                &d,
                rq::moe_topk(
                    &d,
                    Operand::new(lb.as_buffer(), DType::F32, &ll),
                    top,
                    renorm,
                )
                .unwrap(),
            );
            let (want_ids, want_w) = cpu_topk(&logits, (tokens, experts), top, renorm);
            for i in 0..tokens * top {
                assert_eq!(
                    ids[i] as u32, want_ids[i],
                    "topk {tokens}x{experts} top {top} at {i}"
                );
                // exp to an ulp or two, the softmax's sums in another order
                let (g, w) = (weights[i], f64::from(want_w[i]));
                worst = worst.max((g - w).abs() / w.abs().max(1e-3));
                assert!(
                    (g - w).abs() <= 2e-6 * w.abs().max(1e-3),
                    "topk {tokens}x{experts} top {top} renorm {renorm} at {i}: {g} vs {w}"
                );
            }
        }
        let bad = rq::moe_topk(
            &d,
            Operand::new(lb.as_buffer(), DType::F32, &ll),
            experts + 1,
            true,
        )
        .unwrap_err();
        assert!(matches!(bad, Error::ShapeMismatch { .. }), "{bad}");
    }
    println!("moe_topk: weights within {worst:.2e} of the CPU's (relative)");

    // 70 rows: moe_q8's last warp takes two of its four
    let (experts, n, k, tokens, top) = (6, 70, 512, 3, 2);
    let ids_host: Vec<u32> = vec![4, 1, 0, 5, 2, 4];
    let ids = d.htod(&ids_host).unwrap();
    let il = Layout::contiguous(&[tokens, top]);
    let topw_host: Vec<f32> = uniform(&mut rng, tokens * top);
    let topw = d.htod(&topw_host).unwrap();
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q6K,
    ] {
        let q = quantized(ty, experts * n, k, 41);
        let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
        let w = experts_of(&blocks, ty, (experts, n, k));
        let scheme = ty.q8_scheme().unwrap();
        for slots in [1, top] {
            let xs = uniform(&mut rng, tokens * slots * k);
            let xb = d.htod(&xs).unwrap();
            let xl = Layout::contiguous(&[tokens, slots, k]);
            let ids_op = Operand::new(ids.as_buffer(), DType::U32, &il);
            let want = rq::moe_matvec(
                &d,
                w,
                (Operand::new(xb.as_buffer(), DType::F32, &xl), ids_op),
                false,
            )
            .unwrap();
            let want = download(&d, &want);
            let x2 = Layout::contiguous(&[tokens * slots, k]);
            let xq = rq::Q8Activations {
                buffer: rq::quantize_q8(&d, Operand::new(xb.as_buffer(), DType::F32, &x2), scheme)
                    .unwrap(),
                rows: tokens * slots,
                k,
                scheme,
            };
            let got = rq::moe_matvec_q8(&d, w, (&xq, ids_op), None, (DType::F32, true)).unwrap();
            assert!(
                download(&d, &got) == want,
                "{ty} slots {slots}: pairs' products"
            );
            // each token's weighted sum, in slot order
            let pairs = values(&want, DType::F32);
            let tl = Layout::contiguous(&[tokens, top]);
            let topw_op = Operand::new(topw.as_buffer(), DType::F32, &tl);
            let got =
                rq::moe_matvec_q8(&d, w, (&xq, ids_op), Some(topw_op), (DType::F32, true)).unwrap();
            let got = values(&download(&d, &got), DType::F32);
            for t in 0..tokens {
                for j in 0..n {
                    let mut sum = 0.0f32;
                    for s in 0..top {
                        sum += pairs[(t * top + s) * n + j] as f32 * topw_host[t * top + s];
                    }
                    assert_eq!(
                        got[t * n + j] as f32,
                        sum,
                        "{ty} slots {slots}: token {t} row {j}"
                    );
                }
            }
            // the weights' shape must be the ids'
            let wrong = Layout::contiguous(&[top, tokens]);
            let e = rq::moe_matvec_q8(
                &d,
                w,
                (&xq, ids_op),
                Some(Operand::new(topw.as_buffer(), DType::F32, &wrong)),
                (DType::F32, true),
            )
            .unwrap_err();
            assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
        }
        // an id past the experts: nothing added unchecked, an error checked
        let bad_ids = d.htod(&[3u32, 9]).unwrap();
        let bl = Layout::contiguous(&[1, 2]);
        let x1 = d.htod(&uniform(&mut rng, k)).unwrap();
        let x1q = rq::Q8Activations {
            buffer: rq::quantize_q8(
                &d,
                Operand::new(x1.as_buffer(), DType::F32, &Layout::contiguous(&[1, k])),
                scheme,
            )
            .unwrap(),
            rows: 1,
            k,
            scheme,
        };
        let one_w = d.htod(&[0.75f32, 0.25]).unwrap();
        let bad = Operand::new(bad_ids.as_buffer(), DType::U32, &bl);
        let one = Operand::new(one_w.as_buffer(), DType::F32, &bl);
        let pairs = rq::moe_matvec_q8(&d, w, (&x1q, bad), None, (DType::F32, false)).unwrap();
        let pairs = values(&download(&d, &pairs), DType::F32);
        let summed = rq::moe_matvec_q8(&d, w, (&x1q, bad), Some(one), (DType::F32, false)).unwrap();
        let summed = values(&download(&d, &summed), DType::F32);
        for j in 0..n {
            assert_eq!(pairs[n + j], 0.0, "{ty}: masked pair");
            assert_eq!(summed[j] as f32, pairs[j] as f32 * 0.75, "{ty}: row {j}");
        }
        let e = rq::moe_matvec_q8(&d, w, (&x1q, bad), Some(one), (DType::F32, true)).unwrap_err();
        assert!(matches!(e, Error::IndexOutOfRange { index: 9, .. }), "{e}");
    }
}

/// Each row's softmax on the CPU as candle-nn's `softmax_last_dim` computes it: exp(x - max) / sum.
fn softmax_rows(x: &Tensor) -> Tensor {
    let max = x.max_keepdim(1).unwrap();
    let e = x.broadcast_sub(&max).unwrap().exp().unwrap();
    e.broadcast_div(&e.sum_keepdim(1).unwrap()).unwrap()
}

#[test]
fn bad_input_is_a_typed_error() {
    let d = device();
    let blas = Blas::new(&d).unwrap();
    // whole blocks of Q4_0 (18 bytes) and Q8_0 (34)
    let buf = d.alloc(18 * 34 * 7).unwrap();
    // k not a multiple of the block
    let w = QWeights {
        buffer: &buf,
        ty: GgmlType::Q4_0,
        rows: 2,
        k: 48,
    };
    let e = rq::dequantize(&d, w, DType::F32).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("q4_0"),
        "{e}"
    );
    // more rows than the buffer holds
    let w = QWeights {
        buffer: &buf,
        ty: GgmlType::Q8_0,
        rows: 1000,
        k: 256,
    };
    assert!(matches!(
        rq::dequantize(&d, w, DType::F32).unwrap_err(),
        Error::SizeMismatch { .. }
    ));
    let w = QWeights {
        buffer: &buf,
        ty: GgmlType::Q8_0,
        rows: 4,
        k: 256,
    };
    // an output dtype with no kernel
    assert!(matches!(
        rq::dequantize(&d, w, DType::U8).unwrap_err(),
        Error::UnsupportedDType { .. }
    ));
    // activations of the wrong dtype or width
    let xl = Layout::contiguous(&[2, 256]);
    let e = rq::matmul(&blas, w, Operand::new(&buf, DType::I64, &xl)).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
    let xl = Layout::contiguous(&[2, 128]);
    let e = rq::matmul(&blas, w, Operand::new(&buf, DType::F32, &xl)).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // a mixture of experts: float experts, a bad split, ids of another shape or dtype
    let ids = d.alloc_zeroed(64).unwrap();
    let xl = Layout::contiguous(&[2, 1, 256]);
    let il = Layout::contiguous(&[2, 2]);
    let x = Operand::new(&buf, DType::F32, &xl);
    let moe = |w: QWeights<'_>, experts, ids: Operand<'_>| {
        rq::moe_matvec(
            &d,
            rq::QExperts {
                weights: w,
                experts,
            },
            (x, ids),
            false,
        )
        .unwrap_err()
    };
    let f32w = QWeights {
        ty: GgmlType::F32,
        rows: 2,
        ..w
    };
    let e = moe(f32w, 2, Operand::new(&ids, DType::U32, &il));
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("f32"),
        "{e}"
    );
    let e = moe(w, 3, Operand::new(&ids, DType::U32, &il));
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let il3 = Layout::contiguous(&[3, 2]);
    let e = moe(w, 2, Operand::new(&ids, DType::U32, &il3));
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = moe(w, 2, Operand::new(&ids, DType::I64, &il));
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
}

/// The q8 form as the device lays it out (m * k bytes, then per 32 values an f32 scale and two
/// i16 sums): the values it stands for, one quant step of each (its scale), and whether every
/// record's sums are those of its bytes.
fn q8_values(form: &[u8], m: usize, k: usize) -> (Vec<f32>, Vec<f32>, bool) {
    let (bytes, records) = form.split_at(m * k);
    let mut values = Vec::with_capacity(m * k);
    let mut steps = Vec::with_capacity(m * k);
    let mut sums_agree = true;
    for (s, rec) in records.chunks_exact(8).take(m * k / 32).enumerate() {
        let d = f32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
        let sums = [
            i16::from_le_bytes([rec[4], rec[5]]),
            i16::from_le_bytes([rec[6], rec[7]]),
        ];
        let q = &bytes[s * 32..(s + 1) * 32];
        for (h, half) in q.chunks_exact(16).enumerate() {
            let sum: i16 = half.iter().map(|&b| i16::from(b as i8)).sum();
            sums_agree &= sum == sums[h];
        }
        values.extend(q.iter().map(|&b| d * f32::from(b as i8)));
        steps.extend([d.abs(); 32]);
    }
    (values, steps, sums_agree)
}

/// Values rounded to `dtype` as a store of it rounds them.
fn rounded(v: f32, dtype: DType) -> f32 {
    match dtype {
        DType::F16 => half::f16::from_f32(v).to_f32(),
        DType::BF16 => half::bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

#[test]
fn fused_q8_producers_write_the_q8_form_of_the_ops_they_replace() {
    // rms_norm_q8 (with and without the residual add) and swiglu_q8 against the q8 form of the
    // float ops' result computed on the host: every value within one quant step (a value on a
    // rounding boundary may go either way: the norm's sum of squares and the exponential are
    // rounded differently on the two sides), each record's sums those of its bytes.
    let d = device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut checked = 0;
    // the float norm's largest difference from f64 (relative), by dtype
    let (mut worst_f32, mut worst_bf16) = (0.0f64, 0.0f64);
    for scheme in [Q8Scheme::Q8_0, Q8Scheme::Q8_1, Q8Scheme::Q8K] {
        for dtype in [DType::F32, DType::BF16] {
            // 4096: a run of 8 values a thread; 8192: two runs a thread, in registers (512
            // threads); 16384: rows read again after the reduction
            for (m, k) in [(1, 512), (3, 4096), (1, 8192), (2, 16384)] {
                let mut draw = |n: usize, scale: f32| -> Vec<f32> {
                    (0..n)
                        .map(|_| rounded((rng.random::<f32>() * 2.0 - 1.0) * scale, dtype))
                        .collect()
                };
                let (x, r, alpha) = (draw(m * k, 3.0), draw(m * k, 1.0), draw(k, 1.5));
                let host = |v: &[f32], dims: &[usize]| {
                    let t = Tensor::from_vec(v.to_vec(), dims, &Cpu::Cpu).unwrap();
                    upload(&d, &t.to_dtype(cdtype(dtype)).unwrap())
                };
                let (xb, rb, ab) = (host(&x, &[m, k]), host(&r, &[m, k]), host(&alpha, &[k]));
                let (xl, al) = (Layout::contiguous(&[m, k]), Layout::contiguous(&[k]));
                let eps = 1e-5f32;
                // the float norm too (a router's input) in two of the three
                for (with_residual, float) in [(false, true), (true, false), (true, true)] {
                    let s: Vec<f32> = if with_residual {
                        x.iter()
                            .zip(&r)
                            .map(|(a, b)| rounded(a + b, dtype))
                            .collect()
                    } else {
                        x.clone()
                    };
                    let mut want = Vec::with_capacity(m * k);
                    for row in s.chunks_exact(k) {
                        let ss: f32 = row.iter().map(|v| v * v).sum();
                        let scale = 1.0 / (ss / k as f32 + eps).sqrt();
                        want.extend(
                            row.iter()
                                .zip(&alpha)
                                .map(|(v, a)| rounded(v * scale * a, dtype)),
                        );
                    }
                    let residual = with_residual.then(|| Operand::new(&rb, dtype, &xl));
                    let rq::NormQ8 { sum, q8, normed } = rq::rms_norm_q8(
                        &d,
                        Operand::new(&xb, dtype, &xl),
                        residual,
                        Operand::new(&ab, dtype, &al),
                        (eps, scheme),
                        float,
                    )
                    .unwrap();
                    assert_eq!(normed.is_some(), float);
                    if let Some(normed) = normed {
                        let worst = if dtype == DType::F32 {
                            &mut worst_f32
                        } else {
                            &mut worst_bf16
                        };
                        // against the norm in f64. f32: the sum of squares (at most 32 values
                        // a thread in sequence, a warp's 5 levels, 16 warps in sequence: 52
                        // roundings of positive terms, under 3.1e-6 of ss, half that of the
                        // scale) and two products' roundings, 1.7e-6 in all; bf16: the value's
                        // rounding, a unit in the last place
                        let tol = if dtype == DType::F32 {
                            2e-6
                        } else {
                            2f64.powi(-7)
                        };
                        let exact: Vec<f64> = s
                            .chunks_exact(k)
                            .flat_map(|row| {
                                let ss: f64 =
                                    row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
                                let scale = 1.0 / (ss / k as f64 + f64::from(eps)).sqrt();
                                row.iter()
                                    .zip(&alpha)
                                    .map(|(&v, &a)| f64::from(v) * scale * f64::from(a))
                                    .collect::<Vec<_>>()
                            })
                            .collect();
                        for (i, (g, w)) in values(&download(&d, &normed), dtype)
                            .iter()
                            .zip(&exact)
                            .enumerate()
                        {
                            let w = *w;
                            *worst = worst.max((g - w).abs() / w.abs().max(1e-30));
                            assert!(
                                (g - w).abs() <= tol * w.abs() + 1e-30,
                                "{scheme:?} {dtype} ({m}, {k}) residual {with_residual}: normed[{i}] {g} vs {w}"
                            );
                        }
                    }
                    assert_eq!((q8.rows, q8.k, q8.scheme), (m, k, scheme));
                    if let Some(sum) = sum {
                        let s64: Vec<f64> = s.iter().map(|&v| f64::from(v)).collect();
                        assert_eq!(
                            values(&download(&d, &sum), dtype),
                            s64,
                            "{scheme:?} {dtype}"
                        );
                    }
                    let form = download(&d, &q8.buffer);
                    compare_q8(
                        &form,
                        &want,
                        (m, k),
                        scheme,
                        &format!("rms_norm_q8 {scheme:?} {dtype} residual {with_residual}"),
                    );
                    checked += 1;
                }
                // swiglu over (m, 2 * (k / 2)): [g | u] rows
                let w = k / 2;
                if w % scheme.block() == 0 {
                    let silu = |g: f32| rounded(g / (1.0 + (-g).exp()), dtype);
                    let want: Vec<f32> = x
                        .chunks_exact(k)
                        .flat_map(|row| {
                            let (g, u) = row.split_at(w);
                            g.iter()
                                .zip(u)
                                .map(|(g, u)| rounded(silu(*g) * u, dtype))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    let q8 = rq::swiglu_q8(&d, Operand::new(&xb, dtype, &xl), scheme).unwrap();
                    assert_eq!((q8.rows, q8.k), (m, w));
                    let form = download(&d, &q8.buffer);
                    compare_q8(
                        &form,
                        &want,
                        (m, w),
                        scheme,
                        &format!("swiglu_q8 {scheme:?} {dtype}"),
                    );
                    checked += 1;
                }
            }
        }
    }
    // widths the scheme's blocks do not divide, a residual of other dims
    let x = d.alloc(3 * 96 * 4).unwrap();
    let l = Layout::contiguous(&[3, 96]);
    let a = d.alloc(96 * 4).unwrap();
    let al = Layout::contiguous(&[96]);
    let xo = Operand::new(&x, DType::F32, &l);
    let e = rq::rms_norm_q8(
        &d,
        xo,
        None,
        Operand::new(&a, DType::F32, &al),
        (1e-5, Q8Scheme::Q8K),
        false,
    )
    .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let short = Layout::contiguous(&[2, 96]);
    let e = rq::rms_norm_q8(
        &d,
        xo,
        Some(Operand::new(&x, DType::F32, &short)),
        Operand::new(&a, DType::F32, &al),
        (1e-5, Q8Scheme::Q8_0),
        false,
    )
    .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = rq::swiglu_q8(&d, xo, Q8Scheme::Q8K).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    println!(
        "fused q8 producers: {checked} scheme x dtype x shape cases; the float norm within \
         {worst_f32:.2e} (f32), {worst_bf16:.2e} (bf16) of f64"
    );
}

/// The q8 form `form` of (m, k) activations against the host's q8 form of `want`.
fn compare_q8(form: &[u8], want: &[f32], (m, k): (usize, usize), scheme: Q8Scheme, what: &str) {
    assert_eq!(form.len(), rq::q8_bytes(m, k), "{what}");
    let (got, steps, sums_agree) = q8_values(form, m, k);
    assert!(sums_agree, "{what}: a record's sums are not its bytes'");
    let model = Q8Model::of(want, scheme).values();
    for (i, ((g, w), step)) in got.iter().zip(&model).zip(&steps).enumerate() {
        assert!(
            (g - w).abs() <= step * 1.001 + 1e-30,
            "{what} at {i}: {g} against {w} (one step {step})"
        );
    }
}

#[test]
fn matmul_q8_of_q8_activations_matches_the_cpu_qmatmul() {
    // Activations quantized on the host as the CPU quantizes them, through matmul_q8: the
    // integer sums without their quantizing launch (the mat-vec's; from 9 to 64 rows the int8
    // matrix units' where the device has them), against the CPU's QMatMul of the float
    // activations (which quantizes them the same way).
    let d = device();
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let (n, k) = (37, 512);
    let mut checked = 0;
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q6K,
    ] {
        let q = quantized(ty, n, k, 21);
        let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
        let cpu_qmm = candle_core::quantized::QMatMul::from_qtensor(q).unwrap();
        let w = QWeights {
            buffer: &blocks,
            ty,
            rows: n,
            k,
        };
        let scheme = ty.q8_scheme().unwrap();
        for m in [1, 3, 9, 33, 70] {
            let xs: Vec<f32> = (0..m * k)
                .map(|_| rng.random::<f32>() * 2.0 - 1.0)
                .collect();
            let x = Tensor::from_vec(xs.clone(), (m, k), &Cpu::Cpu).unwrap();
            let want = f64s(&candle_core::Module::forward(&cpu_qmm, &x).unwrap());
            let scale = want.iter().fold(1e-3f64, |a, v| a.max(v.abs()));
            let form = Q8Model::of(&xs, scheme).layout();
            let buffer = d.alloc(form.len()).unwrap();
            d.copy_htod(&form, &buffer, 0).unwrap();
            let q8 = rq::Q8Activations {
                buffer,
                rows: m,
                k,
                scheme,
            };
            let got = rq::matmul_q8(&d, w, &q8, DType::F32).unwrap();
            let got = values(&download(&d, &got), DType::F32);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * scale,
                    "{ty} ({m}, {n}, {k}) at {i}: {g} vs {w}"
                );
            }
            checked += 1;
            // activations of another form, or another width: typed errors
            let other = if scheme == Q8Scheme::Q8K {
                Q8Scheme::Q8_0
            } else {
                Q8Scheme::Q8K
            };
            let wrong = rq::Q8Activations {
                scheme: other,
                ..q8
            };
            let e = rq::matmul_q8(&d, w, &wrong, DType::F32).unwrap_err();
            assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
        }
    }
    println!("matmul_q8: {checked} type x batch cases");
}

//! GPU tests of rocm-quantized against Candle 0.11.1's CPU backend: the same quantized blocks
//! (Candle's own `QTensor::quantize` of random values) on both sides.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{DType as C, Device as Cpu, Tensor};
use rand::{Rng, SeedableRng};
use rocm_blas::Blas;
use rocm_quantized::{self as rq, DType, Error, GgmlType, Layout, Operand, QWeights};
use rocm_test_support::*;

fn ggml(ty: GgmlType) -> GgmlDType {
    match ty {
        GgmlType::F32 => GgmlDType::F32,
        GgmlType::F16 => GgmlDType::F16,
        GgmlType::BF16 => GgmlDType::BF16,
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q5_1 => GgmlDType::Q5_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q8_1 => GgmlDType::Q8_1,
        GgmlType::Q2K => GgmlDType::Q2K,
        GgmlType::Q3K => GgmlDType::Q3K,
        GgmlType::Q4K => GgmlDType::Q4K,
        GgmlType::Q5K => GgmlDType::Q5K,
        GgmlType::Q6K => GgmlDType::Q6K,
        GgmlType::Q8K => GgmlDType::Q8K,
    }
}

/// A (rows, k) CPU tensor of random values spread over a few magnitudes, quantized to `ty`.
fn quantized(ty: GgmlType, rows: usize, k: usize, seed: u64) -> QTensor {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let v: Vec<f32> = (0..rows * k)
        .map(|i| {
            let scale = [0.01f32, 1.0, 30.0][(i / 97) % 3];
            (rng.random::<f32>() * 2.0 - 1.0) * scale
        })
        .collect();
    let t = Tensor::from_vec(v, (rows, k), &Cpu::Cpu).unwrap();
    QTensor::quantize(&t, ggml(ty)).unwrap()
}

fn bytes_of_dtype(t: &Tensor, dtype: DType) -> Vec<u8> {
    let t = match dtype {
        DType::F16 => t.to_dtype(C::F16).unwrap(),
        DType::BF16 => t.to_dtype(C::BF16).unwrap(),
        _ => t.clone(),
    };
    bytes_of(&t)
}

#[test]
fn dequantize_is_bit_exact_with_the_cpu_for_every_type() {
    let d = device();
    let mut checked = 0;
    for ty in GgmlType::ALL {
        for (rows, k) in [(1, 256), (3, 512), (17, 4096)] {
            let q = quantized(ty, rows, k, (rows * k) as u64);
            let blocks = d.htod(&q.data().unwrap()).unwrap();
            let want = q.dequantize(&Cpu::Cpu).unwrap();
            let w = QWeights {
                buffer: blocks.as_buffer(),
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
        let blocks = d.htod(&q.data().unwrap()).unwrap();
        let ids_host: Vec<u32> = vec![3, 0, 49, 3, 17, 22];
        let ids = d.htod(&ids_host).unwrap();
        let il = Layout::contiguous(&[2, 3]);
        let w = QWeights {
            buffer: blocks.as_buffer(),
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

#[test]
fn matmul_matches_the_cpu_qmatmul() {
    let d = device();
    let blas = Blas::new(&d).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut checked = 0;
    for ty in GgmlType::ALL {
        for (m, n, k) in [(1, 33, 256), (3, 64, 512), (9, 17, 4096)] {
            let q = quantized(ty, n, k, (n + k) as u64);
            let blocks = d.htod(&q.data().unwrap()).unwrap();
            let xs: Vec<f32> = (0..m * k)
                .map(|_| rng.random::<f32>() * 2.0 - 1.0)
                .collect();
            let x = Tensor::from_vec(xs.clone(), (m, k), &Cpu::Cpu).unwrap();
            // the reference: the CPU's dequantized weights in f64
            let wd = q.dequantize(&Cpu::Cpu).unwrap();
            let want = x
                .to_dtype(C::F64)
                .unwrap()
                .matmul(&wd.to_dtype(C::F64).unwrap().t().unwrap())
                .unwrap();
            let want: Vec<f64> = want.flatten_all().unwrap().to_vec1().unwrap();
            let w = QWeights {
                buffer: blocks.as_buffer(),
                ty,
                rows: n,
                k,
            };
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let xb = upload(&d, &x.to_dtype(cdtype(dtype)).unwrap());
                let xl = Layout::contiguous(&[m, k]);
                let got = rq::matmul(&blas, w, Operand::new(&xb, dtype, &xl)).unwrap();
                let got = values(&download(&d, &got), dtype);
                let scale = want.iter().fold(1e-3f64, |a, v| a.max(v.abs()));
                let tol = match dtype {
                    DType::F32 => 1e-5,
                    _ => 2e-2,
                };
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= tol * scale,
                        "{ty} {dtype} ({m}, {n}, {k}) at {i}: {g} vs {w}"
                    );
                }
                checked += 1;
            }
        }
    }
    println!("quantized matmul: {checked} type x shape x dtype cases");
}

#[test]
fn bad_input_is_a_typed_error() {
    let d = device();
    let blas = Blas::new(&d).unwrap();
    let buf = d.alloc(1 << 12).unwrap();
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
}

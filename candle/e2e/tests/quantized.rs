//! Quantized (GGUF) ops through Candle's API on `Device::Rocm` (GPU tests), beyond Candle's
//! own `quantized_tests`: the mixture-of-experts product, which Candle only tests on CUDA.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, IndexOp, Module, Tensor};
use candle_rocm_e2e::SplitMix64;

fn random(rng: &mut SplitMix64, dims: &[usize], device: &Device) -> Tensor {
    let n = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    Tensor::from_vec(v, dims, device).unwrap()
}

fn f32s(t: &Tensor) -> Vec<f32> {
    let t = t.to_dtype(DType::F32).unwrap();
    t.flatten_all().unwrap().to_vec1().unwrap()
}

fn max_diff(a: &Tensor, b: &Tensor) -> (f32, f32) {
    let (a, b) = (f32s(a), f32s(b));
    assert_eq!(a.len(), b.len());
    let diff = a
        .iter()
        .zip(&b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    let scale = a.iter().fold(1e-3f32, |m, x| m.max(x.abs()));
    (diff, scale)
}

#[test]
fn indexed_moe_forward_is_each_tokens_expert_matmul() {
    let gpu = Device::new_rocm(0).unwrap();
    let mut rng = SplitMix64(17);
    let (experts, n, k, tokens, top) = (6, 96, 512, 5, 2);
    let ids_host: Vec<u32> = (0..tokens * top)
        .map(|i| ((i * 7 + 3) % experts) as u32)
        .collect();
    let ids = Tensor::from_vec(ids_host.clone(), (tokens, top), &gpu).unwrap();
    let w = random(&mut rng, &[experts, n, k], &gpu);
    for ty in [
        GgmlDType::Q8_0,
        GgmlDType::Q4_0,
        GgmlDType::Q4K,
        GgmlDType::Q6K,
        GgmlDType::Q2K,
    ] {
        let qw = QTensor::quantize(&w, ty).unwrap();
        let per_expert: Vec<QMatMul> = (0..experts)
            .map(|e| {
                // a tensor of its own: quantize reads the whole storage of a view (as on every
                // backend), and `copy` keeps the storage whole
                let values: Vec<f32> = w.i(e).unwrap().flatten_all().unwrap().to_vec1().unwrap();
                let expert = Tensor::from_vec(values, (n, k), &gpu).unwrap();
                QMatMul::from_qtensor(QTensor::quantize(&expert, ty).unwrap()).unwrap()
            })
            .collect();
        for slots in [1, top] {
            let x = random(&mut rng, &[tokens, slots, k], &gpu);
            for dtype in [DType::F32, DType::BF16] {
                let x = x.to_dtype(dtype).unwrap();
                let got = qw.indexed_moe_forward(&x, &ids).unwrap();
                assert_eq!(got.dims(), &[tokens, top, n]);
                assert_eq!(got.dtype(), dtype);
                for t in 0..tokens {
                    for s in 0..top {
                        let e = ids_host[t * top + s] as usize;
                        let xr = x
                            .i((t, if slots == 1 { 0 } else { s }))
                            .unwrap()
                            .unsqueeze(0)
                            .unwrap();
                        let want = per_expert[e].forward(&xr).unwrap().squeeze(0).unwrap();
                        let (diff, scale) = max_diff(&want, &got.i((t, s)).unwrap());
                        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-2 };
                        assert!(
                            diff <= tol * scale,
                            "{ty:?} {dtype:?} slots {slots} token {t} slot {s}: {diff} of {scale}"
                        );
                    }
                }
            }
        }
    }
    // ids of the wrong device or dtype: an error, not a panic
    let cpu_ids = Tensor::zeros((tokens, top), DType::U32, &Device::Cpu).unwrap();
    let qw = QTensor::quantize(&w, GgmlDType::Q8_0).unwrap();
    let x = random(&mut rng, &[tokens, 1, k], &gpu);
    assert!(qw.indexed_moe_forward(&x, &cpu_ids).is_err());
    let f_ids = Tensor::zeros((tokens, top), DType::F32, &gpu).unwrap();
    assert!(qw.indexed_moe_forward(&x, &f_ids).is_err());
}

//! candle-nn's mixture-of-experts products (`moe_gemm`, `moe_gemm_gguf`) off CUDA: on the CPU
//! (here, any machine) against references written in the test, and (with `gpu-tests`) on
//! `Device::Rocm` against the CPU. The routing is made as candle-transformers' `FusedMoe` makes
//! it: the top-k experts of random router logits, sorted by expert.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, IndexOp, Module, Tensor, D};
use candle_nn::moe::{moe_gemm, moe_gemm_gguf};
use candle_rocm_e2e::SplitMix64;

fn random(rng: &mut SplitMix64, dims: &[usize]) -> Tensor {
    let n = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

/// (top-k ids (tokens, topk), top-k weights, experts sorted, pair index sorted), as FusedMoe.
fn routing(rng: &mut SplitMix64, tokens: usize, experts: usize, topk: usize) -> [Tensor; 4] {
    let logits = random(rng, &[tokens, experts]);
    let probs = candle_nn::ops::softmax_last_dim(&logits).unwrap();
    let ids = probs
        .arg_sort_last_dim(false)
        .unwrap()
        .narrow(D::Minus1, 0, topk)
        .unwrap()
        .contiguous()
        .unwrap();
    let weights = probs.gather(&ids, D::Minus1).unwrap();
    let (sorted, order) = ids.flatten_all().unwrap().sort_last_dim(true).unwrap();
    [ids, weights, sorted, order]
}

/// The largest |a - b| of two tensors (any devices, any float dtype).
fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let f = |t: &Tensor| {
        t.to_device(&Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
    };
    (f(a) - f(b))
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

fn scale(v: &[f32]) -> f32 {
    v.iter().fold(1e-3f32, |m, x| m.max(x.abs()))
}

/// Each pair's expert product by hand: CPU `QMatMul` of that expert alone on that one row (the
/// arithmetic the routed CPU form groups), and the dequantized weights in f32.
fn gguf_reference(
    w: &QTensor,
    x: &Tensor,
    ids: &Tensor,
    pair_weights: Option<&Tensor>,
) -> (Vec<f32>, Vec<f32>) {
    let (experts, n, k) = w.shape().dims3().unwrap();
    let (_, topk) = ids.dims2().unwrap();
    let bytes = w.data().unwrap();
    let per = bytes.len() / experts;
    let dense = w.dequantize(&Device::Cpu).unwrap();
    let ids = ids.to_vec2::<u32>().unwrap();
    let (mut exact, mut loose) = (Vec::new(), Vec::new());
    for (t, row) in ids.iter().enumerate() {
        for (s, &e) in row.iter().enumerate() {
            let p = t * topk + s;
            let xr = if pair_weights.is_some() {
                x.i(p..p + 1).unwrap()
            } else {
                x.i(t..t + 1).unwrap()
            };
            let e = e as usize;
            let storage = candle_core::quantized::QStorage::from_data(
                std::borrow::Cow::Borrowed(&bytes[e * per..(e + 1) * per]),
                &Device::Cpu,
                w.dtype(),
            )
            .unwrap();
            let qmm = QMatMul::from_qtensor(QTensor::new(storage, (n, k)).unwrap()).unwrap();
            let mut a = qmm
                .forward(&xr)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let mut b = xr
                .matmul(&dense.i(e).unwrap().t().unwrap())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            if let Some(pw) = pair_weights {
                let g = pw.flatten_all().unwrap().to_vec1::<f32>().unwrap()[p];
                a.iter_mut().for_each(|v| *v *= g);
                b.iter_mut().for_each(|v| *v *= g);
            }
            exact.extend(a);
            loose.extend(b);
        }
    }
    (exact, loose)
}

#[test]
fn moe_gemm_gguf_on_the_cpu_is_each_pairs_expert_product() {
    let mut rng = SplitMix64(41);
    let mut checked = 0;
    for ty in [
        GgmlDType::Q4_0,
        GgmlDType::Q8_0,
        GgmlDType::Q4K,
        GgmlDType::Q6K,
    ] {
        for (experts, topk, tokens) in [(8, 1, 3), (8, 2, 7), (16, 8, 5)] {
            let (n, k) = (48, 512);
            let w = QTensor::quantize(&random(&mut rng, &[experts, n, k]), ty).unwrap();
            let [ids, pair_w, sorted, order] = routing(&mut rng, tokens, experts, topk);
            // gate/up form: one row per token, every slot reads it
            let x = random(&mut rng, &[tokens, k]);
            let y = moe_gemm_gguf(&x, &w, &None, &order, &sorted, topk, false, DType::F32).unwrap();
            assert_eq!(y.dims(), &[tokens * topk, n]);
            let got = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (exact, loose) = gguf_reference(&w, &x, &ids, None);
            // equal to f32 rounding: the CPU's QMatMul of several rows may sum in another order
            // than of one row (Q6_K differs in the last bits, Q4_0/Q8_0/Q4_K do not)
            let s = scale(&exact);
            for (g, e) in got.iter().zip(&exact) {
                assert!(
                    (g - e).abs() <= 1e-6 * s,
                    "{ty:?} {experts} experts, top {topk}, {tokens} tokens: {g} vs {e}"
                );
            }
            let s = scale(&loose);
            for (g, l) in got.iter().zip(&loose) {
                assert!((g - l).abs() <= 0.03 * s, "{ty:?}: {g} vs {l} (scale {s})");
            }
            // down form: a row per pair, scaled by the pair's weight
            let xp = random(&mut rng, &[tokens * topk, k]);
            let y = moe_gemm_gguf(
                &xp,
                &w,
                &Some(pair_w.clone()),
                &order,
                &sorted,
                topk,
                false,
                DType::F32,
            )
            .unwrap();
            let got = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (exact, _) = gguf_reference(&w, &xp, &ids, Some(&pair_w));
            for (g, e) in got.iter().zip(&exact) {
                assert!((g - e).abs() <= 1e-6 * scale(&exact), "{ty:?}: {g} vs {e}");
            }
            checked += 2;
        }
    }
    println!("moe_gemm_gguf on the CPU: {checked} cases");
}

#[test]
fn moe_gemm_on_the_cpu_is_each_pairs_expert_product() {
    let mut rng = SplitMix64(43);
    let (experts, n, k, tokens, topk) = (6, 40, 64, 9, 2);
    let w = random(&mut rng, &[experts, n, k]);
    let [ids, pair_w, sorted, order] = routing(&mut rng, tokens, experts, topk);
    let x = random(&mut rng, &[tokens, k]);
    let y = moe_gemm(&x, &w, &None, &order, &sorted, topk, true).unwrap();
    let xp = random(&mut rng, &[tokens * topk, k]);
    let yp = moe_gemm(&xp, &w, &Some(pair_w.clone()), &order, &sorted, topk, false).unwrap();
    let ids = ids.to_vec2::<u32>().unwrap();
    let pw = pair_w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    for (t, row) in ids.iter().enumerate() {
        for (s, &e) in row.iter().enumerate() {
            let p = t * topk + s;
            let we = w.i(e as usize).unwrap().t().unwrap();
            let want = x.i(t..t + 1).unwrap().matmul(&we).unwrap();
            let got = y.i(p..p + 1).unwrap();
            let d = max_diff(&got, &want);
            assert!(d <= 1e-5, "pair {p}: {d}");
            let want = (xp.i(p..p + 1).unwrap().matmul(&we).unwrap() * f64::from(pw[p])).unwrap();
            let got = yp.i(p..p + 1).unwrap();
            let d = max_diff(&got, &want);
            assert!(d <= 1e-5, "pair {p}, weighted: {d}");
        }
    }
}

#[test]
fn a_bad_routing_is_an_error() {
    let mut rng = SplitMix64(47);
    let (experts, n, k, tokens, topk) = (4, 8, 256, 3, 2);
    let w = QTensor::quantize(&random(&mut rng, &[experts, n, k]), GgmlDType::Q8_0).unwrap();
    let wf = random(&mut rng, &[experts, n, k]);
    let [_, _, sorted, order] = routing(&mut rng, tokens, experts, topk);
    let x = random(&mut rng, &[tokens, k]);
    // a routing of another length
    let short = order.narrow(0, 0, 5).unwrap();
    assert!(moe_gemm_gguf(&x, &w, &None, &short, &sorted, topk, false, DType::F32).is_err());
    assert!(moe_gemm(&x, &wf, &None, &short, &sorted, topk, false).is_err());
    // an expert past the weights
    let past = Tensor::new(&[0u32, 0, 1, 1, 2, 9], &Device::Cpu).unwrap();
    let e = moe_gemm_gguf(&x, &w, &None, &order, &past, topk, false, DType::F32).unwrap_err();
    assert!(e.to_string().contains("expert id 9"), "{e}");
    assert!(moe_gemm(&x, &wf, &None, &order, &past, topk, false).is_err());
    // inputs of another width
    let narrow = random(&mut rng, &[tokens, 128]);
    assert!(moe_gemm_gguf(&narrow, &w, &None, &order, &sorted, topk, false, DType::F32).is_err());
    assert!(moe_gemm(&narrow, &wf, &None, &order, &sorted, topk, false).is_err());
}

/// On `Device::Rocm` (the GPU suite): the same products as the CPU's routed form, for every
/// block type the quantized crate has, top-k 1/2/8, 8/64/128 experts, 1/7/64/513 tokens.
#[cfg(feature = "gpu-tests")]
mod rocm {
    use super::*;

    #[test]
    fn moe_gemm_gguf_on_rocm_matches_the_cpu() {
        let gpu = Device::new_rocm(0).unwrap();
        let mut rng = SplitMix64(53);
        let mut checked = 0;
        let types = [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
            GgmlDType::Q2K,
            GgmlDType::Q3K,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
        ];
        for ty in types {
            for (experts, topk, tokens) in [(8, 1, 1), (8, 2, 7), (64, 8, 64), (128, 8, 513)] {
                let (n, k) = (32, 256);
                let w = QTensor::quantize(&random(&mut rng, &[experts, n, k]), ty).unwrap();
                // the very same blocks on the device
                let blocks =
                    candle_core::quantized::QStorage::from_data(w.data().unwrap(), &gpu, ty)
                        .unwrap();
                let wg = QTensor::new(blocks, (experts, n, k)).unwrap();
                let [_, pair_w, sorted, order] = routing(&mut rng, tokens, experts, topk);
                let x = random(&mut rng, &[tokens, k]);
                let xp = random(&mut rng, &[tokens * topk, k]);
                let on = |t: &Tensor| t.to_device(&gpu).unwrap();
                for (input, weights) in [(&x, None), (&xp, Some(pair_w.clone()))] {
                    let cpu = moe_gemm_gguf(
                        input,
                        &w,
                        &weights,
                        &order,
                        &sorted,
                        topk,
                        false,
                        DType::F32,
                    )
                    .unwrap();
                    let gpu_w = weights.as_ref().map(on);
                    let got = moe_gemm_gguf(
                        &on(input),
                        &wg,
                        &gpu_w,
                        &on(&order),
                        &on(&sorted),
                        topk,
                        tokens > 1,
                        DType::F32,
                    )
                    .unwrap()
                    .to_device(&Device::Cpu)
                    .unwrap();
                    let (a, b) = (
                        cpu.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                        got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    );
                    let s = scale(&a);
                    for (i, (u, v)) in a.iter().zip(&b).enumerate() {
                        assert!(
                            (u - v).abs() <= 1e-5 * s,
                            "{ty:?} {experts} experts top {topk} {tokens} tokens at {i}: {u} vs {v}"
                        );
                    }
                    checked += 1;
                }
            }
        }
        println!("moe_gemm_gguf on rocm: {checked} cases");
    }

    #[test]
    fn moe_gemm_on_rocm_matches_the_cpu() {
        let gpu = Device::new_rocm(0).unwrap();
        let mut rng = SplitMix64(59);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let (experts, n, k, tokens, topk) = (8, 48, 128, 33, 2);
            let w = random(&mut rng, &[experts, n, k]).to_dtype(dtype).unwrap();
            let [_, pair_w, sorted, order] = routing(&mut rng, tokens, experts, topk);
            let x = random(&mut rng, &[tokens, k]).to_dtype(dtype).unwrap();
            let cpu = moe_gemm(&x, &w, &None, &order, &sorted, topk, true).unwrap();
            let on = |t: &Tensor| t.to_device(&gpu).unwrap();
            let got = moe_gemm(
                &on(&x),
                &on(&w),
                &None,
                &on(&order),
                &on(&sorted),
                topk,
                true,
            )
            .unwrap();
            let d = max_diff(&got, &cpu);
            let tol = if dtype == DType::F32 { 1e-4 } else { 0.1 };
            assert!(d <= tol, "{dtype:?}: {d}");
            // the down form, scaled by the pairs' weights
            let xp = random(&mut rng, &[tokens * topk, k])
                .to_dtype(dtype)
                .unwrap();
            let cpu =
                moe_gemm(&xp, &w, &Some(pair_w.clone()), &order, &sorted, topk, false).unwrap();
            let got = moe_gemm(
                &on(&xp),
                &on(&w),
                &Some(on(&pair_w)),
                &on(&order),
                &on(&sorted),
                topk,
                false,
            )
            .unwrap();
            let d = max_diff(&got, &cpu);
            assert!(d <= tol, "{dtype:?}, weighted: {d}");
        }
    }
}

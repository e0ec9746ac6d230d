//! Device graphs through Candle's API (GPU tests): a llama decode step captured once and
//! replayed gives the tokens and logits of the same step run eagerly, and the tokens of
//! candle-transformers' llama on the same weights, with the attention fused into one kernel or
//! run as separate ops.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_rocm_e2e::llama::{self, fnv1a, prompt, DrawnWeights, Generator};
use candle_rocm_e2e::static_llama::{self, StaticLlama};

const SEED: u64 = 7;

fn static_model(config: &candle_transformers::models::llama::Config, dev: &Device) -> StaticLlama {
    let weights = DrawnWeights::new(|name, n| llama::normal_values(SEED ^ fnv1a(name), n, 0.15));
    let vb = VarBuilder::from_backend(Box::new(&weights), DType::F32, dev.clone());
    StaticLlama::load(vb, config, 256).unwrap()
}

#[test]
fn a_captured_decode_step_replays_the_eager_one() {
    let dev = Device::new_rocm(0).unwrap();
    let config = llama::small_config();
    let model = static_model(&config, &dev);
    let prompt = prompt(9, config.vocab_size);
    let steps = 40;
    let (eager, eager_logits) = static_llama::greedy(&model, &prompt, steps, false).unwrap();
    let (replayed, replayed_logits) = static_llama::greedy(&model, &prompt, steps, true).unwrap();
    assert_eq!(eager.len(), steps);
    assert_eq!(replayed, eager, "tokens of the replayed step");
    assert_eq!(replayed_logits, eager_logits, "first logits, bit for bit");

    // candle-transformers' llama on the same weights (prompt in one pass, a growing cache).
    let mut reference = Generator::new(&config, SEED, DType::F32, &dev).unwrap();
    let greedy = reference.greedy(&prompt, steps, |_| {}).unwrap();
    assert_eq!(eager, greedy.tokens, "tokens of candle-transformers' llama");
    let diff = eager_logits
        .iter()
        .zip(&greedy.first_logits)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff < 1e-3, "first logits differ by {diff}");

    // Attention as separate ops (gemm, mask, softmax, gemm) instead of the fused kernel.
    let unfused = static_model(&config, &dev).with_unfused_attention();
    let (tokens, logits) = static_llama::greedy(&unfused, &prompt, steps, true).unwrap();
    assert_eq!(tokens, eager, "tokens with unfused attention");
    let diff = logits
        .iter()
        .zip(&eager_logits)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        diff < 1e-4,
        "first logits of the unfused attention differ by {diff}"
    );
}

#[test]
fn a_graph_keeps_its_outputs_and_returns_its_memory() {
    let dev = Device::new_rocm(0).unwrap();
    let Device::Rocm(rocm) = &dev else {
        unreachable!()
    };
    let x = (Tensor::arange(0f32, 4096., &dev).unwrap() * 1e-3).unwrap();
    let scale = Tensor::new(&[2f32], &dev).unwrap();
    // uncaptured once, then captured
    let run = || (x.broadcast_mul(&scale)?.exp()? + 1.0)?.sum_all();
    drop(run().unwrap());
    let before = rocm.inner().memory_stats();
    let (graph, out) = rocm.capture(run).unwrap();
    let reserved = rocm.inner().memory_stats().graph_reserved_bytes;
    assert!(reserved > 0, "the temporaries stay with the graph");
    let x_host = x.to_device(&Device::Cpu).unwrap();
    for s in [1f32, 0.5, -1.0] {
        scale
            .slice_set(&Tensor::new(&[s], &dev).unwrap(), 0, 0)
            .unwrap();
        graph.replay().unwrap();
        let got = out.to_scalar::<f32>().unwrap();
        let want = ((x_host.clone() * s as f64).unwrap().exp().unwrap() + 1.0)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(
            (got - want).abs() <= 1e-4 * want.abs(),
            "scale {s}: {got} vs {want}"
        );
    }
    drop(out);
    drop(graph);
    let after = rocm.inner().memory_stats();
    assert_eq!(after.graph_reserved_bytes, 0);
    assert_eq!(after.in_use_bytes, before.in_use_bytes);
    // A host read inside a capture is Candle's error, and the device carries on.
    let err = rocm.capture(|| x.to_vec1::<f32>()).unwrap_err();
    assert!(err.to_string().contains("capture"), "{err}");
    assert_eq!(
        x.narrow(0, 1, 2).unwrap().to_vec1::<f32>().unwrap(),
        x_host.narrow(0, 1, 2).unwrap().to_vec1::<f32>().unwrap()
    );
}

//! The decode issue's correctness measure on the real SmolLM2 GGUF (GPU test): along the CPU's
//! own greedy continuations of several prompts (512 positions), candle-transformers'
//! `quantized_llama` on `Device::Rocm` and the static llama (eager and with its decode step
//! captured; captured again with an f16 KV cache) must be as close to the CPU as the CPU is to
//! itself: mean KL divergence within
//! 1.5x the CPU's own, top-1 agreement at most 1 point below it (`candle_rocm_e2e::kld`).
//! The file comes from `CANDLE_ROCM_SMOLLM2_GGUF` (the GPU pack's run.sh joins and exports it);
//! without it the test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::{DType, Device};
use candle_rocm_e2e::kld;

#[test]
fn gguf_models_on_the_gpu_are_as_close_to_the_cpu_as_the_cpu_is_to_itself() {
    let path = std::env::var_os("CANDLE_ROCM_SMOLLM2_GGUF")
        .map(std::path::PathBuf::from)
        .expect("CANDLE_ROCM_SMOLLM2_GGUF must name the SmolLM2 GGUF (run.sh sets it)");
    let gpu = Device::new_rocm(0).unwrap();
    let reference = kld::CpuReference::cached(&path).unwrap();
    let own = reference.own().unwrap();
    assert!(own.positions >= 512, "{own}");
    println!(
        "CPU, prompt a token at a time: {own} (reference {})",
        if reference.cached {
            "from the cache"
        } else {
            "computed"
        }
    );
    let mut failures = Vec::new();
    for (what, run) in [
        (
            "quantized_llama",
            kld::quantized_llama(&path, &gpu, &reference),
        ),
        (
            "static llama, eager",
            kld::static_llama(&path, &gpu, &reference, (false, DType::F32)),
        ),
        (
            "static llama, captured",
            kld::static_llama(&path, &gpu, &reference, (true, DType::F32)),
        ),
        (
            "static llama, captured, f16 KV cache",
            kld::static_llama(&path, &gpu, &reference, (true, DType::F16)),
        ),
    ] {
        let (passed, detail) = kld::within(&run.unwrap(), &own);
        println!("{what}: {detail}");
        if !passed {
            failures.push(format!("{what}: {detail}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

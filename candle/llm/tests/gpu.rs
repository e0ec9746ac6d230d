//! The LLM runtime on `Device::Rocm` (a GPU must exist; built with `--features gpu-tests`):
//! each architecture's static model, eagerly and replaying a captured step, against
//! candle-transformers' quantized model of the same architecture on the CPU with the KL check
//! of tests/architectures.rs; several sequences stepped together (and as a batch's slots,
//! eagerly and captured) against each stepped alone;
//! draws on the device against the same draws on the CPU.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use candle_core::{Device, Tensor};
use candle_rocm_llm::kld::divergence;
use candle_rocm_llm::sampling::sample_with;
use candle_rocm_llm::{
    generate, generate_batch, Architecture, BatchDecoder, GenerateOptions, SamplingParams,
    StaticLlama,
};
use common::*;

fn gpu() -> Device {
    Device::new_rocm(0).expect("a ROCm device (the GPU tests need one)")
}

#[test]
fn every_architecture_on_the_gpu_is_as_close_to_its_cpu_reference_as_rounding_allows() {
    let dev = gpu();
    for arch in Architecture::ALL {
        let shape = match arch {
            Architecture::Qwen3 => Shape {
                head_dim: 32,
                ..SHAPE
            },
            _ => SHAPE,
        };
        let file = write_gguf(arch, shape, 11);
        // qwen3 against plain attention (tests/architectures.rs says why)
        let one_expert = (arch == Architecture::Qwen3).then(|| as_one_expert_qwen3moe(&file));
        let (ref_arch, ref_path) = match &one_expert {
            Some(f) => (Architecture::Qwen3Moe, &f.0),
            None => (arch, &file.0),
        };
        let r = reference(|| quantized_reference(ref_arch, ref_path));
        // the same reference code on the GPU: what the device's rounding alone moves
        let on_gpu = forced_run(
            || quantized_reference_on(ref_arch, ref_path, &dev),
            &r,
            &dev,
        );
        let device_rounding = divergence(&r.at_once, &on_gpu).unwrap();
        let (content, mut reader) = read(&file.0);
        let model = StaticLlama::from_gguf(&content, &mut reader, &dev, 128).unwrap();
        for captured in [false, true] {
            let what = format!("{} on the GPU (captured: {captured})", arch.name());
            let got = static_run(&model, &r, captured);
            check_with(&what, &r, &got, Some(&device_rounding));
        }
    }
}

/// Three prompts of a seeded llama file.
const PROMPTS: [&[u32]; 3] = [
    &[3, 41, 17, 200, 9, 77, 128],
    &[5, 6, 7, 8, 9],
    &[250, 1, 99],
];

/// The seeded llama file's static model on `dev`, 64 positions.
fn seeded_llama(dev: &Device) -> StaticLlama {
    let file = write_gguf(Architecture::Llama, SHAPE, 5);
    let (content, mut reader) = read(&file.0);
    StaticLlama::from_gguf(&content, &mut reader, dev, 64).unwrap()
}

#[test]
fn sequences_stepped_together_on_the_gpu_match_each_stepped_alone() {
    let dev = gpu();
    let (m, prompts) = (seeded_llama(&dev), PROMPTS);
    let (together, alone) = (prefilled(&m, &prompts), prefilled(&m, &prompts));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        let refs: Vec<_> = together.iter().collect();
        for (state, out) in alone.iter().zip(m.step_many(&refs).unwrap()) {
            // each follows its own greedy tokens: equal while the top-1 agrees (checked)
            let want = m.step(state).unwrap();
            a.push(out.logits.to_vec1::<f32>().unwrap());
            b.push(want.logits.to_vec1::<f32>().unwrap());
        }
    }
    let d = divergence(&b, &a).unwrap();
    println!("together against alone on the GPU: {d}");
    assert!(d.mean <= ROUNDING_FLOOR && d.top1 == 1.0, "{d}");
}

#[test]
fn a_batch_of_slots_on_the_gpu_matches_each_sequence_stepped_alone() {
    let dev = gpu();
    let (m, prompts) = (seeded_llama(&dev), PROMPTS);
    // the fused step of all slots at once, eagerly and replayed, against each alone
    for captured in [false, true] {
        let alone = prefilled(&m, &prompts);
        let mut batch = m.new_batch(prompts.len()).unwrap();
        for (i, p) in prompts.iter().enumerate() {
            m.prefill_slot(&mut batch, i, p).unwrap();
        }
        let mut decoder = BatchDecoder::new(&m, captured);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..10 {
            let out = decoder.step(&batch).unwrap();
            for (i, state) in alone.iter().enumerate() {
                // each follows its own greedy tokens: equal while the top-1 agrees (checked)
                let want = m.step(state).unwrap();
                a.push(out.logits.get(i).unwrap().to_vec1::<f32>().unwrap());
                b.push(want.logits.to_vec1::<f32>().unwrap());
            }
        }
        let d = divergence(&b, &a).unwrap();
        println!("a batch's slots against each alone on the GPU (captured: {captured}): {d}");
        assert!(d.mean <= ROUNDING_FLOOR && d.top1 == 1.0, "{d}");
    }
    // generation of the batch, captured, is each prompt's own greedy generation
    let options = GenerateOptions {
        max_tokens: 12,
        sampling: SamplingParams::greedy(),
        ..GenerateOptions::default()
    };
    let prompts: Vec<Vec<u32>> = prompts.iter().map(|p| p.to_vec()).collect();
    let together = generate_batch(&m, &prompts, &options, true, |_, _| Ok(true)).unwrap();
    for (p, g) in prompts.iter().zip(&together) {
        let alone = generate(&m, p, &options, |_| Ok(true)).unwrap();
        assert_eq!(g.tokens, alone.tokens);
    }
}

#[test]
fn draws_on_the_gpu_are_the_cpus() {
    let dev = gpu();
    let mut rng = candle_rocm_llm::sampling::SplitMix64(9);
    let row: Vec<f32> = (0..50_000)
        .map(|i| rng.unit_f32() * 12.0 + i as f32 * 1e-6)
        .collect();
    let cpu = Tensor::new(row.as_slice(), &Device::Cpu).unwrap();
    let on_gpu = cpu.to_device(&dev).unwrap();
    for p in [
        SamplingParams::default(),
        SamplingParams {
            top_k: 0,
            top_p: 0.9,
            min_p: 0.0,
            ..SamplingParams::default()
        },
    ] {
        for j in 0..20 {
            let u = (j as f32 + 0.5) / 20.0;
            let want = sample_with(&cpu, &p, u).unwrap().to_vec1::<u32>().unwrap();
            let got = sample_with(&on_gpu, &p, u)
                .unwrap()
                .to_vec1::<u32>()
                .unwrap();
            assert_eq!(got, want, "{p:?} u {u}");
        }
    }
}

//! The generation loop on a seeded GGUF llama, on the CPU: greedy generation is the static
//! model's greedy decoding; stop tokens, the caller, the budget and the cache's end each stop it
//! with their reason; sampled generations repeat under a seed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use candle_core::Device;
use candle_rocm_llm::{
    generate, greedy, Architecture, Decoder, GenerateOptions, SamplingParams, StaticLlama,
    StopReason,
};
use common::*;

fn model(max_len: usize) -> StaticLlama {
    let file = write_gguf(Architecture::Llama, SHAPE, 5);
    let (content, mut reader) = read(&file.0);
    StaticLlama::from_gguf(&content, &mut reader, &Device::Cpu, max_len).unwrap()
}

const PROMPT: [u32; 7] = [3, 41, 17, 200, 9, 77, 128];

fn greedy_options(max_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampling: SamplingParams::greedy(),
        ..GenerateOptions::default()
    }
}

#[test]
fn greedy_generation_is_greedy_decoding_and_streams_every_token() {
    let m = model(64);
    let (want, _) = greedy(&m, &PROMPT, 20, false).unwrap();
    let mut streamed = Vec::new();
    let g = generate(&m, &PROMPT, &greedy_options(20), |t| {
        streamed.push(t);
        Ok(true)
    })
    .unwrap();
    assert_eq!(g.tokens, want);
    assert_eq!(streamed, want);
    assert_eq!(g.stop, StopReason::MaxTokens);
}

#[test]
fn each_stop_has_its_reason() {
    let m = model(64);
    let (want, _) = greedy(&m, &PROMPT, 20, false).unwrap();
    // a stop token: generation ends before it, without it
    let stop = want[5];
    let first = want.iter().position(|&t| t == stop).unwrap();
    let options = GenerateOptions {
        stop_tokens: vec![stop],
        ..greedy_options(20)
    };
    let g = generate(&m, &PROMPT, &options, |_| Ok(true)).unwrap();
    assert_eq!(g.stop, StopReason::StopToken(stop));
    assert_eq!(g.tokens, want[..first]);
    // the caller
    let mut n = 0;
    let g = generate(&m, &PROMPT, &greedy_options(20), |_| {
        n += 1;
        Ok(n < 3)
    })
    .unwrap();
    assert_eq!(
        (g.stop, g.tokens.as_slice()),
        (StopReason::Caller, &want[..3])
    );
    // the cache's end: 12 positions hold the prompt's 7 and 5 generated, whose last step
    // gives a sixth token
    let small = model(12);
    let g = generate(&small, &PROMPT, &greedy_options(100), |_| Ok(true)).unwrap();
    assert_eq!(g.stop, StopReason::ContextFull);
    assert_eq!(g.tokens, want[..6]);
    // a decoder stepped past it says so
    let mut d = Decoder::new(&small, PROMPT[0], false).unwrap();
    d.prefill(&PROMPT).unwrap();
    for _ in 0..5 {
        d.next_token().unwrap();
    }
    let e = d.next_token().unwrap_err().to_string();
    assert!(e.contains("cache holds 12 positions"), "{e}");
    // a prompt with no room after it
    let e = generate(&small, &[1; 12], &greedy_options(1), |_| Ok(true)).unwrap_err();
    assert!(e.to_string().contains("leaves no position"), "{e}");
}

#[test]
fn sampled_generations_repeat_under_a_seed() {
    let m = model(64);
    let sampled = |seed, top_k| {
        let options = GenerateOptions {
            sampling: SamplingParams {
                seed,
                top_k,
                temperature: 1.0,
                min_p: 0.0,
                top_p: 1.0,
                ..SamplingParams::default()
            },
            ..greedy_options(24)
        };
        generate(&m, &PROMPT, &options, |_| Ok(true))
            .unwrap()
            .tokens
    };
    assert_eq!(sampled(1, 0), sampled(1, 0));
    assert_ne!(sampled(1, 0), sampled(2, 0));
    // one candidate: the draw is the greedy token, and it feeds the next step as greedy's does
    let (want, _) = greedy(&m, &PROMPT, 24, false).unwrap();
    assert_eq!(sampled(3, 1), want);
}

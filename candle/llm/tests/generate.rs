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

#[test]
fn sequences_stepped_together_match_each_stepped_alone() {
    let m = model(64);
    let prompts: [&[u32]; 3] = [
        &PROMPT,
        &[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        &[250, 1, 99, 3],
    ];
    let (together, alone) = (prefilled(&m, &prompts), prefilled(&m, &prompts));
    let mut worst = 0f32;
    for _ in 0..10 {
        let refs: Vec<_> = together.iter().collect();
        let outs = m.step_many(&refs).unwrap();
        for (state, out) in alone.iter().zip(&outs) {
            let want = m.step(state).unwrap();
            assert_eq!(
                out.next.to_vec1::<u32>().unwrap(),
                want.next.to_vec1::<u32>().unwrap()
            );
            let (a, b) = (
                out.logits.to_vec1::<f32>().unwrap(),
                want.logits.to_vec1::<f32>().unwrap(),
            );
            worst = a
                .iter()
                .zip(&b)
                .fold(worst, |w, (x, y)| w.max((x - y).abs()));
        }
    }
    println!("largest logit difference, together against alone: {worst:e}");
    // each row of a product is computed alone on the CPU: the same bits
    assert_eq!(worst, 0.0);
}

#[test]
fn a_batch_in_slots_steps_as_each_sequence_steps_alone() {
    let m = model(64);
    let prompts: [&[u32]; 3] = [&PROMPT, &[5, 6, 7, 8, 9, 10, 11, 12], &[250, 1, 99, 3]];
    let alone = prefilled(&m, &prompts);
    let mut batch = m.new_batch(prompts.len()).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        m.prefill_slot(&mut batch, i, p).unwrap();
        assert_eq!(batch.filled(i), p.len());
    }
    for _ in 0..8 {
        let out = m.step_batch(&batch).unwrap();
        let next = out.next.to_vec1::<u32>().unwrap();
        for (i, state) in alone.iter().enumerate() {
            let want = m.step(state).unwrap();
            assert_eq!(next[i], want.next.to_vec1::<u32>().unwrap()[0], "slot {i}");
            let got = out.logits.get(i).unwrap().to_vec1::<f32>().unwrap();
            // the slots' steps are the sequences' own on the CPU: the same bits
            assert_eq!(got, want.logits.to_vec1::<f32>().unwrap(), "slot {i}");
        }
    }
    // a slot emptied and filled again decodes its new prompt as a fresh sequence does
    batch.reset(1).unwrap();
    m.prefill_slot(&mut batch, 1, &PROMPT).unwrap();
    let fresh = prefilled(&m, &[&PROMPT]);
    let out = m.step_batch(&batch).unwrap();
    assert_eq!(
        out.logits.get(1).unwrap().to_vec1::<f32>().unwrap(),
        m.step(&fresh[0]).unwrap().logits.to_vec1::<f32>().unwrap()
    );
    // bad slots and counts: errors naming them
    assert!(m.new_batch(0).is_err());
    let e = m.prefill_slot(&mut batch, 3, &PROMPT).err().unwrap();
    assert!(e.to_string().contains("slot 3"), "{e}");
    assert!(batch.reset(7).is_err());
    let mut small = model(12).new_batch(1).unwrap();
    let short = model(12);
    short.prefill_slot(&mut small, 0, &PROMPT).unwrap();
    for _ in PROMPT.len()..12 {
        small.advance(0).unwrap();
    }
    let e = small.advance(0).unwrap_err();
    assert!(e.to_string().contains("holds 12 positions"), "{e}");
}

#[test]
fn a_batch_generates_what_each_prompt_generates_alone() {
    let m = model(64);
    let prompts = vec![
        PROMPT.to_vec(),
        vec![5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        vec![250, 1, 99, 3],
    ];
    let options = greedy_options(16);
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| generate(&m, p, &options, |_| Ok(true)).unwrap().tokens)
        .collect();
    // the second sequence stops itself after 3 tokens; the others go on without it
    let mut streamed = vec![Vec::new(); 3];
    let together = candle_rocm_llm::generate_batch(&m, &prompts, &options, false, |i, t| {
        streamed[i].push(t);
        Ok(!(i == 1 && streamed[1].len() == 3))
    })
    .unwrap();
    assert_eq!(together[0].tokens, alone[0]);
    assert_eq!(together[2].tokens, alone[2]);
    assert_eq!(together[1].tokens, alone[1][..3]);
    assert_eq!(together[1].stop, StopReason::Caller);
    assert_eq!(together[0].stop, StopReason::MaxTokens);
    for (s, g) in streamed.iter().zip(&together) {
        assert_eq!(s, &g.tokens);
    }
    // sampled: each sequence its own seed, the same draws again under the same options
    let sampled = GenerateOptions {
        sampling: SamplingParams {
            temperature: 1.0,
            ..SamplingParams::default()
        },
        ..greedy_options(12)
    };
    let a =
        candle_rocm_llm::generate_batch(&m, &prompts, &sampled, false, |_, _| Ok(true)).unwrap();
    let b =
        candle_rocm_llm::generate_batch(&m, &prompts, &sampled, false, |_, _| Ok(true)).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_chat_session_prefills_only_what_its_cache_lacks() {
    let m = model(128);
    let options = greedy_options(8);
    let fresh = |prompt: &[u32]| generate(&m, prompt, &options, |_| Ok(true)).unwrap().tokens;
    let mut chat = candle_rocm_llm::ChatSession::new(&m, false).unwrap();
    let turn1 = PROMPT.to_vec();
    let g1 = chat.respond(&turn1, &options, |_| Ok(true)).unwrap();
    assert_eq!(chat.last_prefilled(), turn1.len());
    assert_eq!(g1.tokens, fresh(&turn1));
    // the next turn: the conversation so far and a new message; the cache holds the prompt
    // and the 7 tokens fed to steps (the 8th ended the budget), so 1 + 4 tokens run
    let mut turn2 = turn1.clone();
    turn2.extend(&g1.tokens);
    turn2.extend([11, 22, 33, 44]);
    let g2 = chat.respond(&turn2, &options, |_| Ok(true)).unwrap();
    assert_eq!(chat.last_prefilled(), 5);
    assert_eq!(g2.tokens, fresh(&turn2));
    // a turn that rewrites the history keeps the common part only
    let mut turn3 = turn1[..3].to_vec();
    turn3.extend([9, 9, 9]);
    let g3 = chat.respond(&turn3, &options, |_| Ok(true)).unwrap();
    assert_eq!(chat.last_prefilled(), 3);
    assert_eq!(g3.tokens, fresh(&turn3));
    // the same prompt again: its last token runs again for the first new token's logits
    let g4 = chat.respond(&turn3, &options, |_| Ok(true)).unwrap();
    assert_eq!(chat.last_prefilled(), 1);
    assert_eq!(g4.tokens, g3.tokens);
}

#[test]
fn a_chat_sessions_draws_go_on_from_turn_to_turn() {
    let m = model(128);
    let options = GenerateOptions {
        max_tokens: 6,
        sampling: SamplingParams {
            temperature: 1.5,
            seed: 21,
            ..SamplingParams::default()
        },
        ..GenerateOptions::default()
    };
    let mut chat = candle_rocm_llm::ChatSession::new(&m, false).unwrap();
    let turn1 = PROMPT.to_vec();
    let g1 = chat.respond(&turn1, &options, |_| Ok(true)).unwrap();
    let mut turn2 = turn1.clone();
    turn2.extend(&g1.tokens);
    turn2.extend([11, 22, 33, 44]);
    let g2 = chat.respond(&turn2, &options, |_| Ok(true)).unwrap();
    // the same conversation by hand: one sampler, the second turn after the first's draws
    let mut sampler = candle_rocm_llm::Sampler::new(options.sampling.clone()).unwrap();
    let mut decoder = candle_rocm_llm::Decoder::new(&m, turn1[0], false).unwrap();
    let mut turn = |decoder: &mut candle_rocm_llm::Decoder, new: &[u32]| {
        let mut out = vec![decoder.prefill_sampled(new, &mut sampler).unwrap()];
        while out.len() < options.max_tokens {
            out.push(decoder.next_token_sampled(&mut sampler).unwrap());
        }
        out
    };
    assert_eq!(turn(&mut decoder, &turn1), g1.tokens);
    // the cache holds the prompt and the 5 tokens fed to steps: the last one runs again
    decoder.rewind(turn1.len() + g1.tokens.len() - 1);
    let held = turn1.len() + g1.tokens.len() - 1;
    assert_eq!(turn(&mut decoder, &turn2[held..]), g2.tokens);
    // a fresh sampler would have drawn otherwise (the seed restarted)
    let restarted = generate(&m, &turn2, &options, |_| Ok(true)).unwrap().tokens;
    assert_ne!(
        restarted, g2.tokens,
        "the draws of a restarted seed happen to agree"
    );
}

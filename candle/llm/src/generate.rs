//! The generation loop: a prompt in one pass, then a token a step, each drawn on the device by
//! a [`Sampler`] and handed to the caller as it comes, until a stop token, the caller, the
//! token budget or the end of the cache.

use candle_core::Result;

use crate::batch::BatchDecoder;
use crate::sampling::{Sampler, SamplingParams};
use crate::static_llama::{Decoder, StaticLlama};

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// Most tokens generated (the stop token not counted).
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Tokens that end the generation (an end-of-sequence or end-of-turn token); not
    /// returned.
    pub stop_tokens: Vec<u32>,
    /// Replay one captured decode step (on `Device::Rocm`; elsewhere steps run eagerly).
    pub captured: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop_tokens: Vec::new(),
            captured: true,
        }
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// `max_tokens` were generated.
    MaxTokens,
    /// This stop token came.
    StopToken(u32),
    /// The caller's callback asked to stop (a stop string, a closed stream).
    Caller,
    /// Every position of the cache is used.
    ContextFull,
}

/// A finished generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The generated tokens, stop token excluded.
    pub tokens: Vec<u32>,
    pub stop: StopReason,
}

/// Generates after `prompt` with `options`, calling `on_token` with each token as it is
/// chosen (return `false` to stop). A prompt the cache cannot hold with one more position is
/// an error.
pub fn generate(
    model: &StaticLlama,
    prompt: &[u32],
    options: &GenerateOptions,
    mut on_token: impl FnMut(u32) -> Result<bool>,
) -> Result<Generation> {
    let first = first_token(model, prompt)?;
    let captured = options.captured && model.device().is_rocm();
    let mut decoder = Decoder::new(model, first, captured)?;
    let mut sampler = Sampler::new(options.sampling.clone())?;
    generate_on(&mut decoder, prompt, options, &mut sampler, &mut on_token)
}

/// The generation loop on `decoder`, whose cache may already hold positions: `new_tokens`
/// are prefilled after them, then tokens are generated as [`generate`] generates them, drawn by
/// `sampler`.
fn generate_on(
    decoder: &mut Decoder<'_>,
    new_tokens: &[u32],
    options: &GenerateOptions,
    sampler: &mut Sampler,
    on_token: &mut dyn FnMut(u32) -> Result<bool>,
) -> Result<Generation> {
    let model = decoder.model();
    let mut tokens = Vec::new();
    if options.max_tokens == 0 {
        return Ok(Generation {
            tokens,
            stop: StopReason::MaxTokens,
        });
    }
    let mut token = decoder.prefill_sampled(new_tokens, sampler)?;
    let stop = loop {
        if options.stop_tokens.contains(&token) {
            break StopReason::StopToken(token);
        }
        tokens.push(token);
        if !on_token(token)? {
            break StopReason::Caller;
        }
        if tokens.len() >= options.max_tokens {
            break StopReason::MaxTokens;
        }
        if decoder.filled() >= model.max_len() {
            break StopReason::ContextFull;
        }
        token = decoder.next_token_sampled(sampler)?;
    };
    Ok(Generation { tokens, stop })
}

/// A conversation kept in one cache: each turn's prompt (the whole conversation, as the chat
/// template renders it) is compared with what the cache holds, and only the tokens after the
/// common part are prefilled; the rest of the cache is forgotten.
pub struct ChatSession<'a> {
    decoder: Decoder<'a>,
    /// One sampler for the conversation while the options' sampling stays the same: its draws
    /// and repeat-penalty window go on from turn to turn, as llama.cpp's do.
    sampler: Option<Sampler>,
    /// The tokens whose keys and values the cache holds, in order.
    held: Vec<u32>,
    last_prefilled: usize,
}

impl<'a> ChatSession<'a> {
    /// An empty conversation (a captured step on `Device::Rocm` where `captured`).
    pub fn new(model: &'a StaticLlama, captured: bool) -> Result<Self> {
        let captured = captured && model.device().is_rocm();
        Ok(ChatSession {
            decoder: Decoder::new(model, 0, captured)?,
            sampler: None,
            held: Vec::new(),
            last_prefilled: 0,
        })
    }

    /// The answer to the conversation `prompt`, generated as [`generate`] generates it.
    pub fn respond(
        &mut self,
        prompt: &[u32],
        options: &GenerateOptions,
        mut on_token: impl FnMut(u32) -> Result<bool>,
    ) -> Result<Generation> {
        let model = self.decoder.model();
        first_token(model, prompt)?;
        // at least the last token runs again: its logits choose the first new token
        let common = self
            .held
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            .min(prompt.len() - 1);
        self.decoder.rewind(common);
        self.held.truncate(common);
        self.last_prefilled = prompt.len() - common;
        let sampler = match &mut self.sampler {
            Some(s) if s.params() == &options.sampling => s,
            slot => slot.insert(Sampler::new(options.sampling.clone())?),
        };
        let generation = generate_on(
            &mut self.decoder,
            &prompt[common..],
            options,
            sampler,
            &mut on_token,
        )?;
        // the cache holds the prompt and every generated token that was fed to a step
        self.held = prompt.to_vec();
        self.held.extend(&generation.tokens);
        self.held.truncate(self.decoder.filled());
        Ok(generation)
    }

    /// Tokens the last turn prefilled (the rest of its prompt was in the cache).
    pub fn last_prefilled(&self) -> usize {
        self.last_prefilled
    }
}

/// One sequence of a batch: its sampler, tokens so far and stop once it came.
struct Sequence {
    sampler: Sampler,
    tokens: Vec<u32>,
    stop: Option<StopReason>,
}

/// Generates after each of `prompts` together: each prompt in its own pass into a slot of one
/// batch ([`BatchState`]), then one step for all the slots at once
/// ([`StaticLlama::step_batch`]: the weights read once for all; with `captured` a step
/// captured once and replayed where the model's step is the fused one), each sequence at its
/// own position with its own sampler (the seed plus its index) and its own stop (a finished
/// slot is stepped on with the others, its tokens unread). `on_token(sequence, token)` is
/// called as each token is chosen (`false` stops that sequence). The generations are in the
/// prompts' order.
pub fn generate_batch(
    model: &StaticLlama,
    prompts: &[Vec<u32>],
    options: &GenerateOptions,
    captured: bool,
    mut on_token: impl FnMut(usize, u32) -> Result<bool>,
) -> Result<Vec<Generation>> {
    let mut seqs = Vec::with_capacity(prompts.len());
    for (i, prompt) in prompts.iter().enumerate() {
        first_token(model, prompt).map_err(|e| e.context(format!("prompt {i}")))?;
        let mut sampling = options.sampling.clone();
        sampling.seed = sampling.seed.wrapping_add(i as u64);
        seqs.push(Sequence {
            sampler: Sampler::new(sampling)?,
            tokens: Vec::new(),
            stop: None,
        });
    }
    if seqs.is_empty() {
        return Ok(Vec::new());
    }
    let mut batch = model.new_batch(prompts.len())?;
    // a sequence's new token: kept, and its stop (None: it goes on)
    let mut take = |i: usize, token: u32, seq: &mut Sequence, filled: usize| -> Result<()> {
        seq.stop = if options.stop_tokens.contains(&token) {
            Some(StopReason::StopToken(token))
        } else {
            seq.tokens.push(token);
            if !on_token(i, token)? {
                Some(StopReason::Caller)
            } else if seq.tokens.len() >= options.max_tokens {
                Some(StopReason::MaxTokens)
            } else if filled >= model.max_len() {
                Some(StopReason::ContextFull)
            } else {
                None
            }
        };
        Ok(())
    };
    for (i, (seq, prompt)) in seqs.iter_mut().zip(prompts).enumerate() {
        if options.max_tokens == 0 {
            seq.stop = Some(StopReason::MaxTokens);
            continue;
        }
        let out = model.prefill_slot(&mut batch, i, prompt)?;
        prompt.iter().for_each(|&t| seq.sampler.accept(t));
        let greedy = out.next.to_vec1::<u32>()?.first().copied();
        let token = batch.choose(i, &out.logits, greedy, &mut seq.sampler)?;
        take(i, token, seq, batch.filled(i))?;
    }
    let mut decoder = BatchDecoder::new(model, captured);
    let greedy_sampling = seqs.iter().all(|s| s.sampler.is_greedy());
    loop {
        let active: Vec<usize> = (0..seqs.len())
            .filter(|&i| seqs[i].stop.is_none())
            .collect();
        if active.is_empty() {
            break;
        }
        for &i in &active {
            batch.advance(i)?;
        }
        let out = decoder.step(&batch)?;
        // the greedy tokens of every slot, read back once
        let greedy = if greedy_sampling {
            out.next.to_vec1::<u32>()?
        } else {
            Vec::new()
        };
        for i in active {
            let seq = &mut seqs[i];
            let logits = out.logits.get(i)?;
            let token = batch.choose(i, &logits, greedy.get(i).copied(), &mut seq.sampler)?;
            take(i, token, seq, batch.filled(i))?;
        }
    }
    Ok(seqs
        .into_iter()
        .map(|s| Generation {
            tokens: s.tokens,
            stop: s.stop.unwrap_or(StopReason::MaxTokens),
        })
        .collect())
}

/// The prompt's first token; an error where the prompt is empty or leaves the cache no
/// position to generate into.
fn first_token(model: &StaticLlama, prompt: &[u32]) -> Result<u32> {
    let Some(&first) = prompt.first() else {
        candle_core::bail!("generate: an empty prompt")
    };
    if prompt.len() >= model.max_len() {
        candle_core::bail!(
            "generate: a prompt of {} tokens leaves no position of the {}-position cache",
            prompt.len(),
            model.max_len()
        );
    }
    Ok(first)
}

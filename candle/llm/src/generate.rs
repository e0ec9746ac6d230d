//! The generation loop: a prompt in one pass, then a token a step, each drawn on the device by
//! a [`Sampler`] and handed to the caller as it comes, until a stop token, the caller, the
//! token budget or the end of the cache.

use candle_core::Result;

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
    let mut sampler = Sampler::new(options.sampling.clone())?;
    let captured = options.captured && model.device().is_rocm();
    let mut decoder = Decoder::new(model, first, captured)?;
    let mut tokens = Vec::new();
    if options.max_tokens == 0 {
        return Ok(Generation {
            tokens,
            stop: StopReason::MaxTokens,
        });
    }
    let mut token = decoder.prefill_sampled(prompt, &mut sampler)?;
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
        token = decoder.next_token_sampled(&mut sampler)?;
    };
    Ok(Generation { tokens, stop })
}

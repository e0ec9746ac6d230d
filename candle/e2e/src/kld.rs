//! How far one run of a model is from another along the same text, in the manner of llama.cpp's
//! `llama-perplexity --kl-divergence`: both runs are fed the same tokens (teacher forcing), and
//! at each position the next-token distribution of the run under test is compared with the
//! reference's: the KL divergence KL(reference || test), and whether both rank the same token
//! first.
//!
//! The text is the CPU model's own greedy continuation of several chat prompts. The yardstick
//! is the CPU against itself with the prompt fed a token at a time instead of at once: the same
//! function of the same weights with its floating-point work in another order, so the distance
//! that rounding alone makes in this model. A backend is as close to the CPU as it can be when
//! it is no further from it than that.

use std::path::Path;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};

use crate::gguf_chat::GgufChat;
use crate::static_llama::{Decoder, StaticLlama};
use crate::DemoResult;
pub use candle_rocm_llm::kld::{
    argmax, divergence, within, Divergence, MAX_MEAN_RATIO, MAX_TOP1_SHORTFALL,
};

/// The prompts whose greedy continuations make the text.
pub const PROMPTS: [&str; 4] = [
    "Name the planets of the solar system.",
    "Write a short poem about the sea.",
    "Explain how a bicycle stays upright.",
    "What should I pack for a weekend of hiking?",
];
const SYSTEM: &str = "You are a helpful assistant.";
/// Tokens of each continuation: 4 x 128 = 512 positions compared.
pub const STEPS: usize = 128;

/// The text and the CPU's logits along it: per prompt, its tokens, the greedy continuation,
/// and the logits at each position with the prompt fed at once (the reference) and a token at a
/// time (the CPU's own rounding).
pub struct CpuReference {
    pub texts: Vec<(Vec<u32>, Vec<u32>)>,
    pub at_once: Vec<Vec<f32>>,
    pub stepwise: Vec<Vec<f32>>,
}

impl CpuReference {
    /// The CPU model of `path` over [`PROMPTS`], [`STEPS`] tokens each.
    pub fn build(path: &Path) -> DemoResult<Self> {
        let mut cpu = GgufChat::load(path, &Device::Cpu)?;
        let mut reference = CpuReference {
            texts: Vec::new(),
            at_once: Vec::new(),
            stepwise: Vec::new(),
        };
        for user in PROMPTS {
            let prompt = cpu.chat_prompt(SYSTEM, user)?;
            let run = cpu.greedy(&prompt, STEPS, false)?;
            reference.at_once.extend(run.logits);
            reference
                .stepwise
                .extend(cpu.forced_logits(&prompt, &run.tokens, true)?);
            reference.texts.push((prompt, run.tokens));
        }
        Ok(reference)
    }

    /// The CPU against itself.
    pub fn own(&self) -> DemoResult<Divergence> {
        Ok(divergence(&self.at_once, &self.stepwise)?)
    }

    /// Longest prompt plus continuation: the cache a static model needs.
    pub fn max_len(&self) -> usize {
        self.texts
            .iter()
            .map(|(p, t)| p.len() + t.len())
            .max()
            .unwrap_or(0)
    }
}

/// candle-transformers' `quantized_llama` on `device` along the reference's text.
pub fn quantized_llama(path: &Path, device: &Device, r: &CpuReference) -> DemoResult<Divergence> {
    let mut model = GgufChat::load(path, device)?;
    let mut logits = Vec::new();
    for (prompt, tokens) in &r.texts {
        logits.extend(model.forced_logits(prompt, tokens, false)?);
    }
    Ok(divergence(&r.at_once, &logits)?)
}

/// The static llama of the same file on `device` along the reference's text, eagerly or
/// (`captured`) replaying a captured decode step, its KV cache in `cache` (f32, f16 or bf16).
pub fn static_llama(
    path: &Path,
    device: &Device,
    r: &CpuReference,
    (captured, cache): (bool, DType),
) -> DemoResult<Divergence> {
    let mut file = std::fs::File::open(path)?;
    let content = gguf_file::Content::read(&mut file)?;
    let model = StaticLlama::from_gguf(&content, &mut file, device, r.max_len() + 1)?
        .with_cache_dtype(cache)?;
    let mut logits = Vec::new();
    for (prompt, tokens) in &r.texts {
        let first = *prompt.first().ok_or("an empty prompt")?;
        let mut decoder = Decoder::new(&model, first, captured)?;
        logits.extend(decoder.forced_logits(prompt, tokens)?);
    }
    Ok(divergence(&r.at_once, &logits)?)
}

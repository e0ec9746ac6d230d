//! A quantized LLM from one GGUF file: candle-transformers' `quantized_llama` weights, the
//! text side built from the file's own metadata (tokenizer, chat template: the LLM runtime's
//! `GgufText`), greedy decoding.

use std::path::Path;
use std::time::Instant;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_rocm_llm::{GgufText, Message};
use candle_transformers::models::quantized_llama::ModelWeights;

use crate::{sync, DemoResult};

/// The model and its text side on one device.
pub struct GgufChat {
    model: ModelWeights,
    device: Device,
    pub text: GgufText,
    /// The end-of-turn token (`tokenizer.ggml.eos_token_id`).
    pub eos: u32,
}

/// What a greedy run produced, with its timings (device synchronised at each end).
pub struct Greedy {
    /// The generated tokens (the prompt excluded).
    pub tokens: Vec<u32>,
    /// The logits each token was picked from.
    pub logits: Vec<Vec<f32>>,
    pub prefill_s: f64,
    pub decode_s: f64,
}

impl GgufChat {
    pub fn load(path: &Path, device: &Device) -> DemoResult<Self> {
        let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let content = gguf_file::Content::read(&mut file)?;
        let text = GgufText::from_gguf(&content)?;
        let eos = text.eos.ok_or("the GGUF names no eos token")?;
        let model = ModelWeights::from_gguf(content, &mut file, device)?;
        Ok(Self {
            model,
            device: device.clone(),
            text,
            eos,
        })
    }

    /// The prompt of a one-turn chat through the file's own chat template.
    pub fn chat_prompt(&self, system: &str, user: &str) -> DemoResult<Vec<u32>> {
        let messages = [Message::new("system", system), Message::new("user", user)];
        Ok(self.text.chat_prompt(&messages)?)
    }

    pub fn decode(&self, tokens: &[u32]) -> DemoResult<String> {
        Ok(self.text.decode(tokens)?)
    }

    /// `steps` greedy tokens after `prompt` (the whole prompt in one forward, then one token per
    /// forward); stops early at the eos token only when `stop_at_eos`.
    pub fn greedy(
        &mut self,
        prompt: &[u32],
        steps: usize,
        stop_at_eos: bool,
    ) -> DemoResult<Greedy> {
        self.model.clear_kv_cache();
        let device = self.device.clone();
        let mut out = Greedy {
            tokens: Vec::new(),
            logits: Vec::new(),
            prefill_s: 0.0,
            decode_s: 0.0,
        };
        sync(&device)?;
        let t = Instant::now();
        let mut input = Tensor::new(prompt, &device)?.unsqueeze(0)?;
        let mut pos = 0;
        for step in 0..steps {
            let logits = self.logits(&input, pos)?;
            if step == 0 {
                out.prefill_s = t.elapsed().as_secs_f64();
            }
            let best = top1(&logits).ok_or("no logits")?;
            out.tokens.push(best);
            out.logits.push(logits);
            pos += input.dim(1)?;
            if stop_at_eos && best == self.eos {
                break;
            }
            input = Tensor::new(&[best], &device)?.unsqueeze(0)?;
        }
        sync(&device)?;
        out.decode_s = t.elapsed().as_secs_f64() - out.prefill_s;
        Ok(out)
    }

    /// The next token's logits after `input` at position `pos`, on the host as f32.
    fn logits(&mut self, input: &Tensor, pos: usize) -> DemoResult<Vec<f32>> {
        let logits = self.model.forward(input, pos)?;
        Ok(logits
            .squeeze(0)?
            .to_dtype(candle_core::DType::F32)?
            .to_vec1()?)
    }

    /// The logits after `prompt` and after each of `tokens` but the last, fed in turn whatever
    /// the model would pick (teacher forcing): one vector per token of `tokens`. The prompt goes
    /// in as one forward, or with `one_by_one` a token per forward: the same function of the
    /// weights with the floating-point work in another order.
    pub fn forced_logits(
        &mut self,
        prompt: &[u32],
        tokens: &[u32],
        one_by_one: bool,
    ) -> DemoResult<Vec<Vec<f32>>> {
        self.model.clear_kv_cache();
        let device = self.device.clone();
        let feed: Vec<&[u32]> = if one_by_one {
            prompt.chunks(1).collect()
        } else {
            vec![prompt]
        };
        let (last, first) = feed.split_last().ok_or("an empty prompt")?;
        let mut pos = 0;
        for part in first {
            self.model
                .forward(&Tensor::new(*part, &device)?.unsqueeze(0)?, pos)?;
            pos += part.len();
        }
        let mut input = Tensor::new(*last, &device)?.unsqueeze(0)?;
        let mut out = Vec::with_capacity(tokens.len());
        for &next in tokens {
            out.push(self.logits(&input, pos)?);
            pos += input.dim(1)?;
            input = Tensor::new(&[next], &device)?.unsqueeze(0)?;
        }
        Ok(out)
    }
}

/// The index of the largest logit, if it is finite.
fn top1(logits: &[f32]) -> Option<u32> {
    let best = crate::kld::argmax(logits);
    logits
        .get(best)
        .filter(|v| v.is_finite())
        .map(|_| best as u32)
}

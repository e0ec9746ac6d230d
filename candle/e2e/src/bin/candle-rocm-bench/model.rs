//! The model benchmark: candle-transformers' llama at about 1.1B parameters (bf16, 4 K
//! context, seeded weights), prefill 512 tokens, then 128 greedy decode steps; the same in
//! f32 is the reference its logits are checked against. One device per
//! process, so the process's device memory is the model's (the run script samples it); the
//! weights can be written out for the torch peer, which then runs the very same model.

use std::collections::HashMap;
use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor, D};
use candle_nn::VarBuilder;
use candle_rocm_e2e::llama::{self, fnv1a, prompt, uniform_values, DrawnWeights};
use candle_transformers::models::llama::{Cache, Config, Llama};
use serde_json::json;

pub const PREFILL: usize = 512;
pub const DECODE: usize = 128;

/// Llama 3.2 1B's shape with Llama 2's vocabulary: 16 layers of width 2048, 8 K-V heads.
pub fn config() -> Config {
    Config {
        max_position_embeddings: 4096,
        ..llama::config(2048, 8192, 32000, 16, 32, 8)
    }
}

/// The model's weights on the host (bf16), by the names candle-transformers and HF
/// transformers both use: uniform values (std 0.05, wide enough that the greedy picks are
/// clear of bf16 rounding) from streams seeded by `seed`, the tensor's name and the chunk.
pub fn weights(config: &Config, seed: u64) -> Result<HashMap<String, Tensor>> {
    let weights = DrawnWeights::recording(|name, n| uniform_values(seed ^ fnv1a(name), n, 0.05));
    // loading the model on the host makes it ask for every tensor once
    let vb = VarBuilder::from_backend(Box::new(&weights), DType::BF16, Device::Cpu);
    drop(Llama::load(vb, config)?);
    weights.into_recorded()
}

/// What one device's run measured.
pub struct ModelRun {
    pub prefill_seconds: Vec<f64>,
    pub decode_seconds: f64,
    pub tokens: Vec<u32>,
    pub first_logits: Vec<f32>,
    pub pool_peak_bytes: Option<usize>,
}

fn greedy_pick(logits: &Tensor) -> Result<u32> {
    logits.argmax(D::Minus1)?.to_scalar::<u32>()
}

/// Prefill `PREFILL` tokens (a warm-up that also decodes, then `repeats` timed runs on fresh
/// caches) and decode `DECODE` greedy tokens after the last one.
pub fn run_on(
    config: &Config,
    weights: &HashMap<String, Tensor>,
    dtype: DType,
    dev: &Device,
    repeats: usize,
) -> Result<ModelRun> {
    // the bf16 weights convert exactly to f32: an f32 run is the same model, rounded less
    let vb = VarBuilder::from_tensors(weights.clone(), dtype, dev);
    let model = Llama::load(vb, config)?;
    let input = Tensor::new(prompt(PREFILL, config.vocab_size).as_slice(), dev)?.unsqueeze(0)?;
    let mut prefill_seconds = Vec::new();
    let mut last = None;
    for run in 0..=repeats {
        let mut cache = Cache::new(true, dtype, config, dev)?;
        dev.synchronize()?;
        let start = Instant::now();
        let logits = model.forward(&input, 0, &mut cache)?.squeeze(0)?;
        let next = greedy_pick(&logits)?;
        if run > 0 {
            prefill_seconds.push(start.elapsed().as_secs_f64());
        } else {
            // the warm-up also decodes, so no kernel is first loaded inside a timed loop
            let mut token = next;
            for step in 0..2 {
                let x = Tensor::new(&[token], dev)?.unsqueeze(0)?;
                let logits = model.forward(&x, PREFILL + step, &mut cache)?.squeeze(0)?;
                token = greedy_pick(&logits)?;
            }
            continue;
        }
        last = Some((cache, logits, next));
    }
    let (mut cache, logits, mut next) =
        last.ok_or_else(|| candle_core::Error::Msg("no prefill ran".into()))?;
    let first_logits = logits.to_dtype(DType::F32)?.to_vec1::<f32>()?;
    let mut tokens = vec![next];
    let start = Instant::now();
    for step in 1..DECODE {
        let x = Tensor::new(&[next], dev)?.unsqueeze(0)?;
        let logits = model
            .forward(&x, PREFILL + step - 1, &mut cache)?
            .squeeze(0)?;
        next = greedy_pick(&logits)?;
        tokens.push(next);
    }
    let decode_seconds = start.elapsed().as_secs_f64();
    Ok(ModelRun {
        prefill_seconds,
        decode_seconds,
        tokens,
        first_logits,
        pool_peak_bytes: candle_rocm_e2e::peak_memory(dev),
    })
}

/// The model as the torch peer rebuilds it: the config, the prompt and the run's lengths.
pub fn config_json(config: &Config, repeats: usize) -> serde_json::Value {
    json!({
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "vocab_size": config.vocab_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "max_position_embeddings": config.max_position_embeddings,
        "prompt": prompt(PREFILL, config.vocab_size),
        "repeats": repeats,
        "decode_tokens": DECODE,
    })
}

/// The run as one JSON line.
pub fn report(device: &str, dtype: DType, config: &Config, run: &ModelRun) -> serde_json::Value {
    let mut prefill = run.prefill_seconds.clone();
    prefill.sort_by(f64::total_cmp);
    let median = prefill.get(prefill.len() / 2).copied().unwrap_or(f64::NAN);
    json!({
        "bench": "model",
        "device": device,
        "dtype": dtype.as_str(),
        "model": format!(
            "llama, hidden {}, {} layers, {} heads ({} kv), vocab {}",
            config.hidden_size,
            config.num_hidden_layers,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.vocab_size
        ),
        "prefill_tokens": PREFILL,
        "decode_tokens": DECODE,
        "prefill_seconds": run.prefill_seconds,
        "prefill_tokens_per_s": PREFILL as f64 / median,
        // the first token comes from the prefill; DECODE - 1 decode steps were timed
        "decode_tokens_per_s": (DECODE - 1) as f64 / run.decode_seconds,
        "tokens": run.tokens,
        "pool_peak_bytes": run.pool_peak_bytes,
    })
}

/// The decode comparison of issue "launch in microseconds / graphs": the same weights and
/// prompt through candle-transformers' llama (`run_on`) and through the static-shape llama
/// (`candle_rocm_e2e::static_llama`), eagerly and replaying one captured step. The static
/// model runs its prompt a token a step (not timed); DECODE greedy tokens are timed, each
/// read back as in `run_on`.
pub struct StaticRun {
    pub decode_seconds: f64,
    /// Captured only: device time of one replayed step, without reading its token back.
    pub replay_ms: Option<f64>,
    pub tokens: Vec<u32>,
    pub first_logits: Vec<f32>,
}

/// Replays timed back to back after the decode (device time per step).
const REPLAYS: usize = 20;

/// A short run for a kernel profiler (`ncu`): a 16-token prompt, one eager decode step, then
/// the step captured and replayed twice.
pub fn profile_static(
    config: &Config,
    weights: &HashMap<String, Tensor>,
    dtype: DType,
    dev: &Device,
) -> Result<()> {
    use candle_rocm_e2e::static_llama::{Decoder, StaticLlama};
    let vb = VarBuilder::from_tensors(weights.clone(), dtype, dev);
    let model = StaticLlama::load(vb, config, 64)?;
    let input = prompt(16, config.vocab_size);
    let mut decoder = Decoder::new(&model, input[0], true)?;
    decoder.prefill(&input)?;
    for _ in 0..3 {
        decoder.next_token()?;
    }
    dev.synchronize()
}

/// `cache`: the KV cache's dtype (f32 by default).
pub fn run_static(
    config: &Config,
    weights: &HashMap<String, Tensor>,
    (dtype, cache): (DType, Option<DType>),
    dev: &Device,
    captured: bool,
    fused_attention: bool,
) -> Result<StaticRun> {
    use candle_rocm_e2e::static_llama::{Decoder, StaticLlama};
    let vb = VarBuilder::from_tensors(weights.clone(), dtype, dev);
    let model = StaticLlama::load(vb, config, PREFILL + DECODE + REPLAYS + 2)?;
    let model = match cache {
        Some(cache) => model.with_cache_dtype(cache)?,
        None => model,
    };
    let model = if fused_attention {
        model
    } else {
        model.with_unfused_attention()
    };
    let input = prompt(PREFILL, config.vocab_size);
    // a short warm-up sequence: every kernel loaded, the pool sized, before the timed one
    let mut warm = Decoder::new(&model, input[0], captured)?;
    warm.prefill(&input[..4])?;
    for _ in 0..2 {
        warm.next_token()?;
    }
    drop(warm);
    let mut decoder = Decoder::new(&model, input[0], captured)?;
    let mut tokens = vec![decoder.prefill(&input)?];
    dev.synchronize()?;
    let start = Instant::now();
    while tokens.len() < DECODE {
        tokens.push(decoder.next_token()?);
    }
    let decode_seconds = start.elapsed().as_secs_f64();
    let replay_ms = if captured {
        dev.synchronize()?;
        let start = Instant::now();
        decoder.replay(REPLAYS)?;
        dev.synchronize()?;
        Some(start.elapsed().as_secs_f64() * 1e3 / REPLAYS as f64)
    } else {
        None
    };
    Ok(StaticRun {
        decode_seconds,
        replay_ms,
        tokens,
        first_logits: decoder.first_logits().to_vec(),
    })
}

/// The static run as one JSON line, with its tokens against a reference run's.
pub fn static_report(
    device: &str,
    variant: &str,
    dtype: DType,
    run: &StaticRun,
    reference: &[u32],
) -> serde_json::Value {
    let equal = run
        .tokens
        .iter()
        .zip(reference)
        .take_while(|(a, b)| a == b)
        .count();
    json!({
        "bench": "decode",
        "device": device,
        "variant": variant,
        "dtype": dtype.as_str(),
        "decode_tokens": DECODE,
        "decode_tokens_per_s": (DECODE - 1) as f64 / run.decode_seconds,
        "tokens": run.tokens,
        "tokens_equal_to_reference_from_first": equal,
        "replay_ms_per_step": run.replay_ms,
    })
}

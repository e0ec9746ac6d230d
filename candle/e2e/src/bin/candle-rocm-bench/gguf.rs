//! GGUF models of a given shape and block type with seeded random blocks, written once and
//! loaded by every peer (Candle on Device::Rocm, Candle's CUDA backend, llama.cpp): prefill and
//! decode throughput through candle-transformers' `quantized_llama` (llama shapes) or
//! `quantized_qwen3_moe` (the mixture-of-experts shape).
//!
//! The blocks hold random quants and small fixed scales (weights of a few hundredths), so the
//! activations stay finite through every layer; what is measured is the weight traffic and the
//! op count of a real model of that shape. The tokenizer metadata is copied from a real GGUF
//! (SmolLM2's), so llama.cpp loads the file as it loads any llama.

use std::path::Path;
use std::time::Instant;

use candle_core::quantized::{gguf_file, GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_rocm_e2e::{peak_memory, SplitMix64};
use candle_transformers::models::quantized_llama::ModelWeights;

use crate::DemoResult;

/// A model's shape: hidden size, layers, heads, kv heads, head size, feed-forward size, and
/// for a mixture of experts its experts in place of the feed-forward.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub name: &'static str,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub experts: Option<Experts>,
    /// The context length the file states (`gguf-write --context` sets it).
    pub context: usize,
}

/// A mixture-of-experts feed-forward: the experts, those a token uses, an expert's ffn size.
#[derive(Debug, Clone, Copy)]
pub struct Experts {
    pub count: usize,
    pub used: usize,
    pub ffn: usize,
}

impl Shape {
    /// The GGUF architecture (`general.architecture`) of the shape.
    pub fn arch(&self) -> &'static str {
        if self.experts.is_some() {
            "qwen3moe"
        } else {
            "llama"
        }
    }
}

/// Llama 3.2 1B's, Llama 3.1 8B's and Qwen3-30B-A3B's shapes (the vocabulary is the
/// tokenizer's).
pub const SHAPES: [Shape; 3] = [
    Shape {
        name: "1b",
        hidden: 2048,
        layers: 16,
        heads: 32,
        kv_heads: 8,
        head_dim: 64,
        ffn: 8192,
        experts: None,
        context: 4096,
    },
    Shape {
        name: "8b",
        hidden: 4096,
        layers: 32,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        ffn: 14336,
        experts: None,
        context: 4096,
    },
    // q is 4096 wide on a 2048 hidden state; every layer's feed-forward is 8 of 128 experts
    Shape {
        name: "30b-a3b",
        hidden: 2048,
        layers: 48,
        heads: 32,
        kv_heads: 4,
        head_dim: 128,
        ffn: 6144,
        experts: Some(Experts {
            count: 128,
            used: 8,
            ffn: 768,
        }),
        context: 4096,
    },
];

pub fn shape(name: &str) -> DemoResult<Shape> {
    SHAPES
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("unknown shape {name:?} (1b, 8b, 30b-a3b)").into())
}

pub fn block_type(name: &str) -> DemoResult<GgmlDType> {
    match name {
        "q4_0" => Ok(GgmlDType::Q4_0),
        "q4k" => Ok(GgmlDType::Q4K),
        "q6k" => Ok(GgmlDType::Q6K),
        "q8_0" => Ok(GgmlDType::Q8_0),
        other => Err(format!("unknown type {other:?} (q4_0, q4k, q6k, q8_0)").into()),
    }
}

/// `n` blocks of `ty` with random quants and the scale fields set so weights are ~0.02.
fn random_blocks(ty: GgmlDType, n: usize, rng: &mut SplitMix64) -> Vec<u8> {
    let size = ty.type_size();
    let mut out = vec![0u8; n * size];
    for chunk in out.chunks_mut(8) {
        let r = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    // f16 bit patterns, little-endian: 0.004 = 0x1c19, 0.0003 = 0x0cea, 0.0002 = 0x0a8e
    const F16_0_004: [u8; 2] = [0x19, 0x1c];
    const F16_0_0003: [u8; 2] = [0xea, 0x0c];
    const F16_0_0002: [u8; 2] = [0x8e, 0x0a];
    // 0.00015 = 0x08ea
    const F16_0_00015: [u8; 2] = [0xea, 0x08];
    for block in out.chunks_mut(size) {
        match ty {
            // d: (q - 8) spans -8..7
            GgmlDType::Q4_0 => block[..2].copy_from_slice(&F16_0_004),
            // d: q spans -128..127
            GgmlDType::Q8_0 => block[..2].copy_from_slice(&F16_0_0003),
            // d and dmin; the 6-bit scales and mins stay random
            GgmlDType::Q4K => {
                block[..2].copy_from_slice(&F16_0_0002);
                block[2..4].copy_from_slice(&F16_0_0002);
            }
            // ql[128], qh[64], 16 i8 scales (kept to 0..15), d: (q - 32) * scale spans
            // -512..465
            GgmlDType::Q6K => {
                for sc in &mut block[192..208] {
                    *sc &= 15;
                }
                block[208..210].copy_from_slice(&F16_0_00015);
            }
            // block_type() admits these four only
            _ => {}
        }
    }
    out
}

fn random_tensor(ty: GgmlDType, dims: &[usize], rng: &mut SplitMix64) -> DemoResult<QTensor> {
    let n: usize = dims.iter().product();
    let blocks = random_blocks(ty, n / ty.block_size(), rng);
    let storage = QStorage::from_data(std::borrow::Cow::Owned(blocks), &Device::Cpu, ty)?;
    Ok(QTensor::new(storage, dims)?)
}

fn ones(n: usize) -> DemoResult<QTensor> {
    let t = Tensor::ones(n, candle_core::DType::F32, &Device::Cpu)?;
    Ok(QTensor::quantize(&t, GgmlDType::F32)?)
}

/// An f32 tensor of values uniform in (-scale, scale).
fn uniform(dims: &[usize], scale: f32, rng: &mut SplitMix64) -> DemoResult<QTensor> {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| ((rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale)
        .collect();
    let t = Tensor::from_vec(v, dims, &Device::Cpu)?;
    Ok(QTensor::quantize(&t, GgmlDType::F32)?)
}

/// Writes the model `shape` in `ty` to `out`, with the tokenizer metadata of `tokenizer_from`.
pub fn write(shape: Shape, ty: GgmlDType, tokenizer_from: &Path, out: &Path) -> DemoResult<()> {
    let mut src = std::fs::File::open(tokenizer_from)
        .map_err(|e| format!("{}: {e}", tokenizer_from.display()))?;
    let source = gguf_file::Content::read(&mut src)?;
    let vocab = match source.metadata.get("tokenizer.ggml.tokens") {
        Some(gguf_file::Value::Array(tokens)) => tokens.len(),
        _ => return Err("the tokenizer GGUF has no tokenizer.ggml.tokens".into()),
    };
    let (arch, head_dim) = (shape.arch(), shape.head_dim);
    let u32v = |v: usize| gguf_file::Value::U32(v as u32);
    let key = |k: &str| format!("{arch}.{k}");
    let mut metadata: Vec<(String, gguf_file::Value)> = vec![
        (
            "general.architecture".into(),
            gguf_file::Value::String(arch.into()),
        ),
        (
            "general.name".into(),
            gguf_file::Value::String(format!("random {arch} {}", shape.name)),
        ),
        (key("context_length"), u32v(shape.context)),
        (key("embedding_length"), u32v(shape.hidden)),
        (key("block_count"), u32v(shape.layers)),
        (key("feed_forward_length"), u32v(shape.ffn)),
        (key("attention.head_count"), u32v(shape.heads)),
        (key("attention.head_count_kv"), u32v(shape.kv_heads)),
        (key("attention.key_length"), u32v(head_dim)),
        (key("attention.value_length"), u32v(head_dim)),
        (key("rope.dimension_count"), u32v(head_dim)),
        (key("rope.freq_base"), gguf_file::Value::F32(500_000.0)),
        (
            key("attention.layer_norm_rms_epsilon"),
            gguf_file::Value::F32(1e-5),
        ),
        (key("vocab_size"), u32v(vocab)),
    ];
    if let Some(e) = shape.experts {
        metadata.push((key("expert_count"), u32v(e.count)));
        metadata.push((key("expert_used_count"), u32v(e.used)));
        metadata.push((key("expert_feed_forward_length"), u32v(e.ffn)));
    }
    for (k, v) in &source.metadata {
        if k.starts_with("tokenizer.") {
            metadata.push((k.clone(), v.clone()));
        }
    }
    let mut rng = SplitMix64(0x5eed ^ shape.hidden as u64);
    let (h, q, kv) = (
        shape.hidden,
        shape.heads * head_dim,
        shape.kv_heads * head_dim,
    );
    let mut tensors: Vec<(String, QTensor)> = vec![
        (
            "token_embd.weight".into(),
            random_tensor(ty, &[vocab, h], &mut rng)?,
        ),
        ("output_norm.weight".into(), ones(h)?),
        (
            "output.weight".into(),
            random_tensor(ty, &[vocab, h], &mut rng)?,
        ),
    ];
    for l in 0..shape.layers {
        let p = format!("blk.{l}");
        let mut matrices = vec![
            ("attn_q", vec![q, h]),
            ("attn_k", vec![kv, h]),
            ("attn_v", vec![kv, h]),
            ("attn_output", vec![h, q]),
        ];
        match shape.experts {
            None => matrices.extend([
                ("ffn_gate", vec![shape.ffn, h]),
                ("ffn_up", vec![shape.ffn, h]),
                ("ffn_down", vec![h, shape.ffn]),
            ]),
            Some(e) => {
                matrices.extend([
                    ("ffn_gate_exps", vec![e.count, e.ffn, h]),
                    ("ffn_up_exps", vec![e.count, e.ffn, h]),
                    ("ffn_down_exps", vec![e.count, h, e.ffn]),
                ]);
                // router logits of about unit spread over the normed state: tokens spread
                // over the experts
                tensors.push((
                    format!("{p}.ffn_gate_inp.weight"),
                    uniform(&[e.count, h], 0.04, &mut rng)?,
                ));
                tensors.push((format!("{p}.attn_q_norm.weight"), ones(head_dim)?));
                tensors.push((format!("{p}.attn_k_norm.weight"), ones(head_dim)?));
            }
        }
        for (name, dims) in matrices {
            tensors.push((
                format!("{p}.{name}.weight"),
                random_tensor(ty, &dims, &mut rng)?,
            ));
        }
        tensors.push((format!("{p}.attn_norm.weight"), ones(h)?));
        tensors.push((format!("{p}.ffn_norm.weight"), ones(h)?));
    }
    let md: Vec<(&str, &gguf_file::Value)> =
        metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    gguf_file::write(&mut file, &md, &ts)?;
    Ok(())
}

/// The file's reader, its content and its vocabulary size.
fn open_gguf(path: &Path) -> DemoResult<(std::fs::File, gguf_file::Content, usize)> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let content = gguf_file::Content::read(&mut file)?;
    let vocab = content
        .metadata
        .get(&format!("{}.vocab_size", architecture(&content)?))
        .map(|v| v.to_u32())
        .transpose()?
        .unwrap_or(32000) as usize;
    Ok((file, content, vocab))
}

fn architecture(content: &gguf_file::Content) -> DemoResult<String> {
    Ok(content
        .metadata
        .get("general.architecture")
        .ok_or("the GGUF file has no general.architecture")?
        .to_string()?
        .clone())
}

/// The prompt every peer gets: `prompt` seeded tokens below `vocab`.
fn prompt_tokens(vocab: usize, prompt: usize) -> Vec<u32> {
    seeded_prompt(vocab, prompt, 7)
}

/// `prompt` tokens below `vocab` from `seed`.
fn seeded_prompt(vocab: usize, prompt: usize, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64(seed);
    (0..prompt).map(|_| rng.below(vocab) as u32).collect()
}

/// The median of `f` over `runs`.
fn median<T>(runs: &[T], f: impl Fn(&T) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prefill of `prompt` tokens and `decode` greedy tokens after it, on `device`.
pub fn run(
    path: &Path,
    device: &Device,
    (prompt, decode): (usize, usize),
    dtype: DType,
) -> DemoResult<serde_json::Value> {
    let (mut file, content, vocab) = open_gguf(path)?;
    if architecture(&content)? == "qwen3moe" {
        return run_qwen3_moe(
            path,
            (file, content, vocab),
            device,
            (prompt, decode),
            dtype,
        );
    }
    let t = Instant::now();
    let mut model = ModelWeights::from_gguf(content, &mut file, device)?;
    device.synchronize()?;
    let load_s = t.elapsed().as_secs_f64();
    let tokens = prompt_tokens(vocab, prompt);
    let timed = |model: &mut ModelWeights| -> DemoResult<(f64, f64, bool)> {
        model.clear_kv_cache();
        device.synchronize()?;
        let t = Instant::now();
        let logits = model.forward(&Tensor::new(tokens.as_slice(), device)?.unsqueeze(0)?, 0)?;
        let mut next = logits.argmax(candle_core::D::Minus1)?;
        let first: Vec<f32> = logits
            .flatten_all()?
            .to_dtype(candle_core::DType::F32)?
            .to_vec1()?;
        let prefill = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for i in 0..decode {
            let logits = model.forward(&next.reshape((1, 1))?, prompt + i)?;
            next = logits.argmax(candle_core::D::Minus1)?;
        }
        next.to_device(&Device::Cpu)?;
        Ok((
            prefill,
            t.elapsed().as_secs_f64(),
            first.iter().all(|v| v.is_finite()),
        ))
    };
    timed(&mut model)?; // warm-up: kernels compile, the pool fills
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(timed(&mut model)?);
    }
    let (prefill, dec) = (median(&runs, |r| r.0), median(&runs, |r| r.1));
    let host_time = if candle_rocm::host_time::enabled() {
        host_time_of_decode(&mut model, device, &tokens, decode)?
    } else {
        serde_json::Value::Null
    };
    Ok(serde_json::json!({
        "host_time": host_time,
        "file": path.file_name().map(|f| f.to_string_lossy().into_owned()),
        "bytes": std::fs::metadata(path)?.len(),
        "load_s": load_s,
        "prompt": prompt,
        "decode": decode,
        "prefill_tokens_per_s": prompt as f64 / prefill,
        "decode_tokens_per_s": decode as f64 / dec,
        "finite_logits": runs.iter().all(|r| r.2),
        "peak_bytes": peak_memory(device),
    }))
}

/// A mixture-of-experts file through candle-transformers' `quantized_qwen3_moe` (activations
/// of `dtype`; Candle's CUDA kernels take bf16 only). The model has no way to clear its KV cache
/// and a reload of a 30B file takes longer than the run, so the sequences are timed one after
/// another on the same cache: a warm-up of 64 tokens (the products take their many-row path, as
/// the prompt's do) and 4 decode steps (kernels load, the pool fills), then the prompt at depth
/// 68 and `decode` tokens after it, then the prompt again after those (its prefill rate
/// reported apart: the same work with nothing first seen).
fn run_qwen3_moe(
    path: &Path,
    (mut file, content, vocab): (std::fs::File, gguf_file::Content, usize),
    device: &Device,
    (prompt, decode): (usize, usize),
    dtype: DType,
) -> DemoResult<serde_json::Value> {
    use candle_transformers::models::quantized_qwen3_moe::GGUFQWenMoE;
    const WARM: (usize, usize) = (64, 4);
    let t = Instant::now();
    let mut model = GGUFQWenMoE::from_gguf(content, &mut file, device, dtype)?;
    device.synchronize()?;
    let load_s = t.elapsed().as_secs_f64();
    let tokens = prompt_tokens(vocab, prompt.max(WARM.0));
    let mut sequence = |prompt: &[u32], offset: usize, decode: usize| -> DemoResult<(f64, f64)> {
        device.synchronize()?;
        let t = Instant::now();
        let logits = model.forward(&Tensor::new(prompt, device)?.unsqueeze(0)?, offset)?;
        let mut next = logits.argmax(candle_core::D::Minus1)?;
        next.to_device(&Device::Cpu)?;
        let prefill = t.elapsed().as_secs_f64();
        let t = Instant::now();
        for i in 0..decode {
            let logits = model.forward(&next.reshape((1, 1))?, offset + prompt.len() + i)?;
            next = logits.argmax(candle_core::D::Minus1)?;
        }
        next.to_device(&Device::Cpu)?;
        Ok((prefill, t.elapsed().as_secs_f64()))
    };
    sequence(&tokens[..WARM.0], 0, WARM.1)?;
    let depth = WARM.0 + WARM.1;
    let (prefill, dec) = sequence(&tokens[..prompt], depth, decode)?;
    let (again, _) = sequence(&tokens[..prompt], depth + prompt + decode, 0)?;
    Ok(serde_json::json!({
        "file": path.file_name().map(|f| f.to_string_lossy().into_owned()),
        "model": "quantized_qwen3_moe",
        "dtype": format!("{dtype:?}").to_lowercase(),
        "second_prefill_tokens_per_s": prompt as f64 / again,
        "bytes": std::fs::metadata(path)?.len(),
        "load_s": load_s,
        "prompt": prompt,
        "decode": decode,
        "depth": depth,
        "prefill_tokens_per_s": prompt as f64 / prefill,
        "decode_tokens_per_s": decode as f64 / dec,
        "peak_bytes": peak_memory(device),
    }))
}

/// Where the host's time of a decode step goes (`CANDLE_ROCM_HOST_TIME=1`): `decode` steps
/// after the prompt, each queued and then waited for, the host's time spans per category
/// divided by the steps. `queue_us`: the host's time to queue a step; `step_us`: until the
/// device has run it (the device's time where it is the longer).
fn host_time_of_decode(
    model: &mut ModelWeights,
    device: &Device,
    tokens: &[u32],
    decode: usize,
) -> DemoResult<serde_json::Value> {
    model.clear_kv_cache();
    let logits = model.forward(&Tensor::new(tokens, device)?.unsqueeze(0)?, 0)?;
    let mut next = logits.argmax(candle_core::D::Minus1)?;
    device.synchronize()?;
    let _ = candle_rocm::host_time::take();
    let (mut queue, mut step) = (0.0, 0.0);
    for i in 0..decode {
        let t = Instant::now();
        let logits = model.forward(&next.reshape((1, 1))?, tokens.len() + i)?;
        next = logits.argmax(candle_core::D::Minus1)?;
        queue += t.elapsed().as_secs_f64();
        device.synchronize()?;
        step += t.elapsed().as_secs_f64();
    }
    let per_step = 1e6 / decode as f64;
    let categories: Vec<serde_json::Value> = candle_rocm::host_time::take()
        .into_iter()
        .map(|c| {
            serde_json::json!({
                "category": c.category,
                "calls_per_step": c.count as f64 / decode as f64,
                "us_per_step": c.total.as_secs_f64() * per_step,
            })
        })
        .collect();
    Ok(serde_json::json!({
        "steps": decode,
        "queue_us": queue * per_step,
        "step_us": step * per_step,
        "categories": categories,
    }))
}

/// A short run of the file for a kernel profiler (`ncu`): the prompt, then `decode` steps, of
/// candle-transformers' `quantized_llama` (with `quantized_llama`) or the static llama (run
/// eagerly: a captured step replays the same kernels). `quantized_llama`'s steps come after one
/// warm step, inside the CUDA profiler's range (`ncu --profile-from-start off` profiles those
/// alone).
pub fn profile(
    path: &Path,
    device: &Device,
    (prompt, decode): (usize, usize),
    quantized_llama: bool,
) -> DemoResult<()> {
    use candle_rocm_e2e::static_llama::{Decoder, StaticLlama};
    let (mut file, content, vocab) = open_gguf(path)?;
    let tokens = prompt_tokens(vocab, prompt);
    if !quantized_llama {
        let model = StaticLlama::from_gguf(&content, &mut file, device, prompt + decode + 2)?;
        let mut decoder = Decoder::new(&model, tokens[0], false)?;
        decoder.prefill(&tokens)?;
        for _ in 0..decode {
            decoder.next_token()?;
        }
        device.synchronize()?;
        return Ok(());
    }
    let mut model = ModelWeights::from_gguf(content, &mut file, device)?;
    let logits = model.forward(&Tensor::new(tokens.as_slice(), device)?.unsqueeze(0)?, 0)?;
    let mut next = logits.argmax(candle_core::D::Minus1)?;
    let logits = model.forward(&next.reshape((1, 1))?, prompt)?;
    next = logits.argmax(candle_core::D::Minus1)?;
    device.synchronize()?;
    profiler_range(true);
    for i in 0..decode {
        let logits = model.forward(&next.reshape((1, 1))?, prompt + 1 + i)?;
        next = logits.argmax(candle_core::D::Minus1)?;
    }
    device.synchronize()?;
    profiler_range(false);
    Ok(())
}

/// Starts or stops the CUDA profiler's range (a no-op without Candle's CUDA backend built in).
fn profiler_range(start: bool) {
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda_backend::cudarc::driver::sys;
        // SAFETY: plain driver calls without arguments; a failure only means no profiler.
        let _ = unsafe {
            if start {
                sys::cuProfilerStart()
            } else {
                sys::cuProfilerStop()
            }
        };
    }
    #[cfg(not(feature = "cuda"))]
    let _ = start;
}

/// The host-to-device copy ceiling of a ROCm device, GB/s: 1 GiB copied three times from its
/// page-locked staging buffers with nothing written into them (the link's speed from pinned
/// memory, in the chunks every upload moves). None on other devices.
fn h2d_ceiling(device: &Device) -> DemoResult<Option<f64>> {
    let Device::Rocm(rocm) = device else {
        return Ok(None);
    };
    let raw = rocm.inner().raw();
    let bytes = 1usize << 30;
    let buf = raw.alloc(bytes)?;
    let copy = || -> DemoResult<()> {
        raw.copy_htod_with(&buf, 0, bytes, &mut |_, _| Ok(()))?;
        Ok(raw.synchronize()?)
    };
    copy()?; // the staging buffers are made
    let t = Instant::now();
    for _ in 0..3 {
        copy()?;
    }
    Ok(Some(3.0 * bytes as f64 / t.elapsed().as_secs_f64() / 1e9))
}

/// The same file through the static llama (`StaticLlama::from_gguf_file`): the prompt in one pass,
/// then `decode` greedy tokens by replaying one captured step, each token read back. Median of
/// 3 sequences after a warm-up one (which loads the kernels and captures nothing). `cache`: the
/// KV cache's dtype.
pub fn run_static(
    path: &Path,
    device: &Device,
    (prompt, decode): (usize, usize),
    cache: DType,
) -> DemoResult<serde_json::Value> {
    use candle_rocm_e2e::static_llama::{Decoder, StaticLlama};
    let (file, content, vocab) = open_gguf(path)?;
    // loaded twice: the first load compiles what kernels it needs; the second, timed as
    // llama.cpp's load is (bench/llama_load.cpp), reads a file in the page cache onto a warm
    // device
    let load = || -> DemoResult<(StaticLlama, f64)> {
        let t = Instant::now();
        let model = StaticLlama::from_gguf_file(&content, &file, device, prompt + decode + 2)?
            .with_cache_dtype(cache)?;
        device.synchronize()?;
        Ok((model, t.elapsed().as_secs_f64()))
    };
    let first_load_s = load()?.1;
    // the first model's blocks go back to the driver: the memory figure is one load's
    if let Device::Rocm(rocm) = device {
        rocm.inner().empty_cache()?;
    }
    let (model, load_s) = load()?;
    let tensor_bytes: u64 = content
        .tensor_infos
        .values()
        .map(|i| {
            (i.shape.elem_count() / i.ggml_dtype.block_size() * i.ggml_dtype.type_size()) as u64
        })
        .sum();
    let tokens = prompt_tokens(vocab, prompt);
    // (prefill seconds, decode seconds, tokens)
    type Sequence = (f64, f64, Vec<u32>);
    let sequence = |captured: bool| -> DemoResult<Sequence> {
        let mut decoder = Decoder::new(&model, tokens[0], captured)?;
        device.synchronize()?;
        let t = Instant::now();
        let mut out = vec![decoder.prefill(&tokens)?];
        let prefill = t.elapsed().as_secs_f64();
        let t = Instant::now();
        while out.len() <= decode {
            out.push(decoder.next_token()?);
        }
        Ok((prefill, t.elapsed().as_secs_f64(), out))
    };
    sequence(false)?; // warm-up: kernels load, the pool fills
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(sequence(true)?);
    }
    let (prefill, dec) = (median(&runs, |r| r.0), median(&runs, |r| r.1));
    let peak_bytes = peak_memory(device);
    // the prompt's attention as products over the cache instead of flash attention (the form
    // before it), where their scores fit: the same prefill, median of 3 after a warm-up
    let products = if prompt <= 4096 {
        let model = model.with_flash_prompts(false);
        let mut times = Vec::new();
        for _ in 0..4 {
            let mut decoder = Decoder::new(&model, tokens[0], false)?;
            device.synchronize()?;
            let t = Instant::now();
            decoder.prefill(&tokens)?;
            times.push(t.elapsed().as_secs_f64());
        }
        let mut timed = times[1..].to_vec();
        timed.sort_by(f64::total_cmp);
        Some(prompt as f64 / timed[1])
    } else {
        None
    };
    Ok(serde_json::json!({
        "file": path.file_name().map(|f| f.to_string_lossy().into_owned()),
        "model": "static llama, captured step",
        "prefill_products_tokens_per_s": products,
        "kv_cache": format!("{cache:?}").to_lowercase(),
        "load_s": load_s,
        "first_load_s": first_load_s,
        "tensor_bytes": tensor_bytes,
        "h2d_ceiling_gbps": h2d_ceiling(device)?,
        "prompt": prompt,
        "decode": decode,
        "prefill_tokens_per_s": prompt as f64 / prefill,
        "decode_tokens_per_s": decode as f64 / dec,
        "tokens": runs[0].2,
        "peak_bytes": peak_bytes,
    }))
}

/// Several sequences decoding together through the static llama (`StaticLlama::step_batch`, a
/// step of all the slots captured once and replayed), for each batch size of `batches`: each
/// slot's own seeded prompt of `prompt` tokens in a pass of its own, then `decode` steps of
/// all the slots, the greedy tokens read back after each (as a generation does). Aggregate
/// tokens/s (slots x steps / time), the prompts' rate, median of 3 after a warm-up; as
/// llama.cpp's `llama-batched-bench` with prompts not shared (`-npp` prompt, `-ntg` decode,
/// `-npl` the batch sizes).
pub fn run_static_batches(
    path: &Path,
    device: &Device,
    (prompt, decode): (usize, usize),
    cache: DType,
    batches: &[usize],
) -> DemoResult<serde_json::Value> {
    use candle_rocm_e2e::static_llama::StaticLlama;
    use candle_rocm_llm::BatchDecoder;
    let (file, content, vocab) = open_gguf(path)?;
    let model = StaticLlama::from_gguf_file(&content, &file, device, prompt + decode + 2)?
        .with_cache_dtype(cache)?;
    let mut rows = Vec::new();
    for &slots in batches {
        let prompts: Vec<Vec<u32>> = (0..slots)
            .map(|i| seeded_prompt(vocab, prompt, 7 + i as u64))
            .collect();
        let mut batch = model.new_batch(slots)?;
        let mut decoder = BatchDecoder::new(&model, true);
        // (prompts' seconds, decode seconds, slot 0's tokens)
        let mut run = || -> DemoResult<(f64, f64, Vec<u32>)> {
            device.synchronize()?;
            let t = Instant::now();
            for (i, p) in prompts.iter().enumerate() {
                batch.reset(i)?;
                model.prefill_slot(&mut batch, i, p)?;
            }
            device.synchronize()?;
            let prefill = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut first = Vec::with_capacity(decode);
            for _ in 0..decode {
                for i in 0..slots {
                    batch.advance(i)?;
                }
                let next = decoder.step(&batch)?.next.to_vec1::<u32>()?;
                first.push(next[0]);
            }
            Ok((prefill, t.elapsed().as_secs_f64(), first))
        };
        run()?; // warm-up: kernels load, the step is captured
        let runs = (0..3).map(|_| run()).collect::<DemoResult<Vec<_>>>()?;
        let (prefill, dec) = (median(&runs, |r| r.0), median(&runs, |r| r.1));
        rows.push(serde_json::json!({
            "batch": slots,
            "prefill_tokens_per_s": (slots * prompt) as f64 / prefill,
            "decode_tokens_per_s": (slots * decode) as f64 / dec,
            "decode_step_ms": dec / decode as f64 * 1e3,
            "slot0_tokens": runs[0].2,
        }));
        drop(decoder);
        drop(batch);
        if let Device::Rocm(rocm) = device {
            rocm.inner().empty_cache()?;
        }
    }
    Ok(serde_json::json!({
        "file": path.file_name().map(|f| f.to_string_lossy().into_owned()),
        "model": "static llama, batch of sequences, captured step",
        "kv_cache": format!("{cache:?}").to_lowercase(),
        "prompt": prompt,
        "decode": decode,
        "batches": rows,
        "peak_bytes": peak_memory(device),
    }))
}

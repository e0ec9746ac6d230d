//! `candle-rocm-demo --model <all-MiniLM-L6-v2 folder> [--gguf <SmolLM2 GGUF>] [--device N]`:
//! real models through Candle on `Device::Rocm`, each checked against the CPU. Exits non-zero
//! when a check fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device};
use candle_rocm_e2e::embeddings::{encode, load_tokenizer, Embedder};
use candle_rocm_e2e::gguf_chat::GgufChat;
use candle_rocm_e2e::llama::{prompt, small_config, throughput_config, Generator};
use candle_rocm_e2e::{kld, peak_memory, sync, DemoResult};

const SENTENCES: [&str; 6] = [
    "A GPU runs thousands of threads at once.",
    "Graphics cards execute many threads in parallel.",
    "The cat sleeps on the warm windowsill.",
    "A kitten naps in the sunshine by the window.",
    "Interest rates rose again this quarter.",
    "The central bank raised borrowing costs.",
];
/// Each sentence's GPU embedding against its CPU one.
const MIN_COSINE: f32 = 0.999;
const GREEDY_STEPS: usize = 32;
const SEED: u64 = 299_792_458;

struct Check {
    name: &'static str,
    passed: bool,
    detail: String,
}

fn median_ms(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

/// The largest |a - b| over the pairs; NaN if either side has one.
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, |m, d| {
            if m.is_nan() || d.is_nan() {
                f32::NAN
            } else {
                m.max(d)
            }
        })
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn embeddings(model_dir: &Path, gpu: &Device) -> DemoResult<Check> {
    println!("\n== sentence embeddings: all-MiniLM-L6-v2 (BERT), f32 ==");
    let tokenizer = load_tokenizer(model_dir)?;
    let t = Instant::now();
    let on_gpu = Embedder::load(model_dir, gpu)?;
    println!(
        "weights loaded onto the GPU in {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let on_cpu = Embedder::load(model_dir, &Device::Cpu)?;
    let batch = encode(&tokenizer, &SENTENCES, gpu)?;
    let gpu_emb = on_gpu.embed(&batch)?;
    let cpu_emb = on_cpu.embed(&encode(&tokenizer, &SENTENCES, &Device::Cpu)?)?;
    let (n, dim) = gpu_emb.dims2()?;
    println!(
        "{n} sentences -> {dim}-dim embeddings ({} tokens each, padded)",
        batch.ids.dim(1)?
    );
    let cosines = (gpu_emb.to_device(&Device::Cpu)? * &cpu_emb)?
        .sum(1)?
        .to_vec1::<f32>()?;
    for (s, c) in SENTENCES.iter().zip(&cosines) {
        println!("  cos(GPU, CPU) = {c:.6}  {s}");
    }
    let sims = gpu_emb.matmul(&gpu_emb.t()?)?.to_vec2::<f32>()?;
    println!("similarity matrix (GPU):");
    for (i, row) in sims.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|v| format!("{v:5.2}")).collect();
        println!("  [{}] {}", i, cells.join(" "));
    }
    let mut runs = Vec::new();
    for _ in 0..11 {
        sync(gpu)?;
        let t = Instant::now();
        let e = on_gpu.embed(&batch)?;
        sync(gpu)?;
        runs.push(t.elapsed().as_secs_f64() * 1e3);
        drop(e);
    }
    let worst = cosines.iter().copied().fold(f32::INFINITY, f32::min);
    let passed = worst >= MIN_COSINE;
    Ok(Check {
        name: "embeddings match the CPU",
        passed,
        detail: format!(
            "min cosine {worst:.6} (>= {MIN_COSINE}); {:.2} ms per batch of {n} (median of 11)",
            median_ms(runs)
        ),
    })
}

fn greedy_vs_cpu(gpu: &Device) -> DemoResult<Check> {
    let config = small_config();
    println!(
        "\n== text generation: llama architecture, seeded random weights, f32 ==\n\
         hidden {}, {} layers, {} heads ({} kv), vocab {}; {GREEDY_STEPS} greedy steps on the GPU and the CPU",
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.vocab_size
    );
    let p = prompt(16, config.vocab_size);
    let on_gpu =
        Generator::new(&config, SEED, DType::F32, gpu)?.greedy(&p, GREEDY_STEPS, |_| {})?;
    let on_cpu = Generator::new(&config, SEED, DType::F32, &Device::Cpu)?.greedy(
        &p,
        GREEDY_STEPS,
        |_| {},
    )?;
    println!("  GPU: {:?}", on_gpu.tokens);
    println!("  CPU: {:?}", on_cpu.tokens);
    let logit_diff = max_abs_diff(&on_gpu.first_logits, &on_cpu.first_logits);
    let same = on_gpu.tokens == on_cpu.tokens && logit_diff.is_finite();
    Ok(Check {
        name: "greedy tokens equal the CPU's",
        passed: same,
        detail: format!(
            "{} of {GREEDY_STEPS} tokens equal; first-step logits differ by at most {logit_diff:.2e}; \
             smallest top-2 margin on the CPU {:.3}",
            on_gpu.tokens.iter().zip(&on_cpu.tokens).filter(|(a, b)| a == b).count(),
            on_cpu.min_margin
        ),
    })
}

fn throughput(gpu: &Device) -> DemoResult<Check> {
    let config = throughput_config();
    let (prompt_len, steps) = (128, 128);
    println!(
        "\n== throughput: llama, hidden {}, {} layers, vocab {}, bf16 ==",
        config.hidden_size, config.num_hidden_layers, config.vocab_size
    );
    let mut generator = Generator::new(&config, SEED, DType::BF16, gpu)?;
    // warm-up: compiles and caches every kernel the model uses
    Generator::new(&config, SEED, DType::BF16, gpu)?.greedy(
        &prompt(8, config.vocab_size),
        2,
        |_| {},
    )?;
    sync(gpu)?;
    let t = Instant::now();
    let mut first_step = 0.0;
    let out = generator.greedy(&prompt(prompt_len, config.vocab_size), steps, |step| {
        if step == 0 {
            first_step = t.elapsed().as_secs_f64();
        }
        if step % 8 == 7 || step + 1 == steps {
            print!("\r  decoding {}/{steps}", step + 1);
            let _ = std::io::stdout().flush();
        }
    })?;
    sync(gpu)?;
    let total = t.elapsed().as_secs_f64();
    println!();
    let decode_rate = (steps - 1) as f64 / (total - first_step);
    let detail = format!(
        "prefill {prompt_len} tokens in {:.1} ms ({:.0} tokens/s); decode {:.1} tokens/s",
        first_step * 1e3,
        prompt_len as f64 / first_step,
        decode_rate
    );
    println!("  {detail}");
    Ok(Check {
        name: "bf16 generation runs",
        passed: out.tokens.len() == steps && out.first_logits.iter().all(|v| v.is_finite()),
        detail: format!(
            "{detail}; first-step logits all finite: {}",
            out.first_logits.iter().all(|v| v.is_finite())
        ),
    })
}

/// The chat turn SmolLM2 answers.
const CHAT_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
// A question whose 32 greedy tokens on the CPU all lead the runner-up by more than 0.12
// logits (the previous "What is a GPU?" had a step decided by 0.005, below the rounding
// difference any two backends have).
const CHAT_USER: &str = "Name the planets of the solar system.";
/// Tokens shown as the answer, and decoded for the throughput figure.
const CHAT_TOKENS: usize = 96;

fn gguf_llm(path: &Path, gpu: &Device) -> DemoResult<Vec<Check>> {
    println!(
        "\n== text generation: {} (GGUF, quantized_llama) ==",
        path.file_name()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    );
    let t = Instant::now();
    let mut on_gpu = GgufChat::load(path, gpu)?;
    println!(
        "weights loaded onto the GPU in {:.0} ms (blocks stay quantized on the device)",
        t.elapsed().as_secs_f64() * 1e3
    );
    let prompt = on_gpu.chat_prompt(CHAT_SYSTEM, CHAT_USER)?;
    println!("user: {CHAT_USER}  ({} prompt tokens)", prompt.len());
    // warm-up: the kernels compile
    on_gpu.greedy(&prompt, 2, false)?;
    let answer = on_gpu.greedy(&prompt, CHAT_TOKENS, true)?;
    println!("assistant: {}", on_gpu.decode(&answer.tokens)?.trim());
    // throughput: a fixed number of tokens, eos or not
    let timed = on_gpu.greedy(&prompt, CHAT_TOKENS, false)?;
    let prefill_rate = prompt.len() as f64 / timed.prefill_s;
    let decode_rate = (CHAT_TOKENS - 1) as f64 / timed.decode_s;
    drop(on_gpu);
    // The KL divergence from the CPU along the CPU's own greedy text, beside the CPU's
    // divergence from itself (the prompt a token at a time): see candle_rocm_e2e::kld.
    let t = Instant::now();
    let reference = kld::CpuReference::cached(path)?;
    let own = reference.own()?;
    println!(
        "KL divergence from the CPU along its greedy continuations of {} prompts ({} positions, {} in {:.1} s):",
        kld::PROMPTS.len(),
        own.positions,
        if reference.cached { "the CPU's reference read from the cache" } else { "computed on the CPU" },
        t.elapsed().as_secs_f64()
    );
    println!("  CPU, prompt a token at a time:  {own}");
    let runs = [
        (
            "quantized_llama on the GPU",
            kld::quantized_llama(path, gpu, &reference),
        ),
        (
            "static llama, eager",
            kld::static_llama(path, gpu, &reference, (false, candle_core::DType::F32)),
        ),
        (
            "static llama, captured step",
            kld::static_llama(path, gpu, &reference, (true, candle_core::DType::F32)),
        ),
        (
            "  the same, f16 KV cache",
            kld::static_llama(path, gpu, &reference, (true, candle_core::DType::F16)),
        ),
    ];
    let mut verdicts = Vec::new();
    for (what, run) in runs {
        let verdict = run.map(|d| kld::within(&d, &own));
        match &verdict {
            Ok((_, detail)) => println!("  {what:31} {detail}"),
            Err(e) => println!("  {what:31} error: {e}"),
        }
        verdicts.push(verdict.unwrap_or_else(|e| (false, format!("error: {e}"))));
    }
    let static_rate = gguf_static_rate(path, gpu, &prompt)?;
    let [(q_ok, q_detail), (eager_ok, eager_detail), (captured_ok, captured_detail), (f16_ok, f16_detail)] =
        <[(bool, String); 4]>::try_from(verdicts).map_err(|_| "four KL runs")?;
    Ok(vec![
        Check {
            name: "GGUF LLM: quantized_llama on the GPU is as close to the CPU as the CPU is to itself (KL divergence)",
            passed: q_ok && !answer.tokens.is_empty(),
            detail: q_detail,
        },
        Check {
            name: "GGUF LLM: throughput",
            passed: prefill_rate.is_finite() && decode_rate.is_finite(),
            detail: format!(
                "prefill {} tokens at {prefill_rate:.0} tokens/s; decode {decode_rate:.1} tokens/s (batch 1, {CHAT_TOKENS} tokens)",
                prompt.len()
            ),
        },
        Check {
            name: "GGUF LLM as the static llama, eager: as close to the CPU as the CPU is to itself",
            passed: eager_ok,
            detail: eager_detail,
        },
        Check {
            name: "GGUF LLM as the static llama, its decode step captured: as close to the CPU as the CPU is to itself",
            passed: captured_ok && static_rate.is_finite(),
            detail: format!(
                "{captured_detail}; decode {static_rate:.1} tokens/s replaying the step (quantized_llama: {decode_rate:.1})"
            ),
        },
        Check {
            name: "GGUF LLM as the static llama, captured, with an f16 KV cache: as close to the CPU as the CPU is to itself",
            passed: f16_ok,
            detail: f16_detail,
        },
    ])
}

/// The decode rate of the same GGUF file through the static llama, its decode step captured
/// once and replayed (tokens read back one by one).
fn gguf_static_rate(path: &Path, gpu: &Device, prompt: &[u32]) -> DemoResult<f64> {
    use candle_rocm_e2e::static_llama::{Decoder, StaticLlama};
    let mut file = std::fs::File::open(path)?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut file)?;
    let model = StaticLlama::from_gguf(&content, &mut file, gpu, prompt.len() + CHAT_TOKENS + 2)?;
    let mut decoder = Decoder::new(&model, prompt[0], true)?;
    decoder.prefill(prompt)?;
    // an eager step (kernels loaded), then the capture
    decoder.next_token()?;
    decoder.next_token()?;
    let steps = CHAT_TOKENS - 3;
    let t = Instant::now();
    for _ in 0..steps {
        decoder.next_token()?;
    }
    Ok(steps as f64 / t.elapsed().as_secs_f64())
}

/// An f16 copy of the model (weights halved in size, for the GPU pack): safetensors in f16,
/// config and tokenizer as they are. The demo loads it back in f32.
fn export_f16(from: &Path, to: &Path) -> DemoResult<()> {
    std::fs::create_dir_all(to)?;
    let tensors = candle_core::safetensors::load(from.join("model.safetensors"), &Device::Cpu)?;
    let halved = tensors
        .into_iter()
        .map(|(name, t)| Ok((name, t.to_dtype(DType::F16)?)))
        .collect::<candle_core::Result<std::collections::HashMap<_, _>>>()?;
    candle_core::safetensors::save(&halved, to.join("model.safetensors"))?;
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(from.join(file), to.join(file))?;
    }
    Ok(())
}

fn run() -> DemoResult<bool> {
    let mut args = std::env::args().skip(1).peekable();
    if args.next_if_eq("--export-f16").is_some() {
        let (Some(from), Some(to)) = (args.next(), args.next()) else {
            return Err("--export-f16 <model folder> <destination>".into());
        };
        export_f16(Path::new(&from), Path::new(&to))?;
        return Ok(true);
    }
    let (mut model_dir, mut gguf, mut ordinal) = (None, None, 0usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--model" => model_dir = args.next().map(PathBuf::from),
            "--gguf" => gguf = args.next().map(PathBuf::from),
            "--device" => ordinal = args.next().ok_or("--device needs a number")?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let model_dir = model_dir.ok_or("--model <all-MiniLM-L6-v2 folder> is required")?;
    let gpu = Device::new_rocm(ordinal)?;
    let info = gpu.as_rocm_device()?.inner().raw().info().clone();
    println!(
        "Candle 0.11.1 on Device::Rocm({ordinal}): {} ({}, {} platform)",
        info.name, info.arch, info.platform
    );
    let started = Instant::now();
    let failed = |name: &'static str, e: Box<dyn std::error::Error + Send + Sync>| Check {
        name,
        passed: false,
        detail: format!("error: {e}"),
    };
    let mut checks = vec![
        embeddings(&model_dir, &gpu).unwrap_or_else(|e| failed("embeddings match the CPU", e))
    ];
    match &gguf {
        Some(path) => match gguf_llm(path, &gpu) {
            Ok(c) => checks.extend(c),
            Err(e) => checks.push(failed(
                "GGUF LLM: as close to the CPU as the CPU is to itself",
                e,
            )),
        },
        None => println!("\n(no --gguf file: the quantized LLM is left out)"),
    }
    checks.extend([
        greedy_vs_cpu(&gpu).unwrap_or_else(|e| failed("greedy tokens equal the CPU's", e)),
        throughput(&gpu).unwrap_or_else(|e| failed("bf16 generation runs", e)),
    ]);
    println!("\n== summary ==");
    println!(
        "device: {} ({}), {:.1} GiB",
        info.name,
        info.arch,
        info.total_memory as f64 / (1u64 << 30) as f64
    );
    for c in &checks {
        println!(
            "  [{}] {}: {}",
            if c.passed { "PASSED" } else { "FAILED" },
            c.name,
            c.detail
        );
    }
    if let Some(peak) = peak_memory(&gpu) {
        println!("peak device memory in use: {:.1} MiB", mib(peak));
    }
    println!("total {:.1} s", started.elapsed().as_secs_f64());
    Ok(checks.iter().all(|c| c.passed))
}

fn main() {
    match run() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("candle-rocm-demo: {e}");
            std::process::exit(2);
        }
    }
}

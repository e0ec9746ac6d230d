//! Device graphs through Candle's API (GPU tests): a llama decode step captured once and
//! replayed gives the tokens and logits of the same step run eagerly, and the tokens of
//! candle-transformers' llama on the same weights, with the attention fused into one kernel or
//! run as separate ops.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_rocm_e2e::llama::{self, fnv1a, prompt, DrawnWeights, Generator};
use candle_rocm_e2e::static_llama::{self, StaticLlama};

const SEED: u64 = 7;

/// The largest |a - b| over two equally long slices.
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn static_model(config: &candle_transformers::models::llama::Config, dev: &Device) -> StaticLlama {
    static_model_in(config, DType::F32, dev)
}

fn static_model_in(
    config: &candle_transformers::models::llama::Config,
    dtype: DType,
    dev: &Device,
) -> StaticLlama {
    static_model_of(config, dtype, dev, 256)
}

fn static_model_of(
    config: &candle_transformers::models::llama::Config,
    dtype: DType,
    dev: &Device,
    max_len: usize,
) -> StaticLlama {
    let weights = DrawnWeights::new(|name, n| llama::normal_values(SEED ^ fnv1a(name), n, 0.15));
    let vb = VarBuilder::from_backend(Box::new(&weights), dtype, dev.clone());
    StaticLlama::load(vb, config, max_len).unwrap()
}

/// The mean |a - b| over two equally long slices.
fn mean_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .sum::<f64>()
        / a.len() as f64
}

#[test]
fn a_bf16_model_with_a_bf16_cache_is_as_near_f32_as_candle_transformers_bf16_llama() {
    let dev = Device::new_rocm(0).unwrap();
    let config = llama::small_config();
    let prompt = prompt(9, config.vocab_size);
    let steps = 24;
    // q, k and v stay in bf16 (no casts around the attention): captured as eager, bit for bit
    let model = static_model_in(&config, DType::BF16, &dev)
        .with_cache_dtype(DType::BF16)
        .unwrap();
    let (eager, eager_logits) = static_llama::greedy(&model, &prompt, steps, false).unwrap();
    let (replayed, replayed_logits) = static_llama::greedy(&model, &prompt, steps, true).unwrap();
    assert_eq!(replayed, eager, "tokens of the replayed step");
    assert_eq!(replayed_logits, eager_logits, "first logits, bit for bit");
    // the yardstick: candle-transformers' llama in bf16 (its cache in bf16, attention in f32),
    // both measured against the f32 model's first logits
    let (_, exact) = static_llama::greedy(&static_model(&config, &dev), &prompt, 1, false).unwrap();
    let mut reference = Generator::new(&config, SEED, DType::BF16, &dev).unwrap();
    let theirs = reference.greedy(&prompt, 1, |_| {}).unwrap().first_logits;
    let (ours, theirs) = (
        mean_abs_diff(&eager_logits, &exact),
        mean_abs_diff(&theirs, &exact),
    );
    println!("first logits against f32's, mean |diff|: static bf16 {ours:.3e}, candle-transformers bf16 {theirs:.3e}");
    assert!(
        ours <= 1.5 * theirs,
        "the bf16 static llama is {ours:.3e} from f32, candle-transformers' bf16 llama {theirs:.3e}"
    );
}

#[test]
fn a_captured_decode_step_replays_the_eager_one() {
    let dev = Device::new_rocm(0).unwrap();
    let config = llama::small_config();
    let model = static_model(&config, &dev);
    let prompt = prompt(9, config.vocab_size);
    let steps = 40;
    let (eager, eager_logits) = static_llama::greedy(&model, &prompt, steps, false).unwrap();
    let (replayed, replayed_logits) = static_llama::greedy(&model, &prompt, steps, true).unwrap();
    assert_eq!(eager.len(), steps);
    assert_eq!(replayed, eager, "tokens of the replayed step");
    assert_eq!(replayed_logits, eager_logits, "first logits, bit for bit");

    // candle-transformers' llama on the same weights (prompt in one pass, a growing cache).
    let mut reference = Generator::new(&config, SEED, DType::F32, &dev).unwrap();
    let greedy = reference.greedy(&prompt, steps, |_| {}).unwrap();
    assert_eq!(eager, greedy.tokens, "tokens of candle-transformers' llama");
    let diff = max_abs_diff(&eager_logits, &greedy.first_logits);
    assert!(diff < 1e-3, "first logits differ by {diff}");

    // Attention as separate ops (gemm, mask, softmax, gemm) instead of the fused kernel.
    let unfused = static_model(&config, &dev).with_unfused_attention();
    let (tokens, logits) = static_llama::greedy(&unfused, &prompt, steps, true).unwrap();
    assert_eq!(tokens, eager, "tokens with unfused attention");
    let diff = max_abs_diff(&logits, &eager_logits);
    assert!(
        diff < 1e-4,
        "first logits of the unfused attention differ by {diff}"
    );
}

#[test]
fn a_graph_keeps_its_outputs_and_returns_its_memory() {
    let dev = Device::new_rocm(0).unwrap();
    let Device::Rocm(rocm) = &dev else {
        unreachable!()
    };
    let x = (Tensor::arange(0f32, 4096., &dev).unwrap() * 1e-3).unwrap();
    let scale = Tensor::new(&[2f32], &dev).unwrap();
    // uncaptured once, then captured
    let run = || (x.broadcast_mul(&scale)?.exp()? + 1.0)?.sum_all();
    drop(run().unwrap());
    let before = rocm.inner().memory_stats();
    let (graph, out) = rocm.capture(run).unwrap();
    let reserved = rocm.inner().memory_stats().graph_reserved_bytes;
    assert!(reserved > 0, "the temporaries stay with the graph");
    let x_host = x.to_device(&Device::Cpu).unwrap();
    for s in [1f32, 0.5, -1.0] {
        scale
            .slice_set(&Tensor::new(&[s], &dev).unwrap(), 0, 0)
            .unwrap();
        graph.replay().unwrap();
        let got = out.to_scalar::<f32>().unwrap();
        let want = ((x_host.clone() * s as f64).unwrap().exp().unwrap() + 1.0)
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(
            (got - want).abs() <= 1e-4 * want.abs(),
            "scale {s}: {got} vs {want}"
        );
    }
    drop(out);
    drop(graph);
    let after = rocm.inner().memory_stats();
    assert_eq!(after.graph_reserved_bytes, 0);
    assert_eq!(after.in_use_bytes, before.in_use_bytes);
    // A host read inside a capture is Candle's error, and the device carries on.
    let err = rocm.capture(|| x.to_vec1::<f32>()).unwrap_err();
    assert!(err.to_string().contains("capture"), "{err}");
    assert_eq!(
        x.narrow(0, 1, 2).unwrap().to_vec1::<f32>().unwrap(),
        x_host.narrow(0, 1, 2).unwrap().to_vec1::<f32>().unwrap()
    );
}

/// A small llama as a GGUF file (llama.cpp's names, Q8_0 blocks from seeded values).
fn write_small_gguf(path: &std::path::Path) {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    let (hidden, heads, kv_heads, ffn, layers, vocab) =
        (128usize, 4usize, 2usize, 256usize, 2usize, 256usize);
    let head_dim = hidden / heads;
    let cpu = Device::Cpu;
    let mut seed = 0u64;
    let mut q8 = |dims: &[usize]| {
        seed += 1;
        let n: usize = dims.iter().product();
        let t = Tensor::from_vec(llama::normal_values(seed, n, 0.15), dims, &cpu).unwrap();
        QTensor::quantize(&t, GgmlDType::Q8_0).unwrap()
    };
    let ones = |n: usize| {
        QTensor::quantize(&Tensor::ones(n, DType::F32, &cpu).unwrap(), GgmlDType::F32).unwrap()
    };
    let mut tensors: Vec<(String, QTensor)> = vec![
        ("token_embd.weight".into(), q8(&[vocab, hidden])),
        ("output_norm.weight".into(), ones(hidden)),
        ("output.weight".into(), q8(&[vocab, hidden])),
    ];
    for l in 0..layers {
        for (name, dims) in [
            ("attn_q", [hidden, hidden]),
            ("attn_k", [kv_heads * head_dim, hidden]),
            ("attn_v", [kv_heads * head_dim, hidden]),
            ("attn_output", [hidden, hidden]),
            ("ffn_gate", [ffn, hidden]),
            ("ffn_up", [ffn, hidden]),
            ("ffn_down", [hidden, ffn]),
        ] {
            tensors.push((format!("blk.{l}.{name}.weight"), q8(&dims)));
        }
        tensors.push((format!("blk.{l}.attn_norm.weight"), ones(hidden)));
        tensors.push((format!("blk.{l}.ffn_norm.weight"), ones(hidden)));
    }
    let u32v = |v: usize| gguf_file::Value::U32(v as u32);
    let metadata = [
        (
            "general.architecture",
            gguf_file::Value::String("llama".into()),
        ),
        ("llama.context_length", u32v(512)),
        ("llama.embedding_length", u32v(hidden)),
        ("llama.block_count", u32v(layers)),
        ("llama.feed_forward_length", u32v(ffn)),
        ("llama.attention.head_count", u32v(heads)),
        ("llama.attention.head_count_kv", u32v(kv_heads)),
        ("llama.rope.dimension_count", u32v(head_dim)),
        ("llama.rope.freq_base", gguf_file::Value::F32(10_000.)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            gguf_file::Value::F32(1e-5),
        ),
        ("llama.vocab_size", u32v(vocab)),
    ];
    let md: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &md, &ts).unwrap();
}

#[test]
fn a_gguf_llama_decodes_as_quantized_llama() {
    use candle_core::quantized::gguf_file;
    use candle_transformers::models::quantized_llama::ModelWeights;
    let path = std::env::temp_dir().join(format!("candle-rocm-small-{}.gguf", std::process::id()));
    write_small_gguf(&path);
    let dev = Device::new_rocm(0).unwrap();
    let read = || {
        let mut file = std::fs::File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut file).unwrap();
        (content, file)
    };
    let prompt: Vec<u32> = (0..9).map(|i| (i * 37 + 5) % 256).collect();
    let steps = 24;

    // candle-transformers' quantized_llama: the prompt in one pass, then a token a step
    let (content, mut file) = read();
    let mut reference = ModelWeights::from_gguf(content, &mut file, &dev).unwrap();
    let logits = reference
        .forward(
            &Tensor::new(prompt.as_slice(), &dev)
                .unwrap()
                .unsqueeze(0)
                .unwrap(),
            0,
        )
        .unwrap();
    let first_logits: Vec<f32> = logits.flatten_all().unwrap().to_vec1().unwrap();
    let mut want = Vec::new();
    let mut next = logits.argmax(candle_core::D::Minus1).unwrap();
    for i in 0..steps {
        let token = next.flatten_all().unwrap().to_vec1::<u32>().unwrap()[0];
        want.push(token);
        if i + 1 < steps {
            let logits = reference
                .forward(&Tensor::new(&[[token]], &dev).unwrap(), prompt.len() + i)
                .unwrap();
            next = logits.argmax(candle_core::D::Minus1).unwrap();
        }
    }

    let (content, mut file) = read();
    let model = StaticLlama::from_gguf(&content, &mut file, &dev, 64).unwrap();
    for captured in [false, true] {
        let (got, logits) = static_llama::greedy(&model, &prompt, steps, captured).unwrap();
        assert_eq!(got, want, "tokens (captured: {captured})");
        let diff = max_abs_diff(&logits, &first_logits);
        assert!(diff < 1e-3, "first logits differ by {diff}");
    }
    // a cache longer than the file's context is refused
    let (content, mut file) = read();
    assert!(StaticLlama::from_gguf(&content, &mut file, &dev, 4096).is_err());
    std::fs::remove_file(&path).unwrap();
}

/// The static llama's prompts through flash attention (a 16-bit cache: rocm-attention's kernel
/// on the matrix units; an f32 cache past its scores' size: the f32 kernel). A 64-token prompt
/// with an f16 cache is as near the f32 model's first logits as candle-transformers' f16 llama
/// (attention in f32) is, with the yardstick of the bf16 test above (1.5x); a long prompt (32K
/// tokens; 8K with emulated wavefronts, whose matrix units are software) runs, and prefilled in
/// one pass or in four chunks (later chunks' queries see the earlier ones' keys) gives the
/// same last logits up to the f16 cache's rounding.
#[test]
fn prompts_run_flash_attention_and_a_long_prompt_runs() {
    let dev = Device::new_rocm(0).unwrap();
    let config = llama::small_config();
    let prompt_tokens = prompt(64, config.vocab_size);
    let (_, exact) =
        static_llama::greedy(&static_model(&config, &dev), &prompt_tokens, 1, false).unwrap();
    let flash = static_model(&config, &dev)
        .with_cache_dtype(DType::F16)
        .unwrap();
    let (_, ours) = static_llama::greedy(&flash, &prompt_tokens, 1, false).unwrap();
    let mut reference = Generator::new(&config, SEED, DType::F16, &dev).unwrap();
    let theirs = reference
        .greedy(&prompt_tokens, 1, |_| {})
        .unwrap()
        .first_logits;
    let (ours, theirs) = (mean_abs_diff(&ours, &exact), mean_abs_diff(&theirs, &exact));
    println!("64-token prompt, first logits against f32's, mean |diff|: static f16 cache (flash) {ours:.3e}, candle-transformers f16 {theirs:.3e}");
    assert!(
        ours <= 1.5 * theirs,
        "flash {ours:.3e}, candle-transformers f16 {theirs:.3e}"
    );

    let Device::Rocm(rocm) = &dev else {
        unreachable!()
    };
    let emulated = rocm.inner().raw().info().warp_size == 64;
    let len = if emulated { 8192 } else { 32768 };
    let long = prompt(len, config.vocab_size);
    let config = candle_transformers::models::llama::Config {
        max_position_embeddings: len + 8,
        ..config
    };
    let model = static_model_of(&config, DType::F32, &dev, len + 8)
        .with_cache_dtype(DType::F16)
        .unwrap();
    let last = |chunks: usize| -> Vec<f32> {
        let mut state = model.new_state(long[0]).unwrap();
        let mut out = None;
        for chunk in long.chunks(len / chunks) {
            out = Some(model.prefill(&mut state, chunk).unwrap());
        }
        out.unwrap()
            .logits
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let started = std::time::Instant::now();
    let whole = last(1);
    let one_pass = started.elapsed();
    let chunked = last(4);
    assert!(
        whole.iter().all(|x| x.is_finite()),
        "{len} tokens: logits not finite"
    );
    let diff = max_abs_diff(&whole, &chunked);
    let spread = whole.iter().fold(0f32, |m, x| m.max(x.abs()));
    println!("{len}-token prompt (f16 cache, flash attention): prefilled in {one_pass:.2?}; last logits up to {spread:.3}, one pass against four chunks {diff:.3e}");
    assert!(
        diff <= 2e-3 * spread.max(1.0),
        "one pass and chunks differ by {diff:e}"
    );
}

//! candle-nn's mixture-of-experts products (`moe_gemm`, `moe_gemm_gguf`) off CUDA: on the CPU
//! (here, any machine) against references written in the test, and (with `gpu-tests`) on
//! `Device::Rocm` against the CPU. The routing is made as candle-transformers' `FusedMoe` makes
//! it: the top-k experts of random router logits, sorted by expert.
//!
//! One file: the CPU checks and their GPU forms share the routing and the references, and the
//! GPU pack carries one binary for them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, IndexOp, Module, Tensor, D};
use candle_nn::moe::{moe_gemm, moe_gemm_gguf};
use candle_rocm_e2e::SplitMix64;

fn random(rng: &mut SplitMix64, dims: &[usize]) -> Tensor {
    let n = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

/// (top-k ids (tokens, topk), top-k weights, experts sorted, pair index sorted), as FusedMoe.
fn routing(rng: &mut SplitMix64, tokens: usize, experts: usize, topk: usize) -> [Tensor; 4] {
    route(&random(rng, &[tokens, experts]), topk)
}

/// FusedMoe's routing of router logits (any device): the ops of [`routing`], the weights not
/// normalized.
fn route(logits: &Tensor, topk: usize) -> [Tensor; 4] {
    let probs = candle_nn::ops::softmax_last_dim(logits).unwrap();
    let ids = probs
        .arg_sort_last_dim(false)
        .unwrap()
        .narrow(D::Minus1, 0, topk)
        .unwrap()
        .contiguous()
        .unwrap();
    let weights = probs.gather(&ids, D::Minus1).unwrap();
    let (sorted, order) = ids.flatten_all().unwrap().sort_last_dim(true).unwrap();
    [ids, weights, sorted, order]
}

/// The largest |a - b| of two tensors (any devices, any float dtype).
fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let f = |t: &Tensor| {
        t.to_device(&Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
    };
    (f(a) - f(b))
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

fn scale(v: &[f32]) -> f32 {
    v.iter().fold(1e-3f32, |m, x| m.max(x.abs()))
}

/// Each pair's expert product by hand: CPU `QMatMul` of that expert alone on that one row (the
/// arithmetic the routed CPU form groups), and the dequantized weights in f32.
fn gguf_reference(
    w: &QTensor,
    x: &Tensor,
    ids: &Tensor,
    pair_weights: Option<&Tensor>,
) -> (Vec<f32>, Vec<f32>) {
    let (experts, n, k) = w.shape().dims3().unwrap();
    let (_, topk) = ids.dims2().unwrap();
    let bytes = w.data().unwrap();
    let per = bytes.len() / experts;
    let dense = w.dequantize(&Device::Cpu).unwrap();
    let ids = ids.to_vec2::<u32>().unwrap();
    let (mut exact, mut loose) = (Vec::new(), Vec::new());
    for (t, row) in ids.iter().enumerate() {
        for (s, &e) in row.iter().enumerate() {
            let p = t * topk + s;
            let xr = if pair_weights.is_some() {
                x.i(p..p + 1).unwrap()
            } else {
                x.i(t..t + 1).unwrap()
            };
            let e = e as usize;
            let storage = candle_core::quantized::QStorage::from_data(
                std::borrow::Cow::Borrowed(&bytes[e * per..(e + 1) * per]),
                &Device::Cpu,
                w.dtype(),
            )
            .unwrap();
            let qmm = QMatMul::from_qtensor(QTensor::new(storage, (n, k)).unwrap()).unwrap();
            let mut a = qmm
                .forward(&xr)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let mut b = xr
                .matmul(&dense.i(e).unwrap().t().unwrap())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            if let Some(pw) = pair_weights {
                let g = pw.flatten_all().unwrap().to_vec1::<f32>().unwrap()[p];
                a.iter_mut().for_each(|v| *v *= g);
                b.iter_mut().for_each(|v| *v *= g);
            }
            exact.extend(a);
            loose.extend(b);
        }
    }
    (exact, loose)
}

#[test]
fn moe_gemm_gguf_on_the_cpu_is_each_pairs_expert_product() {
    let mut rng = SplitMix64(41);
    let mut checked = 0;
    for ty in [
        GgmlDType::Q4_0,
        GgmlDType::Q8_0,
        GgmlDType::Q4K,
        GgmlDType::Q6K,
    ] {
        for (experts, topk, tokens) in [(8, 1, 3), (8, 2, 7), (16, 8, 5)] {
            let (n, k) = (48, 512);
            let w = QTensor::quantize(&random(&mut rng, &[experts, n, k]), ty).unwrap();
            let [ids, pair_w, sorted, order] = routing(&mut rng, tokens, experts, topk);
            // gate/up form: one row per token, every slot reads it
            let x = random(&mut rng, &[tokens, k]);
            let y = moe_gemm_gguf(&x, &w, &None, &order, &sorted, topk, false, DType::F32).unwrap();
            assert_eq!(y.dims(), &[tokens * topk, n]);
            let got = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (exact, loose) = gguf_reference(&w, &x, &ids, None);
            // equal to f32 rounding: the CPU's QMatMul of several rows may sum in another order
            // than of one row (Q6_K differs in the last bits, Q4_0/Q8_0/Q4_K do not)
            let s = scale(&exact);
            for (g, e) in got.iter().zip(&exact) {
                assert!(
                    (g - e).abs() <= 1e-6 * s,
                    "{ty:?} {experts} experts, top {topk}, {tokens} tokens: {g} vs {e}"
                );
            }
            let s = scale(&loose);
            for (g, l) in got.iter().zip(&loose) {
                assert!((g - l).abs() <= 0.03 * s, "{ty:?}: {g} vs {l} (scale {s})");
            }
            // down form: a row per pair, scaled by the pair's weight
            let xp = random(&mut rng, &[tokens * topk, k]);
            let y = moe_gemm_gguf(
                &xp,
                &w,
                &Some(pair_w.clone()),
                &order,
                &sorted,
                topk,
                false,
                DType::F32,
            )
            .unwrap();
            let got = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let (exact, _) = gguf_reference(&w, &xp, &ids, Some(&pair_w));
            for (g, e) in got.iter().zip(&exact) {
                assert!((g - e).abs() <= 1e-6 * scale(&exact), "{ty:?}: {g} vs {e}");
            }
            checked += 2;
        }
    }
    println!("moe_gemm_gguf on the CPU: {checked} cases");
}

#[test]
fn moe_gemm_on_the_cpu_is_each_pairs_expert_product() {
    let mut rng = SplitMix64(43);
    let (experts, n, k, tokens, topk) = (6, 40, 64, 9, 2);
    let w = random(&mut rng, &[experts, n, k]);
    let [ids, pair_w, sorted, order] = routing(&mut rng, tokens, experts, topk);
    let x = random(&mut rng, &[tokens, k]);
    let y = moe_gemm(&x, &w, &None, &order, &sorted, topk, true).unwrap();
    let xp = random(&mut rng, &[tokens * topk, k]);
    let yp = moe_gemm(&xp, &w, &Some(pair_w.clone()), &order, &sorted, topk, false).unwrap();
    let ids = ids.to_vec2::<u32>().unwrap();
    let pw = pair_w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    for (t, row) in ids.iter().enumerate() {
        for (s, &e) in row.iter().enumerate() {
            let p = t * topk + s;
            let we = w.i(e as usize).unwrap().t().unwrap();
            let want = x.i(t..t + 1).unwrap().matmul(&we).unwrap();
            let got = y.i(p..p + 1).unwrap();
            let d = max_diff(&got, &want);
            assert!(d <= 1e-5, "pair {p}: {d}");
            let want = (xp.i(p..p + 1).unwrap().matmul(&we).unwrap() * f64::from(pw[p])).unwrap();
            let got = yp.i(p..p + 1).unwrap();
            let d = max_diff(&got, &want);
            assert!(d <= 1e-5, "pair {p}, weighted: {d}");
        }
    }
}

#[test]
fn a_bad_routing_is_an_error() {
    let mut rng = SplitMix64(47);
    let (experts, n, k, tokens, topk) = (4, 8, 256, 3, 2);
    let w = QTensor::quantize(&random(&mut rng, &[experts, n, k]), GgmlDType::Q8_0).unwrap();
    let wf = random(&mut rng, &[experts, n, k]);
    let [_, _, sorted, order] = routing(&mut rng, tokens, experts, topk);
    let x = random(&mut rng, &[tokens, k]);
    // a routing of another length
    let short = order.narrow(0, 0, 5).unwrap();
    assert!(moe_gemm_gguf(&x, &w, &None, &short, &sorted, topk, false, DType::F32).is_err());
    assert!(moe_gemm(&x, &wf, &None, &short, &sorted, topk, false).is_err());
    // an expert past the weights
    let past = Tensor::new(&[0u32, 0, 1, 1, 2, 9], &Device::Cpu).unwrap();
    let e = moe_gemm_gguf(&x, &w, &None, &order, &past, topk, false, DType::F32).unwrap_err();
    assert!(e.to_string().contains("expert id 9"), "{e}");
    assert!(moe_gemm(&x, &wf, &None, &order, &past, topk, false).is_err());
    // inputs of another width
    let narrow = random(&mut rng, &[tokens, 128]);
    assert!(moe_gemm_gguf(&narrow, &w, &None, &order, &sorted, topk, false, DType::F32).is_err());
    assert!(moe_gemm(&narrow, &wf, &None, &order, &sorted, topk, false).is_err());
}

/// A small Qwen3-MoE as a GGUF file (llama.cpp's names for `qwen3moe`): every layer a mixture
/// of `experts` experts of which `used` run, the experts' blocks of type `ty` from seeded
/// values. Returns its path (a temporary file the caller removes).
fn write_qwen3_moe_gguf(ty: GgmlDType, experts: usize, used: usize) -> std::path::PathBuf {
    use candle_core::quantized::gguf_file;
    // Widths and types Candle's CPU multiplies with ggml's arithmetic on every host: where the
    // host has AVX-512 VNNI it takes other arithmetic for Q8_0 matrices of a multiple of 16
    // rows and 256 columns (activations quantized per 256 values, 0.6% from ggml's result),
    // which would make the reference, not the GPU, the odd one out. So Q8_0 experts get widths
    // of 288 and the attention Q4_0 (no tiling). Q4_K's tiling keeps ggml's arithmetic (to
    // 1e-6) and needs widths of a multiple of 256.
    let width = if ty == GgmlDType::Q8_0 { 288 } else { 256 };
    let (hidden, heads, kv_heads, head_dim, moe_ffn, layers, vocab) =
        (width, 4, 2, 64, width, 2, 300);
    let mut rng = SplitMix64(61 + experts as u64);
    let mut q = |dims: &[usize], ty: GgmlDType| {
        let t = (random(&mut rng, dims) * 0.2).unwrap();
        QTensor::quantize(&t, ty).unwrap()
    };
    let ones = |n: usize| {
        QTensor::quantize(
            &Tensor::ones(n, DType::F32, &Device::Cpu).unwrap(),
            GgmlDType::F32,
        )
        .unwrap()
    };
    let mut tensors: Vec<(String, QTensor)> = vec![
        (
            "token_embd.weight".into(),
            q(&[vocab, hidden], GgmlDType::Q8_0),
        ),
        ("output_norm.weight".into(), ones(hidden)),
        ("output.weight".into(), q(&[vocab, hidden], GgmlDType::Q8_0)),
    ];
    for l in 0..layers {
        let p = format!("blk.{l}");
        for (name, dims) in [
            ("attn_q", vec![heads * head_dim, hidden]),
            ("attn_k", vec![kv_heads * head_dim, hidden]),
            ("attn_v", vec![kv_heads * head_dim, hidden]),
            ("attn_output", vec![hidden, heads * head_dim]),
        ] {
            tensors.push((format!("{p}.{name}.weight"), q(&dims, GgmlDType::Q4_0)));
        }
        tensors.push((
            format!("{p}.ffn_gate_inp.weight"),
            q(&[experts, hidden], GgmlDType::F32),
        ));
        tensors.push((
            format!("{p}.ffn_gate_exps.weight"),
            q(&[experts, moe_ffn, hidden], ty),
        ));
        tensors.push((
            format!("{p}.ffn_up_exps.weight"),
            q(&[experts, moe_ffn, hidden], ty),
        ));
        tensors.push((
            format!("{p}.ffn_down_exps.weight"),
            q(&[experts, hidden, moe_ffn], ty),
        ));
        for (name, n) in [
            ("attn_norm", hidden),
            ("ffn_norm", hidden),
            ("attn_q_norm", head_dim),
            ("attn_k_norm", head_dim),
        ] {
            tensors.push((format!("{p}.{name}.weight"), ones(n)));
        }
    }
    let u32v = |v: usize| gguf_file::Value::U32(v as u32);
    let metadata = [
        (
            "general.architecture",
            gguf_file::Value::String("qwen3moe".into()),
        ),
        ("qwen3moe.context_length", u32v(256)),
        ("qwen3moe.embedding_length", u32v(hidden)),
        ("qwen3moe.block_count", u32v(layers)),
        ("qwen3moe.attention.head_count", u32v(heads)),
        ("qwen3moe.attention.head_count_kv", u32v(kv_heads)),
        ("qwen3moe.attention.key_length", u32v(head_dim)),
        ("qwen3moe.rope.freq_base", gguf_file::Value::F32(1_000_000.)),
        (
            "qwen3moe.attention.layer_norm_rms_epsilon",
            gguf_file::Value::F32(1e-6),
        ),
        ("qwen3moe.expert_feed_forward_length", u32v(moe_ffn)),
        ("qwen3moe.expert_count", u32v(experts)),
        ("qwen3moe.expert_used_count", u32v(used)),
    ];
    let md: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let path = std::env::temp_dir().join(format!(
        "candle-rocm-qwen3moe-{}-{experts}-{ty:?}.gguf",
        std::process::id()
    ));
    let mut file = std::fs::File::create(&path).unwrap();
    gguf_file::write(&mut file, &md, &ts).unwrap();
    path
}

/// The file at `path`, open, and its GGUF header.
fn read_gguf(
    path: &std::path::Path,
) -> (
    std::fs::File,
    candle_core::quantized::gguf_file::Content,
) {
    let mut file = std::fs::File::open(path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    (file, content)
}

/// candle-transformers' `quantized_qwen3_moe` loaded on `device` from the file at `path`.
fn quantized_qwen3_moe(
    path: &std::path::Path,
    device: &Device,
) -> candle_transformers::models::quantized_qwen3_moe::GGUFQWenMoE {
    use candle_transformers::models::quantized_qwen3_moe::GGUFQWenMoE;
    let (mut file, content) = read_gguf(path);
    GGUFQWenMoE::from_gguf(content, &mut file, device, DType::F32).unwrap()
}

/// candle-transformers' `quantized_qwen3_moe` on `device` from the file at `path`: the logits
/// after `prompt` (one forward), then after each of `forced` fed in turn.
fn qwen3_moe_logits(
    path: &std::path::Path,
    device: &Device,
    prompt: &[u32],
    forced: &[u32],
) -> Vec<Vec<f32>> {
    let mut model = quantized_qwen3_moe(path, device);
    let row = |t: Tensor| {
        t.flatten_all()
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let mut out = vec![row(model
        .forward(
            &Tensor::new(prompt, device).unwrap().unsqueeze(0).unwrap(),
            0,
        )
        .unwrap())];
    for (i, &t) in forced.iter().enumerate() {
        let x = Tensor::new(&[[t]], device).unwrap();
        out.push(row(model.forward(&x, prompt.len() + i).unwrap()));
    }
    out
}

/// `steps` greedy tokens after `prompt` on `device`, and the logits each was picked from.
fn qwen3_moe_greedy(
    path: &std::path::Path,
    device: &Device,
    prompt: &[u32],
    steps: usize,
) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut model = quantized_qwen3_moe(path, device);
    let (mut tokens, mut all) = (Vec::new(), Vec::new());
    let mut input = Tensor::new(prompt, device).unwrap().unsqueeze(0).unwrap();
    let mut pos = 0;
    for _ in 0..steps {
        let logits = model
            .forward(&input, pos)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        pos += input.dim(1).unwrap();
        let next = argmax(&logits);
        tokens.push(next);
        all.push(logits);
        input = Tensor::new(&[[next]], device).unwrap();
    }
    (tokens, all)
}

fn argmax(v: &[f32]) -> u32 {
    candle_rocm_e2e::kld::argmax(v) as u32
}

#[test]
fn quantized_qwen3_moe_runs_on_the_cpu() {
    // Before candle-nn's MoE products ran off CUDA, this model failed at its first forward on
    // every device but CUDA.
    let path = write_qwen3_moe_gguf(GgmlDType::Q4K, 16, 4);
    let prompt = [1u32, 17, 42, 7, 99, 3, 250];
    let (tokens, greedy) = qwen3_moe_greedy(&path, &Device::Cpu, &prompt, 5);
    // teacher-forced along its own tokens: the same logits
    let forced = qwen3_moe_logits(&path, &Device::Cpu, &prompt, &tokens[..4]);
    std::fs::remove_file(&path).ok();
    assert_eq!(forced, greedy);
    for row in &greedy {
        assert_eq!(row.len(), 300);
        assert!(row.iter().all(|v| v.is_finite()));
    }
    // the logits differ from position to position (the model is not stuck on one output)
    assert!(greedy.windows(2).all(|w| w[0] != w[1]));
}

/// candle-transformers' float `qwen3_moe` on `device`, its weights those of the file at `path`
/// dequantized (GGUF names mapped to the model's): the same routed sum as `quantized_qwen3_moe`
/// in f32 arithmetic throughout, where the quantized model rounds every activation row to q8.
/// Its logits after `prompt` (one forward), then after each of `forced` fed in turn.
fn dense_qwen3_moe_logits(
    path: &std::path::Path,
    device: &Device,
    prompt: &[u32],
    forced: &[u32],
) -> Vec<Vec<f32>> {
    use candle_transformers::models::qwen3_moe::{Config, ModelForCausalLM};
    let (mut file, content) = read_gguf(path);
    let md = |key: &str| &content.metadata[&format!("qwen3moe.{key}")];
    let count = |key: &str| md(key).to_u32().unwrap() as usize;
    let (layers, experts) = (count("block_count"), count("expert_count"));
    let mut weights = std::collections::HashMap::new();
    let mut load = |gguf: &str| {
        content
            .tensor(&mut file, &format!("{gguf}.weight"), &Device::Cpu)
            .unwrap()
            .dequantize(&Device::Cpu)
            .unwrap()
            .to_device(device)
            .unwrap()
    };
    for (gguf, name) in [
        ("token_embd", "model.embed_tokens"),
        ("output_norm", "model.norm"),
        ("output", "lm_head"),
    ] {
        weights.insert(format!("{name}.weight"), load(gguf));
    }
    for l in 0..layers {
        let layer = format!("model.layers.{l}");
        for (gguf, name) in [
            ("attn_q", "self_attn.q_proj"),
            ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_output", "self_attn.o_proj"),
            ("attn_q_norm", "self_attn.q_norm"),
            ("attn_k_norm", "self_attn.k_norm"),
            ("attn_norm", "input_layernorm"),
            ("ffn_norm", "post_attention_layernorm"),
            ("ffn_gate_inp", "mlp.gate"),
        ] {
            weights.insert(format!("{layer}.{name}.weight"), load(&format!("blk.{l}.{gguf}")));
        }
        for (gguf, name) in [
            ("ffn_gate_exps", "gate_proj"),
            ("ffn_up_exps", "up_proj"),
            ("ffn_down_exps", "down_proj"),
        ] {
            let stacked = load(&format!("blk.{l}.{gguf}"));
            for e in 0..experts {
                weights.insert(
                    format!("{layer}.mlp.experts.{e}.{name}.weight"),
                    stacked.get(e).unwrap(),
                );
            }
        }
    }
    let moe_ffn = count("expert_feed_forward_length");
    let config = Config {
        vocab_size: weights["lm_head.weight"].dim(0).unwrap(),
        hidden_size: count("embedding_length"),
        intermediate_size: moe_ffn,
        num_hidden_layers: layers,
        num_attention_heads: count("attention.head_count"),
        head_dim: count("attention.key_length"),
        attention_bias: false,
        num_key_value_heads: count("attention.head_count_kv"),
        max_position_embeddings: count("context_length"),
        sliding_window: None,
        max_window_layers: 0,
        tie_word_embeddings: false,
        rope_theta: md("rope.freq_base").to_f32().unwrap() as f64,
        rms_norm_eps: md("attention.layer_norm_rms_epsilon").to_f32().unwrap() as f64,
        use_sliding_window: false,
        hidden_act: candle_nn::Activation::Silu,
        decoder_sparse_step: 1,
        moe_intermediate_size: moe_ffn,
        num_experts_per_tok: count("expert_used_count"),
        num_experts: experts,
        norm_topk_prob: true,
    };
    let vb = candle_nn::VarBuilder::from_tensors(weights, DType::F32, device);
    let mut model = ModelForCausalLM::new(&config, vb).unwrap();
    let mut logits = |tokens: &[u32], offset: usize| {
        let x = Tensor::new(tokens, device).unwrap().unsqueeze(0).unwrap();
        model
            .forward(&x, offset)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let mut out = vec![logits(prompt, 0)];
    for (i, &t) in forced.iter().enumerate() {
        out.push(logits(&[t], prompt.len() + i));
    }
    out
}

const MOE_PROMPT: [u32; 12] = [5, 17, 42, 7, 99, 3, 250, 11, 64, 2, 180, 33];

/// Over the files of `types` x `experts` (top-8): the quantized model's greedy tokens and logits
/// on the CPU along 32 positions, and the dense model's logits along the same tokens. `each(path,
/// tokens fed)` sees every file before it is removed.
fn dense_and_quantized_runs(
    types: &[GgmlDType],
    experts: &[usize],
    mut each: impl FnMut(&std::path::Path, &[u32]),
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let (mut dense, mut quantized) = (Vec::new(), Vec::new());
    for &ty in types {
        for &e in experts {
            let path = write_qwen3_moe_gguf(ty, e, 8);
            let (tokens, logits) = qwen3_moe_greedy(&path, &Device::Cpu, &MOE_PROMPT, 32);
            let fed = &tokens[..tokens.len() - 1];
            dense.extend(dense_qwen3_moe_logits(&path, &Device::Cpu, &MOE_PROMPT, fed));
            quantized.extend(logits);
            each(&path, fed);
            std::fs::remove_file(&path).ok();
        }
    }
    (dense, quantized)
}

/// The yardstick of the GPU test below, measured on its own: the quantized model on the CPU
/// stays near the float model of its own weights (so the names are mapped right), and is not
/// equal to it (the q8 activations round).
#[test]
fn quantized_qwen3_moe_on_the_cpu_is_near_its_dense_model() {
    let (dense, quantized) =
        dense_and_quantized_runs(&[GgmlDType::Q4K, GgmlDType::Q8_0], &[32], |_, _| {});
    let d = candle_rocm_e2e::kld::divergence(&dense, &quantized).unwrap();
    println!("quantized cpu against dense cpu: {d}");
    assert!(d.mean > 0.0, "the q8 activations moved nothing: {d}");
    assert!(d.mean < 0.05 && d.top1 >= 0.8, "{d}");
}

/// On `Device::Rocm` (the GPU suite): the same products as the CPU's routed form, for every
/// block type the quantized crate has, top-k 1/2/8, 8/64/128 experts, 1/7/64/513 tokens.
#[cfg(feature = "gpu-tests")]
mod rocm {
    use super::*;

    #[test]
    fn moe_routing_on_rocm_is_the_cpus() {
        // The ops FusedMoeGGUF routes with (softmax of the router logits, a descending arg_sort,
        // the top-k narrowed and gathered, their weights normalized, the flattened ids sorted
        // by expert), on the device against the CPU: the expert ids and the pair order exactly,
        // the weights to f32 rounding. Router logits of the spread a random router gives, and
        // rows with equal logits (ties keep the CPU's order).
        let gpu = Device::new_rocm(0).unwrap();
        let mut rng = SplitMix64(71);
        let mut failures = Vec::new();
        for experts in [32usize, 48, 64, 96, 128] {
            for tokens in [1usize, 12, 64] {
                let topk = 8;
                let mut logits = (random(&mut rng, &[tokens, experts]) * 3.0).unwrap();
                if tokens > 1 {
                    // a row of ties
                    let tie = Tensor::ones((1, experts), DType::F32, &Device::Cpu).unwrap();
                    logits =
                        Tensor::cat(&[&tie, &logits.narrow(0, 1, tokens - 1).unwrap()], 0).unwrap();
                }
                let routed = |x: &Tensor| -> (Vec<u32>, Vec<f32>, Vec<u32>, Vec<u32>) {
                    let [ids, tw, sorted, order] = route(x, topk);
                    let tw = tw
                        .broadcast_div(&tw.sum_keepdim(D::Minus1).unwrap())
                        .unwrap();
                    let v = |t: &Tensor| t.flatten_all().unwrap().to_device(&Device::Cpu).unwrap();
                    (
                        v(&ids).to_vec1().unwrap(),
                        v(&tw).to_vec1().unwrap(),
                        v(&sorted).to_vec1().unwrap(),
                        v(&order).to_vec1().unwrap(),
                    )
                };
                let cpu = routed(&logits);
                let dev = routed(&logits.to_device(&gpu).unwrap());
                let what = format!("{experts} experts, {tokens} tokens");
                if cpu.0 != dev.0 {
                    failures.push(format!("{what}: top-k ids differ"));
                }
                if cpu.2 != dev.2 || cpu.3 != dev.3 {
                    failures.push(format!("{what}: the sort by expert differs"));
                }
                if let Some((i, (a, b))) = cpu
                    .1
                    .iter()
                    .zip(&dev.1)
                    .enumerate()
                    .find(|(_, (a, b))| (*a - *b).abs() > 1e-6)
                {
                    failures.push(format!("{what}: weight {i} {a} vs {b}"));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// One FusedMoeGGUF block (layer 0 of the seeded qwen3moe files), loaded on each device from
    /// the same file and fed the same rows: its output on the device against the CPU's, token by
    /// token, in the prefill and decode forms. A token that differs prints its routing on both
    /// devices (the CPU's probabilities at the top-k boundary), so that a near tie is told from
    /// a wrong product.
    #[test]
    fn a_fused_moe_gguf_block_on_rocm_is_the_cpus() {
        use candle_transformers::fused_moe::{FusedMoeGGUF, MoeCfg};
        use candle_transformers::quantized_var_builder::VarBuilder;
        let gpu = Device::new_rocm(0).unwrap();
        let mut failures = Vec::new();
        for ty in [
            GgmlDType::Q4K,
            GgmlDType::Q8_0,
            GgmlDType::Q4_0,
            GgmlDType::Q6K,
        ] {
            let (experts, used) = (64, 8);
            let path = write_qwen3_moe_gguf(ty, experts, used);
            let hidden = if ty == GgmlDType::Q8_0 { 288 } else { 256 };
            let cfg = MoeCfg {
                hidden_size: hidden,
                num_experts: experts,
                num_experts_per_tok: used,
                moe_intermediate_size: hidden,
                norm_topk_prob: true,
                act: candle_nn::Activation::Silu,
                decoder_sparse_step: None,
            };
            let block = |d: &Device| {
                let vb = VarBuilder::from_gguf(&path, d).unwrap();
                FusedMoeGGUF::new(&cfg, vb.pp("blk.0"), DType::F32).unwrap()
            };
            let (on_cpu, on_gpu) = (block(&Device::Cpu), block(&gpu));
            let mut rng = SplitMix64(83);
            for tokens in [12usize, 1] {
                let xs = (random(&mut rng, &[1, tokens, hidden]) * 1.7).unwrap();
                let want = on_cpu.forward(&xs, tokens > 1).unwrap();
                let got = on_gpu
                    .forward(&xs.to_device(&gpu).unwrap(), tokens > 1)
                    .unwrap()
                    .to_device(&Device::Cpu)
                    .unwrap();
                let logits = on_cpu.gate.forward(&xs.squeeze(0).unwrap()).unwrap();
                let probs = candle_nn::ops::softmax_last_dim(&logits).unwrap();
                let gpu_probs = candle_nn::ops::softmax_last_dim(
                    &on_gpu
                        .gate
                        .forward(&xs.squeeze(0).unwrap().to_device(&gpu).unwrap())
                        .unwrap(),
                )
                .unwrap();
                let top = |p: &Tensor| -> Vec<Vec<u32>> {
                    p.arg_sort_last_dim(false)
                        .unwrap()
                        .narrow(D::Minus1, 0, used)
                        .unwrap()
                        .to_device(&Device::Cpu)
                        .unwrap()
                        .to_vec2()
                        .unwrap()
                };
                let (cpu_ids, gpu_ids) = (top(&probs), top(&gpu_probs));
                for t in 0..tokens {
                    let (w, g) = (want.i((0, t)).unwrap(), got.i((0, t)).unwrap());
                    let diff = max_diff(&w, &g);
                    let sc = scale(&w.to_vec1::<f32>().unwrap());
                    if diff > 1e-4 * sc {
                        let mut p: Vec<f32> = probs.i(t).unwrap().to_vec1().unwrap();
                        p.sort_by(|a, b| b.total_cmp(a));
                        failures.push(format!(
                            "{ty:?} {tokens} tokens, token {t}: {diff:.3e} of {sc:.3e}; top-k \
                             cpu {:?} gpu {:?}; cpu probs at the boundary {:?}",
                            cpu_ids[t],
                            gpu_ids[t],
                            &p[used - 2..used + 2]
                        ));
                    }
                }
                println!(
                    "{ty:?} {tokens} tokens: max diff {:.3e}, router ids equal: {}",
                    max_diff(&want, &got),
                    cpu_ids == gpu_ids
                );
            }
            std::fs::remove_file(&path).ok();
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn moe_gemm_gguf_on_rocm_matches_the_cpu() {
        let gpu = Device::new_rocm(0).unwrap();
        let mut rng = SplitMix64(53);
        let mut checked = 0;
        let mut failures = Vec::new();
        let types = [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
            GgmlDType::Q2K,
            GgmlDType::Q3K,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
        ];
        // the grid: every type x top-k x experts x tokens
        let mut grid = Vec::new();
        for topk in [1usize, 2, 8] {
            for experts in [8usize, 64, 128] {
                for tokens in [1usize, 7, 64, 513] {
                    grid.push((experts, topk, tokens));
                }
            }
        }
        for ty in types {
            for &(experts, topk, tokens) in &grid {
                // 37 rows an expert: Candle's CPU multiplies a matrix of a multiple of 16 rows
                // by other arithmetic where the host has AVX-512 VNNI (Q8_0: its activations
                // quantized per 256 values instead of 32, 0.6% from ggml's result), so the
                // reference keeps to ggml's arithmetic on every host with a row count no tiling
                // takes
                let (n, k) = (37, 256);
                let w = QTensor::quantize(&random(&mut rng, &[experts, n, k]), ty).unwrap();
                // the very same blocks on the device
                let blocks =
                    candle_core::quantized::QStorage::from_data(w.data().unwrap(), &gpu, ty)
                        .unwrap();
                let wg = QTensor::new(blocks, (experts, n, k)).unwrap();
                let [_, pair_w, sorted, order] = routing(&mut rng, tokens, experts, topk);
                let x = random(&mut rng, &[tokens, k]);
                let xp = random(&mut rng, &[tokens * topk, k]);
                let on = |t: &Tensor| t.to_device(&gpu).unwrap();
                for (input, weights) in [(&x, None), (&xp, Some(pair_w.clone()))] {
                    let cpu = moe_gemm_gguf(
                        input,
                        &w,
                        &weights,
                        &order,
                        &sorted,
                        topk,
                        false,
                        DType::F32,
                    )
                    .unwrap();
                    let gpu_w = weights.as_ref().map(on);
                    let got = moe_gemm_gguf(
                        &on(input),
                        &wg,
                        &gpu_w,
                        &on(&order),
                        &on(&sorted),
                        topk,
                        tokens > 1,
                        DType::F32,
                    )
                    .unwrap()
                    .to_device(&Device::Cpu)
                    .unwrap();
                    let (a, b) = (
                        cpu.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                        got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    );
                    let s = scale(&a);
                    if let Some((i, (u, v))) = a
                        .iter()
                        .zip(&b)
                        .enumerate()
                        .find(|(_, (u, v))| (*u - *v).abs() > 1e-5 * s)
                    {
                        failures.push(format!(
                            "{ty:?} {experts} experts top {topk} {tokens} tokens at {i}: {u} vs {v}"
                        ));
                    }
                    checked += 1;
                }
            }
        }
        println!("moe_gemm_gguf on rocm: {checked} cases");
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn quantized_qwen3_moe_on_rocm_is_as_near_its_dense_model_as_the_cpu() {
        // Twenty seeded files (four expert types x 32 to 128 experts), 32 positions each along
        // the CPU's greedy tokens. The CPU against itself is no yardstick for this model: it
        // computes each row the same way whatever the batch (its prompt a token at a time gives
        // exactly its logits), while the model rounds every activation row to q8, and a value
        // within a rounding step of a q8 boundary rounds the other way under any other order of
        // summation: a discrete jump that the KV cache carries on (measured on the H100: single
        // files 0 to 1.2e-3 nats between GPU and CPU). So both devices are judged by their
        // distance to the float model of the same weights (`dense_qwen3_moe_logits`, on the
        // CPU), which neither device's rounding favours: the GPU must be as near it as the CPU
        // is, within the decode issue's limits (1.5x the mean KLD, top-1 at most a point lower).
        let gpu = Device::new_rocm(0).unwrap();
        let mut on_gpu = Vec::new();
        let types = [
            GgmlDType::Q4K,
            GgmlDType::Q8_0,
            GgmlDType::Q4_0,
            GgmlDType::Q6K,
        ];
        let (dense, cpu) = dense_and_quantized_runs(&types, &[32, 48, 64, 96, 128], |path, fed| {
            on_gpu.extend(qwen3_moe_logits(path, &gpu, &MOE_PROMPT, fed));
        });
        let divergence = candle_rocm_e2e::kld::divergence;
        let by_cpu = divergence(&dense, &cpu).unwrap();
        let by_gpu = divergence(&dense, &on_gpu).unwrap();
        println!(
            "gpu against cpu (both quantized): {}",
            divergence(&cpu, &on_gpu).unwrap()
        );
        println!("cpu against the dense model: {by_cpu}");
        let (passed, detail) = candle_rocm_e2e::kld::within(&by_gpu, &by_cpu);
        println!("gpu against the dense model: {detail}");
        assert!(passed, "{detail}");
    }

    #[test]
    fn qwen3_moe_on_rocm_is_the_cpus() {
        // candle-transformers' float `qwen3_moe`, unmodified, on `Device::Rocm` (the fused MoE
        // path, as with `cuda`) against the same model on the CPU, along the quantized model's
        // greedy tokens: f32 arithmetic on both, so every position's greedy token is the CPU's
        // and the distributions agree to f32 summation order.
        let gpu = Device::new_rocm(0).unwrap();
        let (mut cpu, mut on_gpu) = (Vec::new(), Vec::new());
        for (ty, experts) in [(GgmlDType::Q4K, 64), (GgmlDType::Q8_0, 128)] {
            let path = write_qwen3_moe_gguf(ty, experts, 8);
            let (tokens, _) = qwen3_moe_greedy(&path, &Device::Cpu, &MOE_PROMPT, 32);
            let fed = &tokens[..tokens.len() - 1];
            cpu.extend(dense_qwen3_moe_logits(&path, &Device::Cpu, &MOE_PROMPT, fed));
            on_gpu.extend(dense_qwen3_moe_logits(&path, &gpu, &MOE_PROMPT, fed));
            std::fs::remove_file(&path).ok();
        }
        let d = candle_rocm_e2e::kld::divergence(&cpu, &on_gpu).unwrap();
        println!("qwen3_moe, gpu against cpu: {d}");
        assert!(d.top1 == 1.0 && d.max < 1e-6, "{d}");
    }

    #[test]
    fn moe_gemm_on_rocm_matches_the_cpu() {
        let gpu = Device::new_rocm(0).unwrap();
        let mut rng = SplitMix64(59);
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let (experts, n, k, tokens, topk) = (8, 48, 128, 33, 2);
            let w = random(&mut rng, &[experts, n, k]).to_dtype(dtype).unwrap();
            let [_, pair_w, sorted, order] = routing(&mut rng, tokens, experts, topk);
            let x = random(&mut rng, &[tokens, k]).to_dtype(dtype).unwrap();
            let cpu = moe_gemm(&x, &w, &None, &order, &sorted, topk, true).unwrap();
            let on = |t: &Tensor| t.to_device(&gpu).unwrap();
            let got = moe_gemm(
                &on(&x),
                &on(&w),
                &None,
                &on(&order),
                &on(&sorted),
                topk,
                true,
            )
            .unwrap();
            let d = max_diff(&got, &cpu);
            let tol = if dtype == DType::F32 { 1e-4 } else { 0.1 };
            assert!(d <= tol, "{dtype:?}: {d}");
            // the down form, scaled by the pairs' weights
            let xp = random(&mut rng, &[tokens * topk, k])
                .to_dtype(dtype)
                .unwrap();
            let cpu =
                moe_gemm(&xp, &w, &Some(pair_w.clone()), &order, &sorted, topk, false).unwrap();
            let got = moe_gemm(
                &on(&xp),
                &on(&w),
                &Some(on(&pair_w)),
                &on(&order),
                &on(&sorted),
                topk,
                false,
            )
            .unwrap();
            let d = max_diff(&got, &cpu);
            assert!(d <= tol, "{dtype:?}, weighted: {d}");
        }
    }
}

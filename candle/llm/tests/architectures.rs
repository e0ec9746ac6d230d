//! The static model of each GGUF architecture against candle-transformers' model of the same
//! architecture, on seeded GGUF files written here, with the KL measure of `kld`: teacher-forced
//! along the reference's own greedy continuations of a few prompts, the static model's
//! next-token distributions compared with the reference's (prompt at once), against the
//! reference's distance from itself (prompt a token at a time). Llama 3.x's rotary scaling is
//! checked against candle-transformers' dense llama with its `rope_scaling` config, through the
//! GGUF file's `rope_freqs` and through the safetensors loader.
//!
//! Runs on the CPU, the static model's reference device (every step through Candle's ops).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_rocm_llm::kld::divergence;
use candle_rocm_llm::{Architecture, RopeScaling, StaticLlama};
use candle_transformers::models::llama;
use candle_transformers::models::llama::{Llama3RopeConfig, Llama3RopeType, LlamaConfig};

mod common;

use common::*;

fn gguf_against_quantized_reference(arch: Architecture, shape: Shape) {
    let file = write_gguf(arch, shape, 11);
    let r = reference(|| quantized_reference(arch, &file.0));
    let (content, mut reader) = read(&file.0);
    let model = StaticLlama::from_gguf(&content, &mut reader, &Device::Cpu, 128).unwrap();
    assert_eq!(model.architecture(), Some(arch));
    check(arch.name(), &r, &static_run(&model, &r, false));
}

#[test]
fn llama_matches_quantized_llama() {
    gguf_against_quantized_reference(Architecture::Llama, SHAPE);
}

#[test]
fn qwen2_matches_quantized_qwen2() {
    gguf_against_quantized_reference(Architecture::Qwen2, SHAPE);
}

/// Cached positions up to which quantized_qwen3's CPU attention computes what plain attention
/// does on this test's file (see below).
const QUANTIZED_QWEN3_AGREES_UP_TO: usize = 52;

#[test]
fn qwen3_matches_candle_transformers_qwen3() {
    // heads wider than hidden / heads, as Qwen3's (key_length 32 with 4 heads on 64)
    let shape = Shape {
        head_dim: 32,
        ..SHAPE
    };
    let file = write_gguf(Architecture::Qwen3, shape, 11);
    let (content, mut reader) = read(&file.0);
    let model = StaticLlama::from_gguf(&content, &mut reader, &Device::Cpu, 128).unwrap();
    // The same model through quantized_qwen3_moe (one expert holding the MLP), whose attention
    // is the plain product-softmax-product: the check.
    let one_expert = as_one_expert_qwen3moe(&file);
    let r = reference(|| quantized_reference(Architecture::Qwen3Moe, &one_expert.0));
    check(
        "qwen3 (quantized_qwen3_moe, one expert)",
        &r,
        &static_run(&model, &r, false),
    );
    // quantized_qwen3 itself: its CPU path attends by its own flash kernels, which on this file
    // depart from plain attention once 53 or more positions are cached (8 of the 120
    // positions, mean KLD up to 1.05e-4 at each, while quantized_qwen3_moe on the same weights
    // stays bit-equal to the static model: measured). Up to there it agrees to the bit.
    let q = reference(|| quantized_reference(Architecture::Qwen3, &file.0));
    assert_eq!(
        q.texts, r.texts,
        "both references continue the prompts alike"
    );
    let got = static_run(&model, &q, false);
    let (mut before, mut after) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    let mut i = 0;
    for (prompt, tokens) in &q.texts {
        for step in 0..tokens.len() {
            let cached = prompt.len() + step;
            let side = if cached <= QUANTIZED_QWEN3_AGREES_UP_TO {
                &mut before
            } else {
                &mut after
            };
            side.0.push(q.at_once[i].clone());
            side.1.push(got[i].clone());
            i += 1;
        }
    }
    let agreeing = divergence(&before.0, &before.1).unwrap();
    println!("quantized_qwen3 up to {QUANTIZED_QWEN3_AGREES_UP_TO} cached positions: {agreeing}");
    if !after.0.is_empty() {
        println!("past them: {}", divergence(&after.0, &after.1).unwrap());
    }
    assert!(
        agreeing.mean <= ROUNDING_FLOOR && agreeing.top1 == 1.0,
        "{agreeing}"
    );
}

#[test]
fn qwen3moe_matches_quantized_qwen3_moe() {
    gguf_against_quantized_reference(Architecture::Qwen3Moe, SHAPE);
}

#[test]
fn phi3_matches_quantized_phi3() {
    gguf_against_quantized_reference(Architecture::Phi3, SHAPE);
}

/// Llama 3.x's scaling on a short original context, so that the continuations cross every
/// regime: kept, blended and divided frequencies.
fn llama3_scaling() -> Llama3RopeConfig {
    Llama3RopeConfig {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 64,
        rope_type: Llama3RopeType::Llama3,
    }
}

/// A dense llama's seeded weights by candle-transformers' names (f32).
fn dense_llama(s: Shape, seed: u64) -> HashMap<String, Tensor> {
    let mut rng = Normal::new(seed);
    let (q_dim, kv_dim) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let mut w = HashMap::new();
    w.insert(
        "model.embed_tokens.weight".into(),
        rng.tensor(&[VOCAB, s.hidden], 0.15),
    );
    w.insert(
        "lm_head.weight".into(),
        rng.tensor(&[VOCAB, s.hidden], 0.15),
    );
    let norm = |rng: &mut Normal| (rng.tensor(&[s.hidden], 0.1) + 1.0).unwrap();
    w.insert("model.norm.weight".into(), norm(&mut rng));
    for l in 0..s.layers {
        let p = |n: &str| format!("model.layers.{l}.{n}.weight");
        for (name, dims) in [
            ("self_attn.q_proj", [q_dim, s.hidden]),
            ("self_attn.k_proj", [kv_dim, s.hidden]),
            ("self_attn.v_proj", [kv_dim, s.hidden]),
            ("self_attn.o_proj", [s.hidden, q_dim]),
            ("mlp.gate_proj", [s.ffn, s.hidden]),
            ("mlp.up_proj", [s.ffn, s.hidden]),
            ("mlp.down_proj", [s.hidden, s.ffn]),
        ] {
            w.insert(p(name), rng.tensor(&dims, 0.15));
        }
        w.insert(p("input_layernorm"), norm(&mut rng));
        w.insert(p("post_attention_layernorm"), norm(&mut rng));
    }
    w
}

/// The rows of a q or k projection (`heads` heads) reordered as llama.cpp's converter writes
/// them for rotation on interleaved pairs: each head's row j and j + d/2 side by side.
fn interleave_rows(w: &Tensor, heads: usize) -> Tensor {
    let (rows, cols) = w.dims2().unwrap();
    let d = rows / heads;
    w.reshape((heads, 2, d / 2, cols))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .reshape((rows, cols))
        .unwrap()
}

/// The dense llama as an f32 GGUF file (llama.cpp's names, q and k interleaved) with Llama
/// 3.x's factors as `rope_freqs`.
fn dense_llama_gguf(w: &HashMap<String, Tensor>, s: Shape, factors: &[f32]) -> SeededGguf {
    let f32q = |t: &Tensor| QTensor::quantize(t, GgmlDType::F32).unwrap();
    let get = |n: &str| &w[n];
    let mut tensors = vec![
        (
            "token_embd.weight".to_string(),
            f32q(get("model.embed_tokens.weight")),
        ),
        ("output.weight".into(), f32q(get("lm_head.weight"))),
        ("output_norm.weight".into(), f32q(get("model.norm.weight"))),
        (
            "rope_freqs.weight".into(),
            f32q(&Tensor::new(factors, &Device::Cpu).unwrap()),
        ),
    ];
    for l in 0..s.layers {
        let hf = |n: &str| get(&format!("model.layers.{l}.{n}.weight")).clone();
        for (gguf, t) in [
            ("attn_q", interleave_rows(&hf("self_attn.q_proj"), s.heads)),
            (
                "attn_k",
                interleave_rows(&hf("self_attn.k_proj"), s.kv_heads),
            ),
            ("attn_v", hf("self_attn.v_proj")),
            ("attn_output", hf("self_attn.o_proj")),
            ("ffn_gate", hf("mlp.gate_proj")),
            ("ffn_up", hf("mlp.up_proj")),
            ("ffn_down", hf("mlp.down_proj")),
            ("attn_norm", hf("input_layernorm")),
            ("ffn_norm", hf("post_attention_layernorm")),
        ] {
            tensors.push((format!("blk.{l}.{gguf}.weight"), f32q(&t)));
        }
    }
    let u32v = |v: usize| gguf_file::Value::U32(v as u32);
    let metadata = [
        (
            "general.architecture".to_string(),
            gguf_file::Value::String("llama".into()),
        ),
        ("llama.context_length".into(), u32v(CONTEXT)),
        ("llama.embedding_length".into(), u32v(s.hidden)),
        ("llama.block_count".into(), u32v(s.layers)),
        ("llama.feed_forward_length".into(), u32v(s.ffn)),
        ("llama.attention.head_count".into(), u32v(s.heads)),
        ("llama.attention.head_count_kv".into(), u32v(s.kv_heads)),
        ("llama.rope.dimension_count".into(), u32v(s.head_dim)),
        (
            "llama.rope.freq_base".into(),
            gguf_file::Value::F32(10_000.),
        ),
        (
            "llama.attention.layer_norm_rms_epsilon".into(),
            gguf_file::Value::F32(1e-5),
        ),
    ];
    let path = temp_path("llama3");
    write_file(&path, &metadata, &tensors);
    SeededGguf(path)
}

#[test]
fn llama3_rope_scaling_matches_the_dense_llama() {
    let s = SHAPE;
    let weights = dense_llama(s, 23);
    let config = LlamaConfig {
        hidden_size: s.hidden,
        intermediate_size: s.ffn,
        vocab_size: VOCAB,
        num_hidden_layers: s.layers,
        num_attention_heads: s.heads,
        num_key_value_heads: Some(s.kv_heads),
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: Some(llama3_scaling()),
        max_position_embeddings: CONTEXT,
        tie_word_embeddings: Some(false),
    }
    .into_config(false);
    let cpu = Device::Cpu;
    let vb = || candle_nn::VarBuilder::from_tensors(weights.clone(), DType::F32, &cpu);
    let r = reference(|| {
        let model = llama::Llama::load(vb(), &config).unwrap();
        let mut cache = llama::Cache::new(true, DType::F32, &config, &cpu).unwrap();
        Box::new(move |x, pos| model.forward(x, pos, &mut cache))
    });

    // through the safetensors loader, from the config
    let dense = StaticLlama::load(vb(), &config, 128).unwrap();
    check(
        "llama3 scaling, safetensors",
        &r,
        &static_run(&dense, &r, false),
    );

    // through a GGUF file's rope_freqs
    let RopeScaling::Factors(factors) = RopeScaling::llama3(&llama3_scaling(), s.head_dim, 10_000.)
    else {
        panic!("no factors")
    };
    let file = dense_llama_gguf(&weights, s, &factors);
    let (content, mut reader) = read(&file.0);
    let gguf = StaticLlama::from_gguf(&content, &mut reader, &cpu, 128).unwrap();
    let (scaled, _) = check(
        "llama3 scaling, GGUF rope_freqs",
        &r,
        &static_run(&gguf, &r, false),
    );

    // and the scaling is what makes it match: without it the model is measurably further
    let plain = StaticLlama::load(
        vb(),
        &llama::Config {
            rope_scaling: None,
            ..config.clone()
        },
        128,
    )
    .unwrap();
    let unscaled = divergence(&r.at_once, &static_run(&plain, &r, false)).unwrap();
    println!("without the scaling: {unscaled}");
    assert!(
        unscaled.mean > 100.0 * scaled.mean.max(1e-12),
        "{unscaled} vs {scaled}"
    );
}

#[test]
fn an_unknown_architecture_is_a_typed_error_naming_it() {
    let metadata = [(
        "general.architecture".to_string(),
        gguf_file::Value::String("falcon".into()),
    )];
    let path = temp_path("falcon");
    write_file(&path, &metadata, &[]);
    let file = SeededGguf(path);
    let (content, mut reader) = read(&file.0);
    let err = match StaticLlama::from_gguf(&content, &mut reader, &Device::Cpu, 16) {
        Ok(_) => panic!("a falcon file loaded"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(msg.contains("\"falcon\"") && msg.contains("qwen3"), "{msg}");
    assert_eq!(
        Architecture::from_name("falcon"),
        Err(candle_rocm_llm::UnsupportedArchitecture("falcon".into()))
    );
    assert_eq!(Architecture::from_name("qwen2"), Ok(Architecture::Qwen2));
}

/// `from_gguf`'s error on a llama file of SHAPE with `extra` metadata and tensors.
fn llama_load_error(extra_md: &[(&str, gguf_file::Value)], extra_tensors: &[&str]) -> String {
    let file = write_gguf(Architecture::Llama, SHAPE, 3);
    let (mut content, _) = read(&file.0);
    let mut metadata: Vec<(String, gguf_file::Value)> = content.metadata.drain().collect();
    metadata.retain(|(k, _)| !extra_md.iter().any(|(e, _)| e == k));
    metadata.extend(extra_md.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let ones = || {
        QTensor::quantize(
            &Tensor::ones(SHAPE.head_dim / 2, DType::F32, &Device::Cpu).unwrap(),
            GgmlDType::F32,
        )
        .unwrap()
    };
    let tensors: Vec<(String, QTensor)> = extra_tensors
        .iter()
        .map(|n| (n.to_string(), ones()))
        .collect();
    let path = file.0.with_extension("extra.gguf");
    write_file(&path, &metadata, &tensors);
    let extra = SeededGguf(path);
    let (content, mut reader) = read(&extra.0);
    match StaticLlama::from_gguf(&content, &mut reader, &Device::Cpu, 16) {
        Ok(_) => panic!("the file loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn what_the_model_does_not_compute_is_refused_by_name() {
    let s = |v: &str| gguf_file::Value::String(v.into());
    let e = llama_load_error(&[("llama.rope.scaling.type", s("yarn"))], &[]);
    assert!(e.contains("\"yarn\""), "{e}");
    let e = llama_load_error(
        &[("llama.rope.dimension_count", gguf_file::Value::U32(8))],
        &[],
    );
    assert!(e.contains("8 of 16"), "{e}");
    let e = llama_load_error(&[], &["rope_factors_long.weight"]);
    assert!(e.contains("LongRoPE"), "{e}");
    let linear = [
        ("llama.rope.scaling.type", s("linear")),
        ("llama.rope.scaling.factor", gguf_file::Value::F32(2.0)),
    ];
    let e = llama_load_error(&linear, &["rope_freqs.weight"]);
    assert!(e.contains("rope_freqs") && e.contains("\"linear\""), "{e}");
    let e = llama_load_error(&[("general.architecture", s("bert"))], &[]);
    assert!(e.contains("\"bert\""), "{e}");
}

#[test]
fn a_missing_tensor_and_a_context_too_long_are_errors() {
    let file = write_gguf(Architecture::Qwen2, SHAPE, 4);
    let (content, mut reader) = read(&file.0);
    // a cache longer than the file's context
    let e = match StaticLlama::from_gguf(&content, &mut reader, &Device::Cpu, CONTEXT + 1) {
        Ok(_) => panic!("a cache past the context loaded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(&format!("over the context of {CONTEXT}")), "{e}");
    // the same file without one tensor
    let metadata: Vec<(String, gguf_file::Value)> = content.metadata.clone().into_iter().collect();
    let tensors: Vec<(String, QTensor)> = content
        .tensor_infos
        .keys()
        .filter(|n| n.as_str() != "blk.1.attn_k.bias")
        .map(|n| {
            (
                n.clone(),
                content.tensor(&mut reader, n, &Device::Cpu).unwrap(),
            )
        })
        .collect();
    let path = temp_path("missing");
    write_file(&path, &metadata, &tensors);
    let missing = SeededGguf(path);
    let (content, mut reader) = read(&missing.0);
    let e = match StaticLlama::from_gguf(&content, &mut reader, &Device::Cpu, 64) {
        Ok(_) => panic!("a file without blk.1.attn_k.bias loaded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("blk.1.attn_k.bias"), "{e}");
}

#[test]
fn a_truncated_file_is_an_error_naming_the_tensor_it_cut() {
    let file = write_gguf(Architecture::Llama, SHAPE, 6);
    let (content, _) = read(&file.0);
    // the tensor whose bytes end last in the file
    let (last, info) = content
        .tensor_infos
        .iter()
        .max_by_key(|(_, i)| i.offset)
        .unwrap();
    let len = std::fs::metadata(&file.0).unwrap().len();
    let path = temp_path("truncated");
    std::fs::copy(&file.0, &path).unwrap();
    let truncated = SeededGguf(path);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&truncated.0)
        .unwrap()
        .set_len(content.tensor_data_offset + info.offset + 1)
        .unwrap();
    assert!(content.tensor_data_offset + info.offset + 1 < len);
    let mut reader = std::fs::File::open(&truncated.0).unwrap();
    let e = match StaticLlama::from_gguf(&content, &mut reader, &Device::Cpu, 64) {
        Ok(_) => panic!("a truncated file loaded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(last.as_str()), "{e}");
    // the same through the parallel reads of a file
    let e = match StaticLlama::from_gguf_file(&content, &reader, &Device::Cpu, 64) {
        Ok(_) => panic!("a truncated file loaded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(last.as_str()), "{e}");
}

#[test]
fn a_file_read_by_threads_gives_the_model_a_stream_gives() {
    let file = write_gguf(Architecture::Qwen2, SHAPE, 8);
    let (content, mut reader) = read(&file.0);
    let streamed = StaticLlama::from_gguf(&content, &mut reader, &Device::Cpu, 64).unwrap();
    let threaded = StaticLlama::from_gguf_file(&content, &reader, &Device::Cpu, 64).unwrap();
    let logits = |m: &StaticLlama| {
        let state = m.new_state(3).unwrap();
        m.step(&state).unwrap().logits.to_vec1::<f32>().unwrap()
    };
    assert_eq!(logits(&streamed), logits(&threaded));
}

//! The static llama refuses GGUF files it would compute wrongly, before loading any weight:
//! another architecture, and rotary scaling (Llama 3.x's `rope_freqs`, `rope.scaling.type`).
//! Runs on the CPU (no device is touched before the refusal).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_rocm_e2e::static_llama::StaticLlama;

/// `from_gguf`'s error on a file with `metadata` and, where `rope_freqs`, a rope_freqs tensor.
fn load_error(metadata: &[(&str, gguf_file::Value)], rope_freqs: bool) -> String {
    let freqs = QTensor::quantize(
        &Tensor::ones(32, candle_core::DType::F32, &Device::Cpu).unwrap(),
        GgmlDType::F32,
    )
    .unwrap();
    let tensors: Vec<(&str, &QTensor)> = if rope_freqs {
        vec![("rope_freqs.weight", &freqs)]
    } else {
        vec![]
    };
    let md: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let mut bytes = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut bytes, &md, &tensors).unwrap();
    bytes.set_position(0);
    let content = gguf_file::Content::read(&mut bytes).unwrap();
    match StaticLlama::from_gguf(&content, &mut bytes, &Device::Cpu, 16) {
        Ok(_) => panic!("the file loaded"),
        Err(e) => e.to_string(),
    }
}

fn arch(name: &str) -> (&'static str, gguf_file::Value) {
    (
        "general.architecture",
        gguf_file::Value::String(name.to_string()),
    )
}

#[test]
fn another_architecture_is_an_error_naming_it() {
    let e = load_error(&[arch("qwen2")], false);
    assert!(
        e.contains("\"qwen2\"") && e.contains("not supported"),
        "{e}"
    );
    let e = load_error(&[], false);
    assert!(e.contains("general.architecture"), "{e}");
}

#[test]
fn rope_scaling_is_an_error() {
    let e = load_error(&[arch("llama")], true);
    assert!(e.contains("rope_freqs"), "{e}");
    let scaled = (
        "llama.rope.scaling.type",
        gguf_file::Value::String("linear".into()),
    );
    let e = load_error(&[arch("llama"), scaled], false);
    assert!(e.contains("\"linear\""), "{e}");
    // past these checks a file without its shape is refused for that, by name
    let none = (
        "llama.rope.scaling.type",
        gguf_file::Value::String("none".into()),
    );
    let e = load_error(&[arch("llama"), none], false);
    assert!(e.contains("llama.attention.head_count"), "{e}");
}

//! GGUF tokenizers against llama.cpp's own tokenizer corpus: every `models/ggml-vocab-*.gguf`
//! of the llama-cpp-python sdist that has `.inp` (texts) and `.out` (the ids llama.cpp's
//! `test-tokenizer-0` expects, without beginning/end tokens, control tokens as text), every
//! case's ids equal; the text back from the ids where the model keeps it (byte-level and
//! SentencePiece families). SmolLM2's file on a long English text against the ids llama.cpp's
//! `llama-tokenize` gave for it (committed beside this test).
//!
//! The corpus: `CANDLE_ROCM_LLAMA_CPP_MODELS`, else where `cargo xtask test` installs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::{GgufTokenizer, TokenizerModel};
use std::path::{Path, PathBuf};

fn corpus_dir() -> PathBuf {
    std::env::var_os("CANDLE_ROCM_LLAMA_CPP_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/tools/llama.cpp-models-0.3.36/models")
        })
}

fn tokenizer_of(path: &Path) -> GgufTokenizer {
    let mut file = std::fs::File::open(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (cargo xtask test installs llama.cpp's vocabularies from the \
             llama-cpp-python sdist, or set CANDLE_ROCM_LLAMA_CPP_MODELS)",
            path.display()
        )
    });
    let content = gguf_file::Content::read(&mut file).unwrap();
    GgufTokenizer::from_gguf(&content).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The corpus files: (vocabulary, texts, expected ids per text).
fn cases(gguf: &Path) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| {
        let mut p = gguf.as_os_str().to_owned();
        p.push(ext);
        std::fs::read_to_string(&p).unwrap()
    };
    let texts: Vec<String> = read(".inp")
        .split("\n__ggml_vocab_test__\n")
        .map(String::from)
        .collect();
    let ids: Vec<Vec<u32>> = read(".out")
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    // the .inp ends with a separator: its last piece is empty and has no .out line
    let texts = &texts[..ids.len()];
    texts.iter().cloned().zip(ids).collect()
}

#[test]
fn every_family_of_llama_cpps_corpus_tokenizes_as_llama_cpp() {
    let dir = corpus_dir();
    let mut vocabs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (cargo xtask test installs the corpus, or set CANDLE_ROCM_LLAMA_CPP_MODELS)",
                dir.display()
            )
        })
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with("ggml-vocab-")
                && name.ends_with(".gguf")
                && p.with_file_name(format!("{name}.out")).exists()
        })
        .collect();
    vocabs.sort();
    assert!(
        vocabs.len() >= 15,
        "{} vocabularies in {}",
        vocabs.len(),
        dir.display()
    );
    let mut failures = Vec::new();
    println!("| vocabulary | model | ids equal | text back |");
    println!("|---|---|---|---|");
    for gguf in &vocabs {
        let name = gguf.file_name().unwrap().to_string_lossy().to_string();
        let t = tokenizer_of(gguf);
        let round_trip = !matches!(t.model, TokenizerModel::WordPiece);
        let cases = cases(gguf);
        let (mut equal, mut back) = (0, 0);
        for (text, want) in &cases {
            let got = t.encode(text, false, false).unwrap();
            if &got == want {
                equal += 1;
            } else if failures.len() < 40 {
                failures.push(format!("{name}: {text:?}: got {got:?}, llama.cpp {want:?}"));
            }
            if round_trip {
                let decoded = t.decode(want, false).unwrap();
                // SentencePiece drops the space it put in front; llama.cpp's test does the same
                if decoded == *text || decoded == text.strip_prefix(' ').unwrap_or(text) {
                    back += 1;
                } else if failures.len() < 40 {
                    failures.push(format!("{name}: {text:?} back as {decoded:?}"));
                }
            }
        }
        let back = if round_trip {
            format!("{back}/{}", cases.len())
        } else {
            "(lower-cased)".into()
        };
        println!(
            "| {name} | {} | {equal}/{} | {back} |",
            t.model_name(),
            cases.len()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

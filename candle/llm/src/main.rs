//! `candle-rocm-llm`: generate text or chat with a GGUF model on a ROCm device (or the CPU).
//!
//! ```text
//! candle-rocm-llm generate --model FILE.gguf --prompt TEXT [options]
//! candle-rocm-llm chat --model FILE.gguf [--system TEXT] [options]   (a turn per stdin line)
//! candle-rocm-llm tokenize --model FILE.gguf (--file TEXT_FILE | --prompt TEXT) [--no-bos] [--parse-special]
//! ```
//! `tokenize` prints the ids as llama.cpp's `llama-tokenize --ids` does (`[1, 2, ...]`), the
//! file's beginning token first where it asks for one (unless `--no-bos`), control tokens
//! spelled in the text as text (unless `--parse-special`), and the time it took on stderr.
//! Options: `--device rocm|cpu`, `--ctx N` (cache positions; default the file's context, at
//! most 4096), `--max-tokens N`, `--temperature T`, `--top-k K`, `--top-p P`, `--min-p P`,
//! `--repeat-penalty R`, `--repeat-last-n N`, `--seed S`, `--stop TEXT` (repeatable),
//! `--kv-cache f32|f16|bf16`, `--raw` (generate: the prompt as is, no chat template),
//! `--eager` (no captured step). Loading shows its progress, and each answer ends with its
//! tokens/s on stderr.

use std::io::{BufRead, Write};
use std::time::Instant;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};
use candle_rocm_llm::{
    ChatSession, GenerateOptions, GgufText, Message, SamplingParams, StaticLlama, StopReason,
    StopStrings,
};

type CliResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const USAGE: &str = "usage: candle-rocm-llm generate|chat --model FILE.gguf [--prompt TEXT] [--system TEXT] \
[--device rocm|cpu] [--ctx N] [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P] \
[--repeat-penalty R] [--repeat-last-n N] [--seed S] [--stop TEXT]... [--kv-cache f32|f16|bf16] [--raw] [--eager]";

/// The command line, parsed.
struct Args {
    command: String,
    model: String,
    prompt: Option<String>,
    system: Option<String>,
    device: String,
    ctx: Option<usize>,
    options: GenerateOptions,
    stops: Vec<String>,
    kv_cache: DType,
    raw: bool,
}

fn parse(mut argv: impl Iterator<Item = String>) -> CliResult<Args> {
    let command = argv.next().ok_or(USAGE)?;
    if command != "generate" && command != "chat" {
        return Err(format!("unknown command {command:?}\n{USAGE}").into());
    }
    let mut a = Args {
        command,
        model: String::new(),
        prompt: None,
        system: None,
        device: "rocm".into(),
        ctx: None,
        options: GenerateOptions::default(),
        stops: Vec::new(),
        kv_cache: DType::F32,
        raw: false,
    };
    let s = &mut a.options.sampling;
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => a.model = value()?,
            "--prompt" => a.prompt = Some(value()?),
            "--system" => a.system = Some(value()?),
            "--device" => a.device = value()?,
            "--ctx" => a.ctx = Some(value()?.parse()?),
            "--max-tokens" => a.options.max_tokens = value()?.parse()?,
            "--temperature" => s.temperature = value()?.parse()?,
            "--top-k" => s.top_k = value()?.parse()?,
            "--top-p" => s.top_p = value()?.parse()?,
            "--min-p" => s.min_p = value()?.parse()?,
            "--repeat-penalty" => s.repeat_penalty = value()?.parse()?,
            "--repeat-last-n" => s.repeat_last_n = value()?.parse()?,
            "--seed" => s.seed = value()?.parse()?,
            "--stop" => a.stops.push(value()?),
            "--kv-cache" => {
                a.kv_cache = match value()?.as_str() {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "bf16" => DType::BF16,
                    other => return Err(format!("--kv-cache {other}: f32, f16 or bf16").into()),
                }
            }
            "--raw" => a.raw = true,
            "--eager" => a.options.captured = false,
            other => return Err(format!("unknown option {other}\n{USAGE}").into()),
        }
    }
    if a.model.is_empty() {
        return Err(format!("--model is required\n{USAGE}").into());
    }
    SamplingParams::check(&a.options.sampling)?;
    Ok(a)
}

/// The model and its text side, loaded with a progress line.
fn load(args: &Args) -> CliResult<(StaticLlama, GgufText)> {
    let device = match args.device.as_str() {
        "rocm" => Device::new_rocm(0)?,
        "cpu" => Device::Cpu,
        other => return Err(format!("--device {other}: rocm or cpu").into()),
    };
    let mut file = std::fs::File::open(&args.model).map_err(|e| format!("{}: {e}", args.model))?;
    let content = gguf_file::Content::read(&mut file)?;
    let text = GgufText::from_gguf(&content)?;
    let context = candle_rocm_llm::GgufHyperParams::read(&content, &mut file)?.context;
    let ctx = args.ctx.unwrap_or(context.unwrap_or(4096).min(4096));
    let bytes = std::fs::metadata(&args.model)?.len() as f64;
    let start = Instant::now();
    let mut progress = |done: usize, all: usize| {
        eprint!("\rloading {}: layer {done}/{all}", args.model);
        let _ = std::io::stderr().flush();
    };
    let model =
        StaticLlama::from_gguf_file_with_progress(&content, &file, &device, ctx, &mut progress)?
            .with_cache_dtype(args.kv_cache)?;
    device.synchronize()?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "\rloaded {} ({:?}, {} positions) in {secs:.1} s, {:.2} GB/s",
        args.model,
        model.architecture().map(|a| a.name()).unwrap_or("llama"),
        ctx,
        bytes / secs / 1e9
    );
    Ok((model, text))
}

/// Generates after `prompt` (the conversation so far; the session's cache holds what it can
/// of it), streaming text to stdout; returns the answer's text.
fn answer(
    session: &mut ChatSession<'_>,
    text: &GgufText,
    prompt: &[u32],
    args: &Args,
) -> CliResult<String> {
    let mut options = args.options.clone();
    options.stop_tokens.extend(&text.stop_tokens);
    let mut stream = text.stream();
    let mut stops = StopStrings::new(&args.stops);
    let mut out = String::new();
    let mut stdout = std::io::stdout();
    let start = Instant::now();
    let mut first_at = None;
    let mut stopped_by_string = false;
    let generation = session.respond(prompt, &options, |token| {
        first_at.get_or_insert_with(Instant::now);
        let Some(piece) = stream.push(token)? else {
            return Ok(true);
        };
        let (shown, stop) = stops.push(&piece);
        out.push_str(&shown);
        let _ = write!(stdout, "{shown}").and_then(|_| stdout.flush());
        stopped_by_string = stop;
        Ok(!stop)
    })?;
    if !stopped_by_string {
        let rest = stream.finish()?;
        let (shown, _) = stops.push(&rest);
        let tail = format!("{shown}{}", stops.finish());
        out.push_str(&tail);
        print!("{tail}");
    }
    println!();
    let first = first_at.unwrap_or_else(Instant::now);
    let prefill = (first - start).as_secs_f64();
    let decode = first.elapsed().as_secs_f64();
    let n = generation.tokens.len();
    let why = match generation.stop {
        StopReason::MaxTokens => "token budget".to_string(),
        StopReason::StopToken(t) => format!("stop token {t}"),
        StopReason::Caller => "stop string".to_string(),
        StopReason::ContextFull => "the cache is full".to_string(),
    };
    let prefilled = session.last_prefilled();
    eprintln!(
        "[prompt {} tokens, {prefilled} new: {:.1} tokens/s; {n} generated: {:.1} tokens/s; stopped by {why}]",
        prompt.len(),
        prefilled as f64 / prefill.max(1e-9),
        n.saturating_sub(1) as f64 / decode.max(1e-9),
    );
    Ok(out)
}

/// `tokenize`: the ids of a text, as `llama-tokenize --ids` prints them.
fn tokenize(mut argv: impl Iterator<Item = String>) -> CliResult<()> {
    const TOKENIZE_USAGE: &str = "usage: candle-rocm-llm tokenize --model FILE.gguf \
(--file TEXT_FILE | --prompt TEXT) [--no-bos] [--parse-special]";
    let (mut model, mut text, mut add_special, mut parse_special) = (None, None, true, false);
    while let Some(flag) = argv.next() {
        let mut value = || argv.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => model = Some(value()?),
            "--file" => {
                let path = value()?;
                text = Some(std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?)
            }
            "--prompt" => text = Some(value()?),
            "--no-bos" => add_special = false,
            "--parse-special" => parse_special = true,
            other => return Err(format!("unknown option {other}\n{TOKENIZE_USAGE}").into()),
        }
    }
    let (Some(model), Some(text)) = (model, text) else {
        return Err(TOKENIZE_USAGE.into());
    };
    let mut file = std::fs::File::open(&model).map_err(|e| format!("{model}: {e}"))?;
    let gguf = GgufText::from_gguf(&gguf_file::Content::read(&mut file)?)?;
    let start = Instant::now();
    let ids = gguf.encode_with(&text, add_special, parse_special)?;
    let took = start.elapsed();
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    println!("[{}]", list.join(", "));
    eprintln!(
        "{} tokens from {} bytes in {:.1} ms",
        ids.len(),
        text.len(),
        took.as_secs_f64() * 1e3
    );
    Ok(())
}

fn main() -> CliResult<()> {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("tokenize") {
        return tokenize(argv.skip(1));
    }
    let args = parse(argv)?;
    let (model, text) = load(&args)?;
    let mut session = ChatSession::new(&model, args.options.captured)?;
    let system = args.system.iter().map(|s| Message::new("system", s));
    if args.command == "generate" {
        let prompt = args.prompt.clone().ok_or("generate needs --prompt")?;
        let tokens = if args.raw || text.template.is_none() {
            text.encode_with(&prompt, true, false)?
        } else {
            let messages: Vec<Message> = system.chain([Message::new("user", &prompt)]).collect();
            text.chat_prompt(&messages)?
        };
        answer(&mut session, &text, &tokens, &args)?;
        return Ok(());
    }
    let mut messages: Vec<Message> = system.collect();
    let stdin = std::io::stdin();
    eprint!("> ");
    std::io::stderr().flush()?;
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            eprint!("> ");
            continue;
        }
        messages.push(Message::new("user", &line));
        let prompt = text.chat_prompt(&messages)?;
        let reply = answer(&mut session, &text, &prompt, &args)?;
        messages.push(Message::new("assistant", &reply));
        eprint!("> ");
        std::io::stderr().flush()?;
    }
    Ok(())
}

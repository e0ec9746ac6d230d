//! `candle-rocm-llm`: generate text or chat with a GGUF model on a ROCm device (or the CPU),
//! or print a text's token ids. `candle-rocm-llm --help` and `candle-rocm-llm COMMAND --help`
//! list the options.
//!
//! ```text
//! candle-rocm-llm generate --model FILE.gguf --prompt TEXT [options]
//! candle-rocm-llm chat --model FILE.gguf [--system TEXT] [options]   (a turn per stdin line)
//! candle-rocm-llm serve --model FILE.gguf [--host H] [--port P] [--parallel N] [--ctx N] [--api-key K]
//! candle-rocm-llm tokenize --model FILE.gguf (--file TEXT_FILE | --prompt TEXT) [--no-bos] [--no-parse-special]
//! candle-rocm-llm completions bash|zsh|fish|elvish|powershell
//! ```
//! `tokenize` prints the ids as llama.cpp's `llama-tokenize --ids` does (`[1, 2, ...]`), the
//! file's beginning token first where it asks for one (unless `--no-bos`), control tokens
//! spelled in the text as their ids (unless `--no-parse-special`), and the time it took on
//! stderr. Loading shows its progress, and each answer ends with its tokens/s on stderr.

use std::io::{BufRead, Write};
use std::time::Instant;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device};
use candle_rocm_llm::{
    ChatSession, GenerateOptions, GgufText, Message, SamplingParams, StaticLlama, StopReason,
    StopStrings,
};
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

type CliResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Generate text or chat with a GGUF model on a ROCm device (or the CPU).
#[derive(Debug, Parser)]
#[command(name = "candle-rocm-llm", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer one prompt (through the file's chat template unless --raw).
    Generate {
        #[command(flatten)]
        run: RunArgs,
        /// The prompt.
        #[arg(long)]
        prompt: String,
        /// The prompt as is, no chat template.
        #[arg(long)]
        raw: bool,
    },
    /// Chat: a turn per line of standard input.
    Chat {
        #[command(flatten)]
        run: RunArgs,
    },
    /// Print a text's token ids as llama.cpp's `llama-tokenize --ids` does.
    Tokenize {
        /// The GGUF file whose tokenizer to use.
        #[arg(long)]
        model: String,
        /// Read the text from this file.
        #[arg(long, conflicts_with = "prompt", required_unless_present = "prompt")]
        file: Option<String>,
        /// The text.
        #[arg(long)]
        prompt: Option<String>,
        /// No beginning-of-sequence token, even where the file asks for one.
        #[arg(long)]
        no_bos: bool,
        /// Control tokens spelled in the text stay text.
        #[arg(long)]
        no_parse_special: bool,
    },
    /// Serve the model over OpenAI's HTTP API (chat and text completions, streamed or not),
    /// several requests decoded together.
    Serve {
        #[command(flatten)]
        args: ServeArgs,
    },
    /// Print a completion script for a shell.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// What `generate` and `chat` share: the model, the device, the cache and the sampling.
#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// The GGUF file.
    #[arg(long)]
    model: String,
    /// A system message.
    #[arg(long)]
    system: Option<String>,
    #[arg(long, value_enum, default_value_t = DeviceKind::Rocm)]
    device: DeviceKind,
    /// Cache positions (default: the file's context, at most 4096).
    #[arg(long)]
    ctx: Option<usize>,
    #[arg(long, default_value_t = GenerateOptions::default().max_tokens)]
    max_tokens: usize,
    /// 0 picks the most likely token.
    #[arg(long, default_value_t = SamplingParams::default().temperature)]
    temperature: f64,
    #[arg(long, default_value_t = SamplingParams::default().top_k)]
    top_k: usize,
    #[arg(long, default_value_t = SamplingParams::default().top_p)]
    top_p: f64,
    #[arg(long, default_value_t = SamplingParams::default().min_p)]
    min_p: f64,
    #[arg(long, default_value_t = SamplingParams::default().repeat_penalty)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = SamplingParams::default().repeat_last_n)]
    repeat_last_n: usize,
    #[arg(long, default_value_t = SamplingParams::default().seed)]
    seed: u64,
    /// A text that ends the answer (repeatable; not printed).
    #[arg(long = "stop")]
    stops: Vec<String>,
    #[arg(long, value_enum, default_value_t = CacheDType::F32)]
    kv_cache: CacheDType,
    /// Every step launched on its own (no captured step).
    #[arg(long)]
    eager: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum DeviceKind {
    Rocm,
    Cpu,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CacheDType {
    F32,
    F16,
    Bf16,
}

impl CacheDType {
    fn dtype(self) -> DType {
        match self {
            CacheDType::F32 => DType::F32,
            CacheDType::F16 => DType::F16,
            CacheDType::Bf16 => DType::BF16,
        }
    }
}

impl RunArgs {
    fn options(&self) -> CliResult<GenerateOptions> {
        let sampling = SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            seed: self.seed,
        };
        SamplingParams::check(&sampling)?;
        Ok(GenerateOptions {
            max_tokens: self.max_tokens,
            sampling,
            captured: !self.eager,
            ..GenerateOptions::default()
        })
    }

    fn kv_cache(&self) -> DType {
        self.kv_cache.dtype()
    }
}

/// The model and its text side, loaded with a progress line.
fn load(args: &RunArgs) -> CliResult<(StaticLlama, GgufText)> {
    let device = match args.device {
        DeviceKind::Rocm => Device::new_rocm(0)?,
        DeviceKind::Cpu => Device::Cpu,
    };
    let mut file = std::fs::File::open(&args.model).map_err(|e| format!("{}: {e}", args.model))?;
    // buffered: the metadata is many small strings
    let content = gguf_file::Content::read(&mut std::io::BufReader::new(&file))?;
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
            .with_cache_dtype(args.kv_cache())?;
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

/// How `serve` was called.
#[derive(Debug, Clone, clap::Args)]
struct ServeArgs {
    /// The GGUF file.
    #[arg(long)]
    model: String,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port (the address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Sequences decoded together (each with a cache of --ctx positions).
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Cache positions of each sequence (default: the file's context, at most 4096).
    #[arg(long)]
    ctx: Option<usize>,
    #[arg(long, value_enum, default_value_t = DeviceKind::Rocm)]
    device: DeviceKind,
    /// A key every request must carry as `Authorization: Bearer KEY` (none: no key).
    #[arg(long)]
    api_key: Option<String>,
    /// Requests waiting for a slot past which new ones get 503.
    #[arg(long, default_value_t = 256)]
    queue: usize,
    /// The model's name in the API (default: the file's name without `.gguf`).
    #[arg(long)]
    alias: Option<String>,
    #[arg(long, value_enum, default_value_t = CacheDType::F16)]
    kv_cache: CacheDType,
    /// Every step launched on its own (no captured step).
    #[arg(long)]
    eager: bool,
    /// A request's text depends on its own parameters and seed alone: every step runs all
    /// --parallel slots and no prompt reuses a cached prefix (on the GPU a sequence's rounding
    /// otherwise depends on the batch it runs in). Slower where few requests run.
    #[arg(long)]
    deterministic: bool,
}

/// `serve`: the model loads on the engine's thread (`/health` says `loading` meanwhile) while
/// the server listens; Ctrl-C or SIGTERM stops taking connections, lets the running requests
/// finish and exits.
fn serve(args: ServeArgs) -> CliResult<()> {
    use candle_rocm_llm::server::engine::{Engine, EngineOptions};
    use candle_rocm_llm::server::{router, ServeConfig};
    if args.parallel == 0 {
        return Err("--parallel is at least 1".into());
    }
    let mut file = std::fs::File::open(&args.model).map_err(|e| format!("{}: {e}", args.model))?;
    let content = gguf_file::Content::read(&mut std::io::BufReader::new(&file))?;
    let text = std::sync::Arc::new(GgufText::from_gguf(&content)?);
    let context = candle_rocm_llm::GgufHyperParams::read(&content, &mut file)?.context;
    let ctx = args.ctx.unwrap_or(context.unwrap_or(4096).min(4096));
    let name = args.alias.clone().unwrap_or_else(|| {
        std::path::Path::new(&args.model)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| args.model.clone())
    });
    let (path, device, cache) = (args.model.clone(), args.device, args.kv_cache.dtype());
    let load = move || -> candle_core::Result<StaticLlama> {
        let device = match device {
            DeviceKind::Rocm => Device::new_rocm(0)?,
            DeviceKind::Cpu => Device::Cpu,
        };
        let start = Instant::now();
        let model =
            StaticLlama::from_gguf_file(&content, &file, &device, ctx)?.with_cache_dtype(cache)?;
        device.synchronize()?;
        eprintln!(
            "loaded {path} ({ctx} positions a sequence) in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        Ok(model)
    };
    let options = EngineOptions {
        parallel: args.parallel,
        captured: !args.eager,
        deterministic: args.deterministic,
    };
    let (engine, thread) = Engine::start(load, text.clone(), options);
    let app = router(
        engine,
        text,
        ServeConfig {
            model_name: name,
            parallel: args.parallel,
            max_queue: args.queue,
            api_key: args.api_key,
        },
    );
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
        eprintln!("listening on http://{}", listener.local_addr()?);
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown_signal())
            .await
    })?;
    // the router's handles are gone: the engine finishes what it holds and stops
    drop(runtime);
    let _ = thread.join();
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("stopping: finishing the running requests");
}

/// Generates after `prompt` (the conversation so far; the session's cache holds what it can
/// of it), streaming text to stdout; returns the answer's text.
fn answer(
    session: &mut ChatSession<'_>,
    text: &GgufText,
    prompt: &[u32],
    args: &RunArgs,
) -> CliResult<String> {
    let mut options = args.options()?;
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
fn tokenize(model: &str, text: &str, add_special: bool, parse_special: bool) -> CliResult<()> {
    let file = std::fs::File::open(model).map_err(|e| format!("{model}: {e}"))?;
    let content = gguf_file::Content::read(&mut std::io::BufReader::new(file))?;
    let gguf = GgufText::from_gguf(&content)?;
    let start = Instant::now();
    let ids = gguf.encode_with(text, add_special, parse_special)?;
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
    let (run, prompt) = match Cli::parse().command {
        Command::Tokenize {
            model,
            file,
            prompt,
            no_bos,
            no_parse_special,
        } => {
            let text = match (file, prompt) {
                (Some(path), _) => {
                    std::fs::read_to_string(&path).map_err(|e| format!("--file {path}: {e}"))?
                }
                (None, Some(text)) => text,
                (None, None) => return Err("tokenize needs --file or --prompt".into()),
            };
            return tokenize(&model, &text, !no_bos, !no_parse_special);
        }
        Command::Completions { shell } => {
            let mut command = Cli::command();
            clap_complete::generate(
                shell,
                &mut command,
                "candle-rocm-llm",
                &mut std::io::stdout(),
            );
            return Ok(());
        }
        Command::Serve { args } => return serve(args),
        Command::Generate { run, prompt, raw } => (run, Some((prompt, raw))),
        Command::Chat { run } => (run, None),
    };
    let (model, text) = load(&run)?;
    let mut session = ChatSession::new(&model, !run.eager)?;
    let system = run.system.iter().map(|s| Message::new("system", s));
    if let Some((prompt, raw)) = prompt {
        let tokens = if raw || text.template.is_none() {
            text.encode_with(&prompt, true, false)?
        } else {
            let messages: Vec<Message> = system.chain([Message::new("user", &prompt)]).collect();
            text.chat_prompt(&messages)?
        };
        answer(&mut session, &text, &tokens, &run)?;
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
        let reply = answer(&mut session, &text, &prompt, &run)?;
        messages.push(Message::new("assistant", &reply));
        eprint!("> ");
        std::io::stderr().flush()?;
    }
    Ok(())
}

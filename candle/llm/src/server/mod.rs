//! An OpenAI-compatible HTTP server over the static llama: `POST /v1/chat/completions` and
//! `POST /v1/completions` (streamed as server-sent events or whole), `GET /v1/models`,
//! `GET /health` and `GET /metrics`, with continuous batching by [`engine::Engine`].
//! Errors are OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`).

pub mod api;
pub mod engine;
pub mod metrics;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::chat::{GgufText, Message};
use crate::sampling::SamplingParams;
use api::{
    ApiError, ChatRequest, CompletionRequest, Finish, Prompt, Sampling, TokenLogprob, Usage,
};
use engine::{Engine, Event, Job, Penalties};

/// How the server was started.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The name `/v1/models` lists and requests may give as `model`.
    pub model_name: String,
    /// Sequences decoded together.
    pub parallel: usize,
    /// Requests waiting for a slot past which new ones get a 503.
    pub max_queue: usize,
    /// A Bearer key every request must carry (none: no key needed).
    pub api_key: Option<String>,
}

#[derive(Clone)]
struct AppState {
    engine: Engine,
    text: Arc<GgufText>,
    config: Arc<ServeConfig>,
    started: u64,
}

/// The server's routes over `engine` (its model's text side `text`).
pub fn router(engine: Engine, text: Arc<GgufText>, config: ServeConfig) -> Router {
    let state = AppState {
        engine,
        text,
        config: Arc::new(config),
        started: unix_now(),
    };
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completion))
        .fallback(not_found)
        .with_state(state)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A request id of `prefix`, unique within the process.
fn request_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:x}{n:06x}", unix_now())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        let mut response = (status, axum::Json(self.body())).into_response();
        if self.status == 503 {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

fn error(status: u16, kind: &'static str, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
        kind,
        param: None,
        code: None,
    }
}

async fn not_found() -> ApiError {
    error(404, "invalid_request_error", "no such route").with_code("not_found")
}

/// The Bearer key where the server has one.
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &state.config.api_key else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(key.as_str()) {
        return Ok(());
    }
    Err(
        error(401, "authentication_error", "invalid or missing API key")
            .with_code("invalid_api_key"),
    )
}

async fn health(State(state): State<AppState>) -> Response {
    match state.engine.status() {
        Ok(true) => (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response(),
        Ok(false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "loading"})),
        )
            .into_response(),
        Err(e) => error(500, "server_error", e).into_response(),
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let body = state
        .engine
        .metrics()
        .render(state.engine.queued(), state.config.parallel);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

async fn models(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": state.config.model_name,
            "object": "model",
            "created": state.started,
            "owned_by": "candle-rocm",
        }],
    }))
    .into_response()
}

/// The request body as `T`, or OpenAI's 400 naming what is wrong.
fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        let kind = if e.is_syntax() || e.is_eof() {
            "the body is not valid JSON"
        } else {
            "the body does not match the request's schema"
        };
        error(400, "invalid_request_error", format!("{kind}: {e}"))
    })
}

/// What a request asks of the engine, checked.
struct Plan {
    job: Job,
    events: UnboundedReceiver<Event>,
    stream: bool,
    include_usage: bool,
    model: String,
}

/// Checks the shared fields and builds the job for `prompt`.
fn plan(
    state: &AppState,
    model: Option<&str>,
    prompt: Vec<u32>,
    s: Sampling,
    logprobs: Option<usize>,
) -> Result<Plan, ApiError> {
    let m = state.engine.metrics();
    m.requests.fetch_add(1, Ordering::Relaxed);
    match state.engine.status() {
        Ok(true) => {}
        Ok(false) => return Err(error(503, "server_error", "the model is loading")),
        Err(e) => return Err(error(500, "server_error", e)),
    }
    if let Some(name) = model {
        if name != state.config.model_name {
            return Err(error(
                404,
                "invalid_request_error",
                format!(
                    "the model {name:?} does not exist (this server serves {:?})",
                    state.config.model_name
                ),
            )
            .with_code("model_not_found"));
        }
    }
    if s.n.unwrap_or(1) != 1 {
        return Err(ApiError::invalid("n", "only n = 1 is supported"));
    }
    if let Some(f) = &s.response_format {
        if f.kind != "text" {
            return Err(ApiError::invalid(
                "response_format",
                format!(
                    "response_format {:?} is not supported (only \"text\"): output is not constrained",
                    f.kind
                ),
            ));
        }
    }
    let range = |name: &str, v: Option<f64>, lo: f64, hi: f64| -> Result<(), ApiError> {
        match v {
            Some(x) if !(lo..=hi).contains(&x) || x.is_nan() => Err(ApiError::invalid(
                name,
                format!("{name} is {x}, not within [{lo}, {hi}]"),
            )),
            _ => Ok(()),
        }
    };
    range("temperature", s.temperature, 0.0, 2.0)?;
    range("top_p", s.top_p, 0.0, 1.0)?;
    range("min_p", s.min_p, 0.0, 1.0)?;
    range(
        "presence_penalty",
        s.presence_penalty.map(f64::from),
        -2.0,
        2.0,
    )?;
    range(
        "frequency_penalty",
        s.frequency_penalty.map(f64::from),
        -2.0,
        2.0,
    )?;
    range("repeat_penalty", s.repeat_penalty.map(f64::from), 0.0, 10.0)?;
    if s.top_p == Some(0.0) {
        return Err(ApiError::invalid(
            "top_p",
            "top_p is 0: no token could be drawn",
        ));
    }
    let top_k = match s.top_k {
        Some(k) if k < 0 => return Err(ApiError::invalid("top_k", format!("top_k is {k}"))),
        k => k.unwrap_or(0) as usize,
    };
    let stops = s.stop.map(api::Stop::into_vec).unwrap_or_default();
    if stops.len() > 16 || stops.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "stop",
            "at most 16 stop strings, none empty",
        ));
    }
    let ctx = state.engine.max_len();
    if prompt.is_empty() {
        return Err(ApiError::invalid("prompt", "the prompt has no tokens"));
    }
    if prompt.len() >= ctx {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "the prompt has {} tokens; the context holds {ctx}, and one more is needed to answer",
                prompt.len()
            ),
        )
        .with_code("context_length_exceeded"));
    }
    let room = ctx - prompt.len();
    let asked = s.max_completion_tokens.or(s.max_tokens);
    let max_tokens = match asked {
        Some(0) => return Err(ApiError::invalid("max_tokens", "max_tokens is 0")),
        Some(n) if n as usize > room => {
            return Err(ApiError::invalid(
                "max_tokens",
                format!(
                    "max_tokens {n} and the prompt's {} tokens are more than the context's {ctx}",
                    prompt.len()
                ),
            )
            .with_code("context_length_exceeded"))
        }
        Some(n) => n as usize,
        None => room,
    };
    if state.engine.queued() >= state.config.max_queue {
        m.rejected.fetch_add(1, Ordering::Relaxed);
        return Err(error(
            503,
            "server_error",
            format!("{} requests are waiting; try again", state.engine.queued()),
        )
        .with_code("queue_full"));
    }
    let seed = match s.seed {
        Some(seed) => seed as u64,
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    };
    let sampling = SamplingParams {
        temperature: s.temperature.unwrap_or(1.0),
        top_k,
        top_p: s.top_p.unwrap_or(1.0),
        min_p: s.min_p.unwrap_or(0.0),
        repeat_penalty: s.repeat_penalty.unwrap_or(1.0),
        repeat_last_n: 64,
        seed,
    };
    sampling
        .check()
        .map_err(|e| ApiError::invalid("temperature", e.to_string()))?;
    m.prompt_tokens.fetch_add(prompt.len(), Ordering::Relaxed);
    let (tx, rx) = unbounded_channel();
    Ok(Plan {
        job: Job {
            prompt,
            sampling,
            penalties: Penalties {
                presence: s.presence_penalty.unwrap_or(0.0),
                frequency: s.frequency_penalty.unwrap_or(0.0),
            },
            max_tokens,
            ignore_eos: s.ignore_eos,
            cache_prompt: s.cache_prompt.unwrap_or(true),
            stops,
            logprobs,
            events: tx,
            received: Instant::now(),
        },
        events: rx,
        stream: s.stream,
        include_usage: s.stream_options.is_some_and(|o| o.include_usage),
        model: state.config.model_name.clone(),
    })
}

/// The whole answer of a job: its text, log-probabilities, finish and usage.
async fn collect(
    mut events: UnboundedReceiver<Event>,
) -> Result<(String, Vec<TokenLogprob>, Finish, Usage), ApiError> {
    let (mut text, mut logprobs) = (String::new(), Vec::new());
    while let Some(event) = events.recv().await {
        match event {
            Event::Text {
                text: t,
                logprobs: l,
            } => {
                text.push_str(&t);
                logprobs.extend(l);
            }
            Event::Done { finish, usage } => return Ok((text, logprobs, finish, usage)),
            Event::Failed(e) => return Err(error(500, "server_error", e)),
        }
    }
    Err(error(500, "server_error", "the engine stopped"))
}

/// Server-sent events of a job: `chunk(text, logprobs, finish)` makes each event's JSON, and
/// `usage_chunk` the last one where usage is asked; then `[DONE]`. A client that leaves drops
/// the stream, which drops the job's events and frees its slot.
fn sse(
    mut events: UnboundedReceiver<Event>,
    first: Option<Value>,
    chunk: impl Fn(&str, &[TokenLogprob], Option<Finish>) -> Value + Send + 'static,
    usage_chunk: Option<impl Fn(Usage) -> Value + Send + 'static>,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<SseEvent, Infallible>>(64);
    tokio::spawn(async move {
        let send = |v: Value| {
            let tx = tx.clone();
            async move {
                tx.send(Ok(SseEvent::default().data(v.to_string())))
                    .await
                    .is_ok()
            }
        };
        if let Some(v) = first {
            if !send(v).await {
                return;
            }
        }
        while let Some(event) = events.recv().await {
            let ok = match event {
                Event::Text { text, logprobs } => send(chunk(&text, &logprobs, None)).await,
                Event::Done { finish, usage } => {
                    let mut ok = send(chunk("", &[], Some(finish))).await;
                    if let (true, Some(u)) = (ok, &usage_chunk) {
                        ok = send(u(usage)).await;
                    }
                    ok
                }
                Event::Failed(e) => send(error(500, "server_error", e).body()).await,
            };
            if !ok {
                return;
            }
        }
        let _ = tx.send(Ok(SseEvent::default().data("[DONE]"))).await;
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A generation's response, or its error (counted among the rejected requests but for a full
/// queue, which `plan` counts).
fn answered(state: &AppState, r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(|e| {
        if e.status != 503 {
            let rejected = &state.engine.metrics().rejected;
            rejected.fetch_add(1, Ordering::Relaxed);
        }
        e.into_response()
    })
}

/// The last event of a stream that asked for usage: `head` (the chunks' id, object, created
/// and model) with no choices and the usage.
fn usage_chunk(head: Value) -> impl Fn(Usage) -> Value + Send + 'static {
    move |u| {
        let mut v = head.clone();
        v["choices"] = json!([]);
        v["usage"] = json!(u);
        v
    }
}

async fn chat(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    answered(&state, chat_response(&state, &headers, &body).await)
}

async fn chat_response(
    state: &AppState,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    authorize(state, headers)?;
    let req: ChatRequest = parse(body)?;
    if req.messages.is_empty() {
        return Err(ApiError::invalid("messages", "messages is empty"));
    }
    let messages = req
        .messages
        .iter()
        .map(|m| Ok(Message::new(&m.role, &api::message_text(m)?)))
        .collect::<Result<Vec<_>, ApiError>>()?;
    if state.text.template.is_none() {
        return Err(ApiError::invalid(
            "messages",
            "the model's file has no chat template: use /v1/completions",
        ));
    }
    let prompt = state
        .text
        .chat_prompt(&messages)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let top = match (req.logprobs, req.top_logprobs) {
        (_, Some(n)) if n > 20 => {
            return Err(ApiError::invalid(
                "top_logprobs",
                "top_logprobs is at most 20",
            ))
        }
        (true, n) => Some(n.unwrap_or(0) as usize),
        (false, Some(_)) => {
            return Err(ApiError::invalid(
                "top_logprobs",
                "top_logprobs needs logprobs: true",
            ))
        }
        (false, None) => None,
    };
    let p = plan(state, req.model.as_deref(), prompt, req.sampling, top)?;
    let (id, created, model) = (request_id("chatcmpl"), unix_now(), p.model.clone());
    let with_logprobs = top.is_some();
    state
        .engine
        .submit(p.job)
        .map_err(|e| error(500, "server_error", e))?;
    let logprobs_json = move |l: &[TokenLogprob]| {
        with_logprobs
            .then(|| json!({"content": l.iter().map(TokenLogprob::chat_json).collect::<Vec<_>>()}))
    };
    if p.stream {
        let head = move |id: &str, model: &str| json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model});
        let mut first = head(&id, &model);
        first["choices"] = json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]);
        let (cid, cmodel) = (id.clone(), model.clone());
        let chunk = move |text: &str, l: &[TokenLogprob], finish: Option<Finish>| {
            let mut v = head(&cid, &cmodel);
            let delta = if finish.is_some() {
                json!({})
            } else {
                json!({"content": text})
            };
            v["choices"] = json!([{
                "index": 0,
                "delta": delta,
                "logprobs": logprobs_json(l),
                "finish_reason": finish.map(Finish::as_str),
            }]);
            v
        };
        let usage = p.include_usage.then(|| usage_chunk(head(&id, &model)));
        return Ok(sse(p.events, Some(first), chunk, usage));
    }
    let (text, logprobs, finish, usage) = collect(p.events).await?;
    Ok(axum::Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": logprobs_json(&logprobs),
            "finish_reason": finish.as_str(),
        }],
        "usage": usage,
    }))
    .into_response())
}

async fn completion(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    answered(&state, completion_response(&state, &headers, &body).await)
}

/// The completion form of log-probabilities: tokens, their log-probabilities, the top ones
/// as maps and the text offsets (after `offset` bytes of text already sent).
fn completion_logprobs(l: &[TokenLogprob], mut offset: usize) -> Value {
    let mut offsets = Vec::with_capacity(l.len());
    for t in l {
        offsets.push(offset);
        offset += t.token.len();
    }
    json!({
        "tokens": l.iter().map(|t| t.token.clone()).collect::<Vec<_>>(),
        "token_logprobs": l.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": l.iter().map(|t| t.top.iter().map(|(s, p)| (s.clone(), json!(p))).collect::<serde_json::Map<_, _>>()).collect::<Vec<_>>(),
        "text_offset": offsets,
    })
}

async fn completion_response(
    state: &AppState,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    authorize(state, headers)?;
    let req: CompletionRequest = parse(body)?;
    let (prompt, prompt_text) = match req.prompt {
        Prompt::Text(t) => (state.text.encode_with(&t, true, true), t),
        Prompt::Texts(mut ts) if ts.len() == 1 => {
            let t = ts.remove(0);
            (state.text.encode_with(&t, true, true), t)
        }
        Prompt::Texts(_) => {
            return Err(ApiError::invalid(
                "prompt",
                "one prompt a request is supported",
            ))
        }
        Prompt::Tokens(ids) => {
            let vocab = state.text.tokenizer.tokenizer().get_vocab_size(true);
            if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                return Err(ApiError::invalid(
                    "prompt",
                    format!("token {bad} is past the vocabulary's {vocab}"),
                ));
            }
            let text = state.text.decode(&ids).unwrap_or_default();
            (Ok(ids), text)
        }
    };
    let prompt = prompt.map_err(|e| ApiError::invalid("prompt", e.to_string()))?;
    let top = match req.logprobs {
        Some(n) if n > 5 => return Err(ApiError::invalid("logprobs", "logprobs is at most 5")),
        n => n.map(|n| n as usize),
    };
    let p = plan(state, req.model.as_deref(), prompt, req.sampling, top)?;
    let (id, created, model) = (request_id("cmpl"), unix_now(), p.model.clone());
    let echo = req.echo.then_some(prompt_text);
    state
        .engine
        .submit(p.job)
        .map_err(|e| error(500, "server_error", e))?;
    let head = move |id: &str, model: &str| json!({"id": id, "object": "text_completion", "created": created, "model": model});
    if p.stream {
        let first = echo.map(|t| {
            let mut v = head(&id, &model);
            v["choices"] =
                json!([{"index": 0, "text": t, "logprobs": null, "finish_reason": null}]);
            v
        });
        let (cid, cmodel) = (id.clone(), model.clone());
        let sent = std::sync::Mutex::new(0usize);
        let chunk = move |text: &str, l: &[TokenLogprob], finish: Option<Finish>| {
            let mut at = sent.lock().unwrap_or_else(|p| p.into_inner());
            let logprobs = top.map(|_| completion_logprobs(l, *at));
            *at += text.len();
            let mut v = head(&cid, &cmodel);
            v["choices"] = json!([{
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish.map(Finish::as_str),
            }]);
            v
        };
        let usage = p.include_usage.then(|| usage_chunk(head(&id, &model)));
        return Ok(sse(p.events, first, chunk, usage));
    }
    let (text, logprobs, finish, usage) = collect(p.events).await?;
    let text = match echo {
        Some(prompt) => prompt + &text,
        None => text,
    };
    let mut v = head(&id, &model);
    v["choices"] = json!([{
        "index": 0,
        "text": text,
        "logprobs": top.map(|_| completion_logprobs(&logprobs, 0)),
        "finish_reason": finish.as_str(),
    }]);
    v["usage"] = json!(usage);
    Ok(axum::Json(v).into_response())
}

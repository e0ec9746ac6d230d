//! The server's engine: one thread that owns the model and a batch of `parallel` slots and
//! runs continuous batching. Jobs join the batch between decode steps: a job takes the free
//! slot whose cached tokens share the longest prefix with its prompt (kept; ties and jobs
//! without prefix reuse take the lowest), its prompt is prefilled in chunks with at most
//! [`PREFILL_CHUNK`] prompt tokens between two decode steps of the running slots, then it
//! decodes with the others; it leaves the batch when it stops, when its client is gone (its
//! event channel closed), or when the cache is full. A fused step runs the first slots up to
//! the last decoding one (a power of two of them, each count's step captured once): one
//! client's steps are one sequence's, not the whole batch's ([`EngineOptions::deterministic`]:
//! all of them, always).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

use candle_core::{DType, Result, Tensor, D};
use tokio::sync::mpsc::UnboundedSender;

use super::api::{Finish, TokenLogprob, Usage};
use super::metrics::Metrics;
use crate::batch::{BatchDecoder, BatchState};
use crate::chat::{GgufText, StopStrings, TextStream};
use crate::sampling::{Sampler, SamplingParams};
use crate::static_llama::StaticLlama;

/// Most prompt tokens prefilled between two decode steps of the running slots.
pub const PREFILL_CHUNK: usize = 512;

/// Penalties on tokens already generated (OpenAI's): `presence` once a token came,
/// `frequency` times the times it came, subtracted from its logit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Penalties {
    pub presence: f32,
    pub frequency: f32,
}

impl Penalties {
    fn none(&self) -> bool {
        self.presence == 0.0 && self.frequency == 0.0
    }
}

/// One request's generation.
pub struct Job {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    pub penalties: Penalties,
    pub max_tokens: usize,
    /// The model's end-of-turn tokens are tokens like the others.
    pub ignore_eos: bool,
    /// Whether a prefix of the prompt a slot holds is kept (else the prompt is prefilled
    /// whole, in the lowest free slot).
    pub cache_prompt: bool,
    pub stops: Vec<String>,
    /// Log-probabilities of the chosen tokens with this many alternatives each.
    pub logprobs: Option<usize>,
    pub events: UnboundedSender<Event>,
    pub received: Instant,
}

/// What a job's client receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// New text (possibly empty where a token's bytes are not yet whole) and the log
    /// probabilities of its tokens where asked.
    Text {
        text: String,
        logprobs: Vec<TokenLogprob>,
    },
    Done {
        finish: Finish,
        usage: Usage,
    },
    Failed(String),
}

/// What the engine's thread and the HTTP side share.
#[derive(Default)]
pub struct Shared {
    pub metrics: Metrics,
    /// Jobs sent and not yet in a slot.
    queued: AtomicUsize,
    ready: AtomicBool,
    failed: std::sync::Mutex<Option<String>>,
    max_len: AtomicUsize,
}

/// The handle the HTTP side holds: jobs go in, the engine's state is read. The engine's
/// thread ends once every handle is dropped and its jobs are done.
#[derive(Clone)]
pub struct Engine {
    jobs: mpsc::Sender<Job>,
    pub shared: Arc<Shared>,
}

/// How the engine batches.
#[derive(Debug, Clone, Copy)]
pub struct EngineOptions {
    /// Slots (sequences decoded together).
    pub parallel: usize,
    /// Fused steps replayed from captures (ROCm).
    pub captured: bool,
    /// Every fused step runs all the slots and no prompt reuses a cached prefix: a request's
    /// arithmetic is the same whatever else runs (a slot's row of a step of fixed shapes, its
    /// prompt's chunks prefilled alone at the same positions).
    pub deterministic: bool,
}

impl Engine {
    /// Starts the engine's thread: `load` builds the model there, then jobs are served until
    /// every handle is dropped.
    pub fn start(
        load: impl FnOnce() -> Result<StaticLlama> + Send + 'static,
        text: Arc<GgufText>,
        options: EngineOptions,
    ) -> (Engine, std::thread::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared::default());
        let engine = Engine {
            jobs: tx,
            shared: shared.clone(),
        };
        let thread = std::thread::spawn(move || {
            let model = match load() {
                Ok(m) => m,
                Err(e) => {
                    let why = format!("the model did not load: {e}");
                    *shared.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
                    // jobs that come anyway are answered with the reason
                    for job in rx {
                        shared.queued.fetch_sub(1, Ordering::SeqCst);
                        let _ = job.events.send(Event::Failed(why.clone()));
                    }
                    return;
                }
            };
            let mut runner = match Runner::new(&model, &text, options, shared.clone()) {
                Ok(r) => r,
                Err(e) => {
                    *shared.failed.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(format!("the batch's cache: {e}"));
                    return;
                }
            };
            shared.max_len.store(model.max_len(), Ordering::SeqCst);
            shared.ready.store(true, Ordering::SeqCst);
            runner.run(rx);
        });
        (engine, thread)
    }

    /// Whether the model is ready (false while it loads), or why it failed to load.
    pub fn status(&self) -> std::result::Result<bool, String> {
        if let Some(e) = self
            .shared
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(e);
        }
        Ok(self.shared.ready.load(Ordering::SeqCst))
    }

    /// Positions of each slot's cache (0 until the model is loaded).
    pub fn max_len(&self) -> usize {
        self.shared.max_len.load(Ordering::SeqCst)
    }

    /// Jobs waiting for a slot.
    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::SeqCst)
    }

    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    /// Hands `job` to the engine; an error where its thread is gone.
    pub fn submit(&self, job: Job) -> std::result::Result<(), String> {
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        self.jobs.send(job).map_err(|_| {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            "the engine has stopped".to_string()
        })
    }
}

enum Phase {
    /// Prompt tokens up to `next` are in the cache.
    Prefill {
        next: usize,
    },
    Decode,
}

/// A job in a slot.
struct Running<'t> {
    job: Job,
    phase: Phase,
    sampler: Sampler,
    stream: TextStream<'t>,
    stops: StopStrings,
    generated: usize,
    counts: HashMap<u32, u32>,
    last_token_at: Option<Instant>,
}

struct Runner<'m> {
    model: &'m StaticLlama,
    text: &'m GgufText,
    batch: BatchState,
    /// The first 1, 2, 4, ... slots of `batch` and all of them (views made once: each has its
    /// captured step), for the fused step.
    leading: Vec<BatchState>,
    decoder: BatchDecoder<'m>,
    /// Each slot's cached tokens (the positions its cache holds, in order).
    held: Vec<Vec<u32>>,
    running: Vec<Option<Running<'m>>>,
    waiting: std::collections::VecDeque<Job>,
    deterministic: bool,
    shared: Arc<Shared>,
}

impl<'m> Runner<'m> {
    fn new(
        model: &'m StaticLlama,
        text: &'m GgufText,
        options: EngineOptions,
        shared: Arc<Shared>,
    ) -> Result<Self> {
        let slots = options.parallel.max(1);
        let batch = model.new_batch(slots)?;
        let leading = if model.decodes_fused() {
            (0..usize::BITS)
                .map(|p| 1usize << p)
                .take_while(|&n| n < slots)
                .chain([slots])
                .map(|n| batch.leading(n))
                .collect::<Result<Vec<_>>>()?
        } else {
            Vec::new()
        };
        Ok(Runner {
            model,
            text,
            batch,
            leading,
            decoder: BatchDecoder::new(model, options.captured && model.device().is_rocm()),
            held: vec![Vec::new(); slots],
            running: (0..slots).map(|_| None).collect(),
            waiting: Default::default(),
            deterministic: options.deterministic,
            shared,
        })
    }

    fn run(&mut self, rx: mpsc::Receiver<Job>) {
        loop {
            let busy = self.running.iter().filter(|r| r.is_some()).count();
            self.shared.metrics.slots_busy.store(busy, Ordering::SeqCst);
            // nothing to do: wait for a job (or stop when every handle is gone)
            if busy == 0 && self.waiting.is_empty() {
                match rx.recv() {
                    Ok(job) => self.waiting.push_back(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = rx.try_recv() {
                self.waiting.push_back(job);
            }
            self.admit();
            if let Err(e) = self.prefill() {
                self.fail_all(&format!("prefill: {e}"));
                continue;
            }
            if let Err(e) = self.decode_step() {
                self.fail_all(&format!("decode step: {e}"));
            }
        }
    }

    /// Waiting jobs into free slots, each into the slot whose cache shares the longest prefix
    /// with its prompt.
    fn admit(&mut self) {
        while !self.waiting.is_empty() {
            let free: Vec<usize> = (0..self.running.len())
                .filter(|&s| self.running[s].is_none())
                .collect();
            if free.is_empty() {
                return;
            }
            let Some(job) = self.waiting.pop_front() else {
                return;
            };
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            if job.events.is_closed() {
                continue;
            }
            let reuse = job.cache_prompt && !self.deterministic;
            let common = |s: usize| {
                if !reuse {
                    return 0;
                }
                self.held[s]
                    .iter()
                    .zip(&job.prompt)
                    .take_while(|(a, b)| a == b)
                    .count()
            };
            let slot = free
                .iter()
                .copied()
                .max_by_key(|&s| (common(s), std::cmp::Reverse(s)))
                .unwrap_or(free[0]);
            // at least the prompt's last token runs again: its logits choose the first token
            let keep = common(slot).min(job.prompt.len().saturating_sub(1));
            let sampler = match Sampler::new(job.sampling.clone()) {
                Ok(s) => s,
                Err(e) => {
                    let _ = job.events.send(Event::Failed(e.to_string()));
                    continue;
                }
            };
            if let Err(e) = self.batch.rewind(slot, keep) {
                let _ = job.events.send(Event::Failed(e.to_string()));
                continue;
            }
            self.held[slot].truncate(keep);
            self.shared
                .metrics
                .prompt_cached_tokens
                .fetch_add(keep, Ordering::Relaxed);
            let stops = StopStrings::new(&job.stops);
            self.running[slot] = Some(Running {
                phase: Phase::Prefill { next: keep },
                sampler,
                stream: self.text.stream(),
                stops,
                generated: 0,
                counts: HashMap::new(),
                last_token_at: None,
                job,
            });
        }
    }

    /// Prompt tokens up to [`PREFILL_CHUNK`]: chunks of the prefilling slots' prompts in slot
    /// order. A chunk ends at the prompt's end or at a multiple of [`PREFILL_CHUNK`] positions,
    /// whatever else is prefilled (the pieces a prompt is prefilled in are always the same).
    fn prefill(&mut self) -> Result<()> {
        let mut budget = PREFILL_CHUNK;
        while budget > 0 {
            match self.prefill_one(budget)? {
                Some(used) => budget -= used.min(budget),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// The next chunk of the first prefilling slot's prompt where it is at most `limit`
    /// tokens, its first token where the prompt is done: the tokens taken, None where no slot
    /// prefills or its chunk is longer.
    fn prefill_one(&mut self, limit: usize) -> Result<Option<usize>> {
        let Some(slot) = (0..self.running.len()).find(|&s| {
            matches!(
                self.running[s],
                Some(Running {
                    phase: Phase::Prefill { .. },
                    ..
                })
            )
        }) else {
            return Ok(None);
        };
        let run = self.running[slot].as_mut().expect("a prefilling slot");
        if run.job.events.is_closed() {
            self.running[slot] = None;
            return Ok(Some(0));
        }
        let Phase::Prefill { next } = run.phase else {
            return Ok(None);
        };
        let end = ((next / PREFILL_CHUNK + 1) * PREFILL_CHUNK).min(run.job.prompt.len());
        if end - next > limit {
            return Ok(None);
        }
        let chunk = run.job.prompt[next..end].to_vec();
        let out = match self.model.prefill_slot(&mut self.batch, slot, &chunk) {
            Ok(out) => out,
            Err(e) => {
                // this job's failure alone: the slot's cache is forgotten
                let _ = run.job.events.send(Event::Failed(format!("prefill: {e}")));
                self.running[slot] = None;
                self.held[slot].clear();
                self.batch.reset(slot)?;
                return Ok(Some(0));
            }
        };
        self.held[slot].extend(&chunk);
        if end < run.job.prompt.len() {
            run.phase = Phase::Prefill { next: end };
            return Ok(Some(chunk.len()));
        }
        let run = self.running[slot].as_mut().expect("a prefilling slot");
        run.job.prompt.iter().for_each(|&t| run.sampler.accept(t));
        run.phase = Phase::Decode;
        let now = Instant::now();
        self.shared
            .metrics
            .time_to_first_token
            .observe((now - run.job.received).as_secs_f64());
        let logits = out.logits.flatten_all()?;
        let greedy = out.next.to_vec1::<u32>()?.first().copied();
        self.take(slot, &logits, greedy)?;
        Ok(Some(chunk.len()))
    }

    /// One decode step of the decoding slots (on ROCm the fused step of the first slots that
    /// cover them, fixed shapes for each count); their tokens are chosen and handed over.
    fn decode_step(&mut self) -> Result<()> {
        let decoding: Vec<usize> = (0..self.running.len())
            .filter(|&s| {
                matches!(
                    self.running[s],
                    Some(Running {
                        phase: Phase::Decode,
                        ..
                    })
                )
            })
            .collect();
        if decoding.is_empty() {
            return Ok(());
        }
        for &s in &decoding {
            self.batch.advance(s)?;
        }
        // the fused step runs the first slots up to the last decoding one (fixed shapes for each
        // count, captured); the ops' step only the decoding ones (row i of its output is slot
        // decoding[i]'s)
        let last = if self.deterministic {
            self.running.len() - 1
        } else {
            decoding[decoding.len() - 1]
        };
        let (out, compact) = if let Some(first) = self.leading.iter().find(|b| b.slots() > last) {
            (self.decoder.step(first)?, false)
        } else {
            (self.model.step_slots(&self.batch, &decoding)?, true)
        };
        let m = &self.shared.metrics;
        m.decode_steps.fetch_add(1, Ordering::Relaxed);
        m.decode_slot_steps
            .fetch_add(decoding.len(), Ordering::Relaxed);
        let greedy = out.next.to_vec1::<u32>()?;
        for (i, &s) in decoding.iter().enumerate() {
            let row = if compact { i } else { s };
            let logits = out.logits.get(row)?;
            self.take(s, &logits, greedy.get(row).copied())?;
        }
        Ok(())
    }

    /// Slot `slot`'s next token from its logits (`greedy`: the step's own argmax, the slot's
    /// input already): chosen, handed to its client, and the job finished where it stops.
    fn take(&mut self, slot: usize, logits: &Tensor, greedy: Option<u32>) -> Result<()> {
        let Some(run) = self.running[slot].as_mut() else {
            return Ok(());
        };
        let token = match greedy {
            Some(g) if run.sampler.is_greedy() && run.job.penalties.none() => g,
            _ => {
                let logits = penalized(logits, &run.counts, run.job.penalties)?;
                let t = run.sampler.sample(&logits)?.to_vec1::<u32>()?[0];
                self.batch.feed(slot, t)?;
                t
            }
        };
        run.sampler.accept(token);
        let now = Instant::now();
        if let Some(last) = run.last_token_at.replace(now) {
            self.shared
                .metrics
                .inter_token_latency
                .observe((now - last).as_secs_f64());
        }
        let filled = self.batch.filled(slot);
        let stop_token = !run.job.ignore_eos && self.text.stop_tokens.contains(&token);
        let finish = if stop_token {
            Some(Finish::Stop)
        } else {
            run.generated += 1;
            *run.counts.entry(token).or_default() += 1;
            self.held[slot].push(token);
            self.shared
                .metrics
                .generated_tokens
                .fetch_add(1, Ordering::Relaxed);
            let logprobs = match run.job.logprobs {
                Some(top) => vec![token_logprob(self.text, logits, token, top)?],
                None => Vec::new(),
            };
            let piece = run.stream.push(token)?.unwrap_or_default();
            let (shown, stopped) = run.stops.push(&piece);
            if !shown.is_empty() || !logprobs.is_empty() {
                let sent = run.job.events.send(Event::Text {
                    text: shown,
                    logprobs,
                });
                if sent.is_err() {
                    // the client is gone: its slot is free at once
                    self.running[slot] = None;
                    self.shared
                        .metrics
                        .cancelled
                        .fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
            }
            if stopped {
                Some(Finish::Stop)
            } else if run.generated >= run.job.max_tokens || filled >= self.model.max_len() {
                Some(Finish::Length)
            } else {
                None
            }
        };
        if let Some(finish) = finish {
            // what the stop strings held back and the stream's last bytes
            if finish == Finish::Length || stop_token {
                let rest = run.stream.finish()?;
                let (shown, _) = run.stops.push(&rest);
                let tail = format!("{shown}{}", run.stops.finish());
                if !tail.is_empty() {
                    let _ = run.job.events.send(Event::Text {
                        text: tail,
                        logprobs: Vec::new(),
                    });
                }
            }
            let usage = Usage::new(run.job.prompt.len(), run.generated);
            let _ = run.job.events.send(Event::Done { finish, usage });
            // the cache holds what was fed to a step: the prompt and the tokens but the last
            self.held[slot].truncate(filled);
            self.running[slot] = None;
            self.shared
                .metrics
                .requests_done
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Every running and waiting job failed with `why` (a device error): the slots are
    /// emptied and the engine goes on with the next jobs.
    fn fail_all(&mut self, why: &str) {
        for (s, run) in self.running.iter_mut().enumerate() {
            if let Some(run) = run.take() {
                let _ = run.job.events.send(Event::Failed(why.to_string()));
                self.shared.metrics.failed.fetch_add(1, Ordering::Relaxed);
            }
            self.held[s].clear();
            let _ = self.batch.reset(s);
        }
    }
}

/// `logits` (`[vocab]`) less the penalties of the tokens in `counts`.
fn penalized(logits: &Tensor, counts: &HashMap<u32, u32>, p: Penalties) -> Result<Tensor> {
    let logits = logits.flatten_all()?.to_dtype(DType::F32)?;
    if p.none() || counts.is_empty() {
        return Ok(logits);
    }
    let (ids, deltas): (Vec<u32>, Vec<f32>) = counts
        .iter()
        .map(|(&t, &n)| (t, -(p.presence + p.frequency * n as f32)))
        .unzip();
    let dev = logits.device();
    let ids = Tensor::new(ids, dev)?;
    let deltas = Tensor::new(deltas, dev)?;
    logits.index_add(&ids, &deltas, 0)
}

/// The log-probability of `token` under `logits` and the `top` most likely tokens' (read back
/// to the host).
fn token_logprob(text: &GgufText, logits: &Tensor, token: u32, top: usize) -> Result<TokenLogprob> {
    let logits = logits.flatten_all()?.to_dtype(DType::F32)?;
    let lp = candle_nn::ops::log_softmax(&logits, D::Minus1)?.to_vec1::<f32>()?;
    let piece = |t: u32| text.decode(&[t]).unwrap_or_default();
    let mut best: Vec<u32> = (0..lp.len() as u32).collect();
    let top = top.min(best.len());
    if top > 0 {
        best.select_nth_unstable_by(top - 1, |&a, &b| lp[b as usize].total_cmp(&lp[a as usize]));
        best.truncate(top);
        best.sort_by(|&a, &b| lp[b as usize].total_cmp(&lp[a as usize]));
    } else {
        best.clear();
    }
    Ok(TokenLogprob {
        token: piece(token),
        logprob: lp.get(token as usize).copied().unwrap_or(f32::NEG_INFINITY),
        top: best
            .into_iter()
            .map(|t| (piece(t), lp[t as usize]))
            .collect(),
    })
}

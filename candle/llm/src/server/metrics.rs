//! The server's counters and histograms, written in Prometheus' text format at `/metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Upper bounds (seconds) of the latency histograms' buckets.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A histogram of seconds over [`BUCKETS`].
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative), then the count past the last bound; the sum.
    counts: Mutex<([u64; BUCKETS.len() + 1], f64)>,
}

impl Histogram {
    pub fn observe(&self, seconds: f64) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let i = BUCKETS
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(BUCKETS.len());
        c.0[i] += 1;
        c.1 += seconds;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut total = 0;
        for (bound, n) in BUCKETS.iter().zip(c.0.iter()) {
            total += n;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {total}");
        }
        total += c.0[BUCKETS.len()];
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {total}");
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {total}", c.1);
    }
}

/// What `/metrics` reports.
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: AtomicUsize,
    pub requests_done: AtomicUsize,
    pub rejected: AtomicUsize,
    pub failed: AtomicUsize,
    pub cancelled: AtomicUsize,
    pub prompt_tokens: AtomicUsize,
    pub prompt_cached_tokens: AtomicUsize,
    pub generated_tokens: AtomicUsize,
    pub slots_busy: AtomicUsize,
    pub decode_steps: AtomicUsize,
    pub decode_slot_steps: AtomicUsize,
    pub time_to_first_token: Histogram,
    pub inter_token_latency: Histogram,
}

impl Metrics {
    /// The text format, with the queue depth and the slots' count read by the caller.
    pub fn render(&self, queued: usize, slots: usize) -> String {
        let get = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let (counter, gauge) = ("counter", "gauge");
        let lines: [(&str, &str, usize, &str); 13] = [
            ("llm_requests_total", "Requests received.", get(&self.requests), counter),
            ("llm_requests_finished_total", "Requests that finished their generation.", get(&self.requests_done), counter),
            ("llm_requests_rejected_total", "Requests refused (bad input, a full queue).", get(&self.rejected), counter),
            ("llm_requests_failed_total", "Requests a device error ended.", get(&self.failed), counter),
            ("llm_requests_cancelled_total", "Requests whose client left before the end.", get(&self.cancelled), counter),
            ("llm_prompt_tokens_total", "Prompt tokens received.", get(&self.prompt_tokens), counter),
            ("llm_prompt_cached_tokens_total", "Prompt tokens a slot's cache already held.", get(&self.prompt_cached_tokens), counter),
            ("llm_generated_tokens_total", "Tokens generated.", get(&self.generated_tokens), counter),
            ("llm_queue_depth", "Requests waiting for a slot.", queued, gauge),
            ("llm_slots", "Sequences decoded together.", slots, gauge),
            ("llm_slots_busy", "Slots holding a request.", get(&self.slots_busy), gauge),
            ("llm_decode_steps_total", "Decode steps of the batch.", get(&self.decode_steps), counter),
            ("llm_decode_slot_steps_total", "Decoding slots summed over the steps (over llm_decode_steps_total: the batch's occupancy).", get(&self.decode_slot_steps), counter),
        ];
        let mut out = String::new();
        for (name, help, value, kind) in lines {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        self.time_to_first_token.write(
            &mut out,
            "llm_time_to_first_token_seconds",
            "From a request's arrival to its first token.",
        );
        self.inter_token_latency.write(
            &mut out,
            "llm_inter_token_latency_seconds",
            "Between a request's consecutive tokens.",
        );
        out
    }
}

//! Host time by category, for finding where a launch-bound program's host time goes (the
//! driver's launch call, the memory pool, the op crates, the Candle glue above them).
//!
//! Off unless `CANDLE_ROCM_HOST_TIME=1` (read once per process); off, a span is one relaxed
//! load. On, a span costs two clock reads and an update of the calling thread's table. Spans
//! nest: each category's time includes the spans opened inside it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// `1`: host-time spans are recorded ([`take`] reads them).
pub const HOST_TIME_ENV: &str = "CANDLE_ROCM_HOST_TIME";

/// 0: not read yet, 1: off, 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether spans are recorded in this process.
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var(HOST_TIME_ENV).is_ok_and(|v| v == "1");
            STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        s => s == 2,
    }
}

/// One category's totals on the calling thread since the last [`take`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostTime {
    pub category: &'static str,
    pub count: u64,
    pub total: Duration,
}

thread_local! {
    static TABLE: RefCell<Vec<HostTime>> = const { RefCell::new(Vec::new()) };
}

/// Time from [`span`] to its drop, added to its category.
#[must_use = "the span measures until it is dropped"]
#[derive(Debug)]
pub struct Span(Option<(&'static str, Instant)>);

/// Opens a span of `category` (a static name, compared by content).
#[inline]
pub fn span(category: &'static str) -> Span {
    Span(enabled().then(|| (category, Instant::now())))
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some((category, start)) = self.0.take() {
            let elapsed = start.elapsed();
            TABLE.with(|t| {
                let mut t = t.borrow_mut();
                match t.iter_mut().find(|e| e.category == category) {
                    Some(e) => {
                        e.count += 1;
                        e.total += elapsed;
                    }
                    None => t.push(HostTime {
                        category,
                        count: 1,
                        total: elapsed,
                    }),
                }
            });
        }
    }
}

/// The calling thread's totals since the last call, largest first; clears them.
pub fn take() -> Vec<HostTime> {
    let mut v = TABLE.with(|t| std::mem::take(&mut *t.borrow_mut()));
    v.sort_by_key(|e| std::cmp::Reverse(e.total));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_add_up_by_category_when_enabled() {
        STATE.store(2, Ordering::Relaxed);
        let _ = take();
        for _ in 0..3 {
            let _a = span("outer");
            let _b = span("inner");
        }
        {
            let _c = span("once");
            std::thread::sleep(Duration::from_millis(2));
        }
        let t = take();
        assert_eq!(t[0].category, "once");
        assert!(t[0].total >= Duration::from_millis(2));
        let count = |c: &str| t.iter().find(|e| e.category == c).map(|e| e.count);
        assert_eq!(count("outer"), Some(3));
        assert_eq!(count("inner"), Some(3));
        assert!(take().is_empty());
        STATE.store(1, Ordering::Relaxed);
        drop(span("off"));
        assert!(take().is_empty());
    }
}

//! Wall-clock timing through Candle's API, the same for every device: batches of calls
//! between two synchronizations, long enough that the synchronization is noise, and the
//! median over batches.

use std::time::Instant;

use candle_core::{Device, Result, Tensor};

/// Median seconds per call of `f` on `dev`, after a warm-up (which also compiles kernels).
pub fn median_seconds_per_call(
    dev: &Device,
    f: &mut dyn FnMut() -> Result<Tensor>,
    quick: bool,
) -> Result<f64> {
    for _ in 0..3 {
        drop(f()?);
    }
    dev.synchronize()?;
    // one call, timed alone, sizes the batches
    let start = Instant::now();
    drop(f()?);
    dev.synchronize()?;
    let one = start.elapsed().as_secs_f64().max(1e-7);
    let (batch_seconds, batches) = if quick { (1e-3, 3) } else { (5e-3, 9) };
    let per_batch = ((batch_seconds / one).ceil() as usize).clamp(1, 5000);
    let mut samples = Vec::with_capacity(batches);
    for _ in 0..batches {
        let start = Instant::now();
        for _ in 0..per_batch {
            drop(f()?);
        }
        dev.synchronize()?;
        samples.push(start.elapsed().as_secs_f64() / per_batch as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// Calls in a batch of [`median_host_seconds_per_call`]: few enough that the launch queue never
/// fills, so the host is never held back by the device.
const HOST_BATCH: usize = 128;

/// Median seconds the host spends per call of `f` (queueing it, dropping its output), without
/// waiting for the device: batches of `HOST_BATCH` calls timed up to the last call's return,
/// each followed by an untimed synchronization. Where the wall time per call is above this,
/// the loop is bound by the device.
pub fn median_host_seconds_per_call(
    dev: &Device,
    f: &mut dyn FnMut() -> Result<Tensor>,
    quick: bool,
) -> Result<f64> {
    let batches = if quick { 3 } else { 9 };
    let mut samples = Vec::with_capacity(batches);
    for _ in 0..batches {
        dev.synchronize()?;
        let start = Instant::now();
        for _ in 0..HOST_BATCH {
            drop(f()?);
        }
        samples.push(start.elapsed().as_secs_f64() / HOST_BATCH as f64);
        dev.synchronize()?;
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

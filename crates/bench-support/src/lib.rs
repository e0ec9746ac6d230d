//! Helpers shared by the op crates' benchmarks (their `examples/*_bench.rs`): a call timed with
//! device events, and the JSON line of a bandwidth figure that `bench/report.py` reads.

use rocm_device::Device;

/// Mean milliseconds per call of `f` over `iters` calls after 3 warm-ups, timed with device
/// events on the device's stream (for the benchmarks).
pub fn time_ms(
    d: &Device,
    iters: usize,
    mut f: impl FnMut() -> rocm_device::Result<()>,
) -> rocm_device::Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    let (start, end) = (d.create_event()?, d.create_event()?);
    start.record(d.stream())?;
    for _ in 0..iters {
        f()?;
    }
    end.record(d.stream())?;
    end.synchronize()?;
    Ok(f64::from(start.elapsed_ms(&end)?) / iters as f64)
}

/// Prints one bandwidth line of a benchmark as JSON: op, dtype, bytes moved per call, ms, GB/s.
pub fn report_bandwidth(op: &str, dtype: &str, bytes: usize, ms: f64) {
    let gbps = bytes as f64 / (ms * 1e-3) / 1e9;
    println!(
        "{{\"op\": \"{op}\", \"dtype\": \"{dtype}\", \"bytes\": {bytes}, \"ms\": {ms:.4}, \"gbps\": {gbps:.1}}}"
    );
}

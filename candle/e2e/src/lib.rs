//! Candle's rocm feature end to end: the parts of the model demo (`candle-rocm-demo`); the
//! checks that run on any machine are in tests/.

pub mod embeddings;
pub mod gguf_chat;
pub mod kld;
pub mod llama;
/// The static llama, from the LLM runtime crate.
pub use candle_rocm_llm::static_llama;

/// A splitmix64 stream: reproducible draws for seeded weights and random test workloads.
pub use candle_rocm_llm::sampling::SplitMix64;

/// The demo's error type: Candle's, the tokenizer's and I/O errors alike.
pub type DemoResult<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Peak bytes in use on a ROCm device since it was opened (None for other devices).
pub fn peak_memory(device: &candle_core::Device) -> Option<usize> {
    let rocm = device.as_rocm_device().ok()?;
    Some(rocm.inner().memory_stats().peak_in_use_bytes)
}

/// Waits for the device's queued work (a no-op on the CPU).
pub fn sync(device: &candle_core::Device) -> DemoResult<()> {
    device.synchronize()?;
    Ok(())
}

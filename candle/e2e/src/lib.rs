//! Candle's rocm feature end to end: the parts of the model demo (`candle-rocm-demo`); the
//! checks that run on any machine are in tests/.

pub mod embeddings;
pub mod gguf_chat;
pub mod kld;
pub mod llama;
/// The static llama, from the LLM runtime crate.
pub use candle_rocm_llm::static_llama;

/// A splitmix64 stream: reproducible draws for seeded weights and random test workloads.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

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

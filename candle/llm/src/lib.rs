//! The LLM runtime of candle-rocm, on Candle's `rocm` feature.
//!
//! [`StaticLlama`] is candle-transformers' llama with a decode step whose shapes never change:
//! a KV cache preallocated to the model's maximum length, attention over it in one kernel, the
//! rotary embedding and the cache write in one kernel, the residual add folded into the next
//! norm; on `Device::Rocm` the step is captured once into a device graph and replayed at
//! every position ([`Decoder`]). It loads safetensors weights by candle-transformers' names
//! ([`StaticLlama::load`]), a GGUF file by llama.cpp's names with its projections kept
//! quantized ([`StaticLlama::from_gguf`]), or one tensor-parallel shard per rank
//! ([`StaticLlama::load_sharded`]). Its fused kernels are ROCm's: on another device a step
//! returns a typed error naming the op (a CPU path for reference is still to come).

pub mod static_llama;

pub use static_llama::{greedy, DecodeState, Decoder, StaticLlama, StepOutput};

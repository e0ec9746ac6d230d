//! The LLM runtime of candle-rocm, on Candle's `rocm` feature.
//!
//! [`StaticLlama`] is a llama-family decoder with a decode step whose shapes never change: a
//! KV cache preallocated to the model's maximum length, attention over it in one kernel, the
//! rotary embedding and the cache write in one kernel, the residual add folded into the next
//! norm; on `Device::Rocm` the step is captured once into a device graph and replayed at
//! every position ([`Decoder`]). It loads safetensors weights by candle-transformers' llama
//! names ([`StaticLlama::load`]), a GGUF file of any [`Architecture`] by llama.cpp's names with
//! its projections kept quantized ([`StaticLlama::from_gguf`]), or one tensor-parallel shard
//! per rank ([`StaticLlama::load_sharded`]). The fused kernels are ROCm's; on any other
//! device (the CPU, for reference) every step runs Candle's ops.
//!
//! [`generate`] runs the loop: a prompt, then tokens until a stop token, the caller, the
//! budget or the cache's end, each handed over as it comes.
//!
//! [`Sampler`] chooses each next token on the device (temperature, top-k, min-p, top-p,
//! repeat penalty, a seed) without reading the logits back.
//!
//! [`GgufText`] is a file's text side: its tokenizer, chat template (rendered by a Jinja
//! engine), stop tokens, and a [`TextStream`] for streamed output.
//!
//! [`server`] puts a model behind OpenAI's HTTP API (`candle-rocm-llm serve`), several
//! requests decoded together by continuous batching.
//!
//! [`kld`] measures how far one run's next-token distributions are from another's along the
//! same text (llama.cpp's `--kl-divergence`).

pub mod architecture;
pub mod batch;
pub mod chat;
pub mod generate;
pub mod gguf_reader;
pub mod kld;
pub mod rope;
pub mod sampling;
pub mod server;
pub mod static_llama;

pub use architecture::{Architecture, GgufHyperParams, UnsupportedArchitecture};
pub use batch::{BatchDecoder, BatchOutput, BatchState};
pub use chat::{ChatTemplate, GgufText, Message, StopStrings, TextStream};
pub use generate::{
    generate, generate_batch, ChatSession, GenerateOptions, Generation, StopReason,
};
pub use gguf_reader::TensorReader;
pub use rope::RopeScaling;
pub use sampling::{Sampler, SamplingParams};
pub use static_llama::{greedy, DecodeState, Decoder, StaticLlama, StepOutput};

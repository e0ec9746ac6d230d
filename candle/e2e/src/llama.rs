//! A llama-architecture model (candle-transformers' llama) with seeded random weights: the
//! same weights on every device, drawn on the host from a generator seeded by each tensor's
//! name, so a CPU and a GPU run can be compared token for token.

use std::collections::HashMap;
use std::sync::Mutex;

use candle_core::{DType, Device, Result, Shape, Tensor, D};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use candle_transformers::models::llama::{Cache, Config, Llama};

use crate::SplitMix64;

/// A small model for the CPU comparison (about 6M parameters).
pub fn small_config() -> Config {
    config(256, 688, 2048, 4, 8, 4)
}

/// A larger one for throughput (about 110M parameters).
pub fn throughput_config() -> Config {
    config(1024, 2816, 8192, 8, 16, 8)
}

/// A llama config of these sizes (1 K positions, untied embeddings, no rope scaling).
pub fn config(
    hidden: usize,
    intermediate: usize,
    vocab: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
) -> Config {
    Config {
        hidden_size: hidden,
        intermediate_size: intermediate,
        vocab_size: vocab,
        num_hidden_layers: layers,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        use_flash_attn: false,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: 1024,
        tie_word_embeddings: false,
    }
}

/// Weights on request, made on the host: a constant where the layer asks for one (norm
/// scales), else `draw(name, n)`. A recording one also keeps each tensor (on the host, in the
/// dtype asked for) under its name. The loader borrows it (`Box::new(&weights)`), so the
/// recording can be taken back after the load.
pub struct DrawnWeights<D> {
    draw: D,
    recorded: Option<Mutex<HashMap<String, Tensor>>>,
}

impl<D: Fn(&str, usize) -> Vec<f32> + Send + Sync> DrawnWeights<D> {
    pub fn new(draw: D) -> Self {
        Self {
            draw,
            recorded: None,
        }
    }

    pub fn recording(draw: D) -> Self {
        Self {
            draw,
            recorded: Some(Mutex::new(HashMap::new())),
        }
    }

    /// The tensors handed out so far (none unless recording).
    pub fn into_recorded(self) -> Result<HashMap<String, Tensor>> {
        match self.recorded {
            Some(m) => m.into_inner().map_err(|_| poisoned()),
            None => Ok(HashMap::new()),
        }
    }
}

fn poisoned() -> candle_core::Error {
    candle_core::Error::Msg("weight recorder poisoned".into())
}

impl<D: Fn(&str, usize) -> Vec<f32> + Send + Sync> SimpleBackend for &DrawnWeights<D> {
    fn get(&self, s: Shape, name: &str, h: Init, dtype: DType, dev: &Device) -> Result<Tensor> {
        let n = s.elem_count();
        let values = match h {
            Init::Const(v) => vec![v as f32; n],
            _ => (self.draw)(name, n),
        };
        let t = Tensor::from_vec(values, s, &Device::Cpu)?.to_dtype(dtype)?;
        if let Some(recorded) = &self.recorded {
            recorded
                .lock()
                .map_err(|_| poisoned())?
                .insert(name.to_string(), t.clone());
        }
        t.to_device(dev)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> Result<Tensor> {
        Err(candle_core::Error::CannotFindTensor {
            path: name.to_string(),
        }
        .bt())
    }

    fn contains_tensor(&self, _: &str) -> bool {
        true
    }
}

const CHUNK: usize = 1 << 20;

/// `n` values uniform with standard deviation `std`, from streams seeded by `seed` and each
/// 1 M-value chunk's index, drawn on all cores (the large models' seeded weights).
pub fn uniform_values(seed: u64, n: usize, std: f32) -> Vec<f32> {
    let half_width = std * 3f32.sqrt();
    let mut values = vec![0f32; n];
    let threads = std::thread::available_parallelism().map_or(4, |t| t.get());
    let mut chunks: Vec<(usize, &mut [f32])> = values.chunks_mut(CHUNK).enumerate().collect();
    let per_thread = chunks.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        while !chunks.is_empty() {
            let take = per_thread.min(chunks.len());
            let mine: Vec<(usize, &mut [f32])> = chunks.drain(..take).collect();
            scope.spawn(move || {
                for (index, chunk) in mine {
                    let mut stream = SplitMix64(seed ^ (index as u64).wrapping_mul(0x9e37_79b9));
                    for v in chunk.iter_mut() {
                        let unit = (stream.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
                        *v = (2.0 * unit - 1.0) * half_width;
                    }
                }
            });
        }
    });
    values
}

/// FNV-1a of a tensor name: the seed offset of its weights.
pub fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `n` values of N(0, std^2) from a stream seeded by `seed` (the test models' weights).
pub fn normal_values(seed: u64, n: usize, std: f64) -> Vec<f32> {
    let mut stream = SplitMix64(seed);
    // (0, 1]: never 0, so the logarithm below is finite
    let mut next_unit = move || ((stream.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    (0..n)
        .map(|_| {
            let (u1, u2) = (next_unit(), next_unit());
            ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * std) as f32
        })
        .collect()
}

pub struct Generator {
    model: Llama,
    cache: Cache,
    device: Device,
}

/// What a greedy run produced.
pub struct Greedy {
    /// The generated tokens (the prompt excluded).
    pub tokens: Vec<u32>,
    /// The smallest gap between the best and second-best logit over the steps.
    pub min_margin: f32,
    /// The first step's logits (after the whole prompt).
    pub first_logits: Vec<f32>,
}

impl Generator {
    pub fn new(config: &Config, seed: u64, dtype: DType, device: &Device) -> Result<Self> {
        // N(0, 0.15^2) per tensor, from a stream seeded by `seed` and the tensor's name: wide
        // enough that greedy picks are clear (top-2 margins well above f32 rounding)
        let weights = DrawnWeights::new(|name, n| normal_values(seed ^ fnv1a(name), n, 0.15));
        let vb = VarBuilder::from_backend(Box::new(&weights), dtype, device.clone());
        Ok(Self {
            model: Llama::load(vb, config)?,
            cache: Cache::new(true, dtype, config, device)?,
            device: device.clone(),
        })
    }

    /// Greedy decoding of `steps` tokens after `prompt` (the prompt is one forward pass);
    /// `on_step` sees each step's index.
    pub fn greedy(
        &mut self,
        prompt: &[u32],
        steps: usize,
        mut on_step: impl FnMut(usize),
    ) -> Result<Greedy> {
        let mut tokens = Vec::with_capacity(steps);
        let mut min_margin = f32::INFINITY;
        let mut first_logits = Vec::new();
        let mut position = 0;
        let mut input = prompt.to_vec();
        for step in 0..steps {
            let x = Tensor::new(input.as_slice(), &self.device)?.unsqueeze(0)?;
            let logits = self
                .model
                .forward(&x, position, &mut self.cache)?
                .squeeze(0)?;
            position += input.len();
            let next = logits.argmax(D::Minus1)?.to_scalar::<u32>()?;
            let top2 = logits
                .sort_last_dim(false)?
                .0
                .narrow(0, 0, 2)?
                .to_vec1::<f32>()?;
            min_margin = min_margin.min(top2[0] - top2[1]);
            if step == 0 {
                first_logits = logits.to_vec1::<f32>()?;
            }
            tokens.push(next);
            input = vec![next];
            on_step(step);
        }
        Ok(Greedy {
            tokens,
            min_margin,
            first_logits,
        })
    }
}

/// A prompt of `len` tokens below `vocab`, the same every run.
pub fn prompt(len: usize, vocab: usize) -> Vec<u32> {
    (0..len).map(|i| ((i * 7919 + 13) % vocab) as u32).collect()
}

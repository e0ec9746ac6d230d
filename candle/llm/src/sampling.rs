//! Choosing the next token from a logits row on the device: repeat penalty, temperature,
//! top-k, min-p and top-p, then a draw, in Candle's ops, so the row is never read back (the
//! chosen token is a u32 `[1]` tensor on the same device; the draw's uniform number and the
//! recent tokens travel the other way, a few bytes a step). Seeded: the same parameters, seed
//! and logits give the same tokens.
//!
//! The rules are llama.cpp's samplers in its default order: the repeat penalty divides a
//! recent token's positive logit by the penalty and multiplies a negative one; the candidates
//! are the `top_k` largest logits, divided by the temperature and normalised; min-p drops those
//! below `min_p` times the most likely one's probability; top-p keeps the most likely ones until
//! their mass reaches `top_p` (the first always); the draw picks by the cumulative mass.

use std::collections::{HashMap, VecDeque};

use candle_core::{DType, Device, Result, Tensor};

/// How the next token is chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Divides the logits; 0 picks the most likely token (greedy); below 0 is an error.
    pub temperature: f64,
    /// Candidates: the `top_k` most likely tokens (0: every token).
    pub top_k: usize,
    /// Keep the most likely candidates until their probability reaches this (1: all).
    pub top_p: f64,
    /// Drop candidates below this fraction of the most likely one's probability (0: none).
    pub min_p: f64,
    /// Penalty on the logits of the last `repeat_last_n` tokens (1: none).
    pub repeat_penalty: f32,
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplingParams {
    /// llama.cpp's defaults.
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0x5eed,
        }
    }
}

impl SamplingParams {
    /// The most likely token every step.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// An error naming the parameter out of its range.
    pub fn check(&self) -> Result<()> {
        let bad = |what: &str| candle_core::bail!("sampling: {what} out of range in {self:?}");
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad("temperature [0, inf)");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p (0, 1]");
        }
        if !(0.0..1.0).contains(&self.min_p) {
            return bad("min_p [0, 1)");
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat_penalty (> 0)");
        }
        Ok(())
    }
}

/// A splitmix64 stream: the sampler's draws, and reproducible draws for seeded weights and
/// test workloads.
#[derive(Debug, Clone)]
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

    /// Uniform in [0, 1), 24 bits (every value an f32 holds exactly).
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A sequence's sampler: its parameters, its draws and its recent tokens.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    draws: SplitMix64,
    recent: VecDeque<u32>,
    /// The prefix sums' triangles, built at the first draw and kept.
    triangles: Triangles,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.check()?;
        Ok(Sampler {
            draws: SplitMix64(params.seed),
            params,
            recent: VecDeque::new(),
            triangles: Triangles::default(),
        })
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Whether its token is always the step's greedy one (no temperature, no repeat
    /// penalty): a decode step's own argmax serves, no draw runs.
    pub fn is_greedy(&self) -> bool {
        self.params.temperature <= 0.0 && self.params.repeat_penalty == 1.0
    }

    /// Counts `token` among the recent ones (the repeat penalty's window): the prompt's tokens
    /// and each chosen one, as the caller learns them.
    pub fn accept(&mut self, token: u32) {
        if self.params.repeat_last_n == 0 {
            return;
        }
        if self.recent.len() == self.params.repeat_last_n {
            self.recent.pop_front();
        }
        self.recent.push_back(token);
    }

    /// The next token (u32 `[1]`, on the logits' device) from `logits` (`[vocab]`, any float
    /// dtype).
    pub fn sample(&mut self, logits: &Tensor) -> Result<Tensor> {
        let logits = self.penalized(&logits.flatten_all()?.to_dtype(DType::F32)?)?;
        if self.params.temperature <= 0.0 {
            return logits.argmax(0)?.reshape(1);
        }
        let u = self.draws.unit_f32();
        draw(&logits, &self.params, u, &mut self.triangles)
    }

    /// The repeat penalty applied to the recent tokens' logits.
    fn penalized(&self, logits: &Tensor) -> Result<Tensor> {
        let p = self.params.repeat_penalty;
        if p == 1.0 || self.recent.is_empty() {
            return Ok(logits.clone());
        }
        let mut ids: Vec<u32> = self.recent.iter().copied().collect();
        ids.sort_unstable();
        ids.dedup();
        let vocab = logits.dim(0)?;
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            candle_core::bail!("sampling: recent token {bad} outside a vocabulary of {vocab}");
        }
        let ids = Tensor::new(ids.as_slice(), logits.device())?;
        let v = logits.gather(&ids, 0)?;
        let penalized = v
            .ge(0f32)?
            .where_cond(&(&v / f64::from(p))?, &(&v * f64::from(p))?)?;
        logits.scatter(&ids, &penalized, 0)
    }
}

/// The draw of `u` in [0, 1) from `logits` (f32 `[vocab]`, penalized) under `params`'
/// temperature (> 0), top-k, min-p and top-p: the first candidate, most likely first, whose
/// cumulative kept probability exceeds `u` times the kept total.
pub fn sample_with(logits: &Tensor, params: &SamplingParams, u: f32) -> Result<Tensor> {
    draw(logits, params, u, &mut Triangles::default())
}

/// [`sample_with`], its prefix sums' triangles kept in `triangles`.
fn draw(
    logits: &Tensor,
    params: &SamplingParams,
    u: f32,
    triangles: &mut Triangles,
) -> Result<Tensor> {
    let vocab = logits.dim(0)?;
    let k = match params.top_k {
        0 => vocab,
        k => k.min(vocab),
    };
    let order = logits
        .arg_sort_last_dim(false)?
        .narrow(0, 0, k)?
        .contiguous()?;
    let scaled = (logits.gather(&order, 0)? / params.temperature)?;
    let mut probs = candle_nn::ops::softmax_last_dim(&scaled.unsqueeze(0)?)?.squeeze(0)?;
    let zeros = probs.zeros_like()?;
    if params.min_p > 0.0 {
        // the first candidate is the most likely
        let floor = (probs.narrow(0, 0, 1)? * params.min_p)?.broadcast_as(k)?;
        probs = probs.ge(&floor)?.where_cond(&probs, &zeros)?;
    }
    let mut cumulative = triangles.prefix_sum(&probs)?;
    if params.top_p < 1.0 {
        // kept while the mass before a candidate is below top_p (the first always)
        let before = (&cumulative - &probs)?;
        probs = before.lt(params.top_p)?.where_cond(&probs, &zeros)?;
        cumulative = triangles.prefix_sum(&probs)?;
    }
    let total = cumulative.narrow(0, k - 1, 1)?;
    let threshold = (total * f64::from(u))?.broadcast_as(k)?;
    // candidates whose cumulative mass is at most the threshold come before the draw
    let before = cumulative
        .le(&threshold)?
        .to_dtype(DType::U32)?
        .sum_keepdim(0)?;
    let index = before.minimum(&Tensor::new(&[(k - 1) as u32], logits.device())?)?;
    order.gather(&index, 0)
}

/// Inclusive prefix sums of a 1-D f32 tensor, as matrix products with a triangle of ones:
/// within blocks of [`SCAN_BLOCK`], then the blocks' totals scanned the same way and added.
pub fn prefix_sum(x: &Tensor) -> Result<Tensor> {
    Triangles::default().prefix_sum(x)
}

/// The block of [`prefix_sum`]'s products (a 256 x 256 triangle: 256 KiB).
pub const SCAN_BLOCK: usize = 256;

/// Triangles of ones (`[n, n]`, ones on and above the diagonal: a row vector times one is its
/// inclusive scan) by size, each built once on the device that first asks for it.
#[derive(Debug, Clone, Default)]
struct Triangles(HashMap<usize, Tensor>);

impl Triangles {
    fn upper_ones(&mut self, n: usize, device: &Device) -> Result<Tensor> {
        if let Some(t) = self.0.get(&n).filter(|t| t.device().same_device(device)) {
            return Ok(t.clone());
        }
        let i = Tensor::arange(0u32, n as u32, device)?;
        let rows = i.reshape((n, 1))?.broadcast_as((n, n))?;
        let cols = i.reshape((1, n))?.broadcast_as((n, n))?;
        let t = rows.le(&cols)?.to_dtype(DType::F32)?;
        self.0.insert(n, t.clone());
        Ok(t)
    }

    /// [`prefix_sum`] with the triangles kept here.
    fn prefix_sum(&mut self, x: &Tensor) -> Result<Tensor> {
        let n = x.dim(0)?;
        let device = x.device();
        if n <= SCAN_BLOCK {
            return x
                .unsqueeze(0)?
                .matmul(&self.upper_ones(n, device)?)?
                .squeeze(0);
        }
        let blocks = n.div_ceil(SCAN_BLOCK);
        let padded = match blocks * SCAN_BLOCK - n {
            0 => x.clone(),
            pad => Tensor::cat(&[x, &Tensor::zeros(pad, DType::F32, device)?], 0)?,
        };
        let within = padded
            .reshape((blocks, SCAN_BLOCK))?
            .matmul(&self.upper_ones(SCAN_BLOCK, device)?)?;
        let totals = within
            .narrow(1, SCAN_BLOCK - 1, 1)?
            .squeeze(1)?
            .contiguous()?;
        // each block's offset: the totals of the blocks before it
        let offsets = (self.prefix_sum(&totals)? - &totals)?;
        within
            .broadcast_add(&offsets.unsqueeze(1)?)?
            .flatten_all()?
            .narrow(0, 0, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule on the host, in f64: the token `sample_with` must choose.
    fn host_choice(logits: &[f32], p: &SamplingParams, u: f32) -> u32 {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let k = if p.top_k == 0 {
            logits.len()
        } else {
            p.top_k.min(logits.len())
        };
        order.truncate(k);
        let max = f64::from(logits[order[0]]) / p.temperature;
        let e: Vec<f64> = order
            .iter()
            .map(|&i| (f64::from(logits[i]) / p.temperature - max).exp())
            .collect();
        let sum: f64 = e.iter().sum();
        let mut probs: Vec<f64> = e.iter().map(|v| v / sum).collect();
        if p.min_p > 0.0 {
            let floor = probs[0] * p.min_p;
            probs.iter_mut().for_each(|q| {
                if *q < floor {
                    *q = 0.0
                }
            });
        }
        if p.top_p < 1.0 {
            let mut before = 0.0;
            for q in probs.iter_mut() {
                let here = *q;
                if before >= p.top_p {
                    *q = 0.0;
                }
                before += here;
            }
        }
        let total: f64 = probs.iter().sum();
        let threshold = total * f64::from(u);
        let mut cum = 0.0;
        for (i, q) in probs.iter().enumerate() {
            cum += q;
            if cum > threshold {
                return order[i] as u32;
            }
        }
        order[k - 1] as u32
    }

    fn logits(seed: u64, n: usize) -> Vec<f32> {
        let mut s = Sampler::new(SamplingParams {
            seed,
            ..SamplingParams::default()
        })
        .unwrap();
        // distinct values spread over about 8 nats
        (0..n)
            .map(|i| s.draws.unit_f32() * 8.0 + i as f32 * 1e-4)
            .collect()
    }

    #[test]
    fn prefix_sums_match_the_host_across_blocks() {
        for n in [1, 7, 256, 257, 1000, 70_000] {
            let x: Vec<f32> = (0..n).map(|i| ((i % 13) as f32) * 0.25).collect();
            let got = prefix_sum(&Tensor::new(x.as_slice(), &Device::Cpu).unwrap())
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let mut acc = 0f64;
            for (i, (g, v)) in got.iter().zip(&x).enumerate() {
                acc += f64::from(*v);
                assert!(
                    (f64::from(*g) - acc).abs() <= 1e-6 * acc.max(1.0),
                    "n {n} at {i}: {g} vs {acc}"
                );
            }
        }
    }

    #[test]
    fn draws_follow_the_rule_on_the_host() {
        let cases = [
            SamplingParams::default(),
            SamplingParams {
                top_k: 0,
                top_p: 0.5,
                min_p: 0.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                top_k: 5,
                top_p: 1.0,
                min_p: 0.2,
                temperature: 1.7,
                ..SamplingParams::default()
            },
            SamplingParams {
                top_k: 1000,
                top_p: 0.9,
                min_p: 0.01,
                temperature: 0.3,
                ..SamplingParams::default()
            },
        ];
        let row = logits(7, 600);
        let t = Tensor::new(row.as_slice(), &Device::Cpu).unwrap();
        for p in &cases {
            for j in 0..50 {
                // away from the cumulative boundaries' rounding: draws on a grid's midpoints
                let u = (j as f32 + 0.5) / 50.0;
                let got = sample_with(&t, p, u).unwrap().to_vec1::<u32>().unwrap()[0];
                assert_eq!(got, host_choice(&row, p, u), "{p:?} u {u}");
            }
        }
    }

    #[test]
    fn seeded_samplers_repeat_and_greedy_is_argmax() {
        let row = logits(3, 300);
        let t = Tensor::new(row.as_slice(), &Device::Cpu).unwrap();
        let draws = |seed| {
            let mut s = Sampler::new(SamplingParams {
                seed,
                ..SamplingParams::default()
            })
            .unwrap();
            (0..20)
                .map(|_| s.sample(&t).unwrap().to_vec1::<u32>().unwrap()[0])
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(1), draws(1));
        assert_ne!(draws(1), draws(2));
        let mut greedy = Sampler::new(SamplingParams::greedy()).unwrap();
        let best = crate::kld::argmax(&row) as u32;
        assert_eq!(greedy.sample(&t).unwrap().to_vec1::<u32>().unwrap(), [best]);
        // a penalty strong enough moves greedy off a token seen recently
        let mut penalized = Sampler::new(SamplingParams {
            repeat_penalty: 100.0,
            ..SamplingParams::greedy()
        })
        .unwrap();
        penalized.accept(best);
        let next = penalized.sample(&t).unwrap().to_vec1::<u32>().unwrap()[0];
        assert_ne!(next, best);
        let mut sorted = row.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        assert_eq!(row[next as usize], sorted[1]);
    }

    #[test]
    fn frequencies_follow_the_temperature_softmax() {
        // three tokens, probabilities 0.5, 0.3, 0.2 at temperature 1
        let row: Vec<f32> = [0.5f32, 0.3, 0.2].iter().map(|p| p.ln()).collect();
        let t = Tensor::new(row.as_slice(), &Device::Cpu).unwrap();
        let mut s = Sampler::new(SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplingParams::default()
        })
        .unwrap();
        let n = 4000;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            counts[s.sample(&t).unwrap().to_vec1::<u32>().unwrap()[0] as usize] += 1;
        }
        for (c, p) in counts.iter().zip([0.5, 0.3, 0.2]) {
            // four standard deviations of a binomial count
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            assert!((*c as f64 - n as f64 * p).abs() < 4.0 * sd, "{counts:?}");
        }
    }

    #[test]
    fn parameters_out_of_range_are_errors() {
        for p in [
            SamplingParams {
                top_p: 0.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                min_p: 1.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                repeat_penalty: 0.0,
                ..SamplingParams::default()
            },
            SamplingParams {
                temperature: f64::NAN,
                ..SamplingParams::default()
            },
            SamplingParams {
                temperature: -0.5,
                ..SamplingParams::default()
            },
            SamplingParams {
                top_p: 1.5,
                ..SamplingParams::default()
            },
        ] {
            assert!(Sampler::new(p).is_err());
        }
        let mut s = Sampler::new(SamplingParams {
            repeat_penalty: 1.3,
            ..SamplingParams::greedy()
        })
        .unwrap();
        s.accept(10);
        let short = Tensor::new(&[0f32, 1.0], &Device::Cpu).unwrap();
        assert!(s.sample(&short).is_err());
    }
}

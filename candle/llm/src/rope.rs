//! Rotary embedding frequencies: plain theta, and the scalings model files carry (a linear
//! factor, Llama 3.x's per-frequency factors as GGUF's `rope_freqs` tensor or as a
//! `rope_scaling` config), reduced to one list of inverse frequencies the tables are built from.

use candle_core::{DType, Device, Result, Tensor};
use candle_transformers::models::llama::{Llama3RopeConfig, Llama3RopeType};

/// How a model scales its rotary frequencies.
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// theta_i = base^(-2i/d).
    None,
    /// Positions divided by a factor (`rope.scaling.type = linear`).
    Linear(f32),
    /// theta_i divided by factor i (llama.cpp's `rope_freqs`; one per rotated pair).
    Factors(Vec<f32>),
}

impl RopeScaling {
    /// Llama 3.x's scaling of a `rope_scaling` config, as per-frequency factors: wavelengths
    /// below `original / high_freq_factor` kept, above `original / low_freq_factor` divided by
    /// `factor`, and between them a blend (the factors llama.cpp's converter writes).
    pub fn llama3(config: &Llama3RopeConfig, head_dim: usize, base: f32) -> Self {
        if matches!(config.rope_type, Llama3RopeType::Default) {
            return RopeScaling::None;
        }
        let original = config.original_max_position_embeddings as f32;
        let (low, high) = (config.low_freq_factor, config.high_freq_factor);
        let factors = plain_inverse_frequencies(head_dim, base)
            .into_iter()
            .map(|freq| {
                let wavelen = 2.0 * std::f32::consts::PI / freq;
                if wavelen < original / high {
                    1.0
                } else if wavelen > original / low {
                    config.factor
                } else {
                    let smooth = (original / wavelen - low) / (high - low);
                    let scaled = (1.0 - smooth) * freq / config.factor + smooth * freq;
                    freq / scaled
                }
            })
            .collect();
        RopeScaling::Factors(factors)
    }
}

/// base^(-2i/d) for i in 0..d/2, in f32 as candle-transformers' llama computes it.
fn plain_inverse_frequencies(head_dim: usize, base: f32) -> Vec<f32> {
    (0..head_dim)
        .step_by(2)
        .map(|i| 1f32 / base.powf(i as f32 / head_dim as f32))
        .collect()
}

/// The inverse frequencies of `head_dim / 2` rotated pairs under `scaling`; an error where
/// per-frequency factors do not match the pairs or are not positive.
pub fn inverse_frequencies(head_dim: usize, base: f32, scaling: &RopeScaling) -> Result<Vec<f32>> {
    let plain = plain_inverse_frequencies(head_dim, base);
    match scaling {
        RopeScaling::None => Ok(plain),
        RopeScaling::Linear(factor) if *factor > 0.0 => {
            Ok(plain.into_iter().map(|f| f / factor).collect())
        }
        RopeScaling::Linear(factor) => {
            candle_core::bail!("rotary embedding: a linear scaling factor of {factor}")
        }
        RopeScaling::Factors(factors) => {
            if factors.len() != plain.len() || factors.iter().any(|f| !f.is_finite() || *f <= 0.0) {
                candle_core::bail!(
                    "rotary embedding: {} frequency factors for {} pairs (head dim {head_dim}), each > 0",
                    factors.len(),
                    plain.len()
                );
            }
            Ok(plain.iter().zip(factors).map(|(f, s)| f / s).collect())
        }
    }
}

/// The rotary tables for `max_len` positions, f32 `[max_len, inv_freq.len()]` each: angles
/// position * inv_freq_i.
pub fn rotary_tables(
    inv_freq: &[f32],
    max_len: usize,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let inv_freq = Tensor::from_vec(inv_freq.to_vec(), (1, inv_freq.len()), device)?;
    let angles = Tensor::arange(0u32, max_len as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((max_len, 1))?
        .matmul(&inv_freq)?;
    Ok((angles.cos()?, angles.sin()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama3(rope_type: Llama3RopeType) -> Llama3RopeConfig {
        Llama3RopeConfig {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192,
            rope_type,
        }
    }

    #[test]
    fn llama3_factors_keep_high_and_divide_low_frequencies() {
        let RopeScaling::Factors(f) =
            RopeScaling::llama3(&llama3(Llama3RopeType::Llama3), 128, 500_000.)
        else {
            panic!("no factors")
        };
        assert_eq!(f.len(), 64);
        // the fastest pair turns once in 2*pi positions: far below 8192/4, kept
        assert_eq!(f[0], 1.0);
        // the slowest is past 8192/1 positions a turn: divided by the factor
        assert_eq!(f[63], 8.0);
        // and in between they rise monotonically from 1 to 8
        assert!(f.windows(2).all(|w| w[0] <= w[1]), "{f:?}");
        assert!(f.iter().any(|&x| x > 1.0 && x < 8.0), "{f:?}");
        assert_eq!(
            RopeScaling::llama3(&llama3(Llama3RopeType::Default), 128, 500_000.),
            RopeScaling::None
        );
    }

    #[test]
    fn scalings_divide_the_plain_frequencies() {
        let plain = inverse_frequencies(8, 10_000., &RopeScaling::None).unwrap();
        assert_eq!(plain[0], 1.0);
        assert!((plain[1] - 0.1).abs() < 1e-6, "{plain:?}");
        let linear = inverse_frequencies(8, 10_000., &RopeScaling::Linear(4.0)).unwrap();
        assert!(plain.iter().zip(&linear).all(|(p, l)| *l == p / 4.0));
        let factors = RopeScaling::Factors(vec![1.0, 2.0, 4.0, 8.0]);
        let scaled = inverse_frequencies(8, 10_000., &factors).unwrap();
        assert_eq!(scaled[3], plain[3] / 8.0);
        for bad in [
            RopeScaling::Factors(vec![1.0; 3]),
            RopeScaling::Factors(vec![1.0, 0.0, 1.0, 1.0]),
            RopeScaling::Linear(0.0),
        ] {
            assert!(inverse_frequencies(8, 10_000., &bad).is_err(), "{bad:?}");
        }
    }
}

//! Helpers shared by the GPU test targets.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device as Cpu, Tensor};
use rand::{Rng, SeedableRng};
use rocm_quantized::GgmlType;

fn ggml(ty: GgmlType) -> GgmlDType {
    match ty {
        GgmlType::F32 => GgmlDType::F32,
        GgmlType::F16 => GgmlDType::F16,
        GgmlType::BF16 => GgmlDType::BF16,
        GgmlType::Q4_0 => GgmlDType::Q4_0,
        GgmlType::Q4_1 => GgmlDType::Q4_1,
        GgmlType::Q5_0 => GgmlDType::Q5_0,
        GgmlType::Q5_1 => GgmlDType::Q5_1,
        GgmlType::Q8_0 => GgmlDType::Q8_0,
        GgmlType::Q8_1 => GgmlDType::Q8_1,
        GgmlType::Q2K => GgmlDType::Q2K,
        GgmlType::Q3K => GgmlDType::Q3K,
        GgmlType::Q4K => GgmlDType::Q4K,
        GgmlType::Q5K => GgmlDType::Q5K,
        GgmlType::Q6K => GgmlDType::Q6K,
        GgmlType::Q8K => GgmlDType::Q8K,
    }
}

/// A (rows, k) CPU tensor of random values spread over a few magnitudes, quantized to `ty`.
pub fn quantized(ty: GgmlType, rows: usize, k: usize, seed: u64) -> QTensor {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let v: Vec<f32> = (0..rows * k)
        .map(|i| {
            let scale = [0.01f32, 1.0, 30.0][(i / 97) % 3];
            (rng.random::<f32>() * 2.0 - 1.0) * scale
        })
        .collect();
    let t = Tensor::from_vec(v, (rows, k), &Cpu::Cpu).unwrap();
    QTensor::quantize(&t, ggml(ty)).unwrap()
}

//! rocm-quantized: GGUF (ggml) blocks on the device, for every `GgmlDType` of Candle 0.11.1.
//!
//! On the device the blocks are held in a layout of their own ([`layout`]: every block's packed
//! values first, 16-byte aligned, then the blocks' scales and other fields), made from ggml's
//! bytes on the way in ([`upload`]) and turned back into them bit for bit on the way out
//! ([`download`]); nothing else comes back to the host.
//! - [`dequantize`]: the values as f32, f16 or bf16, bit-exact with Candle's CPU dequantize
//!   (then its cast, for f16 and bf16).
//! - [`embedding`]: rows of a (rows, k) table picked by u32 ids; only those rows are
//!   dequantized.
//! - [`matmul`]: `x . w^T` for activations x (.., k) of f32, f16 or bf16, as `QMatMul` does:
//!   for few rows (decode, short prompts) x is quantized to q8 as Candle's CPU quantizes it
//!   and a kernel reads the blocks in place with integer dot products (dp4a / dot4); for more
//!   rows the weights are dequantized to 16-bit floats a slice of rows at a time and gemms on
//!   the matrix units run (rocm-blas).
//!   `MatmulPath::Mmq` runs the product on the int8 matrix units instead (q8 activations, the
//!   weights' quants through shared memory, the CPU's integer sums).
//! - [`moe_matvec`]: Candle's `indexed_moe_forward` (one expert matrix per token and slot; a
//!   prompt's pairs grouped by expert, on the int8 matrix units from 8 pairs an expert).

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod dequantize;
pub mod layout;
mod matmul;
mod moe;
mod q8;
mod types;

pub use dequantize::*;
pub use layout::{device_layout_range, download, to_device_layout, to_ggml_layout, upload};
pub use matmul::*;
pub use moe::*;
pub use q8::*;
use rocm_blas::{Blas, MatmulShape, OutputLayout};
pub use rocm_device::{Buffer, DType, Device, Error, Layout, Operand, Result};
use rocm_device::{Contiguous, LaunchConfig};
use rocm_elementwise::OperandCopy;
use rocm_kernels::{self as kernels, quantized, Entry, Family, KernelParams};
pub use types::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_its_kernels_in_the_table() {
        for ty in GgmlType::ALL {
            assert!(kernels::GGML_TYPES.contains(&ty.key()), "{ty}");
            let families: Vec<(&str, Option<&'static str>)> = [DType::F32, DType::F16, DType::BF16]
                .into_iter()
                .flat_map(|out| {
                    let key = [out_key("test", out).unwrap()];
                    let mut ops = vec![
                        (
                            "dequantize",
                            quantized::DEQUANTIZE.entry(&key).map(|e| e.op),
                        ),
                        ("embedding", quantized::EMBEDDING.entry(&key).map(|e| e.op)),
                    ];
                    if ty.is_block() {
                        ops.extend([
                            ("matvec_q8", quantized::MATVEC_Q8.entry(&key).map(|e| e.op)),
                            (
                                "matvec1_q8",
                                quantized::MATVEC1_Q8.entry(&key).map(|e| e.op),
                            ),
                            (
                                "matvec_q8f",
                                quantized::MATVEC_Q8F.entry(&key).map(|e| e.op),
                            ),
                            (
                                "matvec1_q8f",
                                quantized::MATVEC1_Q8F.entry(&key).map(|e| e.op),
                            ),
                            ("moe_q8", quantized::MOE_Q8.entry(&key).map(|e| e.op)),
                            (
                                "moe_grouped_q8",
                                quantized::MOE_GROUPED_Q8.entry(&key).map(|e| e.op),
                            ),
                        ]);
                    } else {
                        ops.push(("matvec", quantized::MATVEC.entry(&key).map(|e| e.op)));
                    }
                    ops
                })
                .collect();
            for (family, op) in families {
                let op = op.unwrap_or_else(|| panic!("no {family} entry"));
                let entry = kernels::QUANTIZED.entry_point(op, ty.key());
                assert!(entry.is_some(), "{op} {ty}");
            }
            // activations are quantized by the kernels keyed by their float dtype
            let q8 = kernels::QUANTIZED.entry_point("quantize_q8", ty.key());
            assert_eq!(q8.is_some(), !ty.is_block(), "{ty}");
        }
        assert_eq!(GgmlType::ALL.len(), kernels::GGML_TYPES.len());
        assert!(family_entry("dequantize", quantized::DEQUANTIZE, DType::U8).is_err());
    }

    #[test]
    fn block_sizes_are_ggmls() {
        // bytes per value, as the GGUF files store them
        assert_eq!(
            GgmlType::Q4_0.type_size() * 8 / GgmlType::Q4_0.block_size(),
            4
        );
        assert_eq!(GgmlType::Q4K.type_size(), 2 + 2 + 12 + 128);
        assert_eq!(GgmlType::Q6K.type_size(), 128 + 64 + 16 + 2);
        assert_eq!(GgmlType::Q8K.type_size(), 4 + 256 + 32);
        assert!(GgmlType::ALL.iter().all(|t| t.type_size() % 2 == 0));
    }

    #[test]
    fn launch_constants_are_the_kernel_sources() {
        let define = |name: &str| {
            kernels::QUANTIZED
                .define(name)
                .unwrap_or_else(|| panic!("quantized.hip defines no {name}")) as usize
        };
        assert_eq!(define("MATVEC_MAX_ROWS"), MATVEC_MAX_ROWS);
        assert_eq!(define("MATVEC_BLOCK"), matmul::MATVEC_BLOCK as usize);
        assert_eq!(define("RMS_Q8_MAX_THREADS"), RMS_Q8_MAX_THREADS);
        assert_eq!(define("MOE_GROUP_PAIRS"), MOE_GROUP_PAIRS);
        assert_eq!(define("MOE_ROUTE_MAX_EXPERTS"), MOE_ROUTE_MAX_EXPERTS);
        assert_eq!(define("MOE_TOPK_MAX_EXPERTS"), MOE_TOPK_MAX_EXPERTS);
        assert_eq!(define("MOE_ROUTER_WARPS"), MOE_ROUTER_WARPS);
        assert_eq!(define("MOE_Q8_ROWS"), MOE_Q8_ROWS);
        assert_eq!(define("MOE_ROUTER_MAX_EXPERTS"), MOE_ROUTER_MAX_EXPERTS);
        assert_eq!(define("MMQ_BM"), MMQ_BLOCK_ROWS);
        assert_eq!(define("MMQ_BN"), MMQ_BLOCK_COLS);
        assert_eq!(define("MMQ_WARPS"), MMQ_WARPS as usize);
        assert_eq!(define("MMQ_KSUBS"), MMQ_KSUBS);
        assert_eq!(define("DEQUANTIZE_VALUES"), dequantize::DEQUANTIZE_VALUES);
    }
}

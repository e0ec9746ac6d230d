//! Forward flash attention in bf16 and f16, head dims 64, 96, 128 and 256, sequences of 1K, 4K
//! and 16K tokens (16K tokens a call: batch = 16384 / seq; 2048 / head_dim heads, rounded
//! down), causal and not:
//! TFLOP/s of the tiled kernel (and of the portable one at 1K), timed with device events, and
//! the device memory a call takes beyond q, k, v and its output. One JSON object per line.
//! `bash .bench/run.sh` runs it and `bench/torch_attention.py` adds torch's
//! scaled_dot_product_attention (flash backend) on the same shapes. `--quick` leaves out 16K;
//! `--ncu` makes one call of the tiled kernel (bf16, head dim 128, 4K, not causal) for a
//! profiler, and prints nothing.

use rocm_attention::{flash_attention_with, FlashKernel, FlashOptions};
use rocm_bench_support::time_ms;
use rocm_device::{DType, Device, Layout, Operand, Result};

const ITERS: usize = 10;

fn main() -> Result<()> {
    let d = Device::new(0)?;
    let quick = std::env::args().any(|a| a == "--quick");
    let ncu = std::env::args().any(|a| a == "--ncu");
    for dtype in [DType::BF16, DType::F16] {
        for head_dim in [64usize, 96, 128, 256] {
            for seq in [1024usize, 4096, 16384] {
                if quick && seq > 4096 {
                    continue;
                }
                for causal in [false, true] {
                    if ncu && (dtype != DType::BF16 || head_dim != 128 || seq != 4096 || causal) {
                        continue;
                    }
                    let (batch, heads) = (16384 / seq, 2048 / head_dim);
                    let n = batch * seq * heads * head_dim;
                    let bytes = n * dtype.size_in_bytes();
                    let (q, k, v) = (d.alloc(bytes)?, d.alloc(bytes)?, d.alloc(bytes)?);
                    for (i, x) in [&q, &k, &v].into_iter().enumerate() {
                        // small finite values of both 16-bit types (0x2e66 / 0x3c.. patterns)
                        d.memset(x, 0, bytes, 0x2e + i as u8)?;
                    }
                    let layout = Layout::contiguous(&[batch, seq, heads, head_dim]);
                    let options = FlashOptions {
                        causal,
                        ..FlashOptions::new(1.0 / (head_dim as f32).sqrt())
                    };
                    let call = |kernel| {
                        flash_attention_with(
                            &d,
                            (
                                Operand::new(&q, dtype, &layout),
                                Operand::new(&k, dtype, &layout),
                                Operand::new(&v, dtype, &layout),
                            ),
                            &options,
                            None,
                            kernel,
                        )
                    };
                    if ncu {
                        drop(call(FlashKernel::Tiled)?);
                        d.synchronize()?;
                        return Ok(());
                    }
                    // memory beyond the inputs and the output
                    d.synchronize()?;
                    let before = d.memory_stats().in_use_bytes;
                    d.reset_peak_memory();
                    drop(call(FlashKernel::Tiled)?);
                    d.synchronize()?;
                    let extra = d
                        .memory_stats()
                        .peak_in_use_bytes
                        .saturating_sub(before + bytes);
                    let flops = 4.0 * (batch * heads) as f64 * (seq * seq * head_dim) as f64
                        / if causal { 2.0 } else { 1.0 };
                    let ms = time_ms(&d, ITERS, || call(FlashKernel::Tiled).map(drop))?;
                    let portable = if seq == 1024 {
                        let ms = time_ms(&d, 3, || call(FlashKernel::Portable).map(drop))?;
                        format!("{:.1}", flops / ms / 1e9)
                    } else {
                        "null".to_string()
                    };
                    println!(
                        "{{\"dtype\": \"{dtype}\", \"head_dim\": {head_dim}, \"seq\": {seq}, \"batch\": {batch}, \
                         \"heads\": {heads}, \"causal\": {causal}, \"ms\": {ms:.4}, \"tflops\": {:.1}, \
                         \"portable_tflops\": {portable}, \"extra_bytes\": {extra}}}",
                        flops / ms / 1e9
                    );
                }
            }
        }
    }
    Ok(())
}

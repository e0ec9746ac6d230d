//! Bandwidth of rocm-reduce on 256 MiB inputs, timed with device events; one JSON object per
//! line, the first the device-to-device copy ceiling. `bash .gpu/run.sh --bench` adds torch.

use rocm_bench_support::{report_bandwidth, time_ms};
use rocm_reduce::{self as rr, Buffer, DType, Device, Layout, Operand, ReduceOp, Result};

const ITERS: usize = 20;
const BYTES: usize = 256 << 20;

fn filled(d: &Device, bytes: usize) -> Result<Buffer> {
    let b = d.alloc(bytes)?;
    d.memset(&b, 0, bytes, 0x3c)?;
    Ok(b)
}

fn main() -> Result<()> {
    let d = Device::new(0)?;
    let (a, b) = (d.alloc(BYTES)?, d.alloc(BYTES)?);
    let ms = time_ms(&d, ITERS, || d.copy_dtod(&a, 0, &b, 0, BYTES))?;
    report_bandwidth("copy (ceiling)", "-", 2 * BYTES, ms);
    drop((a, b));
    for dtype in [DType::F32, DType::BF16] {
        let w = dtype.size_in_bytes();
        let n = BYTES / w;
        let x = filled(&d, BYTES)?;
        let name = dtype.as_str();
        let rows = Layout::contiguous(&[n / 4096, 4096]);
        for (label, op, dims) in [
            ("sum rows of 4096", ReduceOp::Sum, vec![1]),
            ("sum all", ReduceOp::Sum, vec![0, 1]),
            ("max rows of 4096", ReduceOp::Max, vec![1]),
            ("argmax rows of 4096", ReduceOp::ArgMax, vec![1]),
        ] {
            let ms = time_ms(&d, ITERS, || {
                rr::reduce(&d, op, Operand::new(&x, dtype, &rows), &dims).map(drop)
            })?;
            report_bandwidth(label, name, BYTES, ms);
        }
        let alpha = filled(&d, 32768 * w)?;
        for len in [1024usize, 4096, 32768] {
            let l = Layout::contiguous(&[n / len, len]);
            let al = Layout::contiguous(&[len]);
            let ms = time_ms(&d, ITERS, || {
                rr::softmax_last_dim(&d, Operand::new(&x, dtype, &l)).map(drop)
            })?;
            report_bandwidth(&format!("softmax rows of {len}"), name, 2 * BYTES, ms);
            let ms = time_ms(&d, ITERS, || {
                rr::rms_norm(
                    &d,
                    Operand::new(&x, dtype, &l),
                    Operand::new(&alpha, dtype, &al),
                    1e-5,
                )
                .map(drop)
            })?;
            report_bandwidth(&format!("rms_norm rows of {len}"), name, 2 * BYTES, ms);
            let ms = time_ms(&d, ITERS, || {
                rr::layer_norm(
                    &d,
                    Operand::new(&x, dtype, &l),
                    Operand::new(&alpha, dtype, &al),
                    Some(Operand::new(&alpha, dtype, &al)),
                    1e-5,
                )
                .map(drop)
            })?;
            report_bandwidth(&format!("layer_norm rows of {len}"), name, 2 * BYTES, ms);
        }
    }
    Ok(())
}

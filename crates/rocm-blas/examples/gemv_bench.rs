//! Few-row products by a matrix read along k (a decode step's linear layers, `x . w^T`) on the
//! gemv kernel and on the BLAS, in one process, timed with device events; one JSON object per
//! line, the first the device-to-device copy ceiling. Bandwidth counts the weight bytes only.
//! Weights rotate over copies that together pass 200 MB, so every call reads them from memory
//! as a model does. `bench/torch_gemv.py` adds torch's `F.linear` on the same shapes.

use rocm_bench_support::{report_bandwidth, time_ms};
use rocm_blas::{Blas, MatmulShape, Operand};
use rocm_device::{Buffer, DType, Device, Layout, Result};

const ITERS: usize = 20;
const ROTATE_BYTES: usize = 200 << 20;

fn main() -> Result<()> {
    let d = Device::new(0)?;
    let blas = Blas::new(&d)?;
    let bytes = 256 << 20;
    let (a, b) = (d.alloc(bytes)?, d.alloc(bytes)?);
    let ms = time_ms(&d, ITERS, || d.copy_dtod(&a, 0, &b, 0, bytes))?;
    report_bandwidth("copy (ceiling)", "-", 2 * bytes, ms);
    drop((a, b));
    // (n, k): a 1B llama's q, gate/up stacked, down, output head; an 8B's q, gate, down
    let shapes = [
        (2048usize, 2048usize),
        (16384, 2048),
        (2048, 8192),
        (32000, 2048),
        (4096, 4096),
        (14336, 4096),
        (4096, 14336),
    ];
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let size = dtype.size_in_bytes();
        for (n, k) in shapes {
            let w_bytes = n * k * size;
            let copies = ROTATE_BYTES.div_ceil(w_bytes).max(1);
            let ws: Vec<Buffer> = (0..copies)
                .map(|_| {
                    let w = d.alloc(w_bytes)?;
                    d.memset(&w, 0, w_bytes, 0x3c)?;
                    Ok(w)
                })
                .collect::<Result<_>>()?;
            // the weight as Linear holds it, (n, k), read as its transpose (k, n)
            let wl = Layout::new(&[k, n], &[1, k], 0);
            for m in [1usize, 2, 4, 8] {
                let x = d.alloc(m * k * size)?;
                d.memset(&x, 0, m * k * size, 0x3c)?;
                let xl = Layout::contiguous(&[m, k]);
                let shape = MatmulShape { batch: 1, m, n, k };
                for (gemv, label) in [(true, ""), (false, " (BLAS)")] {
                    blas.set_gemv(gemv);
                    let mut i = 0;
                    let ms = time_ms(&d, ITERS, || {
                        i += 1;
                        let w = Operand::new(&ws[i % copies], dtype, &wl);
                        blas.matmul(Operand::new(&x, dtype, &xl), w, shape)
                            .map(drop)
                    })?;
                    let op = format!("gemv {m}x{n}x{k}{label}");
                    report_bandwidth(&op, dtype.as_str(), w_bytes, ms);
                }
            }
        }
    }
    Ok(())
}

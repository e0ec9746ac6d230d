//! One-row products by a matrix read along k (a decode step's linear layers, `x . w^T`; attention
//! scores `q . k^T` of 32 heads over a cache) on the gemv kernel and on the BLAS, in one process,
//! timed with device events; one JSON object per line, the first the device-to-device copy
//! ceiling. Bandwidth counts the matrix bytes only. Matrices rotate over copies that together
//! pass 200 MB, so every call reads them from memory as a model does. `bench/torch_gemv.py`
//! adds torch (`F.linear`, and `torch.matmul` for the scores) on the same shapes.

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
    // (batch, n, k): a 1B llama's q, gate/up stacked, down, output head; an 8B's q, gate, down
    // (one weight); 32 heads' scores over 1024 cached keys of 128 (a matrix a head)
    let shapes = [
        (1usize, 2048usize, 2048usize),
        (1, 16384, 2048),
        (1, 2048, 8192),
        (1, 32000, 2048),
        (1, 4096, 4096),
        (1, 14336, 4096),
        (1, 4096, 14336),
        (32, 1024, 128),
    ];
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let size = dtype.size_in_bytes();
        for (batch, n, k) in shapes {
            let w_bytes = batch * n * k * size;
            let copies = ROTATE_BYTES.div_ceil(w_bytes).max(1);
            let ws: Vec<Buffer> = (0..copies)
                .map(|_| {
                    let w = d.alloc(w_bytes)?;
                    d.memset(&w, 0, w_bytes, 0x3c)?;
                    Ok(w)
                })
                .collect::<Result<_>>()?;
            // each matrix as Linear holds a weight, (n, k), read as its transpose (k, n)
            let wl = Layout::new(&[batch, k, n], &[n * k, 1, k], 0);
            let x = d.alloc(batch * k * size)?;
            d.memset(&x, 0, batch * k * size, 0x3c)?;
            let xl = Layout::contiguous(&[batch, 1, k]);
            let shape = MatmulShape { batch, m: 1, n, k };
            for (gemv, label) in [(true, ""), (false, " (BLAS)")] {
                blas.set_gemv(gemv);
                let mut i = 0;
                let ms = time_ms(&d, ITERS, || {
                    i += 1;
                    let w = Operand::new(&ws[i % copies], dtype, &wl);
                    blas.matmul(Operand::new(&x, dtype, &xl), w, shape).map(drop)
                })?;
                let op = format!("gemv {batch}x1x{n}x{k}{label}");
                report_bandwidth(&op, dtype.as_str(), w_bytes, ms);
            }
        }
    }
    Ok(())
}

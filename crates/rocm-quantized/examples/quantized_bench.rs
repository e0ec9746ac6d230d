//! The quantized matmul on llama shapes, timed with device events; one JSON object per line,
//! the first the device-to-device copy ceiling. Bandwidth counts the weight bytes only (the
//! activations are a rounding error beside them). Weights rotate over copies that together
//! pass 200 MB, so every call reads them from memory, as in a model.

use rocm_blas::Blas;
use rocm_quantized::{self as rq, Buffer, DType, Device, GgmlType, Layout, Operand, QWeights};
use rocm_test_support::{report_bandwidth, time_ms};

const ITERS: usize = 20;
const ROTATE_BYTES: usize = 200 << 20;

fn filled(d: &Device, bytes: usize, byte: u8) -> rocm_quantized::Result<Buffer> {
    let b = d.alloc(bytes)?;
    d.memset(&b, 0, bytes, byte)?;
    Ok(b)
}

fn main() -> rocm_quantized::Result<()> {
    let d = Device::new(0)?;
    let blas = Blas::new(&d)?;
    let bytes = 256 << 20;
    let (a, b) = (d.alloc(bytes)?, d.alloc(bytes)?);
    let ms = time_ms(&d, ITERS, || d.copy_dtod(&a, 0, &b, 0, bytes))?;
    report_bandwidth("copy (ceiling)", "-", 2 * bytes, ms);
    drop((a, b));
    for ty in [GgmlType::Q4_0, GgmlType::Q4K, GgmlType::Q8_0] {
        for (n, k) in [
            (4096usize, 4096usize),
            (11008, 4096),
            (4096, 11008),
            (128256, 4096),
        ] {
            let row_bytes = k / ty.block_size() * ty.type_size();
            let w_bytes = n * row_bytes;
            let copies = ROTATE_BYTES.div_ceil(w_bytes).max(1);
            // 0x11 bytes: finite f16 scales (0x1111), small quants
            let ws: Vec<Buffer> = (0..copies)
                .map(|_| filled(&d, w_bytes, 0x11))
                .collect::<rocm_quantized::Result<_>>()?;
            for m in [1usize, 2, 4, 8] {
                let x = filled(&d, m * k * 4, 0x3c)?;
                let xl = Layout::contiguous(&[m, k]);
                let mut next = 0;
                let ms = time_ms(&d, ITERS, || {
                    let w = QWeights {
                        buffer: &ws[next % copies],
                        ty,
                        rows: n,
                        k,
                    };
                    next += 1;
                    rq::matmul(&blas, w, Operand::new(&x, DType::F32, &xl)).map(drop)
                })?;
                report_bandwidth(&format!("matvec {n}x{k} batch {m}"), ty.key(), w_bytes, ms);
            }
        }
    }
    Ok(())
}

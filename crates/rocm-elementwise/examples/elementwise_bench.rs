//! Bandwidth benchmark of rocm-elementwise on 256 MiB tensors, timed with device events.
//! Prints one JSON object per line: op, dtype, bytes moved per call, ms per call, GB/s; the
//! first line is the ceiling, a device-to-device copy of the same size in the same run.
//! `bash .gpu/run.sh --bench` runs it next to torch eager and merges the two into a table.

use rocm_bench_support::{report_bandwidth, time_ms};
use rocm_elementwise::OperandCopy;
use rocm_elementwise::{self as ew, BinaryOp, Buffer, DType, Device, Layout, Operand, UnaryOp};

const ITERS: usize = 20;
const BYTES: usize = 256 << 20;

fn filled(d: &Device, dtype: DType, n: usize) -> ew::Result<Buffer> {
    let buf = d.alloc(n * dtype.size_in_bytes())?;
    // 0x3c bytes: a small positive value in every float dtype
    d.memset(&buf, 0, buf.len(), 0x3c)?;
    Ok(buf)
}

fn main() -> ew::Result<()> {
    let d = Device::new(0)?;
    eprintln!("{:?}", d.info());
    // ceiling: device-to-device copy
    let a = d.alloc(BYTES)?;
    let b = d.alloc(BYTES)?;
    let ms = time_ms(&d, ITERS, || d.copy_dtod(&a, 0, &b, 0, BYTES))?;
    report_bandwidth("copy (ceiling)", "-", 2 * BYTES, ms);
    drop((a, b));
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let w = dtype.size_in_bytes();
        let n = BYTES / w;
        let x = filled(&d, dtype, n)?;
        let y = filled(&d, dtype, n)?;
        let out = d.alloc(n * w)?;
        let l = Layout::contiguous(&[n]);
        let name = dtype.as_str();
        for op in [UnaryOp::Exp, UnaryOp::Silu, UnaryOp::Gelu] {
            let ms = time_ms(&d, ITERS, || {
                ew::unary_into(&d, op, Operand::new(&x, dtype, &l), &out, 0)
            })?;
            report_bandwidth(op.name(), name, 2 * n * w, ms);
        }
        let ms = time_ms(&d, ITERS, || {
            ew::affine_into(&d, Operand::new(&x, dtype, &l), (1.5, 0.25), &out, 0)
        })?;
        report_bandwidth("affine", name, 2 * n * w, ms);
        for op in [BinaryOp::Add, BinaryOp::Mul] {
            let ms = time_ms(&d, ITERS, || {
                ew::binary_into(
                    &d,
                    op,
                    (Operand::new(&x, dtype, &l), Operand::new(&y, dtype, &l)),
                    &out,
                    0,
                )
            })?;
            report_bandwidth(op.name(), name, 3 * n * w, ms);
        }
        // broadcast: (rows, 4096) + (1, 4096)
        let cols = 4096;
        let rows = n / cols;
        let full = Layout::contiguous(&[rows, cols]);
        let bias = Layout::new(&[rows, cols], &[0, 1], 0);
        let ms = time_ms(&d, ITERS, || {
            let operands = (
                Operand::new(&x, dtype, &full),
                Operand::new(&y, dtype, &bias),
            );
            ew::binary_into(&d, BinaryOp::Add, operands, &out, 0)
        })?;
        report_bandwidth("add broadcast (r,4096)+(1,4096)", name, 2 * n * w, ms);
        // transposed: (4096, rows) view of a (rows, 4096) tensor made contiguous
        let t = Layout::new(&[cols, rows], &[1, cols], 0);
        let ms = time_ms(&d, ITERS, || Operand::new(&x, dtype, &t).copy_to(&out, 0))?;
        report_bandwidth("transpose copy (4096,r)", name, 2 * n * w, ms);
        if dtype != DType::F32 {
            // casts to and from f32 over the same element count
            let wide = d.alloc(n * 4)?;
            let ms = time_ms(&d, ITERS, || {
                ew::cast_into(&d, Operand::new(&wide, DType::F32, &l), dtype, &out, 0)
            })?;
            report_bandwidth(&format!("cast f32->{name}"), name, n * (4 + w), ms);
            let ms = time_ms(&d, ITERS, || {
                ew::cast_into(&d, Operand::new(&x, dtype, &l), DType::F32, &wide, 0)
            })?;
            report_bandwidth(&format!("cast {name}->f32"), name, n * (4 + w), ms);
        }
    }
    Ok(())
}

//! Overhead of `Blas::matmul` against a direct cuBLAS call of the same shape in the same
//! process and stream, timed with device events. One JSON object per line.
//! `bash .gpu/run.sh --bench` runs it and `bench/torch_matmul.py` adds torch.matmul.

use rocm_bench_support::time_ms;
use std::ffi::c_void;

use cudarc::cublas::{result, sys};
use rocm_blas::{Blas, MatmulShape, Operand};
use rocm_device::{DType, Device, Layout, Result};

const ITERS: usize = 20;

fn main() -> Result<()> {
    let d = Device::new(0)?;
    let blas = Blas::new(&d)?;
    d.bind_to_thread()?;
    let handle = result::create_handle().expect("cublasCreate");
    // SAFETY: a live handle and the device's live stream.
    unsafe { result::set_stream(handle, d.raw_stream() as sys::cudaStream_t) }.expect("stream");
    // (name, batch, m, n, k, rhs broadcast over the batch)
    let shapes = [
        ("4096^3", 1usize, 4096usize, 4096usize, 4096usize, false),
        ("decode 32 x (1 x 4096 x 4096)", 32, 1, 4096, 4096, true),
    ];
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let size = dtype.size_in_bytes();
        for (name, batch, m, n, k, broadcast) in shapes {
            let lhs = d.alloc(batch * m * k * size)?;
            let rhs_mats = if broadcast { 1 } else { batch };
            let rhs = d.alloc(rhs_mats * k * n * size)?;
            d.memset(&lhs, 0, lhs.len(), 0x3c)?;
            d.memset(&rhs, 0, rhs.len(), 0x3c)?;
            let out = d.alloc(batch * m * n * size)?;
            let lhs_l = Layout::contiguous(&[batch, m, k]);
            let rhs_stride = if broadcast { 0 } else { k * n };
            let rhs_l = Layout::new(&[batch, k, n], &[rhs_stride, n, 1], 0);
            let shape = MatmulShape { batch, m, n, k };
            let ours = time_ms(&d, ITERS, || {
                let (x, w) = (
                    Operand::new(&lhs, dtype, &lhs_l),
                    Operand::new(&rhs, dtype, &rhs_l),
                );
                blas.matmul(x, w, shape).map(drop)
            })?;
            let (dt, alpha, beta): (sys::cudaDataType, f32, f32) = match dtype {
                DType::F32 => (sys::cudaDataType::CUDA_R_32F, 1.0, 0.0),
                DType::F16 => (sys::cudaDataType::CUDA_R_16F, 1.0, 0.0),
                _ => (sys::cudaDataType::CUDA_R_16BF, 1.0, 0.0),
            };
            let direct = time_ms(&d, ITERS, || {
                // SAFETY: buffers sized for the shape above, alive for the whole loop.
                unsafe {
                    result::gemm_strided_batched_ex(
                        handle,
                        sys::cublasOperation_t::CUBLAS_OP_N,
                        sys::cublasOperation_t::CUBLAS_OP_N,
                        n as i32,
                        m as i32,
                        k as i32,
                        std::ptr::from_ref(&alpha).cast::<c_void>(),
                        rhs.device_ptr() as *const c_void,
                        dt,
                        n as i32,
                        rhs_stride as i64,
                        lhs.device_ptr() as *const c_void,
                        dt,
                        k as i32,
                        (m * k) as i64,
                        std::ptr::from_ref(&beta).cast::<c_void>(),
                        out.device_ptr() as *mut c_void,
                        dt,
                        n as i32,
                        (m * n) as i64,
                        batch as i32,
                        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                        sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
                .expect("direct cuBLAS call");
                Ok(())
            })?;
            let flops = 2.0 * (batch * m * n * k) as f64;
            println!(
                "{{\"shape\": \"{name}\", \"batch\": {batch}, \"m\": {m}, \"n\": {n}, \"k\": {k}, \"dtype\": \"{dtype}\", \"ours_ms\": {ours:.4}, \"cublas_ms\": {direct:.4}, \"ours_tflops\": {:.1}, \"cublas_tflops\": {:.1}, \"overhead_pct\": {:.2}}}",
                flops / ours / 1e9,
                flops / direct / 1e9,
                100.0 * (ours / direct - 1.0)
            );
        }
    }
    // SAFETY: created above, destroyed once.
    unsafe { result::destroy_handle(handle) }.expect("cublasDestroy");
    Ok(())
}

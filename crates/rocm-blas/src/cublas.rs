//! cuBLAS through cudarc, for the nvidia platform (same plan, same entry point as rocBLAS).

use std::ffi::c_void;

use cudarc::cublas::{result, sys};
use rocm_device::{Device, Error, Result};

fn err(call: &'static str, e: result::CublasError) -> Error {
    Error::Library {
        library: "cuBLAS",
        call,
        code: e.0 as i64,
        message: format!("{:?}", e.0),
    }
}

/// A cuBLAS handle bound to a device's stream.
#[derive(Debug)]
pub struct CuBlasHandle {
    handle: sys::cublasHandle_t,
}

// SAFETY: used behind the Mutex of `Blas`, one call at a time; cuBLAS handles may move
// between threads as long as calls do not overlap.
unsafe impl Send for CuBlasHandle {}

/// Compute types the callers pick from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compute {
    F32,
    F32FastTf32,
    F32Fast16Bf,
    F16,
    F64,
}

impl CuBlasHandle {
    pub fn new(device: &Device) -> Result<Self> {
        device.bind_to_thread()?;
        let handle = result::create_handle().map_err(|e| err("cublasCreate_v2", e))?;
        let h = CuBlasHandle { handle };
        // SAFETY: a live handle and the device's live stream (a CUstream on this platform).
        unsafe { result::set_stream(h.handle, device.raw_stream() as sys::cudaStream_t) }
            .map_err(|e| err("cublasSetStream_v2", e))?;
        Ok(h)
    }

    /// One strided-batched gemm; `dtype_bits` 16/16/32/64 with `bf16` choosing bfloat16.
    ///
    /// # Safety
    /// The device pointers must address buffers large enough for the sizes, strides and
    /// batch given, alive until the stream has run the call; `alpha`/`beta` point to host
    /// values of the compute type's scalar type.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm(
        &self,
        device: &Device,
        trans: (bool, bool),
        mnk: (i32, i32, i32),
        alpha: *const c_void,
        a: (u64, i32, i64),
        b: (u64, i32, i64),
        beta: *const c_void,
        c: (u64, i32, i64),
        batch: i32,
        dtype: sys::cudaDataType,
        compute: Compute,
    ) -> Result<()> {
        device.bind_to_thread()?;
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let compute = match compute {
            Compute::F32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            Compute::F32FastTf32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            Compute::F32Fast16Bf => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_16BF,
            Compute::F16 => sys::cublasComputeType_t::CUBLAS_COMPUTE_16F,
            Compute::F64 => sys::cublasComputeType_t::CUBLAS_COMPUTE_64F,
        };
        // SAFETY: the caller guarantees the pointers and sizes (see above).
        unsafe {
            result::gemm_strided_batched_ex(
                self.handle,
                op(trans.0),
                op(trans.1),
                mnk.0,
                mnk.1,
                mnk.2,
                alpha,
                a.0 as *const c_void,
                dtype,
                a.1,
                a.2,
                b.0 as *const c_void,
                dtype,
                b.1,
                b.2,
                beta,
                c.0 as *mut c_void,
                dtype,
                c.1,
                c.2,
                batch,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| err("cublasGemmStridedBatchedEx", e))
    }
}

impl Drop for CuBlasHandle {
    fn drop(&mut self) {
        // SAFETY: created by cublasCreate_v2, destroyed once.
        if let Err(e) = unsafe { result::destroy_handle(self.handle) } {
            tracing::warn!("cublasDestroy_v2 failed: {e:?}");
        }
    }
}

//! cuBLAS through cudarc, for the nvidia platform (same plan, same entry point as rocBLAS).

use std::ffi::c_void;

use cudarc::cublas::{result, sys};
use rocm_device::{Device, Error, Result};

use crate::GemmCall;

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

    /// One strided-batched gemm through `cublasGemmStridedBatchedEx` with the call's (A and B,
    /// C) data types and compute type.
    ///
    /// # Safety
    /// The device pointers must address buffers large enough for the sizes, strides and
    /// batch given, alive until the stream has run the call; `alpha`/`beta` point to host
    /// values of the compute type's scalar type.
    pub unsafe fn gemm(
        &self,
        device: &Device,
        call: &GemmCall,
        (dtype, out_dtype, compute): (sys::cudaDataType, sys::cudaDataType, Compute),
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
        let GemmCall {
            transpose: (ta, tb),
            mnk: (m, n, k),
            a,
            b,
            c,
            ..
        } = *call;
        // SAFETY: the caller guarantees the pointers and sizes (see above).
        unsafe {
            result::gemm_strided_batched_ex(
                self.handle,
                op(ta),
                op(tb),
                m,
                n,
                k,
                call.alpha,
                a.ptr as *const c_void,
                dtype,
                a.ld,
                a.stride,
                b.ptr as *const c_void,
                dtype,
                b.ld,
                b.stride,
                call.beta,
                c.ptr as *mut c_void,
                out_dtype,
                c.ld,
                c.stride,
                call.batch,
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

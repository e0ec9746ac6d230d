//! rocBLAS through its table in `rocm_device::sys`: a handle on the device's stream and the
//! checked strided-batched gemm.

use std::ffi::c_void;

use rocm_device::sys::rocblas::Handle;
pub use rocm_device::sys::rocblas::{abi, library_status, Functions};
use rocm_device::{Device, Result};

use crate::GemmCall;

fn check(lib: &Functions, call: &'static str, status: i32) -> Result<()> {
    if status == abi::ROCBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    // SAFETY: rocblas_status_to_string returns a static string for any status value.
    Err(unsafe {
        rocm_device::library_error(
            "rocBLAS",
            call,
            status.into(),
            (lib.status_to_string)(status),
        )
    })
}

/// A rocBLAS handle bound to a device's stream.
#[derive(Debug)]
pub struct RocBlasHandle {
    lib: Functions,
    handle: Handle,
}

// SAFETY: the handle is only used behind the Mutex of `Blas`, one call at a time; rocBLAS
// handles may move between threads.
unsafe impl Send for RocBlasHandle {}

impl RocBlasHandle {
    pub fn new(device: &Device) -> Result<Self> {
        let lib = Functions::load(&library_status())?;
        device.bind_to_thread()?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer.
        check(&lib, "rocblas_create_handle", unsafe {
            (lib.create_handle)(&mut handle)
        })?;
        let h = RocBlasHandle { lib, handle };
        // SAFETY: a live handle and the device's live stream.
        check(&h.lib, "rocblas_set_stream", unsafe {
            (h.lib.set_stream)(h.handle, device.raw_stream())
        })?;
        Ok(h)
    }

    /// One strided-batched gemm through `rocblas_gemm_strided_batched_ex` (C is also D), with
    /// the rocBLAS operations and the (A and B, C and D, compute) types of the call.
    ///
    /// # Safety
    /// The device pointers must address buffers large enough for the sizes, strides and
    /// batch given, alive until the stream has run the call; `alpha`/`beta` point to host
    /// values of the compute type.
    pub unsafe fn gemm(
        &self,
        device: &Device,
        call: &GemmCall,
        (trans_a, trans_b): (i32, i32),
        (dtype, out_dtype, compute): (i32, i32, i32),
    ) -> Result<()> {
        device.bind_to_thread()?;
        let GemmCall {
            mnk: (m, n, k),
            a,
            b,
            c,
            ..
        } = *call;
        // SAFETY: the caller guarantees the pointers and sizes (see above).
        let status = unsafe {
            (self.lib.gemm_strided_batched_ex)(
                self.handle,
                trans_a,
                trans_b,
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
                c.ptr as *const c_void,
                out_dtype,
                c.ld,
                c.stride,
                c.ptr as *mut c_void,
                out_dtype,
                c.ld,
                c.stride,
                call.batch,
                compute,
                abi::ROCBLAS_GEMM_ALGO_STANDARD,
                0,
                abi::ROCBLAS_GEMM_FLAGS_NONE,
            )
        };
        check(&self.lib, "rocblas_gemm_strided_batched_ex", status)
    }
}

impl Drop for RocBlasHandle {
    fn drop(&mut self) {
        // SAFETY: the handle was created by rocblas_create_handle and is destroyed once.
        let status = unsafe { (self.lib.destroy_handle)(self.handle) };
        if let Err(e) = check(&self.lib, "rocblas_destroy_handle", status) {
            tracing::warn!("{e}");
        }
    }
}

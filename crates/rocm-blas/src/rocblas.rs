//! rocBLAS, loaded at run time with a minimal FFI table of our own (the calls below and the
//! enum values they take, checked against the ROCm headers in the AMD tier).

use std::ffi::{c_char, c_void};

use rocm_device::{Device, Error, LibraryStatus, Result};

use crate::GemmCall;

/// rocBLAS enum values (rocblas-types.h) and the symbols we call.
pub mod abi {
    rocm_device::abi_constants!(TABLE;
        ROCBLAS_STATUS_SUCCESS: i32 = 0 => "rocblas_status_success";
        ROCBLAS_OPERATION_NONE: i32 = 111 => "rocblas_operation_none";
        ROCBLAS_OPERATION_TRANSPOSE: i32 = 112 => "rocblas_operation_transpose";
        ROCBLAS_DATATYPE_F16_R: i32 = 150 => "rocblas_datatype_f16_r";
        ROCBLAS_DATATYPE_F32_R: i32 = 151 => "rocblas_datatype_f32_r";
        ROCBLAS_DATATYPE_F64_R: i32 = 152 => "rocblas_datatype_f64_r";
        ROCBLAS_DATATYPE_BF16_R: i32 = 168 => "rocblas_datatype_bf16_r";
        ROCBLAS_GEMM_ALGO_STANDARD: i32 = 0 => "rocblas_gemm_algo_standard";
        ROCBLAS_GEMM_FLAGS_NONE: u32 = 0 => "rocblas_gemm_flags_none";
    );
    /// The header the table's expressions need.
    pub const HEADERS: &[&str] = &["rocblas/rocblas.h"];
    /// Every function of the FFI table.
    pub const SYMBOLS: [&str; 5] = [
        "rocblas_create_handle",
        "rocblas_destroy_handle",
        "rocblas_set_stream",
        "rocblas_gemm_strided_batched_ex",
        "rocblas_status_to_string",
    ];
}

type Handle = *mut c_void;
type CreateHandle = unsafe extern "C" fn(*mut Handle) -> i32;
type DestroyHandle = unsafe extern "C" fn(Handle) -> i32;
type SetStream = unsafe extern "C" fn(Handle, *mut c_void) -> i32;
type StatusToString = unsafe extern "C" fn(i32) -> *const c_char;
#[allow(clippy::type_complexity)]
type GemmStridedBatchedEx = unsafe extern "C" fn(
    Handle,
    i32,
    i32,
    i32,
    i32,
    i32,
    *const c_void,
    *const c_void,
    i32,
    i32,
    i64,
    *const c_void,
    i32,
    i32,
    i64,
    *const c_void,
    *const c_void,
    i32,
    i32,
    i64,
    *mut c_void,
    i32,
    i32,
    i64,
    i32,
    i32,
    i32,
    i32,
    u32,
) -> i32;

const HINT: &str = "install rocBLAS (Debian/Ubuntu: apt install librocblas-dev, or the ROCm \
    packages), or set ROCM_PATH";

/// The library names tried, unversioned first.
const NAMES: [&str; 3] = ["librocblas.so", "librocblas.so.5", "librocblas.so.4"];

/// Where rocBLAS was looked for and found.
pub fn library_status() -> LibraryStatus {
    let names: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
    rocm_device::find_library(
        "rocBLAS (librocblas)",
        &names,
        &rocm_device::rocm_library_dirs(),
        HINT,
    )
}

/// The loaded library and its functions.
pub struct RocBlasLib {
    _lib: libloading::Library,
    create_handle: CreateHandle,
    destroy_handle: DestroyHandle,
    set_stream: SetStream,
    gemm: GemmStridedBatchedEx,
    status_to_string: StatusToString,
}

impl std::fmt::Debug for RocBlasLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RocBlasLib")
    }
}

impl RocBlasLib {
    /// Loads rocBLAS and resolves every symbol of the table.
    pub fn load() -> Result<Self> {
        let status = library_status();
        status.require()?;
        let path = status.found.unwrap_or_default();
        // SAFETY: loading rocBLAS runs its initialisers, which is what using it requires.
        let lib =
            unsafe { libloading::Library::new(&path) }.map_err(|e| Error::LibraryMissing {
                library: "rocBLAS (librocblas)",
                tried: format!("{path}: {e}"),
                hint: HINT,
            })?;
        fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T> {
            // SAFETY: each name is looked up with the signature of rocblas-functions.h /
            // rocblas-auxiliary.h that the type alias above spells out.
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| Error::LibraryMissing {
                    library: "rocBLAS (librocblas)",
                    tried: format!("symbol {name}: {e}"),
                    hint: HINT,
                })
        }
        Ok(RocBlasLib {
            create_handle: sym(&lib, abi::SYMBOLS[0])?,
            destroy_handle: sym(&lib, abi::SYMBOLS[1])?,
            set_stream: sym(&lib, abi::SYMBOLS[2])?,
            gemm: sym(&lib, abi::SYMBOLS[3])?,
            status_to_string: sym(&lib, abi::SYMBOLS[4])?,
            _lib: lib,
        })
    }

    fn check(&self, call: &'static str, status: i32) -> Result<()> {
        if status == abi::ROCBLAS_STATUS_SUCCESS {
            return Ok(());
        }
        // SAFETY: rocblas_status_to_string returns a static string for any status value.
        Err(unsafe {
            rocm_device::library_error(
                "rocBLAS",
                call,
                status.into(),
                (self.status_to_string)(status),
            )
        })
    }
}

/// A rocBLAS handle bound to a device's stream.
#[derive(Debug)]
pub struct RocBlasHandle {
    lib: RocBlasLib,
    handle: Handle,
}

// SAFETY: the handle is only used behind the Mutex of `Blas`, one call at a time; rocBLAS
// handles may move between threads.
unsafe impl Send for RocBlasHandle {}

impl RocBlasHandle {
    pub fn new(device: &Device) -> Result<Self> {
        let lib = RocBlasLib::load()?;
        device.bind_to_thread()?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer.
        lib.check("rocblas_create_handle", unsafe {
            (lib.create_handle)(&mut handle)
        })?;
        let h = RocBlasHandle { lib, handle };
        // SAFETY: a live handle and the device's live stream.
        h.lib.check("rocblas_set_stream", unsafe {
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
            (self.lib.gemm)(
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
        self.lib.check("rocblas_gemm_strided_batched_ex", status)
    }
}

impl Drop for RocBlasHandle {
    fn drop(&mut self) {
        // SAFETY: the handle was created by rocblas_create_handle and is destroyed once.
        let status = unsafe { (self.lib.destroy_handle)(self.handle) };
        if let Err(e) = self.lib.check("rocblas_destroy_handle", status) {
            tracing::warn!("{e}");
        }
    }
}

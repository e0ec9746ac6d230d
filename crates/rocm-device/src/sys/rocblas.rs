//! rocBLAS (rocblas.h of ROCm 6.4): the functions candle-rocm calls and the enum values they
//! take.

use std::ffi::{c_char, c_void};

use crate::sys::library::{find_library, rocm_library_dirs, LibraryStatus};

/// rocBLAS enum values (rocblas-types.h).
pub mod abi {
    use crate::abi::AbiValue;

    crate::abi_constants!(TABLE;
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
    /// Every table of rocBLAS.
    pub const TABLES: &[&[AbiValue]] = &[TABLE];
    /// The header the table's expressions need.
    pub const HEADERS: &[&str] = &["rocblas/rocblas.h"];
}

/// `rocblas_handle`.
pub type Handle = *mut c_void;
/// `hipStream_t`.
pub type Stream = *mut c_void;

const ROLE: &str = "rocBLAS (librocblas)";
const HINT: &str = "install rocBLAS (Debian/Ubuntu: apt install librocblas-dev, or the ROCm \
    packages), or set ROCM_PATH";
/// The library names tried, unversioned first.
const NAMES: [&str; 3] = ["librocblas.so", "librocblas.so.5", "librocblas.so.4"];

/// Where rocBLAS was looked for and found.
pub fn library_status() -> LibraryStatus {
    let names: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
    find_library(ROLE, &names, &rocm_library_dirs(), HINT)
}

crate::ffi_table! {
    /// rocBLAS's functions (rocblas-functions.h, rocblas-auxiliary.h).
    pub struct Functions {
        create_handle = "rocblas_create_handle": fn(*mut Handle) -> i32;
        destroy_handle = "rocblas_destroy_handle": fn(Handle) -> i32;
        set_stream = "rocblas_set_stream": fn(Handle, Stream) -> i32;
        status_to_string = "rocblas_status_to_string": fn(i32) -> *const c_char;
        /// (handle, trans_a, trans_b, m, n, k, alpha, a, a_type, lda, stride_a, b, b_type, ldb,
        /// stride_b, beta, c, c_type, ldc, stride_c, d, d_type, ldd, stride_d, batch,
        /// compute_type, algo, solution_index, flags).
        gemm_strided_batched_ex = "rocblas_gemm_strided_batched_ex": fn(
            Handle, i32, i32, i32, i32, i32,
            *const c_void,
            *const c_void, i32, i32, i64,
            *const c_void, i32, i32, i64,
            *const c_void,
            *const c_void, i32, i32, i64,
            *mut c_void, i32, i32, i64,
            i32, i32, i32, i32, u32
        ) -> i32;
    }
}

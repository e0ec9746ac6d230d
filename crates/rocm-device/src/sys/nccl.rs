//! NCCL (nvidia platform) and RCCL (amd platform): the functions candle-rocm calls and the
//! enum values they take. RCCL keeps NCCL's API (same names, `hipStream_t` for
//! `cudaStream_t`); the AMD tier checks every symbol against the real librccl and every value
//! against rccl.h.

use std::ffi::{c_char, c_int, c_void};

use crate::sys::library::{find_library, rocm_library_dirs, LibraryStatus};

/// NCCL/RCCL enum values (rccl.h, nccl.h).
pub mod abi {
    use crate::abi::AbiValue;

    crate::abi_constants!(TABLE;
        NCCL_SUCCESS: u32 = 0 => "ncclSuccess";
        NCCL_UNHANDLED_DEVICE_ERROR: u32 = 1 => "ncclUnhandledCudaError";
        NCCL_SYSTEM_ERROR: u32 = 2 => "ncclSystemError";
        NCCL_INTERNAL_ERROR: u32 = 3 => "ncclInternalError";
        NCCL_INVALID_ARGUMENT: u32 = 4 => "ncclInvalidArgument";
        NCCL_INVALID_USAGE: u32 = 5 => "ncclInvalidUsage";
        NCCL_REMOTE_ERROR: u32 = 6 => "ncclRemoteError";
        NCCL_INT8: u32 = 0 => "ncclInt8";
        NCCL_UINT8: u32 = 1 => "ncclUint8";
        NCCL_INT32: u32 = 2 => "ncclInt32";
        NCCL_UINT32: u32 = 3 => "ncclUint32";
        NCCL_INT64: u32 = 4 => "ncclInt64";
        NCCL_UINT64: u32 = 5 => "ncclUint64";
        NCCL_FLOAT16: u32 = 6 => "ncclFloat16";
        NCCL_FLOAT32: u32 = 7 => "ncclFloat32";
        NCCL_FLOAT64: u32 = 8 => "ncclFloat64";
        NCCL_BFLOAT16: u32 = 9 => "ncclBfloat16";
        NCCL_SUM: u32 = 0 => "ncclSum";
        NCCL_PROD: u32 = 1 => "ncclProd";
        NCCL_MAX: u32 = 2 => "ncclMax";
        NCCL_MIN: u32 = 3 => "ncclMin";
        NCCL_AVG: u32 = 4 => "ncclAvg";
        UNIQUE_ID_BYTES: usize = 128 => "NCCL_UNIQUE_ID_BYTES";
    );
    /// `ncclInProgress` (NCCL 2.14+, RCCL 5.5+; not in older headers): a non-blocking call
    /// still running. Only compared with, never passed.
    pub const NCCL_IN_PROGRESS: u32 = 7;
    /// The header the table's expressions need.
    pub const HEADERS: &[&str] = &["rccl/rccl.h"];
    /// Every table of NCCL/RCCL.
    pub const TABLES: &[&[AbiValue]] = &[TABLE];
}

/// `ncclComm_t`.
pub type RawComm = *mut c_void;
/// `hipStream_t` / `cudaStream_t`.
pub type Stream = *mut c_void;

/// The 128 bytes that name a communicator being formed.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; abi::UNIQUE_ID_BYTES]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head: String = self.0[..8].iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "UniqueId({head}...)")
    }
}

/// Where RCCL was looked for and found.
pub fn rccl_library_status() -> LibraryStatus {
    let names = ["librccl.so".to_string(), "librccl.so.1".to_string()];
    find_library(
        "RCCL (librccl)",
        &names,
        &rocm_library_dirs(),
        "install RCCL (the ROCm package rccl, or Debian/Ubuntu librccl1), or set ROCM_PATH",
    )
}

/// Where NCCL was looked for and found (through the loader's path only).
pub fn nccl_library_status() -> LibraryStatus {
    let names = ["libnccl.so.2".to_string(), "libnccl.so".to_string()];
    find_library(
        "NCCL (libnccl)",
        &names,
        &[],
        "install NCCL (the nvidia-nccl-cu13 wheel or the libnccl2 package) and put its lib \
         folder on LD_LIBRARY_PATH",
    )
}

crate::ffi_table! {
    /// NCCL's (and RCCL's) functions.
    pub struct Functions {
        get_version = "ncclGetVersion": fn(*mut c_int) -> u32;
        get_unique_id = "ncclGetUniqueId": fn(*mut UniqueId) -> u32;
        comm_init_rank = "ncclCommInitRank": fn(*mut RawComm, c_int, UniqueId, c_int) -> u32;
        comm_destroy = "ncclCommDestroy": fn(RawComm) -> u32;
        comm_abort = "ncclCommAbort": fn(RawComm) -> u32;
        comm_get_async_error = "ncclCommGetAsyncError": fn(RawComm, *mut u32) -> u32;
        get_error_string = "ncclGetErrorString": fn(u32) -> *const c_char;
        get_last_error = "ncclGetLastError": fn(RawComm) -> *const c_char;
        comm_count = "ncclCommCount": fn(RawComm, *mut c_int) -> u32;
        comm_user_rank = "ncclCommUserRank": fn(RawComm, *mut c_int) -> u32;
        /// (send, recv, count, type, op, comm, stream).
        all_reduce = "ncclAllReduce":
            fn(*const c_void, *mut c_void, usize, u32, u32, RawComm, Stream) -> u32;
        /// (send, recv, count, type, root, comm, stream).
        broadcast = "ncclBroadcast":
            fn(*const c_void, *mut c_void, usize, u32, c_int, RawComm, Stream) -> u32;
        /// (send, recv, count, type, op, root, comm, stream).
        reduce = "ncclReduce":
            fn(*const c_void, *mut c_void, usize, u32, u32, c_int, RawComm, Stream) -> u32;
        /// (send, recv, count per rank, type, comm, stream).
        all_gather = "ncclAllGather":
            fn(*const c_void, *mut c_void, usize, u32, RawComm, Stream) -> u32;
        /// (send, recv, count per rank, type, op, comm, stream).
        reduce_scatter = "ncclReduceScatter":
            fn(*const c_void, *mut c_void, usize, u32, u32, RawComm, Stream) -> u32;
        /// (send, count, type, peer, comm, stream).
        send = "ncclSend": fn(*const c_void, usize, u32, c_int, RawComm, Stream) -> u32;
        /// (recv, count, type, peer, comm, stream).
        recv = "ncclRecv": fn(*mut c_void, usize, u32, c_int, RawComm, Stream) -> u32;
        group_start = "ncclGroupStart": fn() -> u32;
        group_end = "ncclGroupEnd": fn() -> u32;
    }
}

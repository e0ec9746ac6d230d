//! RCCL (amd platform) or NCCL (nvidia platform), loaded at run time with a minimal FFI table
//! of our own: the calls below and the enum values they take. RCCL keeps NCCL's API (same
//! names, `hipStream_t` for `cudaStream_t`); the AMD tier checks every symbol against the real
//! librccl and every value against rccl.h.

use std::ffi::{c_char, c_int, c_void, CStr};

use rocm_device::{LibraryStatus, Platform};

use crate::error::{Error, Result};

/// NCCL/RCCL enum values (rccl.h, nccl.h) and the symbols we call.
pub mod abi {
    rocm_device::abi_constants!(TABLE;
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
    /// Every function of the FFI table.
    pub const SYMBOLS: [&str; 19] = [
        "ncclGetVersion",
        "ncclGetUniqueId",
        "ncclCommInitRank",
        "ncclCommDestroy",
        "ncclCommAbort",
        "ncclCommGetAsyncError",
        "ncclGetErrorString",
        "ncclGetLastError",
        "ncclCommCount",
        "ncclCommUserRank",
        "ncclAllReduce",
        "ncclBroadcast",
        "ncclReduce",
        "ncclAllGather",
        "ncclReduceScatter",
        "ncclSend",
        "ncclRecv",
        "ncclGroupStart",
        "ncclGroupEnd",
    ];
}

pub(crate) type RawComm = *mut c_void;
pub(crate) type Stream = *mut c_void;

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

type GetVersion = unsafe extern "C" fn(*mut c_int) -> u32;
type GetUniqueId = unsafe extern "C" fn(*mut UniqueId) -> u32;
type CommInitRank = unsafe extern "C" fn(*mut RawComm, c_int, UniqueId, c_int) -> u32;
type CommFn = unsafe extern "C" fn(RawComm) -> u32;
type CommAsyncError = unsafe extern "C" fn(RawComm, *mut u32) -> u32;
type ErrorString = unsafe extern "C" fn(u32) -> *const c_char;
type LastError = unsafe extern "C" fn(RawComm) -> *const c_char;
type CommInt = unsafe extern "C" fn(RawComm, *mut c_int) -> u32;
type AllReduce =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, u32, u32, RawComm, Stream) -> u32;
type Broadcast =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, u32, c_int, RawComm, Stream) -> u32;
#[allow(clippy::type_complexity)]
type Reduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    u32,
    u32,
    c_int,
    RawComm,
    Stream,
) -> u32;
type AllGather =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, u32, RawComm, Stream) -> u32;
type ReduceScatter =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, u32, u32, RawComm, Stream) -> u32;
type Send = unsafe extern "C" fn(*const c_void, usize, u32, c_int, RawComm, Stream) -> u32;
type Recv = unsafe extern "C" fn(*mut c_void, usize, u32, c_int, RawComm, Stream) -> u32;
type Group = unsafe extern "C" fn() -> u32;

/// The library of a platform: its role, the names tried (unversioned first) and the hint.
fn names(platform: Platform) -> (&'static str, &'static [&'static str], &'static str) {
    match platform {
        Platform::Amd => (
            "RCCL (librccl)",
            &["librccl.so", "librccl.so.1"],
            "install RCCL (the ROCm package rccl, or Debian/Ubuntu librccl1), or set ROCM_PATH",
        ),
        Platform::Nvidia => (
            "NCCL (libnccl)",
            &["libnccl.so.2", "libnccl.so"],
            "install NCCL (the nvidia-nccl-cu13 wheel or the libnccl2 package) and put its lib \
             folder on LD_LIBRARY_PATH",
        ),
    }
}

/// Where the platform's collective library was looked for and found.
pub fn library_status(platform: Platform) -> LibraryStatus {
    let (role, names, hint) = names(platform);
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let dirs = match platform {
        Platform::Amd => rocm_device::rocm_library_dirs(),
        Platform::Nvidia => Vec::new(),
    };
    rocm_device::find_library(role, &names, &dirs, hint)
}

/// The loaded library and its functions.
pub struct CclLib {
    platform: Platform,
    path: String,
    _lib: libloading::Library,
    pub(crate) get_version: GetVersion,
    pub(crate) get_unique_id: GetUniqueId,
    pub(crate) comm_init_rank: CommInitRank,
    pub(crate) comm_destroy: CommFn,
    pub(crate) comm_abort: CommFn,
    pub(crate) comm_get_async_error: CommAsyncError,
    pub(crate) get_error_string: ErrorString,
    pub(crate) get_last_error: LastError,
    pub(crate) comm_count: CommInt,
    pub(crate) comm_user_rank: CommInt,
    pub(crate) all_reduce: AllReduce,
    pub(crate) broadcast: Broadcast,
    pub(crate) reduce: Reduce,
    pub(crate) all_gather: AllGather,
    pub(crate) reduce_scatter: ReduceScatter,
    pub(crate) send: Send,
    pub(crate) recv: Recv,
    pub(crate) group_start: Group,
    pub(crate) group_end: Group,
}

impl std::fmt::Debug for CclLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CclLib({} at {})", self.platform, self.path)
    }
}

impl CclLib {
    /// Loads the platform's library and resolves every symbol of the table.
    pub fn load(platform: Platform) -> Result<Self> {
        let status = library_status(platform);
        status.require()?;
        let path = status.found.unwrap_or_default();
        let (role, _, hint) = names(platform);
        // SAFETY: loading the collective library runs its initialisers, which is what using
        // it requires.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| {
            rocm_device::Error::LibraryMissing {
                library: role,
                tried: format!("{path}: {e}"),
                hint,
            }
        })?;
        fn sym<T: Copy>(lib: &libloading::Library, role: &'static str, name: &str) -> Result<T> {
            // SAFETY: each name is looked up with the signature nccl.h / rccl.h declare for
            // it (the types above); the pointer is used only while `lib` is loaded.
            let s = unsafe { lib.get::<T>(name.as_bytes()) }.map_err(|e| {
                rocm_device::Error::LibraryMissing {
                    library: role,
                    tried: format!("symbol {name}: {e}"),
                    hint: "a newer NCCL/RCCL is needed",
                }
            })?;
            Ok(*s)
        }
        let [get_version, get_unique_id, comm_init_rank, comm_destroy, comm_abort, comm_get_async_error, get_error_string, get_last_error, comm_count, comm_user_rank, all_reduce, broadcast, reduce, all_gather, reduce_scatter, send, recv, group_start, group_end] =
            abi::SYMBOLS;
        Ok(Self {
            platform,
            get_version: sym(&lib, role, get_version)?,
            get_unique_id: sym(&lib, role, get_unique_id)?,
            comm_init_rank: sym(&lib, role, comm_init_rank)?,
            comm_destroy: sym(&lib, role, comm_destroy)?,
            comm_abort: sym(&lib, role, comm_abort)?,
            comm_get_async_error: sym(&lib, role, comm_get_async_error)?,
            get_error_string: sym(&lib, role, get_error_string)?,
            get_last_error: sym(&lib, role, get_last_error)?,
            comm_count: sym(&lib, role, comm_count)?,
            comm_user_rank: sym(&lib, role, comm_user_rank)?,
            all_reduce: sym(&lib, role, all_reduce)?,
            broadcast: sym(&lib, role, broadcast)?,
            reduce: sym(&lib, role, reduce)?,
            all_gather: sym(&lib, role, all_gather)?,
            reduce_scatter: sym(&lib, role, reduce_scatter)?,
            send: sym(&lib, role, send)?,
            recv: sym(&lib, role, recv)?,
            group_start: sym(&lib, role, group_start)?,
            group_end: sym(&lib, role, group_end)?,
            path,
            _lib: lib,
        })
    }

    /// The process's library for `platform`, loaded once.
    pub fn get(platform: Platform) -> Result<&'static CclLib> {
        use std::sync::OnceLock;
        static AMD: OnceLock<std::result::Result<CclLib, String>> = OnceLock::new();
        static NVIDIA: OnceLock<std::result::Result<CclLib, String>> = OnceLock::new();
        let cell = match platform {
            Platform::Amd => &AMD,
            Platform::Nvidia => &NVIDIA,
        };
        match cell.get_or_init(|| CclLib::load(platform).map_err(|e| e.to_string())) {
            Ok(lib) => Ok(lib),
            Err(e) => Err(Error::Unavailable(e.clone())),
        }
    }

    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// The file that was loaded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// NCCL_VERSION_CODE (e.g. 22805 for 2.28.5; RCCL reports the NCCL version it follows).
    pub fn version(&self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer.
        let code = unsafe { (self.get_version)(&mut v) };
        self.check("ncclGetVersion", code, None)?;
        Ok(v)
    }

    /// A fresh unique id (rank 0 makes it; the others receive it through a rendezvous).
    pub fn unique_id(&self) -> Result<UniqueId> {
        let mut id = UniqueId([0; abi::UNIQUE_ID_BYTES]);
        // SAFETY: valid out-pointer to 128 bytes.
        let code = unsafe { (self.get_unique_id)(&mut id) };
        self.check("ncclGetUniqueId", code, None)?;
        Ok(id)
    }

    fn text(p: *const c_char) -> String {
        if p.is_null() {
            return String::new();
        }
        // SAFETY: the library returns NUL-terminated strings it owns.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// `Ok` for ncclSuccess, else the typed error with the library's own words (the code's
    /// name and, with a communicator, its last error message).
    pub(crate) fn check(&self, call: &'static str, code: u32, comm: Option<RawComm>) -> Result<()> {
        if code == abi::NCCL_SUCCESS {
            return Ok(());
        }
        // SAFETY: the error queries accept any code and a live communicator.
        let name = Self::text(unsafe { (self.get_error_string)(code) });
        // The last error of this thread (NCCL documents the handle as unused; may be null).
        let handle = comm.unwrap_or(std::ptr::null_mut());
        // SAFETY: a live communicator handle or null, as the call allows.
        let detail = Self::text(unsafe { (self.get_last_error)(handle) });
        Err(Error::Library {
            library: names(self.platform).0,
            call,
            code,
            name,
            message: detail,
        })
    }
}

//! The one error type of the runtime.

use crate::platform::Platform;

/// Everything that can go wrong in the runtime. Messages name the call, op, sizes and the
/// fix where there is one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A vendor library could not be loaded.
    #[error("{library} could not be loaded ({tried}); {hint}")]
    LibraryMissing {
        library: &'static str,
        tried: String,
        hint: &'static str,
    },
    /// The platform's runtime loaded but reports no usable device.
    #[error("no {platform} device: {detail}")]
    NoDevice { platform: Platform, detail: String },
    /// The nvidia platform was asked for in a build without the `nvidia` feature.
    #[error("the {0} platform is not built in: enable the cargo feature `nvidia` of rocm-device")]
    PlatformNotBuilt(Platform),
    /// `CANDLE_ROCM_PLATFORM` holds something other than `amd` or `nvidia`.
    #[error("CANDLE_ROCM_PLATFORM={0:?} is not a platform: use `amd` or `nvidia`")]
    InvalidPlatform(String),
    /// A device ordinal past the number of devices.
    #[error(
        "device ordinal {ordinal} out of range: the {platform} platform has {count} device(s)"
    )]
    DeviceOutOfRange {
        platform: Platform,
        ordinal: usize,
        count: usize,
    },
    /// A HIP / CUDA driver call returned an error status.
    #[error("{platform} call {call} failed: {name} ({code}): {message}")]
    Driver {
        platform: Platform,
        call: &'static str,
        code: i64,
        name: String,
        message: String,
    },
    /// The device could not provide the memory, even after the pool released its cache.
    #[error(
        "out of device memory on {platform} device {ordinal}: requested {requested} bytes, \
         {free} of {total} bytes free (after releasing {released} cached bytes)"
    )]
    OutOfMemory {
        platform: Platform,
        ordinal: usize,
        requested: usize,
        free: usize,
        total: usize,
        released: usize,
    },
    /// The kernel compiler rejected a module.
    #[error("compiling module `{module}` for {arch} failed:\n{log}")]
    Compile {
        module: String,
        arch: String,
        log: String,
    },
    /// The kernel compiler itself failed (not the source).
    #[error("{compiler} call {call} failed for module `{module}`: {message}")]
    Compiler {
        compiler: &'static str,
        call: &'static str,
        module: String,
        message: String,
    },
    /// A module was loaded but has no function of that name.
    #[error("module `{module}` has no kernel `{function}`")]
    FunctionNotFound { module: String, function: String },
    /// A launch configuration the hardware cannot run.
    #[error("invalid launch of `{function}`: {reason}")]
    InvalidLaunch { function: String, reason: String },
    /// A copy or view whose sizes do not match.
    #[error("{op}: size mismatch: {detail}")]
    SizeMismatch { op: &'static str, detail: String },
    /// A vendor library call (rocBLAS, cuBLAS, MIOpen) returned an error status.
    #[error("{library} call {call} failed: {code} ({message})")]
    Library {
        library: &'static str,
        call: &'static str,
        code: i64,
        message: String,
    },
    /// An op that Candle's CPU backend does not compute for this dtype either.
    #[error("{op}: unsupported dtype {dtype}")]
    UnsupportedDType {
        op: &'static str,
        dtype: crate::DType,
    },
    /// A reduction with no element to pick (min/max/argmin/argmax of an empty tensor).
    #[error("{op}: the tensor is empty")]
    EmptyTensor { op: &'static str },
    /// Operands of one op whose dtypes disagree.
    #[error("{op}: dtype mismatch: {detail}")]
    DTypeMismatch { op: &'static str, detail: String },
    /// Operands of one op whose shapes disagree.
    #[error("{op}: shape mismatch: {detail}")]
    ShapeMismatch { op: &'static str, detail: String },
    /// A parameter of an op outside what it takes (a window, a scale, a softcap).
    #[error("{op}: invalid argument: {detail}")]
    InvalidArgument { op: &'static str, detail: String },
    /// Ids outside the dim they index (checked when `CANDLE_ROCM_CHECK_INDICES=1`; otherwise
    /// such ids read zero or are skipped, and never touch memory out of bounds).
    /// `count` is the number of lookups that met such an id (an index_select id is looked up
    /// once per element it selects).
    #[error("{op}: id {index} is out of range for a dim of size {size} ({count} lookup(s) with an out-of-range id)")]
    IndexOutOfRange {
        op: &'static str,
        index: i64,
        size: usize,
        count: u64,
    },
    /// Work a graph capture cannot take.
    #[error("graph capture: {0}")]
    Capture(String),
    /// A layout the kernels cannot take.
    #[error("invalid layout: {0}")]
    InvalidLayout(String),
    /// Two buffers of different devices (or device handles) in one call.
    #[error("{op}: buffers belong to different devices ({left} and {right})")]
    DeviceMismatch {
        op: &'static str,
        left: String,
        right: String,
    },
    /// Filesystem trouble outside the kernel cache (whose faults only warn).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// The `Error::Library` of a vendor call that returned `code`, with the library's own text for
/// it (`text`, from calls such as `rocblas_status_to_string` or `miopenGetErrorString`).
///
/// # Safety
/// `text` is null or points to a NUL-terminated string alive for the duration of this call.
pub unsafe fn library_error(
    library: &'static str,
    call: &'static str,
    code: i64,
    text: *const std::ffi::c_char,
) -> Error {
    let message = if text.is_null() {
        "unknown status".to_string()
    } else {
        // SAFETY: non-null and NUL-terminated (the caller's contract).
        unsafe { std::ffi::CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    };
    Error::Library {
        library,
        call,
        code,
        message,
    }
}

impl From<crate::kernel::LayoutError> for Error {
    fn from(e: crate::kernel::LayoutError) -> Self {
        Error::InvalidLayout(e.0)
    }
}

impl From<crate::sys::library::LibraryMissing> for Error {
    fn from(e: crate::sys::library::LibraryMissing) -> Self {
        Error::LibraryMissing {
            library: e.library,
            tried: e.tried,
            hint: e.hint,
        }
    }
}

/// The runtime's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

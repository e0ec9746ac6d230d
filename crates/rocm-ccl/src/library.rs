//! RCCL (amd platform) or NCCL (nvidia platform) through their table in `rocm_device::sys`
//! (the same API; the AMD tier checks every symbol against the real librccl and every value
//! against rccl.h): the library loaded once per process and its checked calls.

use std::ffi::{c_char, c_int, CStr};

pub(crate) use rocm_device::sys::nccl::RawComm;
pub use rocm_device::sys::nccl::{abi, Functions, UniqueId};
use rocm_device::{LibraryStatus, Platform};

use crate::error::{Error, Result};

/// Where the platform's collective library was looked for and found.
pub fn library_status(platform: Platform) -> LibraryStatus {
    match platform {
        Platform::Amd => rocm_device::sys::nccl::rccl_library_status(),
        Platform::Nvidia => rocm_device::sys::nccl::nccl_library_status(),
    }
}

/// The platform's collective library and its functions.
pub struct CclLib {
    platform: Platform,
    functions: Functions,
}

impl std::ops::Deref for CclLib {
    type Target = Functions;
    fn deref(&self) -> &Functions {
        &self.functions
    }
}

impl std::fmt::Debug for CclLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CclLib({} at {})", self.platform, self.path())
    }
}

impl CclLib {
    /// Loads the platform's library and resolves every function of the table.
    pub fn load(platform: Platform) -> Result<Self> {
        let functions =
            Functions::load(&library_status(platform)).map_err(rocm_device::Error::from)?;
        Ok(Self {
            platform,
            functions,
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
        self.functions.library().path()
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
            library: self.functions.library().role(),
            call,
            code,
            name,
            message: detail,
        })
    }
}

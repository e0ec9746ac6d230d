//! The two platforms that serve the HIP API, and the thin raw interface both implement.
//!
//! `amd`: libamdhip64 + hiprtc through cubecl-hip-sys (always built).
//! `nvidia`: the CUDA driver + NVRTC through cudarc (cargo feature `nvidia`).
//! Everything above this module is platform-neutral; the HIP and CUDA calls (the runtime's
//! `unsafe` but for the few places the crate's documentation lists) live in the two platform
//! files.

pub(crate) mod amd;
#[cfg(feature = "nvidia")]
pub(crate) mod nvidia;

use std::ffi::c_void;
use std::fmt;

pub(crate) use crate::sys::library::LibraryStatus;

use crate::error::{Error, Result};

/// Which vendor runtime serves the HIP API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Platform {
    /// ROCm: libamdhip64, hiprtc, rocBLAS, MIOpen.
    Amd,
    /// CUDA: the driver API, NVRTC, cuBLAS.
    Nvidia,
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Platform {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "amd" | "rocm" | "hip" => Ok(Platform::Amd),
            "nvidia" | "cuda" => Ok(Platform::Nvidia),
            _ => Err(Error::InvalidPlatform(s.to_string())),
        }
    }
}

impl Platform {
    /// Both platforms, AMD first.
    pub const ALL: [Platform; 2] = [Platform::Amd, Platform::Nvidia];

    /// `amd` or `nvidia`.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Amd => "amd",
            Platform::Nvidia => "nvidia",
        }
    }

    /// Whether this build contains the platform.
    pub fn is_built(self) -> bool {
        match self {
            Platform::Amd => true,
            Platform::Nvidia => cfg!(feature = "nvidia"),
        }
    }

    /// The libraries the platform loads, each found or not (with an install hint).
    pub fn libraries(self) -> Vec<LibraryStatus> {
        match self {
            Platform::Amd => amd::libraries(),
            #[cfg(feature = "nvidia")]
            Platform::Nvidia => nvidia::libraries(),
            #[cfg(not(feature = "nvidia"))]
            Platform::Nvidia => Vec::new(),
        }
    }

    /// Number of devices, or why there are none (missing library, no device, not built).
    pub fn device_count(self) -> Result<usize> {
        match self {
            Platform::Amd => amd::device_count(),
            #[cfg(feature = "nvidia")]
            Platform::Nvidia => nvidia::device_count(),
            #[cfg(not(feature = "nvidia"))]
            Platform::Nvidia => Err(Error::PlatformNotBuilt(self)),
        }
    }

    /// Version of the platform's kernel compiler (hiprtc or NVRTC), part of cache keys.
    pub fn compiler_version(self) -> Result<String> {
        match self {
            Platform::Amd => amd::compiler_version(),
            #[cfg(feature = "nvidia")]
            Platform::Nvidia => nvidia::compiler_version(),
            #[cfg(not(feature = "nvidia"))]
            Platform::Nvidia => Err(Error::PlatformNotBuilt(self)),
        }
    }

    /// Compiles one translation unit for `arch` (a gcnArchName or `sm_XY`) into a loadable
    /// code object (AMD) or cubin (NVIDIA). Needs the compiler library, not a device.
    pub(crate) fn compile(
        self,
        module: &str,
        source: &str,
        arch: &str,
        options: &[String],
    ) -> Result<Vec<u8>> {
        match self {
            Platform::Amd => amd::compile(module, source, arch, options),
            #[cfg(feature = "nvidia")]
            Platform::Nvidia => nvidia::compile(module, source, arch, options),
            #[cfg(not(feature = "nvidia"))]
            Platform::Nvidia => {
                let _ = (module, source, arch, options);
                Err(Error::PlatformNotBuilt(self))
            }
        }
    }

    /// Options every compile of this platform gets (the platform define first).
    pub fn base_compile_options(self, arch: &str) -> Vec<String> {
        match self {
            Platform::Amd => vec![
                "-DCANDLE_ROCM_AMD".into(),
                format!("--offload-arch={arch}"),
                "-O3".into(),
                "-std=c++17".into(),
            ],
            Platform::Nvidia => vec![
                "-DCANDLE_ROCM_NVIDIA".into(),
                format!("--gpu-architecture={arch}"),
                "-std=c++17".into(),
            ],
        }
    }

    pub(crate) fn open(self, ordinal: usize) -> Result<Box<dyn RawDevice>> {
        match self {
            Platform::Amd => Ok(Box::new(amd::HipDevice::open(ordinal)?)),
            #[cfg(feature = "nvidia")]
            Platform::Nvidia => Ok(Box::new(nvidia::CudaDevice::open(ordinal)?)),
            #[cfg(not(feature = "nvidia"))]
            Platform::Nvidia => Err(Error::PlatformNotBuilt(self)),
        }
    }
}

/// The platform `Device::new` uses: the configuration's (`CANDLE_ROCM_PLATFORM`) if set,
/// else amd when a HIP device exists, else nvidia when built and a CUDA device exists, else
/// the amd error.
pub fn selected_platform() -> Result<Platform> {
    platform_of(crate::Config::global()?)
}

/// [`selected_platform`] for a given configuration.
pub fn platform_of(config: &crate::Config) -> Result<Platform> {
    if let Some(p) = config.platform {
        return Ok(p);
    }
    let amd = Platform::Amd.device_count();
    if matches!(amd, Ok(n) if n > 0) {
        return Ok(Platform::Amd);
    }
    if Platform::Nvidia.is_built() && matches!(Platform::Nvidia.device_count(), Ok(n) if n > 0) {
        return Ok(Platform::Nvidia);
    }
    match amd {
        Err(e) => Err(e),
        Ok(_) => Err(Error::NoDevice {
            platform: Platform::Amd,
            detail: "the HIP runtime lists no device".into(),
        }),
    }
}

/// The C strings a runtime compiler takes: source, file name, options.
pub(crate) struct CompileInputs {
    pub source: std::ffi::CString,
    pub name: std::ffi::CString,
    pub options: Vec<std::ffi::CString>,
}

impl CompileInputs {
    pub(crate) fn new(
        compiler: &'static str,
        module: &str,
        source: &str,
        options: &[String],
    ) -> Result<Self> {
        let to_c = |s: &str| {
            std::ffi::CString::new(s).map_err(|_| Error::Compiler {
                compiler,
                call: "create program",
                module: module.to_string(),
                message: "source or option holds a NUL byte".into(),
            })
        };
        Ok(Self {
            source: to_c(source)?,
            name: to_c(&format!("{module}.hip"))?,
            options: options.iter().map(|o| to_c(o)).collect::<Result<_>>()?,
        })
    }

    /// Pointers to the options, valid while `self` lives.
    pub(crate) fn option_ptrs(&self) -> Vec<*const std::ffi::c_char> {
        self.options.iter().map(|o| o.as_ptr()).collect()
    }
}

/// A compiler log buffer as text, without its terminating NULs.
pub(crate) fn log_text(buf: &[u8]) -> String {
    String::from_utf8_lossy(buf)
        .trim_end_matches('\0')
        .to_string()
}

/// What a device is: what its platform reports of it (and, with emulated wave64, what the
/// emulation presents instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub platform: Platform,
    pub name: String,
    /// gcnArchName such as `gfx942:sramecc+:xnack-`, or `sm_90`.
    pub arch: String,
    pub warp_size: u32,
    pub multiprocessor_count: u32,
    pub shared_mem_per_block: usize,
    pub max_threads_per_block: u32,
    pub total_memory: usize,
}

impl DeviceInfo {
    /// The arch without feature flags (`gfx942` for `gfx942:sramecc+:xnack-`).
    pub fn base_arch(&self) -> &str {
        self.arch.split(':').next().unwrap_or(&self.arch)
    }

    /// Whether kernels get compat.h's tile operations on matrix units here (16x16x16 on 16-bit
    /// floats, 16x16x32 on int8): NVIDIA sm_80 and later (mma.sync), CDNA gfx90a / gfx94x /
    /// gfx950 (MFMA), RDNA3 and RDNA4 (WMMA). Matrix kernels are launched only where this holds.
    pub fn matrix_units(&self) -> bool {
        let arch = self.base_arch();
        match self.platform {
            Platform::Nvidia => arch
                .strip_prefix("sm_")
                .and_then(|v| {
                    v.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                        .parse::<u32>()
                        .ok()
                })
                .is_some_and(|v| v >= 80),
            Platform::Amd => {
                matches!(arch, "gfx90a" | "gfx940" | "gfx941" | "gfx942" | "gfx950")
                    || arch.starts_with("gfx11")
                    || arch.starts_with("gfx12")
            }
        }
    }
}

/// Why a raw allocation failed: out of memory is recoverable (the pool frees its cache and
/// retries), anything else is passed on.
#[derive(Debug)]
pub(crate) enum AllocFailure {
    OutOfMemory,
    Other(Error),
}

/// A device address.
pub(crate) type DevicePtr = u64;

/// Declares the driver objects' handles: each its own type over the driver's pointer (as an
/// integer), so one kind cannot be passed where another is taken.
macro_rules! handles {
    ($($(#[$meta:meta])* $name:ident),* $(,)?) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) struct $name(pub(crate) usize);

        impl std::fmt::LowerHex for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::LowerHex::fmt(&self.0, f)
            }
        }
    )*};
}

handles!(
    /// A stream.
    StreamHandle,
    /// An event.
    EventHandle,
    /// A loaded code object.
    ModuleHandle,
    /// A kernel of a loaded module.
    FunctionHandle,
    /// A captured graph.
    GraphHandle,
    /// An executable instance of a graph.
    GraphExecHandle,
    /// Page-locked host memory.
    HostPtr,
);

/// The raw, per-device interface each platform implements. Streams, events, modules and
/// functions are opaque handles owned by the safe wrappers above this layer.
pub(crate) trait RawDevice: Send + Sync {
    fn platform(&self) -> Platform;
    fn ordinal(&self) -> usize;
    fn props(&self) -> &DeviceInfo;
    /// Makes this device current on the calling thread (for vendor libraries such as the BLAS).
    fn bind_thread(&self) -> Result<()>;
    /// (free, total) bytes.
    fn mem_info(&self) -> Result<(usize, usize)>;
    fn malloc(&self, bytes: usize) -> Result<DevicePtr, AllocFailure>;
    fn free(&self, ptr: DevicePtr) -> Result<()>;

    fn stream_create(&self) -> Result<StreamHandle>;
    fn stream_destroy(&self, stream: StreamHandle) -> Result<()>;
    fn stream_synchronize(&self, stream: StreamHandle) -> Result<()>;

    /// Host to device on `stream`; returns once `src` may be reused.
    fn memcpy_htod(&self, dst: DevicePtr, src: &[u8], stream: StreamHandle) -> Result<()>;
    /// Page-locked host memory of `bytes` > 0 bytes: the source of copies that the host does
    /// not wait for.
    fn host_alloc(&self, bytes: usize) -> Result<HostPtr, AllocFailure>;
    fn host_free(&self, ptr: HostPtr) -> Result<()>;
    /// Host to device on `stream`, returning at once.
    ///
    /// # Safety
    /// `src` holds `bytes` bytes of memory from [`RawDevice::host_alloc`], and neither is
    /// written nor freed until the stream has passed this copy.
    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: HostPtr,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()>;
    /// Device to host on `stream`; returns once `dst` holds the data.
    fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr, stream: StreamHandle) -> Result<()>;
    fn memcpy_dtod(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()>;
    fn memset_d8(
        &self,
        dst: DevicePtr,
        value: u8,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()>;

    fn event_create(&self) -> Result<EventHandle>;
    fn event_record(&self, event: EventHandle, stream: StreamHandle) -> Result<()>;
    fn event_synchronize(&self, event: EventHandle) -> Result<()>;
    /// `Ok(true)` once the event is reached, `Ok(false)` while work before it runs.
    fn event_query(&self, event: EventHandle) -> Result<bool>;
    fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32>;
    fn event_destroy(&self, event: EventHandle) -> Result<()>;

    fn module_load(&self, image: &[u8]) -> Result<ModuleHandle>;
    fn module_unload(&self, module: ModuleHandle) -> Result<()>;
    /// `Ok(None)` when the module has no such function.
    fn module_function(&self, module: ModuleHandle, name: &str) -> Result<Option<FunctionHandle>>;
    /// Blocks of `function` one multiprocessor (compute unit) holds at once with
    /// `block_threads` threads and `shared_mem_bytes` of dynamic shared memory each: what its
    /// registers and shared memory allow.
    fn max_active_blocks(
        &self,
        function: FunctionHandle,
        block_threads: u32,
        shared_mem_bytes: u32,
    ) -> Result<u32>;
    /// `params[i]` points at the i-th argument's value.
    fn launch(
        &self,
        function: FunctionHandle,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: StreamHandle,
        params: &mut [*mut c_void],
    ) -> Result<()>;

    /// Starts recording `stream`'s work into a graph instead of running it (relaxed mode:
    /// allocations may still reach the driver; a synchronizing call ends the capture with
    /// an error).
    fn begin_capture(&self, stream: StreamHandle) -> Result<()>;
    /// Ends the recording; the graph holds what was queued since `begin_capture`.
    fn end_capture(&self, stream: StreamHandle) -> Result<GraphHandle>;
    /// An executable instance of `graph`.
    fn graph_instantiate(&self, graph: GraphHandle) -> Result<GraphExecHandle>;
    /// Queues one replay of an executable graph on `stream`.
    fn graph_launch(&self, exec: GraphExecHandle, stream: StreamHandle) -> Result<()>;
    fn graph_exec_destroy(&self, exec: GraphExecHandle) -> Result<()>;
    fn graph_destroy(&self, graph: GraphHandle) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_names_parse_both_ways() {
        for p in Platform::ALL {
            assert_eq!(p.as_str().parse::<Platform>().ok(), Some(p));
        }
        assert_eq!("CUDA".parse::<Platform>().ok(), Some(Platform::Nvidia));
        let err = "metal".parse::<Platform>().unwrap_err().to_string();
        assert!(err.contains("\"metal\"") && err.contains("amd"), "{err}");
    }

    #[test]
    fn compile_options_carry_the_platform_define_and_arch() {
        let amd = Platform::Amd.base_compile_options("gfx942:sramecc+:xnack-");
        assert_eq!(amd[0], "-DCANDLE_ROCM_AMD");
        assert!(amd.contains(&"--offload-arch=gfx942:sramecc+:xnack-".to_string()));
        let nv = Platform::Nvidia.base_compile_options("sm_90");
        assert_eq!(nv[0], "-DCANDLE_ROCM_NVIDIA");
        assert!(nv.contains(&"--gpu-architecture=sm_90".to_string()));
    }

    #[test]
    fn matrix_units_by_arch() {
        let info = |platform, arch: &str| DeviceInfo {
            ordinal: 0,
            platform,
            name: String::new(),
            arch: arch.to_string(),
            warp_size: 32,
            multiprocessor_count: 1,
            shared_mem_per_block: 0,
            max_threads_per_block: 1024,
            total_memory: 0,
        };
        for (platform, arch, has) in [
            (Platform::Nvidia, "sm_90", true),
            (Platform::Nvidia, "sm_90a", true),
            (Platform::Nvidia, "sm_80", true),
            (Platform::Nvidia, "sm_75", false),
            (Platform::Amd, "gfx942:sramecc+:xnack-", true),
            (Platform::Amd, "gfx90a", true),
            (Platform::Amd, "gfx950", true),
            (Platform::Amd, "gfx1100", true),
            (Platform::Amd, "gfx1151", true),
            (Platform::Amd, "gfx1201", true),
            (Platform::Amd, "gfx1030", false),
            (Platform::Amd, "gfx908", false),
        ] {
            assert_eq!(info(platform, arch).matrix_units(), has, "{arch}");
        }
    }
}

//! The HIP runtime and hiprtc. Their functions come from cubecl-hip-sys's bindings, which load
//! libamdhip64 and libhiprtc themselves ([`sys`]); this module holds what candle-rocm adds:
//! where the libraries are looked for, and the ABI facts the amd platform relies on. Only
//! calls whose ABI is stable from ROCm 6.2 on are used (hipGetDevicePropertiesR0600,
//! hipMalloc, hipModule*, streams, events, graphs).

pub use cubecl_hip_sys as sys;

use crate::sys::library::{find_library, rocm_library_dirs, LibraryStatus};

/// How to install the HIP runtime and hiprtc.
pub const HINT: &str = "install ROCm 6.2 or newer (libamdhip64, libhiprtc; Debian/Ubuntu: \
    apt install libamdhip64-dev libhiprtc-dev or the ROCm packages), or set ROCM_PATH";

/// The HIP runtime and hiprtc, by the names cubecl-hip-sys loads.
pub fn library_status() -> Vec<LibraryStatus> {
    let dirs = rocm_library_dirs();
    vec![
        find_library(
            "HIP runtime (libamdhip64)",
            &["libamdhip64.so".into()],
            &dirs,
            HINT,
        ),
        find_library("hiprtc (libhiprtc)", &["libhiprtc.so".into()], &dirs, HINT),
    ]
}

/// Enum values passed to or compared with HIP, and the `hipDeviceProp_tR0600` fields read;
/// the AMD tier compares each with the ROCm headers.
pub mod abi {
    use crate::abi::AbiValue;

    crate::abi_constants!(TABLE;
        HIP_SUCCESS: u32 = 0 => "hipSuccess";
        HIP_ERROR_OUT_OF_MEMORY: u32 = 2 => "hipErrorOutOfMemory";
        HIP_ERROR_NO_DEVICE: u32 = 100 => "hipErrorNoDevice";
        HIP_ERROR_NOT_FOUND: u32 = 500 => "hipErrorNotFound";
        HIP_ERROR_NOT_READY: u32 = 600 => "hipErrorNotReady";
        HIP_STREAM_NON_BLOCKING: u32 = 1 => "hipStreamNonBlocking";
        HIP_HOST_MALLOC_DEFAULT: u32 = 0 => "hipHostMallocDefault";
        HIP_STREAM_CAPTURE_MODE_RELAXED: u32 = 2 => "hipStreamCaptureModeRelaxed";
        HIPRTC_SUCCESS: u32 = 0 => "HIPRTC_SUCCESS";
    );

    /// Size and offsets of the hipDeviceProp_tR0600 fields we read.
    pub const DEVICE_PROP_LAYOUT: &[AbiValue] = crate::struct_layout!(
        cubecl_hip_sys::hipDeviceProp_tR0600,
        "hipDeviceProp_tR0600",
        [
            name => "name",
            totalGlobalMem => "totalGlobalMem",
            sharedMemPerBlock => "sharedMemPerBlock",
            warpSize => "warpSize",
            maxThreadsPerBlock => "maxThreadsPerBlock",
            multiProcessorCount => "multiProcessorCount",
            gcnArchName => "gcnArchName",
        ]
    );

    /// Every table of the HIP runtime.
    pub const TABLES: &[&[AbiValue]] = &[TABLE, DEVICE_PROP_LAYOUT];
    /// The headers the tables' expressions need.
    pub const HEADERS: &[&str] = &["hip/hip_runtime_api.h", "hip/hiprtc.h"];
}

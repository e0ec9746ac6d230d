//! rocm-device: the runtime every candle-rocm op crate builds on.
//!
//! A [`Device`] serves the HIP programming model from one of two platforms chosen at run
//! time: `amd` (libamdhip64 + hiprtc, the product) or `nvidia` (CUDA driver + NVRTC, cargo
//! feature `nvidia`, so the same kernels run on NVIDIA GPUs). Nothing is linked at build
//! time; a missing library is a typed error naming it and how to install it.
//!
//! - devices: [`Device::new`], [`enumerate`], [`DeviceInfo`]
//! - memory: [`Buffer`], [`DeviceBuffer`], a caching pool per device ([`MemoryStats`])
//! - ordering and timing: one [`Stream`] per device, [`Event`]
//! - kernels: what a module is ([`kernel::KernelModule`]: source text, entry points, typed
//!   parameters, headers), compiled on first use and cached on disk ([`compile`]), resolved
//!   by (module, op, dtype) through [`Device::kernel`]; [`LaunchArgs`] and [`LaunchConfig`]
//!   for launches. The runtime knows no source: the table of modules is `rocm-kernels`', which
//!   hands them in (and, through [`Device::set_companions`], what to compile in the
//!   background)
//! - operands: [`Operand`] (buffer, dtype, layout) and [`Contiguous`] (rocm-elementwise's
//!   `OperandCopy` makes any operand contiguous with the table's copies)
//! - configuration: [`Config`], read from the environment once
//!
//! Where its `unsafe` is (each block with a `// SAFETY:` line): the calls into HIP and CUDA
//! (`platform/amd.rs`, `platform/nvidia.rs`, and `platform/mod.rs`'s one unsafe copy
//! signature), loading libraries and resolving their symbols (`sys/library.rs`), a library's
//! error text read as a C string (`error.rs`), page-locked staging memory seen as a byte slice
//! (`device/staging.rs`) and the exit hook that stops background compiles (`device/jit.rs`).
//! Outside this crate, only the FFI layers of the vendor libraries have `unsafe`: rocm-blas
//! (`rocblas.rs`, `cublas.rs` and the gemm call in `lib.rs`), rocm-dnn (`miopen.rs`) and rocm-ccl
//! (`library.rs`, `comm.rs`).

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod code_object;
pub mod compile;
pub mod config;
mod device;
mod error;
pub mod host_time;
pub mod kernel;
mod launch;
mod operand;
mod platform;
mod pool;
pub mod sys;
mod tensor;

pub use config::Config;
pub use device::{
    Buffer, Companions, CompileStats, Device, DeviceBuffer, DeviceInfo, DeviceRepr, Event,
    Function, Graph, Module, Stream, Tickets, WAVE64_MAX_WAVES,
};
pub use error::{library_error, Error, Result};
pub use launch::{
    KernelLayout, LaunchArgs, LaunchConfig, DEFAULT_BLOCK, GRID_X_CAP, MAX_ARGS, MAX_DIMS,
    MAX_GRID_YZ,
};
pub use operand::{require_float, same_dtype, Contiguous, Operand};
pub use platform::{platform_of, selected_platform, Platform};
pub use sys::abi;
pub use sys::library::{find_library, rocm_library_dirs, Library, LibraryMissing, LibraryStatus};

pub use pool::{size_class, MemoryStats};
pub use tensor::{DType, Layout, Scalar};

/// What one platform offers on this machine.
#[derive(Debug)]
pub struct PlatformReport {
    pub platform: Platform,
    /// Whether this build contains it (the nvidia platform needs the `nvidia` feature).
    pub built: bool,
    pub libraries: Vec<LibraryStatus>,
    /// Its devices, or why there are none.
    pub devices: Result<Vec<DeviceInfo>>,
}

/// Every platform of this build, its libraries and devices.
pub fn enumerate() -> Vec<PlatformReport> {
    Platform::ALL
        .into_iter()
        .map(|platform| {
            let built = platform.is_built();
            let devices = if built {
                platform.device_count().and_then(|n| {
                    (0..n)
                        .map(|i| Device::with_platform(platform, i).map(|d| d.info().clone()))
                        .collect()
                })
            } else {
                Err(Error::PlatformNotBuilt(platform))
            };
            PlatformReport {
                platform,
                built,
                libraries: platform.libraries(),
                devices,
            }
        })
        .collect()
}

//! `libamdhip64.so` served by the ISA emulator: the HIP runtime entry points the amd platform
//! calls (rocm-device's `platform/amd.rs`, the same list the `--amd-shim` HIP shim exports),
//! over [`amdgpu_emu`]. With this library under `$ROCM_PATH/lib` beside ROCm's real
//! `libhiprtc.so`, the amd platform's host code runs unchanged: hiprtc compiles for the
//! emulated device's `gcnArchName`, and the code objects it makes execute as AMD machine
//! code on the CPU (gfx942 with 64-lane waves by default, gfx1100 with `CANDLE_ROCM_EMU_ARCH`).
//!
//! Every call takes the one device lock; work runs when it is enqueued ([`runtime`]). A
//! kernel the emulator cannot finish (an instruction it lacks, an access outside every
//! allocation, a barrier that cannot complete) fails its launch with the emulator's message,
//! which `hipGetErrorString` returns and stderr shows.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod runtime;

mod api;

pub use runtime::{Code, DeviceConfig, Failure, Runtime};

//! The lowest layer of the runtime: the vendor libraries as they are loaded at run time.
//!
//! - [`library`]: one loader. A library is looked for by its names under the ROCm folders and
//!   then through the system loader ([`find_library`]); a missing library or symbol is a typed
//!   [`LibraryMissing`] naming it and how to install it. [`ffi_table!`] declares a table of
//!   functions once: its fields, its symbol list (which the AMD tier resolves in the real
//!   libraries) and the code that resolves them together.
//! - [`abi`]: enum values and struct layouts declared once with the C expression that gives
//!   them in the ROCm headers; the AMD tier's probe checks every one.
//! - One module per library: [`hip`] (the runtime and hiprtc through cubecl-hip-sys's own
//!   loader; the ABI facts the amd platform relies on), [`rocblas`], [`miopen`], [`nccl`]
//!   (RCCL on the amd platform, NCCL on the nvidia one: the same API).
//!
//! Nothing here checks a call's status or owns a handle: the checked calls and safe handles
//! are above it (the platforms and the device of this crate; rocm-blas, rocm-dnn, rocm-ccl
//! for their libraries). The CUDA counterparts come from cudarc, which is built the same way.

pub mod abi;
pub mod hip;
pub mod library;
pub mod miopen;
pub mod nccl;
pub mod rocblas;

/// The headers every ABI table of this crate needs, for the AMD tier's probe.
pub fn all_headers() -> Vec<&'static str> {
    [
        hip::abi::HEADERS,
        rocblas::abi::HEADERS,
        miopen::abi::HEADERS,
        nccl::abi::HEADERS,
    ]
    .concat()
}

/// Every ABI table of this crate, for the AMD tier's probe and its comparison.
pub fn all_tables() -> Vec<&'static [abi::AbiValue]> {
    [
        hip::abi::TABLES,
        rocblas::abi::TABLES,
        miopen::abi::TABLES,
        nccl::abi::TABLES,
    ]
    .concat()
}

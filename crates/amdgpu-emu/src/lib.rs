//! An emulator of AMD GPUs' machine code, for tests: it reads the code objects hiprtc makes
//! (ELF64, `EM_AMDGPU`) for RDNA3 (gfx1100, wave32) and CDNA3 (gfx942, wave64), lists their
//! kernels with their descriptors and argument layouts (the metadata note, code object v5's
//! hidden arguments included), decodes their instructions ([`decode`]) as llvm-objdump does,
//! and runs kernels ([`exec::dispatch`]) on an emulated device memory ([`exec::Memory`]).
//!
//! Everything here is written from AMD's and LLVM's documentation (LLVM's `AMDGPUUsage`, the
//! RDNA3 and CDNA3 instruction set references) and checked against the real compiler's
//! output; no other emulator's code is used.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod code_object;
pub mod decode;
pub mod elf;
pub mod exec;
pub mod msgpack;

pub use code_object::{
    Arch, ArgKind, CodeObject, KernelArg, KernelDescriptor, KernelInfo, UserSgpr,
};

/// What can go wrong reading or decoding a code object.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("code object: {0}")]
    Malformed(String),
    #[error("code object metadata: {0}")]
    Metadata(String),
    #[error("code object for `{0}`: not an architecture this emulator knows (gfx1100, gfx942)")]
    UnsupportedArch(String),
    #[error("{arch}: cannot decode the instruction at {address:#x} ({words})")]
    Undecodable {
        arch: &'static str,
        address: u64,
        words: String,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

//! Helpers shared by the tier tests.
#![allow(dead_code)]

/// Whether `image` is an ELF object (hiprtc code objects and NVRTC cubins both are).
pub fn is_elf(image: &[u8]) -> bool {
    image.starts_with(b"\x7fELF")
}

/// The modules a compile tier compiles: all, or those named in `CANDLE_ROCM_TIER_MODULES`
/// (comma list; for iterating on one module).
pub fn tier_modules() -> Vec<&'static rocm_kernels::KernelModule> {
    let only = std::env::var("CANDLE_ROCM_TIER_MODULES").unwrap_or_default();
    rocm_kernels::ALL_MODULES
        .iter()
        .copied()
        .filter(|m| only.is_empty() || only.split(',').any(|n| n == m.name))
        .collect()
}

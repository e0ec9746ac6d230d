//! Helpers shared by the tier tests.
#![allow(dead_code)]

/// Whether `image` is an ELF object (hiprtc code objects and NVRTC cubins both are).
pub fn is_elf(image: &[u8]) -> bool {
    image.starts_with(b"\x7fELF")
}

/// Entry points of `module` that do not occur as symbol names in `image`.
pub fn missing_symbols(module: &rocm_device::kernels::KernelModule, image: &[u8]) -> Vec<String> {
    module
        .entry_points()
        .filter(|name| {
            let needle: Vec<u8> = name.bytes().chain(std::iter::once(0)).collect();
            !image.windows(needle.len()).any(|w| w == needle.as_slice())
        })
        .collect()
}

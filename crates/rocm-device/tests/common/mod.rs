//! Helpers shared by the tier tests.
#![allow(dead_code)]

/// Whether `image` is an ELF object (hiprtc code objects and NVRTC cubins both are).
pub fn is_elf(image: &[u8]) -> bool {
    image.starts_with(b"\x7fELF")
}

//! The AMD tier of the emulator (inside the ROCm chroot): the code objects hiprtc makes of
//! every kernel module for gfx1100 and gfx942 load; each lists exactly its table's kernels,
//! each with a descriptor whose entry is in `.text`, the wavefront size of its arch, and
//! arguments (the hidden ones of code object v5 where the kernel reads them) inside its
//! argument segment.
//!
//! The code objects: `CANDLE_ROCM_CODE_OBJECT_DIR/<arch>/<module>.co` where the tier's earlier
//! step (rocm-device's) wrote them, else compiled here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use amdgpu_emu::{Arch, ArgKind, CodeObject};
use rocm_device::compile::compile_for_arch;
use rocm_device::Platform;

/// The architectures the emulator runs.
const ARCHS: [Arch; 2] = [Arch::Gfx1100, Arch::Gfx942];

fn modules() -> Vec<&'static rocm_kernels::KernelModule> {
    let only = std::env::var("CANDLE_ROCM_TIER_MODULES").unwrap_or_default();
    rocm_kernels::ALL_MODULES
        .iter()
        .copied()
        .filter(|m| only.is_empty() || only.split(',').any(|n| n == m.name))
        .collect()
}

/// The code object of `module` for `arch`.
fn code_object(module: &rocm_kernels::KernelModule, arch: Arch) -> Vec<u8> {
    if let Some(dir) = std::env::var_os("CANDLE_ROCM_CODE_OBJECT_DIR") {
        let path = std::path::Path::new(&dir)
            .join(arch.name())
            .join(format!("{}.co", module.name));
        if let Ok(bytes) = std::fs::read(&path) {
            return bytes;
        }
    }
    compile_for_arch(Platform::Amd, module, arch.name(), &[], None)
        .unwrap_or_else(|e| panic!("{} for {}: {e}", module.name, arch.name()))
        .image
}

#[test]
fn every_module_loads_with_its_kernels_descriptors_and_arguments() {
    let (mut kernels, mut with_hidden) = (0, 0);
    for arch in ARCHS {
        for module in modules() {
            let what = format!("{} for {}", module.name, arch.name());
            let co = CodeObject::parse(&code_object(module, arch))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(co.arch, arch, "{what}: {}", co.target);
            let mut listed: Vec<String> = module.entry_points().collect();
            let mut found: Vec<String> = co.kernels.iter().map(|k| k.name.clone()).collect();
            listed.sort();
            found.sort();
            assert_eq!(found, listed, "{what}: kernels against the table");
            for k in &co.kernels {
                let what = format!("{what}: {}", k.name);
                assert!(
                    (co.text.0..co.text.1).contains(&k.entry),
                    "{what}: entry {:#x} outside .text {:x?}",
                    k.entry,
                    co.text
                );
                let wave = if k.descriptor.wave32() { 32 } else { 64 };
                assert_eq!(
                    wave, k.wavefront_size,
                    "{what}: descriptor against metadata"
                );
                match arch {
                    Arch::Gfx1100 => assert_eq!(wave, 32, "{what}"),
                    Arch::Gfx942 => assert_eq!(wave, 64, "{what}"),
                }
                assert_eq!(
                    k.descriptor.kernarg_size, k.kernarg_segment_size,
                    "{what}: kernarg sizes"
                );
                if k.hidden("block_count_x").is_some() {
                    with_hidden += 1;
                }
                for a in &k.args {
                    assert!(
                        a.offset + a.size <= k.kernarg_segment_size,
                        "{what}: {a:?} past the segment"
                    );
                    assert!(!matches!(a.kind, ArgKind::Other(_)), "{what}: {a:?}");
                }
                kernels += 1;
            }
        }
    }
    println!(
        "AMD tier: {kernels} kernels of gfx1100 and gfx942 code objects loaded ({with_hidden} \
         with hidden arguments)"
    );
    assert!(with_hidden > 0);
}

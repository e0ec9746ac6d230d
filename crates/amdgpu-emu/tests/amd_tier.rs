//! The AMD tier of the emulator (inside the ROCm chroot): the code objects hiprtc makes of
//! every kernel module for gfx1100 and gfx942 load; each lists exactly its table's kernels,
//! each with a descriptor whose entry is in `.text`, the wavefront size of its arch, and
//! arguments (the hidden ones of code object v5 where the kernel reads them) inside its
//! argument segment.
//!
//! Every instruction of every code object decodes as llvm-objdump decodes it: the same
//! instruction boundaries (lengths, literal constants included) and the same mnemonic.
//!
//! The code objects: `CANDLE_ROCM_CODE_OBJECT_DIR/<arch>/<module>.co` where the tier's earlier
//! step (rocm-device's) wrote them, else compiled here. llvm-objdump: `LLVM_OBJDUMP`, else
//! LLVM 21's (the chroot's), else ROCm's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use amdgpu_emu::decode::{decode_all, Instruction};
use amdgpu_emu::{Arch, ArgKind, CodeObject};
use rocm_device::compile::compile_for_arch;
use rocm_device::Platform;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The code object of `module` for `arch`: its file (written here where it was compiled here).
fn code_object(module: &rocm_kernels::KernelModule, arch: Arch) -> PathBuf {
    if let Some(dir) = std::env::var_os("CANDLE_ROCM_CODE_OBJECT_DIR") {
        let path = Path::new(&dir)
            .join(arch.name())
            .join(format!("{}.co", module.name));
        if path.is_file() {
            return path;
        }
    }
    let image = compile_for_arch(Platform::Amd, module, arch.name(), &[], None)
        .unwrap_or_else(|e| panic!("{} for {}: {e}", module.name, arch.name()))
        .image;
    let dir = std::env::temp_dir()
        .join("amdgpu-emu-code-objects")
        .join(arch.name());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.co", module.name));
    std::fs::write(&path, image).unwrap();
    path
}

fn llvm_objdump() -> PathBuf {
    if let Some(p) = std::env::var_os("LLVM_OBJDUMP") {
        return p.into();
    }
    let rocm =
        std::env::var_os("ROCM_PATH").map_or_else(|| PathBuf::from("/opt/rocm"), PathBuf::from);
    [
        PathBuf::from("/usr/bin/llvm-objdump-21"),
        rocm.join("llvm/bin/llvm-objdump"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .expect(
        "llvm-objdump: none found (LLVM_OBJDUMP, /usr/bin/llvm-objdump-21, $ROCM_PATH/llvm/bin)",
    )
}

/// One line of llvm-objdump's disassembly: (address, mnemonic, second mnemonic of a VOPD
/// pair, length in bytes).
fn objdump_lines(path: &Path, arch: Arch) -> Vec<(u64, String, Option<String>, usize)> {
    let out = Command::new(llvm_objdump())
        .args(["-d", &format!("--mcpu={}", arch.name())])
        .arg(path)
        .output()
        .expect("running llvm-objdump");
    assert!(
        out.status.success(),
        "llvm-objdump {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.starts_with('\t'))
        .filter_map(|l| {
            let (asm, comment) = l.split_once("//")?;
            let (addr, words) = comment.trim().split_once(": ")?;
            let address = u64::from_str_radix(addr.trim(), 16).ok()?;
            let mnemonic = asm.split_whitespace().next()?.to_string();
            let second = asm
                .split_once("::")
                .and_then(|(_, y)| y.split_whitespace().next())
                .map(String::from);
            Some((
                address,
                mnemonic,
                second,
                // the words, then a branch's target label
                4 * words
                    .split_whitespace()
                    .take_while(|w| w.len() == 8 && u32::from_str_radix(w, 16).is_ok())
                    .count(),
            ))
        })
        .collect()
}

#[test]
fn every_module_loads_with_its_kernels_descriptors_and_arguments() {
    let (mut kernels, mut with_hidden) = (0, 0);
    for arch in ARCHS {
        for module in modules() {
            let what = format!("{} for {}", module.name, arch.name());
            let co = CodeObject::parse(&std::fs::read(code_object(module, arch)).unwrap())
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

#[test]
fn every_instruction_decodes_as_llvm_objdump_decodes_it() {
    let (mut total, mut differ) = (0usize, Vec::new());
    for arch in ARCHS {
        for module in modules() {
            let path = code_object(module, arch);
            let co = CodeObject::parse(&std::fs::read(&path).unwrap()).unwrap();
            let text = &co.image[co.text.0 as usize..co.text.1 as usize];
            let ours: HashMap<u64, Instruction> = decode_all(arch, text, co.text.0)
                .unwrap_or_else(|e| panic!("{} for {}: {e}", module.name, arch.name()))
                .into_iter()
                .map(|i| (i.address, i))
                .collect();
            for (address, mnemonic, second, len) in objdump_lines(&path, arch) {
                total += 1;
                let agrees = ours.get(&address).is_some_and(|i| {
                    i.mnemonic == mnemonic && i.len == len && i.second.map(String::from) == second
                });
                if !agrees && differ.len() < 20 {
                    differ.push(format!(
                        "{} {} {address:#x}: llvm-objdump {mnemonic} {second:?} ({len} bytes), ours {:?}",
                        arch.name(),
                        module.name,
                        ours.get(&address).map(|i| (i.mnemonic, i.second, i.len))
                    ));
                }
            }
        }
    }
    println!("AMD tier: {total} instructions of gfx1100 and gfx942 decoded as llvm-objdump decodes them ({} differ)", differ.len());
    assert!(total > 1_000_000 || std::env::var_os("CANDLE_ROCM_TIER_MODULES").is_some());
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

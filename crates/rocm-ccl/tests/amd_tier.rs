//! The AMD tier of rocm-ccl: run by `cargo xtask test` inside the ROCm chroot (or natively on
//! a ROCm machine). Every symbol of our RCCL table is exported by the real librccl, and every
//! enum value we pass equals rccl.h's (printed by the probe xtask builds against the header).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_ccl::library::{abi, Functions};
use rocm_device::Platform;

/// The RCCL library file: the loader's pick where it loads, else the chroot's unpacked copy.
fn rccl_file() -> std::path::PathBuf {
    let status = rocm_ccl::library_status(Platform::Amd);
    if let Some(found) = status.found {
        if found.starts_with('/') {
            return found.into();
        }
    }
    let dirs = rocm_device::rocm_library_dirs()
        .into_iter()
        .chain([std::path::PathBuf::from("/usr/lib/x86_64-linux-gnu")]);
    dirs.flat_map(|d| [d.join("librccl.so.1"), d.join("librccl.so")])
        .find(|p| p.exists())
        .expect("librccl.so.1 under ROCm's or the system's library folder")
}

#[test]
fn every_rccl_symbol_of_the_table_is_exported() {
    let path = rccl_file();
    let image = std::fs::read(&path).unwrap();
    let exported = rocm_device::code_object::kernel_symbols(&image).unwrap();
    let missing: Vec<&str> = Functions::SYMBOLS
        .iter()
        .copied()
        .filter(|s| exported.binary_search(&s.to_string()).is_err())
        .collect();
    assert!(missing.is_empty(), "{} lacks {missing:?}", path.display());
    println!(
        "AMD tier: {} RCCL symbols exported by {}",
        Functions::SYMBOLS.len(),
        path.display()
    );
}

#[test]
fn rccl_enum_values_match_the_header() {
    let path = std::env::var("CANDLE_ROCM_ABI_PROBE")
        .expect("CANDLE_ROCM_ABI_PROBE names the probe output");
    let text = std::fs::read_to_string(path).expect("probe output readable");
    let checked = rocm_device::abi::check_against_probe(&[abi::TABLE], &text)
        .unwrap_or_else(|problems| panic!("{}", problems.join("\n")));
    println!("AMD tier: {checked} RCCL enum values equal the header's");
}

#[test]
fn rccl_loads_on_a_rocm_machine_or_its_absence_is_a_typed_error() {
    match std::env::var("CANDLE_ROCM_AMD_TIER_EXPECT").as_deref() {
        Ok("device") => {
            let lib = rocm_ccl::CclLib::load(Platform::Amd).expect("RCCL loads with every symbol");
            println!("{lib:?}, NCCL version code {}", lib.version().unwrap());
        }
        // The chroot's RCCL is unpacked without the HIP 5 runtime it links: loading it must
        // fail with an error naming RCCL, not crash.
        Ok("no-device") => {
            let err = rocm_ccl::CclLib::load(Platform::Amd)
                .unwrap_err()
                .to_string();
            assert!(err.contains("RCCL (librccl)"), "{err}");
            println!("AMD tier: RCCL without its runtime is reported: {err}");
        }
        other => panic!("CANDLE_ROCM_AMD_TIER_EXPECT must be device or no-device, got {other:?}"),
    }
}

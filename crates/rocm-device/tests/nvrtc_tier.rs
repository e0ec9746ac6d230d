//! The NVRTC compile tier: every kernel module compiles for sm_90 through NVRTC (no GPU
//! needed). `cargo xtask test` provides NVRTC from the nvidia-cuda-nvrtc wheel.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(feature = "nvidia")]

mod common;

/// The modules to compile: all, or those named in `CANDLE_ROCM_TIER_MODULES` (comma list).
fn modules() -> Vec<&'static kernels::KernelModule> {
    let only = std::env::var("CANDLE_ROCM_TIER_MODULES").unwrap_or_default();
    kernels::ALL_MODULES
        .iter()
        .copied()
        .filter(|m| only.is_empty() || only.split(',').any(|n| n == m.name))
        .collect()
}

use rocm_device::{compile::compile_for_arch, kernels, Platform};

#[test]
#[ignore = "NVRTC tier: needs libnvrtc (cargo xtask test installs it)"]
fn every_module_compiles_through_nvrtc_for_sm_90() {
    let version = Platform::Nvidia
        .compiler_version()
        .expect("NVRTC must load in this tier");
    println!("compiler: {version}");
    for module in modules() {
        let compiled = compile_for_arch(Platform::Nvidia, module, "sm_90", &[], None)
            .unwrap_or_else(|e| panic!("{}: {e}", module.name));
        assert!(
            common::is_elf(&compiled.image),
            "{}: not a cubin",
            module.name
        );
        let missing = common::missing_symbols(module, &compiled.image);
        assert!(missing.is_empty(), "{} lacks {missing:?}", module.name);
        println!(
            "NVRTC tier: sm_90 {:10} {:4} entry points {:8} bytes {:6.0} ms",
            module.name,
            module.entry_points().count(),
            compiled.image.len(),
            compiled.elapsed.as_secs_f64() * 1e3
        );
    }
}

#[test]
#[ignore = "NVRTC tier: needs libnvrtc (cargo xtask test installs it)"]
fn one_dtype_variants_compile_through_nvrtc() {
    for module in modules() {
        for dtype in module.filter_keys() {
            let defines = vec![
                "-DCANDLE_ROCM_DTYPE_FILTER=1".to_string(),
                format!("-DCANDLE_ROCM_ONLY_{dtype}=1"),
            ];
            let compiled = compile_for_arch(Platform::Nvidia, module, "sm_90", &defines, None)
                .unwrap_or_else(|e| panic!("{} for {dtype}: {e}", module.name));
            assert!(common::is_elf(&compiled.image));
            println!(
                "NVRTC tier: {:>8}.{dtype:<7} {:8} bytes {:6.0} ms",
                module.name,
                compiled.image.len(),
                compiled.elapsed.as_secs_f64() * 1e3
            );
        }
    }
}

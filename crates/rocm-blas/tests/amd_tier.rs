//! The AMD tier of rocm-blas: run by `cargo xtask test` inside the ROCm 6.4 chroot. Every
//! symbol of the rocBLAS FFI table resolves in the real librocblas, and the enum values we pass
//! equal the rocBLAS header's (printed by the probe xtask builds against the chroot's headers).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_blas::rocblas::{self, abi};

#[test]
fn every_rocblas_symbol_resolves() {
    let status = rocblas::library_status();
    println!("rocBLAS: {:?} (tried {:?})", status.found, status.tried);
    let lib = rocblas::Functions::load(&status).expect("rocBLAS loads and every symbol resolves");
    println!(
        "AMD tier: {} rocBLAS symbols resolve: {lib:?}",
        rocblas::Functions::SYMBOLS.len()
    );
}

#[test]
fn rocblas_enum_values_match_the_header() {
    let path = std::env::var("CANDLE_ROCM_ABI_PROBE")
        .expect("CANDLE_ROCM_ABI_PROBE names the probe output");
    let text = std::fs::read_to_string(path).expect("probe output readable");
    let checked = rocm_device::abi::check_against_probe(&[abi::TABLE], &text)
        .unwrap_or_else(|problems| panic!("{}", problems.join("\n")));
    println!("AMD tier: {checked} rocBLAS enum values equal the header's");
}

#[test]
fn a_blas_handle_opens_on_the_device_or_none_is_reported() {
    match std::env::var("CANDLE_ROCM_AMD_TIER_EXPECT").as_deref() {
        // On an AMD GPU: rocBLAS loads and binds to the device's stream.
        Ok("device") => {
            let d = rocm_device::Device::with_platform(rocm_device::Platform::Amd, 0).unwrap();
            rocm_blas::Blas::new(&d).expect("a rocBLAS handle");
        }
        // The chroot has ROCm but no GPU: opening the device fails before any handle exists.
        Ok("no-device") => {
            let err =
                rocm_device::Device::with_platform(rocm_device::Platform::Amd, 0).unwrap_err();
            assert!(matches!(err, rocm_device::Error::NoDevice { .. }), "{err}");
        }
        other => panic!("CANDLE_ROCM_AMD_TIER_EXPECT must be device or no-device, got {other:?}"),
    }
}

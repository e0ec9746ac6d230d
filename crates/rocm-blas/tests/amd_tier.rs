//! The AMD tier of rocm-blas: run by `cargo xtask test` inside the ROCm 6.4 chroot. Every
//! symbol of the rocBLAS FFI table resolves in the real librocblas, and the enum values we pass
//! equal the rocBLAS header's (printed by the probe xtask builds against the chroot's headers).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_blas::rocblas::{self, abi};

#[test]
fn every_rocblas_symbol_resolves() {
    let status = rocblas::library_status();
    println!("rocBLAS: {:?} (tried {:?})", status.found, status.tried);
    let lib = rocblas::RocBlasLib::load().expect("rocBLAS loads and every symbol resolves");
    println!(
        "AMD tier: {} rocBLAS symbols resolve: {lib:?}",
        abi::SYMBOLS.len()
    );
}

#[test]
fn rocblas_enum_values_match_the_header() {
    let path = std::env::var("CANDLE_ROCM_ABI_PROBE")
        .expect("CANDLE_ROCM_ABI_PROBE names the probe output");
    let text = std::fs::read_to_string(&path).expect("probe output readable");
    let header: std::collections::HashMap<&str, i64> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k, v.trim().parse().expect("numeric probe value")))
        .collect();
    let ours: [(&str, i64); 9] = [
        ("ROCBLAS_STATUS_SUCCESS", abi::ROCBLAS_STATUS_SUCCESS.into()),
        ("ROCBLAS_OPERATION_NONE", abi::ROCBLAS_OPERATION_NONE.into()),
        (
            "ROCBLAS_OPERATION_TRANSPOSE",
            abi::ROCBLAS_OPERATION_TRANSPOSE.into(),
        ),
        ("ROCBLAS_DATATYPE_F16_R", abi::ROCBLAS_DATATYPE_F16_R.into()),
        ("ROCBLAS_DATATYPE_F32_R", abi::ROCBLAS_DATATYPE_F32_R.into()),
        ("ROCBLAS_DATATYPE_F64_R", abi::ROCBLAS_DATATYPE_F64_R.into()),
        (
            "ROCBLAS_DATATYPE_BF16_R",
            abi::ROCBLAS_DATATYPE_BF16_R.into(),
        ),
        (
            "ROCBLAS_GEMM_ALGO_STANDARD",
            abi::ROCBLAS_GEMM_ALGO_STANDARD.into(),
        ),
        (
            "ROCBLAS_GEMM_FLAGS_NONE",
            abi::ROCBLAS_GEMM_FLAGS_NONE.into(),
        ),
    ];
    for (key, value) in ours {
        let h = header
            .get(key)
            .unwrap_or_else(|| panic!("probe lacks {key}"));
        assert_eq!(*h, value, "{key}: header {h}, ours {value}");
    }
    println!(
        "AMD tier: {} rocBLAS enum values equal the header's",
        ours.len()
    );
}

#[test]
fn a_blas_on_a_machine_without_a_device_is_a_typed_error() {
    // The chroot has ROCm but no GPU: opening the device fails before any handle exists.
    let err = rocm_device::Device::with_platform(rocm_device::Platform::Amd, 0).unwrap_err();
    assert!(matches!(err, rocm_device::Error::NoDevice { .. }), "{err}");
}

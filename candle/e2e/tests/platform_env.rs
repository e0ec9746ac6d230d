//! An unknown `CANDLE_ROCM_PLATFORM` makes `Device::new_rocm` a typed error naming the value
//! (its own test binary: it sets the variable for the whole process).

use candle_core::Device;

#[test]
fn an_unknown_platform_is_a_typed_error() {
    std::env::set_var("CANDLE_ROCM_PLATFORM", "vulkan");
    let e = Device::new_rocm(0).unwrap_err();
    // with RUST_BACKTRACE set, candle wraps errors in WithBacktrace
    let inner = match &e {
        candle_core::Error::WithBacktrace { inner, .. } => inner.as_ref(),
        other => other,
    };
    assert!(matches!(inner, candle_core::Error::Rocm(_)), "{e:?}");
    assert!(e.to_string().contains("vulkan"), "{e}");
    assert!(!candle_core::utils::rocm_is_available());
}

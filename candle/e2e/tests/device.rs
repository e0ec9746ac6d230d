//! Candle's `Device::Rocm` on any machine: without a usable GPU, opening one is a typed error
//! and `rocm_if_available` falls back to the CPU; with one, a tensor round-trips.

use candle_core::{DType, Device, Tensor};

#[test]
fn opening_a_rocm_device_is_an_error_or_a_working_device() {
    match Device::new_rocm(0) {
        Ok(d) => {
            assert!(d.is_rocm());
            let t = Tensor::arange(0f32, 6., &d)
                .unwrap()
                .reshape((2, 3))
                .unwrap();
            let s = t.sum_all().unwrap().to_dtype(DType::F64).unwrap();
            assert_eq!(s.to_scalar::<f64>().unwrap(), 15.0);
            println!("rocm device: {:?}", d.location());
        }
        Err(e) => {
            let text = e.to_string();
            println!("no rocm device: {text}");
            // names what it looked for, and how to get it
            assert!(
                text.contains("could not be loaded") || text.contains("no device"),
                "{text}"
            );
            assert!(
                text.contains("install") || text.contains("no device"),
                "{text}"
            );
            assert!(!candle_core::utils::rocm_is_available());
            assert!(Device::rocm_if_available(0).unwrap().is_cpu());
        }
    }
}

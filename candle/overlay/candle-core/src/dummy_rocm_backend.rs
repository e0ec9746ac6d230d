//! The ROCm backend when candle is built without the `rocm` feature. No value of these types
//! can exist (`RocmDevice::new` fails with `NotCompiledWithRocmSupport`), so every method is
//! an empty match: nothing here can panic or be reached. The method list is the backend's own
//! (`rocm_backend/methods.rs`), its bodies dropped.
#![allow(dead_code)]
use std::convert::Infallible;

#[path = "rocm_backend/methods.rs"]
mod methods;

use crate::backend::{BackendDevice, BackendStorage};
use crate::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use crate::{CpuStorage, DType, Error, Layout, Result, Shape};

#[derive(Debug, Clone)]
pub struct RocmDevice(Infallible);

impl RocmDevice {
    /// No device exists in this build: code holding one is unreachable.
    pub(crate) fn unreachable(&self) -> ! {
        match self.0 {}
    }
}

#[derive(Debug)]
pub struct RocmStorage(Infallible);

impl RocmStorage {
    pub fn transfer_to_device(&self, _: &RocmDevice) -> Result<Self> {
        match self.0 {}
    }
}

methods::backend_methods!(unreachable_bodies);
use methods::unreachable_bodies;

//! Quantized ROCm storage when candle-core is built without `rocm`: the type is uninhabited
//! (no `RocmDevice` can exist), so every method is unreachable by construction.

use super::{GgmlDType, QStorage};
use crate::{CpuStorage, Layout, Result, RocmDevice, RocmStorage, Shape};

pub enum QRocmStorage {}

impl QRocmStorage {
    pub fn zeros(device: &RocmDevice, _: usize, _: GgmlDType) -> Result<Self> {
        device.unreachable()
    }

    pub fn dtype(&self) -> GgmlDType {
        match *self {}
    }

    pub fn device(&self) -> &RocmDevice {
        match *self {}
    }

    pub fn storage_size_in_bytes(&self) -> usize {
        match *self {}
    }

    pub fn quantize(&mut self, _: &RocmStorage) -> Result<()> {
        match *self {}
    }

    pub fn quantize_onto(&mut self, _: &CpuStorage) -> Result<()> {
        match *self {}
    }

    pub fn quantize_imatrix(&mut self, _: &RocmStorage, _: &[f32], _: usize) -> Result<()> {
        match *self {}
    }

    pub fn quantize_imatrix_onto(&mut self, _: &CpuStorage, _: &[f32], _: usize) -> Result<()> {
        match *self {}
    }

    pub fn data(&self) -> Result<Vec<u8>> {
        match *self {}
    }

    pub fn dequantize(&self, _: usize) -> Result<RocmStorage> {
        match *self {}
    }

    pub fn fwd(&self, _: &Shape, _: &RocmStorage, _: &Layout) -> Result<(RocmStorage, Shape)> {
        match *self {}
    }

    pub fn embedding(
        &self,
        _: usize,
        _: usize,
        _: &RocmStorage,
        _: &Layout,
    ) -> Result<RocmStorage> {
        match *self {}
    }

    pub fn indexed_moe_forward(
        &self,
        _: &Shape,
        _: (&RocmStorage, &Layout),
        _: (&RocmStorage, &Layout),
    ) -> Result<(RocmStorage, Shape)> {
        match *self {}
    }
}

pub fn from_bytes(device: &RocmDevice, _: &[u8], _: GgmlDType) -> Result<QStorage> {
    device.unreachable()
}

//! The ROCm backend when candle is built without the `rocm` feature. No value of these types
//! can exist (`RocmDevice::new` fails with `NotCompiledWithRocmSupport`), so every method is
//! an empty match: nothing here can panic or be reached.
#![allow(dead_code)]
use std::convert::Infallible;

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

impl crate::backend::BackendStorage for RocmStorage {
    type Device = RocmDevice;

    fn try_clone(&self, _: &Layout) -> Result<Self> {
        match self.0 {}
    }
    fn dtype(&self) -> DType {
        match self.0 {}
    }
    fn device(&self) -> &Self::Device {
        match self.0 {}
    }
    fn const_set(&mut self, _: crate::scalar::Scalar, _: &Layout) -> Result<()> {
        match self.0 {}
    }
    fn to_cpu_storage(&self) -> Result<CpuStorage> {
        match self.0 {}
    }
    fn affine(&self, _: &Layout, _: f64, _: f64) -> Result<Self> {
        match self.0 {}
    }
    fn powf(&self, _: &Layout, _: f64) -> Result<Self> {
        match self.0 {}
    }
    fn elu(&self, _: &Layout, _: f64) -> Result<Self> {
        match self.0 {}
    }
    fn reduce_op(&self, _: ReduceOp, _: &Layout, _: &[usize]) -> Result<Self> {
        match self.0 {}
    }
    fn cmp(&self, _: CmpOp, _: &Self, _: &Layout, _: &Layout) -> Result<Self> {
        match self.0 {}
    }
    fn to_dtype(&self, _: &Layout, _: DType) -> Result<Self> {
        match self.0 {}
    }
    fn unary_impl<B: UnaryOpT>(&self, _: &Layout) -> Result<Self> {
        match self.0 {}
    }
    fn binary_impl<B: BinaryOpT>(&self, _: &Self, _: &Layout, _: &Layout) -> Result<Self> {
        match self.0 {}
    }
    fn where_cond(&self, _: &Layout, _: &Self, _: &Layout, _: &Self, _: &Layout) -> Result<Self> {
        match self.0 {}
    }
    fn conv1d(
        &self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &crate::conv::ParamsConv1D,
    ) -> Result<Self> {
        match self.0 {}
    }
    fn conv_transpose1d(
        &self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &crate::conv::ParamsConvTranspose1D,
    ) -> Result<Self> {
        match self.0 {}
    }
    fn conv2d(
        &self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &crate::conv::ParamsConv2D,
    ) -> Result<Self> {
        match self.0 {}
    }
    fn conv_transpose2d(
        &self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &crate::conv::ParamsConvTranspose2D,
    ) -> Result<Self> {
        match self.0 {}
    }
    fn index_select(&self, _: &Self, _: &Layout, _: &Layout, _: usize) -> Result<Self> {
        match self.0 {}
    }
    fn gather(&self, _: &Layout, _: &Self, _: &Layout, _: usize) -> Result<Self> {
        match self.0 {}
    }
    fn scatter_set(
        &mut self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: usize,
    ) -> Result<()> {
        match self.0 {}
    }
    fn scatter_add_set(
        &mut self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: usize,
    ) -> Result<()> {
        match self.0 {}
    }
    fn index_add(
        &self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: &Self,
        _: &Layout,
        _: usize,
    ) -> Result<Self> {
        match self.0 {}
    }
    fn matmul(
        &self,
        _: &Self,
        _: (usize, usize, usize, usize),
        _: &Layout,
        _: &Layout,
    ) -> Result<Self> {
        match self.0 {}
    }
    fn copy_strided_src(&self, _: &mut Self, _: usize, _: &Layout) -> Result<()> {
        match self.0 {}
    }
    fn copy2d(
        &self,
        _: &mut Self,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
        _: usize,
    ) -> Result<()> {
        match self.0 {}
    }
    fn avg_pool2d(&self, _: &Layout, _: (usize, usize), _: (usize, usize)) -> Result<Self> {
        match self.0 {}
    }
    fn max_pool2d(&self, _: &Layout, _: (usize, usize), _: (usize, usize)) -> Result<Self> {
        match self.0 {}
    }
    fn upsample_nearest1d(&self, _: &Layout, _: usize) -> Result<Self> {
        match self.0 {}
    }
    fn upsample_nearest2d(&self, _: &Layout, _: usize, _: usize) -> Result<Self> {
        match self.0 {}
    }
    fn upsample_bilinear2d(
        &self,
        _: &Layout,
        _: usize,
        _: usize,
        _: bool,
        _: Option<f64>,
        _: Option<f64>,
    ) -> Result<Self> {
        match self.0 {}
    }
}

impl crate::backend::BackendDevice for RocmDevice {
    type Storage = RocmStorage;
    fn new(_: usize) -> Result<Self> {
        Err(Error::NotCompiledWithRocmSupport)
    }
    fn location(&self) -> crate::DeviceLocation {
        match self.0 {}
    }
    fn same_device(&self, _: &Self) -> bool {
        match self.0 {}
    }
    fn zeros_impl(&self, _: &Shape, _: DType) -> Result<Self::Storage> {
        match self.0 {}
    }
    unsafe fn alloc_uninit(&self, _: &Shape, _: DType) -> Result<Self::Storage> {
        match self.0 {}
    }
    fn storage_from_slice<T: crate::WithDType>(&self, _: &[T]) -> Result<Self::Storage> {
        match self.0 {}
    }
    fn storage_from_cpu_storage(&self, _: &CpuStorage) -> Result<Self::Storage> {
        match self.0 {}
    }
    fn storage_from_cpu_storage_owned(&self, _: CpuStorage) -> Result<Self::Storage> {
        match self.0 {}
    }
    fn rand_uniform(&self, _: &Shape, _: DType, _: f64, _: f64) -> Result<Self::Storage> {
        match self.0 {}
    }
    fn rand_normal(&self, _: &Shape, _: DType, _: f64, _: f64) -> Result<Self::Storage> {
        match self.0 {}
    }
    fn set_seed(&self, _: u64) -> Result<()> {
        match self.0 {}
    }
    fn get_current_seed(&self) -> Result<u64> {
        match self.0 {}
    }
    fn synchronize(&self) -> Result<()> {
        match self.0 {}
    }
}

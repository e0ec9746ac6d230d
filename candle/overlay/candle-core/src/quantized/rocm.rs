//! Quantized tensors on a ROCm device.
//!
//! The blocks stay in ggml's layout in device memory. Quantizing runs on the host, as it does
//! for CUDA. Dequantizing also runs on the host for now: the blocks come down, the CPU
//! backend's dequantize runs, and the f32 values go back up. A matmul dequantizes the weights
//! to the input's dtype and runs one gemm. The results are correct but slow; device-side
//! dequantize and quantized matmul kernels are the open work.

use std::borrow::Cow;

use zerocopy::IntoBytes;

use super::{GgmlDType, GgmlType, QStorage, QuantizedType};
use crate::backend::{BackendDevice, BackendStorage};
use crate::{CpuStorage, DType, Layout, Result, RocmDevice, RocmStorage, Shape};

/// ggml blocks in device memory.
pub struct QRocmStorage {
    /// The blocks as bytes (a u8 buffer).
    data: RocmStorage,
    len: usize,
    device: RocmDevice,
    dtype: GgmlDType,
}

fn byte_len(elem_count: usize, dtype: GgmlDType) -> usize {
    elem_count / dtype.block_size() * dtype.type_size()
}

impl QRocmStorage {
    pub fn zeros(device: &RocmDevice, elem_count: usize, dtype: GgmlDType) -> Result<Self> {
        let len = byte_len(elem_count, dtype);
        Ok(Self {
            data: device.zeros_impl(&Shape::from(len), DType::U8)?,
            len,
            device: device.clone(),
            dtype,
        })
    }

    fn from_bytes(device: &RocmDevice, bytes: &[u8], dtype: GgmlDType) -> Result<Self> {
        Ok(Self {
            data: device.storage_from_cpu_storage_owned(CpuStorage::U8(bytes.to_vec()))?,
            len: bytes.len(),
            device: device.clone(),
            dtype,
        })
    }

    pub fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    pub fn device(&self) -> &RocmDevice {
        &self.device
    }

    pub fn storage_size_in_bytes(&self) -> usize {
        self.len
    }

    /// Replaces the blocks with those of a host quantization of `xs`.
    fn upload(
        &mut self,
        xs_len: usize,
        quantize: impl FnOnce(&mut dyn QuantizedType),
    ) -> Result<()> {
        if byte_len(xs_len, self.dtype) != self.len {
            crate::bail!(
                "quantize: {xs_len} values do not fill a {:?} tensor of {} bytes",
                self.dtype,
                self.len
            )
        }
        let mut host = self.dtype.cpu_zeros(xs_len);
        quantize(host.as_mut());
        let host = QStorage::Cpu(host);
        *self = Self::from_bytes(&self.device, &host.data()?, self.dtype)?;
        Ok(())
    }

    pub fn quantize(&mut self, src: &RocmStorage) -> Result<()> {
        self.quantize_onto(&src.to_cpu_storage()?)
    }

    pub fn quantize_onto(&mut self, src: &CpuStorage) -> Result<()> {
        let xs = src.as_slice::<f32>()?;
        self.upload(xs.len(), |q| q.from_float(xs))
    }

    pub fn quantize_imatrix(
        &mut self,
        src: &RocmStorage,
        imatrix_weights: &[f32],
        n_per_row: usize,
    ) -> Result<()> {
        self.quantize_imatrix_onto(&src.to_cpu_storage()?, imatrix_weights, n_per_row)
    }

    pub fn quantize_imatrix_onto(
        &mut self,
        src: &CpuStorage,
        imatrix_weights: &[f32],
        n_per_row: usize,
    ) -> Result<()> {
        let xs = src.as_slice::<f32>()?;
        self.upload(xs.len(), |q| {
            q.from_float_imatrix(xs, imatrix_weights, n_per_row)
        })
    }

    /// The blocks, copied to the host.
    pub fn data(&self) -> Result<Vec<u8>> {
        match self.data.to_cpu_storage()? {
            CpuStorage::U8(bytes) => Ok(bytes),
            other => crate::bail!("quantized rocm storage holds {:?}, not u8", other.dtype()),
        }
    }

    /// The blocks as the CPU backend's quantized storage.
    fn to_host(&self) -> Result<Box<dyn QuantizedType>> {
        let bytes = self.data()?;
        // The block structs hold f16/f32 fields: view them from 8-byte aligned memory.
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        let aligned = &mut words.as_mut_bytes()[..bytes.len()];
        aligned.copy_from_slice(&bytes);
        Ok(self.dtype.from_data(Cow::Borrowed(aligned)))
    }

    /// The values as an f32 buffer on the device.
    pub fn dequantize(&self, elem_count: usize) -> Result<RocmStorage> {
        let values = self.to_host()?.dequantize(elem_count)?;
        self.device.storage_from_cpu_storage_owned(values)
    }

    /// `x @ w^T` for this (n, k) weight, as `QMatMul` computes it on the CPU.
    pub fn fwd(
        &self,
        self_shape: &Shape,
        x: &RocmStorage,
        layout: &Layout,
    ) -> Result<(RocmStorage, Shape)> {
        if !layout.is_contiguous() {
            crate::bail!("input tensor is not contiguous {layout:?}")
        }
        let (n, k) = self_shape.dims2()?;
        let src_dims = layout.shape().dims();
        if src_dims.len() < 2 {
            crate::bail!("input tensor has only one dimension {layout:?}")
        }
        if src_dims[src_dims.len() - 1] != k {
            crate::bail!("input tensor {layout:?} incompatible with {self_shape:?}")
        }
        let dtype = x.dtype();
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            crate::bail!("quantized matmul expects f32/f16/bf16 input, got {dtype:?}")
        }
        let mut dst_dims = src_dims.to_vec();
        dst_dims.pop();
        dst_dims.push(n);
        let m = layout.shape().elem_count() / k;
        let mut w = self.dequantize(n * k)?;
        if dtype != DType::F32 {
            w = w.to_dtype(&Layout::contiguous((n, k)), dtype)?;
        }
        let lhs_l = Layout::contiguous_with_offset((m, k), layout.start_offset());
        let rhs_l = Layout::new(Shape::from((k, n)), vec![1, k], 0);
        let out = x.matmul(&w, (1, m, n, k), &lhs_l, &rhs_l)?;
        Ok((out, Shape::from(dst_dims)))
    }

    /// Rows `ids` of this (rows, hidden) table, in f32.
    pub fn embedding(
        &self,
        rows: usize,
        hidden: usize,
        ids: &RocmStorage,
        ids_l: &Layout,
    ) -> Result<RocmStorage> {
        let table = self.dequantize(rows * hidden)?;
        table.index_select(ids, &Layout::contiguous((rows, hidden)), ids_l, 0)
    }
}

/// Quantized storage on `device` from host blocks.
pub fn load_quantized<T: GgmlType + Send + Sync + 'static>(
    device: &RocmDevice,
    data: &[T],
) -> Result<QStorage> {
    let host = QStorage::Cpu(Box::new(data.to_vec()));
    Ok(QStorage::Rocm(QRocmStorage::from_bytes(
        device,
        &host.data()?,
        T::DTYPE,
    )?))
}

/// Quantized storage on `device` from the bytes of ggml blocks.
pub fn from_bytes(device: &RocmDevice, bytes: &[u8], dtype: GgmlDType) -> Result<QStorage> {
    Ok(QStorage::Rocm(QRocmStorage::from_bytes(
        device, bytes, dtype,
    )?))
}

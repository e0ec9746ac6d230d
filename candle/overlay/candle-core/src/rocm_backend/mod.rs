//! The ROCm backend: Candle's `BackendStorage` / `BackendDevice` over the candle-rocm crate.
//! Conversions and one call per method; every computation lives in candle-rocm.

use candle_rocm as rocm;

pub mod attention;
pub mod collective;
pub mod flash_attention;
pub mod fused;
mod methods;

pub use candle_rocm::RopeVariant;

use crate::backend::{BackendDevice, BackendStorage};
use crate::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use crate::{CpuStorage, DType, Layout, Result, Shape};
use bytemuck::TransparentWrapper;

/// A candle-rocm error as candle's.
pub(crate) fn wrap(e: rocm::Error) -> crate::Error {
    crate::Error::Rocm(Box::new(e)).bt()
}

pub(crate) fn dtype_to_rocm(dtype: DType, op: &'static str) -> Result<rocm::DType> {
    Ok(match dtype {
        DType::U8 => rocm::DType::U8,
        DType::U32 => rocm::DType::U32,
        DType::I16 => rocm::DType::I16,
        DType::I32 => rocm::DType::I32,
        DType::I64 => rocm::DType::I64,
        DType::BF16 => rocm::DType::BF16,
        DType::F16 => rocm::DType::F16,
        DType::F32 => rocm::DType::F32,
        DType::F64 => rocm::DType::F64,
        DType::F8E4M3 => rocm::DType::F8E4M3,
        other => return Err(crate::Error::UnsupportedDTypeForOp(other, op).bt()),
    })
}

fn dtype_from_rocm(dtype: rocm::DType) -> DType {
    match dtype {
        rocm::DType::U8 => DType::U8,
        rocm::DType::U32 => DType::U32,
        rocm::DType::I16 => DType::I16,
        rocm::DType::I32 => DType::I32,
        rocm::DType::I64 => DType::I64,
        rocm::DType::BF16 => DType::BF16,
        rocm::DType::F16 => DType::F16,
        rocm::DType::F32 => DType::F32,
        rocm::DType::F64 => DType::F64,
        rocm::DType::F8E4M3 => DType::F8E4M3,
    }
}

pub(crate) fn layout(l: &Layout) -> rocm::Layout {
    rocm::Layout::new(l.dims(), l.stride(), l.start_offset())
}

/// Host elements as the little-endian bytes candle-rocm takes (f8e4m3 as bit patterns).
/// Host elements onto the device: written as little-endian bytes straight into the upload's
/// staging (f8e4m3 as its bit patterns).
fn upload_cpu(device: &rocm::RocmDevice, s: &CpuStorage) -> Result<rocm::RocmStorage> {
    use rocm::DType as D;
    let stored = match s {
        CpuStorage::U8(v) => device.storage_from_elements(D::U8, v, |x: u8| [x]),
        CpuStorage::U32(v) => device.storage_from_elements(D::U32, v, u32::to_le_bytes),
        CpuStorage::I16(v) => device.storage_from_elements(D::I16, v, i16::to_le_bytes),
        CpuStorage::I32(v) => device.storage_from_elements(D::I32, v, i32::to_le_bytes),
        CpuStorage::I64(v) => device.storage_from_elements(D::I64, v, i64::to_le_bytes),
        CpuStorage::BF16(v) => device.storage_from_elements(D::BF16, v, half::bf16::to_le_bytes),
        CpuStorage::F16(v) => device.storage_from_elements(D::F16, v, half::f16::to_le_bytes),
        CpuStorage::F32(v) => device.storage_from_elements(D::F32, v, f32::to_le_bytes),
        CpuStorage::F64(v) => device.storage_from_elements(D::F64, v, f64::to_le_bytes),
        CpuStorage::F8E4M3(v) => {
            device.storage_from_elements(D::F8E4M3, v, |x: float8::F8E4M3| [x.to_bits()])
        }
        other => return Err(crate::Error::UnsupportedDTypeForOp(other.dtype(), "to rocm").bt()),
    };
    stored.map_err(wrap)
}

fn bytes_to_cpu(dtype: rocm::DType, b: &[u8]) -> CpuStorage {
    macro_rules! from_le {
        ($t:ty, $n:expr) => {
            b.chunks_exact($n)
                .map(|c| {
                    let mut a = [0u8; $n];
                    a.copy_from_slice(c);
                    <$t>::from_le_bytes(a)
                })
                .collect()
        };
    }
    match dtype {
        rocm::DType::U8 => CpuStorage::U8(b.to_vec()),
        rocm::DType::U32 => CpuStorage::U32(from_le!(u32, 4)),
        rocm::DType::I16 => CpuStorage::I16(from_le!(i16, 2)),
        rocm::DType::I32 => CpuStorage::I32(from_le!(i32, 4)),
        rocm::DType::I64 => CpuStorage::I64(from_le!(i64, 8)),
        rocm::DType::BF16 => CpuStorage::BF16(from_le!(half::bf16, 2)),
        rocm::DType::F16 => CpuStorage::F16(from_le!(half::f16, 2)),
        rocm::DType::F32 => CpuStorage::F32(from_le!(f32, 4)),
        rocm::DType::F64 => CpuStorage::F64(from_le!(f64, 8)),
        rocm::DType::F8E4M3 => {
            CpuStorage::F8E4M3(b.iter().map(|&x| float8::F8E4M3::from_bits(x)).collect())
        }
    }
}

/// A GPU of the ROCm backend. The same value as candle-rocm's device (`repr(transparent)`), so
/// a storage lends its candle-rocm device as this type (`BackendStorage::device`).
#[derive(Debug, Clone, bytemuck::TransparentWrapper)]
#[repr(transparent)]
pub struct RocmDevice(rocm::RocmDevice);

impl RocmDevice {
    /// The candle-rocm device underneath (memory statistics, BLAS / DNN handles).
    pub fn inner(&self) -> &rocm::RocmDevice {
        &self.0
    }

    /// Its ordinal on the selected platform.
    pub fn ordinal(&self) -> usize {
        self.0.ordinal()
    }

    /// The device of `ordinal` with `config` (the runtime's: `candle_rocm::Config`) instead of
    /// the process's environment; use it as `Device::Rocm(RocmDevice::with_config(..)?)`.
    pub fn with_config(ordinal: usize, config: rocm::Config) -> Result<Self> {
        Ok(RocmDevice(
            rocm::RocmDevice::with_config(ordinal, config).map_err(wrap)?,
        ))
    }

    /// As [`RocmDevice::with_config`], with the op crates' `options` too (index checks,
    /// MIOpen, reduced-precision gemms: `candle_rocm::Options`).
    pub fn with_options(
        ordinal: usize,
        config: rocm::Config,
        options: rocm::Options,
    ) -> Result<Self> {
        Ok(RocmDevice(
            rocm::RocmDevice::with_options(ordinal, config, options).map_err(wrap)?,
        ))
    }

    /// The configuration the device was opened with.
    pub fn config(&self) -> &rocm::Config {
        self.0.config()
    }

    /// How many devices the selected platform (`CANDLE_ROCM_PLATFORM`) has.
    pub fn count() -> Result<usize> {
        rocm::RocmDevice::count().map_err(wrap)
    }

    /// Records the device work of the Candle ops `f` runs into a [`RocmGraph`], whose
    /// `replay` runs all of it again with one launch, on the same buffers: a decode step whose
    /// shapes repeat (a KV cache preallocated to its maximum length, positions in device
    /// tensors) then costs one launch instead of hundreds. Tensors `f` returns are the
    /// graph's outputs: they hold values after a replay. Inside `f`, nothing may read back to
    /// the host; inputs that change between replays are tensors created before the capture
    /// and rewritten in place (`slice_set`) before each replay. Run `f` once uncaptured first.
    /// The rules in full: `candle_rocm::RocmDevice::capture`.
    pub fn capture<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<(RocmGraph, T)> {
        let (graph, value) = self
            .0
            .capture(|| f().map_err(CaptureError))
            .map_err(|e| e.0)?;
        Ok((RocmGraph(graph), value))
    }

    /// A candle-rocm storage as Candle's (the storage keeps the device it was made on).
    pub(crate) fn wrap_storage(&self, s: rocm::RocmStorage) -> RocmStorage {
        RocmStorage(s)
    }
}

/// A candle error through a capture, with device errors wrapped as candle's.
struct CaptureError(crate::Error);

impl From<rocm::Error> for CaptureError {
    fn from(e: rocm::Error) -> Self {
        CaptureError(wrap(e))
    }
}

/// Device work recorded by [`RocmDevice::capture`].
#[derive(Debug)]
pub struct RocmGraph(rocm::Graph);

impl RocmGraph {
    /// Queues one run of the recorded work (ordered with every other op of the device).
    pub fn replay(&self) -> Result<()> {
        self.0.replay().map_err(wrap)
    }
}

/// A buffer on a [`RocmDevice`]: candle-rocm's storage, which holds the device.
#[derive(Debug)]
pub struct RocmStorage(rocm::RocmStorage);

impl RocmStorage {
    /// The candle-rocm storage underneath.
    pub fn inner(&self) -> &rocm::RocmStorage {
        &self.0
    }

    /// The device address of its buffer.
    pub fn device_ptr(&self) -> u64 {
        self.0.buffer().device_ptr()
    }

    fn wrap(&self, r: std::result::Result<rocm::RocmStorage, rocm::Error>) -> Result<Self> {
        Ok(RocmStorage(r.map_err(wrap)?))
    }

    /// The whole storage on another ROCm device.
    pub fn transfer_to_device(&self, dst: &RocmDevice) -> Result<Self> {
        Ok(dst.wrap_storage(self.0.to_device(&dst.0).map_err(wrap)?))
    }

    /// candle-core's arg_sort along the last dim (u32 positions).
    pub fn arg_sort_last_dim(&self, l: &Layout, asc: bool) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: arg_sort_last_dim");
        self.wrap(self.0.arg_sort_last_dim(&layout(l), asc))
    }

    /// candle-nn's softmax over the last dim.
    pub fn softmax_last_dim(&self, l: &Layout) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: softmax_last_dim");
        self.wrap(self.0.softmax_last_dim(&layout(l)))
    }

    /// candle-nn's sigmoid.
    pub fn sigmoid(&self, l: &Layout) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: sigmoid");
        self.wrap(self.0.sigmoid(&layout(l)))
    }

    /// candle-nn's rms_norm over the last dim.
    pub fn rms_norm(&self, l: &Layout, alpha: &Self, alpha_l: &Layout, eps: f32) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: rms_norm");
        self.wrap(self.0.rms_norm(&layout(l), &alpha.0, &layout(alpha_l), eps))
    }

    /// candle-nn's layer_norm over the last dim.
    pub fn layer_norm(
        &self,
        l: &Layout,
        alpha: (&Self, &Layout),
        beta: (&Self, &Layout),
        eps: f32,
    ) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: layer_norm");
        let (al, bl) = (layout(alpha.1), layout(beta.1));
        let beta = Some((&beta.0 .0, &bl));
        self.wrap(self.0.layer_norm(&layout(l), &alpha.0 .0, &al, beta, eps))
    }

    /// candle-nn's rope_i (`Interleaved`), rope (`Halves`) and rope_thd (`Thd`).
    pub fn rope(
        &self,
        variant: rocm::RopeVariant,
        l: &Layout,
        cos: (&Self, &Layout),
        sin: (&Self, &Layout),
    ) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: rope");
        let (cl, sl) = (layout(cos.1), layout(sin.1));
        self.wrap(
            self.0
                .rope(variant, &layout(l), &cos.0 .0, &cl, &sin.0 .0, &sl),
        )
    }
}

/// Candle's `cat_contiguous` on ROCm (called by the patched `tensor_cat.rs`): the blocks of
/// every argument in one launch of up to eight, where `copy2d` costs a launch each. The
/// arguments' shapes, dtypes and devices are checked by the caller; `block_size` and `cat_len`
/// are its values (elements after `dim`, the result's size along `dim`).
pub(crate) fn cat_contiguous<A: AsRef<crate::Tensor>>(
    dst: &mut RocmStorage,
    args: &[A],
    dim: usize,
    block_size: usize,
    cat_len: usize,
) -> Result<()> {
    let _host = rocm::host_time::span("candle-core: cat");
    let storages: Vec<_> = args.iter().map(|a| a.as_ref().storage()).collect();
    let mut parts = Vec::with_capacity(args.len());
    let mut dst_offset = 0;
    for (arg, storage) in args.iter().zip(&storages) {
        let arg = arg.as_ref();
        let crate::Storage::Rocm(src) = &**storage else {
            crate::bail!("cat: an argument of a ROCm cat is not on the ROCm device")
        };
        let dims = arg.dims();
        let cols = block_size * dims[dim];
        let src_stride = if arg.is_contiguous() {
            cols
        } else {
            arg.layout().outer_stride_for_dim(dim).unwrap_or(cols)
        };
        let block = rocm::Copy2d {
            rows: dims[..dim].iter().product(),
            cols,
            src_stride,
            dst_stride: block_size * cat_len,
            src_offset: arg.layout().start_offset(),
            dst_offset,
        };
        parts.push((&src.0, block));
        dst_offset += cols;
    }
    dst.0.copy2d_many(&parts).map_err(wrap)
}

fn reduce_op(op: ReduceOp) -> rocm::ReduceOp {
    match op {
        ReduceOp::Sum => rocm::ReduceOp::Sum,
        ReduceOp::Min => rocm::ReduceOp::Min,
        ReduceOp::Max => rocm::ReduceOp::Max,
        ReduceOp::ArgMin => rocm::ReduceOp::ArgMin,
        ReduceOp::ArgMax => rocm::ReduceOp::ArgMax,
    }
}

fn cmp_op(op: CmpOp) -> rocm::CmpOp {
    match op {
        CmpOp::Eq => rocm::CmpOp::Eq,
        CmpOp::Ne => rocm::CmpOp::Ne,
        CmpOp::Le => rocm::CmpOp::Le,
        CmpOp::Ge => rocm::CmpOp::Ge,
        CmpOp::Lt => rocm::CmpOp::Lt,
        CmpOp::Gt => rocm::CmpOp::Gt,
    }
}

fn scalar(s: crate::scalar::Scalar) -> rocm::Scalar {
    use crate::scalar::Scalar as S;
    match s {
        S::U8(v) => rocm::Scalar::U8(v),
        S::U32(v) => rocm::Scalar::U32(v),
        S::I16(v) => rocm::Scalar::I16(v),
        S::I32(v) => rocm::Scalar::I32(v),
        S::I64(v) => rocm::Scalar::I64(v),
        S::BF16(v) => rocm::Scalar::BF16(v),
        S::F16(v) => rocm::Scalar::F16(v),
        S::F32(v) => rocm::Scalar::F32(v),
        S::F64(v) => rocm::Scalar::F64(v),
        S::F8E4M3(v) => rocm::Scalar::F8E4M3(v.to_bits()),
    }
}

methods::backend_methods!(as_written);
use methods::as_written;

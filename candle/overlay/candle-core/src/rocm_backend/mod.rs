//! The ROCm backend: Candle's `BackendStorage` / `BackendDevice` over the candle-rocm crate.
//! Conversions and one call per method; every computation lives in candle-rocm.

use candle_rocm as rocm;

pub mod attention;
pub mod collective;
pub mod fused;

pub use candle_rocm::RopeVariant;

use crate::backend::{BackendDevice, BackendStorage};
use crate::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use crate::{CpuStorage, DType, Layout, Result, Shape};

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
fn cpu_to_bytes(s: &CpuStorage) -> Result<(rocm::DType, Vec<u8>)> {
    macro_rules! le {
        ($v:expr, $dt:expr) => {
            ($dt, $v.iter().flat_map(|x| x.to_le_bytes()).collect())
        };
    }
    Ok(match s {
        CpuStorage::U8(v) => (rocm::DType::U8, v.clone()),
        CpuStorage::U32(v) => le!(v, rocm::DType::U32),
        CpuStorage::I16(v) => le!(v, rocm::DType::I16),
        CpuStorage::I32(v) => le!(v, rocm::DType::I32),
        CpuStorage::I64(v) => le!(v, rocm::DType::I64),
        CpuStorage::BF16(v) => le!(v, rocm::DType::BF16),
        CpuStorage::F16(v) => le!(v, rocm::DType::F16),
        CpuStorage::F32(v) => le!(v, rocm::DType::F32),
        CpuStorage::F64(v) => le!(v, rocm::DType::F64),
        CpuStorage::F8E4M3(v) => (rocm::DType::F8E4M3, v.iter().map(|x| x.to_bits()).collect()),
        other => return Err(crate::Error::UnsupportedDTypeForOp(other.dtype(), "to rocm").bt()),
    })
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

/// A GPU of the ROCm backend.
#[derive(Debug, Clone)]
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

    pub(crate) fn wrap_storage(&self, s: rocm::RocmStorage) -> RocmStorage {
        RocmStorage {
            inner: s,
            device: self.clone(),
        }
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

/// A buffer on a [`RocmDevice`].
#[derive(Debug)]
pub struct RocmStorage {
    inner: rocm::RocmStorage,
    device: RocmDevice,
}

impl RocmStorage {
    /// The candle-rocm storage underneath.
    pub fn inner(&self) -> &rocm::RocmStorage {
        &self.inner
    }

    /// The device address of its buffer.
    pub fn device_ptr(&self) -> u64 {
        self.inner.buffer().device_ptr()
    }

    fn wrap(&self, r: std::result::Result<rocm::RocmStorage, rocm::Error>) -> Result<Self> {
        Ok(self.device.wrap_storage(r.map_err(wrap)?))
    }

    /// The whole storage on another ROCm device.
    pub fn transfer_to_device(&self, dst: &RocmDevice) -> Result<Self> {
        Ok(dst.wrap_storage(self.inner.to_device(&dst.0).map_err(wrap)?))
    }

    /// candle-core's arg_sort along the last dim (u32 positions).
    pub fn arg_sort_last_dim(&self, l: &Layout, asc: bool) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: arg_sort_last_dim");
        self.wrap(self.inner.arg_sort_last_dim(&layout(l), asc))
    }

    /// candle-nn's softmax over the last dim.
    pub fn softmax_last_dim(&self, l: &Layout) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: softmax_last_dim");
        self.wrap(self.inner.softmax_last_dim(&layout(l)))
    }

    /// candle-nn's sigmoid.
    pub fn sigmoid(&self, l: &Layout) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: sigmoid");
        self.wrap(self.inner.sigmoid(&layout(l)))
    }

    /// candle-nn's rms_norm over the last dim.
    pub fn rms_norm(&self, l: &Layout, alpha: &Self, alpha_l: &Layout, eps: f32) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: rms_norm");
        self.wrap(
            self.inner
                .rms_norm(&layout(l), &alpha.inner, &layout(alpha_l), eps),
        )
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
        let beta = Some((&beta.0.inner, &bl));
        self.wrap(
            self.inner
                .layer_norm(&layout(l), &alpha.0.inner, &al, beta, eps),
        )
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
            self.inner
                .rope(variant, &layout(l), &cos.0.inner, &cl, &sin.0.inner, &sl),
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
        parts.push((&src.inner, block));
        dst_offset += cols;
    }
    dst.inner.copy2d_many(&parts).map_err(wrap)
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

impl BackendStorage for RocmStorage {
    type Device = RocmDevice;

    fn try_clone(&self, l: &Layout) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: try_clone");
        self.wrap(self.inner.try_clone(&layout(l)))
    }

    fn dtype(&self) -> DType {
        dtype_from_rocm(self.inner.dtype())
    }

    fn device(&self) -> &Self::Device {
        &self.device
    }

    fn to_cpu_storage(&self) -> Result<CpuStorage> {
        let _host = rocm::host_time::span("candle-core: to_cpu_storage");
        let bytes = self.inner.to_host_bytes().map_err(wrap)?;
        Ok(bytes_to_cpu(self.inner.dtype(), &bytes))
    }

    fn affine(&self, l: &Layout, mul: f64, add: f64) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: affine");
        self.wrap(self.inner.affine(&layout(l), mul, add))
    }

    fn powf(&self, l: &Layout, e: f64) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: powf");
        self.wrap(self.inner.powf(&layout(l), e))
    }

    fn elu(&self, l: &Layout, alpha: f64) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: elu");
        self.wrap(self.inner.elu(&layout(l), alpha))
    }

    fn reduce_op(&self, op: ReduceOp, l: &Layout, dims: &[usize]) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: reduce_op");
        self.wrap(self.inner.reduce_op(reduce_op(op), &layout(l), dims))
    }

    fn cmp(&self, op: CmpOp, rhs: &Self, l: &Layout, rl: &Layout) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: cmp");
        self.wrap(
            self.inner
                .cmp(cmp_op(op), &rhs.inner, &layout(l), &layout(rl)),
        )
    }

    fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: to_dtype");
        let to = dtype_to_rocm(dtype, "to_dtype")?;
        self.wrap(self.inner.to_dtype(&layout(l), to))
    }

    fn unary_impl<B: UnaryOpT>(&self, l: &Layout) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: unary_impl");
        let op = rocm::unary_op_from_name(B::NAME)
            .ok_or_else(|| crate::Error::Msg(format!("rocm: no unary op `{}`", B::NAME)).bt())?;
        self.wrap(self.inner.unary(op, &layout(l)))
    }

    fn binary_impl<B: BinaryOpT>(&self, rhs: &Self, l: &Layout, rl: &Layout) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: binary_impl");
        let op = rocm::binary_op_from_name(B::NAME)
            .ok_or_else(|| crate::Error::Msg(format!("rocm: no binary op `{}`", B::NAME)).bt())?;
        self.wrap(self.inner.binary(op, &rhs.inner, &layout(l), &layout(rl)))
    }

    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: where_cond");
        let (l, tl, fl) = (layout(l), layout(tl), layout(fl));
        self.wrap(self.inner.where_cond(&l, &t.inner, &tl, &f.inner, &fl))
    }

    fn conv1d(
        &self,
        l: &Layout,
        kernel: &Self,
        kl: &Layout,
        p: &crate::conv::ParamsConv1D,
    ) -> Result<Self> {
        let p = rocm::Conv1dParams {
            b_size: p.b_size,
            l_in: p.l_in,
            c_out: p.c_out,
            c_in: p.c_in,
            k_size: p.k_size,
            padding: p.padding,
            stride: p.stride,
            dilation: p.dilation,
            groups: 1,
        };
        self.wrap(
            self.inner
                .conv1d(&layout(l), &kernel.inner, &layout(kl), &p),
        )
    }

    fn conv_transpose1d(
        &self,
        l: &Layout,
        kernel: &Self,
        kl: &Layout,
        p: &crate::conv::ParamsConvTranspose1D,
    ) -> Result<Self> {
        let p = rocm::ConvTranspose1dParams {
            b_size: p.b_size,
            l_in: p.l_in,
            c_out: p.c_out,
            c_in: p.c_in,
            k_size: p.k_size,
            padding: p.padding,
            output_padding: p.output_padding,
            stride: p.stride,
            dilation: p.dilation,
            groups: 1,
        };
        self.wrap(
            self.inner
                .conv_transpose1d(&layout(l), &kernel.inner, &layout(kl), &p),
        )
    }

    fn conv2d(
        &self,
        l: &Layout,
        kernel: &Self,
        kl: &Layout,
        p: &crate::conv::ParamsConv2D,
    ) -> Result<Self> {
        let p = rocm::Conv2dParams {
            b_size: p.b_size,
            i_h: p.i_h,
            i_w: p.i_w,
            k_h: p.k_h,
            k_w: p.k_w,
            c_out: p.c_out,
            c_in: p.c_in,
            padding: p.padding,
            stride: p.stride,
            dilation: p.dilation,
            groups: 1,
        };
        self.wrap(
            self.inner
                .conv2d(&layout(l), &kernel.inner, &layout(kl), &p),
        )
    }

    fn conv_transpose2d(
        &self,
        l: &Layout,
        kernel: &Self,
        kl: &Layout,
        p: &crate::conv::ParamsConvTranspose2D,
    ) -> Result<Self> {
        let p = rocm::ConvTranspose2dParams {
            b_size: p.b_size,
            i_h: p.i_h,
            i_w: p.i_w,
            k_h: p.k_h,
            k_w: p.k_w,
            c_out: p.c_out,
            c_in: p.c_in,
            padding: p.padding,
            output_padding: p.output_padding,
            stride: p.stride,
            dilation: p.dilation,
            groups: 1,
        };
        self.wrap(
            self.inner
                .conv_transpose2d(&layout(l), &kernel.inner, &layout(kl), &p),
        )
    }

    fn avg_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<Self> {
        self.wrap(self.inner.avg_pool2d(&layout(l), k, s))
    }

    fn max_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<Self> {
        self.wrap(self.inner.max_pool2d(&layout(l), k, s))
    }

    fn upsample_nearest1d(&self, l: &Layout, w: usize) -> Result<Self> {
        self.wrap(self.inner.upsample_nearest1d(&layout(l), w))
    }

    fn upsample_nearest2d(&self, l: &Layout, h: usize, w: usize) -> Result<Self> {
        self.wrap(self.inner.upsample_nearest2d(&layout(l), h, w))
    }

    fn upsample_bilinear2d(
        &self,
        l: &Layout,
        h: usize,
        w: usize,
        align_corners: bool,
        scale_h: Option<f64>,
        scale_w: Option<f64>,
    ) -> Result<Self> {
        let l = layout(l);
        self.wrap(
            self.inner
                .upsample_bilinear2d(&l, h, w, align_corners, scale_h, scale_w),
        )
    }

    fn gather(&self, l: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: gather");
        self.wrap(
            self.inner
                .gather(&layout(l), &ids.inner, &layout(ids_l), dim),
        )
    }

    fn scatter_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        let _host = rocm::host_time::span("candle-core: scatter_set");
        let (l, ids_l, src_l) = (layout(l), layout(ids_l), layout(src_l));
        self.inner
            .scatter_set(&l, &ids.inner, &ids_l, &src.inner, &src_l, dim)
            .map_err(wrap)
    }

    fn scatter_add_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        let _host = rocm::host_time::span("candle-core: scatter_add_set");
        let (l, ids_l, src_l) = (layout(l), layout(ids_l), layout(src_l));
        self.inner
            .scatter_add_set(&l, &ids.inner, &ids_l, &src.inner, &src_l, dim)
            .map_err(wrap)
    }

    fn index_select(&self, ids: &Self, l: &Layout, ids_l: &Layout, dim: usize) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: index_select");
        self.wrap(
            self.inner
                .index_select(&ids.inner, &layout(l), &layout(ids_l), dim),
        )
    }

    fn index_add(
        &self,
        l: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: index_add");
        let (l, ids_l, src_l) = (layout(l), layout(ids_l), layout(src_l));
        self.wrap(
            self.inner
                .index_add(&l, &ids.inner, &ids_l, &src.inner, &src_l, dim),
        )
    }

    fn matmul(
        &self,
        rhs: &Self,
        bmnk: (usize, usize, usize, usize),
        l: &Layout,
        rl: &Layout,
    ) -> Result<Self> {
        let _host = rocm::host_time::span("candle-core: matmul");
        self.wrap(self.inner.matmul(&rhs.inner, bmnk, &layout(l), &layout(rl)))
    }

    fn copy_strided_src(&self, dst: &mut Self, dst_offset: usize, src_l: &Layout) -> Result<()> {
        let _host = rocm::host_time::span("candle-core: copy_strided_src");
        self.inner
            .copy_strided_src(&mut dst.inner, dst_offset, &layout(src_l))
            .map_err(wrap)
    }

    fn copy2d(
        &self,
        dst: &mut Self,
        d1: usize,
        d2: usize,
        src_s: usize,
        dst_s: usize,
        src_o: usize,
        dst_o: usize,
    ) -> Result<()> {
        let _host = rocm::host_time::span("candle-core: copy2d");
        let block = rocm::Copy2d {
            rows: d1,
            cols: d2,
            src_stride: src_s,
            dst_stride: dst_s,
            src_offset: src_o,
            dst_offset: dst_o,
        };
        self.inner.copy2d(&mut dst.inner, &block).map_err(wrap)
    }

    fn const_set(&mut self, s: crate::scalar::Scalar, l: &Layout) -> Result<()> {
        let _host = rocm::host_time::span("candle-core: const_set");
        self.inner.const_set(scalar(s), &layout(l)).map_err(wrap)
    }
}

impl BackendDevice for RocmDevice {
    type Storage = RocmStorage;

    fn new(ordinal: usize) -> Result<Self> {
        Ok(RocmDevice(rocm::RocmDevice::new(ordinal).map_err(wrap)?))
    }

    fn location(&self) -> crate::DeviceLocation {
        crate::DeviceLocation::Rocm {
            gpu_id: self.0.ordinal(),
        }
    }

    fn same_device(&self, rhs: &Self) -> bool {
        self.0.same_device(&rhs.0)
    }

    fn zeros_impl(&self, shape: &Shape, dtype: DType) -> Result<Self::Storage> {
        let _host = rocm::host_time::span("candle-core: zeros_impl");
        let dt = dtype_to_rocm(dtype, "zeros")?;
        Ok(self.wrap_storage(self.0.zeros(shape.elem_count(), dt).map_err(wrap)?))
    }

    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> Result<Self::Storage> {
        let _host = rocm::host_time::span("candle-core: alloc_uninit");
        let dt = dtype_to_rocm(dtype, "alloc_uninit")?;
        Ok(self.wrap_storage(self.0.alloc_uninit(shape.elem_count(), dt).map_err(wrap)?))
    }

    fn storage_from_slice<T: crate::WithDType>(&self, data: &[T]) -> Result<Self::Storage> {
        self.storage_from_cpu_storage(&T::to_cpu_storage(data))
    }

    fn storage_from_cpu_storage(&self, s: &CpuStorage) -> Result<Self::Storage> {
        let (dt, bytes) = cpu_to_bytes(s)?;
        Ok(self.wrap_storage(self.0.storage_from_bytes(dt, &bytes).map_err(wrap)?))
    }

    fn storage_from_cpu_storage_owned(&self, s: CpuStorage) -> Result<Self::Storage> {
        self.storage_from_cpu_storage(&s)
    }

    fn rand_uniform(&self, shape: &Shape, dtype: DType, lo: f64, hi: f64) -> Result<Self::Storage> {
        let dt = dtype_to_rocm(dtype, "rand_uniform")?;
        let s = self.0.rand_uniform(shape.elem_count(), dt, lo, hi);
        Ok(self.wrap_storage(s.map_err(wrap)?))
    }

    fn rand_normal(
        &self,
        shape: &Shape,
        dtype: DType,
        mean: f64,
        std: f64,
    ) -> Result<Self::Storage> {
        let dt = dtype_to_rocm(dtype, "rand_normal")?;
        let s = self.0.rand_normal(shape.elem_count(), dt, mean, std);
        Ok(self.wrap_storage(s.map_err(wrap)?))
    }

    fn set_seed(&self, seed: u64) -> Result<()> {
        self.0.set_seed(seed).map_err(wrap)
    }

    fn get_current_seed(&self) -> Result<u64> {
        self.0.get_current_seed().map_err(wrap)
    }

    fn synchronize(&self) -> Result<()> {
        self.0.synchronize().map_err(wrap)
    }
}

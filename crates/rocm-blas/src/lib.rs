//! rocm-blas: the matmul of candle-rocm, one strided-batched gemm call per matmul.
//!
//! lhs (batch, m, k) times rhs (batch, k, n) with Candle-style layouts (dims, strides, start
//! offset, batch dims of any count) into a contiguous (batch, m, n) output, for f32, f16 and
//! bf16 (f32 accumulation) and f64. Row-major and transposed operands go straight to the BLAS
//! (see [`plan`]); batch dims collapse to one stride or broadcast with stride 0; a layout no
//! gemm call can read is copied to a contiguous one first instead of being refused. The BLAS is
//! rocBLAS on the amd platform (loaded at run time, our own FFI table) and cuBLAS on the
//! nvidia platform (cargo feature `nvidia`); where rocBLAS is not installed, or
//! `CANDLE_ROCM_GEMM=portable` asks for it on any platform, the project's own tiled gemm
//! kernel (rocm-kernels' gemm module: slower than a vendor BLAS, the same answers within
//! rounding). [`BlasOptions`] are the crate's options, from the environment by default.

#![cfg_attr(test, allow(clippy::unwrap_used))]

#[cfg(feature = "nvidia")]
mod cublas;
pub mod plan;
pub mod rocblas;

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use plan::{GemmOperand, GemmPlan, Op};
pub use plan::{MatmulShape, OutputLayout};
pub use rocm_device::Operand;
use rocm_device::{Buffer, Contiguous, DType, Device, Error, Layout, Platform, Result};
use rocm_elementwise::OperandCopy;

/// One matrix of a gemm call: device address, leading dimension, batch stride (elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmMatrix {
    pub ptr: u64,
    pub ld: i32,
    pub stride: i64,
}

/// One strided-batched gemm in the BLAS's column-major terms: C = op(A) . op(B), with the
/// scalars `alpha` = 1 and `beta` = 0 of the compute type behind the two host pointers.
#[derive(Debug, Clone, Copy)]
pub struct GemmCall {
    /// Whether A and B are transposed.
    pub transpose: (bool, bool),
    pub mnk: (i32, i32, i32),
    pub a: GemmMatrix,
    pub b: GemmMatrix,
    pub c: GemmMatrix,
    pub batch: i32,
    pub alpha: *const c_void,
    pub beta: *const c_void,
}

/// Comma list of `f16`, `bf16`, `f32`: gemms of these dtypes may use reduced precision.
pub const REDUCED_PRECISION_ENV: &str = "CANDLE_ROCM_GEMM_REDUCED_PRECISION";

/// `portable`: every gemm on the project's own kernel, whatever BLAS the platform has;
/// `vendor` (the default): rocBLAS / cuBLAS, the portable kernel only where rocBLAS is missing.
pub const GEMM_ENV: &str = "CANDLE_ROCM_GEMM";

/// Reduced-precision gemm opt-ins (f16 accumulation, the BLAS's fast bf16, TF32).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReducedPrecision {
    pub f16: bool,
    pub bf16: bool,
    pub f32: bool,
}

/// How a [`Blas`] computes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlasOptions {
    pub reduced_precision: ReducedPrecision,
    /// Every gemm on the portable kernel ([`GEMM_ENV`]).
    pub portable: bool,
}

impl BlasOptions {
    /// The options `lookup` (a variable name to its value) describes.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let reduced = lookup(REDUCED_PRECISION_ENV).unwrap_or_default();
        let has = |d: &str| reduced.split(',').any(|x| x.trim() == d);
        BlasOptions {
            reduced_precision: ReducedPrecision {
                f16: has("f16"),
                bf16: has("bf16"),
                f32: has("f32"),
            },
            portable: lookup(GEMM_ENV).is_some_and(|v| v.trim() == "portable"),
        }
    }

    /// The process's environment, read once.
    pub fn global() -> Self {
        static GLOBAL: std::sync::OnceLock<BlasOptions> = std::sync::OnceLock::new();
        *GLOBAL.get_or_init(|| Self::from_lookup(rocm_device::config::env_lookup))
    }
}

enum Backend {
    /// rocm-kernels' gemm module.
    Portable,
    RocBlas(rocblas::RocBlasHandle),
    #[cfg(feature = "nvidia")]
    CuBlas(cublas::CuBlasHandle),
}

/// A BLAS handle for one device, bound to its stream. Cheap to share behind an `Arc`; calls
/// are serialised on the handle.
pub struct Blas {
    /// Dropped before `device`: the library's handle goes while its device is alive.
    backend: Mutex<Backend>,
    device: Device,
    reduced_f16: AtomicBool,
    reduced_bf16: AtomicBool,
    reduced_f32: AtomicBool,
}

impl Drop for Blas {
    fn drop(&mut self) {
        // The handle is destroyed next (field order): on its own device, whatever thread
        // drops it.
        if let Err(e) = self.device.bind_to_thread() {
            tracing::warn!("binding the device to destroy its BLAS handle: {e}");
        }
    }
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blas({:?})", self.device)
    }
}

impl Blas {
    /// rocBLAS on an amd device, cuBLAS on an nvidia one, and on an amd device whose HIP
    /// runtime is the project's shim over CUDA (`Config::hip_on_cuda`, a verification mode).
    pub fn new(device: &Device) -> Result<Self> {
        Self::with_options(device, BlasOptions::global())
    }

    /// As [`Blas::new`], with `options` in place of the environment's.
    pub fn with_options(device: &Device, options: BlasOptions) -> Result<Self> {
        let backend = match device.info().platform {
            _ if options.portable => Backend::Portable,
            #[cfg(feature = "nvidia")]
            Platform::Amd if device.config().hip_on_cuda => {
                Backend::CuBlas(cublas::CuBlasHandle::new(device)?)
            }
            #[cfg(not(feature = "nvidia"))]
            Platform::Amd if device.config().hip_on_cuda => {
                return Err(Error::PlatformNotBuilt(Platform::Nvidia))
            }
            Platform::Amd => match rocblas::RocBlasHandle::new(device) {
                Ok(h) => Backend::RocBlas(h),
                Err(e @ Error::LibraryMissing { .. }) => {
                    tracing::warn!("{e}: matmuls run on the portable gemm kernel");
                    Backend::Portable
                }
                Err(e) => return Err(e),
            },
            #[cfg(feature = "nvidia")]
            Platform::Nvidia => Backend::CuBlas(cublas::CuBlasHandle::new(device)?),
            #[cfg(not(feature = "nvidia"))]
            Platform::Nvidia => return Err(Error::PlatformNotBuilt(Platform::Nvidia)),
        };
        let reduced = options.reduced_precision;
        Ok(Blas {
            device: device.clone(),
            backend: Mutex::new(backend),
            reduced_f16: AtomicBool::new(reduced.f16),
            reduced_bf16: AtomicBool::new(reduced.bf16),
            reduced_f32: AtomicBool::new(reduced.f32),
        })
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether gemms run on the portable kernel (no vendor BLAS).
    pub fn is_portable(&self) -> bool {
        matches!(
            *self.backend.lock().unwrap_or_else(|e| e.into_inner()),
            Backend::Portable
        )
    }

    /// f16 gemms accumulate in f16 (Candle's `set_gemm_reduced_precision_f16`).
    pub fn set_reduced_precision_f16(&self, on: bool) {
        self.reduced_f16.store(on, Ordering::Relaxed);
    }

    /// bf16 gemms may compute in reduced precision (cuBLAS `32F_FAST_16BF`; rocBLAS keeps f32).
    pub fn set_reduced_precision_bf16(&self, on: bool) {
        self.reduced_bf16.store(on, Ordering::Relaxed);
    }

    /// f32 gemms may use TF32 (cuBLAS `32F_FAST_TF32`; rocBLAS keeps f32).
    pub fn set_reduced_precision_f32(&self, on: bool) {
        self.reduced_f32.store(on, Ordering::Relaxed);
    }

    /// `lhs . rhs` into a new contiguous (batch, m, n) buffer.
    pub fn matmul(&self, lhs: Operand<'_>, rhs: Operand<'_>, shape: MatmulShape) -> Result<Buffer> {
        let dtype = lhs.dtype;
        Self::check_dtype(dtype)?;
        let out_len = shape.batch * shape.m * shape.n;
        let out = self.device.alloc(out_len * dtype.size_in_bytes())?;
        let out_l = OutputLayout::contiguous(shape);
        self.matmul_into(lhs, rhs, shape, (&out, out_l))?;
        Ok(out)
    }

    fn check_dtype(dtype: DType) -> Result<()> {
        if matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
            Ok(())
        } else {
            Err(Error::UnsupportedDType {
                op: "matmul",
                dtype,
            })
        }
    }

    /// `lhs . rhs` written into `out` where its [`OutputLayout`] says (overwriting what is
    /// there); the output holds the inputs' dtype.
    pub fn matmul_into(
        &self,
        lhs: Operand<'_>,
        rhs: Operand<'_>,
        shape: MatmulShape,
        out: (&Buffer, OutputLayout),
    ) -> Result<()> {
        self.matmul_into_as(lhs, rhs, shape, out, lhs.dtype)
    }

    /// [`Blas::matmul_into`] with an output dtype of its own: the inputs' dtype, or f32 for
    /// f16 and bf16 inputs (their f32 accumulators written without rounding to 16 bits).
    pub fn matmul_into_as(
        &self,
        lhs: Operand<'_>,
        rhs: Operand<'_>,
        shape: MatmulShape,
        (out, out_l): (&Buffer, OutputLayout),
        out_dtype: DType,
    ) -> Result<()> {
        let dtype = lhs.dtype;
        Self::check_dtype(dtype)?;
        if rhs.dtype != dtype {
            return Err(Error::DTypeMismatch {
                op: "matmul",
                detail: format!("lhs {dtype}, rhs {}", rhs.dtype),
            });
        }
        let widened = out_dtype == DType::F32 && matches!(dtype, DType::F16 | DType::BF16);
        if out_dtype != dtype && !widened {
            return Err(Error::DTypeMismatch {
                op: "matmul",
                detail: format!("{dtype} inputs, {out_dtype} output"),
            });
        }
        let MatmulShape { batch, m, n, k } = shape;
        plan::check_operand("lhs", lhs.layout, batch, m, k)?;
        plan::check_operand("rhs", rhs.layout, batch, k, n)?;
        lhs.check("matmul")?;
        rhs.check("matmul")?;
        let size = dtype.size_in_bytes();
        let out_size = out_dtype.size_in_bytes();
        let needed = out_l.required_len(shape)?;
        if needed * out_size > out.len() {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                detail: format!(
                    "output {out_l:?} of {shape:?} needs {needed} elements, the buffer holds {}",
                    out.len() / out_size
                ),
            });
        }
        if batch * m * n == 0 {
            return Ok(());
        }
        if k == 0 {
            return self.zero_output(out_dtype, out, out_l, shape);
        }
        let _span = tracing::debug_span!("matmul", %dtype, batch, m, n, k).entered();
        let (lhs_op, lhs_data) = Self::readable(lhs, m, k)?;
        let (rhs_op, rhs_data) = Self::readable(rhs, k, n)?;
        let p = GemmPlan::with_output(shape, lhs_op, rhs_op, out_l)?;
        let matrix = |ptr: u64, offset: usize, ld: usize, stride: usize| GemmMatrix {
            ptr: ptr + (offset * size) as u64,
            ld: ld as i32,
            stride: stride as i64,
        };
        let a = matrix(
            rhs_data.buffer().device_ptr(),
            p.a.offset,
            p.a.ld,
            p.a.batch_stride,
        );
        let b = matrix(
            lhs_data.buffer().device_ptr(),
            p.b.offset,
            p.b.ld,
            p.b.batch_stride,
        );
        let c = GemmMatrix {
            ptr: out.device_ptr() + (p.offset_c * out_size) as u64,
            ld: p.ldc as i32,
            stride: p.stride_c as i64,
        };
        // f16 accumulation only where the output is f16 too.
        let reduced_f16 = dtype == DType::F16
            && out_dtype == DType::F16
            && self.reduced_f16.load(Ordering::Relaxed);
        // alpha = 1, beta = 0 in the compute type's scalar type.
        let (one32, zero32) = (1f32, 0f32);
        let (one64, zero64) = (1f64, 0f64);
        let (one16, zero16) = (half::f16::ONE, half::f16::ZERO);
        let (alpha, beta): (*const c_void, *const c_void) = if dtype == DType::F64 {
            (
                std::ptr::from_ref(&one64).cast(),
                std::ptr::from_ref(&zero64).cast(),
            )
        } else if reduced_f16 {
            (
                std::ptr::from_ref(&one16).cast(),
                std::ptr::from_ref(&zero16).cast(),
            )
        } else {
            (
                std::ptr::from_ref(&one32).cast(),
                std::ptr::from_ref(&zero32).cast(),
            )
        };
        let call = GemmCall {
            transpose: (p.a.op == Op::Transpose, p.b.op == Op::Transpose),
            mnk: (p.m as i32, p.n as i32, p.k as i32),
            a,
            b,
            c,
            batch: p.batch as i32,
            alpha,
            beta,
        };
        let backend = self.backend.lock().unwrap_or_else(|e| e.into_inner());
        match &*backend {
            Backend::Portable => self.portable_gemm(&call, dtype, widened)?,
            Backend::RocBlas(h) => {
                use rocblas::abi;
                let op = |o: Op| match o {
                    Op::None => abi::ROCBLAS_OPERATION_NONE,
                    Op::Transpose => abi::ROCBLAS_OPERATION_TRANSPOSE,
                };
                let (dt, compute) = match dtype {
                    DType::F32 => (abi::ROCBLAS_DATATYPE_F32_R, abi::ROCBLAS_DATATYPE_F32_R),
                    DType::F64 => (abi::ROCBLAS_DATATYPE_F64_R, abi::ROCBLAS_DATATYPE_F64_R),
                    DType::F16 if reduced_f16 => {
                        (abi::ROCBLAS_DATATYPE_F16_R, abi::ROCBLAS_DATATYPE_F16_R)
                    }
                    DType::F16 => (abi::ROCBLAS_DATATYPE_F16_R, abi::ROCBLAS_DATATYPE_F32_R),
                    _ => (abi::ROCBLAS_DATATYPE_BF16_R, abi::ROCBLAS_DATATYPE_F32_R),
                };
                let out_dt = if widened {
                    abi::ROCBLAS_DATATYPE_F32_R
                } else {
                    dt
                };
                let _host = rocm_device::host_time::span("driver: blas");
                // SAFETY: check_fits bounded both inputs (or they are fresh contiguous copies),
                // the output holds the layout's elements of out_dtype, and all three stay alive
                // until the stream has run the call (pool memory is reused in stream order).
                unsafe {
                    h.gemm(
                        &self.device,
                        &call,
                        (op(p.a.op), op(p.b.op)),
                        (dt, out_dt, compute),
                    )
                }?;
            }
            #[cfg(feature = "nvidia")]
            Backend::CuBlas(h) => {
                use cublas::Compute;
                use cudarc::cublas::sys::cudaDataType as T;
                let (dt, compute) = match dtype {
                    DType::F32 if self.reduced_f32.load(Ordering::Relaxed) => {
                        (T::CUDA_R_32F, Compute::F32FastTf32)
                    }
                    DType::F32 => (T::CUDA_R_32F, Compute::F32),
                    DType::F64 => (T::CUDA_R_64F, Compute::F64),
                    DType::F16 if reduced_f16 => (T::CUDA_R_16F, Compute::F16),
                    DType::F16 => (T::CUDA_R_16F, Compute::F32),
                    _ if self.reduced_bf16.load(Ordering::Relaxed) => {
                        (T::CUDA_R_16BF, Compute::F32Fast16Bf)
                    }
                    _ => (T::CUDA_R_16BF, Compute::F32),
                };
                let out_dt = if widened { T::CUDA_R_32F } else { dt };
                let _host = rocm_device::host_time::span("driver: blas");
                // SAFETY: as for rocBLAS above.
                unsafe { h.gemm(&self.device, &call, (dt, out_dt, compute)) }?;
            }
        }
        drop(backend);
        // The temporary copies go back to the pool after the call is queued: the pool hands
        // memory out again only in stream order.
        drop((lhs_data, rhs_data));
        Ok(())
    }

    /// `call` on rocm-kernels' gemm (f32 accumulation, f64 for f64; `widened`: f32 output).
    fn portable_gemm(&self, call: &GemmCall, dtype: DType, widened: bool) -> Result<()> {
        use rocm_kernels::gemm;
        let ptr = |g: &GemmMatrix| rocm_device::kernel::DevicePtr {
            addr: g.ptr,
            device: self.device.id(),
        };
        let (m, n, k) = call.mnk;
        let dim = |x: i32| u64::try_from(x).unwrap_or(0);
        let stride = |x: i64| u64::try_from(x).unwrap_or(0);
        let params = gemm::GemmParams {
            a: ptr(&call.a),
            b: ptr(&call.b),
            c: ptr(&call.c),
            m: dim(m),
            n: dim(n),
            k: dim(k),
            lda: dim(call.a.ld),
            ldb: dim(call.b.ld),
            ldc: dim(call.c.ld),
            stride_a: stride(call.a.stride),
            stride_b: stride(call.b.stride),
            stride_c: stride(call.c.stride),
            batch: dim(call.batch),
            trans_a: u32::from(call.transpose.0),
            trans_b: u32::from(call.transpose.1),
        };
        let column_tiles = params.n.div_ceil(gemm::TILE_N);
        if column_tiles > u64::from(rocm_device::MAX_GRID_YZ) {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                detail: format!(
                    "{} output columns are past the portable gemm's grid ({} tiles of {})",
                    params.n,
                    rocm_device::MAX_GRID_YZ,
                    gemm::TILE_N
                ),
            });
        }
        let config = rocm_device::LaunchConfig {
            grid: [
                u32::try_from(params.m.div_ceil(gemm::TILE_M)).unwrap_or(u32::MAX),
                column_tiles as u32,
                // the kernel strides over the batches past the grid's last z
                u32::try_from(params.batch)
                    .unwrap_or(u32::MAX)
                    .min(rocm_device::MAX_GRID_YZ),
            ],
            block: [gemm::THREADS, 1, 1],
            shared_mem_bytes: 0,
        };
        let entry = if widened {
            gemm::GEMM_F32OUT
        } else {
            gemm::GEMM
        };
        let _host = rocm_device::host_time::span("driver: blas");
        self.device
            .launch_entry(entry, dtype.as_str(), config, &params)
    }

    /// The result of an empty inner dimension: zeros, row by row where the output is a slice.
    fn zero_output(
        &self,
        dtype: DType,
        out: &Buffer,
        out_l: OutputLayout,
        shape: MatmulShape,
    ) -> Result<()> {
        let size = dtype.size_in_bytes();
        let MatmulShape { batch, m, n, .. } = shape;
        if out_l == OutputLayout::contiguous(shape) {
            return self.device.memset(out, 0, batch * m * n * size, 0);
        }
        for b in 0..batch {
            for r in 0..m {
                let at = out_l.offset + b * out_l.batch_stride + r * out_l.ld;
                self.device.memset(out, at * size, n * size, 0)?;
            }
        }
        Ok(())
    }

    /// The operand as a gemm call reads it (offsets relative to the returned data's buffer),
    /// copying it to a contiguous buffer when no call can read its layout.
    fn readable<'a>(
        x: Operand<'a>,
        rows: usize,
        cols: usize,
    ) -> Result<(GemmOperand, Contiguous<'a>)> {
        if let Some(o) = plan::operand(x.layout, rows, cols) {
            let data = Contiguous::View {
                buffer: x.buffer,
                start: 0,
                dtype: x.dtype,
            };
            return Ok((o, data));
        }
        let copy = x.contiguous("matmul")?;
        let contiguous = Layout::contiguous_at(&x.layout.dims, copy.start());
        let o = plan::operand(&contiguous, rows, cols).ok_or_else(|| {
            Error::InvalidLayout(format!("matmul: contiguous {:?} unreadable", x.layout.dims))
        })?;
        Ok((o, copy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocm_device::config::lookup_in;

    #[test]
    fn options_come_from_their_variables() {
        assert_eq!(
            BlasOptions::from_lookup(lookup_in(&[])),
            BlasOptions::default()
        );
        let o = BlasOptions::from_lookup(lookup_in(&[(REDUCED_PRECISION_ENV, "bf16, f32")]));
        assert_eq!(
            o.reduced_precision,
            ReducedPrecision {
                f16: false,
                bf16: true,
                f32: true
            }
        );
        assert!(!o.portable);
        assert!(BlasOptions::from_lookup(lookup_in(&[(GEMM_ENV, "portable")])).portable);
        assert!(!BlasOptions::from_lookup(lookup_in(&[(GEMM_ENV, "vendor")])).portable);
    }
}

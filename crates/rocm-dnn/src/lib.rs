//! rocm-dnn: convolutions and pooling of candle-rocm, with Candle's semantics on NCHW / NCL
//! tensors: conv1d, conv2d, conv_transpose1d, conv_transpose2d (padding, stride, dilation,
//! output padding, groups) and max / average pool2d.
//!
//! Two paths, chosen per call:
//! - MIOpen (amd platform): loaded at run time ([`miopen`]); convolutions in immediate mode
//!   (find mode with `CANDLE_ROCM_MIOPEN_FIND=1`), transposed convolutions as MIOpen's
//!   backward-data pass; f32, f16, bf16.
//! - portable ([`portable`]): im2col + gemm (rocm-blas) for convolutions, gemm + col2im for
//!   transposed ones, our own pooling kernels. Used on the nvidia platform, where MIOpen is
//!   missing or disabled (`CANDLE_ROCM_DISABLE_MIOPEN=1`), and for dtypes MIOpen does not take
//!   (f64 convolutions; pooling of every dtype; transposed convolutions of integers, computed
//!   directly with wrapping sums as Candle's CPU backend does). Small transposed convolutions
//!   of floats (`DnnOptions::direct_transpose_max_macs`) take the same direct kernel on every
//!   platform: one launch instead of a gemm and a col2im.
//!
//! Inputs and kernels may have any layout; outputs are fresh contiguous buffers.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod miopen;
pub mod params;
pub mod portable;

use std::sync::Arc;

pub use params::{
    Conv1dParams, Conv2dParams, ConvSpec, ConvTranspose1dParams, ConvTranspose2dParams, Direction,
    Pool2dParams,
};
use rocm_blas::Blas;
pub use rocm_device::Operand;
use rocm_device::{Buffer, DType, Device, Error, Platform, Result};
use rocm_elementwise::OperandCopy;

/// Which implementation runs a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnnPath {
    MiOpen,
    Portable,
}

/// How a [`Dnn`] chooses its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DnnOptions {
    /// Use MIOpen where the platform has it.
    pub use_miopen: bool,
    /// MIOpen's find mode (time the algorithms once per shape) instead of immediate mode.
    pub find_mode: bool,
    /// Most bytes a column matrix of the portable path may take; batches beyond it run in
    /// chunks of batch entries.
    pub col_budget_bytes: usize,
    /// Transposed convolutions of floats with at most this many multiply-adds (outputs x
    /// input channels of a group x kernel taps) run as one direct kernel, before MIOpen and
    /// the gemm: at such sizes the launches, not the arithmetic, take the time.
    pub direct_transpose_max_macs: usize,
}

/// `1`: convolutions and pooling take the portable path even where MIOpen loads.
pub const DISABLE_MIOPEN_ENV: &str = "CANDLE_ROCM_DISABLE_MIOPEN";
/// `1`: MIOpen's find mode (times the solutions once per shape) instead of immediate mode.
pub const MIOPEN_FIND_ENV: &str = "CANDLE_ROCM_MIOPEN_FIND";

impl Default for DnnOptions {
    fn default() -> Self {
        DnnOptions {
            use_miopen: true,
            find_mode: false,
            col_budget_bytes: portable::COL_BUDGET_BYTES,
            direct_transpose_max_macs: portable::DIRECT_TRANSPOSE_MAX_MACS,
        }
    }
}

impl DnnOptions {
    /// The options `lookup` (a variable name to its value) describes: `use_miopen` unless
    /// [`DISABLE_MIOPEN_ENV`], `find_mode` from [`MIOPEN_FIND_ENV`], the rest the defaults.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        use rocm_device::config::flag;
        DnnOptions {
            use_miopen: !flag(lookup(DISABLE_MIOPEN_ENV)),
            find_mode: flag(lookup(MIOPEN_FIND_ENV)),
            ..DnnOptions::default()
        }
    }

    /// The process's environment, read once.
    pub fn global() -> Self {
        static GLOBAL: std::sync::OnceLock<DnnOptions> = std::sync::OnceLock::new();
        *GLOBAL.get_or_init(|| Self::from_lookup(rocm_device::config::env_lookup))
    }
}

/// Convolutions and pooling on one device.
#[derive(Debug)]
pub struct Dnn {
    /// Dropped before `blas` (and the device it holds): MIOpen's handle goes while its
    /// device is alive.
    miopen: Option<miopen::MiOpen>,
    blas: Arc<Blas>,
    col_budget: usize,
    direct_transpose_max_macs: usize,
}

impl Drop for Dnn {
    fn drop(&mut self) {
        // MIOpen's handle is destroyed next (field order), on its own device.
        if self.miopen.is_some() {
            if let Err(e) = self.blas.device().bind_to_thread() {
                tracing::warn!("binding the device to destroy its MIOpen handle: {e}");
            }
        }
    }
}

impl Dnn {
    /// With the environment's options ([`DnnOptions::global`]). On the amd platform MIOpen is
    /// loaded (not on the HIP shim over CUDA, which has none); where it is missing, a warning
    /// says so and the portable path serves every call.
    pub fn new(blas: Arc<Blas>) -> Result<Self> {
        Self::with_options(blas, DnnOptions::global())
    }

    pub fn with_options(blas: Arc<Blas>, options: DnnOptions) -> Result<Self> {
        let device = blas.device();
        let miopen = if options.use_miopen
            && device.info().platform == Platform::Amd
            && !device.config().hip_on_cuda
        {
            match miopen::MiOpen::new(device, options.find_mode) {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::warn!("MIOpen unavailable, convolutions use the portable path: {e}");
                    None
                }
            }
        } else {
            None
        };
        Ok(Dnn {
            blas,
            miopen,
            col_budget: options.col_budget_bytes,
            direct_transpose_max_macs: options.direct_transpose_max_macs,
        })
    }

    pub fn device(&self) -> &Device {
        self.blas.device()
    }

    /// The path a convolution of `dtype` takes (a transposed one with an output padding not
    /// below its stride always takes the portable path: see [`miopen::takes`]).
    pub fn conv_path(&self, dtype: DType) -> DnnPath {
        match (&self.miopen, miopen::data_type(dtype)) {
            (Some(_), Some(_)) => DnnPath::MiOpen,
            _ => DnnPath::Portable,
        }
    }

    /// `conv1d` of a (b, c_in, l) input with a (c_out, c_in / groups, k) kernel.
    pub fn conv1d(
        &self,
        input: Operand<'_>,
        kernel: Operand<'_>,
        p: &Conv1dParams,
    ) -> Result<Buffer> {
        self.convolve(&ConvSpec::conv1d(p)?, 3, input, kernel)
    }

    /// `conv2d` of a (b, c_in, h, w) input with a (c_out, c_in / groups, kh, kw) kernel.
    pub fn conv2d(
        &self,
        input: Operand<'_>,
        kernel: Operand<'_>,
        p: &Conv2dParams,
    ) -> Result<Buffer> {
        self.convolve(&ConvSpec::conv2d(p)?, 4, input, kernel)
    }

    /// `conv_transpose1d` of a (b, c_in, l) input with a (c_in, c_out / groups, k) kernel.
    pub fn conv_transpose1d(
        &self,
        input: Operand<'_>,
        kernel: Operand<'_>,
        p: &ConvTranspose1dParams,
    ) -> Result<Buffer> {
        self.convolve(&ConvSpec::conv_transpose1d(p)?, 3, input, kernel)
    }

    /// `conv_transpose2d` of a (b, c_in, h, w) input with a (c_in, c_out / groups, kh, kw)
    /// kernel.
    pub fn conv_transpose2d(
        &self,
        input: Operand<'_>,
        kernel: Operand<'_>,
        p: &ConvTranspose2dParams,
    ) -> Result<Buffer> {
        self.convolve(&ConvSpec::conv_transpose2d(p)?, 4, input, kernel)
    }

    fn convolve(
        &self,
        spec: &ConvSpec,
        rank: usize,
        input: Operand<'_>,
        kernel: Operand<'_>,
    ) -> Result<Buffer> {
        let op = spec.op;
        let dtype = input.dtype;
        if kernel.dtype != dtype {
            return Err(Error::DTypeMismatch {
                op,
                detail: format!("input {dtype}, kernel {}", kernel.dtype),
            });
        }
        let x_l = params::as_4d(op, "input", input.layout, rank)?;
        let k_l = params::as_4d(op, "kernel", kernel.layout, rank)?;
        params::check_dims(op, "input", &x_l, spec.input_dims())?;
        params::check_dims(op, "kernel", &k_l, spec.kernel_dims())?;
        input.check(op)?;
        kernel.check(op)?;
        let x4 = Operand::new(input.buffer, dtype, &x_l);
        let k4 = Operand::new(kernel.buffer, dtype, &k_l);
        if dtype.is_int() && spec.direction == Direction::Transpose {
            // Candle's CPU backend computes these; the BLAS has no integer gemm.
            return portable::conv_transpose_direct(self.device(), spec, x4, k4);
        }
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
            return Err(Error::UnsupportedDType { op, dtype });
        }
        let _span = tracing::debug_span!("conv", op, %dtype, dims = ?spec.input_dims()).entered();
        if spec.direction == Direction::Transpose && spec.macs() <= self.direct_transpose_max_macs {
            return portable::conv_transpose_direct(self.device(), spec, x4, k4);
        }
        if let (Some(m), DnnPath::MiOpen, true) =
            (&self.miopen, self.conv_path(dtype), miopen::takes(spec))
        {
            let x = input.contiguous(op)?;
            let k = kernel.contiguous(op)?;
            return m.convolution(
                dtype,
                spec,
                (x.buffer(), x.start()),
                (k.buffer(), k.start()),
            );
        }
        let run = match spec.direction {
            Direction::Forward => portable::conv_forward,
            Direction::Transpose => portable::conv_transpose,
        };
        run(&self.blas, self.col_budget, spec, x4, kernel)
    }

    /// `max_pool2d` of a (b, c, h, w) input, any dtype.
    pub fn max_pool2d(&self, input: Operand<'_>, p: &Pool2dParams) -> Result<Buffer> {
        self.pool(true, input, p)
    }

    /// `avg_pool2d` of a (b, c, h, w) input, any dtype, computed as Candle's CPU backend does
    /// on the portable path.
    pub fn avg_pool2d(&self, input: Operand<'_>, p: &Pool2dParams) -> Result<Buffer> {
        self.pool(false, input, p)
    }

    fn pool(&self, is_max: bool, input: Operand<'_>, p: &Pool2dParams) -> Result<Buffer> {
        let op = if is_max { "max_pool2d" } else { "avg_pool2d" };
        let dtype = input.dtype;
        let x_l = params::as_4d(op, "input", input.layout, 4)?;
        input.check(op)?;
        let [b, c, h, w] = [x_l.dims[0], x_l.dims[1], x_l.dims[2], x_l.dims[3]];
        let out = |len, k, s| params::pool_out_len(len, k, s);
        let (Some(oh), Some(ow)) = (
            out(h, p.kernel.0, p.stride.0),
            out(w, p.kernel.1, p.stride.1),
        ) else {
            return Err(Error::ShapeMismatch {
                op,
                detail: format!(
                    "window {:?} with stride {:?} does not fit the input {h}x{w}",
                    p.kernel, p.stride
                ),
            });
        };
        let _span = tracing::debug_span!("pool", op, %dtype, dims = ?x_l.dims).entered();
        if let (Some(m), Some(_)) = (&self.miopen, miopen::data_type(dtype)) {
            let x = input.contiguous(op)?;
            let data = (x.buffer(), x.start());
            return m.pool2d(dtype, is_max, data, [b, c, h, w], p, [b, c, oh, ow]);
        }
        let x4 = Operand::new(input.buffer, dtype, &x_l);
        portable::pool2d(self.device(), is_max, x4, p, (oh, ow))
    }
}

#[cfg(test)]
mod options_tests {
    use super::*;
    use rocm_device::config::lookup_in;

    #[test]
    fn options_come_from_their_variables() {
        assert_eq!(
            DnnOptions::from_lookup(lookup_in(&[])),
            DnnOptions::default()
        );
        let o = DnnOptions::from_lookup(lookup_in(&[
            (DISABLE_MIOPEN_ENV, "1"),
            (MIOPEN_FIND_ENV, "1"),
        ]));
        assert!(!o.use_miopen && o.find_mode);
    }
}

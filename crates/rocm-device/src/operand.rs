//! The one borrowed operand type of the op crates, and the strided copy that makes any
//! operand contiguous.

use crate::device::{Buffer, Device};
use crate::error::{Error, Result};
use crate::kernels::{fill, DevicePtr};
use crate::launch::{KernelLayout, LaunchConfig, MAX_GRID_YZ};
use crate::tensor::{DType, Layout};

/// An op's input: `buffer` holds `dtype` elements, read through `layout` (dims, strides and
/// start offset in elements).
#[derive(Debug, Clone, Copy)]
pub struct Operand<'a> {
    pub buffer: &'a Buffer,
    pub dtype: DType,
    pub layout: &'a Layout,
}

impl<'a> Operand<'a> {
    pub fn new(buffer: &'a Buffer, dtype: DType, layout: &'a Layout) -> Self {
        Operand {
            buffer,
            dtype,
            layout,
        }
    }

    pub fn device(&self) -> &'a Device {
        self.buffer.device()
    }

    pub fn elem_count(&self) -> usize {
        self.layout.elem_count()
    }

    /// Every element of the layout lies inside the buffer, or `SizeMismatch` naming `op`.
    pub fn check(&self, op: &'static str) -> Result<()> {
        self.layout.check_fits(op, self.dtype, self.buffer)
    }

    /// The checked by-value kernel form of the layout.
    pub fn kernel_layout(&self, op: &'static str) -> Result<KernelLayout> {
        self.check(op)?;
        self.layout.kernel_layout()
    }

    /// The operand as contiguous elements: itself (at its start offset) when its layout is
    /// row-major contiguous, else a contiguous copy. Checked either way.
    pub fn contiguous(&self, op: &'static str) -> Result<Contiguous<'a>> {
        self.check(op)?;
        if self.layout.is_contiguous() {
            return Ok(Contiguous::View {
                buffer: self.buffer,
                start: self.layout.start,
                dtype: self.dtype,
            });
        }
        let bytes = self
            .elem_count()
            .checked_mul(self.dtype.size_in_bytes())
            .ok_or_else(|| Error::SizeMismatch {
                op,
                detail: format!("{} {} elements overflow", self.elem_count(), self.dtype),
            })?;
        let copy = self.device().alloc(bytes)?;
        self.copy_to(&copy, 0)?;
        Ok(Contiguous::Copy {
            buffer: copy,
            dtype: self.dtype,
        })
    }

    /// Writes the operand's elements contiguously into `dst` from element `dst_offset`.
    /// Transposes (a unit-stride axis that is not the last, with at most one batch axis) go
    /// through a tiled kernel, everything else through the elementwise strided copy.
    pub fn copy_to(&self, dst: &Buffer, dst_offset: usize) -> Result<()> {
        const OP: &str = "copy_strided";
        let kl = self.kernel_layout(OP)?;
        let n = self.elem_count();
        let size = self.dtype.size_in_bytes();
        Layout::contiguous_at(&[n], dst_offset).check_fits(OP, self.dtype, dst)?;
        if n == 0 {
            return Ok(());
        }
        let device = self.device();
        let (src, dst) = (self.buffer.ptr(), dst.ptr_at(dst_offset * size)?);
        if let Some(t) = Transpose::of(&kl) {
            return t.launch(device, self.dtype, dst_offset, (src, dst));
        }
        let params = fill::CopyStridedParams {
            src,
            dst,
            n: n as u64,
            src_layout: kl,
        };
        let _span = tracing::debug_span!("op", op = OP, dtype = %self.dtype, n).entered();
        device.launch_entry_elements(fill::COPY_STRIDED, self.dtype.as_str(), n as u64, &params)
    }
}

/// An operand made contiguous: borrowed when it already was, else an owned copy.
#[derive(Debug)]
pub enum Contiguous<'a> {
    View {
        buffer: &'a Buffer,
        start: usize,
        dtype: DType,
    },
    Copy {
        buffer: Buffer,
        dtype: DType,
    },
}

impl Contiguous<'_> {
    pub fn buffer(&self) -> &Buffer {
        match self {
            Contiguous::View { buffer, .. } => buffer,
            Contiguous::Copy { buffer, .. } => buffer,
        }
    }

    /// The element offset of the first element in [`Self::buffer`].
    pub fn start(&self) -> usize {
        match self {
            Contiguous::View { start, .. } => *start,
            Contiguous::Copy { .. } => 0,
        }
    }

    /// Whether this is a fresh copy.
    pub fn is_copy(&self) -> bool {
        matches!(self, Contiguous::Copy { .. })
    }

    fn dtype(&self) -> DType {
        match self {
            Contiguous::View { dtype, .. } | Contiguous::Copy { dtype, .. } => *dtype,
        }
    }

    /// The device address of the first element.
    pub fn address(&self) -> u64 {
        self.buffer().device_ptr() + (self.start() * self.dtype().size_in_bytes()) as u64
    }

    /// The first element as a typed kernel parameter.
    pub fn ptr(&self) -> Result<rocm_kernels::DevicePtr> {
        self.buffer()
            .ptr_at(self.start() * self.dtype().size_in_bytes())
    }
}

/// A (batch, d0, d1) view whose d0 axis has stride 1: the tiled transpose kernel's case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Transpose {
    batch: u64,
    d0: u64,
    d1: u64,
    batch_stride: u64,
    s1: u64,
    start: u64,
}

impl Transpose {
    const TILE: u64 = 32;

    fn of(kl: &KernelLayout) -> Option<Self> {
        let nd = kl.ndim as usize;
        if !(2..=3).contains(&nd) || kl.strides[nd - 2] != 1 || kl.strides[nd - 1] == 1 {
            return None;
        }
        let (batch, batch_stride) = if nd == 3 {
            (kl.dims[0], kl.strides[0])
        } else {
            (1, 0)
        };
        let t = Transpose {
            batch,
            d0: kl.dims[nd - 2],
            d1: kl.dims[nd - 1],
            batch_stride,
            s1: kl.strides[nd - 1],
            start: kl.start,
        };
        // Narrow tiles waste most of the block; the grid's y axis bounds d1.
        (t.d0 >= 8 && t.d1 >= 8 && t.d1.div_ceil(Self::TILE) <= u64::from(MAX_GRID_YZ)).then_some(t)
    }

    /// Whether the pair kernel applies: elements of at most 4 bytes and every pair aligned.
    fn pairs_fit(&self, dtype: DType, dst_offset: usize) -> bool {
        let even = |v: u64| v % 2 == 0;
        dtype.size_in_bytes() <= 4
            && even(self.start)
            && even(self.s1)
            && even(self.d1)
            && (self.batch == 1 || even(self.batch_stride))
            && dst_offset % 2 == 0
    }

    /// Launches the transpose from `src` (the view's buffer) to `dst` (its first element).
    fn launch(
        &self,
        device: &Device,
        dtype: DType,
        dst_offset: usize,
        (src, dst): (DevicePtr, DevicePtr),
    ) -> Result<()> {
        let params = fill::TransposeParams {
            src,
            dst,
            batch: self.batch,
            d0: self.d0,
            d1: self.d1,
            s_batch: self.batch_stride,
            s1: self.s1,
            start: self.start,
        };
        let (entry, tile) = if self.pairs_fit(dtype, dst_offset) {
            (fill::TRANSPOSE_PAIRS, 2 * Self::TILE)
        } else {
            (fill::TRANSPOSE, Self::TILE)
        };
        let config = LaunchConfig {
            grid: [
                self.d0.div_ceil(tile) as u32,
                self.d1.div_ceil(tile) as u32,
                self.batch.min(u64::from(MAX_GRID_YZ)) as u32,
            ],
            block: [Self::TILE as u32, 8, 1],
            shared_mem_bytes: 0,
        };
        let _span = tracing::debug_span!("op", op = entry.op, dtype = %dtype, batch = self.batch, d0 = self.d0, d1 = self.d1).entered();
        device.launch_entry(entry, dtype.as_str(), config, &params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kl(dims: &[usize], strides: &[usize], start: usize) -> KernelLayout {
        Layout::new(dims, strides, start).kernel_layout().unwrap()
    }

    #[test]
    fn transposes_are_recognised() {
        // (64, 48) transposed view of a (48, 64) tensor
        let t = Transpose::of(&kl(&[64, 48], &[1, 64], 5)).unwrap();
        assert_eq!((t.batch, t.d0, t.d1, t.s1, t.start), (1, 64, 48, 64, 5));
        // batched: (3, 33, 17) view of (3, 17, 33)
        let t = Transpose::of(&kl(&[3, 33, 17], &[561, 1, 33], 0)).unwrap();
        assert_eq!(
            (t.batch, t.batch_stride, t.d0, t.d1, t.s1),
            (3, 561, 33, 17, 33)
        );
        // contiguous, broadcast, too narrow, too many dims: not this kernel's case
        assert_eq!(Transpose::of(&kl(&[64, 48], &[48, 1], 0)), None);
        assert_eq!(Transpose::of(&kl(&[64, 48], &[0, 1], 0)), None);
        assert_eq!(Transpose::of(&kl(&[64, 4], &[1, 64], 0)), None);
        // pairs need even start, strides, d1 and destination offset, and small elements
        let t = Transpose::of(&kl(&[64, 48], &[1, 64], 0)).unwrap();
        assert!(t.pairs_fit(DType::BF16, 0) && t.pairs_fit(DType::F32, 2));
        assert!(!t.pairs_fit(DType::F64, 0) && !t.pairs_fit(DType::F16, 1));
        assert!(!Transpose::of(&kl(&[64, 48], &[1, 64], 3))
            .unwrap()
            .pairs_fit(DType::U8, 0));
        assert!(!Transpose::of(&kl(&[64, 47], &[1, 64], 0))
            .unwrap()
            .pairs_fit(DType::U8, 0));
        assert_eq!(
            Transpose::of(&kl(&[2, 3, 64, 48], &[10000, 3333, 1, 64], 0)),
            None
        );
        // batch dims that merge into one are fine
        assert_eq!(
            Transpose::of(&kl(&[2, 3, 64, 48], &[9999, 3333, 1, 64], 0))
                .unwrap()
                .batch,
            6
        );
    }
}

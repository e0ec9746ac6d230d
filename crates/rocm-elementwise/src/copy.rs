//! The strided copies that make any operand contiguous: the elementwise strided copy, and a
//! tiled transpose where a unit-stride axis is not the last. Every op crate that needs an
//! operand's elements in order takes them through [`OperandCopy`].

use rocm_device::{
    Buffer, Contiguous, DType, Device, Error, KernelLayout, LaunchConfig, Layout, Operand, Result,
    MAX_GRID_YZ,
};
use rocm_kernels::{fill, DevicePtr};

/// An operand's elements in row-major order: the operand itself where it already is, else a
/// copy.
pub trait OperandCopy<'a> {
    /// The operand as contiguous elements: itself (at its start offset) when its layout is
    /// row-major contiguous, else a contiguous copy. Checked either way.
    fn contiguous(&self, op: &'static str) -> Result<Contiguous<'a>>;

    /// Writes the operand's elements contiguously into `dst` from element `dst_offset`.
    /// Transposes (a unit-stride axis that is not the last, with at most one batch axis) go
    /// through a tiled kernel, everything else through the elementwise strided copy.
    fn copy_to(&self, dst: &Buffer, dst_offset: usize) -> Result<()>;
}

impl<'a> OperandCopy<'a> for Operand<'a> {
    fn contiguous(&self, op: &'static str) -> Result<Contiguous<'a>> {
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

    fn copy_to(&self, dst: &Buffer, dst_offset: usize) -> Result<()> {
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

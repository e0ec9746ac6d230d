//! The element types and strided layouts the op crates share (Candle-agnostic mirrors of
//! Candle's `DType`, `Scalar` and `Layout`).

use std::fmt;

use crate::device::Buffer;
use crate::error::{Error, Result};

/// Element types, named as Candle 0.11.1's `DType::as_str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    U8,
    U32,
    I16,
    I32,
    I64,
    BF16,
    F16,
    F32,
    F64,
    F8E4M3,
}

impl DType {
    pub const ALL: [DType; 10] = [
        DType::U8,
        DType::U32,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::F8E4M3,
    ];

    /// The kernel-name suffix (`f32`, `bf16`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F8E4M3 => "f8e4m3",
        }
    }

    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::U8 | DType::F8E4M3 => 1,
            DType::I16 | DType::BF16 | DType::F16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DType::BF16 | DType::F16 | DType::F32 | DType::F64 | DType::F8E4M3
        )
    }

    pub const fn is_int(self) -> bool {
        !self.is_float()
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value of a dtype (narrow floats as their bit patterns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    U8(u8),
    U32(u32),
    I16(i16),
    I32(i32),
    I64(i64),
    BF16(half::bf16),
    F16(half::f16),
    F32(f32),
    F64(f64),
    /// The f8e4m3 bit pattern.
    F8E4M3(u8),
}

impl Scalar {
    pub fn dtype(&self) -> DType {
        match self {
            Scalar::U8(_) => DType::U8,
            Scalar::U32(_) => DType::U32,
            Scalar::I16(_) => DType::I16,
            Scalar::I32(_) => DType::I32,
            Scalar::I64(_) => DType::I64,
            Scalar::BF16(_) => DType::BF16,
            Scalar::F16(_) => DType::F16,
            Scalar::F32(_) => DType::F32,
            Scalar::F64(_) => DType::F64,
            Scalar::F8E4M3(_) => DType::F8E4M3,
        }
    }

    /// The value's bytes, as the device stores it.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match *self {
            Scalar::U8(v) | Scalar::F8E4M3(v) => vec![v],
            Scalar::U32(v) => v.to_le_bytes().to_vec(),
            Scalar::I16(v) => v.to_le_bytes().to_vec(),
            Scalar::I32(v) => v.to_le_bytes().to_vec(),
            Scalar::I64(v) => v.to_le_bytes().to_vec(),
            Scalar::BF16(v) => v.to_bits().to_le_bytes().to_vec(),
            Scalar::F16(v) => v.to_bits().to_le_bytes().to_vec(),
            Scalar::F32(v) => v.to_le_bytes().to_vec(),
            Scalar::F64(v) => v.to_le_bytes().to_vec(),
        }
    }

    /// The value zero-extended into the 8 bytes a by-value kernel argument slot holds.
    pub fn to_arg_bits(&self) -> u64 {
        let mut word = [0u8; 8];
        let bytes = self.to_le_bytes();
        word[..bytes.len()].copy_from_slice(&bytes);
        u64::from_le_bytes(word)
    }
}

/// A strided view in elements: dims, strides and the start offset (Candle's `Layout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub dims: Vec<usize>,
    pub strides: Vec<usize>,
    pub start: usize,
}

impl Layout {
    /// A row-major contiguous layout of `dims` at offset 0.
    pub fn contiguous(dims: &[usize]) -> Self {
        Self::contiguous_at(dims, 0)
    }

    /// A row-major contiguous layout of `dims` at `start`.
    pub fn contiguous_at(dims: &[usize], start: usize) -> Self {
        let mut strides = vec![1usize; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * dims[i + 1].max(1);
        }
        Layout {
            dims: dims.to_vec(),
            strides,
            start,
        }
    }

    pub fn new(dims: &[usize], strides: &[usize], start: usize) -> Self {
        Layout {
            dims: dims.to_vec(),
            strides: strides.to_vec(),
            start,
        }
    }

    pub fn elem_count(&self) -> usize {
        self.dims.iter().product()
    }

    /// Row-major contiguous (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1usize;
        for (&d, &s) in self.dims.iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected = expected.saturating_mul(d);
        }
        true
    }

    /// One past the largest element offset the layout touches (0 when it is empty), or an
    /// error when that does not fit in `usize`.
    pub fn required_len(&self) -> Result<usize> {
        if self.dims.len() != self.strides.len() {
            return Err(Error::InvalidLayout(format!(
                "{} dims but {} strides",
                self.dims.len(),
                self.strides.len()
            )));
        }
        if self.elem_count() == 0 {
            return Ok(0);
        }
        let mut last = self.start;
        for (&d, &s) in self.dims.iter().zip(&self.strides) {
            last = (d - 1)
                .checked_mul(s)
                .and_then(|span| last.checked_add(span))
                .ok_or_else(|| Error::InvalidLayout(format!("{self:?} overflows")))?;
        }
        Ok(last + 1)
    }

    /// Checks that every element of the layout lies inside `buffer` holding `dtype`s.
    pub fn check_fits(&self, op: &'static str, dtype: DType, buffer: &Buffer) -> Result<()> {
        let need = self.required_len()?;
        let have = buffer.len() / dtype.size_in_bytes();
        if need > have {
            return Err(Error::SizeMismatch {
                op,
                detail: format!(
                    "layout {:?} (strides {:?}, start {}) needs {need} {dtype} elements, the buffer holds {have}",
                    self.dims, self.strides, self.start
                ),
            });
        }
        Ok(())
    }

    /// The by-value kernel form of this layout.
    pub fn kernel_layout(&self) -> Result<crate::KernelLayout> {
        Ok(crate::KernelLayout::new(
            &self.dims,
            &self.strides,
            self.start,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_layouts_and_required_lengths() {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(l.strides, vec![12, 4, 1]);
        assert!(l.is_contiguous());
        assert_eq!(l.required_len().unwrap(), 24);
        let t = Layout::new(&[4, 3], &[1, 4], 2);
        assert!(!t.is_contiguous());
        assert_eq!(t.required_len().unwrap(), 2 + 3 + 8 + 1);
        let b = Layout::new(&[5, 3], &[0, 1], 7);
        assert_eq!(b.required_len().unwrap(), 10);
        assert_eq!(Layout::new(&[0, 3], &[3, 1], 99).required_len().unwrap(), 0);
        assert!(Layout::new(&[2], &[1, 1], 0).required_len().is_err());
        assert!(Layout::new(&[3], &[usize::MAX], 0).required_len().is_err());
        // size-1 dims may carry any stride
        assert!(Layout::new(&[1, 4], &[77, 1], 0).is_contiguous());
    }

    #[test]
    fn scalars_pack_into_argument_words() {
        assert_eq!(Scalar::U8(0xab).to_arg_bits(), 0xab);
        assert_eq!(Scalar::I16(-1).to_arg_bits(), 0xffff);
        assert_eq!(
            Scalar::BF16(half::bf16::from_f32(1.0)).to_arg_bits(),
            0x3f80
        );
        assert_eq!(Scalar::F64(1.0).to_arg_bits(), 1f64.to_bits());
        assert_eq!(Scalar::F8E4M3(0x38).dtype(), DType::F8E4M3);
        assert_eq!(DType::F8E4M3.as_str(), "f8e4m3");
        assert!(DType::ALL.iter().filter(|d| d.is_float()).count() == 5);
    }
}

//! The one borrowed operand type of the op crates, and what an operand made contiguous is
//! (rocm-elementwise's `OperandCopy` makes one: the copies are kernels of the table).

use crate::device::{Buffer, Device};
use crate::error::{Error, Result};
use crate::launch::KernelLayout;
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
    pub fn ptr(&self) -> Result<crate::kernel::DevicePtr> {
        self.buffer()
            .ptr_at(self.start() * self.dtype().size_in_bytes())
    }
}

/// Ok for the floating-point dtypes an op computes in (bf16, f16, f32, f64), else a typed
/// error naming `op` and `dtype`.
pub fn require_float(op: &'static str, dtype: DType) -> Result<()> {
    if matches!(dtype, DType::BF16 | DType::F16 | DType::F32 | DType::F64) {
        Ok(())
    } else {
        Err(Error::UnsupportedDType { op, dtype })
    }
}

/// Every one of `others` has `first`'s dtype, or a typed error naming `op` and the two.
pub fn same_dtype(
    op: &'static str,
    (first_name, first): (&str, &Operand<'_>),
    others: &[(&str, &Operand<'_>)],
) -> Result<()> {
    match others.iter().find(|(_, x)| x.dtype != first.dtype) {
        Some((name, x)) => Err(Error::DTypeMismatch {
            op,
            detail: format!("{first_name} {}, {name} {}", first.dtype, x.dtype),
        }),
        None => Ok(()),
    }
}

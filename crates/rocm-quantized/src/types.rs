//! The block types, the activations' q8 schemes and a matrix of blocks on the device.

use crate::*;

/// Candle's `GgmlDType`: the block types of GGUF files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
}

impl GgmlType {
    pub const ALL: [GgmlType; 15] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Q8K,
    ];

    /// The kernels' key (`q4_0`, `q4k`, ...), one of `rocm_kernels::GGML_TYPES`.
    pub const fn key(self) -> &'static str {
        match self {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::BF16 => "bf16",
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q8_1 => "q8_1",
            GgmlType::Q2K => "q2k",
            GgmlType::Q3K => "q3k",
            GgmlType::Q4K => "q4k",
            GgmlType::Q5K => "q5k",
            GgmlType::Q6K => "q6k",
            GgmlType::Q8K => "q8k",
        }
    }

    /// A block type (quantized values with per-block scales), not a plain float type.
    pub const fn is_block(self) -> bool {
        !matches!(self, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
    }

    /// The activation form the integer dot products pair with this block type: Candle's CPU
    /// `VecDotType` (None for the float types).
    pub const fn q8_scheme(self) -> Option<Q8Scheme> {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => None,
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => Some(Q8Scheme::Q8_0),
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q8_1 => Some(Q8Scheme::Q8_1),
            _ => Some(Q8Scheme::Q8K),
        }
    }

    /// Values per block.
    pub const fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1 => 32,
            _ => 256,
        }
    }

    /// Bytes per block (ggml's layout).
    pub const fn type_size(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q8_1 => 36,
            GgmlType::Q2K => 84,
            GgmlType::Q3K => 110,
            GgmlType::Q4K => 144,
            GgmlType::Q5K => 176,
            GgmlType::Q6K => 210,
            GgmlType::Q8K => 292,
        }
    }
}

/// How activations are quantized for the integer dot products, as Candle's CPU quantizes them
/// for each weight type (so the integer sums are the CPU's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Q8Scheme {
    /// Per 32 values d = amax / 127 (kept as f16), bytes round(x / d).
    Q8_0,
    /// Q8_0's bytes and scale; the dot rebuilds the CPU's f16 sum term.
    Q8_1,
    /// Per 256 values d = max / -127 for the value of largest magnitude (f32), bytes
    /// round(x / d) clamped to i8.
    Q8K,
}

impl Q8Scheme {
    /// The kernels' scheme number (Q8_SCHEME_* in quantized.hip).
    pub(crate) const fn code(self) -> u32 {
        match self {
            Q8Scheme::Q8_0 => 0,
            Q8Scheme::Q8_1 => 1,
            Q8Scheme::Q8K => 2,
        }
    }

    /// Values per scale.
    pub const fn block(self) -> usize {
        match self {
            Q8Scheme::Q8K => 256,
            _ => 32,
        }
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

/// A (rows, k) matrix of `ty` blocks in `buffer` in the device layout ([`layout`]), row after
/// row (a row is k / block_size blocks).
#[derive(Debug, Clone, Copy)]
pub struct QWeights<'a> {
    pub buffer: &'a Buffer,
    pub ty: GgmlType,
    pub rows: usize,
    pub k: usize,
}

impl QWeights<'_> {
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.k / self.ty.block_size() * self.ty.type_size()
    }

    /// Blocks in the buffer: where the device layout puts the blocks' other fields depends on
    /// it.
    pub fn buffer_blocks(&self) -> usize {
        self.buffer.len() / self.ty.type_size()
    }

    /// `k` is a whole number of blocks and the buffer holds every row in whole blocks, or a
    /// typed error naming `op`, the type and the shape.
    pub fn check(&self, op: &'static str) -> Result<()> {
        if self.k % self.ty.block_size() != 0 {
            return Err(Error::ShapeMismatch {
                op,
                detail: format!(
                    "{} rows of {} {} values: {} is not a multiple of the block size {}",
                    self.rows,
                    self.k,
                    self.ty,
                    self.k,
                    self.ty.block_size()
                ),
            });
        }
        if self.buffer.len() % self.ty.type_size() != 0 {
            return Err(Error::SizeMismatch {
                op,
                detail: format!(
                    "a buffer of {} bytes is not a whole number of {}-byte {} blocks",
                    self.buffer.len(),
                    self.ty.type_size(),
                    self.ty
                ),
            });
        }
        let need = self
            .rows
            .checked_mul(self.row_bytes())
            .ok_or_else(|| Error::SizeMismatch {
                op,
                detail: format!(
                    "{} rows of {} {} values overflow",
                    self.rows, self.k, self.ty
                ),
            })?;
        if need > self.buffer.len() {
            return Err(Error::SizeMismatch {
                op,
                detail: format!(
                    "({}, {}) {} needs {need} bytes, the buffer holds {}",
                    self.rows,
                    self.k,
                    self.ty,
                    self.buffer.len()
                ),
            });
        }
        Ok(())
    }
}

//! The strided layout kernels take by value: the host's mirror of `include/layout.h`.

use bytemuck::{Pod, Zeroable};

/// A layout no kernel can take (more strided dims than [`MAX_DIMS`] after merging, dims and
/// strides of different lengths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutError(pub String);

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LayoutError {}

/// Most dims a [`KernelLayout`] carries (after merging contiguous dims).
pub const MAX_DIMS: usize = 8;

/// A strided layout passed to kernels by value (mirrors `layout.h`), in elements.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct KernelLayout {
    pub ndim: u32,
    /// 1 when every linear index and relative offset fits in 32 bits.
    pub fits_u32: u32,
    pub start: u64,
    pub dims: [u64; MAX_DIMS],
    pub strides: [u64; MAX_DIMS],
}

impl KernelLayout {
    /// Builds the layout of a tensor with `dims`/`strides` (elements) starting at `start`.
    /// Size-1 dims are dropped and dims that are contiguous with each other merged, so only
    /// genuinely strided tensors of more than 8 dims are refused.
    pub fn new(dims: &[usize], strides: &[usize], start: usize) -> Result<Self, LayoutError> {
        if dims.len() != strides.len() {
            return Err(LayoutError(format!(
                "{} dims but {} strides",
                dims.len(),
                strides.len()
            )));
        }
        // Merged (dim, stride) pairs, innermost last; held inline (no allocation per launch).
        let mut merged = [(0u64, 0u64); MAX_DIMS];
        let mut count = 0usize;
        let mut push = |pair: (u64, u64)| {
            if count < MAX_DIMS {
                merged[count] = pair;
            }
            count += 1;
        };
        let mut open: Option<(u64, u64)> = None;
        for (&d, &s) in dims.iter().zip(strides) {
            if d == 1 {
                continue;
            }
            let (d, s) = (d as u64, s as u64);
            match open.as_mut() {
                Some((pd, ps)) if *ps == s * d => {
                    *pd *= d;
                    *ps = s;
                }
                _ => {
                    if let Some(pair) = open.replace((d, s)) {
                        push(pair);
                    }
                }
            }
        }
        if let Some(pair) = open {
            push(pair);
        }
        if count > MAX_DIMS {
            return Err(LayoutError(format!(
                "{count} strided dims after merging (dims {dims:?}, strides {strides:?}); at most {MAX_DIMS}"
            )));
        }
        let merged = &merged[..count];
        let numel: u128 = dims.iter().map(|&d| d as u128).product();
        let span: u128 = merged
            .iter()
            .map(|&(d, s)| (d as u128).saturating_sub(1) * s as u128)
            .sum();
        let mut l = KernelLayout::zeroed();
        l.ndim = merged.len() as u32;
        l.fits_u32 = u32::from(numel <= u32::MAX as u128 && span <= u32::MAX as u128);
        l.start = start as u64;
        for (i, &(d, s)) in merged.iter().enumerate() {
            l.dims[i] = d;
            l.strides[i] = s;
        }
        Ok(l)
    }

    /// Host mirror of `layout_offset` in layout.h (for tests and references).
    pub fn offset(&self, mut i: u64) -> u64 {
        let mut off = 0;
        for d in (0..self.ndim as usize).rev() {
            off += (i % self.dims[d]) * self.strides[d];
            i /= self.dims[d];
        }
        self.start + off
    }
}

//! The fill module's parameter lists and entries (fill.hip) that the runtime and the op crates
//! launch (the rest are launched by the runtime's tests through the untyped path).

use crate::params::{ArgSink, KernelArg};
use crate::{
    DevicePtr, Entry, EntryGroup, KernelLayout, KernelModule, KernelParams, DTYPES, HEADERS, WIDTHS,
};

/// fill, iota, copies (contiguous, strided, 2-D, tiled transpose) and strided constant set.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "fill",
    source: include_str!("fill.hip"),
    groups: &[
        EntryGroup {
            ops: &[
                "fill",
                "iota",
                "copy",
                "copy_strided",
                "const_set",
                "transpose",
                "transpose_pairs",
            ],
            dtypes: &DTYPES,
        },
        EntryGroup {
            ops: &["copy2d"],
            dtypes: &WIDTHS,
        },
    ],
    params: &[
        CopyStridedParams::DECL,
        ConstSetParams::DECL,
        TransposeParams::DECL,
        Copy2dParams::DECL,
    ],
};

/// Most blocks one `copy2d` launch copies: fill.hip's `COPY2D_MAX_BLOCKS` (a test holds
/// the two equal).
pub const COPY2D_MAX_BLOCKS: usize = 8;

/// fill.hip's `Copy2dBlocks`: per block, the source address (of its first element), its
/// width and source stride and its first column in the destination, all in copy units.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Copy2dBlocks {
    pub src: [u64; COPY2D_MAX_BLOCKS],
    pub cols: [u64; COPY2D_MAX_BLOCKS],
    pub src_stride: [u64; COPY2D_MAX_BLOCKS],
    pub dst_col: [u64; COPY2D_MAX_BLOCKS],
}

impl KernelArg for Copy2dBlocks {
    const C_TYPE: &'static str = "Copy2dBlocks";
    fn push_to<S: ArgSink>(&self, sink: &mut S) {
        sink.scalar(*self);
    }
}

crate::kernel_params! {
    /// dst[i] = src at i of `src_layout`, over `n` elements.
    pub struct CopyStridedParams = "COPY_STRIDED_PARAMS(T)" {
        src: DevicePtr = "const T*",
        dst: DevicePtr = "T*",
        n: u64,
        src_layout: KernelLayout,
    }
}

crate::kernel_params! {
    /// Every element of `l` in `dst` set to `value` (its bits in the low bytes of the
    /// word, read as T).
    pub struct ConstSetParams = "CONST_SET_PARAMS(T)" {
        dst: DevicePtr = "T*",
        value: u64 = "T",
        n: u64,
        l: KernelLayout,
    }
}

crate::kernel_params! {
    /// A tiled transpose of `batch` (d0, d1) views with unit stride on d0 into contiguous
    /// (d0, d1) blocks.
    pub struct TransposeParams = "TRANSPOSE_PARAMS(T)" {
        src: DevicePtr = "const T*",
        dst: DevicePtr = "T*",
        batch: u64,
        d0: u64,
        d1: u64,
        s_batch: u64,
        s1: u64,
        start: u64,
    }
}

crate::kernel_params! {
    /// Up to [`COPY2D_MAX_BLOCKS`] 2-D blocks of `rows` rows into `dst`.
    pub struct Copy2dParams = "COPY2D_PARAMS(R)" {
        dst: DevicePtr = "R*",
        rows: u64,
        dst_stride: u64,
        blocks: Copy2dBlocks,
    }
}

pub const COPY_STRIDED: Entry<CopyStridedParams> = Entry::new(&MODULE, "copy_strided");
pub const CONST_SET: Entry<ConstSetParams> = Entry::new(&MODULE, "const_set");
pub const TRANSPOSE: Entry<TransposeParams> = Entry::new(&MODULE, "transpose");
/// Two elements a thread (small dtypes, even sizes).
pub const TRANSPOSE_PAIRS: Entry<TransposeParams> = Entry::new(&MODULE, "transpose_pairs");
/// Keyed by the copy unit's width.
pub const COPY2D: Entry<Copy2dParams> = Entry::new(&MODULE, "copy2d");

#[cfg(test)]
mod tests {
    use super::{COPY2D_MAX_BLOCKS, MODULE};

    #[test]
    fn the_copy2d_block_limit_is_fill_hips() {
        assert_eq!(
            MODULE.define("COPY2D_MAX_BLOCKS"),
            Some(COPY2D_MAX_BLOCKS as u64)
        );
    }
}

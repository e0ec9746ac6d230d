//! The resizes' entries and their one parameter list (upsample.hip).

use crate::{
    DevicePtr, Entry, EntryGroup, KernelLayout, KernelModule, KernelParams, DTYPES, HEADERS, WIDTHS,
};

/// Nearest upsampling by width, bilinear by dtype.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "upsample",
    source: include_str!("upsample.hip"),
    groups: &[
        EntryGroup {
            ops: &["upsample_nearest1d", "upsample_nearest2d"],
            dtypes: &WIDTHS,
        },
        EntryGroup {
            ops: &["upsample_bilinear2d"],
            dtypes: &DTYPES,
        },
    ],
    params: &[Params::DECL],
};

crate::kernel_params! {
    /// `n` outputs of (b, c, [h,] w) images: the input's (b, c) offsets at `outer`, its
    /// spatial strides, sizes in and out, the source step an output pixel per axis and
    /// (bilinear) whether corners align. A 1-D resize leaves the h fields 1, 0.
    pub struct Params = "UPSAMPLE_PARAMS(T)" {
        src: DevicePtr = "const T*",
        out: DevicePtr = "T*",
        n: u64,
        outer: KernelLayout,
        stride_h: u64,
        stride_w: u64,
        h_in: u64,
        w_in: u64,
        h_out: u64,
        w_out: u64,
        scale_h: f64,
        scale_w: f64,
        align_corners: u32,
    }
}

/// Nearest, (b, c, w); keyed by element width.
pub const NEAREST_1D: Entry<Params> = Entry::new(&MODULE, "upsample_nearest1d");
/// Nearest, (b, c, h, w); keyed by element width.
pub const NEAREST_2D: Entry<Params> = Entry::new(&MODULE, "upsample_nearest2d");
/// Bilinear, (b, c, h, w); keyed by dtype.
pub const BILINEAR_2D: Entry<Params> = Entry::new(&MODULE, "upsample_bilinear2d");

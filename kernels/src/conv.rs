//! The parameters of the conv module's entries (conv.hip) and the structs they take by value.

use crate::params::{ArgSink, KernelArg};
use crate::{
    DevicePtr, Entry, EntryGroup, KernelModule, KernelParams, DTYPES, FLOAT_DTYPES, HEADERS, WIDTHS,
};

/// The portable convolution path (im2col by width, col2im by float dtype, direct transposed
/// convolutions of integers) and 2-D pooling.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "conv",
    source: include_str!("conv.hip"),
    groups: &[
        EntryGroup {
            ops: &["conv_im2col"],
            dtypes: &WIDTHS,
        },
        EntryGroup {
            ops: &["conv_col2im"],
            dtypes: &FLOAT_DTYPES,
        },
        EntryGroup {
            ops: &["conv_transpose_direct"],
            dtypes: &[
                "u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64",
            ],
        },
        EntryGroup {
            ops: &["pool_max2d", "pool_avg2d"],
            dtypes: &DTYPES,
        },
    ],
    params: &[
        Im2colParams::DECL,
        Col2imParams::DECL,
        PoolParams::DECL,
        TransposeDirectParams::DECL,
    ],
};

/// conv.hip's `ConvGeometry`: the image side's start and strides (elements) and sizes,
/// the window, and whether the launch's indices fit 31 bits.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ConvGeometry {
    pub start: u64,
    pub stride_b: u64,
    pub stride_c: u64,
    pub stride_h: u64,
    pub stride_w: u64,
    pub c: u32,
    pub h: u32,
    pub w: u32,
    pub kh: u32,
    pub kw: u32,
    pub oh: u32,
    pub ow: u32,
    pub step_h: u32,
    pub step_w: u32,
    pub pad_h: u32,
    pub pad_w: u32,
    pub dil_h: u32,
    pub dil_w: u32,
    pub fits_u32: u32,
}

/// conv.hip's `Strides4`: a 4-D tensor's start and strides, in elements.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Strides4 {
    pub start: u64,
    pub strides: [u64; 4],
}

impl KernelArg for ConvGeometry {
    const C_TYPE: &'static str = "ConvGeometry";
    fn push_to<S: ArgSink>(&self, sink: &mut S) {
        sink.scalar(*self);
    }
}

impl KernelArg for Strides4 {
    const C_TYPE: &'static str = "Strides4";
    fn push_to<S: ArgSink>(&self, sink: &mut S) {
        sink.scalar(*self);
    }
}

crate::kernel_params! {
    /// `conv_im2col_<width>`: the columns of batch entries `b0..` of the image `x`, one
    /// thread per (entry, channel, column position), `n` of them.
    pub struct Im2colParams = "IM2COL_PARAMS(R)" {
        x: DevicePtr = "const R*",
        col: DevicePtr = "R*",
        n: u64,
        b0: u64,
        g: ConvGeometry,
    }
}

crate::kernel_params! {
    /// `conv_col2im_<dtype>`: the columns summed back into the image (batch entries
    /// `b0..`), one thread per image element, `n` of them.
    pub struct Col2imParams = "COL2IM_PARAMS(T)" {
        col: DevicePtr = "const T*",
        image: DevicePtr = "T*",
        n: u64,
        b0: u64,
        g: ConvGeometry,
    }
}

crate::kernel_params! {
    /// `pool_max2d_<dtype>` / `pool_avg2d_<dtype>`: one thread per output element.
    pub struct PoolParams = "POOL_PARAMS(T)" {
        x: DevicePtr = "const T*",
        out: DevicePtr = "T*",
        n: u64,
        g: ConvGeometry,
    }
}

crate::kernel_params! {
    /// `conv_transpose_direct_<dtype>`: one thread per output element; `xs` and `ws` are
    /// the input's and kernel's layouts, `c_in` the input channels.
    pub struct TransposeDirectParams = "CONV_TRANSPOSE_DIRECT_PARAMS(T)" {
        x: DevicePtr = "const T*",
        w: DevicePtr = "const T*",
        out: DevicePtr = "T*",
        n: u64,
        g: ConvGeometry,
        xs: Strides4,
        ws: Strides4,
        c_in: u32,
        groups: u32,
    }
}

/// Image to columns (keyed by element width).
pub const IM2COL: Entry<Im2colParams> = Entry::new(&MODULE, "conv_im2col");
/// Columns back to the image (floats).
pub const COL2IM: Entry<Col2imParams> = Entry::new(&MODULE, "conv_col2im");
/// Max pooling.
pub const POOL_MAX2D: Entry<PoolParams> = Entry::new(&MODULE, "pool_max2d");
/// Average pooling.
pub const POOL_AVG2D: Entry<PoolParams> = Entry::new(&MODULE, "pool_avg2d");
/// A transposed convolution computed directly.
pub const TRANSPOSE_DIRECT: Entry<TransposeDirectParams> =
    Entry::new(&MODULE, "conv_transpose_direct");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_structs_match_conv_hips() {
        // conv.hip: five u64 then fourteen u32, no padding; a u64 and four u64.
        assert_eq!(std::mem::size_of::<ConvGeometry>(), 5 * 8 + 14 * 4);
        assert_eq!(std::mem::size_of::<Strides4>(), 5 * 8);
        let source = MODULE.source;
        for field in [
            "u32 step_h, step_w;",
            "u32 fits_u32;",
            "u64 start, stride_b",
        ] {
            assert!(source.contains(field), "{field}");
        }
    }
}

//! Convolution and pooling parameters with Candle's semantics, and the one 2-D form every
//! operation is reduced to (a 1-D operation is 2-D with a unit height). Pure logic.

use rocm_device::{Error, Layout, Result};

/// `conv1d`: input (b, c_in, l_in), kernel (c_out, c_in / groups, k_size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv1dParams {
    pub b_size: usize,
    pub l_in: usize,
    pub c_out: usize,
    /// Channels of the input (all groups).
    pub c_in: usize,
    pub k_size: usize,
    pub padding: usize,
    pub stride: usize,
    pub dilation: usize,
    pub groups: usize,
}

/// `conv2d`: input (b, c_in, i_h, i_w), kernel (c_out, c_in / groups, k_h, k_w).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dParams {
    pub b_size: usize,
    pub i_h: usize,
    pub i_w: usize,
    pub k_h: usize,
    pub k_w: usize,
    pub c_out: usize,
    /// Channels of the input (all groups).
    pub c_in: usize,
    pub padding: usize,
    pub stride: usize,
    pub dilation: usize,
    pub groups: usize,
}

/// `conv_transpose1d`: input (b, c_in, l_in), kernel (c_in, c_out / groups, k_size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvTranspose1dParams {
    pub b_size: usize,
    pub l_in: usize,
    /// Channels of the output (all groups).
    pub c_out: usize,
    pub c_in: usize,
    pub k_size: usize,
    pub padding: usize,
    pub output_padding: usize,
    pub stride: usize,
    pub dilation: usize,
    pub groups: usize,
}

/// `conv_transpose2d`: input (b, c_in, i_h, i_w), kernel (c_in, c_out / groups, k_h, k_w).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvTranspose2dParams {
    pub b_size: usize,
    pub i_h: usize,
    pub i_w: usize,
    pub k_h: usize,
    pub k_w: usize,
    /// Channels of the output (all groups).
    pub c_out: usize,
    pub c_in: usize,
    pub padding: usize,
    pub output_padding: usize,
    pub stride: usize,
    pub dilation: usize,
    pub groups: usize,
}

/// 2-D pooling windows without padding, as Candle's `avg_pool2d` / `max_pool2d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2dParams {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
}

/// Which way a [`ConvSpec`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// A convolution: the image is the input, the columns the output positions.
    Forward,
    /// A transposed convolution: the columns are the input positions, the image the output.
    Transpose,
}

/// Every operation in one 2-D form. `image` is (channels, h, w) of the side the window slides
/// over (the input of a convolution, the output of a transposed one); `cols` is (h, w) of the
/// other side; `channels` is the other side's channel count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvSpec {
    /// The operation's name, for errors and spans.
    pub op: &'static str,
    pub direction: Direction,
    pub batch: usize,
    pub image: (usize, usize, usize),
    pub cols: (usize, usize),
    pub channels: usize,
    pub kernel: (usize, usize),
    pub padding: (usize, usize),
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    pub output_padding: (usize, usize),
    pub groups: usize,
}

/// Output length of a convolution along one axis, or None when the window does not fit.
pub fn conv_out_len(
    len: usize,
    k: usize,
    padding: usize,
    stride: usize,
    dil: usize,
) -> Option<usize> {
    let span = dil.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    let padded = len.checked_add(padding.checked_mul(2)?)?;
    (stride > 0 && padded >= span).then(|| (padded - span) / stride + 1)
}

/// Output length of a transposed convolution along one axis (PyTorch's and Candle's formula),
/// or None when the padding eats the whole output.
pub fn conv_transpose_out_len(
    len: usize,
    k: usize,
    padding: usize,
    output_padding: usize,
    stride: usize,
    dil: usize,
) -> Option<usize> {
    let full = len
        .checked_sub(1)?
        .checked_mul(stride)?
        .checked_add(dil.checked_mul(k.checked_sub(1)?)?)?
        .checked_add(output_padding)?
        .checked_add(1)?;
    full.checked_sub(padding.checked_mul(2)?).filter(|&n| n > 0)
}

/// Output length of a pooling window along one axis.
pub fn pool_out_len(len: usize, k: usize, stride: usize) -> Option<usize> {
    (k > 0 && stride > 0 && len >= k).then(|| (len - k) / stride + 1)
}

fn bad(op: &'static str, detail: String) -> Error {
    Error::ShapeMismatch { op, detail }
}

/// Per-axis settings (height, width) of one operation.
#[derive(Debug, Clone, Copy)]
struct Axes {
    kernel: (usize, usize),
    padding: (usize, usize),
    stride: (usize, usize),
    dilation: (usize, usize),
    output_padding: (usize, usize),
}

impl Axes {
    /// Square settings for a 2-D operation; a 1-D one keeps the height axis trivial.
    fn new(one_d: bool, kernel: (usize, usize), p: usize, s: usize, d: usize, op: usize) -> Self {
        let h = |v: usize, trivial: usize| if one_d { trivial } else { v };
        Axes {
            kernel,
            padding: (h(p, 0), p),
            stride: (h(s, 1), s),
            dilation: (h(d, 1), d),
            output_padding: (h(op, 0), op),
        }
    }
}

impl ConvSpec {
    pub fn conv1d(p: &Conv1dParams) -> Result<Self> {
        let axes = Axes::new(true, (1, p.k_size), p.padding, p.stride, p.dilation, 0);
        Self::forward(
            "conv1d",
            p.b_size,
            (p.c_in, 1, p.l_in),
            p.c_out,
            axes,
            p.groups,
        )
    }

    pub fn conv2d(p: &Conv2dParams) -> Result<Self> {
        let axes = Axes::new(false, (p.k_h, p.k_w), p.padding, p.stride, p.dilation, 0);
        Self::forward(
            "conv2d",
            p.b_size,
            (p.c_in, p.i_h, p.i_w),
            p.c_out,
            axes,
            p.groups,
        )
    }

    pub fn conv_transpose1d(p: &ConvTranspose1dParams) -> Result<Self> {
        let axes = Axes::new(
            true,
            (1, p.k_size),
            p.padding,
            p.stride,
            p.dilation,
            p.output_padding,
        );
        Self::transpose(
            "conv_transpose1d",
            p.b_size,
            p.c_in,
            (1, p.l_in),
            p.c_out,
            axes,
            p.groups,
        )
    }

    pub fn conv_transpose2d(p: &ConvTranspose2dParams) -> Result<Self> {
        let axes = Axes::new(
            false,
            (p.k_h, p.k_w),
            p.padding,
            p.stride,
            p.dilation,
            p.output_padding,
        );
        Self::transpose(
            "conv_transpose2d",
            p.b_size,
            p.c_in,
            (p.i_h, p.i_w),
            p.c_out,
            axes,
            p.groups,
        )
    }

    fn forward(
        op: &'static str,
        batch: usize,
        image: (usize, usize, usize),
        c_out: usize,
        a: Axes,
        groups: usize,
    ) -> Result<Self> {
        check_groups(op, image.0, c_out, groups)?;
        let out = |len, k, p, s, d| conv_out_len(len, k, p, s, d);
        let oh = out(image.1, a.kernel.0, a.padding.0, a.stride.0, a.dilation.0);
        let ow = out(image.2, a.kernel.1, a.padding.1, a.stride.1, a.dilation.1);
        let (Some(oh), Some(ow)) = (oh, ow) else {
            return Err(bad(
                op,
                format!(
                    "kernel {:?} (dilation {:?}, stride {:?}) does not fit the input {:?} padded \
                     by {:?}",
                    a.kernel,
                    a.dilation,
                    a.stride,
                    (image.1, image.2),
                    a.padding
                ),
            ));
        };
        Ok(ConvSpec {
            op,
            direction: Direction::Forward,
            batch,
            image,
            cols: (oh, ow),
            channels: c_out,
            kernel: a.kernel,
            padding: a.padding,
            stride: a.stride,
            dilation: a.dilation,
            output_padding: (0, 0),
            groups,
        })
    }

    fn transpose(
        op: &'static str,
        batch: usize,
        c_in: usize,
        cols: (usize, usize),
        c_out: usize,
        a: Axes,
        groups: usize,
    ) -> Result<Self> {
        check_groups(op, c_in, c_out, groups)?;
        for (o, (s, d)) in [a.output_padding.0, a.output_padding.1]
            .into_iter()
            .zip([(a.stride.0, a.dilation.0), (a.stride.1, a.dilation.1)])
        {
            if o >= s.max(d) {
                return Err(bad(
                    op,
                    format!(
                        "output padding {o} must be smaller than the stride {s} or the dilation {d}"
                    ),
                ));
            }
        }
        let oh = conv_transpose_out_len(
            cols.0,
            a.kernel.0,
            a.padding.0,
            a.output_padding.0,
            a.stride.0,
            a.dilation.0,
        );
        let ow = conv_transpose_out_len(
            cols.1,
            a.kernel.1,
            a.padding.1,
            a.output_padding.1,
            a.stride.1,
            a.dilation.1,
        );
        let (Some(oh), Some(ow)) = (oh, ow) else {
            return Err(bad(
                op,
                format!(
                    "input {cols:?}, kernel {:?}, stride {:?}, dilation {:?}, padding {:?}, \
                     output padding {:?}: no output",
                    a.kernel, a.stride, a.dilation, a.padding, a.output_padding
                ),
            ));
        };
        Ok(ConvSpec {
            op,
            direction: Direction::Transpose,
            batch,
            image: (c_out, oh, ow),
            cols,
            channels: c_in,
            kernel: a.kernel,
            padding: a.padding,
            stride: a.stride,
            dilation: a.dilation,
            output_padding: a.output_padding,
            groups,
        })
    }

    /// Dims of the operation's input (b, c, h, w).
    pub fn input_dims(&self) -> [usize; 4] {
        match self.direction {
            Direction::Forward => [self.batch, self.image.0, self.image.1, self.image.2],
            Direction::Transpose => [self.batch, self.channels, self.cols.0, self.cols.1],
        }
    }

    /// Dims of the operation's output (b, c, h, w).
    pub fn output_dims(&self) -> [usize; 4] {
        match self.direction {
            Direction::Forward => [self.batch, self.channels, self.cols.0, self.cols.1],
            Direction::Transpose => [self.batch, self.image.0, self.image.1, self.image.2],
        }
    }

    /// Dims of the kernel (4-D): (c_out, c_in / groups, kh, kw) for a convolution,
    /// (c_in, c_out / groups, kh, kw) for a transposed one: (channels, image channels / groups,
    /// kh, kw) either way.
    pub fn kernel_dims(&self) -> [usize; 4] {
        [
            self.channels,
            self.image.0 / self.groups,
            self.kernel.0,
            self.kernel.1,
        ]
    }

    /// Rows of the column matrix per batch entry: image channels x kh x kw.
    pub fn col_rows(&self) -> usize {
        self.image.0 * self.kernel.0 * self.kernel.1
    }

    /// Columns per batch entry: one per position of the column side.
    pub fn col_len(&self) -> usize {
        self.cols.0 * self.cols.1
    }

    /// Multiply-adds of the operation as the gemm path does them: batch x column rows x
    /// columns x channels / groups (saturating).
    pub fn macs(&self) -> usize {
        self.batch
            .saturating_mul(self.col_rows())
            .saturating_mul(self.col_len())
            .saturating_mul(self.channels / self.groups.max(1))
    }

    /// A 1x1 convolution with unit stride and no padding reads its input as the column matrix.
    pub fn is_pointwise(&self) -> bool {
        self.kernel == (1, 1) && self.stride == (1, 1) && self.padding == (0, 0)
    }
}

fn check_groups(op: &'static str, c_in: usize, c_out: usize, groups: usize) -> Result<()> {
    if groups == 0 || c_in % groups != 0 || c_out % groups != 0 {
        return Err(bad(
            op,
            format!("{groups} groups must divide the {c_in} input and {c_out} output channels"),
        ));
    }
    Ok(())
}

/// A layout as (b, c, h, w): rank-3 (b, c, l) gains a unit height (stride 0).
pub fn as_4d(op: &'static str, what: &str, l: &Layout, rank: usize) -> Result<Layout> {
    if l.dims.len() != rank {
        return Err(bad(
            op,
            format!("the {what} must have rank {rank}, got dims {:?}", l.dims),
        ));
    }
    Ok(if rank == 3 {
        Layout::new(
            &[l.dims[0], l.dims[1], 1, l.dims[2]],
            &[l.strides[0], l.strides[1], 0, l.strides[2]],
            l.start,
        )
    } else {
        l.clone()
    })
}

/// Checks that a 4-D layout has the dims an operation expects.
pub fn check_dims(op: &'static str, what: &str, l: &Layout, expected: [usize; 4]) -> Result<()> {
    if l.dims[..] != expected[..] {
        return Err(bad(
            op,
            format!("the {what} has dims {:?}, expected {expected:?}", l.dims),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lengths_follow_candle() {
        // Candle's ParamsConv2D::out_h: (i + 2p - d (k - 1) - 1) / s + 1
        assert_eq!(conv_out_len(56, 3, 1, 1, 1), Some(56));
        assert_eq!(conv_out_len(7, 3, 0, 2, 2), Some(2));
        assert_eq!(conv_out_len(2, 3, 0, 1, 1), None);
        assert_eq!(conv_out_len(2, 3, 1, 1, 1), Some(2));
        assert_eq!(conv_out_len(5, 0, 0, 1, 1), None);
        assert_eq!(conv_out_len(5, 1, 0, 0, 1), None);
        // ParamsConvTranspose2D::out_h: (i - 1) s + d (k - 1) + op + 1 - 2p
        assert_eq!(conv_transpose_out_len(4, 3, 1, 1, 2, 1), Some(8));
        assert_eq!(conv_transpose_out_len(1, 1, 1, 0, 1, 1), None);
        assert_eq!(conv_transpose_out_len(0, 3, 0, 0, 1, 1), None);
        assert_eq!(pool_out_len(7, 2, 2), Some(3));
        assert_eq!(pool_out_len(1, 2, 2), None);
    }

    #[test]
    fn one_d_operations_are_two_d_with_a_unit_height() {
        let s = ConvSpec::conv1d(&Conv1dParams {
            b_size: 2,
            l_in: 10,
            c_out: 6,
            c_in: 4,
            k_size: 3,
            padding: 1,
            stride: 2,
            dilation: 1,
            groups: 2,
        })
        .unwrap();
        assert_eq!(s.input_dims(), [2, 4, 1, 10]);
        assert_eq!(s.output_dims(), [2, 6, 1, 5]);
        assert_eq!(s.kernel_dims(), [6, 2, 1, 3]);
        assert_eq!((s.padding, s.stride), ((0, 1), (1, 2)));
        assert_eq!(s.op, "conv1d");
        let t = ConvSpec::conv_transpose1d(&ConvTranspose1dParams {
            b_size: 2,
            l_in: 5,
            c_out: 6,
            c_in: 4,
            k_size: 3,
            padding: 1,
            output_padding: 1,
            stride: 2,
            dilation: 1,
            groups: 2,
        })
        .unwrap();
        assert_eq!(t.input_dims(), [2, 4, 1, 5]);
        assert_eq!(t.output_dims(), [2, 6, 1, 10]);
        assert_eq!(t.kernel_dims(), [4, 3, 1, 3]);
        assert_eq!(t.col_rows(), 18);
        assert_eq!(t.op, "conv_transpose1d");
    }

    #[test]
    fn bad_parameters_are_shape_errors() {
        let p = Conv2dParams {
            b_size: 1,
            i_h: 4,
            i_w: 4,
            k_h: 3,
            k_w: 3,
            c_out: 4,
            c_in: 6,
            padding: 0,
            stride: 1,
            dilation: 1,
            groups: 4,
        };
        let e = ConvSpec::conv2d(&p).unwrap_err();
        assert!(e.to_string().contains("groups"), "{e}");
        let e = ConvSpec::conv2d(&Conv2dParams {
            i_h: 2,
            groups: 2,
            ..p
        })
        .unwrap_err();
        assert!(e.to_string().contains("does not fit"), "{e}");
        let e = ConvSpec::conv1d(&Conv1dParams {
            b_size: 1,
            l_in: 2,
            c_out: 1,
            c_in: 1,
            k_size: 5,
            padding: 0,
            stride: 1,
            dilation: 1,
            groups: 1,
        })
        .unwrap_err();
        assert!(
            matches!(e, Error::ShapeMismatch { op: "conv1d", .. }),
            "{e}"
        );
        let e = ConvSpec::conv_transpose2d(&ConvTranspose2dParams {
            b_size: 1,
            i_h: 3,
            i_w: 3,
            k_h: 3,
            k_w: 3,
            c_out: 2,
            c_in: 2,
            padding: 0,
            output_padding: 2,
            stride: 2,
            dilation: 1,
            groups: 1,
        })
        .unwrap_err();
        assert!(e.to_string().contains("output padding"), "{e}");
    }

    #[test]
    fn rank_three_layouts_gain_a_unit_height() {
        let l = Layout::new(&[2, 3, 7], &[30, 10, 1], 4);
        let l4 = as_4d("conv1d", "input", &l, 3).unwrap();
        assert_eq!(l4.dims, vec![2, 3, 1, 7]);
        assert_eq!(l4.strides, vec![30, 10, 0, 1]);
        assert!(as_4d("conv2d", "input", &l, 4).is_err());
        assert!(check_dims("conv1d", "input", &l4, [2, 3, 1, 8]).is_err());
    }
}

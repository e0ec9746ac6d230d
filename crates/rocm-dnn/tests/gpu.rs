//! GPU tests of rocm-dnn's portable path against Candle 0.11.1's CPU backend.
//!
//! Convolutions are compared with the CPU's f64 result on the same (rounded) inputs, within
//! a bound stated per element: `(2 u + a) * S`, where S is the same convolution of |x| and |w|
//! (what any summation order can be off by), u the unit roundoff of the dtype (one rounding of
//! the output, one more of the column matrix of a transposed convolution) and `a` the f32
//! (f64) accumulation, plus one subnormal step of the dtype. Pooling must equal the CPU's
//! result bit for bit, for every dtype.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use candle_core::{DType as C, Tensor};
use rocm_blas::Blas;
use rocm_device::{DType, Error, Layout, Operand as O};
use rocm_dnn::*;
use rocm_test_support::*;

/// The gemm path for every size (no direct transposed convolutions of floats).
fn dnn(col_budget_bytes: usize) -> Dnn {
    dnn_with(col_budget_bytes, 0)
}

fn dnn_with(col_budget_bytes: usize, direct_transpose_max_macs: usize) -> Dnn {
    let blas = Arc::new(Blas::new(&device()).unwrap());
    let options = DnnOptions {
        use_miopen: false,
        find_mode: false,
        col_budget_bytes,
        direct_transpose_max_macs,
    };
    Dnn::with_options(blas, options).unwrap()
}

const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

/// One convolution shape: 1-D operations use `w` and `kw` only.
#[derive(Debug, Clone, Copy)]
struct Shape {
    transpose: bool,
    one_d: bool,
    b: usize,
    c_in: usize,
    c_out: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    pad: usize,
    stride: usize,
    dil: usize,
    out_pad: usize,
    groups: usize,
}

/// How input and kernel are laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Views {
    Contiguous,
    /// The input is a narrowed, transposed view; the kernel a transposed one.
    Strided,
}

impl Shape {
    fn input_dims(&self) -> Vec<usize> {
        if self.one_d {
            vec![self.b, self.c_in, self.w]
        } else {
            vec![self.b, self.c_in, self.h, self.w]
        }
    }

    fn kernel_dims(&self) -> Vec<usize> {
        let (a, b) = if self.transpose {
            (self.c_in, self.c_out / self.groups)
        } else {
            (self.c_out, self.c_in / self.groups)
        };
        if self.one_d {
            vec![a, b, self.kw]
        } else {
            vec![a, b, self.kh, self.kw]
        }
    }

    /// Candle's CPU convolution of `x` with `k` (f64 tensors), through the CPU paths that
    /// are right: Candle 0.11.1's CPU conv1d multiplies by the original kernel where it meant
    /// its contiguous copy (a strided kernel gives wrong results), and its col2im path of
    /// conv_transpose1d (no padding, dilation 1) is wrong for every batch entry after the
    /// first. So conv1d gets a contiguous kernel, and transposed 1-D convolutions that would
    /// take that path go through conv_transpose2d with a unit height.
    fn reference(&self, x: &Tensor, k: &Tensor) -> Tensor {
        let s = self;
        let k = k.contiguous().unwrap();
        match (s.transpose, s.one_d) {
            (false, true) => x.conv1d(&k, s.pad, s.stride, s.dil, s.groups).unwrap(),
            (false, false) => x.conv2d(&k, s.pad, s.stride, s.dil, s.groups).unwrap(),
            (true, true) if s.pad > 0 || s.out_pad > 0 || s.dil > 1 => x
                .conv_transpose1d(&k, s.pad, s.out_pad, s.stride, s.dil, s.groups)
                .unwrap(),
            (true, true) => {
                let (x, k) = (x.unsqueeze(2).unwrap(), k.unsqueeze(2).unwrap());
                let one_d = Shape { one_d: false, ..*s };
                one_d.reference(&x, &k).squeeze(2).unwrap()
            }
            (true, false) => {
                // Candle 0.11.1's conv_transpose2d has no groups: one call per group.
                let xs = x.chunk(s.groups, 1).unwrap();
                let ks = k.chunk(s.groups, 0).unwrap();
                let parts: Vec<Tensor> = xs
                    .iter()
                    .zip(&ks)
                    .map(|(x, k)| {
                        x.conv_transpose2d(k, s.pad, s.out_pad, s.stride, s.dil)
                            .unwrap()
                    })
                    .collect();
                Tensor::cat(&parts, 1).unwrap()
            }
        }
    }

    fn run(
        &self,
        dnn: &Dnn,
        dtype: DType,
        x: (&rocm_device::Buffer, &Layout),
        k: (&rocm_device::Buffer, &Layout),
    ) -> rocm_device::Result<rocm_device::Buffer> {
        let s = self;
        let (x, k) = (O::new(x.0, dtype, x.1), O::new(k.0, dtype, k.1));
        match (s.transpose, s.one_d) {
            (false, true) => dnn.conv1d(
                x,
                k,
                &Conv1dParams {
                    b_size: s.b,
                    l_in: s.w,
                    c_out: s.c_out,
                    c_in: s.c_in,
                    k_size: s.kw,
                    padding: s.pad,
                    stride: s.stride,
                    dilation: s.dil,
                    groups: s.groups,
                },
            ),
            (false, false) => dnn.conv2d(
                x,
                k,
                &Conv2dParams {
                    b_size: s.b,
                    i_h: s.h,
                    i_w: s.w,
                    k_h: s.kh,
                    k_w: s.kw,
                    c_out: s.c_out,
                    c_in: s.c_in,
                    padding: s.pad,
                    stride: s.stride,
                    dilation: s.dil,
                    groups: s.groups,
                },
            ),
            (true, true) => dnn.conv_transpose1d(
                x,
                k,
                &ConvTranspose1dParams {
                    b_size: s.b,
                    l_in: s.w,
                    c_out: s.c_out,
                    c_in: s.c_in,
                    k_size: s.kw,
                    padding: s.pad,
                    output_padding: s.out_pad,
                    stride: s.stride,
                    dilation: s.dil,
                    groups: s.groups,
                },
            ),
            (true, false) => dnn.conv_transpose2d(
                x,
                k,
                &ConvTranspose2dParams {
                    b_size: s.b,
                    i_h: s.h,
                    i_w: s.w,
                    k_h: s.kh,
                    k_w: s.kw,
                    c_out: s.c_out,
                    c_in: s.c_in,
                    padding: s.pad,
                    output_padding: s.out_pad,
                    stride: s.stride,
                    dilation: s.dil,
                    groups: s.groups,
                },
            ),
        }
    }
}

/// A base tensor and the view of it with `dims`: the base itself, or (strided) a base with
/// the first two dims swapped and one spare element at both ends of the last dim, narrowed
/// and transposed back.
fn make_view(dtype: DType, dims: &[usize], views: Views, seed: u64) -> (Tensor, Tensor) {
    let mut base_dims = dims.to_vec();
    if views == Views::Strided {
        base_dims.swap(0, 1);
        *base_dims.last_mut().unwrap() += 2;
    }
    let n: usize = base_dims.iter().product();
    let base = tensor(&random(dtype, n, -1.0, 1.0, seed), dtype, &base_dims);
    let view = match views {
        Views::Contiguous => base.clone(),
        Views::Strided => {
            let last = dims.len() - 1;
            base.narrow(last, 1, dims[last])
                .unwrap()
                .transpose(0, 1)
                .unwrap()
        }
    };
    (base, view)
}

/// Unit roundoff of the output dtype, the accumulation allowance (see the file comment) and
/// the spacing of the dtype's subnormals (an absolute floor for tiny results).
fn bound(dtype: DType) -> (f64, f64, f64) {
    match dtype {
        DType::F64 => (f64::EPSILON / 2.0, 1e-13, 0.0),
        DType::F32 => (f64::from(f32::EPSILON) / 2.0, 1e-5, 2f64.powi(-149)),
        DType::F16 => (2f64.powi(-11), 1e-5, 2f64.powi(-24)),
        _ => (2f64.powi(-8), 1e-5, 2f64.powi(-133)),
    }
}

fn check(dnn: &Dnn, dtype: DType, s: &Shape, views: Views, seed: u64) -> Result<(), String> {
    let d = device();
    let (xb, xv) = make_view(dtype, &s.input_dims(), views, seed);
    // The kernel is transposed as a whole: swap its first two dims in the base.
    let (kb, kv) = make_view(dtype, &s.kernel_dims(), views, seed ^ 0x55);
    let (x64, k64) = (xv.to_dtype(C::F64).unwrap(), kv.to_dtype(C::F64).unwrap());
    let want = s.reference(&x64, &k64);
    let scale = s.reference(&x64.abs().unwrap(), &k64.abs().unwrap());
    let (xbuf, kbuf) = (upload(&d, &xb), upload(&d, &kb));
    let out = s
        .run(
            dnn,
            dtype,
            (&xbuf, &layout_of(&xv)),
            (&kbuf, &layout_of(&kv)),
        )
        .map_err(|e| format!("{e}"))?;
    let got = values(&download(&d, &out), dtype);
    let want: Vec<f64> = want.flatten_all().unwrap().to_vec1().unwrap();
    let scale: Vec<f64> = scale.flatten_all().unwrap().to_vec1().unwrap();
    if got.len() != want.len() {
        return Err(format!("{} elements, expected {}", got.len(), want.len()));
    }
    let (u, acc, tiny) = bound(dtype);
    for (i, ((g, w), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
        let tol = (2.0 * u + acc) * s + tiny + 1e-300;
        // A NaN difference is not within the bound.
        let within = matches!(
            (g - w).abs().partial_cmp(&tol),
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
        );
        if !within {
            return Err(format!(
                "element {i}: got {g}, expected {w} (bound {tol:.3e})"
            ));
        }
    }
    Ok(())
}

/// Runs every shape in every float dtype and both view kinds; panics with all failures.
fn check_all(dnn: &Dnn, shapes: &[Shape]) -> usize {
    let mut failures = Vec::new();
    let mut count = 0;
    for (i, s) in shapes.iter().enumerate() {
        for dtype in FLOATS {
            for views in [Views::Contiguous, Views::Strided] {
                trace(|| format!("{s:?} {dtype} {views:?}"));
                count += 1;
                if let Err(e) = check(dnn, dtype, s, views, i as u64) {
                    failures.push(format!("{s:?} {dtype} {views:?}: {e}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    count
}

/// The grid of the forward convolutions: kernel 1/3/5/7, stride 1/2, (padding, dilation)
/// (0, 1)/(1, 1)/(2, 2), groups 1/2/channels, odd sizes, batch 2.
fn forward_grid(one_d: bool) -> Vec<Shape> {
    let mut shapes = Vec::new();
    for k in [1, 3, 5, 7] {
        for stride in [1, 2] {
            for (pad, dil) in [(0, 1), (1, 1), (2, 2)] {
                for (c_in, c_out, groups) in [(3, 5, 1), (4, 6, 2), (4, 8, 4)] {
                    shapes.push(Shape {
                        transpose: false,
                        one_d,
                        b: 2,
                        c_in,
                        c_out,
                        h: if one_d { 1 } else { 11 },
                        w: if one_d { 17 } else { 13 },
                        kh: if one_d { 1 } else { k },
                        kw: if one_d { k } else { k.min(5) },
                        pad,
                        stride,
                        dil,
                        out_pad: 0,
                        groups,
                    });
                }
            }
        }
    }
    shapes
}

/// The grid of the transposed convolutions: kernel 1/3/4, stride 1/2/3, (padding, dilation),
/// output padding 0 and (where the stride allows) 1, groups 1/2.
fn transpose_grid(one_d: bool) -> Vec<Shape> {
    let mut shapes = Vec::new();
    for k in [1, 3, 4] {
        for stride in [1, 2, 3] {
            for (pad, dil) in [(0, 1), (1, 1), (1, 2)] {
                for out_pad in [0, 1] {
                    if out_pad >= stride.max(dil) {
                        continue;
                    }
                    for (c_in, c_out, groups) in [(3, 5, 1), (4, 6, 2)] {
                        shapes.push(Shape {
                            transpose: true,
                            one_d,
                            b: 2,
                            c_in,
                            c_out,
                            h: if one_d { 1 } else { 5 },
                            w: if one_d { 9 } else { 7 },
                            kh: if one_d { 1 } else { k },
                            kw: k,
                            pad,
                            stride,
                            dil,
                            out_pad,
                            groups,
                        });
                    }
                }
            }
        }
    }
    shapes
}

#[test]
fn conv2d_matches_the_cpu() {
    let n = check_all(&dnn(usize::MAX), &forward_grid(false));
    println!("conv2d: {n} cases");
}

#[test]
fn conv1d_matches_the_cpu() {
    let n = check_all(&dnn(usize::MAX), &forward_grid(true));
    println!("conv1d: {n} cases");
}

#[test]
fn conv_transpose2d_matches_the_cpu() {
    let n = check_all(&dnn(usize::MAX), &transpose_grid(false));
    println!("conv_transpose2d: {n} cases");
}

#[test]
fn small_transposed_convolutions_run_directly_and_match_the_cpu() {
    // every shape of both grids through the one-launch direct kernel
    let direct = dnn_with(usize::MAX, usize::MAX);
    let n = check_all(&direct, &transpose_grid(false)) + check_all(&direct, &transpose_grid(true));
    println!("direct conv_transpose2d/1d: {n} cases");
    // the default limit sends the grid's sizes there too
    let default = DnnOptions::default().direct_transpose_max_macs;
    let macs = |s: &Shape| s.b * s.c_out * s.kh * s.kw * s.h * s.w * (s.c_in / s.groups);
    assert!(transpose_grid(false).iter().all(|s| macs(s) <= default));
}

#[test]
fn conv_transpose1d_matches_the_cpu() {
    let n = check_all(&dnn(usize::MAX), &transpose_grid(true));
    println!("conv_transpose1d: {n} cases");
}

/// Larger channel counts (a deeper gemm), pointwise and depthwise layers, batches split into
/// chunks by a small column budget, and a batch of one.
#[test]
fn larger_layers_and_chunked_batches() {
    let base = Shape {
        transpose: false,
        one_d: false,
        b: 3,
        c_in: 32,
        c_out: 48,
        h: 17,
        w: 19,
        kh: 3,
        kw: 3,
        pad: 1,
        stride: 1,
        dil: 1,
        out_pad: 0,
        groups: 1,
    };
    let shapes = [
        base,
        Shape {
            kh: 1,
            kw: 1,
            pad: 0,
            ..base
        },
        Shape {
            kh: 1,
            kw: 1,
            pad: 0,
            groups: 4,
            ..base
        },
        Shape {
            c_out: 32,
            groups: 32,
            ..base
        },
        Shape {
            b: 1,
            stride: 2,
            ..base
        },
        Shape {
            transpose: true,
            stride: 2,
            out_pad: 1,
            ..base
        },
        Shape {
            transpose: true,
            kh: 4,
            kw: 4,
            stride: 2,
            groups: 8,
            ..base
        },
        Shape {
            one_d: true,
            h: 1,
            kh: 1,
            w: 300,
            ..base
        },
        Shape {
            one_d: true,
            transpose: true,
            h: 1,
            kh: 1,
            w: 100,
            stride: 3,
            ..base
        },
    ];
    let mut n = check_all(&dnn(usize::MAX), &shapes);
    // One batch entry per chunk.
    n += check_all(&dnn(1), &shapes);
    println!("larger layers: {n} cases");
}

#[test]
fn pooling_equals_the_cpu_for_every_dtype() {
    let d = device();
    let dnn = dnn(usize::MAX);
    let windows = [
        ((2, 2), (2, 2)),
        ((3, 3), (2, 2)),
        ((2, 3), (1, 2)),
        ((1, 1), (1, 1)),
        ((3, 2), (3, 1)),
        ((7, 9), (1, 1)),
    ];
    let mut count = 0;
    let mut failures = Vec::new();
    for dtype in ALL {
        for (i, (kernel, stride)) in windows.into_iter().enumerate() {
            for views in [Views::Contiguous, Views::Strided] {
                let (base, view) = make_view(dtype, &[2, 3, 7, 9], views, i as u64);
                // NaNs for the floats: first in a window (kept by max) and inside one.
                let (base, view) = if dtype.is_float() && dtype != DType::F8E4M3 {
                    let nan = Tensor::full(f32::NAN, base.dims(), &candle_core::Device::Cpu)
                        .unwrap()
                        .to_dtype(cdtype(dtype))
                        .unwrap();
                    let mask: Vec<u8> = (0..base.elem_count())
                        .map(|j| u8::from(j % 37 == 5))
                        .collect();
                    let mask =
                        Tensor::from_vec(mask, base.dims(), &candle_core::Device::Cpu).unwrap();
                    let base = mask.where_cond(&nan, &base).unwrap();
                    let view = if views == Views::Strided {
                        base.narrow(3, 1, 9).unwrap().transpose(0, 1).unwrap()
                    } else {
                        base.clone()
                    };
                    (base, view)
                } else {
                    (base, view)
                };
                let buf = upload(&d, &base);
                let p = Pool2dParams { kernel, stride };
                for is_max in [true, false] {
                    count += 1;
                    let want = if is_max {
                        view.max_pool2d_with_stride(kernel, stride)
                    } else {
                        view.avg_pool2d_with_stride(kernel, stride)
                    }
                    .unwrap();
                    let x = (&buf, &layout_of(&view));
                    let out = if is_max {
                        dnn.max_pool2d(O::new(x.0, dtype, x.1), &p)
                    } else {
                        dnn.avg_pool2d(O::new(x.0, dtype, x.1), &p)
                    }
                    .unwrap();
                    let got = download(&d, &out);
                    if let Err(e) = compare(&got, &bytes_of(&want), dtype, 0.0) {
                        failures.push(format!(
                            "{dtype} {kernel:?}/{stride:?} {views:?} max={is_max}: {e}"
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("pooling: {count} cases, all bit-exact");
}

#[test]
fn bad_input_is_a_typed_error() {
    let d = device();
    let dnn = dnn(usize::MAX);
    let x = d.alloc(2 * 4 * 8 * 8 * 4).unwrap();
    let k = d.alloc(6 * 2 * 3 * 3 * 4).unwrap();
    let xl = Layout::contiguous(&[2, 4, 8, 8]);
    let kl = Layout::contiguous(&[6, 2, 3, 3]);
    let p = Conv2dParams {
        b_size: 2,
        i_h: 8,
        i_w: 8,
        k_h: 3,
        k_w: 3,
        c_out: 6,
        c_in: 4,
        padding: 0,
        stride: 1,
        dilation: 1,
        groups: 2,
    };
    assert!(dnn
        .conv2d(O::new(&x, DType::F32, &xl), O::new(&k, DType::F32, &kl), &p)
        .is_ok());
    // kernel dims that disagree with the groups
    let e = dnn
        .conv2d(
            O::new(&x, DType::F32, &xl),
            O::new(&k, DType::F32, &kl),
            &Conv2dParams { groups: 1, ..p },
        )
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "conv2d", .. }),
        "{e}"
    );
    // groups that do not divide the channels
    let e = dnn
        .conv2d(
            O::new(&x, DType::F32, &xl),
            O::new(&k, DType::F32, &kl),
            &Conv2dParams { groups: 3, ..p },
        )
        .unwrap_err();
    assert!(e.to_string().contains("groups"), "{e}");
    // a kernel larger than the padded input
    let e = dnn
        .conv2d(
            O::new(&x, DType::F32, &xl),
            O::new(&k, DType::F32, &kl),
            &Conv2dParams { i_h: 2, ..p },
        )
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // an integer dtype
    let e = dnn
        .conv2d(O::new(&x, DType::U32, &xl), O::new(&k, DType::U32, &kl), &p)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::UnsupportedDType {
                op: "conv2d",
                dtype: DType::U32
            }
        ),
        "{e}"
    );
    // a rank-3 input for conv2d
    let e = dnn
        .conv2d(
            O::new(&x, DType::F32, &Layout::contiguous(&[2, 4, 64])),
            O::new(&k, DType::F32, &kl),
            &p,
        )
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // a layout reaching past the buffer
    let e = dnn
        .conv2d(O::new(&x, DType::F64, &xl), O::new(&k, DType::F64, &kl), &p)
        .unwrap_err();
    assert!(!matches!(e, Error::UnsupportedDType { .. }), "{e}");
    // a pooling window larger than the input
    let e = dnn
        .max_pool2d(
            O::new(&x, DType::F32, &xl),
            &Pool2dParams {
                kernel: (9, 2),
                stride: (1, 1),
            },
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "max_pool2d",
                ..
            }
        ),
        "{e}"
    );
    // an empty batch gives an empty output
    let out = dnn
        .conv2d(
            O::new(&x, DType::F32, &Layout::contiguous(&[0, 4, 8, 8])),
            O::new(&k, DType::F32, &kl),
            &Conv2dParams { b_size: 0, ..p },
        )
        .unwrap();
    assert_eq!(out.len(), 0);
    assert_eq!(dnn.conv_path(DType::F32), DnnPath::Portable);
}

/// Transposed convolutions of integers run directly (no integer gemm) and must equal the CPU
/// bit for bit: wrapping sums do not depend on their order.
#[test]
fn integer_transposed_convolutions_equal_the_cpu() {
    let d = device();
    let dnn = dnn(usize::MAX);
    let mut shapes = transpose_grid(false);
    shapes.extend(transpose_grid(true));
    let mut count = 0;
    let mut failures = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        for dtype in [DType::U8, DType::I16, DType::I32, DType::I64, DType::U32] {
            for views in [Views::Contiguous, Views::Strided] {
                count += 1;
                let (xb, xv) = make_view(dtype, &s.input_dims(), views, i as u64);
                let (kb, kv) = make_view(dtype, &s.kernel_dims(), views, i as u64 ^ 0x55);
                let want = bytes_of(&s.reference(&xv, &kv));
                let (xbuf, kbuf) = (upload(&d, &xb), upload(&d, &kb));
                let got = s
                    .run(
                        &dnn,
                        dtype,
                        (&xbuf, &layout_of(&xv)),
                        (&kbuf, &layout_of(&kv)),
                    )
                    .map(|out| download(&d, &out));
                match got {
                    Ok(g) if g == want => {}
                    Ok(_) => failures.push(format!("{s:?} {dtype} {views:?}: values differ")),
                    Err(e) => failures.push(format!("{s:?} {dtype} {views:?}: {e}")),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count}:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("integer transposed convolutions: {count} cases, bit-exact");
}

//! GPU tests of rocm-reduce against Candle 0.11.1's CPU backend and candle-nn's CPU ops.
//! Integer results, min/max values and argmin/argmax indices must be exact. Float sums are
//! compared with the CPU's f64 sum of the same values (the CPU backend sums 16-bit floats in
//! 16 bits, far less accurately than the kernels): |got - want| <= tol * sum|x| with tol 1e-5
//! for f32 and the output dtype's rounding otherwise. Softmax and norms use the elementwise
//! tolerances of `rocm_test_support::tolerance`, x4 for the 16-bit dtypes (the CPU rounds its steps).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::{DType as C, Tensor, D};
use rocm_reduce::{self as rr, DType, Error, Layout, Operand as O, ReduceOp};
use rocm_test_support::*;

/// `x` as f64 (f8e4m3 through f32: Candle 0.11.1's direct f8e4m3 -> f64 never returns).
fn to_f64(x: &Tensor) -> Tensor {
    if x.dtype() == C::F8E4M3 {
        return x.to_dtype(C::F32).unwrap().to_dtype(C::F64).unwrap();
    }
    x.to_dtype(C::F64).unwrap()
}

fn cpu_reduce(op: ReduceOp, x: &Tensor, dims: &[usize]) -> Tensor {
    match op {
        // integer sums wrap in the dtype; float sums are compared with the exact f64 sum
        ReduceOp::Sum if x.dtype().is_int() => x.sum_keepdim(dims).unwrap(),
        ReduceOp::Sum => to_f64(x).sum_keepdim(dims).unwrap(),
        ReduceOp::Min => x.min_keepdim(dims[0]).unwrap(),
        ReduceOp::Max => x.max_keepdim(dims[0]).unwrap(),
        ReduceOp::ArgMin => x.argmin_keepdim(dims[0]).unwrap(),
        ReduceOp::ArgMax => x.argmax_keepdim(dims[0]).unwrap(),
    }
}

fn sum_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
        _ => 0.13,
    }
}

/// Checks one reduction; for float sums `want` is f64.
fn check(op: ReduceOp, dtype: DType, view: &Tensor, base: &Tensor, dims: &[usize], what: &str) {
    let d = device();
    let got = rr::reduce(
        &d,
        op,
        O::new(&upload(&d, base), dtype, &layout_of(view)),
        dims,
    )
    .unwrap_or_else(|e| panic!("{op:?} {dtype} {what}: {e}"));
    let got = download(&d, &got);
    let want = cpu_reduce(op, view, dims);
    let out_dtype = op.out_dtype(dtype);
    if op == ReduceOp::Sum && dtype.is_float() {
        let scale = bytes_of(&to_f64(view).abs().unwrap().sum_keepdim(dims).unwrap());
        // the exact sum rounded to the dtype (which saturates f8e4m3 at 448, as the kernel must)
        let rounded = if dtype == DType::F8E4M3 {
            want.to_dtype(C::F32).unwrap().to_dtype(C::F8E4M3).unwrap()
        } else {
            want.to_dtype(cdtype(dtype)).unwrap()
        };
        let (g, w, s) = (
            values(&got, dtype),
            values(&bytes_of(&rounded), dtype),
            values(&scale, DType::F64),
        );
        for i in 0..g.len() {
            let ok = (g[i].is_nan() && w[i].is_nan())
                || (g[i] - w[i]).abs() <= sum_tolerance(dtype) * s[i] + 1e-30
                || g[i] == w[i];
            assert!(
                ok,
                "sum {dtype} {what} [{i}]: got {}, want {} (scale {})",
                g[i], w[i], s[i]
            );
        }
    } else {
        compare(&got, &bytes_of(&want), out_dtype, 0.0)
            .unwrap_or_else(|e| panic!("{op:?} {dtype} {what}: {e}"));
    }
}

#[test]
fn reductions_match_the_cpu_backend() {
    let mut checked = 0;
    for dtype in ALL {
        // (dims, reduce dims): last, first, middle, several, all
        for (shape, dims) in [
            (vec![5, 7, 33], vec![2]),
            (vec![5, 7, 33], vec![0]),
            (vec![5, 7, 33], vec![1]),
            (vec![5, 7, 33], vec![0, 2]),
            (vec![5, 7, 33], vec![0, 1, 2]),
        ] {
            let n: usize = shape.iter().product();
            let base = tensor(&random(dtype, n, -100.0, 100.0, 7), dtype, &shape);
            let views = [
                ("contiguous", base.clone()),
                ("narrowed", base.narrow(2, 1, 31).unwrap()),
            ];
            for (name, view) in &views {
                for op in ReduceOp::ALL {
                    if op != ReduceOp::Sum && dims.len() != 1 {
                        continue; // the CPU backend reduces min/max over one dim only
                    }
                    check(
                        op,
                        dtype,
                        view,
                        &base,
                        &dims,
                        &format!("{shape:?} over {dims:?} {name}"),
                    );
                    checked += 1;
                }
            }
            // a genuinely strided view: the transpose of the first two dims
            let t = base.transpose(0, 1).unwrap();
            for op in ReduceOp::ALL {
                if op != ReduceOp::Sum && dims.len() != 1 {
                    continue;
                }
                check(
                    op,
                    dtype,
                    &t,
                    &base,
                    &dims,
                    &format!("transposed {shape:?} over {dims:?}"),
                );
                checked += 1;
            }
        }
    }
    println!("reduce patterns: {checked} cases equal the CPU backend");
}

#[test]
fn row_lengths_from_1_to_a_million() {
    let mut checked = 0;
    for len in [1usize, 31, 32, 33, 1023, 1024, 4097, 1_000_000] {
        let rows = if len > 10_000 { 2 } else { 6 };
        for dtype in [DType::F32, DType::BF16, DType::I32, DType::U8, DType::F64] {
            let base = tensor(
                &random(dtype, rows * len, -10.0, 10.0, len as u64),
                dtype,
                &[rows, len],
            );
            for op in ReduceOp::ALL {
                check(op, dtype, &base, &base, &[1], &format!("rows of {len}"));
                checked += 1;
            }
            check(
                ReduceOp::Sum,
                dtype,
                &base,
                &base,
                &[0, 1],
                &format!("all of {rows}x{len}"),
            );
            checked += 1;
        }
    }
    println!("row lengths: {checked} cases equal the CPU backend");
}

#[test]
fn many_short_or_strided_reductions_take_a_thread_an_output_and_match_the_cpu() {
    let d = device();
    let info = d.info();
    // enough outputs for the thread-an-output path on this device (checked below, so the
    // cases cannot drift to the block path unnoticed)
    let n = (u64::from(info.multiprocessor_count) * 512).next_multiple_of(64) as usize;
    let mut checked = 0;
    // (shape, reduce dims, reduction contiguous): dim -2 of (a, 8, n / a) as the MoE block sums
    // each token's expert rows; 8 contiguous elements a row; dim 0 of 3 rows
    for (shape, dims, red_contiguous) in [
        (vec![64, 8, n / 64], vec![1], false),
        (vec![n, 8], vec![1], true),
        (vec![3, n], vec![0], false),
    ] {
        let n_out = n as u64;
        let red_len = shape[dims[0]] as u64;
        assert!(
            rr::by_columns(n_out, red_len, red_contiguous, info.multiprocessor_count),
            "{shape:?} over {dims:?} should take a thread an output"
        );
        for dtype in ALL {
            let elems: usize = shape.iter().product();
            let base = tensor(&random(dtype, elems, -100.0, 100.0, 11), dtype, &shape);
            for op in ReduceOp::ALL {
                check(
                    op,
                    dtype,
                    &base,
                    &base,
                    &dims,
                    &format!("{shape:?} over {dims:?}"),
                );
                checked += 1;
            }
        }
    }
    // NaNs at a column's element 0 (kept by min and max) and later (passed over), ties
    let mut col = vec![1.0f32; 3 * n];
    col[5] = f32::NAN; // column 5, element 0
    col[n + 9] = f32::NAN; // column 9, element 1
    col[2 * n + 9] = 4.0;
    col[n + 12] = 4.0; // column 12: a tie at elements 1 and 2
    col[2 * n + 12] = 4.0;
    let x = Tensor::from_vec(col, (3, n), &candle_core::Device::Cpu).unwrap();
    for op in ReduceOp::ALL {
        check(op, DType::F32, &x, &x, &[0], "columns with NaNs and ties");
        checked += 1;
    }
    println!("thread-an-output reductions: {checked} cases equal the CPU backend");
}

#[test]
fn nan_ties_and_empty_tensors_follow_the_cpu_backend() {
    let d = device();
    let nan = f32::NAN;
    let rows: Vec<f32> = vec![
        nan, 1.0, 5.0, 5.0, // NaN first: kept by min and max
        1.0, nan, 5.0, 5.0, // NaN later: passed over; tie at 5 keeps the first
        -0.0, 0.0, 0.0, -0.0, // signed zeros tie
        3.0, 3.0, 3.0, 3.0,
    ];
    let x = Tensor::from_vec(rows.clone(), (4, 4), &candle_core::Device::Cpu).unwrap();
    for op in ReduceOp::ALL {
        check(op, DType::F32, &x, &x, &[1], "NaN/ties");
    }
    // a long row with a NaN at 0 and at the far end, split over many blocks
    let mut long = vec![1.0f32; 1 << 22];
    long[0] = nan;
    long[(1 << 22) - 1] = 7.0;
    let x = Tensor::from_vec(long, (1, 1 << 22), &candle_core::Device::Cpu).unwrap();
    for op in [ReduceOp::Max, ReduceOp::ArgMax, ReduceOp::Min] {
        check(op, DType::F32, &x, &x, &[1], "long row, NaN at 0");
    }
    let mut long = vec![1.0f32; 1 << 22];
    long[12345] = nan;
    long[(1 << 22) - 7] = 9.0;
    long[(1 << 22) - 5] = 9.0;
    let x = Tensor::from_vec(long, (1, 1 << 22), &candle_core::Device::Cpu).unwrap();
    for op in [ReduceOp::Max, ReduceOp::ArgMax, ReduceOp::ArgMin] {
        check(op, DType::F32, &x, &x, &[1], "long row, later NaN, tie");
    }
    // empty: min/max/arg* are errors, sum gives zeros
    let empty = d.alloc(16).unwrap();
    let l = Layout::contiguous(&[3, 0]);
    for op in [
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::ArgMin,
        ReduceOp::ArgMax,
    ] {
        let e = rr::reduce(&d, op, O::new(&empty, DType::F32, &l), &[1]).unwrap_err();
        assert!(matches!(e, Error::EmptyTensor { .. }), "{e}");
    }
    let s = rr::reduce(&d, ReduceOp::Sum, O::new(&empty, DType::F32, &l), &[1]).unwrap();
    assert_eq!(download(&d, &s), vec![0u8; 12]);
    let e = rr::reduce(&d, ReduceOp::Sum, O::new(&empty, DType::F32, &l), &[2]).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
}

/// Multiplier on `rocm_test_support::tolerance`: x4 for the 16-bit floats (one output rounding on each
/// side); for f64, rows of 10^6 values near 1000 are summed in a different order on each side,
/// which moves the mean by about 1e-10 relative, so 1e-9.
fn norm_tol_slack(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1000.0,
        d if d.size_in_bytes() <= 2 => 4.0,
        _ => 1.0,
    }
}

#[test]
fn softmax_and_norms_match_candle_nn() {
    let d = device();
    let mut checked = 0;
    for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
        // register rows of one thread (1, 16), of part of a warp (31, 96), of one or a few
        // warps (1024, 4096), of a whole block in elements (4097) and in packs (32768: f32
        // and f16/bf16; f64 takes the block-per-row kernel there), and block rows (65544, 10^6)
        for (rows, len) in [
            (3usize, 1usize),
            (300, 16),
            (5, 31),
            (9, 96),
            (4, 1024),
            (3, 4096),
            (3, 4097),
            (2, 32768),
            (2, 65544),
            (1, 1_000_000),
        ] {
            // large magnitudes and an offset: max subtraction and stable variance matter
            let mut x = tensor(
                &random(dtype, rows * len, -30.0, 30.0, len as u64),
                dtype,
                &[rows, len],
            );
            if dtype != DType::F16 {
                x = x.affine(1.0, 1000.0).unwrap();
            }
            let alpha = tensor(&random(dtype, len, 0.5, 1.5, 3), dtype, &[len]);
            let beta = tensor(&random(dtype, len, -1.0, 1.0, 4), dtype, &[len]);
            let (xb, ab, bb) = (upload(&d, &x), upload(&d, &alpha), upload(&d, &beta));
            let (xl, al, bl) = (layout_of(&x), layout_of(&alpha), layout_of(&beta));
            let slack = norm_tol_slack(dtype);
            // candle-nn's CPU ops run in the input dtype (sums of 16-bit floats in 16 bits, the
            // layer_norm variance as E[x^2] - mean^2, which cancels at an offset of 1000): the
            // reference is the same op on the f64 values, rounded once to the dtype.
            let reference = |f: &dyn Fn(&Tensor, &Tensor, &Tensor) -> Tensor| -> Tensor {
                if dtype != DType::F64 {
                    let up = |t: &Tensor| t.to_dtype(C::F64).unwrap();
                    f(&up(&x), &up(&alpha), &up(&beta))
                        .to_dtype(cdtype(dtype))
                        .unwrap()
                } else {
                    f(&x, &alpha, &beta)
                }
            };
            let what = format!("{dtype} {rows}x{len}");
            let got = rr::softmax_last_dim(&d, O::new(&xb, dtype, &xl)).unwrap();
            let want = reference(&|x, _, _| candle_nn::ops::softmax_last_dim(x).unwrap());
            compare(&download(&d, &got), &bytes_of(&want), dtype, slack)
                .unwrap_or_else(|e| panic!("softmax {what}: {e}"));
            let got = rr::log_softmax_last_dim(&d, O::new(&xb, dtype, &xl)).unwrap();
            let want = reference(&|x, _, _| candle_nn::ops::log_softmax(x, D::Minus1).unwrap());
            compare(&download(&d, &got), &bytes_of(&want), dtype, slack * 4.0)
                .unwrap_or_else(|e| panic!("log_softmax {what}: {e}"));
            let got =
                rr::rms_norm(&d, O::new(&xb, dtype, &xl), O::new(&ab, dtype, &al), 1e-5).unwrap();
            // candle-nn's rms_norm has no f64 kernel: its definition, spelled out in f64
            let want = reference(&|x, a, _| {
                let ms = x.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
                let r = (ms + 1e-5).unwrap().sqrt().unwrap();
                x.broadcast_div(&r).unwrap().broadcast_mul(a).unwrap()
            });
            compare(&download(&d, &got), &bytes_of(&want), dtype, slack)
                .unwrap_or_else(|e| panic!("rms_norm {what}: {e}"));
            let got = rr::layer_norm(
                &d,
                O::new(&xb, dtype, &xl),
                O::new(&ab, dtype, &al),
                Some(O::new(&bb, dtype, &bl)),
                1e-5,
            )
            .unwrap();
            // layer_norm's definition in f64, variance as the mean of squared deviations
            let want = reference(&|x, a, b| {
                let mean = x.mean_keepdim(D::Minus1).unwrap();
                let dev = x.broadcast_sub(&mean).unwrap();
                let var = dev.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
                let r = (var + 1e-5).unwrap().sqrt().unwrap();
                dev.broadcast_div(&r)
                    .unwrap()
                    .broadcast_mul(a)
                    .unwrap()
                    .broadcast_add(b)
                    .unwrap()
            });
            compare(&download(&d, &got), &bytes_of(&want), dtype, slack * 4.0)
                .unwrap_or_else(|e| panic!("layer_norm {what}: {e}"));
            checked += 4;
        }
    }
    // Causal attention masks: -inf above the diagonal, so most threads of a short row see
    // only -inf (and row 0 has one finite value). -inf contributes exp(-inf) = 0.
    for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
        for len in [1usize, 7, 16, 33, 300, 1030] {
            let x = tensor(&random(dtype, len * len, -4.0, 4.0, 11), dtype, &[len, len]);
            let keep = Tensor::tril2(len, C::U8, &candle_core::Device::Cpu).unwrap();
            let ninf = Tensor::full(f64::NEG_INFINITY, (len, len), &candle_core::Device::Cpu)
                .unwrap()
                .to_dtype(cdtype(dtype))
                .unwrap();
            let x = keep.where_cond(&x, &ninf).unwrap();
            let xb = upload(&d, &x);
            let got = rr::softmax_last_dim(&d, O::new(&xb, dtype, &layout_of(&x))).unwrap();
            let want = candle_nn::ops::softmax_last_dim(&x.to_dtype(C::F64).unwrap())
                .unwrap()
                .to_dtype(cdtype(dtype))
                .unwrap();
            compare(
                &download(&d, &got),
                &bytes_of(&want),
                dtype,
                norm_tol_slack(dtype),
            )
            .unwrap_or_else(|e| panic!("softmax {dtype} causal {len}x{len}: {e}"));
            checked += 1;
        }
    }
    // strided input: copied first
    let x = tensor(
        &random(DType::F32, 64 * 48, -3.0, 3.0, 9),
        DType::F32,
        &[64, 48],
    );
    let xt = x.t().unwrap();
    let got =
        rr::softmax_last_dim(&d, O::new(&upload(&d, &x), DType::F32, &layout_of(&xt))).unwrap();
    let want = candle_nn::ops::softmax_last_dim(&xt.contiguous().unwrap()).unwrap();
    compare(&download(&d, &got), &bytes_of(&want), DType::F32, 1.0).unwrap();
    let xb = upload(&d, &x);
    let (xl, wl) = (layout_of(&x), Layout::contiguous(&[47]));
    let e = rr::rms_norm(
        &d,
        O::new(&xb, DType::F32, &xl),
        O::new(&xb, DType::F32, &wl),
        1e-5,
    )
    .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = rr::softmax_last_dim(&d, O::new(&xb, DType::I32, &xl)).unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
    println!(
        "softmax/log_softmax/rms_norm/layer_norm: {} cases equal candle-nn",
        checked + 1
    );
}

/// `got` and `want` equal byte for byte, else a panic naming the first difference.
fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: byte {i} of {} differs", got.len());
    }
}

#[test]
fn add_rms_norm_is_the_add_then_the_norm_bit_for_bit() {
    let d = device();
    let mut checked = 0;
    for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
        // register rows (packs, and elements where a view starts off a pack), block rows
        for (rows, len, start) in [
            (3usize, 1usize, 0usize),
            (300, 16, 0),
            (5, 31, 0),
            (4, 2048, 0),
            (4, 2048, 1),
            (3, 4097, 0),
            (2, 65544, 0),
        ] {
            let n = rows * len;
            let x = tensor(
                &random(dtype, start + n, -4.0, 4.0, len as u64),
                dtype,
                &[start + n],
            );
            let r = tensor(&random(dtype, n, -4.0, 4.0, 7), dtype, &[rows, len]);
            let alpha = tensor(&random(dtype, len, 0.5, 1.5, 3), dtype, &[len]);
            let (xb, rb, ab) = (upload(&d, &x), upload(&d, &r), upload(&d, &alpha));
            let xl = Layout::contiguous_at(&[rows, len], start);
            let (rl, al) = (layout_of(&r), layout_of(&alpha));
            let what = format!("{dtype} {rows}x{len} from {start}");
            let (sum, normed) = rr::add_rms_norm(
                &d,
                O::new(&xb, dtype, &xl),
                O::new(&rb, dtype, &rl),
                O::new(&ab, dtype, &al),
                1e-5,
            )
            .unwrap_or_else(|e| panic!("add_rms_norm {what}: {e}"));
            // Candle's CPU add rounds each sum once to the dtype, as the kernel does.
            let x_rows = x.narrow(0, start, n).unwrap().reshape((rows, len)).unwrap();
            let want_sum = (&x_rows + &r).unwrap();
            same_bytes(
                &download(&d, &sum),
                &bytes_of(&want_sum),
                &format!("sum {what}"),
            );
            // rms_norm of the sum at x's offset: the same plan (packs or elements), so the
            // same order of the sum of squares
            let lead = x.narrow(0, 0, start).unwrap();
            let sum_at = Tensor::cat(&[&lead, &want_sum.flatten_all().unwrap()], 0).unwrap();
            let want = rr::rms_norm(
                &d,
                O::new(&upload(&d, &sum_at), dtype, &xl),
                O::new(&ab, dtype, &al),
                1e-5,
            )
            .unwrap();
            same_bytes(
                &download(&d, &normed),
                &download(&d, &want),
                &format!("norm {what}"),
            );
            checked += 1;
        }
    }
    // bad input: typed errors
    let x = tensor(&random(DType::F32, 64, -1.0, 1.0, 1), DType::F32, &[4, 16]);
    let xb = upload(&d, &x);
    let (l, l15, w16) = (
        Layout::contiguous(&[4, 16]),
        Layout::contiguous(&[4, 15]),
        Layout::contiguous(&[16]),
    );
    let call = |x: (DType, &Layout), r: (DType, &Layout), a: &Layout| {
        rr::add_rms_norm(
            &d,
            O::new(&xb, x.0, x.1),
            O::new(&xb, r.0, r.1),
            O::new(&xb, x.0, a),
            1e-5,
        )
        .unwrap_err()
    };
    let e = call((DType::F32, &l), (DType::F32, &l15), &w16);
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = call((DType::F32, &l), (DType::BF16, &l), &w16);
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    let e = call(
        (DType::F32, &l),
        (DType::F32, &l),
        &Layout::contiguous(&[15]),
    );
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let e = call((DType::I32, &l), (DType::I32, &l), &w16);
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
    println!("add_rms_norm: {checked} cases equal the add then rms_norm, 4 bad inputs rejected");
}

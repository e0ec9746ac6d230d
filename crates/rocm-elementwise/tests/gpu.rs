//! GPU tests of rocm-elementwise against Candle 0.11.1's CPU backend (and candle-nn's CPU
//! rope and sigmoid): every op x every dtype it accepts x the layout classes of
//! `rocm_test_support::layout_cases`. Integers and casts must be exact; float tolerances are in
//! `rocm_test_support::tolerance` (about one unit in the last place, x3 where the CPU backend rounds
//! after every step of a multi-step formula in a narrow dtype).
//!
//! One file, one test binary: each GPU test binary links Candle's CPU reference and travels in
//! the GPU pack, so a crate's GPU suite stays one target (the pack's size and link time).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::Tensor;
use rocm_elementwise::OperandCopy;
use rocm_elementwise::{
    self as ew, BinaryOp, CmpOp, Copy2d, DType, Error, Layout, Operand as O, RopeVariant, Scalar,
    UnaryOp,
};
use rocm_test_support::*;

/// Candle's CPU `to_dtype`, except f8e4m3 -> f64, which never returns in Candle 0.11.1 (its
/// `to_f64` resolves to the `WithDType` trait method, which calls itself); that one goes
/// through f32, which is exact.
fn cpu_to_dtype(x: &Tensor, to: DType) -> candle_core::Result<Tensor> {
    if x.dtype() == candle_core::DType::F8E4M3 && to == DType::F64 {
        return x
            .to_dtype(candle_core::DType::F32)?
            .to_dtype(candle_core::DType::F64);
    }
    x.to_dtype(cdtype(to))
}

fn cpu_unary(op: UnaryOp, x: &Tensor) -> Tensor {
    let r = match op {
        UnaryOp::Neg => x.neg(),
        UnaryOp::Recip => x.recip(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.log(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Erf => x.erf(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Round => x.round(),
        // Not a Candle op: 0.5 * (1 + erf(x / sqrt 2)) in f64, rounded once.
        UnaryOp::NormCdf => cpu_to_dtype(x, DType::F64)
            .and_then(|v| v.affine(std::f64::consts::FRAC_1_SQRT_2, 0.0))
            .and_then(|v| v.erf())
            .and_then(|v| v.affine(0.5, 0.5))
            .and_then(|v| v.to_dtype(x.dtype())),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sqr => x.sqr(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Gelu => x.gelu(),
        UnaryOp::GeluErf => x.gelu_erf(),
        UnaryOp::Relu => x.relu(),
        UnaryOp::Silu => x.silu(),
        UnaryOp::Sign => x.sign(),
        // candle-nn has no f8e4m3 sigmoid: its f32 result rounded once is the reference there.
        UnaryOp::Sigmoid if x.dtype() == candle_core::DType::F8E4M3 => x
            .to_dtype(candle_core::DType::F32)
            .and_then(|v| candle_nn::ops::sigmoid(&v))
            .and_then(|v| v.to_dtype(x.dtype())),
        UnaryOp::Sigmoid => candle_nn::ops::sigmoid(x),
    };
    r.unwrap_or_else(|e| panic!("cpu {op:?}: {e}"))
}

/// Ops the CPU backend evaluates as a chain of rounded steps in narrow dtypes.
fn multi_step(op: UnaryOp) -> bool {
    matches!(
        op,
        UnaryOp::Gelu | UnaryOp::Silu | UnaryOp::Sigmoid | UnaryOp::GeluErf | UnaryOp::NormCdf
    )
}

#[test]
fn unary_ops_match_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        let cases = layout_cases(dtype, -4.0, 4.0, 100);
        let uploaded: Vec<_> = cases.iter().map(|c| upload(&d, &c.base)).collect();
        for op in UnaryOp::ALL {
            if !op.supports(dtype) {
                let err = ew::unary(
                    &d,
                    op,
                    O::new(&uploaded[0], dtype, &layout_of(&cases[0].view)),
                )
                .unwrap_err();
                assert!(
                    matches!(err, Error::UnsupportedDType { .. }),
                    "{op:?} {dtype}: {err}"
                );
                continue;
            }
            for (c, src) in cases.iter().zip(&uploaded) {
                trace(|| format!("{op:?} {dtype} {}", c.name));
                let got = ew::unary(&d, op, O::new(src, dtype, &layout_of(&c.view)))
                    .unwrap_or_else(|e| panic!("{op:?} {dtype} {}: {e}", c.name));
                let want = bytes_of(&cpu_unary(op, &c.view));
                let slack = if multi_step(op) && dtype.size_in_bytes() <= 2 {
                    3.0
                } else {
                    1.0
                };
                compare(&download(&d, &got), &want, dtype, slack)
                    .unwrap_or_else(|e| panic!("{op:?} {dtype} {}: {e}", c.name));
                checked += 1;
            }
        }
    }
    println!("unary: {checked} op x dtype x layout cases equal the CPU backend");
}

#[test]
fn elu_powf_and_affine_match_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        for c in layout_cases(dtype, -4.0, 4.0, 7) {
            let src = upload(&d, &c.base);
            let l = layout_of(&c.view);
            let what = format!("{dtype} {}", c.name);
            // affine: integer dtypes truncate mul/add first and wrap
            for (mul, add) in [(1.5, -2.25), (3.0, 7.0), (-2.7, 0.5)] {
                let got = ew::affine(&d, O::new(&src, dtype, &l), mul, add).unwrap();
                let want = bytes_of(&c.view.affine(mul, add).unwrap());
                compare(&download(&d, &got), &want, dtype, 0.0)
                    .unwrap_or_else(|e| panic!("affine({mul}, {add}) {what}: {e}"));
                checked += 1;
            }
            if dtype.is_int() {
                for r in [
                    ew::elu(&d, O::new(&src, dtype, &l), 1.0),
                    ew::powf(&d, O::new(&src, dtype, &l), 2.0),
                ] {
                    assert!(matches!(r.unwrap_err(), Error::UnsupportedDType { .. }));
                }
                continue;
            }
            for alpha in [1.0, 0.3] {
                let got = ew::elu(&d, O::new(&src, dtype, &l), alpha).unwrap();
                let want = bytes_of(&c.view.elu(alpha).unwrap());
                compare(&download(&d, &got), &want, dtype, 2.0)
                    .unwrap_or_else(|e| panic!("elu({alpha}) {what}: {e}"));
                checked += 1;
            }
            for e in [2.0, 1.7, -0.5] {
                let got = ew::powf(&d, O::new(&src, dtype, &l), e).unwrap();
                let want = bytes_of(&c.view.powf(e).unwrap());
                compare(&download(&d, &got), &want, dtype, 1.0)
                    .unwrap_or_else(|err| panic!("powf({e}) {what}: {err}"));
                checked += 1;
            }
        }
    }
    println!("elu/powf/affine: {checked} cases equal the CPU backend");
}

/// Divisors the CPU backend can divide by: no 0, and no -1 (MIN / -1 overflows there).
fn safe_divisor(t: &Tensor, dtype: DType) -> Tensor {
    if dtype.is_float() {
        return t.clone();
    }
    let bytes = bytes_of(t);
    let w = dtype.size_in_bytes();
    let fixed: Vec<u8> = bytes
        .chunks_exact(w)
        .flat_map(|c| {
            let zero = c.iter().all(|&b| b == 0);
            let minus_one =
                dtype != DType::U8 && dtype != DType::U32 && c.iter().all(|&b| b == 0xff);
            let mut v = c.to_vec();
            if zero || minus_one {
                v.iter_mut().for_each(|b| *b = 0);
                v[0] = 3;
            }
            v
        })
        .collect();
    tensor(&fixed, dtype, t.dims())
}

/// Pairs of views with equal dims drawn from two sets of layout cases.
fn pairs<'a>(a: &'a [Case], b: &'a [Case]) -> Vec<(&'a Case, &'a Case)> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            if x.view.dims() == y.view.dims() {
                out.push((x, y));
            }
        }
    }
    out
}

#[test]
fn binary_ops_and_comparisons_match_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        let lhs_cases = layout_cases(dtype, -4.0, 4.0, 11);
        let rhs_cases: Vec<Case> = layout_cases(dtype, -4.0, 4.0, 12)
            .into_iter()
            .map(|c| c.with_base(safe_divisor(&c.base, dtype)))
            .collect();
        for (a, b) in pairs(&lhs_cases, &rhs_cases) {
            let (ba, bb) = (upload(&d, &a.base), upload(&d, &b.base));
            let (la, lb) = (layout_of(&a.view), layout_of(&b.view));
            let what = format!("{dtype} {} x {}", a.name, b.name);
            for op in BinaryOp::ALL {
                let got =
                    ew::binary(&d, op, O::new(&ba, dtype, &la), O::new(&bb, dtype, &lb)).unwrap();
                let want = match op {
                    BinaryOp::Add => a.view.add(&b.view),
                    BinaryOp::Sub => a.view.sub(&b.view),
                    BinaryOp::Mul => a.view.mul(&b.view),
                    BinaryOp::Div => a.view.div(&b.view),
                    BinaryOp::Maximum => a.view.maximum(&b.view),
                    BinaryOp::Minimum => a.view.minimum(&b.view),
                }
                .unwrap();
                compare(&download(&d, &got), &bytes_of(&want), dtype, 1.0)
                    .unwrap_or_else(|e| panic!("{op:?} {what}: {e}"));
                checked += 1;
            }
            // comparisons, against the other operand and against itself (all equal)
            for (rb, rl, rview) in [(&bb, &lb, &b.view), (&ba, &la, &a.view)] {
                for op in CmpOp::ALL {
                    let got =
                        ew::cmp(&d, op, O::new(&ba, dtype, &la), O::new(rb, dtype, rl)).unwrap();
                    let want = match op {
                        CmpOp::Eq => a.view.eq(rview),
                        CmpOp::Ne => a.view.ne(rview),
                        CmpOp::Lt => a.view.lt(rview),
                        CmpOp::Le => a.view.le(rview),
                        CmpOp::Gt => a.view.gt(rview),
                        CmpOp::Ge => a.view.ge(rview),
                    }
                    .unwrap();
                    compare(&download(&d, &got), &bytes_of(&want), DType::U8, 0.0)
                        .unwrap_or_else(|e| panic!("{op:?} {what}: {e}"));
                    checked += 1;
                }
            }
        }
    }
    println!("binary/cmp: {checked} op x dtype x layout-pair cases equal the CPU backend");
}

#[test]
fn silu_mul_is_the_silu_then_the_mul_bit_for_bit() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        let gate_cases = layout_cases(dtype, -6.0, 6.0, 21);
        let up_cases = layout_cases(dtype, -4.0, 4.0, 22);
        for (g, u) in pairs(&gate_cases, &up_cases) {
            let (bg, bu) = (upload(&d, &g.base), upload(&d, &u.base));
            let (lg, lu) = (layout_of(&g.view), layout_of(&u.view));
            let what = format!("{dtype} {} x {}", g.name, u.name);
            let got = ew::silu_mul(&d, O::new(&bg, dtype, &lg), O::new(&bu, dtype, &lu));
            if !dtype.is_float() {
                let e = got.unwrap_err();
                assert!(matches!(e, Error::UnsupportedDType { .. }), "{what}: {e}");
                continue;
            }
            let got = got.unwrap_or_else(|e| panic!("silu_mul {what}: {e}"));
            // the two ops on the device, from the same views
            let silu = ew::unary(&d, UnaryOp::Silu, O::new(&bg, dtype, &lg)).unwrap();
            let dense = Layout::contiguous(g.view.dims());
            let want = ew::binary(
                &d,
                BinaryOp::Mul,
                O::new(&silu, dtype, &dense),
                O::new(&bu, dtype, &lu),
            )
            .unwrap();
            assert_eq!(download(&d, &got), download(&d, &want), "silu_mul {what}");
            checked += 1;
        }
    }
    let x = upload(&d, &layout_cases(DType::F32, -1.0, 1.0, 1)[0].base);
    let e = ew::silu_mul(
        &d,
        O::new(&x, DType::F32, &Layout::contiguous(&[2, 3])),
        O::new(&x, DType::F32, &Layout::contiguous(&[3, 2])),
    )
    .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    println!("silu_mul: {checked} dtype x layout-pair cases equal silu then mul");
}

#[test]
fn integer_division_by_zero_gives_zero() {
    let d = device();
    let a = d.htod(&[7i32, i32::MIN, -9, 5]).unwrap();
    let b = d.htod(&[0i32, -1, 2, 0]).unwrap();
    let l = Layout::contiguous(&[4]);
    let out = ew::binary(
        &d,
        BinaryOp::Div,
        O::new(a.as_buffer(), DType::I32, &l),
        O::new(b.as_buffer(), DType::I32, &l),
    )
    .unwrap();
    let got: Vec<i32> = bytemuck::cast_slice(&download(&d, &out)).to_vec();
    assert_eq!(got, vec![0, i32::MIN, -4, 0]);
}

/// Values that probe every rounding, saturation and NaN rule of the casts.
const SPECIALS: [f64; 30] = [
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.0,
    -0.0,
    0.5,
    1.5,
    2.5,
    -2.5,
    255.5,
    256.0,
    -129.9,
    300.7,
    -300.7,
    448.0,
    464.0,
    465.0,
    500.0,
    65504.0,
    70000.0,
    1e-8,
    3e-3,
    1e10,
    -1e10,
    2147483648.0,
    -2147483649.0,
    4294967296.0 + 5.0,
    1e19,
    -1e19,
    1.000_000_119_209_289_6,
];

fn specials(dtype: DType) -> Vec<u8> {
    SPECIALS
        .iter()
        .flat_map(|&v| match dtype {
            DType::BF16 => half::bf16::from_f64(v).to_bits().to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(v).to_bits().to_le_bytes().to_vec(),
            DType::F32 => (v as f32).to_le_bytes().to_vec(),
            DType::F64 => v.to_le_bytes().to_vec(),
            DType::F8E4M3 => vec![float8::F8E4M3::from_f64(v).to_bits()],
            _ => unreachable!(),
        })
        .collect()
}

#[test]
fn casts_between_every_pair_match_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for from in ALL {
        let mut cases = layout_cases(from, -300.0, 300.0, 21);
        cases.retain(|c| {
            ["contiguous", "start offset", "transposed", "long, odd tail"].contains(&c.name)
        });
        if from.is_float() {
            let s = tensor(&specials(from), from, &[SPECIALS.len()]);
            cases.push(cases[0].with_base(s));
        }
        for c in &cases {
            let src = upload(&d, &c.base);
            let l = layout_of(&c.view);
            for to in ALL {
                trace(|| format!("cast {from} -> {to} {}", c.name));
                let got = ew::cast(&d, O::new(&src, from, &l), to).unwrap();
                let want = bytes_of(&cpu_to_dtype(&c.view, to).unwrap());
                compare(&download(&d, &got), &want, to, 0.0)
                    .unwrap_or_else(|e| panic!("cast {from} -> {to} {}: {e}", c.name));
                checked += 1;
            }
        }
    }
    println!("casts: {checked} pair x layout cases equal the CPU backend exactly");
}

/// Zeroes about half of the elements, so both branches are taken.
fn some_zero(t: &Tensor, dtype: DType) -> Tensor {
    let w = dtype.size_in_bytes();
    let bytes: Vec<u8> = bytes_of(t)
        .chunks_exact(w)
        .flat_map(|c| {
            if c[0] & 1 == 0 {
                vec![0u8; w]
            } else {
                c.to_vec()
            }
        })
        .collect();
    tensor(&bytes, dtype, t.dims())
}

#[test]
fn where_cond_matches_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for cond_dtype in [DType::U8, DType::U32, DType::I16, DType::I32, DType::I64] {
        let conds: Vec<Case> = layout_cases(cond_dtype, 0.0, 1.0, 31)
            .into_iter()
            .map(|c| c.with_base(some_zero(&c.base, cond_dtype)))
            .collect();
        for dtype in ALL {
            let ts = layout_cases(dtype, -4.0, 4.0, 32);
            let fs = layout_cases(dtype, -4.0, 4.0, 33);
            for (c, t) in pairs(&conds, &ts) {
                for f in fs.iter().filter(|f| f.view.dims() == c.view.dims()) {
                    let (cb, tb, fb) = (
                        upload(&d, &c.base),
                        upload(&d, &t.base),
                        upload(&d, &f.base),
                    );
                    let (cl, tl, fl) = (layout_of(&c.view), layout_of(&t.view), layout_of(&f.view));
                    let got = ew::where_cond(
                        &d,
                        O::new(&cb, cond_dtype, &cl),
                        O::new(&tb, dtype, &tl),
                        O::new(&fb, dtype, &fl),
                    )
                    .unwrap();
                    let want = c.view.where_cond(&t.view, &f.view).unwrap();
                    compare(&download(&d, &got), &bytes_of(&want), dtype, 0.0).unwrap_or_else(
                        |e| {
                            panic!(
                                "where {cond_dtype} {dtype} {}/{}/{}: {e}",
                                c.name, t.name, f.name
                            )
                        },
                    );
                    checked += 1;
                }
            }
        }
    }
    let c = d.htod(&[1.0f32]).unwrap();
    let l = Layout::contiguous(&[1]);
    let f32_operand = O::new(c.as_buffer(), DType::F32, &l);
    let err = ew::where_cond(&d, f32_operand, f32_operand, f32_operand).unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { .. }), "{err}");
    println!("where_cond: {checked} cases equal the CPU backend");
}

fn scalar_of(dtype: DType) -> (Scalar, candle_core::scalar::Scalar) {
    use candle_core::scalar::Scalar as C;
    match dtype {
        DType::U8 => (Scalar::U8(201), C::U8(201)),
        DType::U32 => (Scalar::U32(4_000_000_001), C::U32(4_000_000_001)),
        DType::I16 => (Scalar::I16(-1234), C::I16(-1234)),
        DType::I32 => (Scalar::I32(-7), C::I32(-7)),
        DType::I64 => (Scalar::I64(-(1 << 50)), C::I64(-(1 << 50))),
        DType::BF16 => {
            let v = half::bf16::from_f32(-2.5);
            (Scalar::BF16(v), C::BF16(v))
        }
        DType::F16 => {
            let v = half::f16::from_f32(0.1);
            (Scalar::F16(v), C::F16(v))
        }
        DType::F32 => (Scalar::F32(3.25), C::F32(3.25)),
        DType::F64 => (Scalar::F64(-1e300), C::F64(-1e300)),
        DType::F8E4M3 => {
            let v = float8::F8E4M3::from_f32(-3.0);
            (Scalar::F8E4M3(v.to_bits()), C::F8E4M3(v))
        }
    }
}

#[test]
fn const_set_copy_strided_and_copy2d_match_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        let w = dtype.size_in_bytes();
        for c in layout_cases(dtype, -4.0, 4.0, 41) {
            // const_set through the view: the base changes exactly where the view points.
            let (ours, theirs) = scalar_of(dtype);
            let buf = upload(&d, &c.base);
            ew::const_set(&d, O::new(&buf, dtype, &layout_of(&c.view)), ours).unwrap();
            let fresh = c.base.copy().unwrap();
            (c.make_view)(&fresh).const_set(theirs).unwrap();
            compare(&download(&d, &buf), &bytes_of(&fresh), dtype, 0.0)
                .unwrap_or_else(|e| panic!("const_set {dtype} {}: {e}", c.name));
            // copy_strided to offset 7 of a poisoned buffer
            let n = c.view.elem_count();
            let src = upload(&d, &c.base);
            let dst = d.alloc((n + 9) * w).unwrap();
            d.memset(&dst, 0, (n + 9) * w, 0xab).unwrap();
            O::new(&src, dtype, &layout_of(&c.view))
                .copy_to(&dst, 7)
                .unwrap();
            let got = download(&d, &dst);
            assert!(got[..7 * w]
                .iter()
                .chain(&got[(7 + n) * w..])
                .all(|&b| b == 0xab));
            assert!(
                got[7 * w..(7 + n) * w] == bytes_of(&c.view)[..],
                "copy_strided {dtype} {}",
                c.name
            );
            checked += 2;
        }
        // copy2d: blocks with strides and offsets on both sides
        let mut r = rng(42);
        for (rows, cols) in [(1usize, 1usize), (3, 5), (17, 33), (300, 1), (2, 3000)] {
            use rand::Rng;
            let (ss, ds) = (cols + r.random_range(0..4), cols + r.random_range(0..4));
            let (so, doff) = (r.random_range(0..5usize), r.random_range(0..5usize));
            let src_host = random(dtype, so + rows * ss, -4.0, 4.0, 43);
            let src = d.alloc(src_host.len()).unwrap();
            d.copy_htod(&src_host, &src, 0).unwrap();
            let dst_len = doff + rows * ds;
            let dst = d.alloc(dst_len * w).unwrap();
            d.memset(&dst, 0, dst_len * w, 0x5a).unwrap();
            let block = Copy2d {
                rows,
                cols,
                src_stride: ss,
                dst_stride: ds,
                src_offset: so,
                dst_offset: doff,
            };
            ew::copy2d(&d, dtype, &src, &dst, &block).unwrap();
            let mut want = vec![0x5a; dst_len * w];
            for i in 0..rows {
                let s = (so + i * ss) * w;
                let t = (doff + i * ds) * w;
                want[t..t + cols * w].copy_from_slice(&src_host[s..s + cols * w]);
            }
            assert!(download(&d, &dst) == want, "copy2d {dtype} {rows}x{cols}");
            checked += 1;
        }
    }
    println!("const_set/copy_strided/copy2d: {checked} cases equal the CPU backend");
}

/// Candle's cat of `parts` along `dim` of (2, parts, 3, w) shapes, as `cat_contiguous` writes
/// it, in one `copy2d_many` call: every dtype, the same source repeated (`repeat_kv`), blocks
/// of widths that do and do not allow wide units, more blocks than one launch takes, and a
/// block of other rows in the middle (its own launch).
fn bytes_to_device(d: &rocm_device::Device, bytes: &[u8]) -> rocm_device::Buffer {
    let buf = d.alloc(bytes.len()).unwrap();
    d.copy_htod(bytes, &buf, 0).unwrap();
    buf
}

#[test]
fn copy2d_many_writes_candles_cat() {
    use rand::Rng;
    let d = device();
    let mut r = rng(44);
    let mut checked = 0;
    for dtype in ALL {
        let w = dtype.size_in_bytes();
        for widths in [
            vec![64usize, 64, 64, 64],
            vec![5, 12, 1, 7],
            vec![8; 11],
            vec![3, 16, 24, 9, 2, 31, 6, 8, 4, 1],
        ] {
            let rows = 6;
            let total: usize = widths.iter().sum();
            let repeat = widths.iter().all(|&c| c == widths[0]);
            let hosts: Vec<Vec<u8>> = widths
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    let offset = r.random_range(0..3usize);
                    random(dtype, offset + rows * (c + 2), -4.0, 4.0, 45 + i as u64)
                })
                .collect();
            let srcs: Vec<_> = hosts.iter().map(|h| bytes_to_device(&d, h)).collect();
            let dst_len = 3 + rows * total;
            let dst = d.alloc(dst_len * w).unwrap();
            d.memset(&dst, 0, dst_len * w, 0x5a).unwrap();
            let mut want = vec![0x5a; dst_len * w];
            let mut parts = Vec::new();
            let mut col = 3;
            for (i, &c) in widths.iter().enumerate() {
                let src = if repeat { 0 } else { i };
                let src_offset = hosts[src].len() / w - rows * (c + 2);
                let block = Copy2d {
                    rows,
                    cols: c,
                    src_stride: c + 2,
                    dst_stride: total,
                    src_offset,
                    dst_offset: col,
                };
                for row in 0..rows {
                    let s = (src_offset + row * (c + 2)) * w;
                    let t = (col + row * total) * w;
                    want[t..t + c * w].copy_from_slice(&hosts[src][s..s + c * w]);
                }
                parts.push((&srcs[src], block));
                col += c;
            }
            ew::copy2d_many(&d, dtype, &dst, &parts).unwrap();
            assert!(download(&d, &dst) == want, "copy2d_many {dtype} {widths:?}");
            checked += 1;
        }
        // a block of other rows between two others
        let src_host = random(dtype, 64, -4.0, 4.0, 60);
        let src = bytes_to_device(&d, &src_host);
        let dst = d.alloc(64 * w).unwrap();
        d.memset(&dst, 0, 64 * w, 0).unwrap();
        let block = |rows, dst_offset| Copy2d {
            rows,
            cols: 4,
            src_stride: 4,
            dst_stride: 8,
            src_offset: 0,
            dst_offset,
        };
        let parts = [
            (&src, block(2, 0)),
            (&src, block(3, 20)),
            (&src, block(2, 4)),
        ];
        ew::copy2d_many(&d, dtype, &dst, &parts).unwrap();
        let mut want = vec![0u8; 64 * w];
        for (rows, off) in [(2, 0), (3, 20), (2, 4)] {
            for row in 0..rows {
                let t = (off + row * 8) * w;
                want[t..t + 4 * w].copy_from_slice(&src_host[row * 4 * w..(row + 1) * 4 * w]);
            }
        }
        assert!(
            download(&d, &dst) == want,
            "copy2d_many {dtype}, mixed rows"
        );
        checked += 1;
    }
    println!("copy2d_many: {checked} cats equal Candle's");
}

#[test]
fn rope_variants_match_candle_nn() {
    let d = device();
    let mut checked = 0;
    for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
        for (b, h, t, hd) in [
            (2usize, 3usize, 5usize, 8usize),
            (1, 1, 1, 2),
            (2, 4, 7, 64),
            (3, 2, 1, 16),
        ] {
            for batched in [false, true] {
                for variant in [
                    RopeVariant::Interleaved,
                    RopeVariant::Halves,
                    RopeVariant::Thd,
                ] {
                    let seq = t + 3;
                    let x_dims = if variant == RopeVariant::Thd {
                        [b, t, h, hd]
                    } else {
                        [b, h, t, hd]
                    };
                    let cs_dims: Vec<usize> = if batched {
                        vec![b, seq, hd / 2]
                    } else {
                        vec![seq, hd / 2]
                    };
                    let ncs: usize = cs_dims.iter().product();
                    let x = tensor(
                        &random(dtype, b * h * t * hd, -2.0, 2.0, 51),
                        dtype,
                        &x_dims,
                    );
                    let cos = tensor(&random(dtype, ncs, -1.0, 1.0, 52), dtype, &cs_dims);
                    let sin = tensor(&random(dtype, ncs, -1.0, 1.0, 53), dtype, &cs_dims);
                    let want = match variant {
                        RopeVariant::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin),
                        RopeVariant::Halves => candle_nn::rotary_emb::rope(&x, &cos, &sin),
                        RopeVariant::Thd => candle_nn::rotary_emb::rope_thd(&x, &cos, &sin),
                    }
                    .unwrap();
                    let (xb, cb, sb) = (upload(&d, &x), upload(&d, &cos), upload(&d, &sin));
                    let (xl, cl, sl) = (layout_of(&x), layout_of(&cos), layout_of(&sin));
                    let got = ew::rope(
                        &d,
                        variant,
                        O::new(&xb, dtype, &xl),
                        O::new(&cb, dtype, &cl),
                        O::new(&sb, dtype, &sl),
                    )
                    .unwrap();
                    compare(&download(&d, &got), &bytes_of(&want), dtype, 3.0).unwrap_or_else(
                        |e| panic!("{variant:?} {dtype} {x_dims:?} batched={batched}: {e}"),
                    );
                    checked += 1;
                }
            }
        }
    }
    println!("rope: {checked} cases equal candle-nn");
}

#[test]
fn bad_input_gives_typed_errors() {
    let d = device();
    let buf = d.alloc(16 * 4).unwrap();
    let l16 = Layout::contiguous(&[16]);
    // a layout reaching past its buffer
    let far = Layout::new(&[4, 4], &[8, 1], 0);
    let e = ew::unary(&d, UnaryOp::Exp, O::new(&buf, DType::F32, &far)).unwrap_err();
    assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
    // shapes that differ
    let l44 = Layout::contiguous(&[4, 4]);
    let e = ew::binary(
        &d,
        BinaryOp::Add,
        O::new(&buf, DType::F32, &l16),
        O::new(&buf, DType::F32, &l44),
    )
    .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // an op the dtype does not have
    let l8 = Layout::contiguous(&[8]);
    let e = ew::unary(&d, UnaryOp::Exp, O::new(&buf, DType::I64, &l8)).unwrap_err();
    assert!(
        e.to_string().contains("exp") && e.to_string().contains("i64"),
        "{e}"
    );
    // an output too small for in-place writing
    let e = ew::unary_into(&d, UnaryOp::Abs, O::new(&buf, DType::F32, &l16), &buf, 1).unwrap_err();
    assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
    // rope: odd head size, non-contiguous x, integer dtype
    let x = Layout::contiguous(&[1, 1, 2, 3]);
    let cs = Layout::contiguous(&[2, 1]);
    let r = |x: &Layout, dt| {
        let cs = O::new(&buf, dt, &cs);
        ew::rope(&d, RopeVariant::Halves, O::new(&buf, dt, x), cs, cs)
    };
    assert!(matches!(
        r(&x, DType::F32).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    let xt = Layout::new(&[1, 1, 2, 2], &[4, 4, 1, 2], 0);
    let cs2 = Layout::contiguous(&[2, 1]);
    let cs2 = O::new(&buf, DType::F32, &cs2);
    let e = ew::rope(
        &d,
        RopeVariant::Halves,
        O::new(&buf, DType::F32, &xt),
        cs2,
        cs2,
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidLayout(_)), "{e}");
    assert!(matches!(
        r(&x, DType::U32).unwrap_err(),
        Error::UnsupportedDType { .. }
    ));
    // copy2d beyond the destination
    let block = Copy2d {
        rows: 4,
        cols: 4,
        src_stride: 4,
        dst_stride: 5,
        src_offset: 0,
        dst_offset: 0,
    };
    let e = ew::copy2d(&d, DType::F32, &buf, &buf, &block).unwrap_err();
    assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
}

#[test]
fn in_place_forms_write_over_their_input() {
    let d = device();
    let xs: Vec<f32> = (0..1000).map(|i| i as f32 * 0.01 - 5.0).collect();
    let buf = d.htod(&xs).unwrap();
    let l = Layout::contiguous(&[1000]);
    let x = O::new(buf.as_buffer(), DType::F32, &l);
    ew::unary_into(&d, UnaryOp::Abs, x, buf.as_buffer(), 0).unwrap();
    ew::affine_into(&d, x, (2.0, 1.0), buf.as_buffer(), 0).unwrap();
    ew::binary_into(&d, BinaryOp::Mul, (x, x), buf.as_buffer(), 0).unwrap();
    let got = d.dtoh(&buf).unwrap();
    for (g, x) in got.iter().zip(&xs) {
        let want = (x.abs() * 2.0 + 1.0).powi(2);
        assert!((g - want).abs() <= 1e-5 * want, "{g} vs {want}");
    }
}

#[test]
fn more_than_2_pow_32_u8_elements() {
    let d = device();
    // A (2, 2^31 + 8) view transposed over 2^32 + 16 bytes: 64-bit index decoding.
    let cols = (1usize << 31) + 8;
    let n = 2 * cols;
    let (free, _) = d.memory_info().unwrap();
    if free < 2 * n + (256 << 20) {
        println!(
            "SKIPPED: needs {} bytes of free device memory, {free} free",
            2 * n
        );
        return;
    }
    // x[i] = i mod 251 via a cast of an affine of ... simpler: fill a pattern in chunks.
    let x = d.alloc(n).unwrap();
    let chunk: Vec<u8> = (0..(1usize << 24)).map(|i| (i % 251) as u8).collect();
    let mut off = 0;
    while off < n {
        let len = chunk.len().min(n - off);
        d.copy_htod(&chunk[..len], &x, off).unwrap();
        off += len;
    }
    let pattern = |i: usize| ((i % (1 << 24)) % 251) as u8;
    // contiguous: affine over all n elements
    let ln = Layout::contiguous(&[n]);
    let y = ew::affine(&d, O::new(&x, DType::U8, &ln), 3.0, 1.0).unwrap();
    // strided: the transpose of (cols, 2) viewed as (2, cols)
    let t = Layout::new(&[2, cols], &[1, 2], 0);
    let z = ew::unary(&d, UnaryOp::Relu, O::new(&x, DType::U8, &t)).unwrap();
    for i in [
        0usize,
        1,
        4095,
        (1 << 32) - 1,
        1 << 32,
        (1 << 32) + 7,
        n - 1,
    ] {
        let mut b = [0u8; 1];
        d.copy_dtoh(&y, i, &mut b).unwrap();
        assert_eq!(
            b[0],
            pattern(i).wrapping_mul(3).wrapping_add(1),
            "affine at {i}"
        );
        d.copy_dtoh(&z, i, &mut b).unwrap();
        let (row, col) = (i / cols, i % cols);
        assert_eq!(b[0], pattern(col * 2 + row), "transposed relu at {i}");
    }
    println!("2^32 + 16 u8 elements: contiguous and 64-bit strided paths correct at the ends");
}

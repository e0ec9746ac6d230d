//! GPU tests of flash attention against attention computed on the host in f64 from the same
//! (rounded) values: every feature (causal, sliding windows, ALiBi per head and per sequence,
//! softcap, grouped- and multi-query heads, variable lengths) for bf16, f16 and f32 at head dims
//! 32, 64, 80, 96, 128 and 256, query and key lengths from 1 to 1000, and a 4097-token causal
//! sequence; then every bad input as a typed error. The output is a weighted mean of v rows in
//! [-1, 1]: the bound is the output dtype's rounding plus f32's (absolute, 2e-5 for f32, 1e-3
//! for f16, 8e-3 for bf16).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cached;

use rocm_attention::{
    flash_attention, flash_attention_with, DType, Device, Error, FlashKernel, FlashOptions, Layout,
    Operand, VarLen,
};
use rocm_test_support::{device, download, random, values};

/// One attention problem: sequences of `lens_q` queries over `lens_k` keys (packed when
/// `varlen`, else all of one length), `heads` over `kv_heads`, `head_dim` wide.
#[derive(Debug, Clone)]
struct Case {
    lens_q: Vec<usize>,
    lens_k: Vec<usize>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    varlen: bool,
    causal: bool,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
    /// ALiBi slopes: none, one per head, or one per sequence and head.
    alibi: Alibi,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Alibi {
    None,
    PerHead,
    PerSequence,
}

fn case(lens: (&[usize], &[usize]), heads: (usize, usize), head_dim: usize) -> Case {
    Case {
        lens_q: lens.0.to_vec(),
        lens_k: lens.1.to_vec(),
        heads: heads.0,
        kv_heads: heads.1,
        head_dim,
        varlen: false,
        causal: false,
        window: (None, None),
        softcap: None,
        alibi: Alibi::None,
    }
}

fn slopes(c: &Case) -> Vec<f32> {
    let n = match c.alibi {
        Alibi::None => 0,
        Alibi::PerHead => c.heads,
        Alibi::PerSequence => c.heads * c.lens_q.len(),
    };
    (0..n).map(|i| 0.5f32.powi(1 + (i % 8) as i32)).collect()
}

/// The attention of the case in f64, `[tokens_q, heads, head_dim]`.
fn reference(c: &Case, scale: f32, (q, k, v): (&[f64], &[f64], &[f64])) -> Vec<f64> {
    let (h, kvh, d) = (c.heads, c.kv_heads, c.head_dim);
    let slopes = slopes(c);
    let mut out = vec![0.0; c.lens_q.iter().sum::<usize>() * h * d];
    let (mut q0, mut k0) = (0, 0);
    for (b, (&lq, &lk)) in c.lens_q.iter().zip(&c.lens_k).enumerate() {
        for i in 0..lq {
            let p = i as i64 + lk as i64 - lq as i64;
            for head in 0..h {
                let kv = head / (h / kvh);
                let qr = &q[((q0 + i) * h + head) * d..][..d];
                let mut scores = Vec::new();
                for j in 0..lk {
                    let (j64, left, right) = (j as i64, c.window.0, c.window.1);
                    let right = if c.causal { Some(0) } else { right };
                    if left.is_some_and(|w| j64 < p - w as i64)
                        || right.is_some_and(|w| j64 > p + w as i64)
                    {
                        continue;
                    }
                    let kr = &k[((k0 + j) * kvh + kv) * d..][..d];
                    let dot: f64 = qr.iter().zip(kr).map(|(a, b)| a * b).sum();
                    let mut s = dot * scale as f64;
                    if let Some(cap) = c.softcap {
                        s = cap as f64 * (s / cap as f64).tanh();
                    }
                    let slope = match c.alibi {
                        Alibi::None => 0.0,
                        Alibi::PerHead => slopes[head] as f64,
                        Alibi::PerSequence => slopes[b * h + head] as f64,
                    };
                    s -= slope * (p - j64).abs() as f64;
                    scores.push((j, s));
                }
                let m = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|s| (s.1 - m).exp()).sum();
                let o = &mut out[((q0 + i) * h + head) * d..][..d];
                for &(j, s) in &scores {
                    let w = (s - m).exp() / sum;
                    let vr = &v[((k0 + j) * kvh + kv) * d..][..d];
                    o.iter_mut().zip(vr).for_each(|(o, x)| *o += w * x);
                }
            }
        }
        q0 += lq;
        k0 += lk;
    }
    out
}

/// Runs the case on the device with each of `kernels`; the largest difference of each from the
/// reference (computed once).
fn run(d: &Device, c: &Case, dtype: DType, kernels: &[FlashKernel], seed: u64) -> Vec<f64> {
    let (tq, tk) = (
        c.lens_q.iter().sum::<usize>(),
        c.lens_k.iter().sum::<usize>(),
    );
    let (h, kvh, hd) = (c.heads, c.kv_heads, c.head_dim);
    let qb = random(dtype, tq * h * hd, -1.0, 1.0, seed);
    let kb = random(dtype, tk * kvh * hd, -1.0, 1.0, seed + 1);
    let vb = random(dtype, tk * kvh * hd, -1.0, 1.0, seed + 2);
    let scale = 1.0 / (hd as f32).sqrt() * if c.softcap.is_some() { 8.0 } else { 1.0 };
    let want = reference(
        c,
        scale,
        (
            &values(&qb, dtype),
            &values(&kb, dtype),
            &values(&vb, dtype),
        ),
    );
    let (qd, kd, vd) = (
        d.htod(&qb).unwrap(),
        d.htod(&kb).unwrap(),
        d.htod(&vb).unwrap(),
    );
    let batch = c.lens_q.len();
    let (ql, kl) = if c.varlen {
        (
            Layout::contiguous(&[tq, h, hd]),
            Layout::contiguous(&[tk, kvh, hd]),
        )
    } else {
        (
            Layout::contiguous(&[batch, c.lens_q[0], h, hd]),
            Layout::contiguous(&[batch, c.lens_k[0], kvh, hd]),
        )
    };
    let slopes = slopes(c);
    let sd = d.htod(&slopes).unwrap();
    let sl = match c.alibi {
        Alibi::PerSequence => Layout::contiguous(&[batch, h]),
        _ => Layout::contiguous(&[h]),
    };
    let cumulative = |lens: &[usize]| -> Vec<u32> {
        std::iter::once(0)
            .chain(lens.iter().scan(0u32, |s, &l| {
                *s += l as u32;
                Some(*s)
            }))
            .collect()
    };
    let (cq, ck) = (cumulative(&c.lens_q), cumulative(&c.lens_k));
    let (cqd, ckd) = (d.htod(&cq).unwrap(), d.htod(&ck).unwrap());
    let cl = Layout::contiguous(&[batch + 1]);
    let varlen = VarLen {
        cu_q: Operand::new(cqd.as_buffer(), DType::U32, &cl),
        cu_k: Operand::new(ckd.as_buffer(), DType::U32, &cl),
        max_q: *c.lens_q.iter().max().unwrap(),
        max_k: *c.lens_k.iter().max().unwrap(),
    };
    let options = FlashOptions {
        scale,
        causal: c.causal,
        window_left: c.window.0,
        window_right: c.window.1,
        softcap: c.softcap,
        alibi: (c.alibi != Alibi::None).then(|| Operand::new(sd.as_buffer(), DType::F32, &sl)),
    };
    let run_one = |kernel: FlashKernel| {
        let out = flash_attention_with(
            d,
            (
                Operand::new(qd.as_buffer(), dtype, &ql),
                Operand::new(kd.as_buffer(), dtype, &kl),
                Operand::new(vd.as_buffer(), dtype, &kl),
            ),
            &options,
            c.varlen.then_some(&varlen),
            kernel,
        )
        .unwrap_or_else(|e| panic!("{dtype} {kernel:?} {c:?}: {e}"));
        let got = values(&download(d, &out), dtype);
        got.iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0.0, f64::max)
    };
    kernels.iter().map(|&k| run_one(k)).collect()
}

fn bound(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2e-5,
        DType::F16 => 1e-3,
        _ => 8e-3,
    }
}

/// The kernels a dtype runs on here: the tiled form (bf16, f16, where the device has matrix
/// units) and the portable one.
fn kernels(d: &Device, dtype: DType) -> Vec<FlashKernel> {
    if dtype == DType::F32 {
        vec![FlashKernel::Portable]
    } else if d.info().matrix_units() {
        vec![FlashKernel::Tiled, FlashKernel::Portable]
    } else {
        println!(
            "{} has no matrix units: the tiled kernel is not run",
            d.info().arch
        );
        vec![FlashKernel::Portable]
    }
}

#[test]
fn flash_attention_matches_attention_in_f64_for_every_feature() {
    let d = device();
    let mut checked = 0;
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let kernels = kernels(&d, dtype);
        let mut worst = vec![0f64; kernels.len()];
        {
            for hd in [32, 64, 80, 96, 128, 256] {
                let causal = |c: Case| Case { causal: true, ..c };
                let cases = [
                    ("plain", case((&[7, 7], &[128, 128]), (8, 8), hd)),
                    ("causal, GQA 4", causal(case((&[128], &[128]), (8, 2), hd))),
                    (
                        "causal, fewer queries than keys, MQA",
                        causal(case((&[7; 3], &[1000; 3]), (8, 1), hd)),
                    ),
                    (
                        "sliding window 16 left, 4 right",
                        Case {
                            window: (Some(16), Some(4)),
                            ..case((&[128], &[128]), (4, 1), hd)
                        },
                    ),
                    (
                        "ALiBi per head, causal",
                        Case {
                            alibi: Alibi::PerHead,
                            ..causal(case((&[7, 7], &[7, 7]), (4, 4), hd))
                        },
                    ),
                    (
                        "softcap, one query",
                        Case {
                            softcap: Some(30.0),
                            ..case((&[1], &[1000]), (8, 8), hd)
                        },
                    ),
                    (
                        "variable lengths, causal, window, ALiBi per sequence",
                        Case {
                            varlen: true,
                            window: (Some(64), None),
                            alibi: Alibi::PerSequence,
                            ..causal(case((&[1, 7, 128], &[7, 7, 1000]), (8, 2), hd))
                        },
                    ),
                    (
                        "variable lengths, an empty sequence, right window past the keys",
                        Case {
                            varlen: true,
                            window: (None, Some(3)),
                            ..case((&[5, 0, 9], &[3, 4, 20]), (4, 4), hd)
                        },
                    ),
                    (
                        "more queries than keys, window both sides, softcap",
                        Case {
                            window: (Some(40), Some(40)),
                            softcap: Some(20.0),
                            ..case((&[200, 200], &[130, 130]), (4, 2), hd)
                        },
                    ),
                ];
                for (n, (what, c)) in cases.into_iter().enumerate() {
                    let errs = run(&d, &c, dtype, &kernels, 100 + n as u64);
                    for ((kernel, err), worst) in kernels.iter().zip(errs).zip(&mut worst) {
                        *worst = worst.max(err);
                        assert!(
                            err <= bound(dtype),
                            "{dtype} {kernel:?} head_dim {hd}, {what}: largest difference {err:e} (bound {:e})",
                            bound(dtype)
                        );
                        checked += 1;
                    }
                }
            }
        }
        for (kernel, worst) in kernels.iter().zip(&worst) {
            println!(
                "{dtype} {kernel:?}: largest difference {worst:e} (bound {:e})",
                bound(dtype)
            );
        }
    }
    // a long causal sequence, each 16-bit dtype on each kernel
    let long = Case {
        causal: true,
        ..case((&[4097], &[4097]), (4, 1), 128)
    };
    for dtype in [DType::BF16, DType::F16] {
        let kernels = kernels(&d, dtype);
        for (kernel, err) in kernels.iter().zip(run(&d, &long, dtype, &kernels, 7)) {
            assert!(
                err <= bound(dtype),
                "4097 tokens, {dtype} {kernel:?}: {err:e}"
            );
            println!("4097 tokens, {dtype} {kernel:?}: largest difference {err:e}");
            checked += 1;
        }
    }
    println!("flash_attention: {checked} cases within the bounds");
}

#[test]
fn flash_attention_rejects_bad_input_with_typed_errors() {
    let d = device();
    let buf = d.alloc(1 << 16).unwrap();
    let cu = d.htod(&[0u32, 3, 2]).unwrap();
    let slopes = d.htod(&[0.5f32; 8]).unwrap();
    let l = |dims: &[usize]| Layout::contiguous(dims);
    let (q4, k4) = (l(&[1, 4, 8, 32]), l(&[1, 4, 2, 32]));
    let call =
        |q: (DType, &Layout), k: (DType, &Layout), v: (DType, &Layout), o: &FlashOptions<'_>| {
            flash_attention(
                &d,
                (
                    Operand::new(&buf, q.0, q.1),
                    Operand::new(&buf, k.0, k.1),
                    Operand::new(&buf, v.0, v.1),
                ),
                o,
                None,
            )
        };
    let plain = FlashOptions::new(0.1);
    let f = DType::F32;
    assert!(call((f, &q4), (f, &k4), (f, &k4), &plain).is_ok());
    // (what, its error, the error's kind)
    let cases: Vec<(&str, Error, &str)> = vec![
        (
            "f64",
            call(
                (DType::F64, &q4),
                (DType::F64, &k4),
                (DType::F64, &k4),
                &plain,
            )
            .unwrap_err(),
            "dtype",
        ),
        (
            "k of another dtype",
            call((f, &q4), (DType::F16, &k4), (f, &k4), &plain).unwrap_err(),
            "dtypes",
        ),
        (
            "head_dim 300",
            call(
                (f, &l(&[1, 2, 2, 300])),
                (f, &l(&[1, 2, 2, 300])),
                (f, &l(&[1, 2, 2, 300])),
                &plain,
            )
            .unwrap_err(),
            "shape",
        ),
        (
            "8 heads over 3",
            call(
                (f, &q4),
                (f, &l(&[1, 4, 3, 32])),
                (f, &l(&[1, 4, 3, 32])),
                &plain,
            )
            .unwrap_err(),
            "shape",
        ),
        (
            "v unlike k",
            call((f, &q4), (f, &k4), (f, &l(&[1, 5, 2, 32])), &plain).unwrap_err(),
            "shape",
        ),
        (
            "another batch",
            call(
                (f, &q4),
                (f, &l(&[2, 4, 2, 32])),
                (f, &l(&[2, 4, 2, 32])),
                &plain,
            )
            .unwrap_err(),
            "shape",
        ),
        (
            "a negative softcap",
            call(
                (f, &q4),
                (f, &k4),
                (f, &k4),
                &FlashOptions {
                    softcap: Some(-1.0),
                    ..plain
                },
            )
            .unwrap_err(),
            "argument",
        ),
        (
            "a scale of NaN",
            call((f, &q4), (f, &k4), (f, &k4), &FlashOptions::new(f32::NAN)).unwrap_err(),
            "argument",
        ),
        (
            "ALiBi slopes of 7 heads",
            call(
                (f, &q4),
                (f, &k4),
                (f, &k4),
                &FlashOptions {
                    alibi: Some(Operand::new(slopes.as_buffer(), f, &l(&[7]))),
                    ..plain
                },
            )
            .unwrap_err(),
            "shape",
        ),
    ];
    let tiled_f32 = flash_attention_with(
        &d,
        (
            Operand::new(&buf, f, &q4),
            Operand::new(&buf, f, &k4),
            Operand::new(&buf, f, &k4),
        ),
        &plain,
        None,
        FlashKernel::Tiled,
    );
    let mut cases = cases;
    cases.push((
        "the tiled kernel on f32",
        tiled_f32.unwrap_err(),
        "argument",
    ));
    for (what, e, want) in &cases {
        let kind = match e {
            Error::UnsupportedDType { .. } => "dtype",
            Error::DTypeMismatch { .. } => "dtypes",
            Error::ShapeMismatch { .. } => "shape",
            Error::InvalidArgument { .. } => "argument",
            _ => "other",
        };
        assert_eq!(kind, *want, "{what}: {e}");
    }
    // cumulative lengths that fall, or end short of the rows: checked before the launch
    let cl = l(&[3]);
    let varlen = |max: usize| VarLen {
        cu_q: Operand::new(cu.as_buffer(), DType::U32, &cl),
        cu_k: Operand::new(cu.as_buffer(), DType::U32, &cl),
        max_q: max,
        max_k: max,
    };
    let (qv, kv) = (l(&[2, 8, 32]), l(&[2, 2, 32]));
    let e = flash_attention(
        &d,
        (
            Operand::new(&buf, f, &qv),
            Operand::new(&buf, f, &kv),
            Operand::new(&buf, f, &kv),
        ),
        &plain,
        Some(&varlen(8)),
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("cu_seqlens_q"),
        "{e}"
    );
    println!("flash_attention: {} bad inputs rejected", cases.len() + 1);
}

//! Reliability through Candle's API on `Device::Rocm` (GPU tests):
//! - bad input: every case runs on the CPU and on the GPU; the GPU must give the CPU's result
//!   or, where the CPU refuses, a typed error; never a panic, an abort or a device fault;
//! - soak: 100k mixed ops in 8 threads on one device, a sample checked against the CPU, and
//!   device memory back at its baseline after every round.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::panic::{catch_unwind, AssertUnwindSafe};

use candle_core::{DType, Device, IndexOp, Result, Tensor, D};
use candle_rocm_e2e::SplitMix64;

/// Values as f64 (f8e4m3 through f32: Candle 0.11.1's direct f8 -> f64 never returns).
fn values(t: &Tensor) -> Vec<f64> {
    let t = t.to_device(&Device::Cpu).unwrap();
    let t = if t.dtype() == DType::F8E4M3 {
        t.to_dtype(DType::F32).unwrap()
    } else {
        t
    };
    t.to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F64 => 1e-12,
        DType::BF16 => 1e-2,
        DType::F16 => 2e-3,
        DType::F8E4M3 => 0.13,
        _ => 0.0,
    }
}

/// None when `got` matches `want` (shape, dtype, values within the dtype's rounding).
fn mismatch(want: &Tensor, got: &Tensor) -> Option<String> {
    if want.dims() != got.dims() || want.dtype() != got.dtype() {
        return Some(format!(
            "{:?} {:?} vs the CPU's {:?} {:?}",
            got.dims(),
            got.dtype(),
            want.dims(),
            want.dtype()
        ));
    }
    let tol = tolerance(want.dtype());
    let (w, g) = (values(want), values(got));
    let scale = w
        .iter()
        .fold(1f64, |m, v| if v.is_finite() { m.max(v.abs()) } else { m });
    w.iter().zip(&g).enumerate().find_map(|(i, (a, b))| {
        let same = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * scale;
        (!same).then(|| format!("element {i}: {b} vs the CPU's {a}"))
    })
}

/// What the GPU must do with a case.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// The CPU's result, or an error where the CPU errs (or panics).
    LikeCpu,
    /// A typed error, whatever the CPU does.
    Error,
    /// The GPU computes what the CPU refuses (documented supersets): a result, no panic.
    Computes,
}

/// Cases the GPU computes and Candle 0.11.1's CPU refuses (candle-rocm's GPU tests check
/// their values against higher-precision references).
const SUPERSETS: [&str; 2] = ["conv2d BF16", "rms_norm F64"];

#[derive(Default)]
struct Tally {
    tried: usize,
    held: usize,
    failures: Vec<String>,
}

type Case<'a> = (String, Expect, Box<dyn Fn(&Device) -> Result<Tensor> + 'a>);

impl Tally {
    fn run(&mut self, gpu: &Device, (name, expect, op): Case<'_>) {
        self.tried += 1;
        let cpu = if expect == Expect::LikeCpu {
            Some(catch_unwind(AssertUnwindSafe(|| op(&Device::Cpu))))
        } else {
            None
        };
        let got = catch_unwind(AssertUnwindSafe(|| {
            op(gpu).and_then(|t| t.to_device(&Device::Cpu))
        }));
        let verdict: std::result::Result<(), String> = match (expect, cpu, got) {
            (_, _, Err(_)) => Err("the GPU path panicked".into()),
            (Expect::Error, _, Ok(Err(_))) => Ok(()),
            (Expect::Error, _, Ok(Ok(t))) => Err(format!("expected an error, got {:?}", t.dims())),
            (Expect::Computes, _, Ok(Ok(_))) => Ok(()),
            (Expect::Computes, _, Ok(Err(e))) => Err(format!("expected a result: {e}")),
            (Expect::LikeCpu, Some(Ok(Ok(want))), Ok(Ok(t))) => match mismatch(&want, &t) {
                None => Ok(()),
                Some(m) => Err(m),
            },
            (Expect::LikeCpu, Some(Ok(Ok(_))), Ok(Err(e))) => {
                Err(format!("the CPU computes it, the GPU errs: {e}"))
            }
            (Expect::LikeCpu, Some(Ok(Err(_))), Ok(Err(_))) => Ok(()),
            (Expect::LikeCpu, Some(Ok(Err(e))), Ok(Ok(_))) => {
                if SUPERSETS.contains(&name.as_str()) {
                    Ok(())
                } else {
                    Err(format!("the CPU errs ({e}), the GPU computes"))
                }
            }
            // the CPU panicked (a Candle 0.11.1 CPU bug): the GPU answered without panicking
            (Expect::LikeCpu, Some(Err(_)), Ok(_)) => Ok(()),
            (Expect::LikeCpu, None, _) => unreachable!(),
        };
        match verdict {
            Ok(()) => self.held += 1,
            Err(why) => self.failures.push(format!("{name}: {why}")),
        }
    }
}

fn t(dims: &[usize], dtype: DType, dev: &Device) -> Result<Tensor> {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) / 4.0)
        .collect();
    Tensor::from_vec(v, dims, dev)?.to_dtype(dtype)
}

fn ids(v: &[i64], dtype: DType, dev: &Device) -> Result<Tensor> {
    Tensor::new(v, dev)?.to_dtype(dtype)
}

const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];
const ALL: [DType; 10] = [
    DType::U8,
    DType::U32,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::BF16,
    DType::F16,
    DType::F32,
    DType::F64,
    DType::F8E4M3,
];

fn case<'a>(name: String, expect: Expect, op: impl Fn(&Device) -> Result<Tensor> + 'a) -> Case<'a> {
    (name, expect, Box::new(op))
}

fn cases() -> Vec<Case<'static>> {
    use Expect::*;
    let mut c: Vec<Case> = Vec::new();
    type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let binaries: [(&str, Bin, Bin); 6] = [
        ("add", |a, b| a.add(b), |a, b| a.broadcast_add(b)),
        ("sub", |a, b| a.sub(b), |a, b| a.broadcast_sub(b)),
        ("mul", |a, b| a.mul(b), |a, b| a.broadcast_mul(b)),
        ("div", |a, b| a.div(b), |a, b| a.broadcast_div(b)),
        (
            "maximum",
            |a, b| a.maximum(b),
            |a, b| a.broadcast_maximum(b),
        ),
        (
            "minimum",
            |a, b| a.minimum(b),
            |a, b| a.broadcast_minimum(b),
        ),
    ];
    let shape_pairs: [(&[usize], &[usize]); 10] = [
        (&[2, 3], &[3, 2]),
        (&[2, 3], &[2, 3, 1]),
        (&[4], &[5]),
        (&[1, 3], &[2, 1]),
        (&[2, 3], &[3]),
        (&[2, 3], &[2]),
        (&[0, 3], &[1, 3]),
        (&[2, 0], &[2, 1]),
        (&[3, 1, 4], &[2, 4]),
        (&[0], &[0]),
    ];
    for (name, op, bop) in binaries {
        for (a, b) in shape_pairs {
            c.push(case(format!("{name} {a:?} {b:?}"), LikeCpu, move |d| {
                op(&t(a, DType::F32, d)?, &t(b, DType::F32, d)?)
            }));
            c.push(case(
                format!("broadcast_{name} {a:?} {b:?}"),
                LikeCpu,
                move |d| bop(&t(a, DType::F32, d)?, &t(b, DType::F32, d)?),
            ));
        }
        for (x, y) in [
            (DType::F32, DType::F16),
            (DType::F32, DType::U32),
            (DType::I64, DType::I32),
            (DType::BF16, DType::F8E4M3),
        ] {
            c.push(case(
                format!("{name} {x:?} with {y:?}"),
                LikeCpu,
                move |d| op(&t(&[2, 3], x, d)?, &t(&[2, 3], y, d)?),
            ));
        }
    }
    for dtype in ALL {
        c.push(case(format!("eq {dtype:?} vs f32"), LikeCpu, move |d| {
            t(&[2, 3], dtype, d)?.eq(&t(&[2, 3], DType::F32, d)?)
        }));
        c.push(case(format!("lt shapes {dtype:?}"), LikeCpu, move |d| {
            t(&[2, 3], dtype, d)?.lt(&t(&[3, 2], dtype, d)?)
        }));
        // where_cond: mask dtype, branch dtypes, shapes
        c.push(case(
            format!("where_cond mask {dtype:?}"),
            LikeCpu,
            move |d| {
                t(&[2, 3], dtype, d)?
                    .where_cond(&t(&[2, 3], DType::F32, d)?, &t(&[2, 3], DType::F32, d)?)
            },
        ));
        c.push(case(
            format!("where_cond branches f32/{dtype:?}"),
            LikeCpu,
            move |d| {
                t(&[2, 3], DType::U8, d)?
                    .where_cond(&t(&[2, 3], DType::F32, d)?, &t(&[2, 3], dtype, d)?)
            },
        ));
        // unary ops and reductions on every dtype (the CPU panics on some integer unary ops)
        for (uname, u) in [
            ("exp", Tensor::exp as fn(&Tensor) -> Result<Tensor>),
            ("sqrt", Tensor::sqrt),
            ("neg", Tensor::neg),
            ("abs", Tensor::abs),
            ("gelu", Tensor::gelu),
            ("relu", Tensor::relu),
        ] {
            c.push(case(format!("{uname} {dtype:?}"), LikeCpu, move |d| {
                u(&t(&[3, 5], dtype, d)?)
            }));
        }
        c.push(case(
            format!("sum over dim 5 of rank 2 {dtype:?}"),
            LikeCpu,
            move |d| t(&[2, 3], dtype, d)?.sum(5),
        ));
        c.push(case(
            format!("max of an empty dim {dtype:?}"),
            LikeCpu,
            move |d| t(&[2, 0], dtype, d)?.max(1),
        ));
        c.push(case(
            format!("argmin of an empty tensor {dtype:?}"),
            LikeCpu,
            move |d| t(&[0], dtype, d)?.argmin(0),
        ));
        c.push(case(
            format!("sum of an empty dim {dtype:?}"),
            LikeCpu,
            move |d| t(&[3, 0], dtype, d)?.sum(1),
        ));
        c.push(case(format!("softmax {dtype:?}"), LikeCpu, move |d| {
            candle_nn::ops::softmax_last_dim(&t(&[2, 7], dtype, d)?)
        }));
        c.push(case(format!("rms_norm {dtype:?}"), LikeCpu, move |d| {
            candle_nn::ops::rms_norm(&t(&[2, 8], dtype, d)?, &t(&[8], dtype, d)?, 1e-5)
        }));
        c.push(case(format!("matmul {dtype:?}"), LikeCpu, move |d| {
            t(&[2, 3], dtype, d)?.matmul(&t(&[3, 4], dtype, d)?)
        }));
        c.push(case(format!("conv2d {dtype:?}"), LikeCpu, move |d| {
            t(&[1, 2, 5, 5], dtype, d)?.conv2d(&t(&[3, 2, 3, 3], dtype, d)?, 0, 1, 1, 1)
        }));
        for ids_dtype in [DType::U8, DType::U32, DType::I64, DType::F32] {
            c.push(case(
                format!("index_select {dtype:?} by {ids_dtype:?}"),
                LikeCpu,
                move |d| t(&[4, 3], dtype, d)?.index_select(&ids(&[3, 0, 2], ids_dtype, d)?, 0),
            ));
        }
    }
    // matmul shapes and dtypes
    let mm: [(&[usize], &[usize]); 8] = [
        (&[2, 3], &[4, 5]),
        (&[2, 3, 4], &[3, 4, 5]),
        (&[0, 3], &[3, 4]),
        (&[2, 0], &[0, 3]),
        (&[3], &[3]),
        (&[2, 3, 4], &[4, 5]),
        (&[1, 1, 3], &[1, 3, 2]),
        (&[5, 1], &[1, 5]),
    ];
    for (a, b) in mm {
        c.push(case(format!("matmul {a:?} x {b:?}"), LikeCpu, move |d| {
            t(a, DType::F32, d)?.matmul(&t(b, DType::F32, d)?)
        }));
        c.push(case(
            format!("broadcast_matmul {a:?} x {b:?}"),
            LikeCpu,
            move |d| t(a, DType::F32, d)?.broadcast_matmul(&t(b, DType::F32, d)?),
        ));
    }
    c.push(case("matmul f32 x f16".into(), LikeCpu, |d| {
        t(&[2, 3], DType::F32, d)?.matmul(&t(&[3, 4], DType::F16, d)?)
    }));
    // convolutions and pooling
    let convs: [(&str, &[usize], &[usize]); 5] = [
        ("channels differ", &[1, 3, 8, 8], &[4, 2, 3, 3]),
        ("kernel larger than input", &[1, 1, 2, 2], &[1, 1, 3, 3]),
        ("rank 3 input", &[3, 8, 8], &[4, 3, 3, 3]),
        ("empty batch", &[0, 3, 8, 8], &[4, 3, 3, 3]),
        ("1x1", &[2, 3, 4, 4], &[5, 3, 1, 1]),
    ];
    for (what, x, k) in convs {
        c.push(case(format!("conv2d {what}"), LikeCpu, move |d| {
            t(x, DType::F32, d)?.conv2d(&t(k, DType::F32, d)?, 0, 1, 1, 1)
        }));
    }
    c.push(case("conv2d f32 input, f16 kernel".into(), LikeCpu, |d| {
        t(&[1, 2, 5, 5], DType::F32, d)?.conv2d(&t(&[3, 2, 3, 3], DType::F16, d)?, 0, 1, 1, 1)
    }));
    c.push(case("conv1d channels differ".into(), LikeCpu, |d| {
        t(&[1, 3, 9], DType::F32, d)?.conv1d(&t(&[4, 2, 3], DType::F32, d)?, 0, 1, 1, 1)
    }));
    c.push(case(
        "conv_transpose2d channels differ".into(),
        LikeCpu,
        |d| {
            t(&[1, 3, 5, 5], DType::F32, d)?.conv_transpose2d(
                &t(&[2, 4, 3, 3], DType::F32, d)?,
                0,
                0,
                1,
                1,
            )
        },
    ));
    for dtype in FLOATS {
        c.push(case(
            format!("max_pool2d window larger than input {dtype:?}"),
            LikeCpu,
            move |d| t(&[1, 1, 2, 2], dtype, d)?.max_pool2d(3),
        ));
        c.push(case(format!("avg_pool2d {dtype:?}"), LikeCpu, move |d| {
            t(&[1, 2, 6, 6], dtype, d)?.avg_pool2d(2)
        }));
    }
    // indexing: ranks, dims, dtypes, masked ids
    c.push(case("gather dim out of range".into(), LikeCpu, |d| {
        t(&[3, 4], DType::F32, d)?.gather(&ids(&[0, 1, 2], DType::U32, d)?.reshape((3, 1))?, 2)
    }));
    c.push(case("gather ids of another rank".into(), LikeCpu, |d| {
        t(&[3, 4], DType::F32, d)?.gather(&ids(&[0, 1, 2], DType::U32, d)?, 1)
    }));
    c.push(case("index_select ids of rank 2".into(), LikeCpu, |d| {
        t(&[3, 4], DType::F32, d)?.index_select(&ids(&[0, 1], DType::U32, d)?.reshape((1, 2))?, 0)
    }));
    c.push(case("scatter_add shapes differ".into(), LikeCpu, |d| {
        t(&[3, 4], DType::F32, d)?.scatter_add(
            &ids(&[0, 1, 2], DType::U32, d)?.reshape((3, 1))?,
            &t(&[2, 1], DType::F32, d)?,
            1,
        )
    }));
    c.push(case(
        "index_add source dtype differs".into(),
        LikeCpu,
        |d| {
            t(&[3, 4], DType::F32, d)?.index_add(
                &ids(&[0, 2], DType::U32, d)?,
                &t(&[2, 4], DType::F16, d)?,
                0,
            )
        },
    ));
    for (dtype, masked) in [(DType::U32, u32::MAX as i64), (DType::I64, i64::MAX)] {
        // a masked id gives a zero row, as on the CPU
        c.push(case(
            format!("index_select masked {dtype:?} id"),
            LikeCpu,
            move |d| t(&[4, 3], DType::F32, d)?.index_select(&ids(&[1, masked, 3], dtype, d)?, 0),
        ));
    }
    // Candle-level checks, run before any backend: kept as regressions of the wiring
    c.push(case("narrow past the end".into(), LikeCpu, |d| {
        t(&[4, 3], DType::F32, d)?.narrow(0, 3, 2)
    }));
    c.push(case("reshape to another count".into(), LikeCpu, |d| {
        t(&[4, 3], DType::F32, d)?.reshape((5, 2))
    }));
    c.push(case("transpose a missing dim".into(), LikeCpu, |d| {
        t(&[4, 3], DType::F32, d)?.transpose(0, 2)
    }));
    c.push(case("cat of different dtypes".into(), LikeCpu, |d| {
        Tensor::cat(
            &[&t(&[2, 3], DType::F32, d)?, &t(&[2, 3], DType::F16, d)?],
            0,
        )
    }));
    c.push(case("cat of different shapes".into(), LikeCpu, |d| {
        Tensor::cat(
            &[&t(&[2, 3], DType::F32, d)?, &t(&[2, 4], DType::F32, d)?],
            0,
        )
    }));
    c.push(case("i() out of range".into(), LikeCpu, |d| {
        t(&[4, 3], DType::F32, d)?.i(7)
    }));
    c.push(case("log_softmax on the last dim".into(), LikeCpu, |d| {
        candle_nn::ops::log_softmax(&t(&[3, 5], DType::F32, d)?, D::Minus1)
    }));
    // more memory than the device has: a typed error (the CPU is not asked)
    c.push(case("zeros of 2^38 f32 (1 TiB)".into(), Error, |d| {
        Tensor::zeros(1usize << 38, DType::F32, d)
    }));
    c.push(case("matmul whose output needs 4 TiB".into(), Error, |d| {
        let a = Tensor::zeros((1 << 20, 1), DType::F32, d)?;
        let b = Tensor::zeros((1, 1 << 20), DType::F32, d)?;
        a.matmul(&b)
    }));
    c
}

#[test]
fn bad_input_gives_the_cpus_result_or_a_typed_error() {
    let gpu = Device::new_rocm(0).unwrap();
    let mut tally = Tally::default();
    for c in cases() {
        tally.run(&gpu, c);
    }
    // Out-of-range ids: masked (zero rows) by default, a typed error when checked.
    let oob =
        |d: &Device| t(&[4, 3], DType::F32, d)?.index_select(&ids(&[1, 9, 3], DType::U32, d)?, 0);
    tally.run(
        &gpu,
        case(
            "index_select id 9 of 4, unchecked".into(),
            Expect::Computes,
            oob,
        ),
    );
    let gather_oob = |d: &Device| {
        t(&[3, 4], DType::F32, d)?.gather(&ids(&[0, 7, 1], DType::I64, d)?.reshape((3, 1))?, 1)
    };
    tally.run(
        &gpu,
        case(
            "gather id 7 of 4, unchecked".into(),
            Expect::Computes,
            gather_oob,
        ),
    );
    let options = candle_rocm::Options {
        index: candle_rocm::IndexOptions {
            check_indices: true,
            ..candle_rocm::IndexOptions::global()
        },
        ..candle_rocm::Options::global()
    };
    let config = candle_rocm::Config::from_env().unwrap();
    let checked = Device::Rocm(candle_core::RocmDevice::with_options(0, config, options).unwrap());
    tally.run(
        &checked,
        case("index_select id 9 of 4, checked".into(), Expect::Error, oob),
    );
    tally.run(
        &checked,
        case(
            "gather id 7 of 4, checked".into(),
            Expect::Error,
            gather_oob,
        ),
    );
    // After all of it the device still computes.
    let x = Tensor::arange(0f32, 10., &gpu).unwrap();
    assert_eq!(x.sum_all().unwrap().to_scalar::<f32>().unwrap(), 45.0);
    println!(
        "bad input: {} cases tried, {} held",
        tally.tried, tally.held
    );
    assert!(tally.failures.is_empty(), "{}", tally.failures.join("\n"));
}

#[test]
fn more_than_2_pow_32_elements() {
    let gpu = Device::new_rocm(0).unwrap();
    let n = (1usize << 32) + 16;
    let x = Tensor::ones(n, DType::U8, &gpu).unwrap();
    // u8 sums wrap, as on the CPU: (2^32 + 16) mod 256
    assert_eq!(x.sum_all().unwrap().to_scalar::<u8>().unwrap(), 16);
    let tail = x.narrow(0, 1 << 32, 16).unwrap().affine(3.0, 1.0).unwrap();
    assert_eq!(tail.to_vec1::<u8>().unwrap(), vec![4u8; 16]);
    let y = (x.narrow(0, n - 8, 8).unwrap() + 1.0f64).unwrap();
    assert_eq!(y.to_vec1::<u8>().unwrap(), vec![2u8; 8]);
}

/// One random op on `dev`; the same draws give the same op on any device. As a `reference`
/// the op computes in f32 from the same (rounded) inputs and rounds once at the end, so the
/// comparison measures the GPU, not the CPU's 16-bit arithmetic.
fn soak_op(s: &mut SplitMix64, dev: &Device, reference: bool) -> Result<Tensor> {
    let dtype = [DType::F32, DType::F16, DType::BF16][s.below(3)];
    let (m, n, k) = (1 + s.below(48), 1 + s.below(48), 1 + s.below(48));
    let seed = s.next_u64();
    let x = |dims: &[usize]| -> Result<Tensor> {
        let count: usize = dims.iter().product();
        let v: Vec<f32> = (0..count)
            .map(|i| {
                (((i as u64 ^ seed).wrapping_mul(0x9e37_79b9) >> 7) % 2001) as f32 / 1000.0 - 1.0
            })
            .collect();
        let rounded = Tensor::from_vec(v, dims, dev)?.to_dtype(dtype)?;
        if reference {
            rounded.to_dtype(DType::F32)
        } else {
            Ok(rounded)
        }
    };
    let op = s.below(12);
    let out = match op {
        0 => (x(&[m, n])? + x(&[m, n])?)?,
        1 => x(&[m, n])?.broadcast_mul(&x(&[1, n])?)?,
        2 => x(&[m, n])?.exp()?,
        3 => x(&[m, n])?.sum_keepdim(1)?,
        4 => x(&[m, k])?.matmul(&x(&[k, n])?)?,
        5 => candle_nn::ops::softmax_last_dim(&x(&[m, n])?)?,
        6 => x(&[m, n])?.to_dtype(DType::F32)?,
        7 => x(&[m, n])?.t()?.contiguous()?,
        8 => x(&[m, n])?.index_select(&Tensor::new(&[0u32, (m - 1) as u32], dev)?, 0)?,
        9 => Tensor::cat(&[&x(&[m, n])?, &x(&[k, n])?], 0)?,
        10 => x(&[m, n])?.max_keepdim(1)?,
        _ => candle_nn::ops::rms_norm(&x(&[m, n])?, &x(&[n])?, 1e-5)?,
    };
    // op 6 is the cast to f32 itself
    if reference && op != 6 {
        out.to_dtype(dtype)
    } else {
        Ok(out)
    }
}

#[test]
fn soak_100k_mixed_ops_in_8_threads() {
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 5;
    const OPS_PER_THREAD_ROUND: u64 = 2_500; // 8 x 5 x 2,500 = 100,000 ops
    const CHECK_EVERY: u64 = 50;
    let gpu = Device::new_rocm(0).unwrap();
    let stats = || gpu.as_rocm_device().unwrap().inner().memory_stats();
    let baseline = stats().in_use_bytes;
    let mut cached_after_round = Vec::new();
    let mut checked = 0u64;
    let started = std::time::Instant::now();
    for round in 0..ROUNDS {
        let results: Vec<(u64, Vec<String>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|thread| {
                    let gpu = gpu.clone();
                    scope.spawn(move || {
                        let mut s = SplitMix64(round * 1_000_003 + thread * 7_919 + 1);
                        let (mut checked, mut bad) = (0u64, Vec::new());
                        for i in 0..OPS_PER_THREAD_ROUND {
                            let before = s.0;
                            let got = soak_op(&mut s, &gpu, false).unwrap();
                            if i % CHECK_EVERY == 0 {
                                let want =
                                    soak_op(&mut SplitMix64(before), &Device::Cpu, true).unwrap();
                                checked += 1;
                                if let Some(m) = mismatch(&want, &got) {
                                    bad.push(format!("round {round} thread {thread} op {i}: {m}"));
                                }
                            }
                        }
                        (checked, bad)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (c, bad) in results {
            checked += c;
            assert!(bad.is_empty(), "{}", bad.join("\n"));
        }
        gpu.synchronize().unwrap();
        let s = stats();
        assert_eq!(
            s.in_use_bytes, baseline,
            "round {round}: memory in use did not return"
        );
        cached_after_round.push(s.cached_bytes);
    }
    // The pool's cache stays bounded: no growth after the first round's working set.
    let first = cached_after_round[0];
    assert!(
        cached_after_round
            .iter()
            .all(|&c| c <= first.max(64 << 20) * 2),
        "cached bytes per round: {cached_after_round:?}"
    );
    let released = gpu.as_rocm_device().unwrap().inner().empty_cache().unwrap();
    let end = stats();
    assert_eq!((end.in_use_bytes, end.cached_bytes), (baseline, 0));
    println!(
        "soak: {} ops in {THREADS} threads, {ROUNDS} rounds, {:.1} s; {checked} checked against \
         the CPU; cached bytes per round {cached_after_round:?}; empty_cache released {released} B; \
         peak in use {} B",
        THREADS * ROUNDS * OPS_PER_THREAD_ROUND,
        started.elapsed().as_secs_f64(),
        end.peak_in_use_bytes
    );
}

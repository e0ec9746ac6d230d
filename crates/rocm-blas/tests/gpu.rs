//! GPU tests of rocm-blas against an f64 host reference: the four transpose combinations,
//! batch 1 and many, broadcast batch, start offsets, layouts that need a copy, m/n/k from 1 to
//! 4096, zero-size dims, every dtype; the same cases again on the portable gemm kernel (the
//! path of a device without a vendor BLAS). An element passes when |got - want| <= tol * sum|a||b|
//! (the scale of the dot product): tol = 1e-12 (f64), 2e-4 (f32, f32 accumulation over up to
//! 4096 terms), 1.5e-3 (f16 output rounding), 1e-2 (bf16 output rounding).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use rocm_blas::{Blas, MatmulShape, Operand as View};
use rocm_device::{Buffer, DType, Device, Error, Layout};

fn blas() -> &'static Blas {
    static BLAS: OnceLock<Blas> = OnceLock::new();
    BLAS.get_or_init(|| {
        let d = Device::new(0).expect("a GPU (set CANDLE_ROCM_PLATFORM)");
        Blas::new(&d).expect("the platform's BLAS")
    })
}

/// Values rounded to `dtype`, as f64, and their device bytes.
fn encode(dtype: DType, vals: &[f64]) -> (Vec<f64>, Vec<u8>) {
    let mut exact = Vec::with_capacity(vals.len());
    let mut bytes = Vec::new();
    for &v in vals {
        match dtype {
            DType::F64 => {
                exact.push(v);
                bytes.extend(v.to_le_bytes());
            }
            DType::F32 => {
                exact.push(f64::from(v as f32));
                bytes.extend((v as f32).to_le_bytes());
            }
            DType::F16 => {
                let h = f16::from_f64(v);
                exact.push(h.to_f64());
                bytes.extend(h.to_bits().to_le_bytes());
            }
            _ => {
                let h = bf16::from_f64(v);
                exact.push(h.to_f64());
                bytes.extend(h.to_bits().to_le_bytes());
            }
        }
    }
    (exact, bytes)
}

fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(dtype.size_in_bytes())
        .map(|c| match dtype {
            DType::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            DType::F32 => f64::from(f32::from_le_bytes(c.try_into().unwrap())),
            DType::F16 => f16::from_bits(u16::from_le_bytes(c.try_into().unwrap())).to_f64(),
            _ => bf16::from_bits(u16::from_le_bytes(c.try_into().unwrap())).to_f64(),
        })
        .collect()
}

/// How an operand of (batch, rows, cols) is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Store {
    RowMajor,
    Transposed,
    /// Row-major behind 3 elements of padding.
    Offset,
    /// One matrix for the whole batch (batch stride 0).
    Broadcast,
    /// Every other column of a wider matrix: no gemm call reads it, so it is copied first.
    EveryOtherColumn,
}

/// The operand's storage (as f64 values) and layout; `get(b, r, c)` reads the logical value.
struct Operand {
    storage: Vec<f64>,
    layout: Layout,
}

impl Operand {
    fn new(store: Store, batch: usize, rows: usize, cols: usize, rng: &mut impl Rng) -> Self {
        let (storage_len, dims, strides, start) = match store {
            Store::RowMajor => (
                batch * rows * cols,
                [batch, rows, cols],
                [rows * cols, cols, 1],
                0,
            ),
            Store::Transposed => (
                batch * rows * cols,
                [batch, rows, cols],
                [rows * cols, 1, rows],
                0,
            ),
            Store::Offset => (
                3 + batch * rows * cols,
                [batch, rows, cols],
                [rows * cols, cols, 1],
                3,
            ),
            Store::Broadcast => (rows * cols, [batch, rows, cols], [0, cols, 1], 0),
            Store::EveryOtherColumn => (
                batch * rows * cols * 2,
                [batch, rows, cols],
                [rows * cols * 2, cols * 2, 2],
                0,
            ),
        };
        let storage = (0..storage_len)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        Operand {
            storage,
            layout: Layout::new(&dims, &strides, start),
        }
    }

    fn get(&self, b: usize, r: usize, c: usize) -> f64 {
        let l = &self.layout;
        self.storage[l.start + b * l.strides[0] + r * l.strides[1] + c * l.strides[2]]
    }
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 2e-4,
        DType::F16 => 1.5e-3,
        _ => 1e-2,
    }
}

fn upload(d: &Device, bytes: &[u8]) -> Buffer {
    let buf = d.alloc(bytes.len()).unwrap();
    d.copy_htod(bytes, &buf, 0).unwrap();
    buf
}

/// Runs one matmul on the platform's BLAS and checks it; returns the largest error relative
/// to the dot scale.
fn check(dtype: DType, dims: (usize, usize, usize, usize), ls: Store, rs: Store) -> f64 {
    check_on(blas(), dtype, dims, ls, rs)
}

/// [`check`] on the BLAS `b`.
fn check_on(
    b: &Blas,
    dtype: DType,
    (batch, m, n, k): (usize, usize, usize, usize),
    ls: Store,
    rs: Store,
) -> f64 {
    let d = b.device();
    let mut rng = rand::rngs::StdRng::seed_from_u64((batch * 31 + m * 7 + n * 5 + k) as u64);
    let mut lhs = Operand::new(ls, batch, m, k, &mut rng);
    let mut rhs = Operand::new(rs, batch, k, n, &mut rng);
    let (lx, lb) = encode(dtype, &lhs.storage);
    let (rx, rb) = encode(dtype, &rhs.storage);
    lhs.storage = lx;
    rhs.storage = rx;
    let shape = MatmulShape { batch, m, n, k };
    let out = b
        .matmul(
            View::new(&upload(d, &lb), dtype, &lhs.layout),
            View::new(&upload(d, &rb), dtype, &rhs.layout),
            shape,
        )
        .unwrap_or_else(|e| panic!("{dtype} {shape:?} {ls:?} x {rs:?}: {e}"));
    let mut bytes = vec![0u8; out.len()];
    d.copy_dtoh(&out, 0, &mut bytes).unwrap();
    let got = decode(dtype, &bytes);
    assert_eq!(got.len(), batch * m * n);
    let mut worst = 0f64;
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let (mut want, mut scale) = (0f64, 0f64);
                for l in 0..k {
                    let p = lhs.get(bi, i, l) * rhs.get(bi, l, j);
                    want += p;
                    scale += p.abs();
                }
                let g = got[(bi * m + i) * n + j];
                let err = (g - want).abs() / scale.max(1e-30);
                assert!(
                    (g - want).abs() <= tolerance(dtype) * scale + 1e-30,
                    "{dtype} {shape:?} {ls:?} x {rs:?} at ({bi}, {i}, {j}): got {g}, want {want}"
                );
                worst = worst.max(err);
            }
        }
    }
    worst
}

const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

#[test]
fn all_transpose_combinations_and_batches() {
    let mut cases = 0;
    for dtype in DTYPES {
        let mut worst = 0f64;
        for ls in [Store::RowMajor, Store::Transposed] {
            for rs in [Store::RowMajor, Store::Transposed] {
                for dims in [
                    (1, 7, 64, 33),
                    (3, 64, 7, 64),
                    (5, 17, 29, 31),
                    (2, 1, 1, 1),
                ] {
                    worst = worst.max(check(dtype, dims, ls, rs));
                    cases += 1;
                }
            }
        }
        println!("{dtype}: worst error / dot scale {worst:.2e}");
    }
    println!("transposes x batches: {cases} cases within tolerance");
}

#[test]
fn sizes_from_1_to_4096() {
    let mut cases = 0;
    for dtype in DTYPES {
        for dims in [
            (1, 1, 1, 1),
            (1, 7, 7, 7),
            (1, 1, 4096, 64),
            (1, 4096, 7, 64),
            (1, 64, 1, 4096),
            (1, 1000, 1000, 64),
            (1, 7, 1000, 1000),
            (2, 64, 64, 1000),
        ] {
            check(dtype, dims, Store::RowMajor, Store::Transposed);
            cases += 1;
        }
    }
    println!("sizes: {cases} cases within tolerance");
}

#[test]
fn offsets_broadcast_batches_and_layouts_that_need_a_copy() {
    let mut cases = 0;
    for dtype in DTYPES {
        for (ls, rs) in [
            (Store::Offset, Store::Offset),
            (Store::RowMajor, Store::Broadcast),
            (Store::Broadcast, Store::Transposed),
            (Store::EveryOtherColumn, Store::RowMajor),
            (Store::Transposed, Store::EveryOtherColumn),
            (Store::EveryOtherColumn, Store::Broadcast),
        ] {
            check(dtype, (4, 9, 13, 11), ls, rs);
            cases += 1;
        }
    }
    println!("offsets/broadcast/copies: {cases} cases within tolerance");
}

/// The portable gemm kernel (rocm-kernels' gemm module), whatever BLAS the platform has.
fn portable() -> &'static Blas {
    static BLAS: OnceLock<Blas> = OnceLock::new();
    BLAS.get_or_init(|| {
        let options = rocm_blas::BlasOptions {
            portable: true,
            ..rocm_blas::BlasOptions::global()
        };
        let d = Device::new(0).expect("a GPU (set CANDLE_ROCM_PLATFORM)");
        let b = Blas::with_options(&d, options).unwrap();
        assert!(b.is_portable());
        b
    })
}

#[test]
fn the_portable_kernel_passes_the_same_cases() {
    let mut cases = 0;
    for dtype in DTYPES {
        let mut worst = 0f64;
        for ls in [Store::RowMajor, Store::Transposed] {
            for rs in [Store::RowMajor, Store::Transposed] {
                // partial tiles, several tiles, k past one k-tile, batches
                for dims in [
                    (1, 7, 64, 33),
                    (3, 65, 7, 64),
                    (2, 130, 67, 17),
                    (2, 1, 1, 1),
                ] {
                    worst = worst.max(check_on(portable(), dtype, dims, ls, rs));
                    cases += 1;
                }
            }
        }
        for (ls, rs) in [
            (Store::Offset, Store::Offset),
            (Store::RowMajor, Store::Broadcast),
            (Store::Broadcast, Store::Transposed),
            (Store::EveryOtherColumn, Store::RowMajor),
        ] {
            worst = worst.max(check_on(portable(), dtype, (4, 9, 13, 11), ls, rs));
            cases += 1;
        }
        worst = worst.max(check_on(
            portable(),
            dtype,
            (1, 300, 200, 1000),
            Store::RowMajor,
            Store::Transposed,
        ));
        cases += 1;
        println!("portable {dtype}: worst error / dot scale {worst:.2e}");
    }
    println!("portable gemm: {cases} cases within tolerance");
}

#[test]
fn zero_size_dims() {
    let b = blas();
    let d = b.device();
    for (batch, m, n, k) in [(0, 3, 4, 5), (2, 0, 4, 5), (2, 3, 0, 5), (2, 3, 4, 0)] {
        let lhs = d.alloc(batch * m * k * 4 + 4).unwrap();
        let rhs = d.alloc(batch * k * n * 4 + 4).unwrap();
        let out = b
            .matmul(
                View::new(&lhs, DType::F32, &Layout::contiguous(&[batch, m, k])),
                View::new(&rhs, DType::F32, &Layout::contiguous(&[batch, k, n])),
                MatmulShape { batch, m, n, k },
            )
            .unwrap();
        assert_eq!(out.len(), batch * m * n * 4);
        let mut bytes = vec![1u8; out.len()];
        d.copy_dtoh(&out, 0, &mut bytes).unwrap();
        assert!(bytes.iter().all(|&x| x == 0), "k = 0 must give zeros");
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let b = blas();
    let d = b.device();
    let buf = d.alloc(1 << 12).unwrap();
    let l = Layout::contiguous(&[1, 4, 4]);
    let shape = MatmulShape {
        batch: 1,
        m: 4,
        n: 4,
        k: 4,
    };
    for dtype in [
        DType::U8,
        DType::U32,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F8E4M3,
    ] {
        let e = b
            .matmul(
                View::new(&buf, dtype, &l),
                View::new(&buf, dtype, &l),
                shape,
            )
            .unwrap_err();
        assert!(
            matches!(e, Error::UnsupportedDType { op: "matmul", .. }),
            "{e}"
        );
    }
    let e = b
        .matmul(
            View::new(&buf, DType::F32, &Layout::contiguous(&[1, 4, 5])),
            View::new(&buf, DType::F32, &l),
            shape,
        )
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    let small = d.alloc(16).unwrap();
    let e = b
        .matmul(
            View::new(&small, DType::F32, &l),
            View::new(&buf, DType::F32, &l),
            shape,
        )
        .unwrap_err();
    assert!(matches!(e, Error::SizeMismatch { .. }), "{e}");
    let e = b
        .matmul(
            View::new(&buf, DType::F32, &l),
            View::new(&buf, DType::F16, &l),
            shape,
        )
        .unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    // An output dtype other than the inputs' (or f32 for f16/bf16 inputs) is refused.
    for (input, output) in [
        (DType::F32, DType::F16),
        (DType::F16, DType::BF16),
        (DType::F64, DType::F32),
    ] {
        let e = b
            .matmul_into_as(
                View::new(&buf, input, &l),
                View::new(&buf, input, &l),
                shape,
                (&buf, rocm_blas::OutputLayout::contiguous(shape)),
                output,
            )
            .unwrap_err();
        assert!(
            matches!(e, Error::DTypeMismatch { .. }),
            "{input} -> {output}: {e}"
        );
    }
}

#[test]
fn reduced_precision_is_opt_in_and_close() {
    // Its own handle: the flags must not leak into tests running beside it.
    let b = &Blas::new(blas().device()).unwrap();
    b.set_reduced_precision_f32(true);
    b.set_reduced_precision_f16(true);
    b.set_reduced_precision_bf16(true);
    // TF32 and f16 accumulation: looser, but still the same product.
    let run = |dtype| {
        let d = b.device();
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let lhs = Operand::new(Store::RowMajor, 1, 32, 64, &mut rng);
        let rhs = Operand::new(Store::RowMajor, 1, 64, 16, &mut rng);
        let (lx, lb) = encode(dtype, &lhs.storage);
        let (rx, rb) = encode(dtype, &rhs.storage);
        let out = b
            .matmul(
                View::new(&upload(d, &lb), dtype, &lhs.layout),
                View::new(&upload(d, &rb), dtype, &rhs.layout),
                MatmulShape {
                    batch: 1,
                    m: 32,
                    n: 16,
                    k: 64,
                },
            )
            .unwrap();
        let mut bytes = vec![0u8; out.len()];
        d.copy_dtoh(&out, 0, &mut bytes).unwrap();
        let got = decode(dtype, &bytes);
        for i in 0..32 {
            for j in 0..16 {
                let want: f64 = (0..64).map(|l| lx[i * 64 + l] * rx[l * 16 + j]).sum();
                let scale: f64 = (0..64)
                    .map(|l| (lx[i * 64 + l] * rx[l * 16 + j]).abs())
                    .sum();
                assert!(
                    (got[i * 16 + j] - want).abs() <= 2e-2 * scale,
                    "{dtype} ({i}, {j})"
                );
            }
        }
    };
    run(DType::F32);
    run(DType::F16);
    run(DType::BF16);
}

#[test]
fn half_inputs_write_an_f32_output_slice() {
    // f16/bf16 operands, f32 accumulators written unrounded into columns [3, 3 + n) of a wider
    // f32 matrix: within f32 accumulation error (far below 16-bit output rounding), and the
    // columns around the slice untouched. (Refused dtype pairs: bad_input_is_a_typed_error.)
    // The platform's BLAS and the portable kernel.
    half_inputs_on(blas());
    half_inputs_on(portable());
}

fn half_inputs_on(b: &Blas) {
    let d = b.device();
    let (m, n, k) = (37, 50, 300);
    let width = n + 11;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for dtype in [DType::F16, DType::BF16] {
        let lhs = Operand::new(Store::RowMajor, 1, m, k, &mut rng);
        let mut rhs = Operand::new(Store::RowMajor, 1, k, n, &mut rng);
        let (lx, lb) = encode(dtype, &lhs.storage);
        let (rx, rb) = encode(dtype, &rhs.storage);
        rhs.storage = rx;
        let out = upload(d, &vec![0xffu8; m * width * 4]);
        let shape = MatmulShape { batch: 1, m, n, k };
        b.matmul_into_as(
            View::new(&upload(d, &lb), dtype, &lhs.layout),
            View::new(&upload(d, &rb), dtype, &rhs.layout),
            shape,
            (
                &out,
                rocm_blas::OutputLayout {
                    offset: 3,
                    ld: width,
                    batch_stride: m * width,
                },
            ),
            DType::F32,
        )
        .unwrap();
        let mut bytes = vec![0u8; out.len()];
        d.copy_dtoh(&out, 0, &mut bytes).unwrap();
        let got = decode(DType::F32, &bytes);
        for i in 0..m {
            for j in 0..width {
                let g = got[i * width + j];
                if !(3..3 + n).contains(&j) {
                    assert!(
                        g.is_nan(),
                        "{dtype}: ({i}, {j}) outside the slice written: {g}"
                    );
                    continue;
                }
                let (mut want, mut scale) = (0f64, 0f64);
                for l in 0..k {
                    let p = lx[i * k + l] * rhs.get(0, l, j - 3);
                    want += p;
                    scale += p.abs();
                }
                assert!(
                    (g - want).abs() <= 1e-5 * scale,
                    "{dtype} at ({i}, {j}): got {g}, want {want}"
                );
            }
        }
    }
}

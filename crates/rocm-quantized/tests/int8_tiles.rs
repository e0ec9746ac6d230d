//! GPU tests of compat.h's int8 matrix units (kernels/src/matrix.hip's `mma_int_*` probes),
//! which the quantized products with many tokens are built on:
//! - each int8 instruction the target has, on registers filled from this file's own model of
//!   its layout (NVIDIA's PTX tables for mma.sync m16n8k32 s8, AMD's CDNA3/CDNA2 tables for
//!   v_mfma_i32_16x16x32_i8 and v_mfma_i32_16x16x16i8, AMD's RDNA3/RDNA4 tables for
//!   v_wmma_i32_16x16x16_iu8), against `a b + c` exactly (integers): under `--wave64` and
//!   `--amd-shim` the MFMA instruction is compat.h's emulation, held to AMD's layout here; on
//!   the ISA emulator AMD's own instructions run;
//! - the tile operation the kernels use (`mma_i8_16x16x32` with its loads from shared memory);
//! - the products built on them and on the integer dot products, for every block type at a
//!   size the ISA emulator runs in seconds (the GPU suite's `gpu` target covers the sizes).
//!
//! Values span all of i8 (-128..=127), so a sign or byte-order mistake shows, and the sums are
//! exact in i32: any difference is a fault.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_device::{DType, Device, LaunchArgs, Platform};
use rocm_kernels::matrix::{self, IntRegisters, IntTile};
use rocm_kernels::MATRIX;
use rocm_test_support::mma::{one_warp, rdna_wmma, Model};
use rocm_test_support::{device, download, upload, values};

mod common;

fn models() -> Vec<Model> {
    vec![
        Model {
            name: "mma.sync m16n8k32 s8",
            instruction: matrix::M16N8K32_S8,
            lanes: 32,
            mnk: (16, 8, 32),
            a: (16, |l, e| {
                (
                    l / 4 + 8 * ((e / 4) % 2),
                    4 * (l % 4) + e % 4 + 16 * (e / 8),
                )
            }),
            b: (8, |l, e| (4 * (l % 4) + e % 4 + 16 * (e / 4), l / 4)),
            c: (4, |l, e| (l / 4 + 8 * (e / 2), 2 * (l % 4) + e % 2)),
        },
        Model {
            name: "v_mfma_i32_16x16x32_i8",
            instruction: matrix::MFMA_I32_16X16X32_I8,
            lanes: 64,
            mnk: (16, 16, 32),
            a: (8, |l, e| (l % 16, 8 * (l / 16) + e)),
            b: (8, |l, e| (8 * (l / 16) + e, l % 16)),
            c: (4, |l, e| (4 * (l / 16) + e, l % 16)),
        },
        Model {
            name: "v_mfma_i32_16x16x16i8",
            instruction: matrix::MFMA_I32_16X16X16_I8,
            lanes: 64,
            mnk: (16, 16, 16),
            a: (4, |l, e| (l % 16, 4 * (l / 16) + e)),
            b: (4, |l, e| (4 * (l / 16) + e, l % 16)),
            c: (4, |l, e| (4 * (l / 16) + e, l % 16)),
        },
    ]
}

/// The int8 WMMA model of an RDNA arch (gfx11 or gfx12 register layouts).
fn wmma_model(arch: &str) -> Option<Model> {
    rdna_wmma(
        arch,
        [
            "v_wmma_i32_16x16x16_iu8 (gfx11)",
            "v_wmma_i32_16x16x16_iu8 (gfx12)",
        ],
        matrix::WMMA_I32_16X16X16_IU8,
    )
}

/// The int8 instructions this device's kernels must have: a real AMD device's by its arch
/// (gfx90a's 16x16x16, CDNA3's 16x16x32, RDNA's WMMA); kernels built by NVRTC mma.sync with 32
/// lanes and the emulated 16x16x32 MFMA with 64.
fn expected(d: &Device) -> Vec<u32> {
    let info = d.info();
    let nvrtc = info.platform == Platform::Nvidia || d.config().hip_on_cuda;
    let arch = info.base_arch();
    if nvrtc {
        if info.warp_size == 64 {
            vec![matrix::MFMA_I32_16X16X32_I8]
        } else {
            vec![matrix::M16N8K32_S8]
        }
    } else if wmma_model(arch).is_some() {
        vec![matrix::WMMA_I32_16X16X16_IU8]
    } else if arch == "gfx90a" {
        vec![matrix::MFMA_I32_16X16X16_I8]
    } else if info.matrix_units() {
        vec![matrix::MFMA_I32_16X16X32_I8]
    } else {
        vec![]
    }
}

/// `n` bytes spanning all of i8, from a splitmix64 stream.
fn int8s(n: usize, seed: u64) -> Vec<i8> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as u8 as i8
        })
        .collect()
}

fn bytes(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

fn i32s(d: &Device, buf: &rocm_device::Buffer) -> Vec<i32> {
    values(&download(d, buf), DType::I32)
        .iter()
        .map(|&x| x as i32)
        .collect()
}

fn function(d: &Device, op: &str) -> rocm_device::Function {
    let key = matrix::INT_KEY;
    let module = d
        .load_source(&MATRIX.name_for_dtype(key), &MATRIX.source_for_dtype(key))
        .unwrap();
    module.function(&format!("{op}_{key}")).unwrap()
}

/// Runs `m` on registers filled by its layout; None where the target lacks it, else how many
/// of the results differ from `a b + c`.
fn run_registers(d: &Device, m: &Model, seed: u64) -> Option<usize> {
    let (rows, cols, depth) = m.mnk;
    let a = int8s(rows * depth, seed);
    let b = int8s(depth * cols, seed + 1);
    let c: Vec<i32> = int8s(rows * cols, seed + 2)
        .iter()
        .map(|&x| i32::from(x) * 1000)
        .collect();
    let lanes = d.info().warp_size as usize;
    if lanes < m.lanes {
        return None;
    }
    let (regs, cregs) = (matrix::I8_REGS, matrix::REGS);
    let mut ar = vec![0i8; lanes * regs];
    let mut br = vec![0i8; lanes * regs];
    let mut cr = vec![0i32; lanes * cregs];
    for l in 0..m.lanes {
        for e in 0..m.a.0 {
            let (r, k) = (m.a.1)(l, e);
            ar[l * regs + e] = a[r * depth + k];
        }
        for e in 0..m.b.0 {
            let (k, n) = (m.b.1)(l, e);
            br[l * regs + e] = b[k * cols + n];
        }
        for e in 0..m.c.0 {
            let (r, n) = (m.c.1)(l, e);
            cr[l * cregs + e] = c[r * cols + n];
        }
    }
    let (ad, bd, cd) = (
        d.htod(&bytes(&ar)).unwrap(),
        d.htod(&bytes(&br)).unwrap(),
        d.htod(&cr).unwrap(),
    );
    let dd = d.alloc(lanes * cregs * 4).unwrap();
    let ran = d.htod(&[7u32]).unwrap();
    let params = IntRegisters {
        instruction: m.instruction,
        a: ad.as_buffer().ptr(),
        b: bd.as_buffer().ptr(),
        c: cd.as_buffer().ptr(),
        d: dd.ptr(),
        ran: ran.as_buffer().ptr(),
    };
    let f = function(d, matrix::INT_REGISTERS.op);
    d.launch(&f, one_warp(d), &mut LaunchArgs::from_params(&params))
        .unwrap();
    let ran = values(&download(d, ran.as_buffer()), DType::U32)[0];
    assert!(ran == 0.0 || ran == 1.0, "{}: ran = {ran}", m.name);
    if ran == 0.0 {
        return None;
    }
    let got = i32s(d, &dd);
    let mut wrong = 0;
    for l in 0..m.lanes {
        for e in 0..m.c.0 {
            let (r, n) = (m.c.1)(l, e);
            let want = c[r * cols + n]
                + (0..depth)
                    .map(|k| i32::from(a[r * depth + k]) * i32::from(b[k * cols + n]))
                    .sum::<i32>();
            if got[l * cregs + e] != want {
                wrong += 1;
            }
        }
    }
    Some(wrong)
}

#[test]
fn every_int8_matrix_instruction_matches_its_vendor_layout() {
    let d = device();
    let want = expected(&d);
    let mut all = models();
    all.extend(wmma_model(d.info().base_arch()));
    let mut ran = Vec::new();
    for (i, m) in all.iter().enumerate() {
        let Some(wrong) = run_registers(&d, m, 100 + i as u64) else {
            continue;
        };
        println!("{}: {wrong} results differ", m.name);
        assert_eq!(wrong, 0, "{}", m.name);
        ran.push(m.instruction);
    }
    assert_eq!(
        ran,
        want,
        "{}: the int8 instructions that ran",
        d.info().arch
    );
}

#[test]
fn the_int8_tile_operation_multiplies_exactly() {
    let d = device();
    if expected(&d).is_empty() {
        println!("{}: no int8 matrix units", d.info().arch);
        return;
    }
    for seed in [200u64, 300] {
        let a = int8s(16 * 32, seed);
        let b = int8s(32 * 16, seed + 1);
        let c: Vec<i32> = int8s(256, seed + 2)
            .iter()
            .map(|&x| i32::from(x) * 77)
            .collect();
        let (ad, bd, cd) = (
            d.htod(&bytes(&a)).unwrap(),
            d.htod(&bytes(&b)).unwrap(),
            d.htod(&c).unwrap(),
        );
        let dd = d.alloc(256 * 4).unwrap();
        let params = IntTile {
            a: ad.as_buffer().ptr(),
            b: bd.as_buffer().ptr(),
            c: cd.as_buffer().ptr(),
            d: dd.ptr(),
        };
        let f = function(&d, matrix::INT_TILE.op);
        d.launch(&f, one_warp(&d), &mut LaunchArgs::from_params(&params))
            .unwrap();
        let got = i32s(&d, &dd);
        let want: Vec<i32> = (0..256)
            .map(|i| {
                let (r, n) = (i / 16, i % 16);
                c[i] + (0..32)
                    .map(|k| i32::from(a[r * 32 + k]) * i32::from(b[k * 16 + n]))
                    .sum::<i32>()
            })
            .collect();
        let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
        println!(
            "int8 tile on {} (seed {seed}): {wrong} of 256 differ",
            d.info().arch
        );
        assert_eq!(wrong, 0, "got {:?}, want {:?}", &got[..16], &want[..16]);
    }
}

#[test]
fn products_of_every_block_type_match_the_cpu_qmatmul() {
    // One token (the integer mat-vec, x quantized in its launch: the decode step's product)
    // and nine (the int8 matrix-unit product's fewest) by 5 weight rows (a partial tile) of
    // one 256-value row of k: each type's unpacking of its quants and scales. Against
    // Candle's CPU QMatMul, to f32 rounding of the scaled integer sums (the `gpu` target's
    // bound).
    use candle_core::{Device as Cpu, Module, Tensor};
    use rand::{Rng, SeedableRng};
    use rocm_quantized::{self as rq, GgmlType, Layout, MatmulPath, Operand, QWeights};
    let d = device();
    let blas = rocm_blas::Blas::new(&d).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(29);
    let (n, k) = (5, 256);
    let mut checked = 0;
    for ty in GgmlType::ALL.into_iter().filter(|t| t.is_block()) {
        let q = common::quantized(ty, n, k, 7 + checked);
        let blocks = rq::upload(&d, ty, &q.data().unwrap()).unwrap();
        let cpu = candle_core::quantized::QMatMul::from_qtensor(q).unwrap();
        let w = QWeights {
            buffer: &blocks,
            ty,
            rows: n,
            k,
        };
        let paths = [
            (
                1,
                MatmulPath::Integer {
                    warps_per_row: 0,
                    fused: true,
                },
            ),
            (9, MatmulPath::Mmq),
        ];
        for (m, path) in paths {
            if path == MatmulPath::Mmq && !d.info().matrix_units() {
                continue;
            }
            let xs: Vec<f32> = (0..m * k)
                .map(|_| rng.random::<f32>() * 2.0 - 1.0)
                .collect();
            let x = Tensor::from_vec(xs.clone(), (m, k), &Cpu::Cpu).unwrap();
            let want: Vec<f32> = cpu
                .forward(&x)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let scale = want.iter().fold(1e-3f32, |a, v| a.max(v.abs()));
            let xb = upload(&d, &x);
            let xl = Layout::contiguous(&[m, k]);
            let got = rq::matmul_via(&blas, w, Operand::new(&xb, DType::F32, &xl), path).unwrap();
            let got = values(&download(&d, &got), DType::F32);
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - f64::from(*w)).abs() <= 1e-5 * f64::from(scale),
                    "{ty} {path:?} ({m}, {n}, {k}) at {i}: {g} vs {w}"
                );
            }
            checked += 1;
        }
    }
    println!(
        "{}: quantized products of every block type: {checked} cases",
        d.info().arch
    );
    assert!(checked >= 12, "only {checked} cases ran");
}

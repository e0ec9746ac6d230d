//! GPU tests of compat.h's matrix units (kernels/src/matrix.hip), which the tiled flash
//! attention is built on:
//! - each instruction the target has, on registers filled from this file's own model of the
//!   instruction's layout (NVIDIA's PTX tables for mma.sync m16n8k16, AMD's CDNA3 ISA tables for
//!   MFMA 16x16x16 and 32x32x8, AMD's RDNA3/RDNA4 tables for WMMA), against `a b + c` in f64:
//!   under `--wave64` and `--amd-shim` the MFMA instructions are compat.h's emulation, so its
//!   register layouts are held to AMD's here;
//! - the tile operations kernels use (loads from shared memory both ways, `mma_c_to_a`);
//! - the same probes built with a planted layout fault (b transposed,
//!   `CANDLE_ROCM_PLANT_TRANSPOSED_B`) must fail the same comparisons where the fault lives (the
//!   NVIDIA tile loads and compat.h's emulation of MFMA), and leave real AMD instructions alone;
//! - a misreading of MFMA's b layout shared by compat.h and this file's model
//!   (`CANDLE_ROCM_PLANT_MISREAD_MFMA_B`): the emulation of MFMA agrees with the misreading, so
//!   `--wave64` and `--amd-shim` cannot see it; AMD's real instructions (a GPU, or the ISA
//!   emulator) must;
//! - a misreading of RDNA3 WMMA's c layout (gfx12's rows taken for gfx11's) shared by compat.h
//!   and this file's model (`CANDLE_ROCM_PLANT_MISREAD_WMMA_C`): no NVIDIA tier runs WMMA at
//!   all, so only gfx11's real instructions (a GPU, or the ISA emulator) can show it.
//!
//! The products of two 16-bit floats are exact in f32 and at most 16 are summed: the bound is
//! 1e-5 for values in [-1, 1]; a layout fault moves results by about 1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_device::{DType, Device, LaunchArgs, Module, Platform};
use rocm_kernels::matrix::{self, Registers, Tile};
use rocm_kernels::MATRIX;
use rocm_test_support::mma::{one_warp, rdna_wmma, Model};
use rocm_test_support::{device, download, random, values};

const BOUND: f64 = 1e-5;

fn models() -> Vec<Model> {
    vec![
        Model {
            name: "mma.sync m16n8k16",
            instruction: matrix::M16N8K16,
            lanes: 32,
            mnk: (16, 8, 16),
            a: (8, |l, e| {
                (l / 4 + 8 * ((e / 2) % 2), 2 * (l % 4) + e % 2 + 8 * (e / 4))
            }),
            b: (4, |l, e| (2 * (l % 4) + e % 2 + 8 * (e / 2), l / 4)),
            c: (4, |l, e| (l / 4 + 8 * (e / 2), 2 * (l % 4) + e % 2)),
        },
        Model {
            name: "v_mfma_f32_16x16x16",
            instruction: matrix::MFMA_16X16X16,
            lanes: 64,
            mnk: (16, 16, 16),
            a: (4, |l, e| (l % 16, 4 * (l / 16) + e)),
            b: (4, |l, e| (4 * (l / 16) + e, l % 16)),
            c: (4, |l, e| (4 * (l / 16) + e, l % 16)),
        },
        Model {
            name: "v_mfma_f32_32x32x8",
            instruction: matrix::MFMA_32X32X8,
            lanes: 64,
            mnk: (32, 32, 8),
            a: (4, |l, e| (l % 32, 4 * (l / 32) + e)),
            b: (4, |l, e| (4 * (l / 32) + e, l % 32)),
            c: (16, |l, e| (8 * (e / 4) + 4 * (l / 32) + e % 4, l % 32)),
        },
    ]
}

/// The WMMA model of an RDNA arch (gfx11 or gfx12 register layouts).
fn wmma_model(arch: &str) -> Option<Model> {
    rdna_wmma(
        arch,
        ["v_wmma_f32_16x16x16 (gfx11)", "v_wmma_f32_16x16x16 (gfx12)"],
        matrix::WMMA_16X16X16,
    )
}

/// The instructions this device's kernels must have: a real AMD device's by its arch; kernels
/// built by NVRTC (the nvidia platform, or the HIP shim) mma.sync with 32 lanes and the
/// emulated MFMA with 64.
fn expected(d: &Device) -> Vec<u32> {
    let info = d.info();
    let nvrtc = info.platform == Platform::Nvidia || d.config().hip_on_cuda;
    let mfma = vec![matrix::MFMA_16X16X16, matrix::MFMA_32X32X8];
    if nvrtc {
        if info.warp_size == 64 {
            mfma
        } else {
            vec![matrix::M16N8K16]
        }
    } else if wmma_model(info.base_arch()).is_some() {
        vec![matrix::WMMA_16X16X16]
    } else if info.matrix_units() {
        // an AMD device with matrix units and no WMMA: CDNA's MFMA
        mfma
    } else {
        vec![]
    }
}

/// The planted faults: compat.h's emulation reading b transposed (and NVIDIA's tile loads);
/// a misreading of MFMA 16x16x16's b layout shared by compat.h (its maps, its loads and its
/// emulation of the instruction) and this file's model of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plant {
    None,
    TransposedB,
    MisreadMfmaB,
    MisreadWmmaC,
}

/// The matrix module for `dtype`, with `plant`.
fn module(d: &Device, dtype: DType, plant: Plant) -> std::sync::Arc<Module> {
    let key = dtype.as_str();
    let source = MATRIX.source_for_dtype(key);
    let define = match plant {
        Plant::None => return d.load_source(&MATRIX.name_for_dtype(key), &source).unwrap(),
        Plant::TransposedB => "CANDLE_ROCM_PLANT_TRANSPOSED_B",
        Plant::MisreadMfmaB => "CANDLE_ROCM_PLANT_MISREAD_MFMA_B",
        Plant::MisreadWmmaC => "CANDLE_ROCM_PLANT_MISREAD_WMMA_C",
    };
    d.load_source(
        &format!("matrix.{}.{key}", define.to_lowercase()),
        &format!("#define {define} 1\n{source}"),
    )
    .unwrap()
}

/// Whether the matrix instructions are AMD's own (an AMD GPU, or its code objects run by the
/// ISA emulator) rather than compat.h's emulation of them (`--wave64`, the HIP shim).
fn real_matrix_units(d: &Device) -> bool {
    d.info().platform == rocm_device::Platform::Amd && !d.config().hip_on_cuda
}

/// Runs `model` on registers filled by its layout; None where the target lacks it, else the
/// largest difference from `a b + c`.
fn run_registers(d: &Device, m: &Model, dtype: DType, plant: Plant, seed: u64) -> Option<f64> {
    let (rows, cols, depth) = m.mnk;
    let size = dtype.size_in_bytes();
    let a = random(dtype, rows * depth, -1.0, 1.0, seed);
    let b = random(dtype, depth * cols, -1.0, 1.0, seed + 1);
    let c: Vec<f32> = values(
        &random(DType::F32, rows * cols, -1.0, 1.0, seed + 2),
        DType::F32,
    )
    .iter()
    .map(|&x| x as f32)
    .collect();
    let regs = matrix::REGS;
    let (mut ar, mut br) = (
        vec![0u8; m.lanes * regs * size],
        vec![0u8; m.lanes * regs * size],
    );
    let mut cr = vec![0f32; m.lanes * regs];
    for l in 0..m.lanes {
        for e in 0..m.a.0 {
            let (r, kk) = (m.a.1)(l, e);
            let at = (r * depth + kk) * size;
            ar[(l * regs + e) * size..][..size].copy_from_slice(&a[at..at + size]);
        }
        for e in 0..m.b.0 {
            let (kk, n) = (m.b.1)(l, e);
            let at = (kk * cols + n) * size;
            br[(l * regs + e) * size..][..size].copy_from_slice(&b[at..at + size]);
        }
        for e in 0..m.c.0 {
            let (r, n) = (m.c.1)(l, e);
            cr[l * regs + e] = c[r * cols + n];
        }
    }
    // the device's wavefront may be wider than the instruction's (never narrower)
    let lanes = d.info().warp_size as usize;
    if lanes < m.lanes {
        return None;
    }
    ar.resize(lanes * regs * size, 0);
    br.resize(lanes * regs * size, 0);
    cr.resize(lanes * regs, 0.0);
    let (ad, bd, cd) = (
        d.htod(&ar).unwrap(),
        d.htod(&br).unwrap(),
        d.htod(&cr).unwrap(),
    );
    let dd = d.alloc(lanes * regs * 4).unwrap();
    let ran = d.htod(&[7u32]).unwrap();
    let params = Registers {
        instruction: m.instruction,
        a: ad.as_buffer().ptr(),
        b: bd.as_buffer().ptr(),
        c: cd.as_buffer().ptr(),
        d: dd.ptr(),
        ran: ran.as_buffer().ptr(),
    };
    let module = module(d, dtype, plant);
    let f = module
        .function(&format!("{}_{}", matrix::REGISTERS.op, dtype.as_str()))
        .unwrap();
    d.launch(&f, one_warp(d), &mut LaunchArgs::from_params(&params))
        .unwrap();
    let ran = values(&download(d, ran.as_buffer()), DType::U32)[0];
    assert!(ran == 0.0 || ran == 1.0, "{}: ran = {ran}", m.name);
    if ran == 0.0 {
        return None;
    }
    let got = values(&download(d, &dd), DType::F32);
    let (av, bv) = (values(&a, dtype), values(&b, dtype));
    let mut worst = 0f64;
    for l in 0..m.lanes {
        for e in 0..m.c.0 {
            let (r, n) = (m.c.1)(l, e);
            let want = c[r * cols + n] as f64
                + (0..depth)
                    .map(|kk| av[r * depth + kk] * bv[kk * cols + n])
                    .sum::<f64>();
            worst = worst.max((got[l * regs + e] - want).abs());
        }
    }
    Some(worst)
}

/// `n` values of `dtype` from {-1, -0.5, 0, 0.5, 1}: sums of 16 of their products are exact
/// in f32 and in both 16-bit types, so the chained product's rounding is exact too.
fn coarse(dtype: DType, n: usize, seed: u64) -> Vec<u8> {
    values(&random(DType::F32, n, -1.25, 1.25, seed), DType::F32)
        .iter()
        .flat_map(|&x| {
            let x = ((x * 2.0).round() / 2.0) as f32;
            match dtype {
                DType::BF16 => half::bf16::from_f32(x).to_le_bytes(),
                _ => half::f16::from_f32(x).to_le_bytes(),
            }
        })
        .collect()
}

/// Runs the tile probe; the largest difference of each of its three results.
fn run_tile(d: &Device, dtype: DType, plant: Plant, seed: u64) -> [f64; 3] {
    let a = coarse(dtype, 256, seed);
    let b = coarse(dtype, 256, seed + 1);
    let c: Vec<f32> = values(&random(DType::F32, 256, -1.0, 1.0, seed + 2), DType::F32)
        .iter()
        .map(|&x| x as f32)
        .collect();
    let (ad, bd, cd) = (
        d.htod(&a).unwrap(),
        d.htod(&b).unwrap(),
        d.htod(&c).unwrap(),
    );
    let dd = d.alloc(3 * 256 * 4).unwrap();
    let params = Tile {
        a: ad.as_buffer().ptr(),
        b: bd.as_buffer().ptr(),
        c: cd.as_buffer().ptr(),
        d: dd.ptr(),
    };
    let module = module(d, dtype, plant);
    let f = module
        .function(&format!("{}_{}", matrix::TILE.op, dtype.as_str()))
        .unwrap();
    d.launch(&f, one_warp(d), &mut LaunchArgs::from_params(&params))
        .unwrap();
    let got = values(&download(d, &dd), DType::F32);
    let (av, bv) = (values(&a, dtype), values(&b, dtype));
    let product = |x: &[f64], r: usize, n: usize| {
        (0..16).map(|k| x[r * 16 + k] * bv[k * 16 + n]).sum::<f64>()
    };
    let ab: Vec<f64> = (0..256).map(|i| product(&av, i / 16, i % 16)).collect();
    let mut worst = [0f64; 3];
    for i in 0..256 {
        let (r, n) = (i / 16, i % 16);
        let plain = c[i] as f64 + ab[i];
        let chained = c[i] as f64 + product(&ab, r, n);
        for (t, want) in [plain, plain, chained].into_iter().enumerate() {
            worst[t] = worst[t].max((got[t * 256 + i] - want).abs());
        }
    }
    worst
}

#[test]
fn every_matrix_instruction_matches_its_vendor_layout() {
    let d = device();
    let want = expected(&d);
    let mut all = models();
    all.extend(wmma_model(d.info().base_arch()));
    let mut ran = Vec::new();
    for dtype in [DType::BF16, DType::F16] {
        for (i, m) in all.iter().enumerate() {
            let Some(err) = run_registers(&d, m, dtype, Plant::None, 10 + i as u64) else {
                continue;
            };
            println!("{} {dtype}: largest difference {err:e}", m.name);
            assert!(err <= BOUND, "{} {dtype}: {err:e}", m.name);
            ran.push(m.instruction);
            // the planted fault must show
            let planted = run_registers(&d, m, dtype, Plant::TransposedB, 10 + i as u64).unwrap();
            println!("{} {dtype}, b transposed (planted): {planted:e}", m.name);
            if real_matrix_units(&d) {
                // the plant lives in compat.h's emulation of the instructions: the real ones
                // (an AMD GPU, or AMD's code run by the ISA emulator) are untouched by it
                assert!(
                    planted <= BOUND,
                    "{} {dtype}: the planted emulation fault reached a real instruction ({planted:e})",
                    m.name
                );
            } else if m.instruction != matrix::M16N8K16 {
                assert!(
                    planted > 0.05,
                    "{} {dtype}: the planted transposed b went unseen ({planted:e})",
                    m.name
                );
            }
        }
    }
    for w in &want {
        assert!(
            ran.contains(w),
            "{}: instruction {w} did not run ({ran:?})",
            d.info().arch
        );
    }
    println!(
        "matrix instructions on {} ({} lanes): {} checks",
        d.info().arch,
        d.info().warp_size,
        ran.len()
    );
}

#[test]
fn the_tile_operations_multiply_and_the_planted_fault_is_caught() {
    let d = device();
    assert!(
        d.info().matrix_units(),
        "{} has no matrix units",
        d.info().arch
    );
    for dtype in [DType::BF16, DType::F16] {
        let err = run_tile(&d, dtype, Plant::None, 40);
        println!(
            "tile {dtype}: b as rows of k {:e}, b as rows of n {:e}, chained {:e}",
            err[0], err[1], err[2]
        );
        assert!(err.iter().all(|&e| e <= BOUND), "{dtype}: {err:?}");
        let planted = run_tile(&d, dtype, Plant::TransposedB, 40);
        println!("tile {dtype}, b transposed (planted): {planted:?}");
        if real_matrix_units(&d) {
            // the plant is in the NVIDIA tile loads and the wave64 emulation only
            assert!(
                planted.iter().all(|&e| e <= BOUND),
                "{dtype}: the planted emulation fault reached real instructions ({planted:?})"
            );
        } else {
            assert!(
                planted[0] > 0.05 && planted[1] > 0.05,
                "{dtype}: the planted transposed b went unseen ({planted:?})"
            );
        }
    }
}

/// MFMA 16x16x16's b as the planted misreading has it: b's transpose's layout.
fn misread_mfma_b(l: usize, e: usize) -> (usize, usize) {
    (l % 16, 4 * (l / 16) + e)
}

#[test]
fn a_layout_misreading_shared_with_our_model_shows_only_on_real_instructions() {
    let d = device();
    let Some(mfma) = models()
        .into_iter()
        .find(|m| m.instruction == matrix::MFMA_16X16X16)
    else {
        unreachable!("the MFMA 16x16x16 model exists")
    };
    let misread = Model {
        b: (4, misread_mfma_b),
        ..mfma
    };
    for dtype in [DType::BF16, DType::F16] {
        // only a device with MFMA (real or emulated) runs the probe
        let Some(probe) = run_registers(&d, &misread, dtype, Plant::MisreadMfmaB, 60) else {
            println!(
                "{}: no MFMA, the misreading plant does not apply",
                d.info().arch
            );
            return;
        };
        let tile = run_tile(&d, dtype, Plant::MisreadMfmaB, 61);
        println!("misread MFMA b {dtype}: register probe {probe:e}, tile {tile:?}");
        if real_matrix_units(&d) {
            assert!(
                probe > 0.05 && tile[0] > 0.05 && tile[1] > 0.05,
                "{dtype}: the shared misreading of MFMA's b went unseen on {} (probe {probe:e}, tile {tile:?})",
                d.info().arch
            );
        } else {
            // the emulation shares the misreading: this tier cannot see it (the ISA emulator's
            // tier and an AMD GPU do)
            assert!(
                probe <= BOUND && tile.iter().all(|&e| e <= BOUND),
                "{dtype}: the emulated MFMA disagrees with the planted misreading it shares (probe {probe:e}, tile {tile:?})"
            );
        }
    }
}

/// RDNA3 WMMA's c as the planted misreading has it: RDNA4's rows (8 (l / 16) + e).
fn misread_wmma_c(l: usize, e: usize) -> (usize, usize) {
    (8 * (l / 16) + e, l % 16)
}

#[test]
fn a_wmma_misreading_shared_with_our_model_shows_on_gfx11_instructions() {
    let d = device();
    let arch = d.info().base_arch().to_string();
    let gfx11 = wmma_model(&arch).filter(|_| arch.starts_with("gfx11"));
    let Some(wmma) = gfx11.filter(|_| real_matrix_units(&d)) else {
        // NVRTC's builds have no WMMA path at all: nothing there shares or runs the layout
        println!("{arch}: no RDNA3 WMMA instructions, the misreading plant does not apply");
        return;
    };
    let misread = Model {
        c: (8, misread_wmma_c),
        ..wmma
    };
    for dtype in [DType::BF16, DType::F16] {
        let probe = run_registers(&d, &misread, dtype, Plant::MisreadWmmaC, 70)
            .expect("a gfx11 device runs WMMA");
        let tile = run_tile(&d, dtype, Plant::MisreadWmmaC, 71);
        println!("misread WMMA c {dtype}: register probe {probe:e}, tile {tile:?}");
        assert!(
            probe > 0.05 && tile[0] > 0.05 && tile[1] > 0.05,
            "{dtype}: the shared misreading of WMMA's c went unseen on {arch} (probe {probe:e}, tile {tile:?})"
        );
    }
}

//! The matrix instructions: CDNA3's MFMA (gfx942, 64 lanes, operands and accumulators in
//! VGPRs or accumulation registers) and RDNA3's WMMA (gfx11, 32 lanes), with the register
//! layouts AMD documents for them (the CDNA3 ISA reference's "matrix fused multiply-add"
//! section and AMD's matrix instruction calculator; RDNA3's ISA reference, "wave matrix
//! multiply-accumulate"):
//!
//! - `v_mfma_f32_{16x16x16,32x32x8}_{f16,bf16}`, M = 16 or 32, K = 64 / M: lane `l` holds
//!   A[l % M][4 (l / M) + e] and B[4 (l / M) + e][l % M] for e < 4 (two registers of two
//!   halves); D (and C) element r of lane l is D[4 (l / 16) + r][l % 16] for M = 16 (r < 4),
//!   D[8 (r / 4) + 4 (l / 32) + r % 4][l % 32] for M = 32 (r < 16).
//! - `v_wmma_f32_16x16x16_{f16,bf16}` (wave32): lane l < 16 holds A[l][e] and B[e][l], e < 16
//!   (eight registers of two halves), lanes 16-31 the same values again; D element r of lane l
//!   is D[2 r + l / 16][l % 16], r < 8.
//!
//! - `v_mfma_i32_16x16x32_i8`: lane l holds A[l % 16][8 (l / 16) + e] and B[8 (l / 16) + e][l % 16]
//!   for e < 8 (two registers of four bytes), D as the f32 16x16 form's; always signed.
//! - `v_wmma_i32_16x16x16_iu8`: lane l < 16 holds A[l][e] and B[e][l], e < 16 (four registers of
//!   four bytes), lanes 16-31 the same again; D as the f32 form's; neg_lo's first two bits make
//!   A and B signed.
//!
//! Products of two halves are exact in f32; each result is the exact sum (taken in f64) of C
//! and the K products, rounded once to f32; the integer forms' sums are exact and wrap to i32.
//! Every form needs every lane on.

use super::*;
use crate::decode::Instruction;
use crate::exec::{Context, ExecError, ExecResult, Wave};

/// Which register file an operand of a matrix instruction is in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum File {
    Vgpr,
    Agpr,
}

fn operand_error(ctx: &Context<'_>, inst: &Instruction, what: String) -> ExecError {
    ExecError::Operand {
        kernel: ctx.kernel.to_string(),
        mnemonic: inst.mnemonic.to_string(),
        address: inst.address,
        what,
    }
}

fn reg(w: &Wave, file: File, r: usize, lane: usize) -> Option<u32> {
    match file {
        File::Vgpr => w.v.get(r).map(|v| v[lane]),
        File::Agpr => w.a.get(r).map(|a| a[lane]),
    }
}

fn reg_mut(w: &mut Wave, file: File, r: usize) -> Option<&mut Vec<u32>> {
    match file {
        File::Vgpr => w.v.get_mut(r),
        File::Agpr => w.a.get_mut(r),
    }
}

/// The element types of the matrix instructions' A and B.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Elem {
    F16,
    Bf16,
    I8,
}

impl Elem {
    fn bytes(self) -> usize {
        match self {
            Elem::F16 | Elem::Bf16 => 2,
            Elem::I8 => 1,
        }
    }

    /// The value of an element's bits.
    fn value(self, bits: u32, signed: bool) -> f64 {
        match self {
            Elem::F16 => f64::from(f16_to_f32(bits as u16)),
            Elem::Bf16 => f64::from(f32::from_bits(bits << 16)),
            Elem::I8 if signed => f64::from(bits as u8 as i8),
            Elem::I8 => f64::from(bits as u8),
        }
    }
}

/// The `count` elements of a lane's operand at register `r`: element e is in register
/// r + e / per, at bits (e % per) * width, per elements a register.
fn elements_of(
    w: &Wave,
    file: File,
    r: usize,
    lane: usize,
    count: usize,
    elem: Elem,
    signed: bool,
) -> Option<Vec<f64>> {
    let width = 8 * elem.bytes();
    let per = 32 / width;
    (0..count)
        .map(|e| {
            reg(w, file, r + e / per, lane).map(|x| elem.value(x >> (width * (e % per)), signed))
        })
        .collect()
}

pub(super) fn execute(w: &mut Wave, inst: &Instruction, ctx: &mut Context<'_>) -> ExecResult<()> {
    let m = inst.mnemonic;
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let vdst = bits(w0, 0, 8) as usize;
    let srcs = [bits(w1, 0, 9), bits(w1, 9, 9), bits(w1, 18, 9)];
    match m {
        "v_accvgpr_write_b32" => {
            for lane in 0..w.lanes {
                if w.active(lane) {
                    let v = read32(w, inst, srcs[0], lane);
                    let dst = reg_mut(w, File::Agpr, vdst)
                        .ok_or_else(|| operand_error(ctx, inst, format!("a{vdst}")))?;
                    dst[lane] = v;
                }
            }
            return Ok(());
        }
        "v_accvgpr_read_b32" | "v_accvgpr_mov_b32" => {
            // the move is VOP1 (source in word 0's bits 8:0, destination in 24:17); the read
            // VOP3P
            let (src, vdst) = if inst.format == Format::Vop1 {
                (bits(w0, 0, 9), bits(w0, 17, 8) as usize)
            } else {
                (srcs[0], vdst)
            };
            let src = src
                .checked_sub(256)
                .ok_or_else(|| unimplemented(inst, ctx))? as usize;
            let to = if m == "v_accvgpr_read_b32" {
                File::Vgpr
            } else {
                File::Agpr
            };
            for lane in 0..w.lanes {
                if w.active(lane) {
                    let v = reg(w, File::Agpr, src, lane)
                        .ok_or_else(|| operand_error(ctx, inst, format!("a{src}")))?;
                    let dst = reg_mut(w, to, vdst)
                        .ok_or_else(|| operand_error(ctx, inst, format!("register {vdst}")))?;
                    dst[lane] = v;
                }
            }
            return Ok(());
        }
        _ => {}
    }
    let full = if w.lanes == 64 {
        u64::MAX
    } else {
        (1u64 << w.lanes) - 1
    };
    if w.exec() != full {
        return Err(operand_error(
            ctx,
            inst,
            format!(
                "EXEC is {:#x}; a matrix instruction needs every lane on",
                w.exec()
            ),
        ));
    }
    let (mm, k, acc_regs, a_regs, elem) = match m {
        "v_mfma_f32_16x16x16_f16" => (16usize, 16usize, 4usize, 2usize, Elem::F16),
        "v_mfma_f32_16x16x16_bf16" => (16, 16, 4, 2, Elem::Bf16),
        "v_mfma_f32_32x32x8_f16" => (32, 8, 16, 2, Elem::F16),
        "v_mfma_f32_32x32x8_bf16" => (32, 8, 16, 2, Elem::Bf16),
        "v_mfma_i32_16x16x32_i8" => (16, 32, 4, 2, Elem::I8),
        "v_wmma_f32_16x16x16_f16" => (16, 16, 8, 8, Elem::F16),
        "v_wmma_f32_16x16x16_bf16" => (16, 16, 8, 8, Elem::Bf16),
        "v_wmma_i32_16x16x16_iu8" => (16, 16, 8, 4, Elem::I8),
        _ => return Err(unimplemented(inst, ctx)),
    };
    let wmma = m.starts_with("v_wmma");
    // whether A and B are signed (MFMA's i8 always; WMMA's iu8 by its neg_lo bits)
    let mut signed = (true, true);
    // operand files: MFMA's A/B from word1's acc bits, C/D from acc_cd; WMMA's all VGPRs
    let (a_file, b_file, cd_file) = if wmma {
        let neg_lo = bits(w1, 29, 3);
        if elem == Elem::I8 {
            // iu8: neg_lo[0] and [1] say A and B are signed; clamp (saturation) is not made
            // by our kernels, not guessed at
            if neg_lo >> 2 != 0 || bits(w0, 8, 3) != 0 || bits(w0, 15, 1) != 0 {
                return Err(unimplemented(inst, ctx));
            }
            signed = (neg_lo & 1 != 0, neg_lo & 2 != 0);
        } else if neg_lo != 0 || bits(w0, 8, 3) != 0 {
            // negated operands: not made by our kernels, not guessed at
            return Err(unimplemented(inst, ctx));
        }
        (File::Vgpr, File::Vgpr, File::Vgpr)
    } else {
        if bits(w0, 8, 3) != 0 || bits(w0, 11, 4) != 0 || bits(w1, 29, 3) != 0 {
            // cbsz, abid, blgp: broadcasts our kernels do not use
            return Err(unimplemented(inst, ctx));
        }
        let file = |on: bool| if on { File::Agpr } else { File::Vgpr };
        (
            file(bits(w1, 27, 1) != 0),
            file(bits(w1, 28, 1) != 0),
            file(bits(w0, 15, 1) != 0),
        )
    };
    let vreg = |code: u32| -> ExecResult<usize> {
        code.checked_sub(256).map(|r| r as usize).ok_or_else(|| {
            operand_error(ctx, inst, format!("operand code {code} is not a register"))
        })
    };
    let (ra, rb) = (vreg(srcs[0])?, vreg(srcs[1])?);
    let lanes = w.lanes;
    let per_lane = a_regs * 4 / elem.bytes();
    // the whole A (M x K) and B (K x M) from their lanes, as exact f64 values
    let mut a = vec![0f64; mm * k];
    let mut b = vec![0f64; k * mm];
    let operand = |w: &Wave, file: File, r: usize, lane: usize, signed: bool| {
        elements_of(w, file, r, lane, per_lane, elem, signed)
    };
    for lane in 0..lanes {
        let ea = operand(w, a_file, ra, lane, signed.0)
            .ok_or_else(|| operand_error(ctx, inst, format!("A at register {ra}")))?;
        let eb = operand(w, b_file, rb, lane, signed.1)
            .ok_or_else(|| operand_error(ctx, inst, format!("B at register {rb}")))?;
        if wmma {
            if lane >= 16 {
                let (ca, cb) = (
                    operand(w, a_file, ra, lane - 16, signed.0),
                    operand(w, b_file, rb, lane - 16, signed.1),
                );
                if ca.as_ref() != Some(&ea) || cb.as_ref() != Some(&eb) {
                    return Err(operand_error(
                        ctx,
                        inst,
                        format!("lane {lane}'s A or B differs from lane {}'s: gfx11's WMMA takes lanes 16-31 as copies of lanes 0-15", lane - 16),
                    ));
                }
                continue;
            }
            for e in 0..k {
                a[lane * k + e] = ea[e];
                b[e * mm + lane] = eb[e];
            }
        } else {
            let (row, k0) = (lane % mm, per_lane * (lane / mm));
            for e in 0..per_lane {
                a[row * k + k0 + e] = ea[e];
                b[(k0 + e) * mm + row] = eb[e];
            }
        }
    }
    // where element r of lane l of C and D sits
    let at = |lane: usize, r: usize| -> (usize, usize) {
        match (wmma, mm) {
            (true, _) => (2 * r + lane / 16, lane % 16),
            (false, 16) => (4 * (lane / 16) + r, lane % 16),
            _ => (8 * (r / 4) + 4 * (lane / 32) + r % 4, lane % 32),
        }
    };
    let mut c = vec![0f64; mm * mm];
    let src2 = srcs[2];
    for lane in 0..lanes {
        for r in 0..acc_regs {
            let (i, j) = at(lane, r);
            let bits32 = if src2 >= 256 {
                reg(w, cd_file, (src2 - 256) as usize + r, lane).ok_or_else(|| {
                    operand_error(ctx, inst, format!("C at register {}", src2 - 256))
                })?
            } else {
                read32(w, inst, src2, lane)
            };
            c[i * mm + j] = if elem == Elem::I8 {
                f64::from(bits32 as i32)
            } else {
                f64::from(f32::from_bits(bits32))
            };
        }
    }
    let mut out = vec![0u32; mm * mm];
    for i in 0..mm {
        for j in 0..mm {
            let sum: f64 =
                c[i * mm + j] + (0..k).map(|kk| a[i * k + kk] * b[kk * mm + j]).sum::<f64>();
            out[i * mm + j] = if elem == Elem::I8 {
                // exact in f64; the i32 result wraps as the hardware's does without clamp
                (sum as i64) as u32
            } else {
                (sum as f32).to_bits()
            };
        }
    }
    for lane in 0..lanes {
        for r in 0..acc_regs {
            let (i, j) = at(lane, r);
            let dst = reg_mut(w, cd_file, vdst + r)
                .ok_or_else(|| operand_error(ctx, inst, format!("D at register {}", vdst + r)))?;
            dst[lane] = out[i * mm + j];
        }
    }
    Ok(())
}

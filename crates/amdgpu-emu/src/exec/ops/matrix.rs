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
//! Products of two halves are exact in f32; each result is the exact sum (taken in f64) of C
//! and the K products, rounded once to f32. Both instructions need every lane on.

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

/// A 16-bit float's value.
fn half(bits: u16, bf16: bool) -> f64 {
    if bf16 {
        f64::from(f32::from_bits(u32::from(bits) << 16))
    } else {
        f64::from(f16_to_f32(bits))
    }
}

/// The `count` 16-bit elements of a lane's operand at register `r` (element 2i + h in the
/// h-th half of register r + i).
fn halves_of(w: &Wave, file: File, r: usize, lane: usize, count: usize) -> Option<Vec<u16>> {
    (0..count)
        .map(|e| reg(w, file, r + e / 2, lane).map(|x| (x >> (16 * (e % 2))) as u16))
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
            let src = srcs[0]
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
    let bf16 = m.ends_with("_bf16");
    let (mm, k, acc_regs, a_regs) = match m.trim_end_matches("_bf16").trim_end_matches("_f16") {
        "v_mfma_f32_16x16x16" => (16usize, 16usize, 4usize, 2usize),
        "v_mfma_f32_32x32x8" => (32, 8, 16, 2),
        "v_wmma_f32_16x16x16" => (16, 16, 8, 8),
        _ => return Err(unimplemented(inst, ctx)),
    };
    let wmma = m.starts_with("v_wmma");
    // operand files: MFMA's A/B from word1's acc bits, C/D from acc_cd; WMMA's all VGPRs
    let (a_file, b_file, cd_file) = if wmma {
        if bits(w1, 29, 3) != 0 || bits(w0, 8, 3) != 0 {
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
    let per_lane = 2 * a_regs;
    // the whole A (M x K) and B (K x M) from their lanes
    let mut a = vec![0f64; mm * k];
    let mut b = vec![0f64; k * mm];
    for lane in 0..lanes {
        let ea = halves_of(w, a_file, ra, lane, per_lane)
            .ok_or_else(|| operand_error(ctx, inst, format!("A at register {ra}")))?;
        let eb = halves_of(w, b_file, rb, lane, per_lane)
            .ok_or_else(|| operand_error(ctx, inst, format!("B at register {rb}")))?;
        if wmma {
            if lane >= 16 {
                let (ca, cb) = (
                    halves_of(w, a_file, ra, lane - 16, per_lane),
                    halves_of(w, b_file, rb, lane - 16, per_lane),
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
                a[lane * k + e] = half(ea[e], bf16);
                b[e * mm + lane] = half(eb[e], bf16);
            }
        } else {
            let (row, k0) = (lane % mm, 4 * (lane / mm));
            for e in 0..4 {
                a[row * k + k0 + e] = half(ea[e], bf16);
                b[(k0 + e) * mm + row] = half(eb[e], bf16);
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
            c[i * mm + j] = f64::from(f32::from_bits(bits32));
        }
    }
    let mut out = vec![0u32; mm * mm];
    for i in 0..mm {
        for j in 0..mm {
            let sum: f64 =
                c[i * mm + j] + (0..k).map(|kk| a[i * k + kk] * b[kk * mm + j]).sum::<f64>();
            out[i * mm + j] = (sum as f32).to_bits();
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

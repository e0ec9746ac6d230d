//! Packed math (VOP3P): two 16-bit or two 32-bit operations a register, dot products, and
//! the mixed-precision multiply-adds.

use super::*;
use crate::decode::Instruction;
use crate::exec::{Context, ExecResult, Wave};

/// Packed math (VOP3P): each half of the result from the halves `op_sel` (low) and
/// `op_sel_hi` (high) pick, negated where `neg` / `neg_hi` say. The packed f32 operations
/// (gfx90a and gfx94x) work on register pairs.
pub(super) fn vop3p(w: &mut Wave, inst: &Instruction, ctx: &Context<'_>) -> ExecResult<()> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let m = inst.mnemonic;
    let vdst = bits(w0, 0, 8) as usize;
    let srcs = [bits(w1, 0, 9), bits(w1, 9, 9), bits(w1, 18, 9)];
    let op_sel = bits(w0, 11, 3);
    let op_sel_hi = bits(w1, 27, 2) | (bits(w0, 14, 1) << 2);
    let (neg, neg_hi) = (bits(w1, 29, 3), bits(w0, 8, 3));
    if bits(w0, 15, 1) != 0 {
        return Err(unimplemented(inst, ctx));
    }
    if m == "v_dot4_i32_iu8" {
        // gfx11: neg_lo says which of the two byte operands are signed; c is an i32
        let signed = [neg & 1 != 0, neg & 2 != 0];
        for lane in 0..w.lanes {
            if !w.active(lane) {
                continue;
            }
            let (a, b, c) = (
                read32(w, inst, srcs[0], lane),
                read32(w, inst, srcs[1], lane),
                read32(w, inst, srcs[2], lane),
            );
            let byte = |x: u32, i: u32, s: bool| {
                let v = (x >> (8 * i)) & 0xff;
                if s {
                    v as u8 as i8 as i32
                } else {
                    v as i32
                }
            };
            let dot = (0..4)
                .map(|i| byte(a, i, signed[0]).wrapping_mul(byte(b, i, signed[1])))
                .fold(c as i32, i32::wrapping_add);
            w.v[vdst][lane] = dot as u32;
        }
        return Ok(());
    }
    if let Some(op) = packed16(m) {
        if m.ends_with("_f16") && srcs.iter().any(|&c| (240..=248).contains(&c)) {
            // an inline float constant in packed f16 math: not emulated (not guessed at)
            return Err(unimplemented(inst, ctx));
        }
        for lane in 0..w.lanes {
            if !w.active(lane) {
                continue;
            }
            let regs = srcs.map(|s| read32(w, inst, s, lane));
            let half = |i: usize, high_result: bool| -> u16 {
                let sel = if high_result { op_sel_hi } else { op_sel } >> i & 1 != 0;
                let v = (if sel { regs[i] >> 16 } else { regs[i] }) as u16;
                let negate = if high_result { neg_hi } else { neg } >> i & 1 != 0;
                // neg flips a float's sign; integer operations have none
                if negate && m.ends_with("_f16") {
                    v ^ 0x8000
                } else {
                    v
                }
            };
            let result = |hi: bool| u32::from(op(half(0, hi), half(1, hi), half(2, hi)));
            w.v[vdst][lane] = result(false) | (result(true) << 16);
        }
        return Ok(());
    }
    if matches!(m, "v_fma_mix_f32" | "v_fma_mixlo_f16" | "v_fma_mixhi_f16") {
        if (0..3).any(|i| op_sel_hi >> i & 1 != 0 && (240..=248).contains(&srcs[i])) {
            // an inline float constant read as a half: not emulated (not guessed at)
            return Err(unimplemented(inst, ctx));
        }
        // each source f32, or (op_sel_hi) a half from its low or (op_sel) high 16 bits;
        // neg_hi is abs here, neg_lo neg; one fused multiply-add. The f16-result forms round
        // it to f16 (by way of f64: the product of two such operands is exact there) and
        // write the low or high half, keeping the other.
        for lane in 0..w.lanes {
            if !w.active(lane) {
                continue;
            }
            let operand = |i: usize| -> f32 {
                let raw = read32(w, inst, srcs[i], lane);
                let v = if op_sel_hi >> i & 1 != 0 {
                    let h = if op_sel >> i & 1 != 0 { raw >> 16 } else { raw };
                    f16_to_f32(h as u16)
                } else {
                    f32::from_bits(raw)
                };
                let v = if neg_hi >> i & 1 != 0 { v.abs() } else { v };
                if neg >> i & 1 != 0 {
                    -v
                } else {
                    v
                }
            };
            let old = w.v[vdst][lane];
            w.v[vdst][lane] = match m {
                "v_fma_mix_f32" => operand(0).mul_add(operand(1), operand(2)).to_bits(),
                _ => {
                    let [a, b, c] = [0, 1, 2].map(|i| f64::from(operand(i)));
                    let h = u32::from(f32_to_f16(a.mul_add(b, c) as f32));
                    if m == "v_fma_mixlo_f16" {
                        (old & 0xffff_0000) | h
                    } else {
                        (old & 0xffff) | (h << 16)
                    }
                }
            };
        }
        return Ok(());
    }
    let f32_op: fn(f32, f32, f32) -> f32 = match m {
        "v_pk_mul_f32" => |a, b, _| a * b,
        "v_pk_add_f32" => |a, b, _| a + b,
        "v_pk_fma_f32" => |a, b, c| a.mul_add(b, c),
        "v_pk_mov_b32" => |a, b, _| {
            let _ = b;
            a
        },
        _ => return Err(unimplemented(inst, ctx)),
    };
    let operands = if m == "v_pk_fma_f32" { 3 } else { 2 };
    let mov = m == "v_pk_mov_b32";
    // a register pair; a constant is one f32 in the low half (op_sel picks it for both
    // results)
    let pair_of = |w: &Wave, i: usize, lane: usize| -> u64 {
        if srcs[i] >= 256 || srcs[i] < 128 {
            read64(w, inst, srcs[i], lane, false)
        } else {
            u64::from(read32(w, inst, srcs[i], lane))
        }
    };
    let exec = w.exec();
    let mut out = [(0u32, 0u32); 64];
    for (lane, slot) in out.iter_mut().enumerate().take(w.lanes) {
        if exec >> lane & 1 == 0 {
            continue;
        }
        // each operand's pair read once, both results taken from it
        let pairs: [u64; 3] = [0, 1, 2].map(|i| if i < operands { pair_of(w, i, lane) } else { 0 });
        let half = |i: usize, hi: bool| -> f32 {
            let select = if hi { op_sel_hi } else { op_sel } >> i & 1 != 0;
            let v = f32::from_bits(if select {
                (pairs[i] >> 32) as u32
            } else {
                pairs[i] as u32
            });
            let negate = if hi { neg_hi } else { neg } >> i & 1 != 0;
            if negate && !mov {
                -v
            } else {
                v
            }
        };
        let at = |hi: bool| {
            let c = if operands == 3 { half(2, hi) } else { 0.0 };
            f32_op(half(0, hi), half(1, hi), c)
        };
        let (lo, hi) = if mov {
            // the low result from the half of src0 op_sel[0] names, the high from the half of
            // src1 op_sel[1] names (op_sel_hi plays no part)
            (half(0, false), half(1, false))
        } else {
            (at(false), at(true))
        };
        *slot = (lo.to_bits(), hi.to_bits());
    }
    for (lane, &(lo, hi)) in out.iter().enumerate().take(w.lanes) {
        if exec >> lane & 1 != 0 {
            w.v[vdst][lane] = lo;
            w.v[vdst + 1][lane] = hi;
        }
    }
    Ok(())
}

/// One half's operation of a packed 16-bit instruction.
type Packed16 = fn(u16, u16, u16) -> u16;

fn packed16(m: &str) -> Option<Packed16> {
    Some(match m {
        "v_pk_add_f16" => |a, b, _| f32_to_f16(f16_to_f32(a) + f16_to_f32(b)),
        "v_pk_mul_f16" => |a, b, _| f32_to_f16(f16_to_f32(a) * f16_to_f32(b)),
        "v_pk_max_f16" => |a, b, _| f32_to_f16(f16_to_f32(a).max(f16_to_f32(b))),
        "v_pk_min_f16" => |a, b, _| f32_to_f16(f16_to_f32(a).min(f16_to_f32(b))),
        "v_pk_fma_f16" => |a, b, c| {
            let w = |x: u16| f64::from(f16_to_f32(x));
            f32_to_f16(w(a).mul_add(w(b), w(c)) as f32)
        },
        "v_pk_add_u16" => |a, b, _| a.wrapping_add(b),
        "v_pk_sub_u16" | "v_pk_sub_i16" => |a, b, _| a.wrapping_sub(b),
        "v_pk_add_i16" => |a, b, _| a.wrapping_add(b),
        "v_pk_mul_lo_u16" => |a, b, _| a.wrapping_mul(b),
        "v_pk_mad_u16" => |a, b, c| a.wrapping_mul(b).wrapping_add(c),
        "v_pk_max_i16" => |a, b, _| (a as i16).max(b as i16) as u16,
        "v_pk_min_i16" => |a, b, _| (a as i16).min(b as i16) as u16,
        "v_pk_max_u16" => |a, b, _| a.max(b),
        "v_pk_min_u16" => |a, b, _| a.min(b),
        "v_pk_lshlrev_b16" => |a, b, _| b << (a & 15),
        "v_pk_lshrrev_b16" => |a, b, _| b >> (a & 15),
        "v_pk_ashrrev_i16" => |a, b, _| ((b as i16) >> (a & 15)) as u16,
        _ => return None,
    })
}

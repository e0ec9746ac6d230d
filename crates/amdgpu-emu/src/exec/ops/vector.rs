//! The vector ALU: VOP1/2/C/3 (16-, 32- and 64-bit operations), gfx11's dual issue
//! (VOPD) and gfx9's sub-dword addressing (SDWA), lane by lane.
//!
//! One file for the encodings (their 16-bit and 64-bit arithmetic in `fp16`, `fp64`): they
//! share the operand readers, the lane functions and the plans made when an instruction is
//! decoded.

mod fp16;
mod fp64;

use super::scalar::{compare, Cmp};
use super::*;
use crate::decode::{Format, Instruction};
use crate::exec::{Context, ExecResult, Wave};
use crate::Arch;

/// Vector ALU: the operands of each encoding, then the operation lane by lane.
pub(super) fn valu(
    w: &mut Wave,
    inst: &Instruction,
    facts: Option<&ValuFacts>,
    ctx: &mut Context<'_>,
) -> ExecResult<()> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    if inst.format == Format::Vopd {
        let y = inst.second.unwrap_or("");
        let vdst_x = bits(w1, 24, 8);
        let vdst_y = (bits(w1, 17, 7) << 1) | ((vdst_x & 1) ^ 1);
        let x_srcs = [bits(w0, 0, 9), 256 + bits(w0, 9, 8)];
        let y_srcs = [bits(w1, 0, 9), 256 + bits(w1, 9, 8)];
        // both read before either writes
        let x = inst.mnemonic.replace("v_dual_", "v_");
        let x_facts = ValuFacts::of(&x);
        let xs = lanes_op(w, inst, ctx, &x_facts, &x_srcs, vdst_x, [Part::WHOLE; 3])?;
        let y = y.replace("v_dual_", "v_");
        let y_facts = ValuFacts::of(&y);
        let ys = lanes_op(w, inst, ctx, &y_facts, &y_srcs, vdst_y, [Part::WHOLE; 3])?;
        store(w, vdst_x, &xs);
        store(w, vdst_y, &ys);
        return Ok(());
    }
    let m = inst.mnemonic;
    let name = m.trim_end_matches("_e32").trim_end_matches("_e64");
    let facts = match facts {
        Some(f) => *f,
        None => ValuFacts::of(name),
    };
    let (srcs, vdst, sdst): ([u32; 3], u32, Option<u32>) = match inst.format {
        Format::Vop1 => ([bits(w0, 0, 9), 0, 0], bits(w0, 17, 8), None),
        Format::Vop2 => (
            [bits(w0, 0, 9), 256 + bits(w0, 9, 8), 0],
            bits(w0, 17, 8),
            None,
        ),
        Format::Vopc => ([bits(w0, 0, 9), 256 + bits(w0, 9, 8), 0], 0, Some(VCC_LO)),
        _ => {
            let srcs = [bits(w1, 0, 9), bits(w1, 9, 9), bits(w1, 18, 9)];
            if bits(w1, 27, 2) != 0 || bits(w0, 15, 1) != 0 {
                // omod and clamp: not yet
                return Err(unimplemented(inst, ctx));
            }
            // op_sel (high halves of 16-bit operands) only where the operation has them
            let cmp16 =
                name.starts_with("v_cmp") && (name.ends_with("16") || name.ends_with("_f16"));
            if !facts.vop3b && !cmp16 && bits(w0, 11, 4) != 0 && facts.halves == (false, [false; 3])
            {
                return Err(unimplemented(inst, ctx));
            }
            let sdst = facts.vop3b.then(|| bits(w0, 8, 7));
            (srcs, bits(w0, 0, 8), sdst)
        }
    };
    if name.starts_with("v_cmp") {
        let cmpx = name.starts_with("v_cmpx_");
        let cmp = name
            .trim_start_matches("v_cmpx_")
            .trim_start_matches("v_cmp_");
        let ty = cmp.rsplit('_').next().unwrap_or("");
        let op = &cmp[..cmp.len() - ty.len() - 1];
        // 16-bit compares read a half of each source: gfx11 names it in bit 7 of a VGPR field
        // of the 32-bit encoding, VOP3 in op_sel
        let mut srcs = srcs;
        let mut hi = [false; 2];
        if matches!(ty, "u16" | "i16" | "f16") {
            match inst.format {
                Format::Vop3 => {
                    for (i, h) in hi.iter_mut().enumerate() {
                        *h = bits(w0, 11 + i as u32, 1) != 0;
                    }
                }
                _ if ctx.arch == Arch::Gfx1100 => {
                    for (i, h) in hi.iter_mut().enumerate() {
                        if srcs[i] >= 256 {
                            *h = srcs[i] & 0x80 != 0;
                            srcs[i] = 256 + (srcs[i] & 0x7f);
                        }
                    }
                }
                _ => {}
            }
        }
        let half = |w: &Wave, i: usize, lane: usize| -> u32 {
            let v = match inline_f16(srcs[i]) {
                Some(h) if ty == "f16" => h,
                _ => read32(w, inst, srcs[i], lane),
            };
            (if hi[i] { v >> 16 } else { v }) & 0xffff
        };
        // VOP3's abs and neg on float operands
        let (abs, neg) = if inst.format == Format::Vop3 {
            (bits(w0, 8, 3), bits(w1, 29, 3))
        } else {
            (0, 0)
        };
        let modify = |x: f64, i: usize| {
            let x = if abs >> i & 1 != 0 { x.abs() } else { x };
            if neg >> i & 1 != 0 {
                -x
            } else {
                x
            }
        };
        let mut mask = 0u64;
        if op == "class" {
            // src0's class (a float, its modifiers applied) in src1's mask of classes
            for lane in 0..w.lanes {
                if !w.active(lane) {
                    continue;
                }
                let classes = read32(w, inst, srcs[1], lane);
                let x = match ty {
                    "f16" => Float::half(half(w, 0, lane) as u16),
                    "f32" => Float::single(read32(w, inst, srcs[0], lane)),
                    "f64" => Float::double(read64(w, inst, srcs[0], lane, true)),
                    _ => return Err(unimplemented(inst, ctx)),
                };
                let x = x.modified(abs & 1 != 0, neg & 1 != 0);
                mask |= u64::from(classes >> x.class() & 1) << lane;
            }
            let dst = if inst.format == Format::Vop3 {
                vdst
            } else {
                VCC_LO
            };
            if cmpx {
                w.set_exec(mask);
                if ctx.arch == Arch::Gfx942 {
                    write_mask(w, ctx, dst, mask);
                }
            } else {
                write_mask(w, ctx, dst, mask);
            }
            return Ok(());
        }
        // the comparison and the operand type worked out once, then lane by lane
        let c = Cmp::parse(op).ok_or_else(|| unimplemented(inst, ctx))?;
        let int = |signed: bool, width: u32| c.int(0, 0, signed, width).map(|_| (signed, width));
        let kind = match ty {
            "u16" | "i16" => CmpOperands::Half(int(ty == "i16", 16)),
            "u32" | "i32" => CmpOperands::Word(int(ty == "i32", 32)),
            "u64" | "i64" => CmpOperands::Double(int(ty == "i64", 64)),
            "f16" => CmpOperands::F16,
            "f32" => CmpOperands::F32,
            "f64" => CmpOperands::F64,
            _ => return Err(unimplemented(inst, ctx)),
        };
        let exec = w.exec();
        for lane in 0..w.lanes {
            if exec >> lane & 1 == 0 {
                continue;
            }
            let r = match kind {
                CmpOperands::Half(Some((signed, width))) => c.int(
                    u64::from(half(w, 0, lane)),
                    u64::from(half(w, 1, lane)),
                    signed,
                    width,
                ),
                CmpOperands::Word(Some((signed, width))) => c.int(
                    u64::from(read32(w, inst, srcs[0], lane)),
                    u64::from(read32(w, inst, srcs[1], lane)),
                    signed,
                    width,
                ),
                CmpOperands::Double(Some((signed, width))) => c.int(
                    read64(w, inst, srcs[0], lane, false),
                    read64(w, inst, srcs[1], lane, false),
                    signed,
                    width,
                ),
                CmpOperands::F16 => Some(c.float(
                    modify(f64::from(f16_to_f32(half(w, 0, lane) as u16)), 0),
                    modify(f64::from(f16_to_f32(half(w, 1, lane) as u16)), 1),
                )),
                CmpOperands::F32 => Some(c.float(
                    modify(f64::from(f32::from_bits(read32(w, inst, srcs[0], lane))), 0),
                    modify(f64::from(f32::from_bits(read32(w, inst, srcs[1], lane))), 1),
                )),
                CmpOperands::F64 => Some(c.float(
                    modify(f64::from_bits(read64(w, inst, srcs[0], lane, true)), 0),
                    modify(f64::from_bits(read64(w, inst, srcs[1], lane, true)), 1),
                )),
                _ => None,
            };
            let r = r.ok_or_else(|| unimplemented(inst, ctx))?;
            mask |= u64::from(r) << lane;
        }
        if cmpx {
            w.set_exec(mask);
            // gfx9's v_cmpx also writes its scalar destination (VCC for the 32-bit form)
            if ctx.arch == Arch::Gfx942 {
                let dst = if inst.format == Format::Vop3 {
                    vdst
                } else {
                    VCC_LO
                };
                write_mask(w, ctx, dst, mask);
            }
        } else {
            let dst = if inst.format == Format::Vop3 {
                vdst
            } else {
                VCC_LO
            };
            write_mask(w, ctx, dst, mask);
        }
        return Ok(());
    }
    match name {
        "v_readlane_b32" => {
            let lane = read32(w, inst, srcs[1], 0) as usize % w.lanes;
            let v = read32(w, inst, srcs[0], lane);
            write_s32(w, ctx, vdst, v);
            return Ok(());
        }
        "v_writelane_b32" => {
            // one lane written, whatever EXEC holds
            let lane = read32(w, inst, srcs[1], 0) as usize % w.lanes;
            w.v[vdst as usize][lane] = read32(w, inst, srcs[0], 0);
            return Ok(());
        }
        "v_movrels_b32" | "v_movreld_b32" | "v_movrelsd_b32" => {
            let m0 = w.s[m0_code(ctx.arch) as usize];
            let (src, dst) = match name {
                "v_movrels_b32" => (srcs[0] + m0, vdst),
                "v_movreld_b32" => (srcs[0], vdst + m0),
                _ => (srcs[0] + m0, vdst + m0),
            };
            if src < 256 || (dst as usize) >= w.v.len() || (src - 256) as usize >= w.v.len() {
                return Err(unimplemented(inst, ctx));
            }
            for lane in 0..w.lanes {
                if w.active(lane) {
                    w.v[dst as usize][lane] = w.v[(src - 256) as usize][lane];
                }
            }
            return Ok(());
        }
        _ => {}
    }
    if name == "v_readfirstlane_b32" {
        let lane = (0..w.lanes).find(|&l| w.active(l)).unwrap_or(0);
        let v = read32(w, inst, srcs[0], lane);
        write_s32(w, ctx, vdst, v);
        return Ok(());
    }
    // carries: the ops that write a lane mask beside their result
    if let Some(carry_dst) = sdst.or(vcc_carry(name).then_some(VCC_LO)) {
        let carry_in = match inst.format {
            Format::Vop2 => VCC_LO,
            _ => srcs[2],
        };
        let cin = read_mask(w, inst, carry_in);
        let mut cout = 0u64;
        let mut out: [Option<u64>; 64] = [None; 64];
        // the plain carry operations resolved once, before the lanes
        let plain: Option<CarryFn> = match name {
            "v_add_co_u32" => Some(|a, b, _| (a + b, (a + b) >> 32)),
            "v_add_co_ci_u32" | "v_addc_co_u32" => Some(|a, b, c| (a + b + c, (a + b + c) >> 32)),
            "v_sub_co_u32" => Some(|a: u64, b, _| (a.wrapping_sub(b), u64::from(b > a))),
            "v_subrev_co_u32" => Some(|a, b: u64, _| (b.wrapping_sub(a), u64::from(a > b))),
            "v_sub_co_ci_u32" | "v_subb_co_u32" => {
                Some(|a: u64, b, c| (a.wrapping_sub(b + c), u64::from(b + c > a)))
            }
            "v_subrev_co_ci_u32" | "v_subbrev_co_u32" => {
                Some(|a, b: u64, c| (b.wrapping_sub(a + c), u64::from(a + c > b)))
            }
            _ => None,
        };
        let exec = w.exec();
        for (lane, slot) in out.iter_mut().enumerate().take(w.lanes) {
            if exec >> lane & 1 == 0 {
                continue;
            }
            let a = u64::from(read32(w, inst, srcs[0], lane));
            let b = u64::from(read32(w, inst, srcs[1], lane));
            let c = cin >> lane & 1;
            if let Some(f) = plain {
                let (r, carry) = f(a, b, c);
                cout |= (carry & 1) << lane;
                *slot = Some(r & 0xffff_ffff);
                continue;
            }
            match name {
                "v_div_scale_f64" => {
                    // as v_div_scale_f32: the unscaled case only
                    let s0 = read64(w, inst, srcs[0], lane, true);
                    let den = f64::from_bits(read64(w, inst, srcs[1], lane, true));
                    let num = f64::from_bits(read64(w, inst, srcs[2], lane, true));
                    if den == 0.0 || num == 0.0 {
                        *slot = Some(f64::NAN.to_bits());
                        continue;
                    }
                    if !den.is_finite() || !num.is_finite() || fp64::div_would_scale(den, num) {
                        return Err(unimplemented(inst, ctx));
                    }
                    *slot = Some(s0);
                    continue;
                }
                "v_div_scale_f32" => {
                    // the first step of division: the operand scaled where the quotient
                    // would leave f32's range, and a flag saying so. Only the unscaled case
                    // is emulated; a scaled one is refused, not approximated.
                    let (s0, den, num) = (a as u32, b as u32, read32(w, inst, srcs[2], lane));
                    let exp = |x: u32| ((x >> 23) & 0xff) as i32;
                    let (fd, fnum) = (f32::from_bits(den), f32::from_bits(num));
                    let tiny = |x: f32| x != 0.0 && !x.is_normal() && x.is_finite();
                    if fd == 0.0 || fnum == 0.0 {
                        // a zero operand: NaN here, and v_div_fixup_f32 gives the quotient
                        // (an infinity, a zero or NaN)
                        *slot = Some(u64::from(f32::NAN.to_bits()));
                        continue;
                    }
                    let scaled = exp(num) - exp(den) >= 96
                        || tiny(fd)
                        || tiny(1.0 / fd)
                        || tiny(fnum / fd)
                        || exp(num) <= 23;
                    if scaled {
                        return Err(unimplemented(inst, ctx));
                    }
                    *slot = Some(u64::from(s0));
                    continue;
                }
                "v_mad_u64_u32" => {
                    *slot = Some((a * b).wrapping_add(read64(w, inst, srcs[2], lane, false)));
                    continue;
                }
                "v_mad_i64_i32" => {
                    let r = (i64::from(a as u32 as i32) * i64::from(b as u32 as i32))
                        .wrapping_add(read64(w, inst, srcs[2], lane, false) as i64);
                    *slot = Some(r as u64);
                    continue;
                }
                _ => return Err(unimplemented(inst, ctx)),
            }
        }
        let pair = name.starts_with("v_mad_") || name == "v_div_scale_f64";
        for (lane, r) in out.into_iter().enumerate() {
            if let Some(r) = r {
                w.v[vdst as usize][lane] = r as u32;
                if pair {
                    w.v[vdst as usize + 1][lane] = (r >> 32) as u32;
                }
            }
        }
        if !name.starts_with("v_mad_") {
            write_mask(w, ctx, carry_dst, cout);
        }
        return Ok(());
    }
    let (dst16, src16) = facts.halves;
    if !dst16 && src16 == [false; 3] {
        let results = lanes_op(w, inst, ctx, &facts, &srcs, vdst, [Part::WHOLE; 3])?;
        store(w, vdst, &results);
        return Ok(());
    }
    // 16-bit operands: which half of each register. gfx11's 32-bit encodings name a VGPR's
    // half in bit 7 of its field (v1.l, v1.h: "true16"); VOP3 picks halves with op_sel.
    let mut srcs = srcs;
    let mut hi = [false; 3];
    let (mut vdst, mut dst_hi) = (vdst, false);
    match inst.format {
        Format::Vop3 => {
            let op_sel = bits(w0, 11, 4);
            for (i, h) in hi.iter_mut().enumerate() {
                *h = src16[i] && op_sel >> i & 1 != 0;
            }
            dst_hi = dst16 && op_sel >> 3 & 1 != 0;
        }
        _ if ctx.arch == Arch::Gfx1100 => {
            for i in 0..2 {
                if src16[i] && srcs[i] >= 256 {
                    hi[i] = srcs[i] & 0x80 != 0;
                    srcs[i] = 256 + (srcs[i] & 0x7f);
                }
            }
            if dst16 {
                dst_hi = vdst & 0x80 != 0;
                vdst &= 0x7f;
            }
        }
        _ => {}
    }
    let parts = hi.map(|h| if h { Part::HIGH } else { Part::WHOLE });
    let results = lanes_op(w, inst, ctx, &facts, &srcs, vdst, parts)?;
    if !dst16 {
        store(w, vdst, &results);
        return Ok(());
    }
    // a 16-bit result: gfx11 keeps the other half; gfx9 zeroes the high half unless op_sel
    // put the result there
    let keep = ctx.arch == Arch::Gfx1100 || dst_hi;
    for (lane, r) in results.iter().enumerate() {
        if let Some((v, _)) = r {
            let old = w.v[vdst as usize][lane];
            let half = v & 0xffff;
            w.v[vdst as usize][lane] = match (dst_hi, keep) {
                (true, _) => (old & 0xffff) | (half << 16),
                (false, true) => (old & 0xffff_0000) | half,
                (false, false) => half,
            };
        }
    }
    Ok(())
}

/// VOP1/VOP2 with an SDWA word (gfx9): each source a byte, word or dword of its register
/// (zero- or sign-extended), the result written to a byte, word or dword of the
/// destination, the rest of it zeroed, sign-extended or kept.
pub(super) fn sdwa(
    w: &mut Wave,
    inst: &Instruction,
    facts: Option<&ValuFacts>,
    ctx: &Context<'_>,
) -> ExecResult<()> {
    let (w0, sd) = (inst.words[0], inst.words[1]);
    let name = inst.mnemonic.trim_end_matches("_sdwa");
    // VOPC's bits 15:8 are its destination; VOP1/VOP2's clamp and omod
    let clamp_omod = inst.format != Format::VopcSdwa && bits(sd, 13, 3) != 0;
    if clamp_omod || (inst.format == Format::VopcSdwa && (bits(sd, 20, 2) | bits(sd, 28, 2)) != 0) {
        // clamp, omod, and a compare's neg/abs: not yet
        return Err(unimplemented(inst, ctx));
    }
    // S0 / S1: the source is a scalar register (else a VGPR)
    let src0 = bits(sd, 0, 8) + if bits(sd, 23, 1) != 0 { 0 } else { 256 };
    let src1 = bits(w0, 9, 8) + if bits(sd, 31, 1) != 0 { 0 } else { 256 };
    let vdst = bits(w0, 17, 8);
    let srcs = [src0, src1, 0];
    let parts = [
        Part::sdwa(bits(sd, 16, 3), bits(sd, 19, 1) != 0),
        Part::sdwa(bits(sd, 24, 3), bits(sd, 27, 1) != 0),
        Part::WHOLE,
    ];
    if inst.format == Format::VopcSdwa {
        // a compare of the selected parts into a lane mask: SDST where SD is set, else VCC
        let cmp = name.trim_start_matches("v_cmp_");
        let ty = cmp.rsplit('_').next().unwrap_or("");
        let op = &cmp[..cmp.len().saturating_sub(ty.len() + 1)];
        let mut mask = 0u64;
        for lane in 0..w.lanes {
            if !w.active(lane) {
                continue;
            }
            // a half compare's inline float constants are halves
            let operand = |i: usize| match inline_f16(srcs[i]) {
                Some(h) if ty == "f16" => h,
                _ => parts[i].of(read32(w, inst, srcs[i], lane)),
            };
            let (a, b) = (operand(0), operand(1));
            if op == "class" {
                let x = match ty {
                    "f16" => Float::half(a as u16),
                    "f32" => Float::single(a),
                    _ => return Err(unimplemented(inst, ctx)),
                };
                mask |= u64::from(b >> x.class() & 1) << lane;
                continue;
            }
            let r = match ty {
                "u32" | "i32" => compare(op, u64::from(a), u64::from(b), ty == "i32", 32),
                "u16" | "i16" => compare(op, u64::from(a), u64::from(b), ty == "i16", 16),
                "f32" => fcmp(
                    op,
                    f64::from(f32::from_bits(a)),
                    f64::from(f32::from_bits(b)),
                ),
                "f16" => fcmp(
                    op,
                    f64::from(f16_to_f32(a as u16)),
                    f64::from(f16_to_f32(b as u16)),
                ),
                _ => None,
            };
            let r = r.ok_or_else(|| unimplemented(inst, ctx))?;
            mask |= u64::from(r) << lane;
        }
        let dst = if bits(sd, 15, 1) != 0 {
            bits(sd, 8, 7)
        } else {
            VCC_LO
        };
        write_mask(w, ctx, dst, mask);
        return Ok(());
    }
    let facts = match facts {
        Some(f) => *f,
        None => ValuFacts::of(name),
    };
    let results = lanes_op(w, inst, ctx, &facts, &srcs, vdst, parts)?;
    let dst = Part::sdwa(bits(sd, 8, 3), false);
    let unused = bits(sd, 11, 2);
    for (lane, r) in results.iter().enumerate() {
        let Some((v, _)) = r else { continue };
        let old = w.v[vdst as usize][lane];
        let mask = if dst.bits == 32 {
            u32::MAX
        } else {
            ((1u32 << dst.bits) - 1) << dst.shift
        };
        let placed = (v << dst.shift) & mask;
        w.v[vdst as usize][lane] = match unused {
            // keep the destination's other bits
            2 => (old & !mask) | placed,
            // sign-extend the written part upwards
            1 if dst.shift + dst.bits < 32 && placed >> (dst.shift + dst.bits - 1) & 1 != 0 => {
                placed | !((1u32 << (dst.shift + dst.bits)) - 1)
            }
            _ => placed,
        };
    }
    Ok(())
}

/// Whether VOP3's float modifiers apply to `name`'s operands: float operations, and the
/// selects and moves that pass floats through.
fn float_op(name: &str) -> bool {
    name.contains("_f32")
        || name.contains("_f64")
        || name.contains("_f16")
        || name == "v_cndmask_b32"
}

/// Which operands of `name` (without its encoding suffix) are 16 bits: (the result, each
/// source).
fn halves(name: &str) -> (bool, [bool; 3]) {
    let is16 = |t: &str| matches!(t, "f16" | "b16" | "i16" | "u16");
    if let Some(types) = name.strip_prefix("v_cvt_") {
        let mut parts = types.split('_');
        let (d, s) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        return (is16(d), [is16(s), false, false]);
    }
    // compares write a mask; dot products read packed pairs and write 32 bits
    if name.starts_with("v_cmp") || name.starts_with("v_dot") {
        return (false, [false; 3]);
    }
    if name == "v_pack_b32_f16" {
        // two halves in, one register out
        return (false, [true, true, false]);
    }
    match name.rsplit('_').next() {
        // shifts take their amount in a 16-bit operand too
        Some(t) if is16(t) => (true, [true, true, true]),
        _ => (false, [false; 3]),
    }
}

/// The carry operations whose 32-bit encodings write their carry to VCC.
fn vcc_carry(name: &str) -> bool {
    matches!(
        name,
        "v_add_co_ci_u32"
            | "v_addc_co_u32"
            | "v_sub_co_ci_u32"
            | "v_subb_co_u32"
            | "v_add_co_u32"
            | "v_sub_co_u32"
            | "v_subrev_co_u32"
            | "v_subbrev_co_u32"
            | "v_subrev_co_ci_u32"
    )
}

/// The VOP3 operations whose bits 14:8 are a scalar destination (VOP3b).
fn vop3b(name: &str) -> bool {
    matches!(
        name,
        "v_add_co_u32"
            | "v_sub_co_u32"
            | "v_subrev_co_u32"
            | "v_add_co_ci_u32"
            | "v_sub_co_ci_u32"
            | "v_subrev_co_ci_u32"
            | "v_subbrev_co_u32"
            | "v_addc_co_u32"
            | "v_subb_co_u32"
            | "v_mad_u64_u32"
            | "v_mad_i64_i32"
            | "v_div_scale_f32"
            | "v_div_scale_f64"
    )
}

pub(crate) fn fcmp(op: &str, a: f64, b: f64) -> Option<bool> {
    Some(Cmp::parse(op)?.float(a, b))
}

/// A vector compare's operands: integers (signed, width; None where the comparison is a
/// float-only one) or floats.
#[derive(Clone, Copy)]
enum CmpOperands {
    Half(Option<(bool, u32)>),
    Word(Option<(bool, u32)>),
    Double(Option<(bool, u32)>),
    F16,
    F32,
    F64,
}

/// A carry operation on (a, b, carry in): (result, carry out).
type CarryFn = fn(u64, u64, u64) -> (u64, u64);

/// A lane's result: one register or a pair.
type LaneResult = Option<(u32, Option<u32>)>;

pub(super) fn store(w: &mut Wave, vdst: u32, results: &[LaneResult]) {
    for (lane, r) in results.iter().enumerate() {
        if let Some((lo, hi)) = r {
            w.v[vdst as usize][lane] = *lo;
            if let Some(hi) = hi {
                w.v[vdst as usize + 1][lane] = *hi;
            }
        }
    }
}

fn f32s(x: f32) -> LaneResult {
    Some((x.to_bits(), None))
}

/// What one lane of a vector operation reads.
struct LaneCtx<'a> {
    w: &'a Wave,
    inst: &'a Instruction,
    srcs: &'a [u32],
    lane: usize,
    vdst: u32,
    /// The part of each source an operation reads (a half, a byte: 16-bit operands, SDWA).
    parts: [Part; 3],
    /// VOP3's float modifiers of each source: (abs, neg).
    mods: [(bool, bool); 3],
    /// The sources are f16: inline float constants read as f16 bits.
    f16: bool,
    /// Where a [`LanesPlan`] runs: each 32-bit source resolved for the whole wave (a VGPR's
    /// index, or the value every lane reads), with no parts or modifiers to apply.
    resolved: Option<[Source; 3]>,
}

/// A 32-bit source resolved once per instruction.
#[derive(Clone, Copy)]
enum Source {
    Vgpr(usize),
    Value(u32),
}

/// A part of a 32-bit operand: `bits` bits from `shift`, sign-extended or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Part {
    shift: u32,
    bits: u32,
    sext: bool,
}

impl Part {
    const WHOLE: Part = Part {
        shift: 0,
        bits: 32,
        sext: false,
    };
    const HIGH: Part = Part {
        shift: 16,
        bits: 16,
        sext: false,
    };

    /// SDWA's selector: bytes 0-3, words 0-1, the dword.
    fn sdwa(sel: u32, sext: bool) -> Part {
        match sel {
            0..=3 => Part {
                shift: 8 * sel,
                bits: 8,
                sext,
            },
            4 | 5 => Part {
                shift: 16 * (sel - 4),
                bits: 16,
                sext,
            },
            _ => Part::WHOLE,
        }
    }

    fn of(self, v: u32) -> u32 {
        if self.bits == 32 {
            return v;
        }
        let x = (v >> self.shift) & ((1 << self.bits) - 1);
        if self.sext && x >> (self.bits - 1) & 1 != 0 {
            x | !((1 << self.bits) - 1)
        } else {
            x
        }
    }
}

impl LaneCtx<'_> {
    fn s(&self, i: usize) -> u32 {
        self.srcs.get(i).copied().unwrap_or(0)
    }
    fn u(&self, i: usize) -> u32 {
        if let Some(resolved) = &self.resolved {
            return match resolved[i] {
                Source::Vgpr(r) => self.w.v[r][self.lane],
                Source::Value(v) => v,
            };
        }
        let code = self.s(i);
        let v = match inline_f16(code) {
            Some(h) if self.f16 => h,
            _ => read32(self.w, self.inst, code, self.lane),
        };
        let part = self.parts.get(i).copied().unwrap_or(Part::WHOLE);
        let v = part.of(v);
        // abs, then neg, on the operand's sign bit
        let sign = if part.bits == 16 { 1 << 15 } else { 1 << 31 };
        let (abs, neg) = self.mods.get(i).copied().unwrap_or((false, false));
        let v = if abs { v & !sign } else { v };
        if neg {
            v ^ sign
        } else {
            v
        }
    }
    fn f(&self, i: usize) -> f32 {
        f32::from_bits(self.u(i))
    }
    fn u64(&self, i: usize) -> u64 {
        read64(self.w, self.inst, self.s(i), self.lane, false)
    }
    /// A half-precision operand, widened (exactly) to f32. An operation on two halves done in
    /// f32 and rounded to f16 equals the operation rounded once to f16: f32's 24 bits are at
    /// least twice f16's 11 plus 2, where double rounding of +, -, * and / is innocuous.
    fn h(&self, i: usize) -> f32 {
        f16_to_f32(self.u(i) as u16)
    }
    fn f64(&self, i: usize) -> f64 {
        let v = read64(self.w, self.inst, self.s(i), self.lane, true);
        let (abs, neg) = self.mods.get(i).copied().unwrap_or((false, false));
        let v = if abs { v & !(1 << 63) } else { v };
        f64::from_bits(if neg { v ^ (1 << 63) } else { v })
    }
}

fn pair(x: u64) -> LaneResult {
    Some((x as u32, Some((x >> 32) as u32)))
}

/// One lane's result of an operation.
type LaneFn = fn(&LaneCtx<'_>) -> LaneResult;

/// `name` (without its encoding suffix) over the active lanes; the results, not yet written.
/// The operation is looked up once, then run lane by lane.
fn lanes_op(
    w: &Wave,
    inst: &Instruction,
    ctx: &Context<'_>,
    facts: &ValuFacts,
    srcs: &[u32],
    vdst: u32,
    parts: [Part; 3],
) -> ExecResult<Vec<LaneResult>> {
    let mods = match inst.format {
        Format::Vop3 => {
            let (abs, neg) = (bits(inst.words[0], 8, 3), bits(inst.words[1], 29, 3));
            [0, 1, 2].map(|i| (abs >> i & 1 != 0, neg >> i & 1 != 0))
        }
        // SDWA: src0's neg and abs in bits 20-21 of its word, src1's in 28-29
        Format::Vop1Sdwa | Format::Vop2Sdwa => {
            let sd = inst.words[1];
            [
                (bits(sd, 21, 1) != 0, bits(sd, 20, 1) != 0),
                (bits(sd, 29, 1) != 0, bits(sd, 28, 1) != 0),
                (false, false),
            ]
        }
        _ => [(false, false); 3],
    };
    if mods != [(false, false); 3] && !facts.float {
        // modifiers on an integer operation: not an encoding the compiler makes
        return Err(unimplemented(inst, ctx));
    }
    let op = facts.op.ok_or_else(|| unimplemented(inst, ctx))?;
    let f16 = facts.f16;
    let mut out = vec![None; w.lanes];
    for (lane, slot) in out.iter_mut().enumerate() {
        if w.active(lane) {
            *slot = op(&LaneCtx {
                w,
                inst,
                srcs,
                lane,
                vdst,
                parts,
                mods,
                f16,
                resolved: None,
            });
        }
    }
    Ok(out)
}

/// The lane function of `name` (without its encoding suffix), if the emulator has one.
fn lane_fn(name: &str) -> Option<LaneFn> {
    Some(match name {
        "v_mov_b32" => |c: &LaneCtx<'_>| Some((c.u(0), None)),
        "v_mov_b64" => |c: &LaneCtx<'_>| pair(c.u64(0)),
        "v_not_b32" => |c: &LaneCtx<'_>| Some((!c.u(0), None)),
        "v_and_b32" => |c: &LaneCtx<'_>| Some((c.u(0) & c.u(1), None)),
        "v_or_b32" => |c: &LaneCtx<'_>| Some((c.u(0) | c.u(1), None)),
        "v_xor_b32" => |c: &LaneCtx<'_>| Some((c.u(0) ^ c.u(1), None)),
        "v_add_nc_u32" | "v_add_u32" => |c: &LaneCtx<'_>| Some((c.u(0).wrapping_add(c.u(1)), None)),
        "v_sub_nc_u32" | "v_sub_u32" => |c: &LaneCtx<'_>| Some((c.u(0).wrapping_sub(c.u(1)), None)),
        "v_subrev_nc_u32" | "v_subrev_u32" => {
            |c: &LaneCtx<'_>| Some((c.u(1).wrapping_sub(c.u(0)), None))
        }
        "v_mul_lo_u32" => |c: &LaneCtx<'_>| Some((c.u(0).wrapping_mul(c.u(1)), None)),
        "v_mul_hi_u32" => {
            |c: &LaneCtx<'_>| Some((((u64::from(c.u(0)) * u64::from(c.u(1))) >> 32) as u32, None))
        }
        "v_mul_u32_u24" => {
            |c: &LaneCtx<'_>| Some(((c.u(0) & 0xff_ffff).wrapping_mul(c.u(1) & 0xff_ffff), None))
        }
        "v_lshlrev_b32" => |c: &LaneCtx<'_>| Some((c.u(1) << (c.u(0) & 31), None)),
        "v_lshrrev_b32" => |c: &LaneCtx<'_>| Some((c.u(1) >> (c.u(0) & 31), None)),
        "v_ashrrev_i32" => {
            |c: &LaneCtx<'_>| Some((((c.u(1) as i32) >> (c.u(0) & 31)) as u32, None))
        }
        "v_lshlrev_b64" => |c: &LaneCtx<'_>| pair(c.u64(1) << (c.u(0) & 63)),
        "v_lshrrev_b64" => |c: &LaneCtx<'_>| pair(c.u64(1) >> (c.u(0) & 63)),
        "v_lshl_add_u64" => {
            |c: &LaneCtx<'_>| pair((c.u64(0) << (c.u(1) & 7)).wrapping_add(c.u64(2)))
        }
        "v_lshl_add_u32" => {
            |c: &LaneCtx<'_>| Some(((c.u(0) << (c.u(1) & 31)).wrapping_add(c.u(2)), None))
        }
        "v_add_lshl_u32" => {
            |c: &LaneCtx<'_>| Some((c.u(0).wrapping_add(c.u(1)) << (c.u(2) & 31), None))
        }
        "v_lshl_or_b32" => |c: &LaneCtx<'_>| Some(((c.u(0) << (c.u(1) & 31)) | c.u(2), None)),
        "v_and_or_b32" => |c: &LaneCtx<'_>| Some(((c.u(0) & c.u(1)) | c.u(2), None)),
        "v_or3_b32" => |c: &LaneCtx<'_>| Some((c.u(0) | c.u(1) | c.u(2), None)),
        "v_add3_u32" => {
            |c: &LaneCtx<'_>| Some((c.u(0).wrapping_add(c.u(1)).wrapping_add(c.u(2)), None))
        }
        "v_bfe_u32" => |c: &LaneCtx<'_>| {
            let (o, wd) = (c.u(1) & 31, c.u(2) & 31);
            Some((
                if wd == 0 {
                    0
                } else {
                    (c.u(0) >> o) & ((1u32 << wd) - 1)
                },
                None,
            ))
        },
        "v_alignbit_b32" => |c: &LaneCtx<'_>| {
            let wide = (u64::from(c.u(0)) << 32) | u64::from(c.u(1));
            Some(((wide >> (c.u(2) & 31)) as u32, None))
        },
        "v_alignbyte_b32" => |c: &LaneCtx<'_>| {
            let wide = (u64::from(c.u(0)) << 32) | u64::from(c.u(1));
            Some(((wide >> (8 * (c.u(2) & 3))) as u32, None))
        },
        "v_bfi_b32" => |c: &LaneCtx<'_>| Some(((c.u(0) & c.u(1)) | (!c.u(0) & c.u(2)), None)),
        "v_xor3_b32" => |c: &LaneCtx<'_>| Some((c.u(0) ^ c.u(1) ^ c.u(2), None)),
        "v_xad_u32" => |c: &LaneCtx<'_>| Some(((c.u(0) ^ c.u(1)).wrapping_add(c.u(2)), None)),
        "v_max_u32" => |c: &LaneCtx<'_>| Some((c.u(0).max(c.u(1)), None)),
        "v_min_u32" => |c: &LaneCtx<'_>| Some((c.u(0).min(c.u(1)), None)),
        "v_max_i32" => |c: &LaneCtx<'_>| Some(((c.u(0) as i32).max(c.u(1) as i32) as u32, None)),
        "v_min_i32" => |c: &LaneCtx<'_>| Some(((c.u(0) as i32).min(c.u(1) as i32) as u32, None)),
        "v_max3_u32" => |c: &LaneCtx<'_>| Some((c.u(0).max(c.u(1)).max(c.u(2)), None)),
        "v_min3_u32" => |c: &LaneCtx<'_>| Some((c.u(0).min(c.u(1)).min(c.u(2)), None)),
        "v_med3_u32" => |c: &LaneCtx<'_>| {
            let mut v = [c.u(0), c.u(1), c.u(2)];
            v.sort_unstable();
            Some((v[1], None))
        },
        "v_med3_i32" => |c: &LaneCtx<'_>| {
            let mut v = [c.u(0) as i32, c.u(1) as i32, c.u(2) as i32];
            v.sort_unstable();
            Some((v[1] as u32, None))
        },
        "v_mul_hi_i32" => |c: &LaneCtx<'_>| {
            Some((
                ((i64::from(c.u(0) as i32) * i64::from(c.u(1) as i32)) >> 32) as u32,
                None,
            ))
        },
        "v_mul_i32_i24" => |c: &LaneCtx<'_>| {
            let s24 = |x: u32| ((x << 8) as i32) >> 8;
            Some((s24(c.u(0)).wrapping_mul(s24(c.u(1))) as u32, None))
        },
        // bits 63:32 of the 48-bit product of the sources' low 24 bits
        "v_mul_hi_i32_i24" => |c: &LaneCtx<'_>| {
            let s24 = |x: u32| i64::from(((x << 8) as i32) >> 8);
            Some((((s24(c.u(0)) * s24(c.u(1))) >> 32) as u32, None))
        },
        "v_mul_hi_u32_u24" => |c: &LaneCtx<'_>| {
            let u24 = |x: u32| u64::from(x & 0xff_ffff);
            Some((((u24(c.u(0)) * u24(c.u(1))) >> 32) as u32, None))
        },
        "v_perm_b32" => |c: &LaneCtx<'_>| {
            // bytes of {src0, src1} picked by the selector's bytes
            let pool = (u64::from(c.u(0)) << 32) | u64::from(c.u(1));
            let sel = c.u(2);
            let mut r = 0u32;
            for i in 0..4 {
                let s = (sel >> (8 * i)) & 0xff;
                let byte = match s {
                    0..=7 => ((pool >> (8 * s)) & 0xff) as u32,
                    8..=11 => {
                        // sign of a 16-bit half
                        let at = 8 * (2 * (s - 8) + 1);
                        if (pool >> (at + 7)) & 1 != 0 {
                            0xff
                        } else {
                            0
                        }
                    }
                    12 => 0,
                    _ => 0xff,
                };
                r |= byte << (8 * i);
            }
            Some((r, None))
        },
        "v_ldexp_f32" => |c: &LaneCtx<'_>| f32s(c.f(0) * (c.u(1) as i32 as f32).exp2()),
        "v_div_fmas_f32" => |c: &LaneCtx<'_>| {
            // with the scale flag clear (the only case v_div_scale_f32 lets through): an fma
            f32s(c.f(0).mul_add(c.f(1), c.f(2)))
        },
        "v_div_fixup_f32" => |c: &LaneCtx<'_>| {
            // the quotient's special cases, else the approximation with the right sign
            let (q, den, num) = (c.f(0), c.f(1), c.f(2));
            let sign = (den.to_bits() ^ num.to_bits()) & 0x8000_0000;
            let signed = |x: f32| f32::from_bits(x.to_bits() & 0x7fff_ffff | sign);
            let invalid = den.is_nan()
                || num.is_nan()
                || (den == 0.0 && num == 0.0)
                || (den.is_infinite() && num.is_infinite());
            f32s(if invalid {
                f32::NAN
            } else if den == 0.0 || num.is_infinite() {
                signed(f32::INFINITY)
            } else if den.is_infinite() || num == 0.0 {
                signed(0.0)
            } else {
                signed(q)
            })
        },
        "v_max3_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).max(c.f(1)).max(c.f(2))),
        "v_min3_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).min(c.f(1)).min(c.f(2))),
        "v_cvt_f32_f16" => |c: &LaneCtx<'_>| f32s(f16_to_f32(c.u(0) as u16)),
        "v_cvt_f16_f32" => |c: &LaneCtx<'_>| Some((u32::from(f32_to_f16(c.f(0))), None)),
        "v_cvt_f32_ubyte0" => |c: &LaneCtx<'_>| f32s((c.u(0) & 0xff) as f32),
        "v_cvt_f32_ubyte1" => |c: &LaneCtx<'_>| f32s(((c.u(0) >> 8) & 0xff) as f32),
        "v_cvt_f32_ubyte2" => |c: &LaneCtx<'_>| f32s(((c.u(0) >> 16) & 0xff) as f32),
        "v_cvt_f32_ubyte3" => |c: &LaneCtx<'_>| f32s((c.u(0) >> 24) as f32),
        "v_bfrev_b32" => |c: &LaneCtx<'_>| Some((c.u(0).reverse_bits(), None)),
        "v_mbcnt_lo_u32_b32" => |c: &LaneCtx<'_>| {
            let below = if c.lane >= 32 {
                u32::MAX
            } else {
                (1u32 << c.lane) - 1
            };
            Some(((c.u(0) & below).count_ones().wrapping_add(c.u(1)), None))
        },
        "v_mbcnt_hi_u32_b32" => |c: &LaneCtx<'_>| {
            let below = if c.lane < 32 {
                0
            } else {
                (1u64 << (c.lane - 32)) as u32 - 1
            };
            Some(((c.u(0) & below).count_ones().wrapping_add(c.u(1)), None))
        },
        "v_pack_b32_f16" => |c: &LaneCtx<'_>| Some(((c.u(0) & 0xffff) | (c.u(1) << 16), None)),
        // RDNA3: minmax is the max of (the min of the first two) and the third; maxmin the
        // other way round
        "v_bfe_i32" => |c: &LaneCtx<'_>| {
            let (o, wd) = (c.u(1) & 31, c.u(2) & 31);
            if wd == 0 {
                return Some((0, None));
            }
            let v = ((c.u(0) >> o) << (32 - wd)) as i32 >> (32 - wd);
            Some((v as u32, None))
        },
        // gfx9's f16 pair dot product into the f32 destination: the products are exact in
        // f32, the three terms summed exactly (f64) and rounded once
        "v_dot2c_f32_f16" => |c: &LaneCtx<'_>| {
            let half = |x: u32, i: u32| f64::from(f16_to_f32((x >> (16 * i)) as u16));
            let (a, b) = (c.u(0), c.u(1));
            let acc = f64::from(f32::from_bits(c.w.v[c.vdst as usize][c.lane]));
            let dot = half(a, 0) * half(b, 0) + half(a, 1) * half(b, 1) + acc;
            f32s(dot as f32)
        },
        // gfx9's 4-way byte dot products (gfx11's iu8 form is VOP3P: see vop3p)
        "v_dot4c_i32_i8" => |c: &LaneCtx<'_>| {
            let byte = |x: u32, i: u32| ((x >> (8 * i)) & 0xff) as u8 as i8 as i32;
            let (a, b) = (c.u(0), c.u(1));
            let dot: i32 = (0..4).map(|i| byte(a, i) * byte(b, i)).sum();
            let acc = c.w.v[c.vdst as usize][c.lane] as i32;
            Some((dot.wrapping_add(acc) as u32, None))
        },
        "v_dot4_i32_i8" => |c: &LaneCtx<'_>| {
            let byte = |x: u32, i: u32| ((x >> (8 * i)) & 0xff) as u8 as i8 as i32;
            let (a, b) = (c.u(0), c.u(1));
            let dot: i32 = (0..4).map(|i| byte(a, i) * byte(b, i)).sum();
            Some((dot.wrapping_add(c.u(2) as i32) as u32, None))
        },
        "v_dot4_u32_u8" => |c: &LaneCtx<'_>| {
            let byte = |x: u32, i: u32| (x >> (8 * i)) & 0xff;
            let (a, b) = (c.u(0), c.u(1));
            let dot: u32 = (0..4).map(|i| byte(a, i) * byte(b, i)).sum();
            Some((dot.wrapping_add(c.u(2)), None))
        },
        // the 32-bit encodings' multiply-adds with a literal K: S0 * K + S1, S0 * S1 + K
        "v_fmamk_f32" => |c: &LaneCtx<'_>| {
            f32s(
                c.f(0)
                    .mul_add(f32::from_bits(c.inst.literal().unwrap_or(0)), c.f(1)),
            )
        },
        "v_fmaak_f32" => |c: &LaneCtx<'_>| {
            f32s(
                c.f(0)
                    .mul_add(c.f(1), f32::from_bits(c.inst.literal().unwrap_or(0))),
            )
        },
        "v_minmax_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).min(c.f(1)).max(c.f(2))),
        "v_maxmin_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).max(c.f(1)).min(c.f(2))),
        "v_minmax_i32" => |c: &LaneCtx<'_>| {
            Some((
                (c.u(0) as i32).min(c.u(1) as i32).max(c.u(2) as i32) as u32,
                None,
            ))
        },
        "v_maxmin_i32" => |c: &LaneCtx<'_>| {
            Some((
                (c.u(0) as i32).max(c.u(1) as i32).min(c.u(2) as i32) as u32,
                None,
            ))
        },
        "v_minmax_u32" => |c: &LaneCtx<'_>| Some((c.u(0).min(c.u(1)).max(c.u(2)), None)),
        "v_maxmin_u32" => |c: &LaneCtx<'_>| Some((c.u(0).max(c.u(1)).min(c.u(2)), None)),
        "v_med3_f32" => |c: &LaneCtx<'_>| {
            let (a, b, d) = (c.f(0), c.f(1), c.f(2));
            f32s(a.max(b).min(a.min(b).max(d)))
        },
        // 16-bit integer operations: the low 16 bits of the result are written
        "v_and_b16" => |c: &LaneCtx<'_>| Some((c.u(0) & c.u(1), None)),
        "v_or_b16" => |c: &LaneCtx<'_>| Some((c.u(0) | c.u(1), None)),
        "v_xor_b16" => |c: &LaneCtx<'_>| Some((c.u(0) ^ c.u(1), None)),
        "v_not_b16" => |c: &LaneCtx<'_>| Some((!c.u(0), None)),
        "v_lshlrev_b16" => |c: &LaneCtx<'_>| Some((c.u(1) << (c.u(0) & 15), None)),
        "v_lshrrev_b16" => |c: &LaneCtx<'_>| Some(((c.u(1) & 0xffff) >> (c.u(0) & 15), None)),
        "v_ashrrev_i16" => {
            |c: &LaneCtx<'_>| Some(((c.u(1) as u16 as i16 >> (c.u(0) & 15)) as u16 as u32, None))
        }
        "v_add_nc_u16" | "v_add_u16" => |c: &LaneCtx<'_>| Some((c.u(0).wrapping_add(c.u(1)), None)),
        "v_sub_nc_u16" | "v_sub_u16" => |c: &LaneCtx<'_>| Some((c.u(0).wrapping_sub(c.u(1)), None)),
        "v_subrev_u16" => |c: &LaneCtx<'_>| Some((c.u(1).wrapping_sub(c.u(0)), None)),
        "v_mul_lo_u16" => |c: &LaneCtx<'_>| Some((c.u(0).wrapping_mul(c.u(1)), None)),
        "v_max_u16" => |c: &LaneCtx<'_>| Some(((c.u(0) & 0xffff).max(c.u(1) & 0xffff), None)),
        "v_min_u16" => |c: &LaneCtx<'_>| Some(((c.u(0) & 0xffff).min(c.u(1) & 0xffff), None)),
        "v_max_i16" => {
            |c: &LaneCtx<'_>| Some(((c.u(0) as i16).max(c.u(1) as i16) as u16 as u32, None))
        }
        "v_min_i16" => {
            |c: &LaneCtx<'_>| Some(((c.u(0) as i16).min(c.u(1) as i16) as u16 as u32, None))
        }
        "v_cvt_f16_u16" => {
            |c: &LaneCtx<'_>| Some((u32::from(f32_to_f16((c.u(0) & 0xffff) as f32)), None))
        }
        "v_cvt_f16_i16" => {
            |c: &LaneCtx<'_>| Some((u32::from(f32_to_f16(f32::from(c.u(0) as i16))), None))
        }
        "v_add_f16" => |c: &LaneCtx<'_>| Some((u32::from(f32_to_f16(c.h(0) + c.h(1))), None)),
        "v_sub_f16" => |c: &LaneCtx<'_>| Some((u32::from(f32_to_f16(c.h(0) - c.h(1))), None)),
        "v_mul_f16" => |c: &LaneCtx<'_>| Some((u32::from(f32_to_f16(c.h(0) * c.h(1))), None)),
        "v_max_f16" => |c: &LaneCtx<'_>| Some((u32::from(f32_to_f16(c.h(0).max(c.h(1)))), None)),
        "v_min_f16" => |c: &LaneCtx<'_>| Some((u32::from(f32_to_f16(c.h(0).min(c.h(1)))), None)),
        "v_mov_b16" => |c: &LaneCtx<'_>| Some((c.u(0) & 0xffff, None)),
        "v_cndmask_b32" | "v_cndmask_b16" => |c: &LaneCtx<'_>| {
            let mask = if c.inst.format == Format::Vop3 {
                read_mask(c.w, c.inst, c.s(2))
            } else {
                read_mask(c.w, c.inst, VCC_LO)
            };
            Some((
                if mask >> c.lane & 1 != 0 {
                    c.u(1)
                } else {
                    c.u(0)
                },
                None,
            ))
        },
        "v_add_f32" => |c: &LaneCtx<'_>| f32s(c.f(0) + c.f(1)),
        "v_sub_f32" => |c: &LaneCtx<'_>| f32s(c.f(0) - c.f(1)),
        "v_subrev_f32" => |c: &LaneCtx<'_>| f32s(c.f(1) - c.f(0)),
        "v_mul_f32" => |c: &LaneCtx<'_>| f32s(c.f(0) * c.f(1)),
        "v_fma_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).mul_add(c.f(1), c.f(2))),
        "v_fmac_f32" => |c: &LaneCtx<'_>| {
            f32s(
                c.f(0)
                    .mul_add(c.f(1), f32::from_bits(c.w.v[c.vdst as usize][c.lane])),
            )
        },
        "v_max_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).max(c.f(1))),
        "v_min_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).min(c.f(1))),
        "v_cvt_f32_u32" => |c: &LaneCtx<'_>| f32s(c.u(0) as f32),
        "v_cvt_f32_i32" => |c: &LaneCtx<'_>| f32s(c.u(0) as i32 as f32),
        "v_cvt_u32_f32" => |c: &LaneCtx<'_>| Some((c.f(0) as u32, None)),
        "v_cvt_i32_f32" => |c: &LaneCtx<'_>| Some((c.f(0) as i32 as u32, None)),
        "v_rcp_f32" | "v_rcp_iflag_f32" => |c: &LaneCtx<'_>| f32s(1.0 / c.f(0)),
        "v_sqrt_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).sqrt()),
        "v_rsq_f32" => |c: &LaneCtx<'_>| f32s(1.0 / c.f(0).sqrt()),
        "v_exp_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).exp2()),
        "v_log_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).log2()),
        "v_floor_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).floor()),
        "v_ceil_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).ceil()),
        "v_trunc_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).trunc()),
        "v_rndne_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).round_ties_even()),
        "v_frexp_mant_f32" => |c: &LaneCtx<'_>| f32s(fp64::frexp(f64::from(c.f(0))).0 as f32),
        "v_frexp_exp_i32_f32" => {
            |c: &LaneCtx<'_>| Some((fp64::frexp(f64::from(c.f(0))).1 as u32, None))
        }
        "v_mad_u32_u24" => |c: &LaneCtx<'_>| {
            let p = (c.u(0) & 0xff_ffff).wrapping_mul(c.u(1) & 0xff_ffff);
            Some((p.wrapping_add(c.u(2)), None))
        },
        "v_mad_i32_i24" => |c: &LaneCtx<'_>| {
            let s24 = |x: u32| ((x << 8) as i32) >> 8;
            Some((
                s24(c.u(0))
                    .wrapping_mul(s24(c.u(1)))
                    .wrapping_add(c.u(2) as i32) as u32,
                None,
            ))
        },
        // the first set bit from the top (-1 for none)
        "v_clz_i32_u32" | "v_ffbh_u32" => |c: &LaneCtx<'_>| {
            let x = c.u(0);
            Some((if x == 0 { u32::MAX } else { x.leading_zeros() }, None))
        },
        // the first bit from the top that differs from the sign (-1 for 0 and -1)
        "v_cls_i32" | "v_ffbh_i32" => |c: &LaneCtx<'_>| {
            let x = c.u(0);
            let y = x ^ ((x as i32 >> 31) as u32);
            Some((if y == 0 { u32::MAX } else { y.leading_zeros() }, None))
        },
        "v_max3_i32" => |c: &LaneCtx<'_>| {
            Some((
                (c.u(0) as i32).max(c.u(1) as i32).max(c.u(2) as i32) as u32,
                None,
            ))
        },
        "v_min3_i32" => |c: &LaneCtx<'_>| {
            Some((
                (c.u(0) as i32).min(c.u(1) as i32).min(c.u(2) as i32) as u32,
                None,
            ))
        },
        "v_max3_u16" => |c: &LaneCtx<'_>| {
            Some((
                (c.u(0) & 0xffff).max(c.u(1) & 0xffff).max(c.u(2) & 0xffff),
                None,
            ))
        },
        "v_mad_u16" | "v_mad_legacy_u16" => {
            |c: &LaneCtx<'_>| Some((c.u(0).wrapping_mul(c.u(1)).wrapping_add(c.u(2)), None))
        }
        _ => return fp64::lane_fn(name).or_else(|| fp16::lane_fn(name)),
    })
}

/// What a vector operation's name says, worked out once per instruction (for the forms that
/// do not take a [`LanesPlan`]).
#[derive(Clone, Copy)]
pub(crate) struct ValuFacts {
    op: Option<LaneFn>,
    halves: (bool, [bool; 3]),
    float: bool,
    f16: bool,
    vop3b: bool,
}

impl std::fmt::Debug for ValuFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ValuFacts({:?})", self.halves)
    }
}

impl ValuFacts {
    /// The facts of `name` (without its encoding suffix).
    pub(crate) fn of(name: &str) -> ValuFacts {
        ValuFacts {
            op: lane_fn(name),
            halves: halves(name),
            float: float_op(name),
            f16: f16_sources(name),
            vop3b: vop3b(name),
        }
    }
}

/// A vector operation resolved once, when its instruction is first decoded: one lane function
/// over whole 32- or 64-bit registers, with no modifiers, halves or lane masks to work out.
/// The instructions most of a kernel's time goes to take this form; the rest are resolved
/// each time they run ([`valu`]).
#[derive(Clone, Copy)]
pub(crate) struct LanesPlan {
    op: LaneFn,
    srcs: [u32; 3],
    vdst: u32,
    f16: bool,
}

impl std::fmt::Debug for LanesPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LanesPlan({:?} -> v{})", self.srcs, self.vdst)
    }
}

/// The plan of `inst` where it has the simple form [`LanesPlan`] describes.
pub(crate) fn lanes_plan(inst: &Instruction) -> Option<LanesPlan> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let name = inst
        .mnemonic
        .trim_end_matches("_e32")
        .trim_end_matches("_e64");
    let (srcs, vdst) = match inst.format {
        Format::Vop1 => ([bits(w0, 0, 9), 0, 0], bits(w0, 17, 8)),
        Format::Vop2 => ([bits(w0, 0, 9), 256 + bits(w0, 9, 8), 0], bits(w0, 17, 8)),
        Format::Vop3 => {
            // abs, neg, op_sel, clamp, omod: resolved each time
            if bits(w0, 8, 7) != 0 || bits(w0, 15, 1) != 0 || bits(w1, 27, 5) != 0 {
                return None;
            }
            (
                [bits(w1, 0, 9), bits(w1, 9, 9), bits(w1, 18, 9)],
                bits(w0, 0, 8),
            )
        }
        _ => return None,
    };
    let special = name.starts_with("v_cmp")
        || name.starts_with("v_movrel")
        || vop3b(name)
        || vcc_carry(name)
        || matches!(
            name,
            "v_readlane_b32" | "v_writelane_b32" | "v_readfirstlane_b32"
        );
    if special || halves(name) != (false, [false; 3]) {
        return None;
    }
    Some(LanesPlan {
        op: lane_fn(name)?,
        srcs,
        vdst,
        f16: f16_sources(name),
    })
}

/// Runs a [`LanesPlan`] over the active lanes: the results first, then the writes.
pub(super) fn run_lanes(w: &mut Wave, inst: &Instruction, p: &LanesPlan) {
    let exec = w.exec();
    let resolved = p.srcs.map(|code| match code {
        256..=511 => Source::Vgpr((code - 256) as usize),
        _ => Source::Value(match inline_f16(code) {
            Some(h) if p.f16 => h,
            _ => read32(w, inst, code, 0),
        }),
    });
    // the results field by field (the lane function's return read part by part, not copied
    // whole: the parts it stored forward to their loads)
    let mut lo = [0u32; 64];
    let mut hi = [0u32; 64];
    let mut kind = [0u8; 64];
    let mut c = LaneCtx {
        w,
        inst,
        srcs: &p.srcs,
        lane: 0,
        vdst: p.vdst,
        parts: [Part::WHOLE; 3],
        mods: [(false, false); 3],
        f16: p.f16,
        resolved: Some(resolved),
    };
    let lanes = c.w.lanes;
    for lane in 0..lanes {
        if exec >> lane & 1 != 0 {
            c.lane = lane;
            match (p.op)(&c) {
                Some((l, None)) => {
                    lo[lane] = l;
                    kind[lane] = 1;
                }
                Some((l, Some(h))) => {
                    lo[lane] = l;
                    hi[lane] = h;
                    kind[lane] = 2;
                }
                None => {}
            }
        }
    }
    let vdst = p.vdst as usize;
    for lane in 0..lanes {
        if kind[lane] != 0 {
            w.v[vdst][lane] = lo[lane];
        }
        if kind[lane] == 2 {
            w.v[vdst + 1][lane] = hi[lane];
        }
    }
}

/// A float operand of a class compare, by its bits.
#[derive(Clone, Copy)]
struct Float {
    sign: bool,
    /// exponent all ones / all zeros
    exp_max: bool,
    exp_zero: bool,
    mantissa_zero: bool,
    /// the quiet bit (the mantissa's top bit)
    quiet: bool,
}

impl Float {
    fn of(bits: u64, exp_bits: u32, mant_bits: u32) -> Float {
        let exp = (bits >> mant_bits) & ((1 << exp_bits) - 1);
        let mant = bits & ((1 << mant_bits) - 1);
        Float {
            sign: bits >> (exp_bits + mant_bits) & 1 != 0,
            exp_max: exp == (1 << exp_bits) - 1,
            exp_zero: exp == 0,
            mantissa_zero: mant == 0,
            quiet: mant >> (mant_bits - 1) & 1 != 0,
        }
    }
    fn half(bits: u16) -> Float {
        Float::of(u64::from(bits), 5, 10)
    }
    fn single(bits: u32) -> Float {
        Float::of(u64::from(bits), 8, 23)
    }
    fn double(bits: u64) -> Float {
        Float::of(bits, 11, 52)
    }
    fn modified(self, abs: bool, neg: bool) -> Float {
        let sign = if abs { false } else { self.sign };
        Float {
            sign: sign ^ neg,
            ..self
        }
    }
    /// The class's bit in `v_cmp_class`'s mask: 0 signaling NaN, 1 quiet NaN, 2 -inf,
    /// 3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf.
    fn class(self) -> u32 {
        let side = |neg: u32, pos: u32| if self.sign { neg } else { pos };
        match (self.exp_max, self.exp_zero, self.mantissa_zero) {
            (true, _, false) => u32::from(self.quiet),
            (true, _, true) => side(2, 9),
            (false, true, true) => side(5, 6),
            (false, true, false) => side(4, 7),
            _ => side(3, 8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_classes_follow_the_mask_bits() {
        let c = |bits: u32| Float::single(bits).class();
        assert_eq!(c(0x7fa0_0000), 0); // signaling NaN
        assert_eq!(c(0x7fc0_0000), 1);
        assert_eq!(c(0xff80_0000), 2);
        assert_eq!(c((-1.5f32).to_bits()), 3);
        assert_eq!(c(0x8000_0001), 4);
        assert_eq!(c(0x8000_0000), 5);
        assert_eq!(c(0), 6);
        assert_eq!(c(1), 7);
        assert_eq!(c(2.0f32.to_bits()), 8);
        assert_eq!(c(0x7f80_0000), 9);
        assert_eq!(Float::half(0xfc00).class(), 2);
        assert_eq!(Float::single(0).modified(false, true).class(), 5);
        assert_eq!(Float::single(0x8000_0000).modified(true, false).class(), 6);
    }
}

//! The scalar ALU (SOP1/2/C/K) and the program-control instructions (SOPP).

use super::*;
use crate::decode::{Format, Instruction};
use crate::exec::{Context, ExecResult, Flow, Wave};

pub(super) fn sopp(w: &mut Wave, inst: &Instruction, ctx: &Context<'_>) -> ExecResult<Flow> {
    let simm = (inst.words[0] & 0xffff) as i16 as i64;
    let taken = match inst.mnemonic {
        "s_endpgm" => return Ok(Flow::End),
        "s_barrier" => return Ok(Flow::Barrier),
        "s_branch" => true,
        "s_cbranch_scc0" => !w.scc,
        "s_cbranch_scc1" => w.scc,
        "s_cbranch_vccz" => read_mask(w, inst, VCC_LO) == 0,
        "s_cbranch_vccnz" => read_mask(w, inst, VCC_LO) != 0,
        "s_cbranch_execz" => w.exec() == 0,
        "s_cbranch_execnz" => w.exec() != 0,
        // scheduling, waits and hints: no effect on the result here (memory is immediate)
        "s_nop"
        | "s_waitcnt"
        | "s_delay_alu"
        | "s_clause"
        | "s_waitcnt_depctr"
        | "s_set_inst_prefetch_distance"
        | "s_sendmsg"
        | "s_code_end"
        | "s_sethalt"
        | "s_setprio" => false,
        _ => return Err(unimplemented(inst, ctx)),
    };
    Ok(if taken {
        Flow::Branch(simm * 4)
    } else {
        Flow::Next
    })
}

/// `s_setpc_b64`: a jump to the address in its register pair (the end of a long branch, whose
/// target is past a branch instruction's 16-bit reach).
pub(super) fn setpc(w: &Wave, inst: &Instruction) -> Flow {
    let target = read64(w, inst, bits(inst.words[0], 0, 8), 0, false);
    let next = inst.address + inst.len as u64;
    Flow::Branch(target.wrapping_sub(next) as i64)
}

pub(super) fn salu(w: &mut Wave, inst: &Instruction, ctx: &Context<'_>) -> ExecResult<()> {
    let m = inst.mnemonic;
    let w0 = inst.words[0];
    let sdst = bits(w0, 16, 7);
    let (c0, c1) = (bits(w0, 0, 8), bits(w0, 8, 8));
    let wide_op = wide(m);
    let a = |w: &Wave| -> u64 {
        if wide_op {
            read64(w, inst, c0, 0, false)
        } else {
            u64::from(read32(w, inst, c0, 0))
        }
    };
    let b = |w: &Wave| -> u64 {
        // shifts and bit-field extracts take a 32-bit second operand
        if wide_op && !m.contains("sh") && !m.starts_with("s_bfe") {
            read64(w, inst, c1, 0, false)
        } else {
            u64::from(read32(w, inst, c1, 0))
        }
    };
    let simm = (w0 & 0xffff) as i16 as i32;
    let put = |w: &mut Wave, v: u64| {
        if wide_op {
            write_s64(w, ctx, sdst, v)
        } else {
            write_s32(w, ctx, sdst, v as u32)
        }
    };
    let mask = if wide_op {
        u64::MAX
    } else {
        u64::from(u32::MAX)
    };
    match inst.format {
        Format::Sopk => {
            match m {
                "s_movk_i32" => write_s32(w, ctx, sdst, simm as u32),
                // counters of outstanding memory operations: memory is immediate here
                "s_waitcnt_vscnt" | "s_waitcnt_vmcnt" | "s_waitcnt_expcnt"
                | "s_waitcnt_lgkmcnt" => {}
                "s_addk_i32" => {
                    let x = w.s[sdst as usize] as i32;
                    let (r, o) = x.overflowing_add(simm);
                    w.scc = o;
                    write_s32(w, ctx, sdst, r as u32);
                }
                "s_mulk_i32" => {
                    let x = w.s[sdst as usize] as i32;
                    write_s32(w, ctx, sdst, x.wrapping_mul(simm) as u32);
                }
                "s_cmovk_i32" => {
                    if w.scc {
                        write_s32(w, ctx, sdst, simm as u32);
                    }
                }
                _ if m.starts_with("s_cmpk_") => {
                    // the constant is sign-extended for the signed compares, zero-extended
                    // for the unsigned ones
                    let x = w.s[sdst as usize];
                    let signed = m.ends_with("_i32");
                    let k = if signed { simm as u32 } else { w0 & 0xffff };
                    w.scc = compare(
                        &m["s_cmpk_".len()..],
                        u64::from(x),
                        u64::from(k),
                        signed,
                        32,
                    )
                    .ok_or_else(|| unimplemented(inst, ctx))?;
                }
                _ => return Err(unimplemented(inst, ctx)),
            }
            return Ok(());
        }
        Format::Sopc => {
            let rest = &m["s_".len()..];
            if let Some(cmp) = rest.strip_prefix("cmp_") {
                let width = if wide_op { 64 } else { 32 };
                w.scc = compare(cmp, a(w), b(w), cmp.ends_with("i32"), width)
                    .ok_or_else(|| unimplemented(inst, ctx))?;
            } else if let Some(t) = rest.strip_prefix("bitcmp") {
                let bit = (b(w) & if wide_op { 63 } else { 31 }) as u32;
                let set = a(w) >> bit & 1 != 0;
                w.scc = if t.starts_with('0') { !set } else { set };
            } else {
                return Err(unimplemented(inst, ctx));
            }
            return Ok(());
        }
        _ => {}
    }
    let base = m.trim_end_matches("_b32").trim_end_matches("_b64");
    match (inst.format, base) {
        (Format::Sop1, "s_mov") => put(w, a(w)),
        (Format::Sop1, "s_not") => {
            let r = !a(w) & mask;
            w.scc = r != 0;
            put(w, r)
        }
        (Format::Sop1, "s_brev") => put(
            w,
            if wide_op {
                a(w).reverse_bits()
            } else {
                u64::from((a(w) as u32).reverse_bits())
            },
        ),
        (
            Format::Sop1,
            "s_and_saveexec" | "s_or_saveexec" | "s_and_not1_saveexec" | "s_andn2_saveexec",
        ) => {
            let e = w.exec();
            let s = a(w);
            put(w, e);
            let r = match base {
                "s_and_saveexec" => s & e,
                "s_or_saveexec" => s | e,
                _ => s & !e,
            };
            w.set_exec(r);
            w.scc = r != 0;
        }
        (Format::Sop1, _) => match m {
            // the address of the next instruction (a long branch adds its offset to it)
            "s_getpc_b64" => put(w, inst.address + inst.len as u64),
            "s_abs_i32" => {
                let r = (a(w) as i32).wrapping_abs() as u32;
                w.scc = r != 0;
                put(w, u64::from(r))
            }
            "s_sext_i32_i16" => put(w, u64::from(a(w) as i16 as i32 as u32)),
            "s_sext_i32_i8" => put(w, u64::from(a(w) as i8 as i32 as u32)),
            "s_bcnt1_i32_b32" | "s_bcnt1_i32_b64" => {
                let r = a(w).count_ones();
                w.scc = r != 0;
                write_s32(w, ctx, sdst, r)
            }
            "s_ctz_i32_b32" | "s_ff1_i32_b32" => {
                let x = a(w) as u32;
                write_s32(
                    w,
                    ctx,
                    sdst,
                    if x == 0 { u32::MAX } else { x.trailing_zeros() },
                )
            }
            "s_clz_i32_u32" | "s_flbit_i32_b32" => {
                let x = a(w) as u32;
                write_s32(
                    w,
                    ctx,
                    sdst,
                    if x == 0 { u32::MAX } else { x.leading_zeros() },
                )
            }
            _ => return Err(unimplemented(inst, ctx)),
        },
        (Format::Sop2, _) => {
            let (x, y) = (a(w), b(w));
            let shift = (y & if wide_op { 63 } else { 31 }) as u32;
            let r = match base {
                "s_and" => Some(x & y),
                "s_or" => Some(x | y),
                "s_xor" => Some(x ^ y),
                "s_and_not1" | "s_andn2" => Some(x & !y & mask),
                "s_or_not1" | "s_orn2" => Some((x | !y) & mask),
                "s_nor" => Some(!(x | y) & mask),
                "s_nand" => Some(!(x & y) & mask),
                "s_xnor" => Some(!(x ^ y) & mask),
                "s_lshl" => Some((x << shift) & mask),
                "s_lshr" => Some(x >> shift),
                _ => None,
            };
            if let Some(r) = r {
                w.scc = r != 0;
                put(w, r);
                return Ok(());
            }
            let (x32, y32) = (x as u32, y as u32);
            match m {
                "s_ashr_i32" => {
                    let r = ((x32 as i32) >> (y32 & 31)) as u32;
                    w.scc = r != 0;
                    put(w, u64::from(r))
                }
                "s_ashr_i64" => {
                    let r = ((x as i64) >> (y32 & 63)) as u64;
                    w.scc = r != 0;
                    put(w, r)
                }
                "s_add_u32" => {
                    let (r, c) = x32.overflowing_add(y32);
                    w.scc = c;
                    put(w, u64::from(r))
                }
                "s_addc_u32" => {
                    let r = u64::from(x32) + u64::from(y32) + u64::from(w.scc);
                    w.scc = r >> 32 != 0;
                    put(w, r & 0xffff_ffff)
                }
                "s_sub_u32" => {
                    let (r, c) = x32.overflowing_sub(y32);
                    w.scc = c;
                    put(w, u64::from(r))
                }
                "s_subb_u32" => {
                    let r = i64::from(x32) - i64::from(y32) - i64::from(w.scc);
                    w.scc = r < 0;
                    put(w, (r as u64) & 0xffff_ffff)
                }
                "s_add_i32" => {
                    let (r, o) = (x32 as i32).overflowing_add(y32 as i32);
                    w.scc = o;
                    put(w, u64::from(r as u32))
                }
                "s_sub_i32" => {
                    let (r, o) = (x32 as i32).overflowing_sub(y32 as i32);
                    w.scc = o;
                    put(w, u64::from(r as u32))
                }
                "s_mul_i32" => put(w, u64::from(x32.wrapping_mul(y32))),
                "s_mul_hi_u32" => put(w, (u64::from(x32) * u64::from(y32)) >> 32),
                "s_mul_hi_i32" => put(
                    w,
                    u64::from(((i64::from(x32 as i32) * i64::from(y32 as i32)) >> 32) as u32),
                ),
                "s_min_u32" | "s_max_u32" | "s_min_i32" | "s_max_i32" => {
                    let signed = m.ends_with("i32");
                    let less = if signed {
                        (x32 as i32) < (y32 as i32)
                    } else {
                        x32 < y32
                    };
                    let min = m.starts_with("s_min");
                    w.scc = less;
                    put(w, u64::from(if less == min { x32 } else { y32 }))
                }
                "s_cselect_b32" | "s_cselect_b64" => put(w, if w.scc { x } else { y }),
                "s_bfe_u32" | "s_bfe_i32" => {
                    let offset = y32 & 31;
                    let width = (y32 >> 16) & 0x7f;
                    let r = if width == 0 {
                        0
                    } else if m == "s_bfe_u32" {
                        (x32 >> offset) & (((1u64 << width.min(32)) - 1) as u32)
                    } else {
                        let v = (x32 >> offset) as i32;
                        let sh = 32 - width.min(32);
                        ((v << sh) >> sh) as u32
                    };
                    w.scc = r != 0;
                    put(w, u64::from(r))
                }
                "s_bfm_b32" => put(
                    w,
                    u64::from((((1u64 << (x32 & 31)) - 1) as u32) << (y32 & 31)),
                ),
                "s_pack_ll_b32_b16" => put(w, u64::from((x32 & 0xffff) | (y32 << 16))),
                "s_pack_lh_b32_b16" => put(w, u64::from((x32 & 0xffff) | (y32 & 0xffff_0000))),
                "s_pack_hh_b32_b16" => put(w, u64::from((x32 >> 16) | (y32 & 0xffff_0000))),
                "s_lshl1_add_u32" | "s_lshl2_add_u32" | "s_lshl3_add_u32" | "s_lshl4_add_u32" => {
                    let n = m.as_bytes()["s_lshl".len()] - b'0';
                    let r = u64::from(x32) << n;
                    let (s, c) = (r as u32).overflowing_add(y32);
                    w.scc = c || r >> 32 != 0;
                    put(w, u64::from(s))
                }
                _ => return Err(unimplemented(inst, ctx)),
            }
        }
        _ => return Err(unimplemented(inst, ctx)),
    }
    Ok(())
}

/// `cmp` (`eq_u32`, `lg_u64`, `gt_i32`, ...) of a and b.
pub(super) fn compare(cmp: &str, a: u64, b: u64, signed: bool, width: u32) -> Option<bool> {
    Cmp::parse(cmp)?.int(a, b, signed, width)
}

/// A comparison, parsed once from its mnemonic's part (`eq`, `nlt`, `u`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Lg,
    Gt,
    Ge,
    Lt,
    Le,
    Neq,
    Nlg,
    Ngt,
    Nge,
    Nlt,
    Nle,
    O,
    U,
    F,
    T,
}

impl Cmp {
    /// The comparison a mnemonic's part names (anything after a `_` is ignored); `ne` is `lg`.
    pub(crate) fn parse(cmp: &str) -> Option<Cmp> {
        Some(match cmp.split('_').next().unwrap_or("") {
            "eq" => Cmp::Eq,
            "lg" | "ne" => Cmp::Lg,
            "gt" => Cmp::Gt,
            "ge" => Cmp::Ge,
            "lt" => Cmp::Lt,
            "le" => Cmp::Le,
            "neq" => Cmp::Neq,
            "nlg" => Cmp::Nlg,
            "ngt" => Cmp::Ngt,
            "nge" => Cmp::Nge,
            "nlt" => Cmp::Nlt,
            "nle" => Cmp::Nle,
            "o" => Cmp::O,
            "u" => Cmp::U,
            "f" => Cmp::F,
            "t" => Cmp::T,
            _ => return None,
        })
    }

    /// On integers `width` bits wide (sign-extended where `signed`); None for the float-only
    /// comparisons.
    pub(crate) fn int(self, a: u64, b: u64, signed: bool, width: u32) -> Option<bool> {
        let (a, b) = if signed {
            let sh = 64 - width;
            (
                ((a << sh) as i64 >> sh) as i128,
                ((b << sh) as i64 >> sh) as i128,
            )
        } else {
            (a as i128, b as i128)
        };
        Some(match self {
            Cmp::Eq => a == b,
            Cmp::Lg => a != b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::F => false,
            Cmp::T => true,
            _ => return None,
        })
    }

    /// On floats: a NaN makes the operands unordered, where the `n` forms and `u` hold and
    /// the others do not.
    pub(crate) fn float(self, a: f64, b: f64) -> bool {
        let (lt, eq, gt) = (a < b, a == b, a > b);
        let ordered = lt || eq || gt;
        match self {
            Cmp::Eq => eq,
            Cmp::Lg => lt || gt,
            Cmp::Gt => gt,
            Cmp::Ge => gt || eq,
            Cmp::Lt => lt,
            Cmp::Le => lt || eq,
            Cmp::Neq => !eq,
            Cmp::Nlg => !(lt || gt),
            Cmp::Ngt => !gt,
            Cmp::Nge => !(gt || eq),
            Cmp::Nlt => !lt,
            Cmp::Nle => !(lt || eq),
            Cmp::O => ordered,
            Cmp::U => !ordered,
            Cmp::F => false,
            Cmp::T => true,
        }
    }
}

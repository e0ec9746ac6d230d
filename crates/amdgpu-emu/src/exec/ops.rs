//! What each instruction does, from AMD's RDNA3 and CDNA3 instruction set references: the
//! scalar ALU, the vector ALU (VOP1/2/C/3 and gfx11's dual issue), scalar loads and
//! global/flat memory, branches and the end of the program. Operands are read by their
//! 9-bit codes (SGPRs, VCC, EXEC, M0, inline constants, a literal, VGPRs).

use super::{Context, ExecError, ExecResult, Flow, Wave};
use crate::decode::{Format, Instruction};
use crate::Arch;

/// Operand codes.
const VCC_LO: u32 = 106;
const SCC: u32 = 253;
const LITERAL: u32 = 255;

fn null_code(arch: Arch) -> Option<u32> {
    (arch == Arch::Gfx1100).then_some(124)
}

fn unimplemented(inst: &Instruction, ctx: &Context<'_>) -> ExecError {
    ExecError::Unimplemented {
        kernel: ctx.kernel.to_string(),
        mnemonic: match inst.second {
            Some(y) => format!("{} :: {y}", inst.mnemonic),
            None => inst.mnemonic.to_string(),
        },
        address: inst.address,
        words: inst.words[..inst.len / 4]
            .iter()
            .map(|w| format!("{w:08X}"))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// The f32 bits of the float inline constants 240..=248.
fn inline_f32(code: u32) -> Option<u32> {
    Some(match code {
        240 => 0.5f32.to_bits(),
        241 => (-0.5f32).to_bits(),
        242 => 1.0f32.to_bits(),
        243 => (-1.0f32).to_bits(),
        244 => 2.0f32.to_bits(),
        245 => (-2.0f32).to_bits(),
        246 => 4.0f32.to_bits(),
        247 => (-4.0f32).to_bits(),
        248 => 0.159_154_94f32.to_bits(),
        _ => return None,
    })
}

fn inline_f64(code: u32) -> Option<u64> {
    Some(match code {
        240 => 0.5f64.to_bits(),
        241 => (-0.5f64).to_bits(),
        242 => 1.0f64.to_bits(),
        243 => (-1.0f64).to_bits(),
        244 => 2.0f64.to_bits(),
        245 => (-2.0f64).to_bits(),
        246 => 4.0f64.to_bits(),
        247 => (-4.0f64).to_bits(),
        248 => 0x3fc4_5f30_6dc9_c882,
        _ => return None,
    })
}

/// A 32-bit operand of one lane.
fn read32(w: &Wave, inst: &Instruction, code: u32, lane: usize) -> u32 {
    match code {
        0..=127 => w.s[code as usize],
        128..=192 => code - 128,
        193..=208 => (-((code - 192) as i32)) as u32,
        240..=248 => inline_f32(code).unwrap_or(0),
        SCC => u32::from(w.scc),
        LITERAL => inst.literal().unwrap_or(0),
        256..=511 => w.v[(code - 256) as usize][lane],
        _ => 0,
    }
}

/// A 64-bit operand of one lane (`float`: a float operation reads inline floats as f64 and
/// a literal as the high half).
fn read64(w: &Wave, inst: &Instruction, code: u32, lane: usize, float: bool) -> u64 {
    match code {
        0..=127 => u64::from(w.s[code as usize]) | (u64::from(w.s[code as usize + 1]) << 32),
        128..=208 => read32(w, inst, code, lane) as i32 as i64 as u64,
        240..=248 if float => inline_f64(code).unwrap_or(0),
        LITERAL if float => u64::from(inst.literal().unwrap_or(0)) << 32,
        LITERAL => u64::from(inst.literal().unwrap_or(0)),
        256..=511 => {
            let r = (code - 256) as usize;
            u64::from(w.v[r][lane]) | (u64::from(w.v[r + 1][lane]) << 32)
        }
        _ => u64::from(read32(w, inst, code, lane)),
    }
}

/// Writes a scalar destination (a write to null is dropped).
fn write_s32(w: &mut Wave, ctx: &Context<'_>, code: u32, value: u32) {
    if Some(code) != null_code(ctx.arch) && code < 128 {
        w.s[code as usize] = value;
    }
}

fn write_s64(w: &mut Wave, ctx: &Context<'_>, code: u32, value: u64) {
    write_s32(w, ctx, code, value as u32);
    if Some(code) != null_code(ctx.arch) && code + 1 < 128 {
        w.s[code as usize + 1] = (value >> 32) as u32;
    }
}

/// A lane mask as the wave holds it in a scalar pair (wave32: the low half).
fn write_mask(w: &mut Wave, ctx: &Context<'_>, code: u32, mask: u64) {
    if w.lanes == 32 {
        write_s32(w, ctx, code, mask as u32);
    } else {
        write_s64(w, ctx, code, mask);
    }
}

fn read_mask(w: &Wave, inst: &Instruction, code: u32) -> u64 {
    if w.lanes == 32 {
        u64::from(read32(w, inst, code, 0))
    } else {
        read64(w, inst, code, 0, false)
    }
}

fn bits(word: u32, lo: u32, n: u32) -> u32 {
    (word >> lo) & ((1u32 << n) - 1)
}

/// Whether a mnemonic's operation is 64 bits wide (`_b64`, `_u64`, `_i64`, `_f64` before any
/// encoding suffix).
fn wide(m: &str) -> bool {
    let m = m.trim_end_matches("_e32").trim_end_matches("_e64");
    m.ends_with("64") && !m.ends_with("_b32_b64")
}

pub(crate) fn execute(w: &mut Wave, inst: &Instruction, ctx: &mut Context<'_>) -> ExecResult<Flow> {
    let m = inst.mnemonic;
    let w0 = inst.words[0];
    let w1 = inst.words[1];
    match inst.format {
        Format::Sopp => sopp(w, inst, ctx),
        Format::Sop1 | Format::Sop2 | Format::Sopc | Format::Sopk => {
            salu(w, inst, ctx)?;
            Ok(Flow::Next)
        }
        Format::Smem => {
            // s_load_b32.. (gfx11) / s_load_dword.. (gfx9)
            let dwords = match m {
                "s_load_b32" | "s_load_dword" => 1,
                "s_load_b64" | "s_load_dwordx2" => 2,
                "s_load_b128" | "s_load_dwordx4" => 4,
                "s_load_b256" | "s_load_dwordx8" => 8,
                "s_load_b512" | "s_load_dwordx16" => 16,
                _ => return Err(unimplemented(inst, ctx)),
            };
            let sbase = bits(w0, 0, 6) * 2;
            let sdata = bits(w0, 6, 7);
            let base = read64(w, inst, sbase, 0, false);
            let imm = ((w1 & 0x1f_ffff) << 11) as i32 >> 11;
            let offset = match ctx.arch {
                Arch::Gfx1100 => {
                    let soffset = bits(w1, 25, 7);
                    let reg = if soffset == 124 {
                        0
                    } else {
                        w.s[soffset as usize]
                    };
                    i64::from(imm) + i64::from(reg)
                }
                Arch::Gfx942 => {
                    let imm_on = w0 >> 17 & 1 != 0;
                    let soe = w0 >> 14 & 1 != 0;
                    let mut o = if imm_on {
                        i64::from(imm)
                    } else {
                        i64::from(w.s[(w1 & 0x7f) as usize])
                    };
                    if soe {
                        o += i64::from(w.s[bits(w1, 25, 7) as usize]);
                    }
                    o
                }
            };
            let address = base.wrapping_add_signed(offset) & !3;
            let mut buf = vec![0u8; 4 * dwords];
            ctx.memory
                .read(address, &mut buf)
                .ok_or_else(|| ctx.bad_access(inst, address, buf.len()))?;
            for (i, c) in buf.chunks_exact(4).enumerate() {
                write_s32(
                    w,
                    ctx,
                    sdata + i as u32,
                    u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                );
            }
            Ok(Flow::Next)
        }
        Format::Vop1Sdwa | Format::Vop2Sdwa | Format::VopcSdwa => {
            sdwa(w, inst, ctx)?;
            Ok(Flow::Next)
        }
        Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 | Format::Vopd => {
            valu(w, inst, ctx)?;
            Ok(Flow::Next)
        }
        Format::Vop3p => {
            vop3p(w, inst, ctx)?;
            Ok(Flow::Next)
        }
        Format::Flat => {
            flat(w, inst, ctx)?;
            Ok(Flow::Next)
        }
        Format::Ds => {
            ds(w, inst, ctx)?;
            Ok(Flow::Next)
        }
        // cache invalidations and write-backs: the emulated memory has no caches
        Format::Mubuf
            if matches!(
                m,
                "buffer_gl0_inv"
                    | "buffer_gl1_inv"
                    | "buffer_inv"
                    | "buffer_wbl2"
                    | "buffer_wbinvl1"
            ) =>
        {
            Ok(Flow::Next)
        }
        _ => Err(unimplemented(inst, ctx)),
    }
}

fn sopp(w: &mut Wave, inst: &Instruction, ctx: &Context<'_>) -> ExecResult<Flow> {
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

fn salu(w: &mut Wave, inst: &Instruction, ctx: &Context<'_>) -> ExecResult<()> {
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
                _ if m.starts_with("s_cmpk_") => {
                    let x = w.s[sdst as usize];
                    let k = w0 & 0xffff;
                    w.scc = compare(&m["s_cmpk_".len()..], u64::from(x), u64::from(k), false, 32);
                }
                _ => return Err(unimplemented(inst, ctx)),
            }
            return Ok(());
        }
        Format::Sopc => {
            let rest = &m["s_".len()..];
            if let Some(cmp) = rest.strip_prefix("cmp_") {
                let width = if wide_op { 64 } else { 32 };
                w.scc = compare(cmp, a(w), b(w), cmp.ends_with("i32"), width);
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
fn compare(cmp: &str, a: u64, b: u64, signed: bool, width: u32) -> bool {
    let (a, b) = if signed {
        let sh = 64 - width;
        (
            ((a << sh) as i64 >> sh) as i128,
            ((b << sh) as i64 >> sh) as i128,
        )
    } else {
        (a as i128, b as i128)
    };
    match cmp.split('_').next().unwrap_or("") {
        "eq" => a == b,
        "lg" | "ne" => a != b,
        "gt" => a > b,
        "ge" => a >= b,
        "lt" => a < b,
        "le" => a <= b,
        _ => false,
    }
}

/// Vector ALU: the operands of each encoding, then the operation lane by lane.
fn valu(w: &mut Wave, inst: &Instruction, ctx: &mut Context<'_>) -> ExecResult<()> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    if inst.format == Format::Vopd {
        let y = inst.second.unwrap_or("");
        let vdst_x = bits(w1, 24, 8);
        let vdst_y = (bits(w1, 17, 7) << 1) | ((vdst_x & 1) ^ 1);
        let x_srcs = [bits(w0, 0, 9), 256 + bits(w0, 9, 8)];
        let y_srcs = [bits(w1, 0, 9), 256 + bits(w1, 9, 8)];
        // both read before either writes
        let x = inst.mnemonic.replace("v_dual_", "v_");
        let xs = lanes_op(w, inst, ctx, &x, &x_srcs, vdst_x, [Part::WHOLE; 3])?;
        let y = y.replace("v_dual_", "v_");
        let ys = lanes_op(w, inst, ctx, &y, &y_srcs, vdst_y, [Part::WHOLE; 3])?;
        store(w, vdst_x, &xs);
        store(w, vdst_y, &ys);
        return Ok(());
    }
    let m = inst.mnemonic;
    let name = m.trim_end_matches("_e32").trim_end_matches("_e64");
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
            if !vop3b(name) && bits(w0, 11, 4) != 0 && halves(name) == (false, [false; 3]) {
                return Err(unimplemented(inst, ctx));
            }
            let sdst = vop3b(name).then(|| bits(w0, 8, 7));
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
            let v = read32(w, inst, srcs[i], lane);
            (if hi[i] { v >> 16 } else { v }) & 0xffff
        };
        let mut mask = 0u64;
        for lane in 0..w.lanes {
            if !w.active(lane) {
                continue;
            }
            let r = match ty {
                "u16" | "i16" => compare(
                    op,
                    u64::from(half(w, 0, lane)),
                    u64::from(half(w, 1, lane)),
                    ty == "i16",
                    16,
                ),
                "f16" => fcmp(
                    op,
                    f64::from(f16_to_f32(half(w, 0, lane) as u16)),
                    f64::from(f16_to_f32(half(w, 1, lane) as u16)),
                ),
                "u32" | "i32" => compare(
                    op,
                    u64::from(read32(w, inst, srcs[0], lane)),
                    u64::from(read32(w, inst, srcs[1], lane)),
                    ty == "i32",
                    32,
                ),
                "u64" | "i64" => compare(
                    op,
                    read64(w, inst, srcs[0], lane, false),
                    read64(w, inst, srcs[1], lane, false),
                    ty == "i64",
                    64,
                ),
                "f32" => fcmp(
                    op,
                    f64::from(f32::from_bits(read32(w, inst, srcs[0], lane))),
                    f64::from(f32::from_bits(read32(w, inst, srcs[1], lane))),
                ),
                "f64" => fcmp(
                    op,
                    f64::from_bits(read64(w, inst, srcs[0], lane, true)),
                    f64::from_bits(read64(w, inst, srcs[1], lane, true)),
                ),
                _ => return Err(unimplemented(inst, ctx)),
            };
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
    if name == "v_readfirstlane_b32" {
        let lane = (0..w.lanes).find(|&l| w.active(l)).unwrap_or(0);
        let v = read32(w, inst, srcs[0], lane);
        write_s32(w, ctx, vdst, v);
        return Ok(());
    }
    // carries: the ops that write a lane mask beside their result
    if let Some(carry_dst) = sdst.or(match name {
        "v_add_co_ci_u32" | "v_addc_co_u32" | "v_sub_co_ci_u32" | "v_subb_co_u32"
        | "v_add_co_u32" | "v_sub_co_u32" | "v_subrev_co_u32" => Some(VCC_LO),
        _ => None,
    }) {
        let carry_in = match inst.format {
            Format::Vop2 => VCC_LO,
            _ => srcs[2],
        };
        let cin = read_mask(w, inst, carry_in);
        let mut cout = 0u64;
        let mut out = vec![None; w.lanes];
        for (lane, slot) in out.iter_mut().enumerate() {
            if !w.active(lane) {
                continue;
            }
            let a = u64::from(read32(w, inst, srcs[0], lane));
            let b = u64::from(read32(w, inst, srcs[1], lane));
            let c = cin >> lane & 1;
            let (r, carry) = match name {
                "v_add_co_u32" => (a + b, (a + b) >> 32),
                "v_add_co_ci_u32" | "v_addc_co_u32" => (a + b + c, (a + b + c) >> 32),
                "v_sub_co_u32" => (a.wrapping_sub(b), u64::from(b > a)),
                "v_subrev_co_u32" => (b.wrapping_sub(a), u64::from(a > b)),
                "v_sub_co_ci_u32" | "v_subb_co_u32" => {
                    (a.wrapping_sub(b + c), u64::from(b + c > a))
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
                    *slot = Some(a * b + read64(w, inst, srcs[2], lane, false));
                    continue;
                }
                "v_mad_i64_i32" => {
                    let r = (i64::from(a as u32 as i32) * i64::from(b as u32 as i32))
                        .wrapping_add(read64(w, inst, srcs[2], lane, false) as i64);
                    *slot = Some(r as u64);
                    continue;
                }
                _ => return Err(unimplemented(inst, ctx)),
            };
            cout |= (carry & 1) << lane;
            *slot = Some(r & 0xffff_ffff);
        }
        let pair = name.starts_with("v_mad_");
        for (lane, r) in out.into_iter().enumerate() {
            if let Some(r) = r {
                w.v[vdst as usize][lane] = r as u32;
                if pair {
                    w.v[vdst as usize + 1][lane] = (r >> 32) as u32;
                }
            }
        }
        if !pair {
            write_mask(w, ctx, carry_dst, cout);
        }
        return Ok(());
    }
    let (dst16, src16) = halves(name);
    if !dst16 && src16 == [false; 3] {
        let results = lanes_op(w, inst, ctx, name, &srcs, vdst, [Part::WHOLE; 3])?;
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
    let results = lanes_op(w, inst, ctx, name, &srcs, vdst, parts)?;
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
fn sdwa(w: &mut Wave, inst: &Instruction, ctx: &Context<'_>) -> ExecResult<()> {
    let (w0, sd) = (inst.words[0], inst.words[1]);
    let name = inst.mnemonic.trim_end_matches("_sdwa");
    // VOPC's bits 15:8 are its destination; VOP1/VOP2's clamp and omod
    let clamp_omod = inst.format != Format::VopcSdwa && bits(sd, 13, 3) != 0;
    if clamp_omod || bits(sd, 20, 2) != 0 || bits(sd, 28, 2) != 0 {
        // clamp, omod, neg, abs: not yet
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
            let a = parts[0].of(read32(w, inst, srcs[0], lane));
            let b = parts[1].of(read32(w, inst, srcs[1], lane));
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
                _ => return Err(unimplemented(inst, ctx)),
            };
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
    let results = lanes_op(w, inst, ctx, name, &srcs, vdst, parts)?;
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
    if name.starts_with("v_cmp") {
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
            | "v_addc_co_u32"
            | "v_subb_co_u32"
            | "v_mad_u64_u32"
            | "v_mad_i64_i32"
            | "v_div_scale_f32"
            | "v_div_scale_f64"
    )
}

fn fcmp(op: &str, a: f64, b: f64) -> bool {
    use std::cmp::Ordering::{Equal, Greater, Less};
    // None: unordered (a NaN); the `n` forms are true for it, the others false
    let ord = a.partial_cmp(&b);
    let holds = |want: &[std::cmp::Ordering]| ord.is_some_and(|o| want.contains(&o));
    match op {
        "eq" => holds(&[Equal]),
        "lg" => holds(&[Less, Greater]),
        "gt" => holds(&[Greater]),
        "ge" => holds(&[Greater, Equal]),
        "lt" => holds(&[Less]),
        "le" => holds(&[Less, Equal]),
        "neq" => !holds(&[Equal]),
        "nlg" => !holds(&[Less, Greater]),
        "ngt" => !holds(&[Greater]),
        "nge" => !holds(&[Greater, Equal]),
        "nlt" => !holds(&[Less]),
        "nle" => !holds(&[Less, Equal]),
        "o" => ord.is_some(),
        "u" => ord.is_none(),
        _ => false,
    }
}

/// A lane's result: one register or a pair.
type LaneResult = Option<(u32, Option<u32>)>;

fn store(w: &mut Wave, vdst: u32, results: &[LaneResult]) {
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
        let v = read32(self.w, self.inst, self.s(i), self.lane);
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
    name: &str,
    srcs: &[u32],
    vdst: u32,
    parts: [Part; 3],
) -> ExecResult<Vec<LaneResult>> {
    let name = name.trim_end_matches("_e32").trim_end_matches("_e64");
    let mods = if inst.format == Format::Vop3 {
        let (abs, neg) = (bits(inst.words[0], 8, 3), bits(inst.words[1], 29, 3));
        [0, 1, 2].map(|i| (abs >> i & 1 != 0, neg >> i & 1 != 0))
    } else {
        [(false, false); 3]
    };
    if mods != [(false, false); 3] && !float_op(name) {
        // modifiers on an integer operation: not an encoding the compiler makes
        return Err(unimplemented(inst, ctx));
    }
    let op: LaneFn = match name {
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
        "v_add_f64" => |c: &LaneCtx<'_>| pair(f64::to_bits(c.f64(0) + c.f64(1))),
        "v_mul_f64" => |c: &LaneCtx<'_>| pair(f64::to_bits(c.f64(0) * c.f64(1))),
        "v_fma_f64" => |c: &LaneCtx<'_>| pair(f64::to_bits(c.f64(0).mul_add(c.f64(1), c.f64(2)))),
        "v_cvt_f32_u32" => |c: &LaneCtx<'_>| f32s(c.u(0) as f32),
        "v_cvt_f32_i32" => |c: &LaneCtx<'_>| f32s(c.u(0) as i32 as f32),
        "v_cvt_u32_f32" => |c: &LaneCtx<'_>| Some((c.f(0) as u32, None)),
        "v_cvt_i32_f32" => |c: &LaneCtx<'_>| Some((c.f(0) as i32 as u32, None)),
        "v_cvt_f64_f32" => |c: &LaneCtx<'_>| pair(f64::from(c.f(0)).to_bits()),
        "v_cvt_f32_f64" => |c: &LaneCtx<'_>| f32s(c.f64(0) as f32),
        "v_rcp_f32" | "v_rcp_iflag_f32" => |c: &LaneCtx<'_>| f32s(1.0 / c.f(0)),
        "v_sqrt_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).sqrt()),
        "v_rsq_f32" => |c: &LaneCtx<'_>| f32s(1.0 / c.f(0).sqrt()),
        "v_exp_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).exp2()),
        "v_log_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).log2()),
        "v_floor_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).floor()),
        "v_ceil_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).ceil()),
        "v_trunc_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).trunc()),
        "v_rndne_f32" => |c: &LaneCtx<'_>| f32s(c.f(0).round_ties_even()),
        _ => return Err(unimplemented(inst, ctx)),
    };
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
            });
        }
    }
    Ok(out)
}

/// Packed math (VOP3P): each half of the result from the halves `op_sel` (low) and
/// `op_sel_hi` (high) pick, negated where `neg` / `neg_hi` say. The packed f32 operations
/// (gfx90a and gfx94x) work on register pairs.
fn vop3p(w: &mut Wave, inst: &Instruction, ctx: &Context<'_>) -> ExecResult<()> {
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
    if m == "v_fma_mix_f32" {
        // each source f32, or (op_sel_hi) a half from its low or (op_sel) high 16 bits;
        // neg_hi is abs here, neg_lo neg; one fused multiply-add in f32. (The f16-result
        // forms, mixlo/mixhi, round the exact fma once to f16: not emulated yet.)
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
            w.v[vdst][lane] = operand(0).mul_add(operand(1), operand(2)).to_bits();
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
    let mut out = vec![None; w.lanes];
    for (lane, slot) in out.iter_mut().enumerate() {
        if !w.active(lane) {
            continue;
        }
        let half = |i: usize, hi: bool| -> f32 {
            let pair = read64(w, inst, srcs[i], lane, false);
            let select = if hi { op_sel_hi } else { op_sel } >> i & 1 != 0;
            let v = f32::from_bits(if select {
                (pair >> 32) as u32
            } else {
                pair as u32
            });
            let negate = if hi { neg_hi } else { neg } >> i & 1 != 0;
            if negate && m != "v_pk_mov_b32" {
                -v
            } else {
                v
            }
        };
        let at = |hi: bool| {
            let c = if operands == 3 { half(2, hi) } else { 0.0 };
            f32_op(half(0, hi), half(1, hi), c)
        };
        let (lo, hi) = if m == "v_pk_mov_b32" {
            // the low result from src0's selected half, the high from src1's
            (half(0, false), half(1, true))
        } else {
            (at(false), at(true))
        };
        *slot = Some((lo.to_bits(), hi.to_bits()));
    }
    for (lane, r) in out.into_iter().enumerate() {
        if let Some((lo, hi)) = r {
            w.v[vdst][lane] = lo;
            w.v[vdst + 1][lane] = hi;
        }
    }
    Ok(())
}

/// LDS: loads and stores of 1 to 16 bytes (two addresses for the `2addr` / `read2` forms,
/// halves for the `d16` forms), atomic adds and `ds_bpermute_b32`.
fn ds(w: &mut Wave, inst: &Instruction, ctx: &mut Context<'_>) -> ExecResult<()> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    // gfx9 spells the loads and stores read/write, read2/write2
    let m = inst
        .mnemonic
        .replace("ds_read2_", "ds_load_2addr_")
        .replace("ds_write2_", "ds_store_2addr_")
        .replace("ds_read_", "ds_load_")
        .replace("ds_write_", "ds_store_");
    let (offset0, offset1) = (bits(w0, 0, 8), bits(w0, 8, 8));
    let offset = offset0 | (offset1 << 8);
    let (addr, data0, data1, vdst) = (
        bits(w1, 0, 8) as usize,
        bits(w1, 8, 8) as usize,
        bits(w1, 16, 8) as usize,
        bits(w1, 24, 8) as usize,
    );
    if ctx.arch == Arch::Gfx942 && w0 >> 25 & 1 != 0 {
        // data in accumulation registers: not yet
        return Err(unimplemented(inst, ctx));
    }
    let lanes = w.lanes;
    if m == "ds_bpermute_b32" {
        let source: Vec<u32> = (0..lanes)
            .map(|l| if w.active(l) { w.v[data0][l] } else { 0 })
            .collect();
        for lane in 0..lanes {
            if w.active(lane) {
                let from = (w.v[addr][lane].wrapping_add(offset) / 4) as usize % lanes;
                w.v[vdst][lane] = source[from];
            }
        }
        return Ok(());
    }
    let size = |name: &str| -> Option<usize> {
        Some(match name.rsplit('_').next()? {
            "b8" | "u8" | "i8" => 1,
            "b16" | "u16" | "i16" => 2,
            "b32" | "u32" => 4,
            "b64" => 8,
            "b96" => 12,
            "b128" => 16,
            _ => return None,
        })
    };
    for lane in 0..lanes {
        if !w.active(lane) {
            continue;
        }
        let base = w.v[addr][lane] as usize;
        let lds_read = |ctx: &Context<'_>, at: usize, n: usize| -> ExecResult<[u8; 16]> {
            let mut b = [0u8; 16];
            let src = ctx
                .lds
                .get(at..at + n)
                .ok_or_else(|| ctx.bad_lds(inst, at as u64, n))?;
            b[..n].copy_from_slice(src);
            Ok(b)
        };
        let word = |b: &[u8; 16], i: usize| {
            u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        };
        match m.as_str() {
            "ds_add_u32" | "ds_add_rtn_u32" => {
                let at = base + offset as usize;
                let old = word(&lds_read(ctx, at, 4)?, 0);
                let new = old.wrapping_add(w.v[data0][lane]);
                ctx.lds[at..at + 4].copy_from_slice(&new.to_le_bytes());
                if m == "ds_add_rtn_u32" {
                    w.v[vdst][lane] = old;
                }
            }
            _ if m.starts_with("ds_load_2addr_") || m.starts_with("ds_store_2addr_") => {
                let n = size(&m).ok_or_else(|| unimplemented(inst, ctx))?;
                let load = m.starts_with("ds_load");
                for (k, off) in [offset0, offset1].into_iter().enumerate() {
                    let at = base + off as usize * n;
                    if load {
                        let b = lds_read(ctx, at, n)?;
                        for i in 0..n / 4 {
                            w.v[vdst + k * (n / 4) + i][lane] = word(&b, i);
                        }
                    } else {
                        let src = if k == 0 { data0 } else { data1 };
                        ctx.lds
                            .get(at..at + n)
                            .ok_or_else(|| ctx.bad_lds(inst, at as u64, n))?;
                        for i in 0..n / 4 {
                            ctx.lds[at + 4 * i..at + 4 * i + 4]
                                .copy_from_slice(&w.v[src + i][lane].to_le_bytes());
                        }
                    }
                }
            }
            _ if m.starts_with("ds_load_") => {
                let at = base + offset as usize;
                let core = m.trim_end_matches("_d16_hi").trim_end_matches("_d16");
                let n = size(core).ok_or_else(|| unimplemented(inst, ctx))?;
                let b = lds_read(ctx, at, n)?;
                if n >= 4 {
                    for i in 0..n / 4 {
                        w.v[vdst + i][lane] = word(&b, i);
                    }
                } else {
                    let raw = u32::from(b[0]) | if n == 2 { u32::from(b[1]) << 8 } else { 0 };
                    let v = match core.rsplit('_').next() {
                        Some("i8") => raw as u8 as i8 as i32 as u32,
                        Some("i16") => raw as u16 as i16 as i32 as u32,
                        _ => raw,
                    };
                    let old = w.v[vdst][lane];
                    w.v[vdst][lane] = if m.ends_with("_d16_hi") {
                        (old & 0xffff) | (v << 16)
                    } else if m.ends_with("_d16") {
                        (old & 0xffff_0000) | (v & 0xffff)
                    } else {
                        v
                    };
                }
            }
            _ if m.starts_with("ds_store_") => {
                let at = base + offset as usize;
                let core = m.trim_end_matches("_d16_hi");
                let n = size(core).ok_or_else(|| unimplemented(inst, ctx))?;
                ctx.lds
                    .get(at..at + n)
                    .ok_or_else(|| ctx.bad_lds(inst, at as u64, n))?;
                let mut b = [0u8; 16];
                for i in 0..n.div_ceil(4) {
                    b[4 * i..4 * i + 4].copy_from_slice(&w.v[data0 + i][lane].to_le_bytes());
                }
                if m.ends_with("_d16_hi") {
                    b.copy_within(2..4, 0);
                }
                ctx.lds[at..at + n].copy_from_slice(&b[..n]);
            }
            _ => return Err(unimplemented(inst, ctx)),
        }
    }
    Ok(())
}

/// FLAT and GLOBAL loads and stores.
fn flat(w: &mut Wave, inst: &Instruction, ctx: &mut Context<'_>) -> ExecResult<()> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    // the d16 forms move a register's low or high half (`_d16_hi_b16`, `_short_d16_hi`)
    let d16_hi = inst.mnemonic.contains("_d16_hi");
    let d16 = inst.mnemonic.contains("_d16");
    let plain = inst.mnemonic.replace("_d16_hi", "").replace("_d16", "");
    let m = plain.as_str();
    let (op, size) = match m.rsplit_once('_') {
        Some((op, size)) => (op, size),
        None => return Err(unimplemented(inst, ctx)),
    };
    let bytes = match size {
        "b32" | "dword" => 4,
        "b64" | "dwordx2" => 8,
        "b96" | "dwordx3" => 12,
        "b128" | "dwordx4" => 16,
        "u8" | "ubyte" | "i8" | "sbyte" | "b8" | "byte" => 1,
        "u16" | "ushort" | "i16" | "sshort" | "b16" | "short" => 2,
        _ => return Err(unimplemented(inst, ctx)),
    };
    let signed = matches!(size, "i8" | "sbyte" | "i16" | "sshort");
    let load = op.ends_with("load");
    if !(load || op.ends_with("store")) {
        return Err(unimplemented(inst, ctx));
    }
    let offset = ((w0 & 0x1fff) << 19) as i32 >> 19;
    let addr = bits(w1, 0, 8);
    let data = bits(w1, 8, 8);
    let saddr = bits(w1, 16, 7);
    let vdst = bits(w1, 24, 8);
    let off = match ctx.arch {
        Arch::Gfx1100 => 0x7c,
        Arch::Gfx942 => 0x7f,
    };
    let global = m.starts_with("global_");
    if ctx.arch == Arch::Gfx942 && w1 >> 23 & 1 != 0 {
        // data in accumulation registers: not yet
        return Err(unimplemented(inst, ctx));
    }
    for lane in 0..w.lanes {
        if !w.active(lane) {
            continue;
        }
        let base = if global && saddr != off {
            read64(w, inst, saddr, lane, false).wrapping_add(u64::from(w.v[addr as usize][lane]))
        } else {
            u64::from(w.v[addr as usize][lane]) | (u64::from(w.v[addr as usize + 1][lane]) << 32)
        };
        let target = base.wrapping_add_signed(i64::from(offset));
        if load {
            let mut buf = [0u8; 16];
            ctx.memory
                .read(target, &mut buf[..bytes])
                .ok_or_else(|| ctx.bad_access(inst, target, bytes))?;
            if bytes < 4 {
                let raw = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
                let v = match (bytes, signed) {
                    (1, false) => raw & 0xff,
                    (1, true) => raw as u8 as i8 as i32 as u32,
                    (2, false) => raw & 0xffff,
                    _ => raw as u16 as i16 as i32 as u32,
                };
                let old = w.v[vdst as usize][lane];
                w.v[vdst as usize][lane] = if d16_hi {
                    (old & 0xffff) | (v << 16)
                } else if d16 {
                    (old & 0xffff_0000) | (v & 0xffff)
                } else {
                    v
                };
            } else {
                for i in 0..bytes / 4 {
                    let c = &buf[4 * i..4 * i + 4];
                    w.v[vdst as usize + i][lane] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        } else {
            let mut buf = [0u8; 16];
            for i in 0..bytes.div_ceil(4) {
                buf[4 * i..4 * i + 4].copy_from_slice(&w.v[data as usize + i][lane].to_le_bytes());
            }
            if d16_hi {
                buf.copy_within(2..4, 0);
            }
            ctx.memory
                .write(target, &buf[..bytes])
                .ok_or_else(|| ctx.bad_access(inst, target, bytes))?;
        }
    }
    Ok(())
}

/// IEEE half to single (exact).
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // subnormal: normalize
            let shift = m.leading_zeros() - 21;
            let m = (m << shift) & 0x3ff;
            sign | ((113 - shift) << 23) | (m << 13)
        }
        (31, 0) => sign | 0x7f80_0000,
        (31, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// Single to IEEE half, rounding to nearest even (the hardware's default mode).
pub(crate) fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    let (mant, shift) = if e <= 0 {
        if e < -10 {
            return sign;
        }
        (man | 0x80_0000, (14 - e) as u32)
    } else {
        (man, 13)
    };
    let half = 1u32 << (shift - 1);
    let rest = mant & ((1 << shift) - 1);
    let mut h = (mant >> shift) as u16;
    if e > 0 {
        h |= (e as u16) << 10;
    }
    if rest > half || (rest == half && h & 1 == 1) {
        h += 1;
    }
    sign | h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions_equal_ieee() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32();
            let got = f16_to_f32(h);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#x}");
                continue;
            }
            assert_eq!(got.to_bits(), want.to_bits(), "{h:#x}");
            assert_eq!(f32_to_f16(got), h, "{h:#x} back");
        }
        // rounding of values between halves, ties to even, overflow and underflow
        let mut x = 0x3380_0000u32;
        while x < 0x4800_0000 {
            let v = f32::from_bits(x);
            for v in [v, -v] {
                assert_eq!(f32_to_f16(v), half::f16::from_f32(v).to_bits(), "{v:e}");
            }
            x += 0x1235;
        }
    }

    #[test]
    fn float_comparisons_treat_nan_as_unordered() {
        let nan = f64::NAN;
        assert!(fcmp("neq", nan, 1.0) && !fcmp("eq", nan, nan) && !fcmp("lg", nan, 1.0));
        assert!(fcmp("u", nan, 0.0) && !fcmp("o", nan, 0.0) && fcmp("nge", nan, 0.0));
        assert!(fcmp("lg", 1.0, 2.0) && !fcmp("lg", 2.0, 2.0) && fcmp("le", 2.0, 2.0));
    }
}

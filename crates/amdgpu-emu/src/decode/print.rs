//! Instructions in LLVM's assembler syntax, as llvm-objdump prints them, so that the decoder
//! can be held against it line by line: the scalar encodings (SOP1, SOP2, SOPC, SOPK, SOPP,
//! SMEM), the VALU encodings VOP1, VOP2, VOPC, VOP3, VOPD and gfx9's SDWA, gfx11's 16-bit
//! register halves and their op_sel, VOP3P's packed, dot, mix and matrix operations (MFMA
//! with AGPRs, WMMA), LDS (DS), global/flat/scratch memory (the d16 halves too) and the
//! buffer cache operations: every instruction of our code objects. A form outside those
//! ([`operands`] gives `None`) is reported by the AMD tier.
//!
//! One file: one printer per encoding over shared operand spellings, held to llvm-objdump by
//! one test over every instruction of our code objects.

use super::{Format, Instruction};
use crate::Arch;

fn bits(word: u32, lo: u32, n: u32) -> u32 {
    (word >> lo) & ((1u32 << n) - 1)
}

/// A scalar register range of `count` registers from operand code `code`.
fn scalar(arch: Arch, code: u32, count: u32) -> String {
    let range = |prefix: &str, first: u32| {
        if count == 1 {
            format!("{prefix}{first}")
        } else {
            format!("{prefix}[{first}:{}]", first + count - 1)
        }
    };
    match code {
        0..=105 => range("s", code),
        106 if count == 2 => "vcc".into(),
        106 => "vcc_lo".into(),
        107 => "vcc_hi".into(),
        108..=123 => range("ttmp", code - 108),
        124 if arch == Arch::Gfx1100 => "null".into(),
        124 | 125 => "m0".into(),
        126 if count == 2 => "exec".into(),
        126 => "exec_lo".into(),
        127 => "exec_hi".into(),
        _ => format!("<{code}>"),
    }
}

/// A source operand (9-bit code) `count` registers wide; `literal` where the instruction has
/// one.
fn source(arch: Arch, code: u32, count: u32, literal: Option<u32>) -> String {
    match code {
        0..=127 => scalar(arch, code, count),
        128..=192 => (code - 128).to_string(),
        193..=208 => format!("-{}", code - 192),
        240 => "0.5".into(),
        241 => "-0.5".into(),
        242 => "1.0".into(),
        243 => "-1.0".into(),
        244 => "2.0".into(),
        245 => "-2.0".into(),
        246 => "4.0".into(),
        247 => "-4.0".into(),
        248 => "0.15915494".into(),
        253 => "scc".into(),
        // a literal an inline constant could hold is printed as that integer (a long
        // branch's `s_addc_u32 .., 0` or `-1`), any other in hex; a 64-bit operand's literal
        // is zero-extended
        255 => {
            let lit = literal.unwrap_or(0);
            let value = if count == 1 {
                i64::from(lit as i32)
            } else {
                i64::from(lit)
            };
            if (-16..=64).contains(&value) {
                value.to_string()
            } else {
                format!("{lit:#x}")
            }
        }
        256..=511 if count == 1 => format!("v{}", code - 256),
        256..=511 => format!("v[{}:{}]", code - 256, code - 256 + count - 1),
        _ => format!("<{code}>"),
    }
}

/// Registers of each scalar operand of `m`: (destination, first source, second source).
fn scalar_widths(m: &str) -> (u32, u32, u32) {
    let wide = |t: &str| m.ends_with(t);
    let sixty_four = wide("_b64") || wide("_u64") || wide("_i64");
    if !sixty_four {
        return (1, 1, 1);
    }
    let src1 = if m.contains("sh") || m.starts_with("s_bfe") || m.starts_with("s_bitcmp") {
        1
    } else {
        2
    };
    let dst = if m.starts_with("s_bcnt")
        || m.starts_with("s_ff")
        || m.starts_with("s_flbit")
        || m.starts_with("s_ctz")
        || m.starts_with("s_clz")
        || m.starts_with("s_cls")
    {
        1
    } else {
        2
    };
    (dst, 2, src1)
}

/// The instruction's line as llvm-objdump prints it (mnemonic and operands), where this
/// printer knows its encoding.
pub fn text(arch: Arch, inst: &Instruction) -> Option<String> {
    let ops = operands(arch, inst)?;
    Some(if ops.is_empty() {
        inst.mnemonic.to_string()
    } else {
        format!("{} {ops}", inst.mnemonic)
    })
}

/// The operands as llvm-objdump prints them, where this printer knows the encoding.
pub fn operands(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    let w0 = inst.words[0];
    let lit = inst.literal();
    Some(match inst.format {
        // the long branch's pair: a destination alone, a source alone
        Format::Sop1 if m == "s_getpc_b64" => scalar(arch, bits(w0, 16, 7), 2),
        Format::Sop1 if m == "s_setpc_b64" => source(arch, bits(w0, 0, 8), 2, lit),
        Format::Sop1 => {
            let (d, s0, _) = scalar_widths(m);
            format!(
                "{}, {}",
                scalar(arch, bits(w0, 16, 7), d),
                source(arch, bits(w0, 0, 8), s0, lit)
            )
        }
        Format::Sop2 => {
            let (d, s0, s1) = scalar_widths(m);
            format!(
                "{}, {}, {}",
                scalar(arch, bits(w0, 16, 7), d),
                source(arch, bits(w0, 0, 8), s0, lit),
                source(arch, bits(w0, 8, 8), s1, lit)
            )
        }
        Format::Sopc => {
            let (_, s0, s1) = scalar_widths(m);
            format!(
                "{}, {}",
                source(arch, bits(w0, 0, 8), s0, lit),
                source(arch, bits(w0, 8, 8), s1, lit)
            )
        }
        Format::Sopk => format!("{}, {:#x}", scalar(arch, bits(w0, 16, 7), 1), w0 & 0xffff),
        Format::Sopp => sopp(arch, inst)?,
        Format::Smem => {
            let w1 = inst.words[1];
            let dwords = match m.trim_start_matches("s_load_") {
                "b32" | "dword" => 1,
                "b64" | "dwordx2" => 2,
                "b128" | "dwordx4" => 4,
                "b256" | "dwordx8" => 8,
                "b512" | "dwordx16" => 16,
                _ => return None,
            };
            let offset = w1 & 0x1f_ffff;
            let soffset = bits(w1, 25, 7);
            let off = match arch {
                // gfx11: an offset of 0 with no register prints as null; a register alone as
                // itself
                Arch::Gfx1100 if soffset == 124 && offset == 0 => "null".into(),
                Arch::Gfx1100 if soffset == 124 => format!("{offset:#x}"),
                Arch::Gfx1100 if offset == 0 => scalar(arch, soffset, 1),
                Arch::Gfx1100 => format!("{} offset:{offset:#x}", scalar(arch, soffset, 1)),
                // gfx9: IMM (bit 17) an immediate offset, else the offset field names a register
                // SOE: the soffset register, then the immediate
                Arch::Gfx942 if bits(w0, 14, 1) != 0 => {
                    format!("{} offset:{offset:#x}", scalar(arch, soffset, 1))
                }
                Arch::Gfx942 if bits(w0, 17, 1) != 0 => format!("{offset:#x}"),
                Arch::Gfx942 => scalar(arch, w1 & 0x7f, 1),
            };
            format!(
                "{}, {}, {off}",
                scalar(arch, bits(w0, 6, 7), dwords),
                scalar(arch, bits(w0, 0, 6) * 2, 2)
            )
        }
        // the zero word between kernels: no operands
        Format::Vop2 if m == "v_illegal" => String::new(),
        Format::Vop1 | Format::Vop2 | Format::Vopc => vop_e32(arch, inst)?,
        Format::Vop3 => vop3(arch, inst)?,
        Format::Ds => ds(arch, inst)?,
        Format::Vopd => vopd(arch, inst)?,
        Format::Vop3p => vop3p(arch, inst)?,
        Format::Flat => flat(arch, inst)?,
        Format::Vop1Sdwa | Format::Vop2Sdwa | Format::VopcSdwa => sdwa(arch, inst)?,
        Format::Mubuf => mubuf(arch, inst)?,
        _ => return None,
    })
}

/// A two-source VOP2 operation's operands: the lane mask a select reads, or a carry's out
/// (and in) beside its sources.
fn vop2_operands(m: &str, dst: &str, src0: &str, src1: &str, vcc: &str) -> String {
    if m.starts_with("v_cndmask") {
        format!("{dst}, {src0}, {src1}, {vcc}")
    } else if m.contains("_co_ci_") || m.starts_with("v_addc") || m.starts_with("v_subb") {
        format!("{dst}, {vcc}, {src0}, {src1}, {vcc}")
    } else if m.contains("_co_") {
        format!("{dst}, {vcc}, {src0}, {src1}")
    } else {
        format!("{dst}, {src0}, {src1}")
    }
}

/// gfx9's SDWA forms: the operands, then every selector (`dst_sel:DWORD ... src0_sel:WORD_1`).
fn sdwa(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    let (w0, sd) = (inst.words[0], inst.words[1]);
    // clamp and omod are not in our code objects: not printed yet
    if inst.format != Format::VopcSdwa && bits(sd, 13, 3) != 0 {
        return None;
    }
    let sel = |s: u32| -> Option<&'static str> {
        Some(match s {
            0 => "BYTE_0",
            1 => "BYTE_1",
            2 => "BYTE_2",
            3 => "BYTE_3",
            4 => "WORD_0",
            5 => "WORD_1",
            6 => "DWORD",
            _ => return None,
        })
    };
    // an operand: a VGPR, or the scalar the S bit names; sext, abs and neg around it
    let operand = |field: u32, scalar_bit: u32, at: u32| {
        let code = if bits(sd, scalar_bit, 1) != 0 {
            field
        } else {
            256 + field
        };
        let mut text = source(arch, code, 1, None);
        if bits(sd, at, 1) != 0 {
            text = format!("sext({text})");
        }
        if bits(sd, at + 2, 1) != 0 {
            text = format!("|{text}|");
        }
        if bits(sd, at + 1, 1) != 0 {
            text = format!("-{text}");
        }
        text
    };
    let src0 = operand(bits(sd, 0, 8), 23, 19);
    let src0_sel = sel(bits(sd, 16, 3))?;
    let vdst = vgpr(bits(w0, 17, 8), 1);
    let dst_part = || -> Option<String> {
        let unused = match bits(sd, 11, 2) {
            0 => "UNUSED_PAD",
            1 => "UNUSED_SEXT",
            2 => "UNUSED_PRESERVE",
            _ => return None,
        };
        Some(format!(
            "dst_sel:{} dst_unused:{unused}",
            sel(bits(sd, 8, 3))?
        ))
    };
    Some(match inst.format {
        Format::Vop1Sdwa => format!("{vdst}, {src0} {} src0_sel:{src0_sel}", dst_part()?),
        Format::Vop2Sdwa => {
            let src1 = operand(bits(w0, 9, 8), 31, 27);
            let src1_sel = sel(bits(sd, 24, 3))?;
            let ops = vop2_operands(m, &vdst, &src0, &src1, "vcc");
            format!(
                "{ops} {} src0_sel:{src0_sel} src1_sel:{src1_sel}",
                dst_part()?
            )
        }
        _ => {
            let src1 = operand(bits(w0, 9, 8), 31, 27);
            let src1_sel = sel(bits(sd, 24, 3))?;
            // SD: a scalar destination of its own, else VCC
            let dst = if bits(sd, 15, 1) != 0 {
                scalar(arch, bits(sd, 8, 7), 2)
            } else {
                "vcc".into()
            };
            format!("{dst}, {src0}, {src1} src0_sel:{src0_sel} src1_sel:{src1_sel}")
        }
    })
}

/// The cache operations of the buffer encoding (no operands; gfx942's scope bits).
fn mubuf(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    if !(m.ends_with("_inv") || m.starts_with("buffer_wb")) {
        return mubuf_access(arch, inst);
    }
    let w0 = inst.words[0];
    let mut out = Vec::new();
    if arch == Arch::Gfx942 {
        if bits(w0, 14, 1) != 0 {
            out.push("sc0");
        }
        if bits(w0, 15, 1) != 0 {
            out.push("sc1");
        }
    }
    Some(out.join(" "))
}

/// gfx11's MUBUF loads and stores (`vdata, vaddr, s[rsrc:+3], soffset` and its modifiers):
/// offset w0[11:0], slc 12, dlc 13, glc 14; vaddr w1[7:0], vdata 15:8, srsrc 20:16 (in
/// quads), tfe 21, offen 22, idxen 23, soffset 31:24. Atomics and formats: not printed.
fn mubuf_access(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    if arch != Arch::Gfx1100 || m.contains("atomic") || m.contains("format") {
        return None;
    }
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let size = m.rsplit('_').next()?;
    let count = match size {
        "b64" => 2,
        "b96" => 3,
        "b128" => 4,
        "b32" | "b16" | "b8" | "u8" | "i8" | "u16" | "i16" => 1,
        _ => return None,
    } + bits(w1, 21, 1);
    let (offen, idxen) = (bits(w1, 22, 1), bits(w1, 23, 1));
    let vaddr = match (offen, idxen) {
        (0, 0) => "off".to_string(),
        (1, 1) => vgpr(bits(w1, 0, 8), 2),
        _ => vgpr(bits(w1, 0, 8), 1),
    };
    let mut out = format!(
        "{}, {vaddr}, {}, {}",
        vgpr(bits(w1, 8, 8), count),
        scalar(arch, 4 * bits(w1, 16, 5), 4),
        source(arch, bits(w1, 24, 8), 1, None)
    );
    for (on, name) in [(idxen, "idxen"), (offen, "offen")] {
        if on != 0 {
            out.push(' ');
            out.push_str(name);
        }
    }
    if bits(w0, 0, 12) != 0 {
        out.push_str(&format!(" offset:{}", bits(w0, 0, 12)));
    }
    for (bit, name) in [(14, "glc"), (12, "slc"), (13, "dlc")] {
        if bits(w0, bit, 1) != 0 {
            out.push(' ');
            out.push_str(name);
        }
    }
    if bits(w1, 21, 1) != 0 {
        out.push_str(" tfe");
    }
    Some(out)
}

/// Bit widths of a VALU operation's destination and sources from the types its mnemonic
/// names (`v_cvt_f64_i32`: the destination's type first); `None` for packed types.
fn valu_bits(m: &str) -> Option<(u32, u32)> {
    if m.contains("pk") {
        return None;
    }
    let mut types = m
        .trim_end_matches("_e32")
        .split('_')
        .skip(1)
        .filter_map(|t| {
            let (kind, n) = t.split_at(1);
            matches!(kind, "f" | "i" | "u" | "b")
                .then(|| n.parse::<u32>().ok())
                .flatten()
        })
        // 24-bit integer operations read 32-bit registers
        .map(|n| if n == 24 { 32 } else { n });
    Some(match (types.next(), types.next()) {
        (None, _) => (32, 32),
        (Some(t), None) => (t, t),
        (Some(d), Some(s)) => (d, s),
    })
}

/// Register counts of a VALU operation's destination and sources. 16-bit operands take a
/// whole register on gfx942; gfx11's are register halves (`v1.l`), printed by the callers
/// that know where the half is selected. 16-bit literals are not printed yet (`None`).
fn valu_widths(arch: Arch, m: &str, literal: bool) -> Option<(u32, u32)> {
    let (dst, src) = valu_bits(m)?;
    let narrow = dst < 32 || src < 32;
    if narrow && (arch == Arch::Gfx1100 || literal) {
        return None;
    }
    Some((dst.div_ceil(32), src.div_ceil(32)))
}

/// A gfx11 16-bit VGPR operand of a 32-bit encoding: the index's top bit selects the half.
fn vgpr_half(index: u32) -> String {
    let half = if index & 0x80 != 0 { 'h' } else { 'l' };
    format!("v{}.{half}", index & 0x7f)
}

/// gfx11's VOP1 and VOPC with 16-bit operands (true16 register halves).
fn vop_e32_true16(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    let w0 = inst.words[0];
    let (dst_bits, src_bits) = valu_bits(m)?;
    if arch != Arch::Gfx1100 || dst_bits > 32 || src_bits > 32 {
        return None;
    }
    let lit = inst.literal();
    let operand = |code: u32, bits: u32| {
        if code >= 256 && bits == 16 {
            vgpr_half(code - 256)
        } else if bits == 16 {
            // a 16-bit operand's literal is its low half
            source(arch, code, 1, lit.map(|l| l & 0xffff))
        } else {
            source(arch, code, 1, lit)
        }
    };
    let src0 = operand(bits(w0, 0, 9), src_bits);
    Some(match inst.format {
        Format::Vop1 => {
            let dst = bits(w0, 17, 8);
            let dst = if dst_bits == 16 {
                vgpr_half(dst)
            } else {
                vgpr(dst, 1)
            };
            format!("{dst}, {src0}")
        }
        // the two-source operations without a constant K or a carry
        Format::Vop2
            if !(m.contains("mk")
                || m.contains("ak")
                || m.contains("_co_")
                || m.contains("cndmask")) =>
        {
            let dst = bits(w0, 17, 8);
            let dst = if dst_bits == 16 {
                vgpr_half(dst)
            } else {
                vgpr(dst, 1)
            };
            let src1 = operand(256 + bits(w0, 9, 8), src_bits);
            format!("{dst}, {src0}, {src1}")
        }
        Format::Vopc if !m.contains("class") => {
            let src1 = operand(256 + bits(w0, 9, 8), src_bits);
            if m.starts_with("v_cmpx") {
                format!("{src0}, {src1}")
            } else {
                format!("vcc_lo, {src0}, {src1}")
            }
        }
        _ => return None,
    })
}

fn vgpr(code: u32, count: u32) -> String {
    source(Arch::Gfx942, 256 + code, count, None)
}

/// gfx942's accumulation registers, as llvm-objdump names them (`a3`, `a[4:5]`).
fn agpr(code: u32, count: u32) -> String {
    if count == 1 {
        format!("a{code}")
    } else {
        format!("a[{}:{}]", code, code + count - 1)
    }
}

fn vop_e32(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    let w0 = inst.words[0];
    if m == "v_accvgpr_mov_b32" {
        // gfx942's VOP1 move between accumulation registers
        return Some(format!(
            "a{}, a{}",
            bits(w0, 17, 8),
            bits(w0, 0, 9).checked_sub(256)?
        ));
    }
    let lit = inst.literal();
    let Some((dst_n, src_n)) = valu_widths(arch, m, inst.literal().is_some()) else {
        return vop_e32_true16(arch, inst);
    };
    let src0_code = bits(w0, 0, 9);
    // a 64-bit operation's inline 1/(2*pi) prints as a 64-bit value (its literal as the
    // 32-bit word)
    if src_n == 2 && src0_code == 248 {
        return None;
    }
    let src0 = source(arch, src0_code, src_n, lit);
    let vcc = match arch {
        Arch::Gfx1100 => "vcc_lo",
        Arch::Gfx942 => "vcc",
    };
    Some(match inst.format {
        Format::Vop1 => {
            let dst = bits(w0, 17, 8);
            match m {
                "v_nop" | "v_nop_e32" => String::new(),
                "v_readfirstlane_b32" => format!("{}, {src0}", scalar(arch, dst, 1)),
                _ => format!("{}, {src0}", vgpr(dst, dst_n)),
            }
        }
        Format::Vop2 => {
            let dst = vgpr(bits(w0, 17, 8), dst_n);
            let src1 = vgpr(bits(w0, 9, 8), src_n);
            if m.contains("fmamk") || m.contains("madmk") {
                format!("{dst}, {src0}, {:#x}, {src1}", lit?)
            } else if m.contains("fmaak") || m.contains("madak") {
                format!("{dst}, {src0}, {src1}, {:#x}", lit?)
            } else {
                vop2_operands(m, &dst, &src0, &src1, vcc)
            }
        }
        _ => {
            let src1_n = if m.contains("class") { 1 } else { src_n };
            let src1 = vgpr(bits(w0, 9, 8), src1_n);
            if arch == Arch::Gfx1100 && m.starts_with("v_cmpx") {
                format!("{src0}, {src1}")
            } else {
                format!("{vcc}, {src0}, {src1}")
            }
        }
    })
}

/// Registers of a lane mask: one SGPR for wave32 code (gfx11 here), a pair for wave64.
fn lane_mask(arch: Arch) -> u32 {
    match arch {
        Arch::Gfx1100 => 1,
        Arch::Gfx942 => 2,
    }
}

/// VOP3 operations of their own (not a VOP1/VOP2/VOPC operation in the long encoding) that
/// take two sources; the others take three.
const VOP3_TWO_SOURCES: [&str; 33] = [
    "v_pack_",
    "v_cndmask",
    "v_add_nc_",
    "v_sub_nc_",
    "v_max_u16",
    "v_max_i16",
    "v_min_u16",
    "v_min_i16",
    "v_lshlrev_b16",
    "v_lshrrev_b16",
    "v_ashrrev_i16",
    "v_and_b16",
    "v_or_b16",
    "v_xor_b16",
    "v_ldexp_",
    "v_mbcnt_",
    "v_add_f64",
    "v_mul_f64",
    "v_max_f64",
    "v_min_f64",
    "v_mul_lo_",
    "v_mul_hi_",
    "v_trig_preop",
    "v_lshlrev_b64",
    "v_lshrrev_b64",
    "v_ashrrev_i64",
    "v_readlane",
    "v_writelane",
    "v_add_co_u32",
    "v_sub_co_u32",
    "v_subrev_co_u32",
    "v_bfm_",
    "v_bcnt_",
];

fn vop3(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let op = inst.opcode as u32;
    let (vop2_base, vop1_base, native_base) = match arch {
        Arch::Gfx1100 => (0x100, 0x180, 0x200),
        Arch::Gfx942 => (0x100, 0x140, 0x180),
    };
    let is_vopc = op < vop2_base;
    let sources = if op < vop1_base {
        2
    } else if op < native_base {
        1
    } else if VOP3_TWO_SOURCES.iter().any(|p| m.contains(p)) {
        2
    } else {
        3
    };
    // gfx11's 16-bit operands are register halves, op_sel choosing the high ones
    // (bits 0-2 the sources, bit 3 the destination)
    let (dst_bits, src_bits) = valu_bits(m)?;
    let true16 = arch == Arch::Gfx1100 && (dst_bits == 16 || src_bits == 16);
    let op_sel = bits(w0, 11, 4);
    let (dst_n, src_n) = if true16 {
        if dst_bits > 32 || src_bits > 32 {
            return None;
        }
        (1, 1)
    } else {
        valu_widths(arch, m, inst.literal().is_some())?
    };
    let half = |index: u32, sel: u32| {
        let h = if op_sel & (1 << sel) != 0 { 'h' } else { 'l' };
        format!("v{index}.{h}")
    };
    let carry_out = m.contains("_co_")
        || m.starts_with("v_addc")
        || m.starts_with("v_subb")
        || m.starts_with("v_div_scale")
        || m.starts_with("v_mad_u64")
        || m.starts_with("v_mad_i64");
    let carry_in = m.contains("_co_ci_") || m.starts_with("v_addc") || m.starts_with("v_subb");
    // op_sel on 32-bit operations does not occur in our code; not printed yet
    if !carry_out && !true16 && op_sel != 0 {
        return None;
    }
    let mut widths = [src_n; 3];
    match m {
        _ if m.starts_with("v_mad_u64") || m.starts_with("v_mad_i64") => widths = [1, 1, 2],
        _ if m.starts_with("v_lshlrev_b64") || m.starts_with("v_lshrrev_b64") => widths = [1, 2, 2],
        _ if m.starts_with("v_ashrrev_i64") => widths = [1, 2, 2],
        _ if m.starts_with("v_lshl_add_u64") => widths = [2, 1, 2],
        _ if m.starts_with("v_ldexp_f64") || m.starts_with("v_trig_preop") => widths = [2, 1, 2],
        _ if is_vopc && m.contains("class") => widths = [src_n, 1, 1],
        _ => {}
    }
    if m.starts_with("v_cndmask") || carry_in {
        widths[2] = lane_mask(arch);
    }
    let lit = inst.literal();
    let (abs, neg) = (bits(w0, 8, 3), bits(w1, 29, 3));
    let mut srcs = Vec::new();
    for (i, width) in widths
        .iter()
        .enumerate()
        .take(sources + usize::from(m.starts_with("v_cndmask") || carry_in))
    {
        let code = bits(w1, 9 * i as u32, 9);
        let constant = (128..=255).contains(&code);
        // a 64-bit operand's inline 1/(2*pi) prints as a 64-bit value (its literal as the
        // 32-bit word)
        if *width == 2 && code == 248 {
            return None;
        }
        let mask = i == 2 && (m.starts_with("v_cndmask") || carry_in);
        // a class compare's second source is the mask of classes, a whole register
        let class_mask = i == 1 && m.contains("class");
        let mut text = if true16 && src_bits == 16 && !mask && !class_mask {
            if code >= 256 {
                half(code - 256, i as u32)
            } else {
                // a 16-bit operand's literal is its low half
                source(arch, code, 1, lit.map(|l| l & 0xffff))
            }
        } else {
            source(arch, code, *width, lit)
        };
        if !carry_out && abs & (1 << i) != 0 {
            if constant {
                return None;
            }
            text = format!("|{text}|");
        }
        if neg & (1 << i) != 0 {
            if constant {
                return None;
            }
            text = format!("-{text}");
        }
        // gfx11's alignbit/alignbyte read a 16-bit shift: a VGPR's low half
        if arch == Arch::Gfx1100 && i == 2 && m.starts_with("v_align") && code >= 256 {
            text.push_str(".l");
        }
        srcs.push(text);
    }
    let mut out = if is_vopc {
        if arch == Arch::Gfx1100 && m.starts_with("v_cmpx") {
            String::new()
        } else {
            format!("{}, ", scalar(arch, bits(w0, 0, 8), lane_mask(arch)))
        }
    } else if m.starts_with("v_readlane") || m.starts_with("v_readfirstlane") {
        format!("{}, ", scalar(arch, bits(w0, 0, 8), 1))
    } else if true16 && dst_bits == 16 {
        format!("{}, ", half(bits(w0, 0, 8), 3))
    } else if true16 && op_sel & 8 != 0 {
        return None;
    } else {
        format!("{}, ", vgpr(bits(w0, 0, 8), dst_n))
    };
    if carry_out {
        out.push_str(&format!(
            "{}, ",
            scalar(arch, bits(w0, 8, 7), lane_mask(arch))
        ));
    }
    let printed_sources = srcs.len() - usize::from(m.starts_with("v_cndmask") || carry_in);
    out.push_str(&srcs.join(", "));
    // gfx11's 16-bit selections are also spelt out: one bit a source, then the destination's
    if true16 && op_sel != 0 && !m.starts_with("v_cndmask") {
        let mut list: Vec<String> = (0..printed_sources)
            .map(|i| (op_sel >> i & 1).to_string())
            .collect();
        list.push((op_sel >> 3 & 1).to_string());
        out.push_str(&format!(" op_sel:[{}]", list.join(",")));
    }
    if bits(w0, 15, 1) != 0 {
        out.push_str(" clamp");
    }
    match bits(w1, 27, 2) {
        0 => {}
        1 => out.push_str(" mul:2"),
        2 => out.push_str(" mul:4"),
        _ => out.push_str(" div:2"),
    }
    Some(out)
}

/// Registers of one element of a memory instruction from its size suffix.
fn element_registers(size: &str) -> Option<u32> {
    Some(match size {
        "b32" | "dword" | "u32" | "i32" | "f32" => 1,
        "b64" | "dwordx2" | "x2" | "u64" | "i64" | "f64" => 2,
        "b96" | "dwordx3" => 3,
        "b128" | "dwordx4" => 4,
        "u8" | "i8" | "b8" | "ubyte" | "sbyte" | "byte" | "u16" | "i16" | "b16" | "ushort"
        | "sshort" | "short" => 1,
        _ => return None,
    })
}

fn ds(arch: Arch, inst: &Instruction) -> Option<String> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let m = super::ds_canonical(inst.mnemonic);
    let gds = match arch {
        Arch::Gfx1100 => bits(w0, 17, 1),
        Arch::Gfx942 => bits(w0, 16, 1),
    };
    if gds != 0 {
        return None;
    }
    // gfx942: data and destination in accumulation registers (the address stays a VGPR)
    let acc = arch == Arch::Gfx942 && bits(w0, 25, 1) != 0;
    let data_reg = |code: u32, count: u32| {
        if acc {
            agpr(code, count)
        } else {
            vgpr(code, count)
        }
    };
    // the d16 forms' size is the one before their half (`ds_load_u8_d16_hi`)
    let plain = m.replace("_d16_hi", "").replace("_d16", "");
    let n = element_registers(plain.rsplit_once('_')?.1)?;
    let (offset0, offset1) = (bits(w0, 0, 8), bits(w0, 8, 8));
    let (addr, data0, data1, vdst) = (
        vgpr(bits(w1, 0, 8), 1),
        data_reg(bits(w1, 8, 8), n),
        data_reg(bits(w1, 16, 8), n),
        bits(w1, 24, 8),
    );
    let two = m.contains("_2addr_");
    let mut out = if m.starts_with("ds_load") {
        format!("{}, {addr}", data_reg(vdst, if two { 2 * n } else { n }))
    } else if m.starts_with("ds_store") {
        if two {
            format!("{addr}, {data0}, {data1}")
        } else {
            format!("{addr}, {data0}")
        }
    } else if m.contains("_rtn_") || m == "ds_bpermute_b32" {
        format!("{}, {addr}, {data0}", data_reg(vdst, n))
    } else {
        format!("{addr}, {data0}")
    };
    if two {
        if offset0 != 0 {
            out.push_str(&format!(" offset0:{offset0}"));
        }
        if offset1 != 0 {
            out.push_str(&format!(" offset1:{offset1}"));
        }
    } else if offset0 | offset1 != 0 {
        out.push_str(&format!(" offset:{}", offset0 | (offset1 << 8)));
    }
    Some(out)
}

fn flat(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let segment = inst.opcode >> 8;
    // gfx942's data in accumulation registers is not printed yet
    if arch == Arch::Gfx942 && bits(w1, 23, 1) != 0 && segment != 1 {
        return None;
    }
    // the d16 forms' size is the one before their half (`_ubyte_d16_hi`, `_d16_hi_b16`)
    let plain = m.replace("_d16_hi", "").replace("_d16", "");
    let size = plain.rsplit_once('_')?.1;
    let atomic = m.contains("_atomic_");
    let n = match element_registers(size) {
        Some(n) => n,
        // gfx9's 32-bit atomics carry no size (`global_atomic_add`)
        None if atomic => 1,
        None => return None,
    };
    let data_n = if m.contains("cmpswap") { 2 * n } else { n };
    let (addr, data, saddr, vdst) = (
        bits(w1, 0, 8),
        bits(w1, 8, 8),
        bits(w1, 16, 7),
        bits(w1, 24, 8),
    );
    let (off, returns) = match arch {
        Arch::Gfx1100 => (0x7c, bits(w0, 14, 1) != 0),
        Arch::Gfx942 => (0x7f, bits(w0, 16, 1) != 0),
    };
    let global = segment == 2;
    if segment == 1 {
        return scratch(arch, inst, n);
    }
    let address = if global && saddr != off {
        format!("{}, {}", vgpr(addr, 1), scalar(arch, saddr, 2))
    } else if global {
        format!("{}, off", vgpr(addr, 2))
    } else {
        vgpr(addr, 2)
    };
    let (vaddr, tail) = address
        .split_once(", ")
        .map_or((address.as_str(), None), |(a, t)| (a, Some(t)));
    let mut parts = Vec::new();
    if m.contains("_load_") || (atomic && returns) {
        parts.push(vgpr(vdst, n));
    }
    parts.push(vaddr.to_string());
    if !m.contains("_load_") {
        parts.push(vgpr(data, data_n));
    }
    parts.extend(tail.map(String::from));
    let mut out = parts.join(", ");
    out.push_str(&flat_modifiers(arch, w0));
    Some(out)
}

/// A FLAT/GLOBAL/SCRATCH instruction's immediate offset and cache bits, as printed after its
/// operands.
fn flat_modifiers(arch: Arch, w0: u32) -> String {
    let mut out = String::new();
    let offset = ((w0 & 0x1fff) << 19) as i32 >> 19;
    if offset != 0 {
        out.push_str(&format!(" offset:{offset}"));
    }
    let cache: &[(u32, &str)] = match arch {
        Arch::Gfx1100 => &[(14, "glc"), (15, "slc"), (13, "dlc")],
        Arch::Gfx942 => &[(16, "sc0"), (25, "sc1"), (17, "nt")],
    };
    for (bit, name) in cache {
        if bits(w0, *bit, 1) != 0 {
            out.push(' ');
            out.push_str(name);
        }
    }
    out
}

/// Scratch (per-lane private memory): an address VGPR where SVE says so, an SGPR offset or
/// `off`, the immediate offset.
fn scratch(arch: Arch, inst: &Instruction, n: u32) -> Option<String> {
    let m = inst.mnemonic;
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let (addr, data, saddr, vdst) = (
        bits(w1, 0, 8),
        bits(w1, 8, 8),
        bits(w1, 16, 7),
        bits(w1, 24, 8),
    );
    let (off, sve) = match arch {
        Arch::Gfx1100 => (0x7c, bits(w1, 23, 1) != 0),
        Arch::Gfx942 => (0x7f, bits(w0, 13, 1) != 0),
    };
    if arch == Arch::Gfx942 && bits(w1, 23, 1) != 0 {
        return None;
    }
    let vaddr = if sve { vgpr(addr, 1) } else { "off".into() };
    let saddr = if saddr == off {
        "off".into()
    } else {
        scalar(arch, saddr, 1)
    };
    let mut out = if m.contains("_load_") {
        format!("{}, {vaddr}, {saddr}", vgpr(vdst, n))
    } else {
        format!("{vaddr}, {}, {saddr}", vgpr(data, n))
    };
    out.push_str(&flat_modifiers(arch, w0));
    Some(out)
}

/// gfx11's dual issue: `X operands :: Y mnemonic Y operands`.
fn vopd(arch: Arch, inst: &Instruction) -> Option<String> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let lit = inst.literal();
    let half = |m: &str, dst: u32, src0: u32, vsrc1: u32| -> String {
        let dst = vgpr(dst, 1);
        let src0 = source(arch, src0, 1, lit);
        let src1 = vgpr(vsrc1, 1);
        let k = format!("{:#x}", lit.unwrap_or(0));
        if m.ends_with("mov_b32") {
            format!("{dst}, {src0}")
        } else if m.contains("fmamk") {
            format!("{dst}, {src0}, {k}, {src1}")
        } else if m.contains("fmaak") {
            format!("{dst}, {src0}, {src1}, {k}")
        } else {
            format!("{dst}, {src0}, {src1}")
        }
    };
    let dst_x = bits(w1, 24, 8);
    // Y's destination has the other parity than X's: its low bit is implied
    let dst_y = (bits(w1, 17, 7) << 1) | ((dst_x & 1) ^ 1);
    let x = half(inst.mnemonic, dst_x, bits(w0, 0, 9), bits(w0, 9, 8));
    let y_name = inst.second?;
    let y = half(y_name, dst_y, bits(w1, 0, 9), bits(w1, 9, 8));
    Some(format!("{x} :: {y_name} {y}"))
}

/// Packed, dot and mix operations, and the matrix ones ([`matrix`]).
fn vop3p(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    let (w0, w1) = (inst.words[0], inst.words[1]);
    if m.contains("mfma") || m.contains("wmma") || m.starts_with("v_accvgpr") {
        return matrix(arch, inst);
    }
    let mix = m.starts_with("v_fma_mix");
    let sources: usize = if mix || m.contains("fma") || m.starts_with("v_dot") {
        3
    } else if m.starts_with("v_pk_") {
        2
    } else {
        return None;
    };
    let wide = m.starts_with("v_pk_") && (m.ends_with("_f32") || m.ends_with("_b32"));
    let n = if wide { 2 } else { 1 };
    let lit = inst.literal();
    let bit = |word: u32, at: u32, i: usize| bits(word, at + i as u32, 1);
    let op_sel: Vec<u32> = (0..sources).map(|i| bit(w0, 11, i)).collect();
    let op_sel_hi: Vec<u32> = (0..sources)
        .map(|i| {
            if i < 2 {
                bit(w1, 27, i)
            } else {
                bits(w0, 14, 1)
            }
        })
        .collect();
    let neg_lo: Vec<u32> = (0..sources).map(|i| bit(w1, 29, i)).collect();
    let neg_hi: Vec<u32> = (0..sources).map(|i| bit(w0, 8, i)).collect();
    let mut srcs = Vec::new();
    for i in 0..sources {
        let code = bits(w1, 9 * i as u32, 9);
        // literals and 1/(2*pi) of packed operands print as their halves' values
        if code == 255 || code == 248 {
            return None;
        }
        let mut text = source(arch, code, n, lit);
        if mix {
            // mix's neg_hi bits are absolute values, its neg_lo bits negations
            if neg_hi[i] != 0 || (neg_lo[i] != 0 && (128..=255).contains(&code)) {
                return None;
            }
            if neg_lo[i] != 0 {
                text = format!("-{text}");
            }
        }
        srcs.push(text);
    }
    let list = |v: &[u32]| {
        let items: Vec<String> = v.iter().map(u32::to_string).collect();
        format!("[{}]", items.join(","))
    };
    let mut out = format!("{}, {}", vgpr(bits(w0, 0, 8), n), srcs.join(", "));
    if op_sel.iter().any(|&b| b != 0) {
        out.push_str(&format!(" op_sel:{}", list(&op_sel)));
    }
    // packed operations default to the high halves for the high result, mix to none
    let default_hi = u32::from(!mix);
    if op_sel_hi.iter().any(|&b| b != default_hi) {
        out.push_str(&format!(" op_sel_hi:{}", list(&op_sel_hi)));
    }
    if !mix {
        if neg_lo.iter().any(|&b| b != 0) {
            out.push_str(&format!(" neg_lo:{}", list(&neg_lo)));
        }
        if neg_hi.iter().any(|&b| b != 0) {
            out.push_str(&format!(" neg_hi:{}", list(&neg_hi)));
        }
    }
    if bits(w0, 15, 1) != 0 {
        out.push_str(" clamp");
    }
    Some(out)
}

/// A range of `count` registers of the VGPR (`v`) or AGPR (`a`) file from index `first`.
fn register_range(file: char, first: u32, count: u32) -> String {
    if count == 1 {
        format!("{file}{first}")
    } else {
        format!("{file}[{first}:{}]", first + count - 1)
    }
}

/// MFMA (gfx942: operands in VGPRs or AGPRs), WMMA (gfx11) and the AGPR moves.
fn matrix(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let vdst = bits(w0, 0, 8);
    let src = |i: u32| bits(w1, 9 * i, 9);
    let vreg = |code: u32| code.checked_sub(256);
    match m {
        "v_accvgpr_read_b32" => {
            return Some(format!("v{vdst}, a{}", vreg(src(0))?));
        }
        "v_accvgpr_write_b32" => {
            return Some(format!(
                "a{vdst}, {}",
                source(arch, src(0), 1, inst.literal())
            ));
        }
        _ => {}
    }
    let (ab, cd) = match m {
        "v_wmma_f32_16x16x16_f16" | "v_wmma_f32_16x16x16_bf16" => (8, 8),
        "v_wmma_i32_16x16x16_iu8" => (4, 8),
        "v_mfma_f32_16x16x16_f16" | "v_mfma_f32_16x16x16_bf16" | "v_mfma_i32_16x16x32_i8" => (2, 4),
        "v_mfma_f32_32x32x8_f16" | "v_mfma_f32_32x32x8_bf16" => (2, 16),
        _ => return None,
    };
    let mut suffix = String::new();
    let (a_file, b_file, cd_file) = if m.starts_with("v_wmma") {
        // neg_lo is the integer form's signedness of A and B (printed as llvm-objdump does);
        // float negations, neg_hi and op_sel are not in our code objects: not printed yet
        // (op_sel_hi, which WMMA ignores, is not printed)
        let neg_lo = bits(w1, 29, 3);
        if (neg_lo != 0 && !m.ends_with("_iu8")) || bits(w0, 8, 6) != 0 {
            return None;
        }
        if neg_lo != 0 {
            suffix = format!(
                " neg_lo:[{},{},{}]",
                neg_lo & 1,
                (neg_lo >> 1) & 1,
                neg_lo >> 2
            );
        }
        if bits(w0, 15, 1) != 0 {
            suffix.push_str(" clamp");
        }
        ('v', 'v', 'v')
    } else {
        // cbsz, abid, blgp: broadcasts not in our code objects
        if bits(w0, 8, 7) != 0 || bits(w1, 29, 3) != 0 {
            return None;
        }
        let file = |on: u32| if on != 0 { 'a' } else { 'v' };
        (
            file(bits(w1, 27, 1)),
            file(bits(w1, 28, 1)),
            file(bits(w0, 15, 1)),
        )
    };
    Some(format!(
        "{}, {}, {}, {}{suffix}",
        register_range(cd_file, vdst, cd),
        register_range(a_file, vreg(src(0))?, ab),
        register_range(b_file, vreg(src(1))?, ab),
        match vreg(src(2)) {
            Some(r) => register_range(cd_file, r, cd),
            // an inline constant accumulator (0: a fresh product)
            None => source(arch, src(2), 1, inst.literal()),
        }
    ))
}

fn sopp(arch: Arch, inst: &Instruction) -> Option<String> {
    let m = inst.mnemonic;
    let simm = inst.words[0] & 0xffff;
    Some(match m {
        "s_endpgm" | "s_barrier" | "s_code_end" => String::new(),
        "s_nop" | "s_setprio" | "s_sethalt" => simm.to_string(),
        _ if m.starts_with("s_branch") || m.starts_with("s_cbranch") => simm.to_string(),
        "s_clause" | "s_waitcnt_depctr" | "s_set_inst_prefetch_distance" => format!("{simm:#x}"),
        "s_waitcnt" => {
            // the counters that are not at their maximum, in vmcnt, expcnt, lgkmcnt order
            let (vm, vm_max, exp, lgkm, lgkm_max) = match arch {
                Arch::Gfx1100 => (
                    bits(simm, 10, 6),
                    63,
                    bits(simm, 0, 3),
                    bits(simm, 4, 6),
                    63,
                ),
                Arch::Gfx942 => (
                    bits(simm, 0, 4) | (bits(simm, 14, 2) << 4),
                    63,
                    bits(simm, 4, 3),
                    bits(simm, 8, 4),
                    15,
                ),
            };
            let mut parts = Vec::new();
            if vm != vm_max {
                parts.push(format!("vmcnt({vm})"));
            }
            if exp != 7 {
                parts.push(format!("expcnt({exp})"));
            }
            if lgkm != lgkm_max {
                parts.push(format!("lgkmcnt({lgkm})"));
            }
            if parts.is_empty() {
                // every counter at its maximum: llvm-objdump prints all three
                parts = vec![
                    format!("vmcnt({vm})"),
                    format!("expcnt({exp})"),
                    format!("lgkmcnt({lgkm})"),
                ];
            }
            parts.join(" ")
        }
        "s_delay_alu" => {
            const IDS: [&str; 12] = [
                "NO_DEP",
                "VALU_DEP_1",
                "VALU_DEP_2",
                "VALU_DEP_3",
                "VALU_DEP_4",
                "TRANS32_DEP_1",
                "TRANS32_DEP_2",
                "TRANS32_DEP_3",
                "FMA_ACCUM_CYCLE_1",
                "SALU_CYCLE_1",
                "SALU_CYCLE_2",
                "SALU_CYCLE_3",
            ];
            const SKIPS: [&str; 6] = ["SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4"];
            let (id0, skip, id1) = (bits(simm, 0, 4), bits(simm, 4, 3), bits(simm, 7, 4));
            let mut parts = vec![format!("instid0({})", IDS.get(id0 as usize)?)];
            if skip != 0 {
                parts.push(format!("instskip({})", SKIPS.get(skip as usize)?));
            }
            if id1 != 0 {
                parts.push(format!("instid1({})", IDS.get(id1 as usize)?));
            }
            parts.join(" | ")
        }
        "s_sendmsg" if arch == Arch::Gfx1100 && simm == 3 => "sendmsg(MSG_DEALLOC_VGPRS)".into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode;

    #[test]
    fn scalar_lines_as_llvm_objdump_prints_them() {
        // (arch, words, llvm-objdump's text), from the AMD tier's code objects
        let cases: [(Arch, &[u32], &str); 11] = [
            (Arch::Gfx1100, &[0xBF850004], "s_clause 0x4"),
            (
                Arch::Gfx1100,
                &[0xF40C0400, 0xF8000038],
                "s_load_b256 s[16:23], s[0:1], 0x38",
            ),
            (
                Arch::Gfx1100,
                &[0xF40C0900, 0xF8000000],
                "s_load_b256 s[36:43], s[0:1], null",
            ),
            (
                Arch::Gfx1100,
                &[0x800CFF00, 0x00000058],
                "s_add_u32 s12, s0, 0x58",
            ),
            (
                Arch::Gfx1100,
                &[0xBF870111],
                "s_delay_alu instid0(VALU_DEP_1) | instskip(NEXT) | instid1(VALU_DEP_2)",
            ),
            (Arch::Gfx1100, &[0xBF89FC07], "s_waitcnt lgkmcnt(0)"),
            (Arch::Gfx1100, &[0xBE81007E], "s_mov_b32 s1, exec_lo"),
            (Arch::Gfx1100, &[0x84888204], "s_lshl_b64 s[8:9], s[4:5], 2"),
            (
                Arch::Gfx942,
                &[0xC00200C0, 0x00000024],
                "s_load_dword s3, s[0:1], 0x24",
            ),
            (Arch::Gfx942, &[0xBF8CC07F], "s_waitcnt lgkmcnt(0)"),
            (
                Arch::Gfx942,
                &[0x89FE0A7E],
                "s_andn2_b64 exec, exec, s[10:11]",
            ),
        ];
        assert_prints(&cases);
    }

    fn assert_prints(cases: &[(Arch, &[u32], &str)]) {
        for &(arch, words, want) in cases {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let inst = decode(arch, &bytes, 0, 0).unwrap();
            assert_eq!(text(arch, &inst).as_deref(), Some(want), "{words:x?}");
        }
    }

    #[test]
    fn vector_and_memory_lines_as_llvm_objdump_prints_them() {
        let cases: [(Arch, &[u32], &str); 23] = [
            (Arch::Gfx1100, &[0x7E021501], "v_cvt_f16_f32_e32 v1.l, v1"),
            (
                Arch::Gfx1100,
                &[0xCA240102, 0x0112009F],
                "v_dual_mov_b32 v1, v2 :: v_dual_and_b32 v18, 31, v0",
            ),
            (
                Arch::Gfx1100,
                &[0xCC200002, 0x140A3318],
                "v_fma_mix_f32 v2, v24, v25, v2 op_sel_hi:[0,1,0]",
            ),
            (
                Arch::Gfx942,
                &[0xD3B14022, 0x1802150A],
                "v_pk_mul_f32 v[34:35], v[10:11], v[10:11]",
            ),
            (Arch::Gfx942, &[0x7E061503], "v_cvt_f16_f32_e32 v3, v3"),
            (
                Arch::Gfx1100,
                &[0xD8340000, 0x00000313],
                "ds_store_b32 v19, v3",
            ),
            (
                Arch::Gfx1100,
                &[0xD8201200, 0x00000107],
                "ds_max_u32 v7, v1 offset:4608",
            ),
            (
                Arch::Gfx942,
                &[0xD8101200, 0x00000107],
                "ds_max_u32 v7, v1 offset:4608",
            ),
            (
                Arch::Gfx942,
                &[0xDA1A0940, 0x00000C0C],
                "ds_write_b32 v12, a12 offset:2368",
            ),
            (
                Arch::Gfx1100,
                &[0xDC520000, 0x117C0004],
                "global_load_b32 v17, v[4:5], off",
            ),
            (
                Arch::Gfx1100,
                &[0xDC6E0000, 0x00220802],
                "global_store_b64 v2, v[8:9], s[34:35]",
            ),
            (
                Arch::Gfx1100,
                &[0xD7000209, 0x00018208],
                "v_add_co_u32 v9, s2, s8, -1",
            ),
            (
                Arch::Gfx1100,
                &[0xD4140005, 0x00020F0D],
                "v_cmp_gt_f32_e64 s5, v13, v7",
            ),
            (
                Arch::Gfx1100,
                &[0xD6130204, 0x84124EFF, 0x44000000],
                "v_fma_f32 v4, 0x44000000, |v39|, -v4",
            ),
            (
                Arch::Gfx1100,
                &[0xD6FE7C0A, 0x02021018],
                "v_mad_u64_u32 v[10:11], null, s24, v8, 0",
            ),
            (Arch::Gfx1100, &[0x7E020C12], "v_cvt_f32_u32_e32 v1, s18"),
            (
                Arch::Gfx942,
                &[0xD81A0000, 0x00000213],
                "ds_write_b32 v19, v2",
            ),
            (
                Arch::Gfx942,
                &[0xDC508000, 0x147F0006],
                "global_load_dword v20, v[6:7], off",
            ),
            (
                Arch::Gfx942,
                &[0xDC788000, 0x00040208],
                "global_store_dwordx3 v8, v[2:4], s[4:5]",
            ),
            (
                Arch::Gfx942,
                &[0x32040436],
                "v_add_co_u32_e32 v2, vcc, s54, v2",
            ),
            (
                Arch::Gfx942,
                &[0xD100001B, 0x00C10280],
                "v_cndmask_b32_e64 v27, 0, 1, s[48:49]",
            ),
            (
                Arch::Gfx942,
                &[0xD1CB0104, 0x8410A728],
                "v_fma_f32 v4, |v40|, s83, -v4",
            ),
            (
                Arch::Gfx942,
                &[0xD1E80408, 0x04020406],
                "v_mad_u64_u32 v[8:9], s[4:5], s6, v2, v[0:1]",
            ),
        ];
        assert_prints(&cases);
    }

    #[test]
    fn stride64_lds_pairs_as_llvm_objdump_prints_them() {
        // encodings from llvm-mc 21 (-show-encoding)
        let cases: [(Arch, &[u32], &str); 3] = [
            (
                Arch::Gfx942,
                &[0xD8700100, 0x02000001],
                "ds_read2st64_b32 v[2:3], v1 offset1:1",
            ),
            (
                Arch::Gfx942,
                &[0xD89E0100, 0x00040201],
                "ds_write2st64_b64 v1, v[2:3], v[4:5] offset1:1",
            ),
            (
                Arch::Gfx1100,
                &[0xD8E00100, 0x02000001],
                "ds_load_2addr_stride64_b32 v[2:3], v1 offset1:1",
            ),
        ];
        assert_prints(&cases);
    }

    #[test]
    fn int8_matrix_lines_as_llvm_objdump_prints_them() {
        // encodings from llvm-mc 21 (-show-encoding)
        let cases: [(Arch, &[u32], &str); 4] = [
            (
                Arch::Gfx942,
                &[0xD3D78000, 0x04020500],
                "v_mfma_i32_16x16x32_i8 a[0:3], v[0:1], v[2:3], a[0:3]",
            ),
            (
                Arch::Gfx942,
                &[0xD3D70004, 0x02020500],
                "v_mfma_i32_16x16x32_i8 v[4:7], v[0:1], v[2:3], 0",
            ),
            (
                Arch::Gfx1100,
                &[0xCC444000, 0x7C021908],
                "v_wmma_i32_16x16x16_iu8 v[0:7], v[8:11], v[12:15], v[0:7] neg_lo:[1,1,0]",
            ),
            (
                Arch::Gfx1100,
                &[0xCC44C000, 0x7C021908],
                "v_wmma_i32_16x16x16_iu8 v[0:7], v[8:11], v[12:15], v[0:7] neg_lo:[1,1,0] clamp",
            ),
        ];
        assert_prints(&cases);
    }

    #[test]
    fn sdwa_matrix_scratch_and_half_lines_as_llvm_objdump_prints_them() {
        let cases: [(Arch, &[u32], &str); 12] = [
            (
                Arch::Gfx942,
                &[0xD3CD8000, 0x0202051E],
                "v_mfma_f32_16x16x16_f16 a[0:3], v[30:31], v[2:3], 0",
            ),
            (
                Arch::Gfx942,
                &[0xD3D84042, 0x18000102],
                "v_accvgpr_read_b32 v66, a2",
            ),
            (
                Arch::Gfx1100,
                &[0xCC404011, 0x1C477541],
                "v_wmma_f32_16x16x16_f16 v[17:24], v[65:72], v[186:193], v[17:24]",
            ),
            (
                Arch::Gfx942,
                &[0xDC744018, 0x007F0200],
                "scratch_store_dwordx2 off, v[2:3], off offset:24",
            ),
            (
                Arch::Gfx1100,
                &[0xDC5100B0, 0x017C0000],
                "scratch_load_b32 v1, off, off offset:176",
            ),
            (
                Arch::Gfx942,
                &[0x280836F9, 0x86030605],
                "v_or_b32_sdwa v4, v5, s27 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:BYTE_3 src1_sel:DWORD",
            ),
            (
                Arch::Gfx942,
                &[0x7C442AF9, 0x05050011],
                "v_cmp_eq_f16_sdwa vcc, v17, v21 src0_sel:WORD_1 src1_sel:WORD_1",
            ),
            (
                Arch::Gfx1100,
                &[0xD7391000, 0x00020088],
                "v_lshrrev_b16 v0.l, 8, v0.h op_sel:[0,1,0]",
            ),
            (
                Arch::Gfx1100,
                &[0x7C5608FF, 0xC0900000],
                "v_cmp_ngt_f64_e32 vcc_lo, 0xc0900000, v[4:5]",
            ),
            (
                Arch::Gfx1100,
                &[0xDA8C0008, 0x12000013],
                "ds_load_u8_d16_hi v18, v19 offset:8",
            ),
            (
                Arch::Gfx1100,
                &[0xDC8E1FFF, 0x007C0009],
                "global_load_d16_hi_b16 v0, v[9:10], off offset:-1",
            ),
            (Arch::Gfx1100, &[0x64020381], "v_add_f16_e32 v1.l, v1.h, v1.l"),
        ];
        assert_prints(&cases);
    }

    #[test]
    fn rocblas_buffer_lines_as_llvm_objdump_prints_them() {
        // from rocBLAS 4.4.1's gfx1100 Tensile libraries
        assert_prints(&[
            (
                Arch::Gfx1100,
                &[0xE0500080, 0x80458E89],
                "buffer_load_b32 v142, v137, s[20:23], 0 offen offset:128",
            ),
            (
                Arch::Gfx1100,
                &[0xE0540000, 0x8042201D],
                "buffer_load_b64 v[32:33], v29, s[8:11], 0 offen",
            ),
        ]);
    }
}

//! Instructions in LLVM's assembler syntax, as llvm-objdump prints them, so that the decoder
//! can be held against it line by line. The scalar encodings (SOP1, SOP2, SOPC, SOPK, SOPP,
//! SMEM) are printed; the others are not yet ([`operands`] gives `None`).

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
        255 => format!("{:#x}", literal.unwrap_or(0)),
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
        _ => return None,
    })
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
                return None;
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
        for (arch, words, want) in cases {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let inst = decode(arch, &bytes, 0, 0).unwrap();
            assert_eq!(text(arch, &inst).as_deref(), Some(want), "{words:x?}");
        }
    }
}

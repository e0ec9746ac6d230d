//! Instruction decoding for gfx1100 (RDNA3) and gfx942 (CDNA3): the encoding of each word,
//! the opcode and its mnemonic, the instruction's length (literal constants, DPP and SDWA
//! words included) and its fields.
//!
//! The encodings, from AMD's instruction set references (the top bits of the first word pick
//! the encoding; gfx9 and gfx11 agree on the scalar ones and differ on the vector, memory and
//! matrix ones):
//!
//! | encoding | gfx11 | gfx9 (gfx942) | length |
//! |---|---|---|---|
//! | SOP2 | `10` op[29:23] | same | 4 (+4 literal) |
//! | SOPK | `1011` op[27:23] | same | 4 |
//! | SOP1 / SOPC / SOPP | `10_1111101` / `..110` / `..111` | same | 4 (+4 literal) |
//! | VOP2 / VOP1 / VOPC | `0` op[30:25] / `0111111` op[16:9] / `0111110` op[24:17] | same | 4 (+4 literal, DPP, SDWA) |
//! | VOP3 | `110101` op[25:16] | `110100` op[25:16] | 8 (+4 literal on gfx11) |
//! | VOP3P | `11001100` op[22:16] | `110100111` op[22:16] | 8 (+4 literal on gfx11) |
//! | VOPD | `110010` opX[25:22] opY[21:17] | - | 8 (+4 literal) |
//! | SMEM | `111101` op[25:18] | `110000` op[25:18] | 8 |
//! | DS | `110110` op[25:18] | `110110` op[24:17] | 8 |
//! | FLAT/GLOBAL/SCRATCH | `110111` seg[17:16] op[24:18] | `110111` seg[15:14] op[24:18] | 8 |
//! | MUBUF | `111000` op[25:18] | `111000` op[24:18] | 8 |

mod gfx11_ops;
mod gfx942_ops;
pub mod print;

use crate::{Arch, Error, Result};

/// An instruction encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    Sop1,
    Sop2,
    Sopk,
    Sopc,
    Sopp,
    Smem,
    Vop1,
    Vop2,
    Vopc,
    /// VOP1/VOP2/VOPC with an SDWA word (gfx9).
    Vop1Sdwa,
    Vop2Sdwa,
    VopcSdwa,
    /// VOP1/VOP2/VOPC with a DPP16 word.
    Vop1Dpp,
    Vop2Dpp,
    VopcDpp,
    Vop3,
    Vop3p,
    /// Two VALU operations issued together (gfx11).
    Vopd,
    Ds,
    /// FLAT, GLOBAL or SCRATCH: the segment is part of the opcode (`seg << 8 | op`).
    Flat,
    Mubuf,
}

/// One decoded instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction {
    pub address: u64,
    pub format: Format,
    /// The opcode within its encoding (for FLAT: `segment << 8 | op`; for VOPD: opX).
    pub opcode: u16,
    /// LLVM's mnemonic (for VOPD: the X operation's).
    pub mnemonic: &'static str,
    /// VOPD's Y operation.
    pub second: Option<&'static str>,
    /// The instruction's words (a literal constant or DPP/SDWA word included), up to 3.
    pub words: [u32; 3],
    /// Length in bytes.
    pub len: usize,
}

impl Instruction {
    /// The literal constant, where the instruction has one (its last word).
    pub fn literal(&self) -> Option<u32> {
        let base = match self.format {
            Format::Vop3 | Format::Vop3p | Format::Vopd | Format::Smem => 8,
            _ => 4,
        };
        (self.len > base).then(|| self.words[self.len / 4 - 1])
    }
}

fn lookup(table: &[(u16, &'static str)], op: u16) -> Option<&'static str> {
    table
        .binary_search_by_key(&op, |&(o, _)| o)
        .ok()
        .map(|i| table[i].1)
}

/// A VOP3 opcode that is a VOP1, VOP2 or VOPC operation in its 64-bit form, named as LLVM
/// names it (`_e64` for `_e32`): the tables list the 32-bit forms once. The names are made
/// once a process and kept.
fn promoted(arch: Arch, op: u16) -> Option<&'static str> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    type Names = HashMap<(Arch, u16), Option<&'static str>>;
    static NAMES: OnceLock<Mutex<Names>> = OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    let mut names = names.lock().unwrap_or_else(|p| p.into_inner());
    *names.entry((arch, op)).or_insert_with(|| {
        let (vop1_base, vop1) = match arch {
            Arch::Gfx1100 => (0x180, gfx11_ops::VOP1),
            Arch::Gfx942 => (0x140, gfx942_ops::VOP1),
        };
        let (vop2, vopc) = match arch {
            Arch::Gfx1100 => (gfx11_ops::VOP2, gfx11_ops::VOPC),
            Arch::Gfx942 => (gfx942_ops::VOP2, gfx942_ops::VOPC),
        };
        let short = match op {
            0..=0xff => lookup(vopc, op),
            0x100..=0x13f => lookup(vop2, op - 0x100),
            o if (vop1_base..vop1_base + 0x80).contains(&o) => lookup(vop1, op - vop1_base),
            _ => None,
        }?;
        let base = short.strip_suffix("_e32")?;
        // the forms with a mandatory literal have no 64-bit encoding
        if base.ends_with("mk_f32") || base.ends_with("ak_f32") {
            return None;
        }
        Some(&*Box::leak(format!("{base}_e64").into_boxed_str()))
    })
}

/// A DS mnemonic in gfx11's spelling: gfx9 spells the loads and stores read/write,
/// read2/write2 (`ds_read2_b32` is `ds_load_2addr_b32`).
pub fn ds_canonical(mnemonic: &str) -> String {
    mnemonic
        .replace("ds_read2st64_", "ds_load_2addr_stride64_")
        .replace("ds_write2st64_", "ds_store_2addr_stride64_")
        .replace("ds_read2_", "ds_load_2addr_")
        .replace("ds_write2_", "ds_store_2addr_")
        .replace("ds_read_", "ds_load_")
        .replace("ds_write_", "ds_store_")
}

/// Operand codes of the 9-bit source fields that add a word.
const LITERAL: u32 = 255;
const DPP16: u32 = 0xfa;
const DPP8: u32 = 0xe9;
const SDWA: u32 = 0xf9;

/// Whether a VOP2 (or VOPD) operation carries a literal in every encoding (`fmamk`,
/// `fmaak`, `madmk`, `madak`).
fn mandatory_literal(mnemonic: &str) -> bool {
    ["fmamk", "fmaak", "madmk", "madak"]
        .iter()
        .any(|m| mnemonic.contains(m))
}

/// The encoding and opcode of a first word.
fn classify(arch: Arch, w: u32) -> Option<(Format, u16)> {
    let op = |shift: u32, bits: u32| ((w >> shift) & ((1 << bits) - 1)) as u16;
    match w >> 25 {
        0x3f => return Some((Format::Vop1, op(9, 8))),
        0x3e => return Some((Format::Vopc, op(17, 8))),
        _ => {}
    }
    if w >> 31 == 0 {
        return Some((Format::Vop2, op(25, 6)));
    }
    if w >> 30 == 0b10 {
        return Some(match w >> 23 {
            0x17d => (Format::Sop1, op(8, 8)),
            0x17e => (Format::Sopc, op(16, 7)),
            0x17f => (Format::Sopp, op(16, 7)),
            _ if w >> 28 == 0xb => (Format::Sopk, op(23, 5)),
            _ => (Format::Sop2, op(23, 7)),
        });
    }
    let t6 = w >> 26;
    match arch {
        Arch::Gfx1100 => match t6 {
            0x35 => Some((Format::Vop3, op(16, 10))),
            0x32 => Some((Format::Vopd, op(22, 4))),
            0x36 => Some((Format::Ds, op(18, 8))),
            0x37 => Some((Format::Flat, (op(16, 2) << 8) | op(18, 7))),
            0x3d => Some((Format::Smem, op(18, 8))),
            0x38 => Some((Format::Mubuf, op(18, 8))),
            _ if w >> 24 == 0xcc => Some((Format::Vop3p, op(16, 7))),
            _ => None,
        },
        Arch::Gfx942 => match t6 {
            _ if w >> 23 == 0x1a7 => Some((Format::Vop3p, op(16, 7))),
            0x34 => Some((Format::Vop3, op(16, 10))),
            0x36 => Some((Format::Ds, op(17, 8))),
            0x37 => Some((Format::Flat, (op(14, 2) << 8) | op(18, 7))),
            0x30 => Some((Format::Smem, op(18, 8))),
            0x38 => Some((Format::Mubuf, op(18, 7))),
            _ => None,
        },
    }
}

fn table(arch: Arch, format: Format) -> &'static [(u16, &'static str)] {
    match arch {
        Arch::Gfx1100 => {
            use gfx11_ops as t;
            match format {
                Format::Sop1 => t::SOP1,
                Format::Sop2 => t::SOP2,
                Format::Sopk => t::SOPK,
                Format::Sopc => t::SOPC,
                Format::Sopp => t::SOPP,
                Format::Smem => t::SMEM,
                Format::Vop1 => t::VOP1,
                Format::Vop2 => t::VOP2,
                Format::Vopc => t::VOPC,
                Format::Vop3 => t::VOP3,
                Format::Vop3p => t::VOP3P,
                Format::Vopd => t::VOPDX,
                Format::Ds => t::DS,
                Format::Flat => t::FLAT,
                Format::Mubuf => t::MUBUF,
                _ => &[],
            }
        }
        Arch::Gfx942 => {
            use gfx942_ops as t;
            match format {
                Format::Sop1 => t::SOP1,
                Format::Sop2 => t::SOP2,
                Format::Sopk => t::SOPK,
                Format::Sopc => t::SOPC,
                Format::Sopp => t::SOPP,
                Format::Smem => t::SMEM,
                Format::Vop1 => t::VOP1,
                Format::Vop2 => t::VOP2,
                Format::Vopc => t::VOPC,
                Format::Vop1Sdwa => t::VOP1_SDWA,
                Format::Vop2Sdwa => t::VOP2_SDWA,
                Format::VopcSdwa => t::VOPC_SDWA,
                Format::Vop3 => t::VOP3,
                Format::Vop3p => t::VOP3P,
                Format::Ds => t::DS,
                Format::Flat => t::FLAT,
                Format::Mubuf => t::MUBUF,
                _ => &[],
            }
        }
    }
}

fn word(code: &[u8], at: usize) -> Option<u32> {
    code.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn undecodable(arch: Arch, address: u64, code: &[u8], at: usize) -> Error {
    let words = (0..3)
        .filter_map(|i| word(code, at + 4 * i))
        .map(|w| format!("{w:08X}"))
        .collect::<Vec<_>>()
        .join(" ");
    Error::Undecodable {
        arch: arch.name(),
        address,
        words,
    }
}

/// The instruction at byte `at` of `code`, which sits at `base` in the loaded image.
pub fn decode(arch: Arch, code: &[u8], at: usize, base: u64) -> Result<Instruction> {
    let address = base + at as u64;
    let fail = || undecodable(arch, address, code, at);
    let w0 = word(code, at).ok_or_else(fail)?;
    let (mut format, opcode) = classify(arch, w0).ok_or_else(fail)?;
    let src0 = w0 & 0x1ff;
    // VOP1/VOP2/VOPC with a DPP or SDWA word: their own mnemonic tables
    let mut extra = 0;
    if matches!(format, Format::Vop1 | Format::Vop2 | Format::Vopc) {
        let sdwa = arch == Arch::Gfx942 && src0 == SDWA;
        let dpp = src0 == DPP16 || (arch == Arch::Gfx1100 && src0 == DPP8);
        if sdwa || dpp {
            extra = 4;
            format = match (format, sdwa) {
                (Format::Vop1, true) => Format::Vop1Sdwa,
                (Format::Vop2, true) => Format::Vop2Sdwa,
                (Format::Vopc, true) => Format::VopcSdwa,
                (Format::Vop1, false) => Format::Vop1Dpp,
                (Format::Vop2, false) => Format::Vop2Dpp,
                (_, _) => Format::VopcDpp,
            };
        }
    }
    let mnemonic = lookup(table(arch, format), opcode)
        .or_else(|| {
            (format == Format::Vop3)
                .then(|| promoted(arch, opcode))
                .flatten()
        })
        .ok_or_else(fail)?;
    let base_len = match format {
        Format::Vop3
        | Format::Vop3p
        | Format::Vopd
        | Format::Smem
        | Format::Ds
        | Format::Flat
        | Format::Mubuf => 8,
        _ => 4,
    };
    let w1 = if base_len == 8 {
        word(code, at + 4).ok_or_else(fail)?
    } else {
        0
    };
    let mut second = None;
    let literal = match format {
        Format::Sop1 => w0 & 0xff == LITERAL,
        Format::Sop2 | Format::Sopc => w0 & 0xff == LITERAL || (w0 >> 8) & 0xff == LITERAL,
        Format::Vop1 | Format::Vopc => src0 == LITERAL,
        Format::Vop2 => src0 == LITERAL || mandatory_literal(mnemonic),
        Format::Vop3 | Format::Vop3p if arch == Arch::Gfx1100 => {
            [w1 & 0x1ff, (w1 >> 9) & 0x1ff, (w1 >> 18) & 0x1ff].contains(&LITERAL)
        }
        Format::Vopd => {
            let y = lookup(gfx11_ops::VOPDY, ((w0 >> 17) & 0x1f) as u16).ok_or_else(fail)?;
            second = Some(y);
            src0 == LITERAL
                || w1 & 0x1ff == LITERAL
                || mandatory_literal(mnemonic)
                || mandatory_literal(y)
        }
        _ => false,
    };
    let len = base_len + extra + if literal { 4 } else { 0 };
    let mut words = [0u32; 3];
    for (i, w) in words.iter_mut().enumerate().take(len / 4) {
        *w = word(code, at + 4 * i).ok_or_else(fail)?;
    }
    Ok(Instruction {
        address,
        format,
        opcode,
        mnemonic,
        second,
        words,
        len,
    })
}

/// Every instruction of `code` (which sits at `base`), in order; the first that does not
/// decode ends it with its error.
pub fn decode_all(arch: Arch, code: &[u8], base: u64) -> Result<Vec<Instruction>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let inst = decode(arch, code, at, base)?;
        at += inst.len;
        out.push(inst);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn encodings_of_each_kind_decode_with_their_lengths() {
        // (arch, words, mnemonic, length), as llvm-objdump decodes them
        let cases: [(Arch, &[u32], &str, usize); 12] = [
            (Arch::Gfx1100, &[0xBF850004], "s_clause", 4),
            (Arch::Gfx1100, &[0xF40C0400, 0xF8000038], "s_load_b256", 8),
            (Arch::Gfx1100, &[0x3656009F], "v_and_b32_e32", 4),
            (Arch::Gfx1100, &[0x800CFF00, 0x00000058], "s_add_u32", 8),
            (Arch::Gfx1100, &[0x7E020C12], "v_cvt_f32_u32_e32", 4),
            (
                Arch::Gfx1100,
                &[0xC8C602FF, 0x010204FF, 0x4F7FFFFE],
                "v_dual_mul_f32",
                12,
            ),
            (Arch::Gfx1100, &[0x8B21FF03, 0x0000FFFF], "s_and_b32", 8),
            (Arch::Gfx1100, &[0xBFB60003], "s_sendmsg", 4),
            (Arch::Gfx942, &[0xBF800000], "s_nop", 4),
            (Arch::Gfx1100, &[0xBF870111], "s_delay_alu", 4),
            (Arch::Gfx1100, &[0x7E000000], "v_nop", 4),
            // hiprtc's division by a constant in moe_q8 (gfx942)
            (
                Arch::Gfx942,
                &[0x123A0CFF, 0x00000050],
                "v_mul_hi_u32_u24_e32",
                8,
            ),
        ];
        for (arch, words, mnemonic, len) in cases {
            let inst = decode(arch, &bytes(words), 0, 0x1000).unwrap();
            assert_eq!((inst.mnemonic, inst.len), (mnemonic, len), "{words:x?}");
        }
        let dual = decode(
            Arch::Gfx1100,
            &bytes(&[0xC8C602FF, 0x010204FF, 0x4F7FFFFE]),
            0,
            0,
        )
        .unwrap();
        assert_eq!(dual.second, Some("v_dual_mul_f32"));
        assert_eq!(dual.literal(), Some(0x4F7FFFFE));
    }

    #[test]
    fn unknown_and_cut_instructions_are_errors_naming_them() {
        // an SOPP opcode no kernel uses, and an SMEM cut after its first word
        let e = decode(Arch::Gfx1100, &bytes(&[0xBFFF0000]), 0, 0x40).unwrap_err();
        assert_eq!(
            e,
            Error::Undecodable {
                arch: "gfx1100",
                address: 0x40,
                words: "BFFF0000".into()
            }
        );
        assert!(decode(Arch::Gfx1100, &bytes(&[0xF40C0400]), 0, 0).is_err());
    }
}

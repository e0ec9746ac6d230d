//! What each instruction does, from AMD's RDNA3 and CDNA3 instruction set references: the
//! scalar ALU, the vector ALU (VOP1/2/C/3 and gfx11's dual issue), scalar loads and
//! global/flat memory, branches and the end of the program. Operands are read by their
//! 9-bit codes (SGPRs, VCC, EXEC, M0, inline constants, a literal, VGPRs).

mod matrix;
mod memory;
mod packed;
mod scalar;
mod vector;

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

/// M0's operand code.
fn m0_code(arch: Arch) -> u32 {
    match arch {
        Arch::Gfx1100 => 125,
        Arch::Gfx942 => 124,
    }
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

/// An inline float constant as a 16-bit float operand reads it (f16 bits).
fn inline_f16(code: u32) -> Option<u32> {
    Some(match code {
        240 => 0x3800,
        241 => 0xb800,
        242 => 0x3c00,
        243 => 0xbc00,
        244 => 0x4000,
        245 => 0xc000,
        246 => 0x4400,
        247 => 0xc400,
        // 1 / (2 pi)
        248 => 0x3118,
        _ => return None,
    })
}

/// Whether `name`'s (without its encoding suffix) sources are half-precision floats, whose
/// inline float constants are f16 values.
fn f16_sources(name: &str) -> bool {
    match name.strip_prefix("v_cvt_") {
        Some(types) => types.split('_').nth(1) == Some("f16"),
        None => name.ends_with("_f16"),
    }
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

/// A 64-bit operand of one lane: inline float constants as doubles; a literal as the high half
/// where `float` (a double-precision operation), else zero-extended.
fn read64(w: &Wave, inst: &Instruction, code: u32, lane: usize, float: bool) -> u64 {
    match code {
        0..=127 => u64::from(w.s[code as usize]) | (u64::from(w.s[code as usize + 1]) << 32),
        128..=208 => read32(w, inst, code, lane) as i32 as i64 as u64,
        // a 64-bit operand's inline float constants are doubles, whatever the operation
        240..=248 => inline_f64(code).unwrap_or(0),
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

/// What is worked out about an instruction once, when it is decoded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Plan {
    Lanes(vector::LanesPlan),
    /// A FLAT/GLOBAL/SCRATCH access (None: one the emulator does not know).
    Flat(Option<memory::FlatAccess>),
    /// An LDS access (None: one the emulator does not know).
    Ds(Option<memory::DsAccess>),
    /// A vector operation resolved each time it runs, its name's facts worked out.
    Valu(vector::ValuFacts),
    /// Resolved each time it runs.
    General,
}

impl Plan {
    pub(crate) fn of(inst: &Instruction) -> Plan {
        if inst.format == Format::Flat {
            return Plan::Flat(memory::FlatAccess::of(inst.mnemonic));
        }
        if inst.format == Format::Ds {
            return Plan::Ds(memory::DsAccess::of(inst.mnemonic));
        }
        if let Some(p) = vector::lanes_plan(inst) {
            return Plan::Lanes(p);
        }
        match inst.format {
            Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 => {
                Plan::Valu(vector::ValuFacts::of(
                    inst.mnemonic
                        .trim_end_matches("_e32")
                        .trim_end_matches("_e64"),
                ))
            }
            Format::Vop1Sdwa | Format::Vop2Sdwa => Plan::Valu(vector::ValuFacts::of(
                inst.mnemonic.trim_end_matches("_sdwa"),
            )),
            _ => Plan::General,
        }
    }
}

pub(crate) fn execute(
    w: &mut Wave,
    inst: &Instruction,
    plan: &Plan,
    ctx: &mut Context<'_>,
) -> ExecResult<Flow> {
    if let Plan::Lanes(p) = plan {
        vector::run_lanes(w, inst, p);
        return Ok(Flow::Next);
    }
    let m = inst.mnemonic;
    // the hazard wait the compiler puts between dependent matrix ops: nothing to do here
    if m == "v_nop" {
        return Ok(Flow::Next);
    }
    let w0 = inst.words[0];
    let w1 = inst.words[1];
    match inst.format {
        Format::Sopp => scalar::sopp(w, inst, ctx),
        Format::Sop1 if m == "s_setpc_b64" => Ok(scalar::setpc(w, inst)),
        Format::Sop1 | Format::Sop2 | Format::Sopc | Format::Sopk => {
            scalar::salu(w, inst, ctx)?;
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
            let facts = match plan {
                Plan::Valu(f) => Some(f),
                _ => None,
            };
            vector::sdwa(w, inst, facts, ctx)?;
            Ok(Flow::Next)
        }
        Format::Vop1 | Format::Vop2 | Format::Vopc | Format::Vop3 | Format::Vopd => {
            let facts = match plan {
                Plan::Valu(f) => Some(f),
                _ => None,
            };
            vector::valu(w, inst, facts, ctx)?;
            Ok(Flow::Next)
        }
        _ if m.starts_with("v_mfma_")
            || m.starts_with("v_wmma_")
            || m.starts_with("v_accvgpr_") =>
        {
            matrix::execute(w, inst, ctx)?;
            Ok(Flow::Next)
        }
        Format::Vop3p => {
            packed::vop3p(w, inst, ctx)?;
            Ok(Flow::Next)
        }
        Format::Flat => {
            let access = match plan {
                Plan::Flat(a) => *a,
                _ => memory::FlatAccess::of(inst.mnemonic),
            };
            memory::flat(w, inst, access, ctx)?;
            Ok(Flow::Next)
        }
        Format::Ds => {
            let access = match plan {
                Plan::Ds(a) => *a,
                _ => memory::DsAccess::of(inst.mnemonic),
            };
            memory::ds(w, inst, access, ctx)?;
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
    use super::vector::fcmp;
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
        let f = |op: &str, a: f64, b: f64| fcmp(op, a, b).unwrap();
        assert!(f("neq", nan, 1.0) && !f("eq", nan, nan) && !f("lg", nan, 1.0));
        assert!(f("u", nan, 0.0) && !f("o", nan, 0.0) && f("nge", nan, 0.0));
        assert!(f("lg", 1.0, 2.0) && !f("lg", 2.0, 2.0) && f("le", 2.0, 2.0));
        assert_eq!(fcmp("class", 1.0, 2.0), None);
    }

    /// A wave of `lanes` lanes at `pc` with these VGPRs, every lane on, the rest zero.
    fn wave(lanes: usize, pc: u64, v: Vec<Vec<u32>>) -> Wave {
        let mut w = Wave {
            lanes,
            s: [0; 128],
            v,
            scc: false,
            pc,
            done: false,
            at_barrier: false,
            private: Vec::new(),
            private_size: 0,
            a: Vec::new(),
        };
        w.set_exec(u64::MAX);
        w
    }

    /// `count` instructions of `code` (loaded at `base`) run on `w`: each one's mnemonic, flow
    /// and the address after it.
    fn run_code(
        arch: Arch,
        code: &[u8],
        base: u64,
        w: &mut Wave,
        count: usize,
    ) -> Vec<(&'static str, Flow, u64)> {
        let memory = crate::exec::Memory::new();
        let mut lds = [0u8; 0];
        let mut ctx = Context {
            arch,
            step_limit: 16,
            memory: &memory,
            kernel: "unit test",
            lds: &mut lds,
            trace: None,
        };
        let mut at = 0usize;
        let mut flows = Vec::new();
        for _ in 0..count {
            let inst = crate::decode::decode(arch, code, at, base).unwrap();
            let flow = execute(w, &inst, &Plan::of(&inst), &mut ctx).unwrap();
            at += inst.len;
            flows.push((inst.mnemonic, flow, base + at as u64));
        }
        flows
    }

    #[test]
    fn the_24_bit_high_products_take_the_low_24_bits() {
        // gfx942 VOP2 v2 = op(v0, v1): v_mul_hi_u32_u24 (9) and v_mul_hi_i32_i24 (7)
        let run = |word: u32, v0: u32, v1: u32| {
            let mut w = wave(64, 0, vec![vec![v0; 64], vec![v1; 64], vec![0; 64]]);
            let flows = run_code(Arch::Gfx942, &word.to_le_bytes(), 0, &mut w, 1);
            (flows[0].0, w.v[2][63])
        };
        // 0xffffff * 0xfffffe = 0xfffffd000002 (the sources' bits past 24 dropped)
        assert_eq!(
            run(0x1204_0300, 0xabff_ffff, 0x00ff_fffe),
            ("v_mul_hi_u32_u24_e32", 0xffff)
        );
        // -2^23 * (2^23 - 1) = -0x3fffff800000: bits 63:32 of it are -0x4000
        assert_eq!(
            run(0x0e04_0300, 0x0080_0000, 0x007f_ffff),
            ("v_mul_hi_i32_i24_e32", 0xffff_c000)
        );
    }

    #[test]
    fn the_f16_pair_dot_product_accumulates_into_f32() {
        // gfx942 `v_dot2c_f32_f16_e32 v2, v0, v1` (VOP2 0x37): v2 += v0.lo * v1.lo + v0.hi * v1.hi
        let h = |x: f32| u32::from(half::f16::from_f32(x).to_bits());
        let (a, b) = (h(1.5) | h(-2.0) << 16, h(4.0) | h(0.25) << 16);
        let mut w = wave(
            64,
            0,
            vec![vec![a; 64], vec![b; 64], vec![0.75f32.to_bits(); 64]],
        );
        let flows = run_code(Arch::Gfx942, &0x6e04_0300u32.to_le_bytes(), 0, &mut w, 1);
        assert_eq!(flows[0].0, "v_dot2c_f32_f16_e32");
        // 1.5 * 4 - 2 * 0.25 + 0.75
        assert_eq!(f32::from_bits(w.v[2][5]), 6.25);
    }

    #[test]
    fn a_long_branch_lands_on_its_target() {
        // gfx1100's form (llvm-objdump of our flash_attention code object): s_getpc_b64
        // s[102:103]; s_add_u32 s102, s102, 0x281b4; s_addc_u32 s103, s103, 0; s_setpc_b64
        // s[102:103]
        let words: [u32; 7] = [
            0xBEE64700, 0x8066FF66, 0x000281B4, 0x8267FF67, 0x00000000, 0xBE804866, 0,
        ];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let base = 0x91f4u64;
        let mut w = wave(32, base, vec![vec![0; 32]; 1]);
        let mut flows = run_code(Arch::Gfx1100, &code, base, &mut w, 4);
        // s_getpc_b64 gave the next instruction's address; the branch lands there + 0x281b4
        let target = base + 4 + 0x281b4;
        assert_eq!(u64::from(w.s[102]) | u64::from(w.s[103]) << 32, target);
        let (m, flow, next) = flows.pop().unwrap();
        assert_eq!(m, "s_setpc_b64");
        match flow {
            Flow::Branch(by) => assert_eq!(next.wrapping_add_signed(by), target),
            _ => panic!("s_setpc_b64 did not branch"),
        }
    }

    #[test]
    fn inline_constants_of_half_operations_are_halves() {
        for code in 240..=248 {
            let want = half::f16::from_f32(f32::from_bits(inline_f32(code).unwrap()));
            assert_eq!(inline_f16(code), Some(u32::from(want.to_bits())), "{code}");
        }
        assert!(f16_sources("v_cvt_f32_f16") && !f16_sources("v_cvt_f16_f32"));
        assert!(f16_sources("v_fma_f16") && !f16_sources("v_fma_f32"));
    }
}

//! Memory: LDS (DS) and global/flat loads, stores and atomics.

use super::*;
use crate::decode::Instruction;
use crate::exec::{Context, ExecError, ExecResult, Wave};
use crate::Arch;

/// LDS: loads and stores of 1 to 16 bytes (two addresses for the `2addr` / `read2` forms,
/// halves for the `d16` forms), atomic adds and unsigned maxima, and `ds_bpermute_b32`.
/// What an LDS mnemonic does, worked out once when it is decoded (gfx9's and gfx11's
/// spellings alike).
#[derive(Debug, Clone, Copy)]
pub(crate) enum DsAccess {
    Bpermute,
    /// `ds_add_u32`, returning the old value where `returns`.
    AddU32 {
        returns: bool,
    },
    /// `ds_max_u32`: the larger of the word and the data, unsigned.
    MaxU32,
    /// Two elements of `bytes` at offset0 and offset1 (in elements; in 64 elements for the
    /// stride64 forms: `stride` 64).
    Pair {
        load: bool,
        bytes: usize,
        stride: u32,
    },
    /// `bytes` into a register, or into its low or high half (the d16 forms).
    Load {
        bytes: usize,
        signed: bool,
        d16: bool,
        d16_hi: bool,
    },
    /// `bytes` of a register (from its high half: `d16_hi`).
    Store {
        bytes: usize,
        d16_hi: bool,
    },
}

impl DsAccess {
    pub(crate) fn of(mnemonic: &str) -> Option<DsAccess> {
        let m = crate::decode::ds_canonical(mnemonic);
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
        Some(match m.as_str() {
            "ds_bpermute_b32" => DsAccess::Bpermute,
            "ds_add_u32" => DsAccess::AddU32 { returns: false },
            "ds_add_rtn_u32" => DsAccess::AddU32 { returns: true },
            "ds_max_u32" => DsAccess::MaxU32,
            _ if m.starts_with("ds_load_2addr_") || m.starts_with("ds_store_2addr_") => {
                DsAccess::Pair {
                    load: m.starts_with("ds_load"),
                    bytes: size(&m)?,
                    stride: if m.contains("_stride64_") { 64 } else { 1 },
                }
            }
            _ if m.starts_with("ds_load_") => {
                let core = m.trim_end_matches("_d16_hi").trim_end_matches("_d16");
                let ty = core.rsplit('_').next()?;
                DsAccess::Load {
                    bytes: size(core)?,
                    signed: matches!(ty, "i8" | "i16"),
                    d16: m.ends_with("_d16"),
                    d16_hi: m.ends_with("_d16_hi"),
                }
            }
            _ if m.starts_with("ds_store_") => {
                let core = m.trim_end_matches("_d16_hi");
                DsAccess::Store {
                    bytes: size(core)?,
                    d16_hi: m.ends_with("_d16_hi"),
                }
            }
            _ => return None,
        })
    }
}

pub(super) fn ds(
    w: &mut Wave,
    inst: &Instruction,
    access: Option<DsAccess>,
    ctx: &mut Context<'_>,
) -> ExecResult<()> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let addr = bits(w1, 0, 8) as usize;
    let access = access.ok_or_else(|| unimplemented(inst, ctx))?;
    // each lane's address, read first (at most 64 lanes)
    let mut bases = [0u32; 64];
    let lanes = w.lanes.min(64);
    bases[..lanes].copy_from_slice(&w.v[addr][..lanes]);
    // gfx942: data and destination in accumulation registers (the address in a VGPR): the
    // access runs on the accumulation registers in the vector registers' place
    let acc = ctx.arch == Arch::Gfx942 && w0 >> 25 & 1 != 0;
    if acc {
        std::mem::swap(&mut w.v, &mut w.a);
    }
    let result = ds_with_bases(w, inst, access, ctx, &bases);
    if acc {
        std::mem::swap(&mut w.v, &mut w.a);
    }
    result
}

/// `ds` once the lanes' addresses (`bases`) are read: the data and destination registers are
/// `w.v`'s.
fn ds_with_bases(
    w: &mut Wave,
    inst: &Instruction,
    access: DsAccess,
    ctx: &mut Context<'_>,
    bases: &[u32],
) -> ExecResult<()> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let (offset0, offset1) = (bits(w0, 0, 8), bits(w0, 8, 8));
    let offset = offset0 | (offset1 << 8);
    let (data0, data1, vdst) = (
        bits(w1, 8, 8) as usize,
        bits(w1, 16, 8) as usize,
        bits(w1, 24, 8) as usize,
    );
    let lanes = w.lanes;
    if let DsAccess::Bpermute = access {
        let source: Vec<u32> = (0..lanes)
            .map(|l| if w.active(l) { w.v[data0][l] } else { 0 })
            .collect();
        for (lane, &base) in bases.iter().enumerate().take(lanes) {
            if w.active(lane) {
                let from = (base.wrapping_add(offset) / 4) as usize % lanes;
                w.v[vdst][lane] = source[from];
            }
        }
        return Ok(());
    }
    let exec = w.exec();
    for (lane, &base) in bases.iter().enumerate().take(lanes) {
        if exec >> lane & 1 == 0 {
            continue;
        }
        // LDS addresses are 32-bit: an offset past 2^32 wraps
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
        match access {
            DsAccess::Bpermute => {}
            DsAccess::AddU32 { returns } => {
                let at = base.wrapping_add(offset) as usize;
                let old = word(&lds_read(ctx, at, 4)?, 0);
                let new = old.wrapping_add(w.v[data0][lane]);
                ctx.lds[at..at + 4].copy_from_slice(&new.to_le_bytes());
                if returns {
                    w.v[vdst][lane] = old;
                }
            }
            DsAccess::MaxU32 => {
                let at = base.wrapping_add(offset) as usize;
                let old = word(&lds_read(ctx, at, 4)?, 0);
                let new = old.max(w.v[data0][lane]);
                ctx.lds[at..at + 4].copy_from_slice(&new.to_le_bytes());
            }
            DsAccess::Pair {
                load,
                bytes: n,
                stride,
            } => {
                for (k, off) in [offset0, offset1].into_iter().enumerate() {
                    let at = base.wrapping_add(off * stride * n as u32) as usize;
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
            DsAccess::Load {
                bytes: n,
                signed,
                d16,
                d16_hi,
            } => {
                let at = base.wrapping_add(offset) as usize;
                let b = lds_read(ctx, at, n)?;
                if n >= 4 {
                    for i in 0..n / 4 {
                        w.v[vdst + i][lane] = word(&b, i);
                    }
                } else {
                    let raw = u32::from(b[0]) | if n == 2 { u32::from(b[1]) << 8 } else { 0 };
                    let v = match (signed, n) {
                        (true, 1) => raw as u8 as i8 as i32 as u32,
                        (true, _) => raw as u16 as i16 as i32 as u32,
                        _ => raw,
                    };
                    let old = w.v[vdst][lane];
                    w.v[vdst][lane] = if d16_hi {
                        (old & 0xffff) | (v << 16)
                    } else if d16 {
                        (old & 0xffff_0000) | (v & 0xffff)
                    } else {
                        v
                    };
                }
            }
            DsAccess::Store { bytes: n, d16_hi } => {
                let at = base.wrapping_add(offset) as usize;
                ctx.lds
                    .get(at..at + n)
                    .ok_or_else(|| ctx.bad_lds(inst, at as u64, n))?;
                let mut b = [0u8; 16];
                for i in 0..n.div_ceil(4) {
                    b[4 * i..4 * i + 4].copy_from_slice(&w.v[data0 + i][lane].to_le_bytes());
                }
                if d16_hi {
                    b.copy_within(2..4, 0);
                }
                ctx.lds[at..at + n].copy_from_slice(&b[..n]);
            }
        }
    }
    Ok(())
}

/// Where a FLAT/GLOBAL/SCRATCH lane's access goes.
#[derive(Clone, Copy)]
enum Target {
    Global(u64),
    /// An offset in the lane's private memory.
    Private(u64),
}

fn read_target(
    w: &Wave,
    ctx: &Context<'_>,
    inst: &Instruction,
    lane: usize,
    target: Target,
    out: &mut [u8],
) -> ExecResult<()> {
    match target {
        Target::Global(a) => ctx
            .memory
            .read(a, out)
            .ok_or_else(|| ctx.bad_access(inst, a, out.len())),
        Target::Private(at) => {
            let src = private_range(w, lane, at, out.len())
                .ok_or_else(|| bad_private(w, ctx, inst, at, out.len()))?;
            out.copy_from_slice(&w.private[src]);
            Ok(())
        }
    }
}

fn write_target(
    w: &mut Wave,
    ctx: &mut Context<'_>,
    inst: &Instruction,
    lane: usize,
    target: Target,
    data: &[u8],
) -> ExecResult<()> {
    match target {
        Target::Global(a) => ctx
            .memory
            .write(a, data)
            .ok_or_else(|| ctx.bad_access(inst, a, data.len())),
        Target::Private(at) => {
            let dst = private_range(w, lane, at, data.len())
                .ok_or_else(|| bad_private(w, ctx, inst, at, data.len()))?;
            w.private[dst].copy_from_slice(data);
            Ok(())
        }
    }
}

fn private_range(w: &Wave, lane: usize, at: u64, n: usize) -> Option<std::ops::Range<usize>> {
    let at = usize::try_from(at).ok()?;
    (at + n <= w.private_size).then(|| {
        let base = lane * w.private_size + at;
        base..base + n
    })
}

fn bad_private(w: &Wave, ctx: &Context<'_>, inst: &Instruction, at: u64, n: usize) -> ExecError {
    ExecError::BadPrivate {
        kernel: ctx.kernel.to_string(),
        mnemonic: inst.mnemonic.to_string(),
        address: inst.address,
        target: at,
        bytes: n,
        size: w.private_size,
    }
}

/// A global or flat atomic: (operation, operand bytes, signed). gfx9 and gfx11 spell them
/// differently (`global_atomic_umax`, `global_atomic_max_u32`; `_x2`, `_u64`).
fn atomic_kind(name: &'static str) -> Option<(&'static str, usize, bool)> {
    let rest = name
        .strip_prefix("global_atomic_")
        .or_else(|| name.strip_prefix("flat_atomic_"))?;
    let (op, ty) = match rest.rsplit_once('_') {
        Some((op, ty))
            if matches!(
                ty,
                "u32" | "i32" | "b32" | "f32" | "u64" | "i64" | "b64" | "f64" | "x2"
            ) =>
        {
            (op, ty)
        }
        _ => (rest, "u32"),
    };
    let bytes = if matches!(ty, "u64" | "i64" | "b64" | "f64" | "x2") {
        8
    } else {
        4
    };
    let (op, signed) = match op {
        "umax" => ("max", false),
        "umin" => ("min", false),
        "smax" => ("max", true),
        "smin" => ("min", true),
        o => (o, ty.starts_with('i')),
    };
    let op = if ty.starts_with('f') {
        match op {
            "add" => "fadd",
            "max" => "fmax",
            "min" => "fmin",
            _ => return None,
        }
    } else {
        op
    };
    Some((op, bytes, signed))
}

/// The new value of an atomic (`bytes` wide) at `old` with operand `src` (and, for cmpswap,
/// the value compared, `cmp`); None for an operation not known.
fn atomic_value(op: &str, bytes: usize, signed: bool, old: u64, src: u64, cmp: u64) -> Option<u64> {
    let mask = if bytes == 8 {
        u64::MAX
    } else {
        u64::from(u32::MAX)
    };
    let sext = |x: u64| {
        if bytes == 8 {
            x as i64
        } else {
            x as u32 as i32 as i64
        }
    };
    let float = |x: u64| {
        if bytes == 8 {
            f64::from_bits(x)
        } else {
            f64::from(f32::from_bits(x as u32))
        }
    };
    let unfloat = |x: f64| {
        if bytes == 8 {
            x.to_bits()
        } else {
            u64::from((x as f32).to_bits())
        }
    };
    Some(
        match op {
            "add" => old.wrapping_add(src),
            "sub" => old.wrapping_sub(src),
            "swap" => src,
            "cmpswap" => {
                if old == cmp {
                    src
                } else {
                    old
                }
            }
            "and" => old & src,
            "or" => old | src,
            "xor" => old ^ src,
            "max" if signed => sext(old).max(sext(src)) as u64,
            "min" if signed => sext(old).min(sext(src)) as u64,
            "max" => old.max(src),
            "min" => old.min(src),
            "inc" => {
                if old >= src {
                    0
                } else {
                    old + 1
                }
            }
            "dec" => {
                if old == 0 || old > src {
                    src
                } else {
                    old - 1
                }
            }
            // one rounding in the operand's precision (f32 + f32 is exact in f64)
            "fadd" => unfloat(float(old) + float(src)),
            "fmax" => unfloat(float(old).max(float(src))),
            "fmin" => unfloat(float(old).min(float(src))),
            _ => return None,
        } & mask,
    )
}

/// What a FLAT/GLOBAL/SCRATCH mnemonic does, worked out once when it is decoded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FlatAccess {
    Atomic {
        op: &'static str,
        bytes: usize,
        signed: bool,
    },
    /// `bytes` loaded (sign-extended where `signed`) into a register, or into its low or high
    /// half (the d16 forms).
    Load {
        bytes: usize,
        signed: bool,
        d16: bool,
        d16_hi: bool,
    },
    /// `bytes` of a register (from its high half: `d16_hi`) stored.
    Store { bytes: usize, d16_hi: bool },
}

impl FlatAccess {
    pub(crate) fn of(name: &'static str) -> Option<FlatAccess> {
        if let Some((op, bytes, signed)) = atomic_kind(name) {
            return Some(FlatAccess::Atomic { op, bytes, signed });
        }
        // the d16 forms move a register's low or high half (`_d16_hi_b16`, `_short_d16_hi`)
        let d16_hi = name.contains("_d16_hi");
        let d16 = name.contains("_d16");
        let plain = name.replace("_d16_hi", "").replace("_d16", "");
        let (op, size) = plain.rsplit_once('_')?;
        let bytes = match size {
            "b32" | "dword" => 4,
            "b64" | "dwordx2" => 8,
            "b96" | "dwordx3" => 12,
            "b128" | "dwordx4" => 16,
            "u8" | "ubyte" | "i8" | "sbyte" | "b8" | "byte" => 1,
            "u16" | "ushort" | "i16" | "sshort" | "b16" | "short" => 2,
            _ => return None,
        };
        let signed = matches!(size, "i8" | "sbyte" | "i16" | "sshort");
        if op.ends_with("load") {
            Some(FlatAccess::Load {
                bytes,
                signed,
                d16,
                d16_hi,
            })
        } else if op.ends_with("store") {
            Some(FlatAccess::Store { bytes, d16_hi })
        } else {
            None
        }
    }
}

/// FLAT, GLOBAL and SCRATCH loads and stores, and the global/flat atomics.
pub(super) fn flat(
    w: &mut Wave,
    inst: &Instruction,
    access: Option<FlatAccess>,
    ctx: &mut Context<'_>,
) -> ExecResult<()> {
    let (w0, w1) = (inst.words[0], inst.words[1]);
    let offset = ((w0 & 0x1fff) << 19) as i32 >> 19;
    let addr = bits(w1, 0, 8) as usize;
    let data = bits(w1, 8, 8) as usize;
    let saddr = bits(w1, 16, 7);
    let vdst = bits(w1, 24, 8) as usize;
    let off = match ctx.arch {
        Arch::Gfx1100 => 0x7c,
        Arch::Gfx942 => 0x7f,
    };
    if ctx.arch == Arch::Gfx942 && w1 >> 23 & 1 != 0 {
        // data in accumulation registers: not yet
        return Err(unimplemented(inst, ctx));
    }
    let name = inst.mnemonic;
    let global = name.starts_with("global_");
    let scratch = name.starts_with("scratch_");
    // scratch's address VGPR is used only where the SVE bit says so
    let scratch_vaddr = match ctx.arch {
        Arch::Gfx1100 => w1 >> 23 & 1 != 0,
        Arch::Gfx942 => w0 >> 13 & 1 != 0,
    };
    let target = |w: &Wave, lane: usize| -> Target {
        if scratch {
            let mut at = i64::from(offset);
            if saddr != off {
                at += i64::from(w.s[saddr as usize]);
            }
            if scratch_vaddr {
                at += i64::from(w.v[addr][lane]);
            }
            return Target::Private(at as u64);
        }
        let base = if global && saddr != off {
            read64(w, inst, saddr, lane, false).wrapping_add(u64::from(w.v[addr][lane]))
        } else {
            u64::from(w.v[addr][lane]) | (u64::from(w.v[addr + 1][lane]) << 32)
        };
        Target::Global(base.wrapping_add_signed(i64::from(offset)))
    };
    let access = access.ok_or_else(|| unimplemented(inst, ctx))?;
    if let FlatAccess::Atomic { op, bytes, signed } = access {
        // the pre-operation value is returned where glc (gfx11) / sc0 (gfx942) is set
        let returns = match ctx.arch {
            Arch::Gfx1100 => w0 >> 14 & 1 != 0,
            Arch::Gfx942 => w0 >> 16 & 1 != 0,
        };
        let words = bytes / 4;
        for lane in 0..w.lanes {
            if !w.active(lane) {
                continue;
            }
            let at = target(w, lane);
            let reg = |r: usize| -> u64 {
                let lo = u64::from(w.v[r][lane]);
                if words == 2 {
                    lo | (u64::from(w.v[r + 1][lane]) << 32)
                } else {
                    lo
                }
            };
            let (src, cmp) = (
                reg(data),
                if op == "cmpswap" {
                    reg(data + words)
                } else {
                    0
                },
            );
            let old = match at {
                Target::Global(a) => ctx
                    .memory
                    .atomic(a, bytes, |old| {
                        atomic_value(op, bytes, signed, old, src, cmp)
                    })
                    .ok_or_else(|| ctx.bad_access(inst, a, bytes))?
                    .ok_or_else(|| unimplemented(inst, ctx))?,
                Target::Private(_) => {
                    let mut buf = [0u8; 8];
                    read_target(w, ctx, inst, lane, at, &mut buf[..bytes])?;
                    let old = u64::from_le_bytes(buf);
                    let new = atomic_value(op, bytes, signed, old, src, cmp)
                        .ok_or_else(|| unimplemented(inst, ctx))?;
                    write_target(w, ctx, inst, lane, at, &new.to_le_bytes()[..bytes])?;
                    old
                }
            };
            if returns {
                w.v[vdst][lane] = old as u32;
                if words == 2 {
                    w.v[vdst + 1][lane] = (old >> 32) as u32;
                }
            }
        }
        return Ok(());
    }
    let (load, bytes, signed, d16, d16_hi) = match access {
        FlatAccess::Load {
            bytes,
            signed,
            d16,
            d16_hi,
        } => (true, bytes, signed, d16, d16_hi),
        FlatAccess::Store { bytes, d16_hi } => (false, bytes, false, false, d16_hi),
        FlatAccess::Atomic { .. } => return Err(unimplemented(inst, ctx)),
    };
    for lane in 0..w.lanes {
        if !w.active(lane) {
            continue;
        }
        let at = target(w, lane);
        if load {
            let mut buf = [0u8; 16];
            read_target(w, ctx, inst, lane, at, &mut buf[..bytes])?;
            if bytes < 4 {
                let raw = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
                let v = match (bytes, signed) {
                    (1, false) => raw & 0xff,
                    (1, true) => raw as u8 as i8 as i32 as u32,
                    (2, false) => raw & 0xffff,
                    _ => raw as u16 as i16 as i32 as u32,
                };
                let old = w.v[vdst][lane];
                w.v[vdst][lane] = if d16_hi {
                    (old & 0xffff) | (v << 16)
                } else if d16 {
                    (old & 0xffff_0000) | (v & 0xffff)
                } else {
                    v
                };
            } else {
                for i in 0..bytes / 4 {
                    let c = &buf[4 * i..4 * i + 4];
                    w.v[vdst + i][lane] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        } else {
            let mut buf = [0u8; 16];
            for i in 0..bytes.div_ceil(4) {
                buf[4 * i..4 * i + 4].copy_from_slice(&w.v[data + i][lane].to_le_bytes());
            }
            if d16_hi {
                buf.copy_within(2..4, 0);
            }
            write_target(w, ctx, inst, lane, at, &buf[..bytes])?;
        }
    }
    Ok(())
}

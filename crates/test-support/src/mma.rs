//! What the matrix-unit probes share (rocm-attention's `matrix` test, rocm-quantized's
//! `int8_tiles`): an instruction's register layout as a vendor's table gives it, and the
//! one-warp launch the probes run.

use rocm_device::{Device, LaunchConfig};

/// (row, col) of element e of lane l in one operand.
pub type At = fn(usize, usize) -> (usize, usize);

/// An instruction's shape and register layout: `a`, `b` and `c` as (elements a lane, where
/// element e of lane l sits).
#[derive(Debug, Clone, Copy)]
pub struct Model {
    pub name: &'static str,
    /// The probe's number for it (rocm-kernels' `matrix` constants).
    pub instruction: u32,
    pub lanes: usize,
    pub mnk: (usize, usize, usize),
    pub a: (usize, At),
    pub b: (usize, At),
    pub c: (usize, At),
}

/// One warp (wavefront) of the device, one block.
pub fn one_warp(d: &Device) -> LaunchConfig {
    LaunchConfig {
        grid: [1, 1, 1],
        block: [d.info().warp_size, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// RDNA's WMMA 16x16x16 layouts (AMD's RDNA3 and RDNA4 ISA tables), the same for the 16-bit
/// float and the 8-bit integer forms: gfx11 (wave32) a[e] at (l % 16, e) and b[e] at (e, l % 16)
/// for all 16 k (lanes 16-31 copies), c[e] at (2e + l / 16, l % 16); gfx12 a[e] at
/// (l % 16, 8 (l / 16) + e), b[e] at (8 (l / 16) + e, l % 16), c[e] at (8 (l / 16) + e, l % 16).
/// `names` for gfx11 and gfx12; None for other archs.
pub fn rdna_wmma(arch: &str, names: [&'static str; 2], instruction: u32) -> Option<Model> {
    let model = |name, a: (usize, At), b: (usize, At), c: (usize, At)| Model {
        name,
        instruction,
        lanes: 32,
        mnk: (16, 16, 16),
        a,
        b,
        c,
    };
    if arch.starts_with("gfx11") {
        Some(model(
            names[0],
            (16, |l, e| (l % 16, e)),
            (16, |l, e| (e, l % 16)),
            (8, |l, e| (2 * e + l / 16, l % 16)),
        ))
    } else if arch.starts_with("gfx12") {
        Some(model(
            names[1],
            (8, |l, e| (l % 16, 8 * (l / 16) + e)),
            (8, |l, e| (8 * (l / 16) + e, l % 16)),
            (8, |l, e| (8 * (l / 16) + e, l % 16)),
        ))
    } else {
        None
    }
}

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

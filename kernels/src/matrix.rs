//! The probes' parameter lists and instruction numbers (matrix.hip's `MMA_PROBE_*`; a test
//! checks the two agree).

use crate::{DevicePtr, Entry, EntryGroup, KernelModule, KernelParams, HEADERS};

/// Probes of compat.h's matrix units for the GPU tests (`mma_registers_<dtype>`,
/// `mma_tile_<dtype>`, bf16 and f16); no op launches them.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "matrix",
    source: include_str!("matrix.hip"),
    groups: &[
        EntryGroup {
            ops: &["mma_registers", "mma_tile"],
            dtypes: &["bf16", "f16"],
        },
        EntryGroup {
            ops: &["mma_int_registers", "mma_int_tile"],
            dtypes: &["i8"],
        },
    ],
    params: &[
        Registers::DECL,
        Tile::DECL,
        IntRegisters::DECL,
        IntTile::DECL,
    ],
};

crate::kernel_params! {
    /// One warp runs `instruction` on registers given lane by lane: `a`, `b` (the dtype)
    /// and `c` (f32) hold [`REGS`] values a lane, lane-major; `d` gets c's registers after
    /// it; `ran[0]` is 1 where the target has the instruction, else 0.
    pub struct Registers = "MMA_REGISTERS_PARAMS(T)" {
        instruction: u32,
        a: DevicePtr = "const T*",
        b: DevicePtr = "const T*",
        c: DevicePtr = "const float*",
        d: DevicePtr = "float*",
        ran: DevicePtr = "u32*",
    }
}
crate::kernel_params! {
    /// One warp runs compat.h's tile operations on 16x16 row-major `a`, `b` and f32 `c`;
    /// `d` gets three 16x16 f32 results: `a b + c` with b loaded as rows of k, the same
    /// with b given transposed, and `round(a b) b + c` through `mma_c_to_a`.
    pub struct Tile = "MMA_TILE_PARAMS(T)" {
        a: DevicePtr = "const T*",
        b: DevicePtr = "const T*",
        c: DevicePtr = "const float*",
        d: DevicePtr = "float*",
    }
}

crate::kernel_params! {
    /// [`Registers`] for the int8 units: `a`, `b` i8 with [`I8_REGS`] values a lane, `c`, `d`
    /// i32 with [`REGS`].
    pub struct IntRegisters = "MMA_INT_REGISTERS_PARAMS(T)" {
        instruction: u32,
        a: DevicePtr = "const T*",
        b: DevicePtr = "const T*",
        c: DevicePtr = "const int*",
        d: DevicePtr = "int*",
        ran: DevicePtr = "u32*",
    }
}
crate::kernel_params! {
    /// compat.h's int8 tile operation on a 16x32 `a` and a 32x16 `b` (i8, row-major) and a
    /// 16x16 i32 `c`: `d = a b + c`.
    pub struct IntTile = "MMA_INT_TILE_PARAMS(T)" {
        a: DevicePtr = "const T*",
        b: DevicePtr = "const T*",
        c: DevicePtr = "const int*",
        d: DevicePtr = "int*",
    }
}

pub const REGISTERS: Entry<Registers> = Entry::new(&MODULE, "mma_registers");
pub const TILE: Entry<Tile> = Entry::new(&MODULE, "mma_tile");
pub const INT_REGISTERS: Entry<IntRegisters> = Entry::new(&MODULE, "mma_int_registers");
pub const INT_TILE: Entry<IntTile> = Entry::new(&MODULE, "mma_int_tile");
/// The key of the int8 probes' entries.
pub const INT_KEY: &str = "i8";
/// i8 register slots a lane has in the int8 probes' arrays.
pub const I8_REGS: usize = 32;
/// Register slots a lane has in the probes' arrays.
pub const REGS: usize = 16;
/// NVIDIA's mma.sync.m16n8k16 (32 lanes).
pub const M16N8K16: u32 = 0;
/// CDNA's v_mfma_f32_16x16x16 (f16, bf16_1k), 64 lanes.
pub const MFMA_16X16X16: u32 = 1;
/// CDNA's v_mfma_f32_32x32x8 (f16, bf16_1k), 64 lanes.
pub const MFMA_32X32X8: u32 = 2;
/// RDNA3/4's v_wmma_f32_16x16x16 (f16, bf16), 32 lanes.
pub const WMMA_16X16X16: u32 = 3;
/// NVIDIA's mma.sync.m16n8k32 s8 (32 lanes).
pub const M16N8K32_S8: u32 = 4;
/// CDNA3's v_mfma_i32_16x16x32_i8 (gfx942, gfx950, and the wave64 emulation), 64 lanes.
pub const MFMA_I32_16X16X32_I8: u32 = 5;
/// CDNA2's v_mfma_i32_16x16x16i8 (gfx90a), 64 lanes.
pub const MFMA_I32_16X16X16_I8: u32 = 6;
/// RDNA3/4's v_wmma_i32_16x16x16_iu8 (signed operands), 32 lanes.
pub const WMMA_I32_16X16X16_IU8: u32 = 7;

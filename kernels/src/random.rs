//! The random module's parameter lists and entries (random.hip): `n` draws into `out` from
//! the counter-based generator's `seed` and stream `offset`.

use crate::{DevicePtr, Entry, EntryGroup, KernelModule, KernelParams, HEADERS};

/// Dtypes the random draws produce directly.
pub const RANDOM_DTYPES: [&str; 5] = ["bf16", "f16", "f32", "f64", "f8e4m3"];

/// Uniform and normal draws (Philox4x32-10).
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "random",
    source: include_str!("random.hip"),
    groups: &[EntryGroup {
        ops: &["rand_uniform", "rand_normal"],
        dtypes: &RANDOM_DTYPES,
    }],
    params: &[UniformParams::DECL, NormalParams::DECL],
};

crate::kernel_params! {
    /// Draws in [lo, hi).
    pub struct UniformParams = "RAND_UNIFORM_PARAMS(T)" {
        out: DevicePtr = "T*",
        n: u64,
        seed: u64,
        offset: u64,
        lo: f64,
        hi: f64,
    }
}

crate::kernel_params! {
    /// Draws of N(mean, std^2).
    pub struct NormalParams = "RAND_NORMAL_PARAMS(T)" {
        out: DevicePtr = "T*",
        n: u64,
        seed: u64,
        offset: u64,
        mean: f64,
        std: f64,
    }
}

pub const UNIFORM: Entry<UniformParams> = Entry::new(&MODULE, "rand_uniform");
pub const NORMAL: Entry<NormalParams> = Entry::new(&MODULE, "rand_normal");

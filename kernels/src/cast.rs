//! The parameters of the cast module's entries (cast.hip).

use crate::{
    DevicePtr, EntryGroup, Family, KernelLayout, KernelModule, KernelParams, DTYPES, HEADERS,
};

/// Casts between every pair of dtypes: `cast_<from>_<to>`, op `cast_<from>`, key `<to>`.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "cast",
    source: include_str!("cast.hip"),
    groups: &[EntryGroup {
        ops: &[
            "cast_u8",
            "cast_u32",
            "cast_i16",
            "cast_i32",
            "cast_i64",
            "cast_bf16",
            "cast_f16",
            "cast_f32",
            "cast_f64",
            "cast_f8e4m3",
        ],
        dtypes: &DTYPES,
    }],
    params: &[Params::DECL],
};

crate::kernel_params! {
    /// `cast_<from>_<to>`: out[i] = input at i of `l`, converted, over `n` elements.
    pub struct Params = "CAST_PARAMS(ST, DT)" {
        input: DevicePtr = "const ST*",
        out: DevicePtr = "DT*",
        n: u64,
        l: KernelLayout,
    }
}

/// `cast_<from>`, keyed by the destination dtype.
pub const CAST: Family<Params> = Family::new(&MODULE, "cast");

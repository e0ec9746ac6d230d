//! The parameters of `where` (ternary.hip).

use crate::{
    DevicePtr, EntryGroup, Family, KernelLayout, KernelModule, KernelParams, DTYPES, HEADERS,
};

/// `where_<condition dtype>_<value dtype>`.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "ternary",
    source: include_str!("ternary.hip"),
    groups: &[EntryGroup {
        ops: &[
            "where_u8",
            "where_u32",
            "where_i16",
            "where_i32",
            "where_i64",
        ],
        dtypes: &DTYPES,
    }],
    params: &[WhereParams::DECL],
};

crate::kernel_params! {
    /// `where_<cond dtype>_<dtype>`'s parameters: out[i] = cond[i] != 0 ? t[i] : f[i] over
    /// `n` elements of three layouts.
    pub struct WhereParams = "WHERE_PARAMS(CT, T)" {
        cond: DevicePtr = "const CT*",
        t: DevicePtr = "const T*",
        f: DevicePtr = "const T*",
        out: DevicePtr = "T*",
        n: u64,
        lc: KernelLayout,
        lt: KernelLayout,
        lf: KernelLayout,
    }
}

/// `where_<condition dtype>`, keyed by the values' dtype.
pub const WHERE: Family<WhereParams> = Family::new(&MODULE, "where");

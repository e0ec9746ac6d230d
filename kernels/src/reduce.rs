//! The reductions' entries and parameter lists (reduce.hip), each table in the order sum,
//! min, max, argmin, argmax.

use crate::{
    DevicePtr, Entry, EntryGroup, KernelLayout, KernelModule, KernelParams, DTYPES, HEADERS,
};

/// Reductions over any dims: `<op>_<dtype>`, the second pass `<op>_finish_<dtype>`, and a
/// thread an output `<op>_columns_<dtype>`.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "reduce",
    source: include_str!("reduce.hip"),
    groups: &[EntryGroup {
        ops: &[
            "sum",
            "min",
            "max",
            "argmin",
            "argmax",
            "sum_finish",
            "min_finish",
            "max_finish",
            "argmin_finish",
            "argmax_finish",
            "sum_columns",
            "min_columns",
            "max_columns",
            "argmin_columns",
            "argmax_columns",
        ],
        dtypes: &DTYPES,
    }],
    params: &[ReduceParams::DECL, FinishParams::DECL, ColumnsParams::DECL],
};

crate::kernel_params! {
    /// The first pass: `n_out` outputs (their elements at `kept`), each reducing `red_len`
    /// elements (at `red`) in chunks of `chunk_len` (a grid row a chunk); with more than
    /// one chunk each writes its partial state to `partials` for the second pass.
    pub struct ReduceParams = "REDUCE_PARAMS(T, OUT)" {
        input: DevicePtr = "const T*",
        out: DevicePtr = "OUT*",
        partials: DevicePtr = "void*",
        n_out: u64,
        red_len: u64,
        kept: KernelLayout,
        red: KernelLayout,
        chunk_len: u64,
    }
}

crate::kernel_params! {
    /// The second pass: each output's `chunks` partial states combined.
    pub struct FinishParams = "FINISH_PARAMS(OUT)" {
        partials: DevicePtr = "const void*",
        out: DevicePtr = "OUT*",
        n_out: u64,
        chunks: u64,
    }
}

crate::kernel_params! {
    /// A thread an output: `n_out` outputs at `kept`, `red_len` elements each at `red`.
    pub struct ColumnsParams = "COLUMNS_PARAMS(T, OUT)" {
        input: DevicePtr = "const T*",
        out: DevicePtr = "OUT*",
        n_out: u64,
        red_len: u64,
        kept: KernelLayout,
        red: KernelLayout,
    }
}

pub const FIRST_PASS: [Entry<ReduceParams>; 5] = [
    Entry::new(&MODULE, "sum"),
    Entry::new(&MODULE, "min"),
    Entry::new(&MODULE, "max"),
    Entry::new(&MODULE, "argmin"),
    Entry::new(&MODULE, "argmax"),
];
pub const FINISH: [Entry<FinishParams>; 5] = [
    Entry::new(&MODULE, "sum_finish"),
    Entry::new(&MODULE, "min_finish"),
    Entry::new(&MODULE, "max_finish"),
    Entry::new(&MODULE, "argmin_finish"),
    Entry::new(&MODULE, "argmax_finish"),
];
pub const COLUMNS: [Entry<ColumnsParams>; 5] = [
    Entry::new(&MODULE, "sum_columns"),
    Entry::new(&MODULE, "min_columns"),
    Entry::new(&MODULE, "max_columns"),
    Entry::new(&MODULE, "argmin_columns"),
    Entry::new(&MODULE, "argmax_columns"),
];

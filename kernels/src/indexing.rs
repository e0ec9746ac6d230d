//! The indexing module's parameter lists and kernel families (indexing.hip): each family is
//! `<prefix>_<ids dtype>`, keyed by the moved unit's width (gathers, set scatters) or the
//! dtype (adds). `bad`, where given, counts ids out of range (null: not checked).

use crate::{
    DevicePtr, EntryGroup, Family, KernelLayout, KernelModule, KernelParams, DTYPES, HEADERS,
    WIDTHS,
};

/// gather / index_select and scatter (set), by width: `<op>_<id dtype>_<width>`; scatter-add
/// and index_add, by dtype: `<op>_<id dtype>_<dtype>`.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "indexing",
    source: include_str!("indexing.hip"),
    groups: &[
        EntryGroup {
            ops: &[
                "gather_u8",
                "gather_u32",
                "gather_i16",
                "gather_i32",
                "gather_i64",
                "index_rows_u8",
                "index_rows_u32",
                "index_rows_i16",
                "index_rows_i32",
                "index_rows_i64",
                "gather_last_u8",
                "gather_last_u32",
                "gather_last_i16",
                "gather_last_i32",
                "gather_last_i64",
                "scatter_own_u8",
                "scatter_own_u32",
                "scatter_own_i16",
                "scatter_own_i32",
                "scatter_own_i64",
                "scatter_claim_u8",
                "scatter_claim_u32",
                "scatter_claim_i16",
                "scatter_claim_i32",
                "scatter_claim_i64",
                "scatter_won_u8",
                "scatter_won_u32",
                "scatter_won_i16",
                "scatter_won_i32",
                "scatter_won_i64",
            ],
            dtypes: &WIDTHS,
        },
        EntryGroup {
            ops: &[
                "scatter_add_own_u8",
                "scatter_add_own_u32",
                "scatter_add_own_i16",
                "scatter_add_own_i32",
                "scatter_add_own_i64",
                "scatter_add_atomic_u8",
                "scatter_add_atomic_u32",
                "scatter_add_atomic_i16",
                "scatter_add_atomic_i32",
                "scatter_add_atomic_i64",
            ],
            dtypes: &DTYPES,
        },
    ],
    params: &[
        GatherParams::DECL,
        IndexRowsParams::DECL,
        GatherLastParams::DECL,
        ScatterOwnParams::DECL,
        ScatterClaimParams::DECL,
        ScatterWonParams::DECL,
        ScatterAddAtomicParams::DECL,
    ],
};

crate::kernel_params! {
    /// out = src at the ids over `n` units walked by the two views.
    pub struct GatherParams = "GATHER_PARAMS(I, R)" {
        src: DevicePtr = "const R*",
        ids: DevicePtr = "const I*",
        out: DevicePtr = "R*",
        n: u64,
        src_dim: u64,
        dim_stride: u64,
        src_view: KernelLayout,
        ids_view: KernelLayout,
        bad: Option<DevicePtr> = "u64*",
    }
}

crate::kernel_params! {
    /// index_select of whole rows of `right` units, a block a row.
    pub struct IndexRowsParams = "INDEX_ROWS_PARAMS(I, R)" {
        src: DevicePtr = "const R*",
        ids: DevicePtr = "const I*",
        out: DevicePtr = "R*",
        rows: u64,
        n_ids: u64,
        right: u64,
        src_dim: u64,
        ids_stride: u64,
        bad: Option<DevicePtr> = "u64*",
    }
}

crate::kernel_params! {
    /// gather along the last dim, a block a row of `m` ids.
    pub struct GatherLastParams = "GATHER_LAST_PARAMS(I, R)" {
        src: DevicePtr = "const R*",
        ids: DevicePtr = "const I*",
        out: DevicePtr = "R*",
        rows: u64,
        m: u64,
        src_len: u64,
        bad: Option<DevicePtr> = "u64*",
    }
}

crate::kernel_params! {
    /// A scatter (set or add) by ownership: a thread a column of `len` updates.
    pub struct ScatterOwnParams = "SCATTER_OWN_PARAMS(I, R)" {
        dst: DevicePtr = "R*",
        ids: DevicePtr = "const I*",
        src: DevicePtr = "const R*",
        n_cols: u64,
        len: u64,
        dst_dim: u64,
        dst_cols: KernelLayout,
        ids_cols: KernelLayout,
        src_cols: KernelLayout,
        dst_dim_stride: u64,
        ids_dim_stride: u64,
        src_dim_stride: u64,
        bad: Option<DevicePtr> = "u64*",
    }
}

crate::kernel_params! {
    /// A set scatter's first pass: each destination's last update claims it in `win`.
    pub struct ScatterClaimParams = "SCATTER_CLAIM_PARAMS(I)" {
        win: DevicePtr = "u32*",
        ids: DevicePtr = "const I*",
        n: u64,
        dst_dim: u64,
        dst_dim_stride: u64,
        dst_view: KernelLayout,
        ids_view: KernelLayout,
        bad: Option<DevicePtr> = "u64*",
    }
}

crate::kernel_params! {
    /// A set scatter's second pass: the claiming updates write.
    pub struct ScatterWonParams = "SCATTER_WON_PARAMS(I, R)" {
        dst: DevicePtr = "R*",
        win: DevicePtr = "const u32*",
        ids: DevicePtr = "const I*",
        src: DevicePtr = "const R*",
        n: u64,
        dst_dim: u64,
        dst_dim_stride: u64,
        dst_view: KernelLayout,
        ids_view: KernelLayout,
        src_view: KernelLayout,
    }
}

crate::kernel_params! {
    /// An add scatter with an atomic add per update.
    pub struct ScatterAddAtomicParams = "SCATTER_ADD_ATOMIC_PARAMS(I, T)" {
        dst: DevicePtr = "T*",
        ids: DevicePtr = "const I*",
        src: DevicePtr = "const T*",
        n: u64,
        dst_dim: u64,
        dst_dim_stride: u64,
        dst_view: KernelLayout,
        ids_view: KernelLayout,
        src_view: KernelLayout,
        bad: Option<DevicePtr> = "u64*",
    }
}

pub const GATHER: Family<GatherParams> = Family::new(&MODULE, "gather");
pub const INDEX_ROWS: Family<IndexRowsParams> = Family::new(&MODULE, "index_rows");
pub const GATHER_LAST: Family<GatherLastParams> = Family::new(&MODULE, "gather_last");
pub const SCATTER_OWN: Family<ScatterOwnParams> = Family::new(&MODULE, "scatter_own");
pub const SCATTER_ADD_OWN: Family<ScatterOwnParams> = Family::new(&MODULE, "scatter_add_own");
pub const SCATTER_CLAIM: Family<ScatterClaimParams> = Family::new(&MODULE, "scatter_claim");
pub const SCATTER_WON: Family<ScatterWonParams> = Family::new(&MODULE, "scatter_won");
pub const SCATTER_ADD_ATOMIC: Family<ScatterAddAtomicParams> =
    Family::new(&MODULE, "scatter_add_atomic");

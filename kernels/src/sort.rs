//! The sort's entries and parameter lists (sort.hip).

use crate::{DevicePtr, Entry, EntryGroup, KernelModule, KernelParams, DTYPES, HEADERS};

/// arg_sort along the last dim: tile sort and merge passes.
pub const MODULE: KernelModule = KernelModule {
    headers: HEADERS,
    name: "sort",
    source: include_str!("sort.hip"),
    groups: &[EntryGroup {
        ops: &["argsort_tile", "argsort_merge"],
        dtypes: &DTYPES,
    }],
    params: &[TileParams::DECL, MergeParams::DECL],
};

crate::kernel_params! {
    /// Sorts tiles of `p2` (a power of two) elements of `rows` rows of `len`: the columns
    /// to `final_out` where a row is one tile, else each tile's (key, column) pairs to
    /// `keys_out` / `idx_out` for the merge passes (the pointers not written: null).
    pub struct TileParams = "SORT_TILE_PARAMS(T)" {
        src: DevicePtr = "const T*",
        keys_out: Option<DevicePtr> = "u64*",
        idx_out: Option<DevicePtr> = "u32*",
        final_out: Option<DevicePtr> = "u32*",
        rows: u64,
        len: u64,
        p2: u32,
        descending: u32,
    }
}

crate::kernel_params! {
    /// Merges sorted runs of `width` pairs into runs of twice that: to `kout` / `iout`,
    /// or the last pass's columns to `final_out` (the pointers not written: null).
    pub struct MergeParams = "SORT_MERGE_PARAMS(T)" {
        kin: DevicePtr = "const u64*",
        iin: DevicePtr = "const u32*",
        kout: Option<DevicePtr> = "u64*",
        iout: Option<DevicePtr> = "u32*",
        final_out: Option<DevicePtr> = "u32*",
        rows: u64,
        len: u64,
        width: u64,
    }
}

pub const TILE: Entry<TileParams> = Entry::new(&MODULE, "argsort_tile");
pub const MERGE: Entry<MergeParams> = Entry::new(&MODULE, "argsort_merge");

//! Host-side geometry of the indexing kernels: the views they walk, the unit a gather moves,
//! and the choice between ownership and per-update scatters. Pure functions, unit-tested.

/// Several strided views that walk one shape in row-major order: the shape with its size-1
/// dims dropped (their strides mean nothing), and each view's strides for the kept dims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Walk {
    pub dims: Vec<usize>,
    pub strides: Vec<Vec<usize>>,
}

impl Walk {
    pub fn new(dims: &[usize], views: &[&[usize]]) -> Self {
        let keep: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] != 1).collect();
        Walk {
            dims: keep.iter().map(|&i| dims[i]).collect(),
            strides: views
                .iter()
                .map(|s| keep.iter().map(|&i| s[i]).collect())
                .collect(),
        }
    }
}

/// `strides` with entry `dim` replaced by `value`.
pub(crate) fn with_stride(strides: &[usize], dim: usize, value: usize) -> Vec<usize> {
    let mut s = strides.to_vec();
    s[dim] = value;
    s
}

/// `v` without entry `dim`.
pub(crate) fn without(v: &[usize], dim: usize) -> Vec<usize> {
    v.iter()
        .enumerate()
        .filter(|&(i, _)| i != dim)
        .map(|(_, &x)| x)
        .collect()
}

/// A gather viewed in units of `k` elements: the walk (src view, ids view), the source start
/// and the stride of the indexed dim, all in units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GatherUnits {
    pub k: usize,
    pub walk: Walk,
    pub src_start: usize,
    pub dim_stride: usize,
}

/// The widest unit (a power of two elements, at most 16 bytes) a gather can move: runs of `k`
/// output elements must come from `k` consecutive source elements on a `k`-aligned offset,
/// selected by one id. An embedding lookup of 4096-wide rows moves 16 bytes per thread.
pub(crate) fn gather_units(
    elem_bytes: usize,
    walk: Walk,
    src_start: usize,
    dim_stride: usize,
) -> GatherUnits {
    let n = walk.dims.len();
    let mut k = (16 / elem_bytes).max(1);
    let fits = |k: usize| -> bool {
        if n == 0 || k == 1 {
            return k == 1;
        }
        let (src, ids) = (&walk.strides[0], &walk.strides[1]);
        src[n - 1] == 1
            && ids[n - 1] == 0
            && walk.dims[n - 1] % k == 0
            && src[..n - 1].iter().all(|s| s % k == 0)
            && src_start % k == 0
            && dim_stride % k == 0
    };
    while !fits(k) {
        k /= 2;
    }
    let mut walk = walk;
    if k > 1 {
        walk.dims[n - 1] /= k;
        for s in &mut walk.strides[0][..n - 1] {
            *s /= k;
        }
    }
    GatherUnits {
        k,
        walk,
        src_start: src_start / k,
        dim_stride: dim_stride / k,
    }
}

/// How a scatter spreads its updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScatterStrategy {
    /// By shape (see [`prefers_ownership`]).
    #[default]
    Auto,
    /// One thread per output column applies that column's updates in order: deterministic,
    /// and for sums bit-exact with the CPU backend.
    Ownership,
    /// One thread per update: atomic adds, or claim-then-write for sets.
    PerUpdate,
}

/// Columns from which ownership fills the device: one thread per column, and about a quarter
/// of the threads an H100 keeps resident (132 SMs x 2048) hide the sequential updates.
pub(crate) const OWNERSHIP_MIN_COLUMNS: usize = 65_536;

/// Ownership only where it measured faster than atomics (`indexing_bench`, H100, f32):
/// - the ids are shared by all columns (index_add), so a warp's updates land on one row and
///   coalesce, and there are enough columns; embedding-backward shapes with 4096 columns ran
///   at 102 GB/s with ownership against 1286 GB/s with atomics;
/// - or each column has at most 2 updates (no collisions worth an atomic).
///
/// With an id per element (scatter_add) neighbouring columns hit unrelated rows: ownership ran
/// at 303 GB/s against 373 GB/s for atomics even with 2^20 columns, so atomics win there.
/// [`ScatterStrategy::Ownership`] remains the choice for deterministic float sums.
pub(crate) fn prefers_ownership(
    columns: usize,
    updates_per_column: usize,
    ids_shared: bool,
) -> bool {
    (ids_shared && columns >= OWNERSHIP_MIN_COLUMNS) || updates_per_column <= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_drop_size_one_dims() {
        let w = Walk::new(&[2, 1, 3], &[&[3, 99, 1], &[0, 7, 1]]);
        assert_eq!(w.dims, vec![2, 3]);
        assert_eq!(w.strides, vec![vec![3, 1], vec![0, 1]]);
    }

    #[test]
    fn embedding_rows_move_in_16_byte_units() {
        // out (8 ids, 4096) from a (32000, 4096) f16 table: src view strides (0, 1), ids (1, 0)
        let w = Walk::new(&[8, 4096], &[&[0, 1], &[1, 0]]);
        let u = gather_units(2, w, 0, 4096);
        assert_eq!(u.k, 8);
        assert_eq!(u.walk.dims, vec![8, 512]);
        assert_eq!(u.dim_stride, 512);
        // an odd start offset keeps single elements
        let w = Walk::new(&[8, 4096], &[&[0, 1], &[1, 0]]);
        assert_eq!(gather_units(2, w, 3, 4096).k, 1);
        // a gather along the last dim has an id per element
        let w = Walk::new(&[4, 16], &[&[16, 0], &[16, 1]]);
        assert_eq!(gather_units(4, w, 0, 1).k, 1);
        // rows of 6 f32: 2-element units (8 bytes)
        let w = Walk::new(&[5, 6], &[&[0, 1], &[1, 0]]);
        assert_eq!(gather_units(4, w, 0, 6).k, 2);
    }

    #[test]
    fn strategy_follows_the_shape() {
        assert!(prefers_ownership(1 << 20, 1000, true));
        assert!(!prefers_ownership(1 << 20, 1000, false));
        assert!(!prefers_ownership(4096, 8192, true));
        assert!(prefers_ownership(16, 2, false));
        assert_eq!(without(&[1, 2, 3], 1), vec![1, 3]);
        assert_eq!(with_stride(&[1, 2, 3], 0, 0), vec![0, 2, 3]);
    }
}

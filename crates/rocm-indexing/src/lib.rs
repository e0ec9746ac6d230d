//! rocm-indexing: the indexing ops of candle-rocm, with the semantics of Candle's CPU backend.
//!
//! - [`index_select`], [`gather`]: any layout of source and ids (strided ids included); the
//!   output is contiguous. Embedding-style lookups move up to 16 bytes per thread.
//! - [`scatter_set`], [`scatter_add_set`], [`index_add_set`]: in place on a destination of any
//!   layout. Each picks, by shape, between one thread per output column (deterministic; sums
//!   bit-exact with the CPU) and one thread per update (atomic adds; sets keep the CPU's "last
//!   update wins" through a claim pass). [`IndexOptions::strategy`] can force either.
//! - [`upsample_nearest1d`], [`upsample_nearest2d`], [`upsample_bilinear2d`] (align_corners and
//!   PyTorch's explicit scale factors).
//! - [`arg_sort_last_dim`]: any row length, stable for equal keys, NaN largest.
//!
//! Ids may be u8, u32, i16, i32 or i64. An id equal to its dtype's maximum is masked: a gather
//! yields zero, a scatter skips it. Any other id outside the dim never touches memory out of
//! bounds: it acts as masked, and with the options' `check_indices`
//! (`CANDLE_ROCM_CHECK_INDICES=1`, or [`IndexOptions::check_indices`]) the op returns
//! [`Error::IndexOutOfRange`] after the kernel.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod plan;
mod sort;
mod upsample;

pub use plan::ScatterStrategy;
pub use rocm_device::{Buffer, DType, Device, Error, Layout, Operand, Result};
pub use sort::arg_sort_last_dim;
pub use upsample::{upsample_bilinear2d, upsample_nearest1d, upsample_nearest2d, Bilinear};

use plan::{gather_units, prefers_ownership, with_stride, without, Walk};
use rocm_device::{KernelLayout, LaunchConfig};
use rocm_kernels::{self as kernels, indexing, DevicePtr, Entry, Family, KernelParams};

/// Choices of the indexing ops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexOptions {
    /// Fail on ids outside the dim instead of treating them as masked.
    pub check_indices: bool,
    /// How scatters spread their updates.
    pub strategy: ScatterStrategy,
}

/// `1`: out-of-range ids are an error ([`IndexOptions::check_indices`]).
pub const CHECK_INDICES_ENV: &str = "CANDLE_ROCM_CHECK_INDICES";

impl IndexOptions {
    /// The options `lookup` (a variable name to its value) describes: `check_indices` from
    /// [`CHECK_INDICES_ENV`], the rest the defaults.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        IndexOptions {
            check_indices: rocm_device::config::flag(lookup(CHECK_INDICES_ENV)),
            strategy: ScatterStrategy::Auto,
        }
    }

    /// The process's environment, read once.
    pub fn global() -> Self {
        static GLOBAL: std::sync::OnceLock<IndexOptions> = std::sync::OnceLock::new();
        *GLOBAL.get_or_init(|| Self::from_lookup(rocm_device::config::env_lookup))
    }
}

/// Ids must be an integer dtype Candle's CPU backend indexes with, and fit their buffer.
fn check_ids(op: &'static str, ids: &Operand<'_>) -> Result<()> {
    if !matches!(
        ids.dtype,
        DType::U8 | DType::U32 | DType::I16 | DType::I32 | DType::I64
    ) {
        return Err(Error::UnsupportedDType {
            op,
            dtype: ids.dtype,
        });
    }
    ids.check(op)
}

/// The values of a scatter (`dst`, `src`) share one dtype.
fn same_dtype(op: &'static str, a: &Operand<'_>, b: &Operand<'_>) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(Error::DTypeMismatch {
            op,
            detail: format!("{} and {}", a.dtype, b.dtype),
        });
    }
    Ok(())
}

/// One indexing call: where it runs, its name, its ids and dim, its options.
#[derive(Clone, Copy)]
struct Job<'a> {
    device: &'a Device,
    op: &'static str,
    ids: Operand<'a>,
    dim: usize,
    opts: &'a IndexOptions,
}

impl<'a> Job<'a> {
    /// The checks every gather-like op makes: `src` fits its buffer, the ids are an index
    /// dtype and fit theirs, `dim` exists.
    fn checked(
        (device, op): (&'a Device, &'static str),
        src: &Operand<'_>,
        ids: Operand<'a>,
        dim: usize,
        opts: &'a IndexOptions,
    ) -> Result<Self> {
        src.check(op)?;
        check_ids(op, &ids)?;
        check_dim(op, &src.layout.dims, dim)?;
        Ok(Job {
            device,
            op,
            ids,
            dim,
            opts,
        })
    }

    /// The kernel of `family` for the ids' dtype.
    fn entry<P: KernelParams>(&self, family: Family<P>) -> Result<Entry<P>> {
        family
            .entry(&[self.ids.dtype.as_str()])
            .ok_or(Error::UnsupportedDType {
                op: self.op,
                dtype: self.ids.dtype,
            })
    }
}

fn shape_err(op: &'static str, detail: String) -> Error {
    Error::ShapeMismatch { op, detail }
}

fn check_dim(op: &'static str, dims: &[usize], dim: usize) -> Result<()> {
    if dim >= dims.len() {
        return Err(shape_err(
            op,
            format!("dim {dim} of a tensor with dims {dims:?}"),
        ));
    }
    Ok(())
}

/// The stride of `dim`, or 0 when the dim has one element (its stride is arbitrary).
fn dim_stride(l: &Layout, dim: usize) -> usize {
    if l.dims[dim] == 1 {
        0
    } else {
        l.strides[dim]
    }
}

/// The device word pair that counts out-of-range ids, when they are checked.
struct BadIds(Option<Buffer>);

impl BadIds {
    fn new(device: &Device, opts: &IndexOptions) -> Result<Self> {
        Ok(BadIds(if opts.check_indices {
            Some(device.alloc_zeroed(16)?)
        } else {
            None
        }))
    }

    /// The counter's address, null when ids are not checked.
    fn ptr(&self) -> Option<DevicePtr> {
        self.0.as_ref().map(Buffer::ptr)
    }

    /// Reads the count back (a sync) and fails if any id was out of range.
    fn finish(self, device: &Device, op: &'static str, size: usize) -> Result<()> {
        let Some(b) = self.0 else { return Ok(()) };
        let mut raw = [0u8; 16];
        device.copy_dtoh(&b, 0, &mut raw)?;
        let count = u64::from_le_bytes(raw[..8].try_into().unwrap_or_default());
        let index = i64::from_le_bytes(raw[8..].try_into().unwrap_or_default());
        if count == 0 {
            return Ok(());
        }
        Err(Error::IndexOutOfRange {
            op,
            index,
            size,
            count,
        })
    }
}

fn width_of(op: &'static str, bytes: usize) -> Result<&'static str> {
    kernels::width_key(bytes)
        .ok_or_else(|| Error::InvalidLayout(format!("{op}: {bytes}-byte unit")))
}

/// out = src[.., ids[i], ..] walked over `out_dims`: the shared core of gather and
/// index_select, `ids_strides` being the ids' view over the output's shape.
fn gather_core(
    job: Job<'_>,
    src: Operand<'_>,
    ids_strides: &[usize],
    out_dims: &[usize],
) -> Result<Buffer> {
    let (device, dtype, dim, ids) = (job.device, src.dtype, job.dim, job.ids);
    let n: usize = out_dims.iter().product();
    let out = device.alloc(n * dtype.size_in_bytes())?;
    if n == 0 {
        return Ok(out);
    }
    let src_dim = src.layout.dims[dim];
    let src_view = with_stride(&src.layout.strides, dim, 0);
    let walk = Walk::new(out_dims, &[&src_view, ids_strides]);
    let u = gather_units(
        dtype.size_in_bytes(),
        walk,
        src.layout.start,
        dim_stride(src.layout, dim),
    );
    let key = width_of(job.op, u.k * dtype.size_in_bytes())?;
    let entry = job.entry(indexing::GATHER)?;
    let bad = BadIds::new(device, job.opts)?;
    let n_units = (n / u.k) as u64;
    let params = indexing::GatherParams {
        src: src.buffer.ptr(),
        ids: ids.buffer.ptr(),
        out: out.ptr(),
        n: n_units,
        src_dim: src_dim as u64,
        dim_stride: u.dim_stride as u64,
        src_view: KernelLayout::new(&u.walk.dims, &u.walk.strides[0], u.src_start)?,
        ids_view: KernelLayout::new(&u.walk.dims, &u.walk.strides[1], ids.layout.start)?,
        bad: bad.ptr(),
    };
    let _span = tracing::debug_span!("gather", op = job.op, %dtype, n, unit = u.k).entered();
    device.launch_entry_elements(entry, key, n_units, &params)?;
    bad.finish(device, job.op, src_dim)?;
    Ok(out)
}

/// Rows shorter than this (in units) go through the general kernel: a block per row would
/// leave most of its threads idle.
const MIN_ROW: usize = 32;
/// Fewest and most threads of a row's block (a thread a unit, rows looped beyond).
const ROW_THREADS: (usize, usize) = (64, 256);

/// One block per row of `row_len` units (rows past the grid are looped over by the kernel).
fn launch_rows<P: KernelParams>(
    device: &Device,
    (entry, key): (Entry<P>, &'static str),
    (rows, row_len): (usize, usize),
    params: &P,
) -> Result<()> {
    let config = LaunchConfig {
        grid: [rows.min(rocm_device::GRID_X_CAP as usize) as u32, 1, 1],
        block: [
            row_len
                .next_power_of_two()
                .clamp(ROW_THREADS.0, ROW_THREADS.1) as u32,
            1,
            1,
        ],
        shared_mem_bytes: 0,
    };
    device.launch_entry(entry, key, config, params)
}

/// index_select of a contiguous source (any start): one block per output row, the row moved
/// in units of up to 16 bytes. None when the source is strided or the rows are short.
fn index_rows(job: Job<'_>, src: Operand<'_>, n_ids: usize) -> Result<Option<Buffer>> {
    let (device, dtype, dim, ids) = (job.device, src.dtype, job.dim, job.ids);
    let l = src.layout;
    let right: usize = l.dims[dim + 1..].iter().product();
    let left: usize = l.dims[..dim].iter().product();
    let size = dtype.size_in_bytes();
    let mut k = (16 / size).max(1);
    while k > 1 && (right % k != 0 || l.start % k != 0) {
        k /= 2;
    }
    let rows = left * n_ids;
    if !l.is_contiguous() || right / k < MIN_ROW || rows == 0 {
        return Ok(None);
    }
    let key = width_of(job.op, k * size)?;
    let entry = job.entry(indexing::INDEX_ROWS)?;
    let out = device.alloc(rows * right * size)?;
    let bad = BadIds::new(device, job.opts)?;
    let params = indexing::IndexRowsParams {
        src: src.buffer.ptr_at(l.start * size)?,
        ids: ids
            .buffer
            .ptr_at(ids.layout.start * ids.dtype.size_in_bytes())?,
        out: out.ptr(),
        rows: rows as u64,
        n_ids: n_ids as u64,
        right: (right / k) as u64,
        src_dim: l.dims[dim] as u64,
        ids_stride: ids.layout.strides[0] as u64,
        bad: bad.ptr(),
    };
    launch_rows(device, (entry, key), (rows, right / k), &params)?;
    bad.finish(device, job.op, l.dims[dim])?;
    Ok(Some(out))
}

/// gather along the last dim of a contiguous source with contiguous ids: one block per row.
fn gather_last(job: Job<'_>, src: Operand<'_>) -> Result<Option<Buffer>> {
    let (device, dtype, dim, ids) = (job.device, src.dtype, job.dim, job.ids);
    let (sl, il) = (src.layout, ids.layout);
    let m = il.dims[dim];
    if dim + 1 != sl.dims.len() || !sl.is_contiguous() || !il.is_contiguous() || m < MIN_ROW {
        return Ok(None);
    }
    let n = il.elem_count();
    let rows = n / m;
    let size = dtype.size_in_bytes();
    let key = width_of(job.op, size)?;
    let entry = job.entry(indexing::GATHER_LAST)?;
    let out = device.alloc(n * size)?;
    let bad = BadIds::new(device, job.opts)?;
    let params = indexing::GatherLastParams {
        src: src.buffer.ptr_at(sl.start * size)?,
        ids: ids.buffer.ptr_at(il.start * ids.dtype.size_in_bytes())?,
        out: out.ptr(),
        rows: rows as u64,
        m: m as u64,
        src_len: sl.dims[dim] as u64,
        bad: bad.ptr(),
    };
    launch_rows(device, (entry, key), (rows, m), &params)?;
    bad.finish(device, job.op, sl.dims[dim])?;
    Ok(Some(out))
}

/// Rows of `src` picked along `dim` by the 1-D `ids`: the output has `src`'s dims with
/// `dims[dim] = ids.len()`. Masked ids give zero rows.
pub fn index_select(
    device: &Device,
    src: Operand<'_>,
    ids: Operand<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<Buffer> {
    const OP: &str = "index_select";
    let job = Job::checked((device, OP), &src, ids, dim, opts)?;
    let [n_ids] = ids.layout.dims[..] else {
        return Err(shape_err(
            OP,
            format!("ids must be 1-D, got dims {:?}", ids.layout.dims),
        ));
    };
    let mut out_dims = src.layout.dims.clone();
    out_dims[dim] = n_ids;
    if let Some(out) = index_rows(job, src, n_ids)? {
        return Ok(out);
    }
    let mut ids_strides = vec![0; out_dims.len()];
    ids_strides[dim] = ids.layout.strides[0];
    gather_core(job, src, &ids_strides, &out_dims)
}

/// `out[.., i, ..] = src[.., ids[.., i, ..], ..]` along `dim`; the output has the ids' dims,
/// which must equal `src`'s except at `dim`.
pub fn gather(
    device: &Device,
    src: Operand<'_>,
    ids: Operand<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<Buffer> {
    const OP: &str = "gather";
    let job = Job::checked((device, OP), &src, ids, dim, opts)?;
    same_except(OP, "ids", &ids.layout.dims, "src", &src.layout.dims, dim)?;
    if let Some(out) = gather_last(job, src)? {
        return Ok(out);
    }
    gather_core(job, src, &ids.layout.strides, &ids.layout.dims)
}

fn same_except(
    op: &'static str,
    a_name: &str,
    a: &[usize],
    b_name: &str,
    b: &[usize],
    dim: usize,
) -> Result<()> {
    let ok = a.len() == b.len() && (0..a.len()).all(|i| i == dim || a[i] == b[i]);
    if !ok {
        return Err(shape_err(
            op,
            format!("{a_name} dims {a:?} and {b_name} dims {b:?} must agree except at dim {dim}"),
        ));
    }
    Ok(())
}

/// What a scatter does at each destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Update {
    Set,
    Add,
}

/// dst[.., id(e), ..] (set or +=) src[e] for every element e of `src`, `ids_strides` being the
/// ids' view over `src`'s shape.
fn scatter_core(
    job: Job<'_>,
    update: Update,
    (dst, src): (Operand<'_>, Operand<'_>),
    ids_strides: &[usize],
) -> Result<()> {
    let (device, op, dim, ids) = (job.device, job.op, job.dim, job.ids);
    let dtype = dst.dtype;
    let dims = &src.layout.dims;
    let n: usize = dims.iter().product();
    if n == 0 {
        return Ok(());
    }
    let len = dims[dim];
    let n_cols = n / len;
    let dst_dim = dst.layout.dims[dim];
    let dst_dim_stride = dim_stride(dst.layout, dim) as u64;
    let ownership = match job.opts.strategy {
        ScatterStrategy::Ownership => true,
        ScatterStrategy::PerUpdate => n >= u32::MAX as usize && update == Update::Set,
        ScatterStrategy::Auto => {
            // ids shared by the columns: stride 0 on every dim but `dim` (index_add)
            let ids_shared =
                (0..dims.len()).all(|i| i == dim || dims[i] == 1 || ids_strides[i] == 0);
            prefers_ownership(n_cols, len, ids_shared)
                || (update == Update::Set && n >= u32::MAX as usize)
        }
    };
    let (key, own) = match update {
        Update::Set => (width_of(op, dtype.size_in_bytes())?, indexing::SCATTER_OWN),
        Update::Add => (dtype.as_str(), indexing::SCATTER_ADD_OWN),
    };
    let bad = BadIds::new(device, job.opts)?;
    let _span = tracing::debug_span!("scatter", op, %dtype, n, ownership).entered();
    if ownership {
        let cols = without(dims, dim);
        let walk = Walk::new(
            &cols,
            &[
                &without(&dst.layout.strides, dim),
                &without(ids_strides, dim),
                &without(&src.layout.strides, dim),
            ],
        );
        let params = indexing::ScatterOwnParams {
            dst: dst.buffer.ptr(),
            ids: ids.buffer.ptr(),
            src: src.buffer.ptr(),
            n_cols: n_cols as u64,
            len: len as u64,
            dst_dim: dst_dim as u64,
            dst_cols: KernelLayout::new(&walk.dims, &walk.strides[0], dst.layout.start)?,
            ids_cols: KernelLayout::new(&walk.dims, &walk.strides[1], ids.layout.start)?,
            src_cols: KernelLayout::new(&walk.dims, &walk.strides[2], src.layout.start)?,
            dst_dim_stride,
            ids_dim_stride: ids_strides[dim] as u64,
            src_dim_stride: src.layout.strides[dim] as u64,
            bad: bad.ptr(),
        };
        let entry = job.entry(own)?;
        device.launch_entry_elements(entry, key, n_cols as u64, &params)?;
        return bad.finish(device, op, dst_dim);
    }
    let walk = Walk::new(
        dims,
        &[
            &with_stride(&dst.layout.strides, dim, 0),
            ids_strides,
            &src.layout.strides,
        ],
    );
    let dst_view = KernelLayout::new(&walk.dims, &walk.strides[0], dst.layout.start)?;
    let ids_view = KernelLayout::new(&walk.dims, &walk.strides[1], ids.layout.start)?;
    let src_view = KernelLayout::new(&walk.dims, &walk.strides[2], src.layout.start)?;
    match update {
        Update::Add => {
            let params = indexing::ScatterAddAtomicParams {
                dst: dst.buffer.ptr(),
                ids: ids.buffer.ptr(),
                src: src.buffer.ptr(),
                n: n as u64,
                dst_dim: dst_dim as u64,
                dst_dim_stride,
                dst_view,
                ids_view,
                src_view,
                bad: bad.ptr(),
            };
            let entry = job.entry(indexing::SCATTER_ADD_ATOMIC)?;
            device.launch_entry_elements(entry, key, n as u64, &params)?;
        }
        Update::Set => {
            // one claim word per destination position the layout can reach
            let span = dst.layout.required_len()?.saturating_sub(dst.layout.start);
            let win = device.alloc_zeroed(span.max(1) * 4)?;
            let claim = indexing::ScatterClaimParams {
                win: win.ptr(),
                ids: ids.buffer.ptr(),
                n: n as u64,
                dst_dim: dst_dim as u64,
                dst_dim_stride,
                dst_view,
                ids_view,
                bad: bad.ptr(),
            };
            let entry = job.entry(indexing::SCATTER_CLAIM)?;
            device.launch_entry_elements(entry, key, n as u64, &claim)?;
            let won = indexing::ScatterWonParams {
                dst: dst.buffer.ptr(),
                win: win.ptr(),
                ids: ids.buffer.ptr(),
                src: src.buffer.ptr(),
                n: n as u64,
                dst_dim: dst_dim as u64,
                dst_dim_stride,
                dst_view,
                ids_view,
                src_view,
            };
            let entry = job.entry(indexing::SCATTER_WON)?;
            device.launch_entry_elements(entry, key, n as u64, &won)?;
        }
    }
    bad.finish(device, op, dst_dim)
}

/// In place: `dst[.., ids[e], ..] = src[e]` along `dim` for every element e of `src` (ids have
/// `src`'s dims). Where several updates hit one position, the last along `dim` wins, as on the
/// CPU.
pub fn scatter_set(
    device: &Device,
    (dst, ids, src): (Operand<'_>, Operand<'_>, Operand<'_>),
    dim: usize,
    opts: &IndexOptions,
) -> Result<()> {
    let job = Job {
        device,
        op: "scatter",
        ids,
        dim,
        opts,
    };
    scatter(job, Update::Set, dst, src)
}

/// In place: `dst[.., ids[e], ..] += src[e]` along `dim` for every element e of `src`.
pub fn scatter_add_set(
    device: &Device,
    (dst, ids, src): (Operand<'_>, Operand<'_>, Operand<'_>),
    dim: usize,
    opts: &IndexOptions,
) -> Result<()> {
    let job = Job {
        device,
        op: "scatter_add",
        ids,
        dim,
        opts,
    };
    scatter(job, Update::Add, dst, src)
}

/// scatter / scatter-add: ids and src share their dims, which equal dst's except at `dim`.
fn scatter(job: Job<'_>, update: Update, dst: Operand<'_>, src: Operand<'_>) -> Result<()> {
    let (op, ids, dim) = (job.op, job.ids, job.dim);
    dst.check(op)?;
    src.check(op)?;
    same_dtype(op, &dst, &src)?;
    check_ids(op, &ids)?;
    check_dim(op, &dst.layout.dims, dim)?;
    if ids.layout.dims != src.layout.dims {
        return Err(shape_err(
            op,
            format!(
                "ids dims {:?} differ from src dims {:?}",
                ids.layout.dims, src.layout.dims
            ),
        ));
    }
    same_except(op, "src", &src.layout.dims, "dst", &dst.layout.dims, dim)?;
    scatter_core(job, update, (dst, src), &ids.layout.strides)
}

/// In place: `dst[.., ids[i], ..] += src[.., i, ..]` along `dim` (the 1-D ids have
/// `src.dims[dim]` entries; `src` and `dst` agree on every other dim). Candle's `index_add`
/// is this on a copy of `dst`.
pub fn index_add_set(
    device: &Device,
    (dst, ids, src): (Operand<'_>, Operand<'_>, Operand<'_>),
    dim: usize,
    opts: &IndexOptions,
) -> Result<()> {
    const OP: &str = "index_add";
    dst.check(OP)?;
    src.check(OP)?;
    same_dtype(OP, &dst, &src)?;
    check_ids(OP, &ids)?;
    check_dim(OP, &dst.layout.dims, dim)?;
    same_except(OP, "src", &src.layout.dims, "dst", &dst.layout.dims, dim)?;
    if ids.layout.dims[..] != [src.layout.dims[dim]] {
        return Err(shape_err(
            OP,
            format!(
                "ids must be 1-D with {} entries (src dims {:?}), got dims {:?}",
                src.layout.dims[dim], src.layout.dims, ids.layout.dims
            ),
        ));
    }
    let mut ids_strides = vec![0; src.layout.dims.len()];
    ids_strides[dim] = ids.layout.strides[0];
    let job = Job {
        device,
        op: OP,
        ids,
        dim,
        opts,
    };
    scatter_core(job, Update::Add, (dst, src), &ids_strides)
}

#[cfg(test)]
mod options_tests {
    use super::*;
    use rocm_device::config::lookup_in;

    #[test]
    fn options_come_from_their_variable() {
        assert_eq!(
            IndexOptions::from_lookup(lookup_in(&[])),
            IndexOptions::default()
        );
        let checked = IndexOptions::from_lookup(lookup_in(&[(CHECK_INDICES_ENV, "1")]));
        assert!(checked.check_indices);
        assert_eq!(checked.strategy, ScatterStrategy::Auto);
    }
}

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
//! bounds: it acts as masked, and with `CANDLE_ROCM_CHECK_INDICES=1` (or
//! [`IndexOptions::check_indices`]) the op returns [`Error::IndexOutOfRange`] after the kernel.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod plan;
mod sort;
mod upsample;

pub use plan::ScatterStrategy;
pub use rocm_device::{Buffer, DType, Device, Error, Layout, Result};
pub use sort::arg_sort_last_dim;
pub use upsample::{upsample_bilinear2d, upsample_nearest1d, upsample_nearest2d, Bilinear};

use plan::{gather_units, prefers_ownership, with_stride, without, Walk};
use rocm_device::{kernels, KernelLayout, LaunchArgs, LaunchConfig};

/// Set to `1` to check every id and fail with [`Error::IndexOutOfRange`] (one extra sync).
pub const CHECK_INDICES_ENV: &str = "CANDLE_ROCM_CHECK_INDICES";

/// Choices of the indexing ops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexOptions {
    /// Fail on ids outside the dim instead of treating them as masked.
    pub check_indices: bool,
    /// How scatters spread their updates.
    pub strategy: ScatterStrategy,
}

impl IndexOptions {
    /// The defaults, with `check_indices` from `CANDLE_ROCM_CHECK_INDICES`.
    pub fn from_env() -> Self {
        IndexOptions {
            check_indices: std::env::var(CHECK_INDICES_ENV).is_ok_and(|v| v == "1"),
            strategy: ScatterStrategy::Auto,
        }
    }
}

/// A buffer and the layout of the tensor it holds.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub buffer: &'a Buffer,
    pub layout: &'a Layout,
}

/// The ids of an indexing op: their dtype, buffer and layout.
#[derive(Debug, Clone, Copy)]
pub struct Ids<'a> {
    pub dtype: DType,
    pub buffer: &'a Buffer,
    pub layout: &'a Layout,
}

impl Ids<'_> {
    fn check(&self, op: &'static str) -> Result<()> {
        if !matches!(
            self.dtype,
            DType::U8 | DType::U32 | DType::I16 | DType::I32 | DType::I64
        ) {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype,
            });
        }
        self.layout.check_fits(op, self.dtype, self.buffer)
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

    fn push(&self, args: &mut LaunchArgs) {
        match &self.0 {
            Some(b) => args.push_buffer(b),
            None => args.push(0u64),
        };
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

fn launch_elems(
    device: &Device,
    key: &str,
    entry: &str,
    n: u64,
    args: &mut LaunchArgs,
) -> Result<()> {
    let f = device.dtype_function(&kernels::INDEXING, key, entry)?;
    device.launch(&f, LaunchConfig::for_elements(n, device.info()), args)
}

/// out = src[.., ids[i], ..] walked over `out_dims`: the shared core of gather and
/// index_select, `ids_strides` being the ids' view over the output's shape.
#[allow(clippy::too_many_arguments)]
fn gather_core(
    device: &Device,
    op: &'static str,
    dtype: DType,
    src: View<'_>,
    ids: Ids<'_>,
    ids_strides: &[usize],
    dim: usize,
    out_dims: &[usize],
    opts: &IndexOptions,
) -> Result<Buffer> {
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
    let key = width_of(op, u.k * dtype.size_in_bytes())?;
    let bad = BadIds::new(device, opts)?;
    let n_units = (n / u.k) as u64;
    let mut args = LaunchArgs::new();
    args.push_buffer(src.buffer)
        .push_buffer(ids.buffer)
        .push_buffer(&out)
        .push(n_units)
        .push(src_dim as u64)
        .push(u.dim_stride as u64)
        .push(KernelLayout::new(
            &u.walk.dims,
            &u.walk.strides[0],
            u.src_start,
        )?)
        .push(KernelLayout::new(
            &u.walk.dims,
            &u.walk.strides[1],
            ids.layout.start,
        )?);
    bad.push(&mut args);
    let entry = format!("gather_{}_{key}", ids.dtype.as_str());
    let _span = tracing::debug_span!("gather", op, %dtype, n, unit = u.k).entered();
    launch_elems(device, key, &entry, n_units, &mut args)?;
    bad.finish(device, op, src_dim)?;
    Ok(out)
}

/// Rows shorter than this (in units) go through the general kernel: a block per row would
/// leave most of its threads idle.
const MIN_ROW: usize = 32;

/// One block per row of `row_len` units (rows past the grid are looped over by the kernel).
fn launch_rows(
    device: &Device,
    key: &str,
    entry: &str,
    rows: usize,
    row_len: usize,
    args: &mut LaunchArgs,
) -> Result<()> {
    let f = device.dtype_function(&kernels::INDEXING, key, entry)?;
    let config = LaunchConfig {
        grid: [rows.min(1 << 20) as u32, 1, 1],
        block: [row_len.next_power_of_two().clamp(64, 256) as u32, 1, 1],
        shared_mem_bytes: 0,
    };
    device.launch(&f, config, args)
}

/// index_select of a contiguous source (any start): one block per output row, the row moved
/// in units of up to 16 bytes. None when the source is strided or the rows are short.
#[allow(clippy::too_many_arguments)]
fn index_rows(
    device: &Device,
    dtype: DType,
    src: View<'_>,
    ids: Ids<'_>,
    dim: usize,
    n_ids: usize,
    opts: &IndexOptions,
) -> Result<Option<Buffer>> {
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
    let key = width_of("index_select", k * size)?;
    let out = device.alloc(rows * right * size)?;
    let bad = BadIds::new(device, opts)?;
    let mut args = LaunchArgs::new();
    args.push_buffer_at(src.buffer, l.start * size)?
        .push_buffer_at(ids.buffer, ids.layout.start * ids.dtype.size_in_bytes())?
        .push_buffer(&out)
        .push(rows as u64)
        .push(n_ids as u64)
        .push((right / k) as u64)
        .push(l.dims[dim] as u64)
        .push(ids.layout.strides[0] as u64);
    bad.push(&mut args);
    let entry = format!("index_rows_{}_{key}", ids.dtype.as_str());
    launch_rows(device, key, &entry, rows, right / k, &mut args)?;
    bad.finish(device, "index_select", l.dims[dim])?;
    Ok(Some(out))
}

/// gather along the last dim of a contiguous source with contiguous ids: one block per row.
fn gather_last(
    device: &Device,
    dtype: DType,
    src: View<'_>,
    ids: Ids<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<Option<Buffer>> {
    let (sl, il) = (src.layout, ids.layout);
    let m = il.dims[dim];
    if dim + 1 != sl.dims.len() || !sl.is_contiguous() || !il.is_contiguous() || m < MIN_ROW {
        return Ok(None);
    }
    let n = il.elem_count();
    let rows = n / m;
    let size = dtype.size_in_bytes();
    let key = width_of("gather", size)?;
    let out = device.alloc(n * size)?;
    let bad = BadIds::new(device, opts)?;
    let mut args = LaunchArgs::new();
    args.push_buffer_at(src.buffer, sl.start * size)?
        .push_buffer_at(ids.buffer, il.start * ids.dtype.size_in_bytes())?
        .push_buffer(&out)
        .push(rows as u64)
        .push(m as u64)
        .push(sl.dims[dim] as u64);
    bad.push(&mut args);
    let entry = format!("gather_last_{}_{key}", ids.dtype.as_str());
    launch_rows(device, key, &entry, rows, m, &mut args)?;
    bad.finish(device, "gather", sl.dims[dim])?;
    Ok(Some(out))
}

/// Rows of `src` picked along `dim` by the 1-D `ids`: the output has `src`'s dims with
/// `dims[dim] = ids.len()`. Masked ids give zero rows.
pub fn index_select(
    device: &Device,
    dtype: DType,
    src: View<'_>,
    ids: Ids<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<Buffer> {
    const OP: &str = "index_select";
    src.layout.check_fits(OP, dtype, src.buffer)?;
    ids.check(OP)?;
    check_dim(OP, &src.layout.dims, dim)?;
    let [n_ids] = ids.layout.dims[..] else {
        return Err(shape_err(
            OP,
            format!("ids must be 1-D, got dims {:?}", ids.layout.dims),
        ));
    };
    let mut out_dims = src.layout.dims.clone();
    out_dims[dim] = n_ids;
    if let Some(out) = index_rows(device, dtype, src, ids, dim, n_ids, opts)? {
        return Ok(out);
    }
    let mut ids_strides = vec![0; out_dims.len()];
    ids_strides[dim] = ids.layout.strides[0];
    gather_core(
        device,
        OP,
        dtype,
        src,
        ids,
        &ids_strides,
        dim,
        &out_dims,
        opts,
    )
}

/// `out[.., i, ..] = src[.., ids[.., i, ..], ..]` along `dim`; the output has the ids' dims,
/// which must equal `src`'s except at `dim`.
pub fn gather(
    device: &Device,
    dtype: DType,
    src: View<'_>,
    ids: Ids<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<Buffer> {
    const OP: &str = "gather";
    src.layout.check_fits(OP, dtype, src.buffer)?;
    ids.check(OP)?;
    check_dim(OP, &src.layout.dims, dim)?;
    same_except(OP, "ids", &ids.layout.dims, "src", &src.layout.dims, dim)?;
    if let Some(out) = gather_last(device, dtype, src, ids, dim, opts)? {
        return Ok(out);
    }
    gather_core(
        device,
        OP,
        dtype,
        src,
        ids,
        &ids.layout.strides,
        dim,
        &ids.layout.dims,
        opts,
    )
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
#[allow(clippy::too_many_arguments)]
fn scatter_core(
    device: &Device,
    op: &'static str,
    update: Update,
    dtype: DType,
    dst: View<'_>,
    ids: Ids<'_>,
    ids_strides: &[usize],
    src: View<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<()> {
    let dims = &src.layout.dims;
    let n: usize = dims.iter().product();
    if n == 0 {
        return Ok(());
    }
    let len = dims[dim];
    let n_cols = n / len;
    let dst_dim = dst.layout.dims[dim];
    let dst_dim_stride = dim_stride(dst.layout, dim) as u64;
    let ownership = match opts.strategy {
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
    let ids_key = ids.dtype.as_str();
    let (key, prefix) = match update {
        Update::Set => (width_of(op, dtype.size_in_bytes())?, "scatter"),
        Update::Add => (dtype.as_str(), "scatter_add"),
    };
    let bad = BadIds::new(device, opts)?;
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
        let mut args = LaunchArgs::new();
        args.push_buffer(dst.buffer)
            .push_buffer(ids.buffer)
            .push_buffer(src.buffer)
            .push(n_cols as u64)
            .push(len as u64)
            .push(dst_dim as u64)
            .push(KernelLayout::new(
                &walk.dims,
                &walk.strides[0],
                dst.layout.start,
            )?)
            .push(KernelLayout::new(
                &walk.dims,
                &walk.strides[1],
                ids.layout.start,
            )?)
            .push(KernelLayout::new(
                &walk.dims,
                &walk.strides[2],
                src.layout.start,
            )?)
            .push(dst_dim_stride)
            .push(ids_strides[dim] as u64)
            .push(src.layout.strides[dim] as u64);
        bad.push(&mut args);
        let entry = format!("{prefix}_own_{ids_key}_{key}");
        launch_elems(device, key, &entry, n_cols as u64, &mut args)?;
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
            let mut args = LaunchArgs::new();
            args.push_buffer(dst.buffer)
                .push_buffer(ids.buffer)
                .push_buffer(src.buffer)
                .push(n as u64)
                .push(dst_dim as u64)
                .push(dst_dim_stride)
                .push(dst_view)
                .push(ids_view)
                .push(src_view);
            bad.push(&mut args);
            let entry = format!("scatter_add_atomic_{ids_key}_{key}");
            launch_elems(device, key, &entry, n as u64, &mut args)?;
        }
        Update::Set => {
            // one claim word per destination position the layout can reach
            let span = dst.layout.required_len()?.saturating_sub(dst.layout.start);
            let win = device.alloc_zeroed(span.max(1) * 4)?;
            let mut args = LaunchArgs::new();
            args.push_buffer(&win)
                .push_buffer(ids.buffer)
                .push(n as u64)
                .push(dst_dim as u64)
                .push(dst_dim_stride)
                .push(dst_view)
                .push(ids_view);
            bad.push(&mut args);
            let entry = format!("scatter_claim_{ids_key}_{key}");
            launch_elems(device, key, &entry, n as u64, &mut args)?;
            let mut args = LaunchArgs::new();
            args.push_buffer(dst.buffer)
                .push_buffer(&win)
                .push_buffer(ids.buffer)
                .push_buffer(src.buffer)
                .push(n as u64)
                .push(dst_dim as u64)
                .push(dst_dim_stride)
                .push(dst_view)
                .push(ids_view)
                .push(src_view);
            let entry = format!("scatter_won_{ids_key}_{key}");
            launch_elems(device, key, &entry, n as u64, &mut args)?;
        }
    }
    bad.finish(device, op, dst_dim)
}

/// In place: `dst[.., ids[e], ..] = src[e]` along `dim` for every element e of `src` (ids have
/// `src`'s dims). Where several updates hit one position, the last along `dim` wins, as on the
/// CPU.
pub fn scatter_set(
    device: &Device,
    dtype: DType,
    dst: View<'_>,
    ids: Ids<'_>,
    src: View<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<()> {
    scatter(
        device,
        "scatter",
        Update::Set,
        dtype,
        dst,
        ids,
        src,
        dim,
        opts,
    )
}

/// In place: `dst[.., ids[e], ..] += src[e]` along `dim` for every element e of `src`.
pub fn scatter_add_set(
    device: &Device,
    dtype: DType,
    dst: View<'_>,
    ids: Ids<'_>,
    src: View<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<()> {
    scatter(
        device,
        "scatter_add",
        Update::Add,
        dtype,
        dst,
        ids,
        src,
        dim,
        opts,
    )
}

/// scatter / scatter-add: ids and src share their dims, which equal dst's except at `dim`.
#[allow(clippy::too_many_arguments)]
fn scatter(
    device: &Device,
    op: &'static str,
    update: Update,
    dtype: DType,
    dst: View<'_>,
    ids: Ids<'_>,
    src: View<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<()> {
    dst.layout.check_fits(op, dtype, dst.buffer)?;
    src.layout.check_fits(op, dtype, src.buffer)?;
    ids.check(op)?;
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
    let ids_strides = &ids.layout.strides;
    scatter_core(
        device,
        op,
        update,
        dtype,
        dst,
        ids,
        ids_strides,
        src,
        dim,
        opts,
    )
}

/// In place: `dst[.., ids[i], ..] += src[.., i, ..]` along `dim` (the 1-D ids have
/// `src.dims[dim]` entries; `src` and `dst` agree on every other dim). Candle's `index_add`
/// is this on a copy of `dst`.
pub fn index_add_set(
    device: &Device,
    dtype: DType,
    dst: View<'_>,
    ids: Ids<'_>,
    src: View<'_>,
    dim: usize,
    opts: &IndexOptions,
) -> Result<()> {
    const OP: &str = "index_add";
    dst.layout.check_fits(OP, dtype, dst.buffer)?;
    src.layout.check_fits(OP, dtype, src.buffer)?;
    ids.check(OP)?;
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
    scatter_core(
        device,
        OP,
        Update::Add,
        dtype,
        dst,
        ids,
        &ids_strides,
        src,
        dim,
        opts,
    )
}

//! arg_sort along the last dim: rows up to one tile sorted in shared memory, longer rows
//! sorted per tile and merged in passes (see sort.hip).

use rocm_device::{Buffer, Device, Error, LaunchConfig, Operand, Result};
use rocm_elementwise::OperandCopy;
use rocm_kernels::sort::{self, MergeParams, TileParams};

/// Elements one block sorts in shared memory (ARGSORT_TILE in sort.hip).
const TILE: usize = 2048;

/// Fewest and most threads of a tile's block (two elements a thread).
const TILE_THREADS: (usize, usize) = (64, 512);

/// Shared memory of a tile of `p2` elements: a 64-bit key and a 32-bit column each.
fn tile_config(blocks: usize, p2: usize) -> LaunchConfig {
    LaunchConfig {
        grid: [blocks.min(rocm_device::GRID_X_CAP as usize) as u32, 1, 1],
        block: [(p2 / 2).clamp(TILE_THREADS.0, TILE_THREADS.1) as u32, 1, 1],
        shared_mem_bytes: (p2 * 12) as u32,
    }
}

/// The u32 columns that sort each row of the last dim, ascending or descending. Equal values
/// keep their order (a stable sort, as the CPU backend's); -0.0 equals 0.0; NaN counts as the
/// largest value. A strided input is copied first.
pub fn arg_sort_last_dim(device: &Device, src: Operand<'_>, ascending: bool) -> Result<Buffer> {
    const OP: &str = "arg_sort";
    let (l, dtype) = (src.layout, src.dtype);
    src.check(OP)?;
    let Some(&len) = l.dims.last() else {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: "a scalar has no last dim".into(),
        });
    };
    if len >= u32::MAX as usize {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!("rows of {len} elements exceed u32 columns"),
        });
    }
    let n = l.elem_count();
    let out = device.alloc(n * 4)?;
    if n == 0 {
        return Ok(out);
    }
    let rows = n / len;
    let x = src.contiguous(OP)?;
    let key = dtype.as_str();
    let _span = tracing::debug_span!("arg_sort", %dtype, rows, len).entered();
    let descending = u32::from(!ascending);
    if len <= TILE {
        let p2 = len.next_power_of_two();
        let params = TileParams {
            src: x.ptr()?,
            keys_out: None,
            idx_out: None,
            final_out: Some(out.ptr()),
            rows: rows as u64,
            len: len as u64,
            p2: p2 as u32,
            descending,
        };
        device.launch_entry(sort::TILE, key, tile_config(rows, p2), &params)?;
        return Ok(out);
    }
    // (key, column) pairs, ping-ponged between two buffers by the merge passes
    let keys = [device.alloc(n * 8)?, device.alloc(n * 8)?];
    let cols = [device.alloc(n * 4)?, device.alloc(n * 4)?];
    let params = TileParams {
        src: x.ptr()?,
        keys_out: Some(keys[0].ptr()),
        idx_out: Some(cols[0].ptr()),
        final_out: None,
        rows: rows as u64,
        len: len as u64,
        p2: TILE as u32,
        descending,
    };
    let config = tile_config(rows * len.div_ceil(TILE), TILE);
    device.launch_entry(sort::TILE, key, config, &params)?;
    let mut width = TILE;
    let mut from = 0;
    while width < len {
        let last = width * 2 >= len;
        let to = 1 - from;
        let params = MergeParams {
            kin: keys[from].ptr(),
            iin: cols[from].ptr(),
            kout: (!last).then(|| keys[to].ptr()),
            iout: (!last).then(|| cols[to].ptr()),
            final_out: last.then(|| out.ptr()),
            rows: rows as u64,
            len: len as u64,
            width: width as u64,
        };
        let config = LaunchConfig::for_elements(n as u64, device.info());
        device.launch_entry(sort::MERGE, key, config, &params)?;
        from = to;
        width *= 2;
    }
    Ok(out)
}

//! Candle's `indexed_moe_forward` on quantized experts.

use crate::*;

/// Pairs of one expert the grouped mixture of experts dots at once (MOE_GROUP_PAIRS in
/// quantized.hip).
pub(crate) const MOE_GROUP_PAIRS: usize = 8;
/// The most experts its routing sorts on the device (MOE_ROUTE_MAX_EXPERTS); more take the
/// per-pair kernel.
pub(crate) const MOE_ROUTE_MAX_EXPERTS: usize = 4096;
/// Threads of the one block that sorts the pairs by expert, at most (any count sorts them).
const MOE_ROUTE_BLOCK: u32 = 1024;

/// `experts` weight matrices of (n, k) one after the other (`weights.rows` = experts * n), as
/// a mixture-of-experts layer stores them.
#[derive(Debug, Clone, Copy)]
pub struct QExperts<'a> {
    pub weights: QWeights<'a>,
    pub experts: usize,
}

/// Candle's `indexed_moe_forward`: for x (tokens, slots, k) with slots = top or 1 and u32 ids
/// (tokens, top) naming an expert per token and slot, y[t, e, :] = experts[ids[t, e]] .
/// x[t, e or 0, :]^T, a new contiguous (tokens, top, n) buffer of x's dtype (f32, f16, bf16).
/// Block types only. One token: a mat-vec per pair (`moe_q8`); more: the pairs sorted by expert
/// on the device (`moe_route`) and a block per chunk of up to 8 pairs of one
/// expert (`moe_grouped_q8`), the same results bit for bit; with
/// [`MOE_MMQ_MIN_PAIRS_PER_EXPERT`] pairs an expert on a device with matrix units, chunks of 64
/// pairs on the int8 matrix units (`moe_mmq`: the same integer sums, their scaling in another
/// order). An id past the experts gives a zero
/// row, or with `check_ids` `Error::IndexOutOfRange` (one sync).
pub fn moe_matvec(
    device: &Device,
    w: QExperts<'_>,
    (x, ids): (Operand<'_>, Operand<'_>),
    check_ids: bool,
) -> Result<Buffer> {
    moe_matvec_via(device, w, (x, ids), check_ids, MoePath::Auto)
}

/// How [`moe_matvec_via`] multiplies the pairs of more than one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoePath {
    /// As [`moe_matvec`] chooses.
    Auto,
    /// Chunks of 8 pairs of one expert on the integer dot products (`moe_grouped_q8`).
    Grouped,
    /// Chunks of 64 pairs of one expert on the int8 matrix units (`moe_mmq`); an error where
    /// they do not apply.
    Mmq,
}

/// [`moe_matvec`] through a chosen path (for benchmarks and tests).
pub fn moe_matvec_via(
    device: &Device,
    w: QExperts<'_>,
    (x, ids): (Operand<'_>, Operand<'_>),
    check_ids: bool,
    path: MoePath,
) -> Result<Buffer> {
    const OP: &str = "indexed_moe_forward";
    w.weights.check(OP)?;
    let QExperts { weights, experts } = w;
    let dtype = x.dtype;
    if !weights.ty.is_block() {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "{} weights: the experts must be a quantized block type",
                weights.ty
            ),
        });
    }
    if ids.dtype != DType::U32 {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: ids.dtype,
        });
    }
    let (&[tokens, slots, k], &[id_tokens, top]) =
        (x.layout.dims.as_slice(), ids.layout.dims.as_slice())
    else {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "x {:?} must be (tokens, slots, k) and ids {:?} (tokens, top)",
                x.layout.dims, ids.layout.dims
            ),
        });
    };
    let n = weights.rows.checked_div(experts).unwrap_or(0);
    if k != weights.k
        || tokens != id_tokens
        || !(slots == 1 || slots == top)
        || experts == 0
        || n * experts != weights.rows
    {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "x {:?}, ids {:?} against {experts} experts of ({n}, {}) {} ({} rows)",
                x.layout.dims, ids.layout.dims, weights.k, weights.ty, weights.rows
            ),
        });
    }
    let pairs = tokens * top;
    // A token's experts are distinct: one token reads each of its experts once either way, and
    // moe_q8's grid over the pairs alone fills the device; more tokens share experts, whose
    // pairs the grouped kernel takes together (its grid holds a block row per chunk of pairs)
    // With MOE_MMQ_MIN_PAIRS_PER_EXPERT pairs an expert on average, where the device has
    // matrix units, the chunks are MMQ_BN pairs and the int8 matrix units multiply them
    // (`moe_mmq`).
    let mmq = match path {
        MoePath::Auto => tokens > 1 && moe_takes_mmq(device, weights.ty, pairs, experts),
        MoePath::Grouped => false,
        MoePath::Mmq => {
            require_mmq(OP, device, weights.ty)?;
            true
        }
    };
    let chunk = if mmq { MMQ_BLOCK_COLS } else { MOE_GROUP_PAIRS };
    let chunks = pairs.div_ceil(chunk) + experts + 1;
    let grouped = tokens > 1
        && experts <= MOE_ROUTE_MAX_EXPERTS
        && chunks <= rocm_device::MAX_GRID_YZ as usize;
    // the entries exist for every float output (checked before any allocation)
    let moe = family_entry(OP, quantized::MOE_Q8, dtype)?;
    let moe_grouped = if mmq {
        family_entry(OP, quantized::MOE_MMQ, dtype)?
    } else {
        family_entry(OP, quantized::MOE_GROUPED_Q8, dtype)?
    };
    let y = device.alloc(pairs * n * dtype.size_in_bytes())?;
    if pairs * n == 0 {
        return Ok(y);
    }
    if k == 0 {
        device.memset(&y, 0, y.len(), 0)?;
        return Ok(y);
    }
    let _span =
        tracing::debug_span!("op", op = OP, ty = %weights.ty, %dtype, pairs, n, k).entered();
    let xc = x.contiguous(OP)?;
    // block types only (checked above)
    let scheme = weights.ty.q8_scheme().unwrap_or(Q8Scheme::Q8_0);
    let xq = quantize_rows(device, (&xc, dtype), (tokens * slots, k), scheme)?;
    let ids_data = ids.contiguous(OP)?;
    let bad = if check_ids {
        Some(device.alloc_zeroed(4)?)
    } else {
        None
    };
    // the pairs sorted by expert, with where each expert's pairs and chunks start
    let route = if grouped {
        let route = device.alloc((pairs + 2 * (experts + 2)) * 4)?;
        let params = quantized::MoeRouteParams {
            ids: ids_data.ptr()?,
            route: route.ptr(),
            pairs: pairs as u64,
            experts: experts as u64,
            chunk: chunk as u32,
        };
        // (the wave64 emulation's blocks hold fewer threads)
        let block = MOE_ROUTE_BLOCK.min(device.info().max_threads_per_block);
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [block, 1, 1],
            shared_mem_bytes: 0,
        };
        device.launch_entry(quantized::MOE_ROUTE, weights.ty.key(), config, &params)?;
        Some(route)
    } else {
        None
    };
    let key = weights.ty.key();
    let (w, total) = (weights.buffer.ptr(), weights.buffer_blocks() as u64);
    let (xq, y_ptr, bad_ptr) = (xq.ptr(), y.ptr(), bad.as_ref().map(Buffer::ptr));
    let (n64, k64, experts64, top64) = (n as u64, k as u64, experts as u64, top as u64);
    match &route {
        Some(route) => {
            let params = quantized::MoeGroupedQ8Params {
                w,
                total,
                xq,
                route: route.ptr(),
                y: y_ptr,
                n: n64,
                k: k64,
                experts: experts64,
                top: top64,
                x_slots: slots as u64,
                pairs: pairs as u64,
                bad: bad_ptr,
            };
            let config = if mmq {
                LaunchConfig {
                    grid: [
                        u32::try_from(n.div_ceil(MMQ_BLOCK_ROWS)).map_err(|_| {
                            Error::ShapeMismatch {
                                op: OP,
                                detail: format!("{n} rows an expert exceed one launch's grid"),
                            }
                        })?,
                        chunks as u32,
                        1,
                    ],
                    block: [MMQ_WARPS * device.info().warp_size, 1, 1],
                    shared_mem_bytes: 0,
                }
            } else {
                moe_grouped_config(device, n, chunks)
            };
            device.launch_entry(moe_grouped, key, config, &params)?;
        }
        None => {
            let params = quantized::MoeQ8Params {
                w,
                total,
                xq,
                ids: ids_data.ptr()?,
                y: y_ptr,
                n: n64,
                k: k64,
                experts: experts64,
                top: top64,
                x_slots: slots as u64,
                pairs: pairs as u64,
                bad: bad_ptr,
            };
            let config = matvec_config(
                device,
                n,
                1,
                pairs.min(rocm_device::MAX_GRID_YZ as usize) as u32,
            );
            device.launch_entry(moe, key, config, &params)?;
        }
    }
    if let Some(b) = bad {
        check_ids_counter(device, &b, (&ids_data, pairs), (OP, experts))?;
    }
    Ok(y)
}

/// The grouped mixture of experts' grid: a block row per chunk of pairs (`chunks` at most;
/// the rows past the route's last chunk return at once), and as many blocks a row as make
/// about four times the device's [`MATVEC_BLOCKS_PER_CU`] blocks a multiprocessor in all, no
/// more than the rows need.
fn moe_grouped_config(device: &Device, n: usize, chunks: usize) -> LaunchConfig {
    let warps = u64::from(MATVEC_BLOCK / device.info().warp_size.max(1)).max(1);
    let slots = u64::from(device.info().multiprocessor_count.max(1)) * MATVEC_BLOCKS_PER_CU;
    let per_chunk = (4 * slots)
        .div_ceil(chunks.max(1) as u64)
        .clamp(1, (n as u64).div_ceil(warps).max(1));
    LaunchConfig {
        grid: [per_chunk as u32, chunks as u32, 1],
        block: [MATVEC_BLOCK, 1, 1],
        shared_mem_bytes: 0,
    }
}

/// After a kernel that counted out-of-range ids into `bad`: Ok when none were, else
/// `IndexOutOfRange` naming the first bad id of the `n_ids` ids (read back on the error path
/// only).
pub(crate) fn check_ids_counter(
    device: &Device,
    bad: &Buffer,
    (ids, n_ids): (&Contiguous<'_>, usize),
    (op, size): (&'static str, usize),
) -> Result<()> {
    let mut count = [0u8; 4];
    device.copy_dtoh(bad, 0, &mut count)?;
    let count = u32::from_le_bytes(count);
    if count == 0 {
        return Ok(());
    }
    let mut raw = vec![0u8; n_ids * 4];
    device.copy_dtoh(ids.buffer(), ids.start() * 4, &mut raw)?;
    let index = raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .find(|&id| id as usize >= size)
        .map_or(-1, i64::from);
    Err(Error::IndexOutOfRange {
        op,
        index,
        size,
        count: u64::from(count),
    })
}

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
    check_experts(OP, &w, &ids)?;
    let QExperts { weights, experts } = w;
    let dtype = x.dtype;
    let (&[tokens, slots, k], &[_, top]) = (x.layout.dims.as_slice(), ids.layout.dims.as_slice())
    else {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "x {:?} must be (tokens, slots, k) and ids {:?} (tokens, top)",
                x.layout.dims, ids.layout.dims
            ),
        });
    };
    let n = expert_rows(
        OP,
        &w,
        (&x.layout.dims, &ids.layout.dims),
        (tokens, slots, k),
    )?;
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
                n.div_ceil(MOE_Q8_ROWS),
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

/// The experts' weights a block type and the ids u32, else the error naming `op`.
fn check_experts(op: &'static str, w: &QExperts<'_>, ids: &Operand<'_>) -> Result<()> {
    w.weights.check(op)?;
    if !w.weights.ty.is_block() {
        return Err(Error::ShapeMismatch {
            op,
            detail: format!(
                "{} weights: the experts must be a quantized block type",
                w.weights.ty
            ),
        });
    }
    if ids.dtype != DType::U32 {
        return Err(Error::UnsupportedDType {
            op,
            dtype: ids.dtype,
        });
    }
    Ok(())
}

/// The shape error of activations `x_dims` and ids `ids_dims` against the experts `w`.
fn experts_mismatch(
    op: &'static str,
    w: &QExperts<'_>,
    (x_dims, ids_dims): (&[usize], &[usize]),
) -> Error {
    let QExperts { weights, experts } = *w;
    Error::ShapeMismatch {
        op,
        detail: format!(
            "x {x_dims:?}, ids {ids_dims:?} against {experts} experts of ({}, {}) {} ({} rows)",
            weights.rows.checked_div(experts).unwrap_or(0),
            weights.k,
            weights.ty,
            weights.rows
        ),
    }
}

/// The rows n of each of `w`'s experts, where activations (tokens, slots, k) and ids
/// (tokens, top) fit them (slots 1 or top, k the experts' width), else the error naming `op`.
fn expert_rows(
    op: &'static str,
    w: &QExperts<'_>,
    dims: (&[usize], &[usize]),
    (tokens, slots, k): (usize, usize, usize),
) -> Result<usize> {
    let QExperts { weights, experts } = *w;
    let n = weights.rows.checked_div(experts).unwrap_or(0);
    let top = dims.1.get(1).copied().unwrap_or(0);
    if k != weights.k
        || dims.1.len() != 2
        || dims.1[0] != tokens
        || !(slots == 1 || slots == top)
        || experts == 0
        || n * experts != weights.rows
    {
        return Err(experts_mismatch(op, w, dims));
    }
    Ok(n)
}

/// The most experts [`moe_topk`] picks among (MOE_TOPK_MAX_EXPERTS in quantized.hip).
pub const MOE_TOPK_MAX_EXPERTS: usize = 4096;

/// A mixture-of-experts router's choice for each token, as candle-transformers' `FusedMoe`
/// makes it from the router's logits (tokens, experts) (f32, f16 or bf16): the softmax over the
/// experts, the `top` most probable (the lower expert first among equal probabilities, as a
/// stable sort orders them) and their probabilities, divided by their sum where `renorm`. One
/// launch in place of five ops; returns u32 ids and f32 weights, both (tokens, top). A row of
/// NaNs names expert `experts` (past the weights) in the slots it cannot fill.
pub fn moe_topk(
    device: &Device,
    logits: Operand<'_>,
    top: usize,
    renorm: bool,
) -> Result<(Buffer, Buffer)> {
    const OP: &str = "moe_topk";
    let key = out_key(OP, logits.dtype)?;
    let &[tokens, experts] = logits.layout.dims.as_slice() else {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!("logits {:?} must be (tokens, experts)", logits.layout.dims),
        });
    };
    if top == 0 || top > experts || experts > MOE_TOPK_MAX_EXPERTS {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "the top {top} of {experts} experts (1 to the experts, at most \
                 {MOE_TOPK_MAX_EXPERTS} experts)"
            ),
        });
    }
    let lc = logits.contiguous(OP)?;
    let ids = device.alloc(tokens * top * 4)?;
    let weights = device.alloc(tokens * top * 4)?;
    if tokens == 0 {
        return Ok((ids, weights));
    }
    let params = quantized::MoeTopkParams {
        logits: lc.ptr()?,
        ids: ids.ptr(),
        weights: weights.ptr(),
        tokens: tokens as u64,
        experts: experts as u64,
        top: top as u32,
        renorm: u32::from(renorm),
    };
    let config = LaunchConfig {
        grid: [
            u32::try_from(tokens)
                .unwrap_or(u32::MAX)
                .min(rocm_device::MAX_GRID_YZ),
            1,
            1,
        ],
        block: [device.info().warp_size.max(1), 1, 1],
        shared_mem_bytes: 0,
    };
    device.launch_entry(quantized::MOE_TOPK, key, config, &params)?;
    Ok((ids, weights))
}

/// Weight rows a warp of the pairs' mat-vec takes (MOE_Q8_ROWS in quantized.hip).
pub const MOE_Q8_ROWS: usize = 4;

/// Warps of a [`moe_router_topk`] block, a block an expert (MOE_ROUTER_WARPS in quantized.hip).
pub const MOE_ROUTER_WARPS: usize = 4;
/// The most experts [`moe_router_topk`] picks among (MOE_ROUTER_MAX_EXPERTS in quantized.hip:
/// its last block holds a row of probabilities a warp).
pub const MOE_ROUTER_MAX_EXPERTS: usize = 512;

/// A decode step's router and its choice in one launch: the logits h . router^T (h (tokens,
/// hidden), the router's weights (experts, hidden), one float dtype; the logits rounded to it
/// as the product's output would be), then [`moe_topk`]'s choice from them. Made for a few
/// tokens (a block an expert reads every token's h); returns u32 ids and f32 weights, both
/// (tokens, top).
pub fn moe_router_topk(
    device: &Device,
    h: Operand<'_>,
    router: Operand<'_>,
    top: usize,
    renorm: bool,
) -> Result<(Buffer, Buffer)> {
    const OP: &str = "moe_router_topk";
    let key = out_key(OP, h.dtype)?;
    if router.dtype != h.dtype {
        return Err(Error::DTypeMismatch {
            op: OP,
            detail: format!("h {}, router {}", h.dtype, router.dtype),
        });
    }
    let (&[tokens, hidden], &[experts, router_k]) =
        (h.layout.dims.as_slice(), router.layout.dims.as_slice())
    else {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "h {:?} and router {:?} must be (tokens, hidden) and (experts, hidden)",
                h.layout.dims, router.layout.dims
            ),
        });
    };
    if router_k != hidden || top == 0 || top > experts || experts > MOE_ROUTER_MAX_EXPERTS {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "h {:?}, router {:?}: the top {top} of {experts} experts (1 to the experts, at \
                 most {MOE_ROUTER_MAX_EXPERTS} experts) of the hidden width",
                h.layout.dims, router.layout.dims
            ),
        });
    }
    let (hc, rc) = (h.contiguous(OP)?, router.contiguous(OP)?);
    let ids = device.alloc(tokens * top * 4)?;
    let weights = device.alloc(tokens * top * 4)?;
    if tokens == 0 {
        return Ok((ids, weights));
    }
    let logits = device.alloc(tokens * experts * 4)?;
    let tickets = device.tickets(1)?;
    let params = quantized::MoeRouterTopkParams {
        h: hc.ptr()?,
        w: rc.ptr()?,
        logits: logits.ptr(),
        tickets: tickets.ptr(),
        ids: ids.ptr(),
        weights: weights.ptr(),
        tokens: tokens as u64,
        experts: experts as u64,
        hidden: hidden as u64,
        top: top as u32,
        renorm: u32::from(renorm),
    };
    let warp = device.info().warp_size.max(1);
    let config = LaunchConfig {
        grid: [experts as u32, 1, 1],
        block: [warp * MOE_ROUTER_WARPS as u32, 1, 1],
        shared_mem_bytes: 0,
    };
    device.launch_entry(quantized::MOE_ROUTER_TOPK, key, config, &params)?;
    Ok((ids, weights))
}

/// The experts' products for activations already in q8 form (their scheme the experts'), as
/// [`moe_matvec`] computes them for the float rows: x holds a row per token (every slot reads
/// it) or a row per (token, slot) pair, ids (tokens, top) u32. Without `topw`, the pairs'
/// products, a new (tokens * top, n) buffer of `out`; with `topw` (f32 (tokens, top)), each
/// token's sum over its slots of the products scaled by their weights, a new (tokens, n)
/// buffer: a decode step's down projection, its scaling and its sum in one launch. One block
/// row a pair or token (made for a few tokens: a decode step). An id past the experts gives a
/// zero product, or with `check_ids` `Error::IndexOutOfRange` (one sync).
pub fn moe_matvec_q8(
    device: &Device,
    w: QExperts<'_>,
    (x, ids): (&Q8Activations, Operand<'_>),
    topw: Option<Operand<'_>>,
    (out, check_ids): (DType, bool),
) -> Result<Buffer> {
    const OP: &str = "moe_matvec_q8";
    check_experts(OP, &w, &ids)?;
    let QExperts { weights, experts } = w;
    let (tokens, top) = match ids.layout.dims.as_slice() {
        &[tokens, top] => (tokens, top),
        _ => return Err(experts_mismatch(OP, &w, (&[x.rows, x.k], &ids.layout.dims))),
    };
    let slots = if x.rows == tokens { 1 } else { top };
    let x_dims = [tokens, slots, x.k];
    if x.rows != tokens * slots
        || weights.ty.q8_scheme() != Some(x.scheme)
        || x.buffer.len() < q8_bytes(x.rows, x.k)
    {
        return Err(Error::ShapeMismatch {
            op: OP,
            detail: format!(
                "{} rows of {} {:?} activations for ids {:?} against {} experts of {} ({:?} \
                 activations)",
                x.rows,
                x.k,
                x.scheme,
                ids.layout.dims,
                experts,
                weights.ty,
                weights.ty.q8_scheme()
            ),
        });
    }
    let n = expert_rows(OP, &w, (&x_dims, &ids.layout.dims), (tokens, slots, x.k))?;
    if let Some(t) = &topw {
        if t.dtype != DType::F32 {
            return Err(Error::UnsupportedDType {
                op: OP,
                dtype: t.dtype,
            });
        }
        if t.layout.dims != ids.layout.dims {
            return Err(Error::ShapeMismatch {
                op: OP,
                detail: format!(
                    "weights {:?} against ids {:?}",
                    t.layout.dims, ids.layout.dims
                ),
            });
        }
    }
    let key = weights.ty.key();
    let pairs = tokens * top;
    let rows_out = if topw.is_some() { tokens } else { pairs };
    let y = device.alloc(rows_out * n * out.size_in_bytes())?;
    if rows_out * n == 0 {
        return Ok(y);
    }
    let ids_c = ids.contiguous(OP)?;
    let topw_c = topw.as_ref().map(|t| t.contiguous(OP)).transpose()?;
    let bad = if check_ids {
        Some(device.alloc_zeroed(4)?)
    } else {
        None
    };
    let grid_rows = rows_out.min(rocm_device::MAX_GRID_YZ as usize) as u32;
    // moe_q8_sum: a warp a row; moe_q8: a warp MOE_Q8_ROWS rows
    let rows_a_warp = if topw_c.is_some() { 1 } else { MOE_Q8_ROWS };
    let config = matvec_config(device, n.div_ceil(rows_a_warp), 1, grid_rows);
    let (w_ptr, total) = (weights.buffer.ptr(), weights.buffer_blocks() as u64);
    let bad_ptr = bad.as_ref().map(Buffer::ptr);
    match &topw_c {
        Some(t) => {
            let params = quantized::MoeQ8SumParams {
                w: w_ptr,
                total,
                xq: x.buffer.ptr(),
                ids: ids_c.ptr()?,
                topw: t.ptr()?,
                y: y.ptr(),
                n: n as u64,
                k: x.k as u64,
                experts: experts as u64,
                top: top as u64,
                x_slots: slots as u64,
                tokens: tokens as u64,
                bad: bad_ptr,
            };
            let entry = family_entry(OP, quantized::MOE_Q8_SUM, out)?;
            device.launch_entry(entry, key, config, &params)?;
        }
        None => {
            let params = quantized::MoeQ8Params {
                w: w_ptr,
                total,
                xq: x.buffer.ptr(),
                ids: ids_c.ptr()?,
                y: y.ptr(),
                n: n as u64,
                k: x.k as u64,
                experts: experts as u64,
                top: top as u64,
                x_slots: slots as u64,
                pairs: pairs as u64,
                bad: bad_ptr,
            };
            let entry = family_entry(OP, quantized::MOE_Q8, out)?;
            device.launch_entry(entry, key, config, &params)?;
        }
    }
    if let Some(b) = bad {
        check_ids_counter(device, &b, (&ids_c, pairs), (OP, experts))?;
    }
    Ok(y)
}

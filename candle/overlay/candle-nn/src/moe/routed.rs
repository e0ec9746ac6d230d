//! `moe_gemm` and `moe_gemm_gguf` on devices without CUDA's fused kernels: ROCm, where the
//! GGUF form runs as the quantized crate's indexed product (`QTensor::indexed_moe_forward`: one
//! launch over every (token, slot) pair for one token; for more, the pairs sorted by expert on
//! the device and each expert's rows read once per 8 of its pairs), and the CPU (the tests'
//! reference, and where a model runs on the CPU). Same arguments and results as the CUDA
//! functions.
//!
//! The routing comes sorted by expert: position i of `sorted_token_ids` names a pair p (token
//! p / topk, slot p % topk) and `experts_ids[i]` its expert. The output row p is that expert's
//! weights times the token's input row (row p of the input where `topk_weights` is given, as
//! for the down projection, else row p / topk), scaled by `topk_weights[p]` where given.

use candle::quantized::{QMatMul, QStorage, QTensor};
use candle::{DType, Device, Module, Result, Tensor};

/// The pairs' experts in pair order (u32 `(pairs,)`), from the routing sorted by expert; an
/// error for a routing of another length, or on the CPU for an expert past `experts`. (On a GPU
/// the products read an expert past the weights as zeros, or report it with the device's
/// index checks: no read past the weights, and no host sync a call.)
fn experts_by_pair(
    sorted_token_ids: &Tensor,
    experts_ids: &Tensor,
    pairs: usize,
    experts: usize,
) -> Result<Tensor> {
    let (n_sorted, n_ids) = (sorted_token_ids.dims1()?, experts_ids.dims1()?);
    if n_sorted != pairs || n_ids != pairs {
        candle::bail!(
            "moe: {n_sorted} sorted token ids and {n_ids} expert ids for {pairs} (token, slot) pairs"
        )
    }
    if experts_ids.device().is_cpu() {
        let largest = experts_ids
            .to_dtype(DType::U32)?
            .max(0)?
            .to_scalar::<u32>()? as usize;
        if largest >= experts {
            candle::bail!("moe: expert id {largest} past the {experts} experts of the weights")
        }
    }
    Tensor::zeros(pairs, DType::U32, experts_ids.device())?.scatter(
        &sorted_token_ids.to_dtype(DType::U32)?,
        &experts_ids.to_dtype(DType::U32)?,
        0,
    )
}

/// The input as `(tokens, slots, k)`: one row per pair where the weights are given (slots =
/// topk), else one row per token read by all its slots; and the number of pairs. An error for
/// rows of another width than the experts' `(experts, n, k)`.
fn input_by_token(
    (op, input, experts): (&str, &Tensor, &[usize]),
    topk_weights: &Option<Tensor>,
    topk: usize,
) -> Result<(Tensor, usize)> {
    let (rows, k) = input.dims2()?;
    if experts.len() != 3 || experts[2] != k {
        candle::bail!("{op}: input {:?} against experts {experts:?}", input.dims())
    }
    if topk == 0 {
        candle::bail!("moe: topk is 0")
    }
    match topk_weights {
        Some(_) => {
            if rows % topk != 0 {
                candle::bail!("moe: {rows} input rows are not whole tokens of {topk} slots")
            }
            Ok((input.reshape((rows / topk, topk, k))?, rows))
        }
        None => Ok((input.reshape((rows, 1, k))?, rows * topk)),
    }
}

/// Output rows `(pairs, n)` scaled by the pairs' weights where given.
fn scaled(y: Tensor, topk_weights: &Option<Tensor>, pairs: usize) -> Result<Tensor> {
    match topk_weights {
        None => Ok(y),
        Some(w) => {
            let w = w.flatten_all()?;
            if w.dims1()? != pairs {
                candle::bail!("moe: {} top-k weights for {pairs} pairs", w.dims1()?)
            }
            let w = w.to_dtype(y.dtype())?.reshape((pairs, 1))?;
            y.broadcast_mul(&w)
        }
    }
}

/// Float experts `weights (experts, n, k)`: for each pair its expert's rows gathered and one
/// batched product, in chunks of pairs so the gathered weights stay below 256 MiB.
pub fn moe_gemm(
    input: &Tensor,
    weights: &Tensor,
    topk_weights: &Option<Tensor>,
    sorted_token_ids: &Tensor,
    experts_ids: &Tensor,
    topk: usize,
) -> Result<Tensor> {
    const CHUNK_BYTES: usize = 256 << 20;
    let (x, pairs) = input_by_token(("moe_gemm", input, weights.dims()), topk_weights, topk)?;
    let (experts, n, k) = weights.dims3()?;
    let ids = experts_by_pair(sorted_token_ids, experts_ids, pairs, experts)?;
    // each pair's input row
    let rows = x
        .broadcast_as((x.dim(0)?, topk, k))?
        .contiguous()?
        .reshape((pairs, k))?;
    let per_pair = n * k * weights.dtype().size_in_bytes();
    let chunk = (CHUNK_BYTES / per_pair.max(1)).clamp(1, pairs.max(1));
    let mut parts = Vec::with_capacity(pairs.div_ceil(chunk));
    for start in (0..pairs).step_by(chunk) {
        let len = chunk.min(pairs - start);
        let w = weights.index_select(&ids.narrow(0, start, len)?, 0)?;
        let xr = rows.narrow(0, start, len)?.unsqueeze(1)?;
        parts.push(xr.matmul(&w.transpose(1, 2)?)?.squeeze(1)?);
    }
    scaled(Tensor::cat(&parts, 0)?, topk_weights, pairs)
}

/// GGUF experts `weights (experts, n, k)`: f32 input and output, as CUDA's. ROCm: the indexed
/// product of the quantized crate. CPU: each expert's pairs through Candle's CPU `QMatMul` of
/// that expert's blocks (the CPU's own quantized arithmetic).
pub fn moe_gemm_gguf(
    input: &Tensor,
    weights: &QTensor,
    topk_weights: &Option<Tensor>,
    sorted_token_ids: &Tensor,
    experts_ids: &Tensor,
    topk: usize,
) -> Result<Tensor> {
    let x = input.to_dtype(DType::F32)?;
    let experts_dims = weights.shape().dims();
    let (x, pairs) = input_by_token(("moe_gemm_gguf", &x, experts_dims), topk_weights, topk)?;
    let (experts, n, _) = weights.shape().dims3()?;
    let ids = experts_by_pair(sorted_token_ids, experts_ids, pairs, experts)?;
    let y = match input.device() {
        Device::Cpu => cpu_gguf(&x, weights, &ids, topk)?,
        d if d.is_rocm() => weights
            .indexed_moe_forward(&x, &ids.reshape((pairs / topk, topk))?)?
            .reshape((pairs, n))?,
        d => candle::bail!("moe_gemm_gguf: no kernel for {:?}", d.location()),
    };
    scaled(y, topk_weights, pairs)
}

/// The CPU form of [`moe_gemm_gguf`]: the pairs grouped by expert, each group one `QMatMul` of
/// that expert's (n, k) blocks.
fn cpu_gguf(x: &Tensor, weights: &QTensor, ids: &Tensor, topk: usize) -> Result<Tensor> {
    let (experts, n, k) = weights.shape().dims3()?;
    let (tokens, slots, _) = x.dims3()?;
    let ids = ids.to_vec1::<u32>()?;
    let pairs = ids.len();
    let bytes = weights.data()?;
    let expert_bytes = bytes.len() / experts;
    let rows = x.reshape((tokens * slots, k))?;
    let mut out = vec![0f32; pairs * n];
    for e in 0..experts {
        let mine: Vec<u32> = (0..pairs as u32)
            .filter(|&p| ids[p as usize] as usize == e)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let block = &bytes[e * expert_bytes..(e + 1) * expert_bytes];
        let storage = QStorage::from_data(
            std::borrow::Cow::Borrowed(block),
            &Device::Cpu,
            weights.dtype(),
        )?;
        let qmm = QMatMul::from_qtensor(QTensor::new(storage, (n, k))?)?;
        let at: Vec<u32> = mine
            .iter()
            .map(|&p| if slots == topk { p } else { p / topk as u32 })
            .collect();
        let xs = rows.index_select(&Tensor::new(at.as_slice(), &Device::Cpu)?, 0)?;
        let ys = qmm.forward(&xs)?.to_vec2::<f32>()?;
        for (&p, y) in mine.iter().zip(ys) {
            out[p as usize * n..(p as usize + 1) * n].copy_from_slice(&y);
        }
    }
    Tensor::from_vec(out, (pairs, n), &Device::Cpu)
}

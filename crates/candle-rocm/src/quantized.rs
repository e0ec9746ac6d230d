//! GGUF blocks held in a `RocmStorage` of bytes in rocm-quantized's device layout (made from
//! ggml's bytes on the way up by [`upload`], turned back by [`to_ggml_layout`]): dequantize,
//! embedding, `QMatMul`'s forward and the mixture-of-experts product on the device
//! (rocm-quantized), for Candle's `QRocmStorage`.

use rocm_device::{DType, Error, Layout, Result};
pub use rocm_quantized::{
    to_device_layout, to_ggml_layout, GgmlType, Q8Activations, Q8Scheme, MOE_ROUTER_MAX_EXPERTS,
};
use rocm_quantized::{QExperts, QWeights};

use crate::RocmStorage;

/// ggml's bytes of `ty` blocks as a storage of bytes in the device layout, permuted on their
/// way through the upload's staging buffers (the host does not wait for the copy).
pub fn upload(device: &crate::RocmDevice, ty: GgmlType, ggml: &[u8]) -> Result<RocmStorage> {
    let blocks = rocm_quantized::upload(device.raw(), ty, ggml)?;
    Ok(device.storage(blocks, DType::U8))
}

/// A (rows, k) matrix of `ty` blocks whose bytes, in the device layout, are `blocks`.
#[derive(Debug, Clone, Copy)]
pub struct QMatrix<'a> {
    pub blocks: &'a RocmStorage,
    pub ty: GgmlType,
    pub rows: usize,
    pub k: usize,
}

impl QMatrix<'_> {
    fn weights(&self) -> Result<QWeights<'_>> {
        if self.blocks.dtype() != DType::U8 {
            return Err(Error::UnsupportedDType {
                op: "quantized blocks",
                dtype: self.blocks.dtype(),
            });
        }
        Ok(QWeights {
            buffer: self.blocks.buffer(),
            ty: self.ty,
            rows: self.rows,
            k: self.k,
        })
    }

    /// This matrix as `experts` (n, k) matrices one after the other.
    fn experts(&self, experts: usize) -> Result<QExperts<'_>> {
        Ok(QExperts {
            weights: self.weights()?,
            experts,
        })
    }

    /// Every value as a new contiguous storage of `out` (f32, f16 or bf16).
    pub fn dequantize(&self, out: DType) -> Result<RocmStorage> {
        let device = self.blocks.device();
        let values = rocm_quantized::dequantize(device.raw(), self.weights()?, out)?;
        Ok(device.storage(values, out))
    }

    /// Rows `ids` (u32) of the table, in `out`; an id past the table is an error when the
    /// device's options check indices, else a zero row.
    pub fn embedding(&self, ids: &RocmStorage, ids_l: &Layout, out: DType) -> Result<RocmStorage> {
        let device = self.blocks.device();
        let check = device.options().index.check_indices;
        let values = rocm_quantized::embedding(
            device.raw(),
            self.weights()?,
            ids.operand(ids_l),
            (out, check),
        )?;
        Ok(device.storage(values, out))
    }

    /// `x . w^T` for x (.., k) of f32, f16 or bf16: a contiguous (.., rows) storage of x's
    /// dtype.
    pub fn forward(&self, x: &RocmStorage, x_l: &Layout) -> Result<RocmStorage> {
        let device = self.blocks.device();
        let blas = device.blas()?;
        let out = rocm_quantized::matmul(&blas, self.weights()?, x.operand(x_l))?;
        Ok(device.storage(out, x.dtype()))
    }

    /// `x . w^T` for activations already in q8 form (see [`rms_norm_q8`], [`swiglu_q8`]): a
    /// contiguous (x.rows, rows) storage of `out` (f32, f16 or bf16).
    pub fn forward_q8(&self, x: &Q8Activations, out: DType) -> Result<RocmStorage> {
        let device = self.blocks.device();
        let y = rocm_quantized::matmul_q8(device.raw(), self.weights()?, x, out)?;
        Ok(device.storage(y, out))
    }

    /// Candle's `indexed_moe_forward` with this matrix as `experts` (n, k) matrices (rows =
    /// experts * n): x (tokens, top or 1, k), u32 ids (tokens, top); a contiguous
    /// (tokens, top, n) storage of x's dtype. An expert id past the experts is an error when
    /// the device's options check indices, else a zero row.
    pub fn moe_forward(
        &self,
        experts: usize,
        (x, x_l): (&RocmStorage, &Layout),
        (ids, ids_l): (&RocmStorage, &Layout),
    ) -> Result<RocmStorage> {
        let device = self.blocks.device();
        let check = device.options().index.check_indices;
        let w = self.experts(experts)?;
        let out = rocm_quantized::moe_matvec(
            device.raw(),
            w,
            (x.operand(x_l), ids.operand(ids_l)),
            check,
        )?;
        Ok(device.storage(out, x.dtype()))
    }

    /// The experts' products for activations already in q8 form (`rocm_quantized::
    /// moe_matvec_q8`): with this matrix as `experts` (n, k) matrices, ids (tokens, top) u32,
    /// without `topw` a contiguous (tokens * top, n) storage of `out`, with `topw` (f32
    /// (tokens, top)) each token's weighted sum over its slots, (tokens, n). An expert id past
    /// the experts is an error when the device's options check indices, else a zero product.
    pub fn moe_forward_q8(
        &self,
        experts: usize,
        x: &Q8Activations,
        (ids, ids_l): (&RocmStorage, &Layout),
        topw: Option<(&RocmStorage, &Layout)>,
        out: DType,
    ) -> Result<RocmStorage> {
        let device = self.blocks.device();
        let check = device.options().index.check_indices;
        let w = self.experts(experts)?;
        let y = rocm_quantized::moe_matvec_q8(
            device.raw(),
            w,
            (x, ids.operand(ids_l)),
            topw.map(|(t, l)| t.operand(l)),
            (out, check),
        )?;
        Ok(device.storage(y, out))
    }
}

/// A mixture-of-experts router's choice from its logits (tokens, experts): the `top` most
/// probable experts of each token's softmax (u32) and their probabilities (f32, divided by their
/// sum where `renorm`), both (tokens, top) (`rocm_quantized::moe_topk`).
pub fn moe_topk(
    (logits, l): (&RocmStorage, &Layout),
    top: usize,
    renorm: bool,
) -> Result<(RocmStorage, RocmStorage)> {
    let device = logits.device();
    let (ids, weights) = rocm_quantized::moe_topk(device.raw(), logits.operand(l), top, renorm)?;
    Ok((
        device.storage(ids, DType::U32),
        device.storage(weights, DType::F32),
    ))
}

/// A decode step's router product and choice in one launch: `h` (tokens, hidden) times the
/// router's weights (experts, hidden) of its dtype, then [`moe_topk`]'s choice from those logits
/// (`rocm_quantized::moe_router_topk`).
pub fn moe_router_topk(
    (h, h_l): (&RocmStorage, &Layout),
    (router, router_l): (&RocmStorage, &Layout),
    top: usize,
    renorm: bool,
) -> Result<(RocmStorage, RocmStorage)> {
    let device = h.device();
    let (ids, weights) = rocm_quantized::moe_router_topk(
        device.raw(),
        h.operand(h_l),
        router.operand(router_l),
        top,
        renorm,
    )?;
    Ok((
        device.storage(ids, DType::U32),
        device.storage(weights, DType::F32),
    ))
}

/// What [`rms_norm_q8`] returns: `x + residual` (with a residual), the norm in q8 form, and
/// the norm in x's dtype (where asked for).
pub type NormQ8 = (Option<RocmStorage>, Q8Activations, Option<RocmStorage>);

/// candle-nn's `rms_norm` of `x` with `alpha`, or of `x + residual` (also returned), written in
/// q8 form for the integer mat-vec of weights whose activations are `scheme`, and with `float`
/// in x's dtype as well (`rocm_quantized::rms_norm_q8`).
pub fn rms_norm_q8(
    (x, x_l): (&RocmStorage, &Layout),
    residual: Option<(&RocmStorage, &Layout)>,
    (alpha, alpha_l): (&RocmStorage, &Layout),
    (eps, scheme): (f32, Q8Scheme),
    float: bool,
) -> Result<NormQ8> {
    let device = x.device();
    let out = rocm_quantized::rms_norm_q8(
        device.raw(),
        x.operand(x_l),
        residual.map(|(r, l)| r.operand(l)),
        alpha.operand(alpha_l),
        (eps, scheme),
        float,
    )?;
    let storage = |b| device.storage(b, x.dtype());
    Ok((out.sum.map(storage), out.q8, out.normed.map(storage)))
}

/// candle-nn's `silu(g) * u` of `gate_up` rows [g | u], written in q8 form for the integer
/// mat-vec of weights whose activations are `scheme` (`rocm_quantized::swiglu_q8`).
pub fn swiglu_q8((gate_up, l): (&RocmStorage, &Layout), scheme: Q8Scheme) -> Result<Q8Activations> {
    rocm_quantized::swiglu_q8(gate_up.device().raw(), gate_up.operand(l), scheme)
}

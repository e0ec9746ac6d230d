//! Quantized tensors on a ROCm device.
//!
//! In device memory the blocks are held in rocm-quantized's device layout (each block's packed
//! values 16-byte aligned, its scales apart), made from ggml's bytes on upload and turned back
//! into them, bit for bit, by `data()`. Quantizing runs on the host, as it does for CUDA, and the
//! blocks are uploaded once. Dequantize, embedding and the matmul run on the device
//! (candle-rocm's `quantized`, over rocm-quantized): nothing comes back to the host.

use candle_rocm as rocm;

use super::{GgmlDType, QStorage, QuantizedType};
use crate::backend::{BackendDevice, BackendStorage};
use crate::rocm_backend::{dtype_to_rocm, layout as rocm_layout, wrap};
use crate::{CpuStorage, DType, Layout, Result, RocmDevice, RocmStorage, Shape};

/// ggml blocks in device memory.
pub struct QRocmStorage {
    /// The blocks as bytes in the device layout (a u8 buffer).
    data: RocmStorage,
    len: usize,
    device: RocmDevice,
    dtype: GgmlDType,
}

fn byte_len(elem_count: usize, dtype: GgmlDType) -> usize {
    elem_count / dtype.block_size() * dtype.type_size()
}

impl QRocmStorage {
    pub fn zeros(device: &RocmDevice, elem_count: usize, dtype: GgmlDType) -> Result<Self> {
        let len = byte_len(elem_count, dtype);
        Ok(Self {
            data: device.zeros_impl(&Shape::from(len), DType::U8)?,
            len,
            device: device.clone(),
            dtype,
        })
    }

    fn from_bytes(device: &RocmDevice, bytes: &[u8], dtype: GgmlDType) -> Result<Self> {
        // the first tensor of a type starts its kernels' compile behind the rest of the load
        device.inner().prefetch_quantized(ggml_type(dtype));
        let blocks = rocm::quantized::upload(device.inner(), ggml_type(dtype), bytes);
        Ok(Self {
            data: device.wrap_storage(blocks.map_err(wrap)?),
            len: bytes.len(),
            device: device.clone(),
            dtype,
        })
    }

    pub fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    pub fn device(&self) -> &RocmDevice {
        &self.device
    }

    pub fn storage_size_in_bytes(&self) -> usize {
        self.len
    }

    /// Replaces the blocks with those of a host quantization of `xs`.
    fn upload(
        &mut self,
        xs_len: usize,
        quantize: impl FnOnce(&mut dyn QuantizedType),
    ) -> Result<()> {
        if byte_len(xs_len, self.dtype) != self.len {
            crate::bail!(
                "quantize: {xs_len} values do not fill a {:?} tensor of {} bytes",
                self.dtype,
                self.len
            )
        }
        let mut host = self.dtype.cpu_zeros(xs_len);
        quantize(host.as_mut());
        let host = QStorage::Cpu(host);
        *self = Self::from_bytes(&self.device, &host.data()?, self.dtype)?;
        Ok(())
    }

    pub fn quantize(&mut self, src: &RocmStorage) -> Result<()> {
        self.quantize_onto(&src.to_cpu_storage()?)
    }

    pub fn quantize_onto(&mut self, src: &CpuStorage) -> Result<()> {
        let xs = src.as_slice::<f32>()?;
        self.upload(xs.len(), |q| q.from_float(xs))
    }

    pub fn quantize_imatrix(
        &mut self,
        src: &RocmStorage,
        imatrix_weights: &[f32],
        n_per_row: usize,
    ) -> Result<()> {
        self.quantize_imatrix_onto(&src.to_cpu_storage()?, imatrix_weights, n_per_row)
    }

    pub fn quantize_imatrix_onto(
        &mut self,
        src: &CpuStorage,
        imatrix_weights: &[f32],
        n_per_row: usize,
    ) -> Result<()> {
        let xs = src.as_slice::<f32>()?;
        self.upload(xs.len(), |q| {
            q.from_float_imatrix(xs, imatrix_weights, n_per_row)
        })
    }

    /// The blocks, copied to the host in ggml's layout.
    pub fn data(&self) -> Result<Vec<u8>> {
        match self.data.to_cpu_storage()? {
            CpuStorage::U8(bytes) => {
                rocm::quantized::to_ggml_layout(ggml_type(self.dtype), &bytes).map_err(wrap)
            }
            other => crate::bail!("quantized rocm storage holds {:?}, not u8", other.dtype()),
        }
    }

    /// The blocks as candle-rocm's (rows, k) matrix view.
    fn matrix(&self, rows: usize, k: usize) -> rocm::quantized::QMatrix<'_> {
        rocm::quantized::QMatrix {
            blocks: self.data.inner(),
            ty: ggml_type(self.dtype),
            rows,
            k,
        }
    }

    /// The values as an f32 buffer on the device.
    pub fn dequantize(&self, elem_count: usize) -> Result<RocmStorage> {
        self.dequantize_as(elem_count, DType::F32)
    }

    fn dequantize_as(&self, elem_count: usize, dtype: DType) -> Result<RocmStorage> {
        let values = self
            .matrix(1, elem_count)
            .dequantize(dtype_to_rocm(dtype, "dequantize")?)
            .map_err(wrap)?;
        Ok(self.device.wrap_storage(values))
    }

    /// `x @ w^T` for this (n, k) weight, as `QMatMul` computes it on the CPU.
    pub fn fwd(
        &self,
        self_shape: &Shape,
        x: &RocmStorage,
        layout: &Layout,
    ) -> Result<(RocmStorage, Shape)> {
        let _host = rocm::host_time::span("candle-core: quantized fwd");
        let (n, k) = self_shape.dims2()?;
        let src_dims = layout.shape().dims();
        if src_dims.len() < 2 {
            crate::bail!("input tensor has only one dimension {layout:?}")
        }
        let mut dst_dims = src_dims.to_vec();
        dst_dims.pop();
        dst_dims.push(n);
        let out = self
            .matrix(n, k)
            .forward(x.inner(), &rocm_layout(layout))
            .map_err(wrap)?;
        Ok((self.device.wrap_storage(out), Shape::from(dst_dims)))
    }

    /// Rows `ids` of this (rows, hidden) table, in f32.
    pub fn embedding(
        &self,
        rows: usize,
        hidden: usize,
        ids: &RocmStorage,
        ids_l: &Layout,
    ) -> Result<RocmStorage> {
        let values = self
            .matrix(rows, hidden)
            .embedding(ids.inner(), &rocm_layout(ids_l), rocm::DType::F32)
            .map_err(wrap)?;
        Ok(self.device.wrap_storage(values))
    }
}

impl QRocmStorage {
    /// `indexed_moe_forward` for these (experts, n, k) weights: x (tokens, top or 1, k), u32 ids
    /// (tokens, top); the result is (tokens, top, n) in x's dtype.
    pub fn indexed_moe_forward(
        &self,
        self_shape: &Shape,
        (x, x_l): (&RocmStorage, &Layout),
        (ids, ids_l): (&RocmStorage, &Layout),
    ) -> Result<(RocmStorage, Shape)> {
        let (experts, n, k) = self_shape.dims3()?;
        let (tokens, _, _) = x_l.shape().dims3()?;
        let (_, top) = ids_l.shape().dims2()?;
        let out = self
            .matrix(experts * n, k)
            .moe_forward(
                experts,
                (x.inner(), &rocm_layout(x_l)),
                (ids.inner(), &rocm_layout(ids_l)),
            )
            .map_err(wrap)?;
        Ok((self.device.wrap_storage(out), Shape::from((tokens, top, n))))
    }
}

fn ggml_type(dtype: GgmlDType) -> rocm::quantized::GgmlType {
    match dtype {
        GgmlDType::F32 => rocm::quantized::GgmlType::F32,
        GgmlDType::F16 => rocm::quantized::GgmlType::F16,
        GgmlDType::BF16 => rocm::quantized::GgmlType::BF16,
        GgmlDType::Q4_0 => rocm::quantized::GgmlType::Q4_0,
        GgmlDType::Q4_1 => rocm::quantized::GgmlType::Q4_1,
        GgmlDType::Q5_0 => rocm::quantized::GgmlType::Q5_0,
        GgmlDType::Q5_1 => rocm::quantized::GgmlType::Q5_1,
        GgmlDType::Q8_0 => rocm::quantized::GgmlType::Q8_0,
        GgmlDType::Q8_1 => rocm::quantized::GgmlType::Q8_1,
        GgmlDType::Q2K => rocm::quantized::GgmlType::Q2K,
        GgmlDType::Q3K => rocm::quantized::GgmlType::Q3K,
        GgmlDType::Q4K => rocm::quantized::GgmlType::Q4K,
        GgmlDType::Q5K => rocm::quantized::GgmlType::Q5K,
        GgmlDType::Q6K => rocm::quantized::GgmlType::Q6K,
        GgmlDType::Q8K => rocm::quantized::GgmlType::Q8K,
    }
}

/// Quantized storage on `device` from the bytes of ggml blocks.
pub fn from_bytes(device: &RocmDevice, bytes: &[u8], dtype: GgmlDType) -> Result<QStorage> {
    Ok(QStorage::Rocm(QRocmStorage::from_bytes(
        device, bytes, dtype,
    )?))
}

/// Activations in q8 form on a ROCm device, as the integer mat-vec of quantized weights reads
/// them: what a decode step passes from a norm ([`rms_norm_q8`]) or its gated MLP
/// ([`swiglu_q8`]) to the next product ([`matmul_q8`]) without a float tensor and a quantizing
/// launch between. They are made for one weight type's activation form.
pub struct Q8Activations {
    inner: rocm::quantized::Q8Activations,
    /// The dims of the float activations they stand for.
    dims: Vec<usize>,
    dtype: DType,
    device: RocmDevice,
}

impl Q8Activations {
    /// The dims of the float activations they stand for.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }
}

/// The activation form of `weights`' block type, or an error naming `op`.
fn scheme_for(op: &str, weights: &super::QTensor) -> Result<rocm::quantized::Q8Scheme> {
    match ggml_type(weights.dtype()).q8_scheme() {
        Some(s) => Ok(s),
        None => crate::bail!("{op}: {:?} weights are not a block type", weights.dtype()),
    }
}

/// The ROCm storage of a tensor, or an error naming `op`.
fn rocm_storage<'a>(op: &str, s: &'a crate::Storage) -> Result<&'a RocmStorage> {
    match s {
        crate::Storage::Rocm(s) => Ok(s),
        _ => crate::bail!("{op}: the tensors are not on a ROCm device"),
    }
}

/// candle-nn's `rms_norm(x, alpha, eps)` written in q8 form for the integer mat-vec of
/// `weights` (one launch for the norm and the quantization). With a residual, `x + residual` is
/// normed instead and returned too (the residual stream's next value): a decoder layer's add
/// fused in as well. x is (.., k) of f32, f16 or bf16; alpha (k) of its dtype.
pub fn rms_norm_q8(
    x: &crate::Tensor,
    residual: Option<&crate::Tensor>,
    alpha: &crate::Tensor,
    eps: f32,
    weights: &super::QTensor,
) -> Result<(Option<crate::Tensor>, Q8Activations)> {
    let (sum, q8, _) = norm_q8(x, residual, alpha, eps, weights, false)?;
    Ok((sum, q8))
}

/// [`rms_norm_q8`] that also returns the norm itself (x's dtype and dims): the input of a float
/// product beside the quantized ones (a mixture of experts' router), from the same launch.
pub fn rms_norm_q8_and_float(
    x: &crate::Tensor,
    residual: Option<&crate::Tensor>,
    alpha: &crate::Tensor,
    eps: f32,
    weights: &super::QTensor,
) -> Result<(Option<crate::Tensor>, crate::Tensor, Q8Activations)> {
    let (sum, q8, normed) = norm_q8(x, residual, alpha, eps, weights, true)?;
    match normed {
        Some(normed) => Ok((sum, normed, q8)),
        None => crate::bail!("rms_norm_q8: no float norm was written"),
    }
}

type NormQ8 = (Option<crate::Tensor>, Q8Activations, Option<crate::Tensor>);

fn norm_q8(
    x: &crate::Tensor,
    residual: Option<&crate::Tensor>,
    alpha: &crate::Tensor,
    eps: f32,
    weights: &super::QTensor,
    float: bool,
) -> Result<NormQ8> {
    const OP: &str = "rms_norm_q8";
    let scheme = scheme_for(OP, weights)?;
    let (xs, xl) = x.storage_and_layout();
    let (als, all) = alpha.storage_and_layout();
    let rs = residual.map(|r| r.storage_and_layout());
    let xr = rocm_storage(OP, &xs)?;
    let residual = match &rs {
        Some((s, l)) => Some((rocm_storage(OP, s)?.inner(), rocm_layout(l))),
        None => None,
    };
    let (sum, q8, normed) = rocm::quantized::rms_norm_q8(
        (xr.inner(), &rocm_layout(xl)),
        residual.as_ref().map(|(s, l)| (*s, l)),
        (rocm_storage(OP, &als)?.inner(), &rocm_layout(all)),
        (eps, scheme),
        float,
    )
    .map_err(wrap)?;
    let device = xr.device().clone();
    let tensor = |s| {
        crate::tensor::from_storage(
            crate::Storage::Rocm(device.wrap_storage(s)),
            x.shape().clone(),
            crate::op::BackpropOp::none(),
            false,
        )
    };
    let (sum, normed) = (sum.map(tensor), normed.map(tensor));
    let q8 = Q8Activations {
        inner: q8,
        dims: x.dims().to_vec(),
        dtype: x.dtype(),
        device,
    };
    Ok((sum, q8, normed))
}

/// candle-nn's `silu(g) * u` for `gate_up` (.., 2w) holding [g | u] in each row, written in q8
/// form for the integer mat-vec of `weights` (one launch for the silu, the product and the
/// quantization).
pub fn swiglu_q8(gate_up: &crate::Tensor, weights: &super::QTensor) -> Result<Q8Activations> {
    const OP: &str = "swiglu_q8";
    let scheme = scheme_for(OP, weights)?;
    let (s, l) = gate_up.storage_and_layout();
    let s = rocm_storage(OP, &s)?;
    let inner = rocm::quantized::swiglu_q8((s.inner(), &rocm_layout(l)), scheme).map_err(wrap)?;
    let mut dims = gate_up.dims().to_vec();
    if let Some(last) = dims.last_mut() {
        *last /= 2;
    }
    Ok(Q8Activations {
        inner,
        dims,
        dtype: gate_up.dtype(),
        device: s.device().clone(),
    })
}

/// `x . weights^T` for activations already in q8 form: the (.., n) result in the dtype of the
/// float activations x stands for, as `QMatMul::forward` of those gives it (to the rounding of
/// the norm's sum of squares, see [`rms_norm_q8`]).
pub fn matmul_q8(weights: &super::QTensor, x: &Q8Activations) -> Result<crate::Tensor> {
    let super::QStorage::Rocm(w) = &weights.storage else {
        crate::bail!("matmul_q8: the weights are not on a ROCm device")
    };
    if !w.device().same_device(&x.device) {
        crate::bail!("matmul_q8: the weights and the activations are on different devices")
    }
    let (n, k) = weights.shape().dims2()?;
    let out = w
        .matrix(n, k)
        .forward_q8(&x.inner, dtype_to_rocm(x.dtype, "matmul_q8")?)
        .map_err(wrap)?;
    let mut dims = x.dims.clone();
    if let Some(last) = dims.last_mut() {
        *last = n;
    }
    Ok(crate::tensor::from_storage(
        crate::Storage::Rocm(w.device().wrap_storage(out)),
        dims,
        crate::op::BackpropOp::none(),
        false,
    ))
}

/// A mixture-of-experts router's choice from its logits (tokens, experts) of f32, f16 or bf16,
/// as candle-transformers' `FusedMoe` makes it in five ops, in one launch: the `top` most
/// probable experts of each token's softmax (u32, the lower expert first among equal
/// probabilities) and their probabilities (f32, divided by their sum where `renorm`), both
/// (tokens, top).
pub fn moe_topk(
    logits: &crate::Tensor,
    top: usize,
    renorm: bool,
) -> Result<(crate::Tensor, crate::Tensor)> {
    const OP: &str = "moe_topk";
    let (s, l) = logits.storage_and_layout();
    let s = rocm_storage(OP, &s)?;
    let (ids, weights) =
        rocm::quantized::moe_topk((s.inner(), &rocm_layout(l)), top, renorm).map_err(wrap)?;
    let tokens = logits.dims2()?.0;
    Ok(choice(s.device(), (tokens, top), ids, weights))
}

/// A router's choice as tensors: ids (u32) and weights (f32), both (tokens, top).
fn choice(
    device: &RocmDevice,
    dims: (usize, usize),
    ids: rocm::RocmStorage,
    weights: rocm::RocmStorage,
) -> (crate::Tensor, crate::Tensor) {
    let tensor = |storage| {
        crate::tensor::from_storage(
            crate::Storage::Rocm(device.wrap_storage(storage)),
            dims,
            crate::op::BackpropOp::none(),
            false,
        )
    };
    (tensor(ids), tensor(weights))
}

/// The most experts [`moe_router_topk`] picks among.
pub const MOE_ROUTER_MAX_EXPERTS: usize = rocm::quantized::MOE_ROUTER_MAX_EXPERTS;

/// A decode step's router and its choice in one launch: the logits `h . router^T` (h (tokens,
/// hidden), the router's weights (experts, hidden) of its dtype, at most
/// [`MOE_ROUTER_MAX_EXPERTS`] experts; the
/// logits rounded to that dtype as the product's output is), then [`moe_topk`]'s choice from
/// them: the ids (u32) and weights (f32), both (tokens, top). Made for a few tokens.
pub fn moe_router_topk(
    h: &crate::Tensor,
    router: &crate::Tensor,
    top: usize,
    renorm: bool,
) -> Result<(crate::Tensor, crate::Tensor)> {
    const OP: &str = "moe_router_topk";
    if !h.device().same_device(router.device()) {
        crate::bail!("{OP}: h and the router are on different devices")
    }
    let (hs, hl) = h.storage_and_layout();
    let (rs, rl) = router.storage_and_layout();
    let s = rocm_storage(OP, &hs)?;
    let (ids, weights) = rocm::quantized::moe_router_topk(
        (s.inner(), &rocm_layout(hl)),
        (rocm_storage(OP, &rs)?.inner(), &rocm_layout(rl)),
        top,
        renorm,
    )
    .map_err(wrap)?;
    let tokens = h.dims2()?.0;
    Ok(choice(s.device(), (tokens, top), ids, weights))
}

/// The quantized experts' products (`experts`: (experts, n, k) blocks) for activations already
/// in q8 form: x stands for a row per token (read by all its slots) or a row per (token, slot)
/// pair, ids (tokens, top) u32. Without `topw`, the pairs' products (tokens, top, n), as
/// `indexed_moe_forward` of the float rows gives them; with `topw` (f32 (tokens, top)), each
/// token's sum over its slots of the products scaled by their weights, (tokens, n): a decode
/// step's down projection, its scaling and its sum in one launch. In the dtype of the float
/// activations x stands for.
pub fn moe_matmul_q8(
    experts: &super::QTensor,
    x: &Q8Activations,
    ids: &crate::Tensor,
    topw: Option<&crate::Tensor>,
) -> Result<crate::Tensor> {
    const OP: &str = "moe_matmul_q8";
    let super::QStorage::Rocm(w) = &experts.storage else {
        crate::bail!("{OP}: the experts are not on a ROCm device")
    };
    if !w.device().same_device(&x.device) {
        crate::bail!("{OP}: the experts and the activations are on different devices")
    }
    let (count, n, k) = experts.shape().dims3()?;
    let (tokens, top) = ids.dims2()?;
    let (is, il) = ids.storage_and_layout();
    let ts = topw.map(|t| t.storage_and_layout());
    let topw = match &ts {
        Some((s, l)) => Some((rocm_storage(OP, s)?.inner(), rocm_layout(l))),
        None => None,
    };
    let out = w
        .matrix(count * n, k)
        .moe_forward_q8(
            count,
            &x.inner,
            (rocm_storage(OP, &is)?.inner(), &rocm_layout(il)),
            topw.as_ref().map(|(s, l)| (*s, l)),
            dtype_to_rocm(x.dtype, OP)?,
        )
        .map_err(wrap)?;
    let dims: Vec<usize> = if topw.is_some() {
        vec![tokens, n]
    } else {
        vec![tokens, top, n]
    };
    Ok(crate::tensor::from_storage(
        crate::Storage::Rocm(w.device().wrap_storage(out)),
        dims,
        crate::op::BackpropOp::none(),
        false,
    ))
}

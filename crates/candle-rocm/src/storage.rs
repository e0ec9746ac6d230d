//! `RocmStorage`: a device buffer with its dtype and device. Its inherent methods mirror
//! Candle 0.11.1's `BackendStorage` one for one (same names, arguments in the same order with
//! Candle-agnostic types) and add the fused ops candle-nn and candle-core's sort call.

use rocm_device::{Buffer, DType, Error, Layout, Operand, Result, Scalar};
use rocm_dnn::{Conv1dParams, Conv2dParams, ConvTranspose1dParams, ConvTranspose2dParams};
use rocm_elementwise::OperandCopy;
use rocm_elementwise::{BinaryOp, CmpOp, Copy2d, RopeVariant, UnaryOp};
use rocm_indexing::Bilinear;
use rocm_reduce::ReduceOp;

use crate::RocmDevice;

/// Which cache positions each query of [`RocmStorage::cached_attention`] sees: the positions
/// (u32, one per query, on the device) as a storage and its layout.
pub type CacheMask<'a> = rocm_attention::AttentionMask<(&'a RocmStorage, &'a Layout)>;

/// A buffer of `dtype` elements on a [`RocmDevice`]. Views (layouts) are passed per call, as
/// Candle does.
pub struct RocmStorage {
    buffer: Buffer,
    dtype: DType,
    device: RocmDevice,
}

impl std::fmt::Debug for RocmStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RocmStorage({}, {} elements, {:?})",
            self.dtype,
            self.len(),
            self.device
        )
    }
}

/// Per-head rms norms of q and k for [`RocmStorage::rope_kv_write`]: q's weights, k's weights
/// (each with its layout) and the epsilon.
pub type QkNorm<'a> = (
    (&'a RocmStorage, &'a Layout),
    (&'a RocmStorage, &'a Layout),
    f32,
);

impl RocmStorage {
    pub(crate) fn new(buffer: Buffer, dtype: DType, device: RocmDevice) -> Self {
        RocmStorage {
            buffer,
            dtype,
            device,
        }
    }

    pub fn buffer(&self) -> &Buffer {
        &self.buffer
    }

    /// Elements held.
    pub fn len(&self) -> usize {
        self.buffer.len() / self.dtype.size_in_bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn raw(&self) -> &rocm_device::Device {
        self.device.raw()
    }

    fn wrap(&self, buffer: Buffer, dtype: DType) -> Self {
        RocmStorage::new(buffer, dtype, self.device.clone())
    }

    /// This storage viewed through `layout`, as the op crates take it.
    pub fn operand<'a>(&'a self, layout: &'a Layout) -> Operand<'a> {
        Operand::new(&self.buffer, self.dtype, layout)
    }

    /// Errors unless every operand lives on this storage's device handle.
    fn same_device(&self, op: &'static str, others: &[&RocmStorage]) -> Result<()> {
        for o in others {
            if !self.device.same_device(&o.device) {
                return Err(Error::DeviceMismatch {
                    op,
                    left: format!("{:?}", self.device),
                    right: format!("{:?}", o.device),
                });
            }
        }
        Ok(())
    }

    /// Errors unless every operand has this storage's dtype (and device).
    fn same_dtype(&self, op: &'static str, others: &[&RocmStorage]) -> Result<()> {
        self.same_device(op, others)?;
        for o in others {
            if o.dtype != self.dtype {
                return Err(Error::DTypeMismatch {
                    op,
                    detail: format!("{} and {}", self.dtype, o.dtype),
                });
            }
        }
        Ok(())
    }

    // ---- BackendStorage -------------------------------------------------------------------

    /// A copy of the whole storage (Candle clones the storage, not the view).
    pub fn try_clone(&self, _layout: &Layout) -> Result<Self> {
        let buf = self.raw().alloc(self.buffer.len())?;
        self.raw()
            .copy_dtod(&self.buffer, 0, &buf, 0, self.buffer.len())?;
        Ok(self.wrap(buf, self.dtype))
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &RocmDevice {
        &self.device
    }

    /// `to_cpu_storage`: the whole storage as little-endian host bytes (f8e4m3 as bit
    /// patterns), after the work queued before it.
    pub fn to_host_bytes(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.buffer.len()];
        self.raw().copy_dtoh(&self.buffer, 0, &mut out)?;
        Ok(out)
    }

    pub fn affine(&self, layout: &Layout, mul: f64, add: f64) -> Result<Self> {
        let out = rocm_elementwise::affine(self.raw(), self.operand(layout), mul, add)?;
        Ok(self.wrap(out, self.dtype))
    }

    pub fn powf(&self, layout: &Layout, e: f64) -> Result<Self> {
        let out = rocm_elementwise::powf(self.raw(), self.operand(layout), e)?;
        Ok(self.wrap(out, self.dtype))
    }

    pub fn elu(&self, layout: &Layout, alpha: f64) -> Result<Self> {
        let out = rocm_elementwise::elu(self.raw(), self.operand(layout), alpha)?;
        Ok(self.wrap(out, self.dtype))
    }

    /// `reduce_op`: sum/min/max over `dims` (kept as size 1), argmin/argmax as u32.
    pub fn reduce_op(&self, op: ReduceOp, layout: &Layout, dims: &[usize]) -> Result<Self> {
        let out = rocm_reduce::reduce(self.raw(), op, self.operand(layout), dims)?;
        Ok(self.wrap(out, op.out_dtype(self.dtype)))
    }

    /// `cmp`: u8 results (1 or 0).
    pub fn cmp(&self, op: CmpOp, rhs: &Self, layout: &Layout, rhs_l: &Layout) -> Result<Self> {
        self.same_dtype("cmp", &[rhs])?;
        let out = rocm_elementwise::cmp(self.raw(), op, self.operand(layout), rhs.operand(rhs_l))?;
        Ok(self.wrap(out, DType::U8))
    }

    pub fn to_dtype(&self, layout: &Layout, dtype: DType) -> Result<Self> {
        let out = rocm_elementwise::cast(self.raw(), self.operand(layout), dtype)?;
        Ok(self.wrap(out, dtype))
    }

    /// `unary_impl`: the op Candle names (see [`unary_op_from_name`]).
    pub fn unary(&self, op: UnaryOp, layout: &Layout) -> Result<Self> {
        let out = rocm_elementwise::unary(self.raw(), op, self.operand(layout))?;
        Ok(self.wrap(out, self.dtype))
    }

    /// `binary_impl`.
    pub fn binary(
        &self,
        op: BinaryOp,
        rhs: &Self,
        layout: &Layout,
        rhs_l: &Layout,
    ) -> Result<Self> {
        self.same_dtype(op.name(), &[rhs])?;
        let out =
            rocm_elementwise::binary(self.raw(), op, self.operand(layout), rhs.operand(rhs_l))?;
        Ok(self.wrap(out, self.dtype))
    }

    /// `where_cond`: `self` is the condition.
    pub fn where_cond(
        &self,
        layout: &Layout,
        on_true: &Self,
        true_l: &Layout,
        on_false: &Self,
        false_l: &Layout,
    ) -> Result<Self> {
        self.same_device("where_cond", &[on_true, on_false])?;
        on_true.same_dtype("where_cond", &[on_false])?;
        let out = rocm_elementwise::where_cond(
            self.raw(),
            self.operand(layout),
            on_true.operand(true_l),
            on_false.operand(false_l),
        )?;
        Ok(self.wrap(out, on_true.dtype))
    }

    /// A convolution or pooling call on the device's DNN handle; `kernel` (if any) must
    /// match this storage's dtype and device.
    fn dnn_op(
        &self,
        op: &'static str,
        kernel: Option<&Self>,
        run: impl FnOnce(&rocm_dnn::Dnn) -> Result<Buffer>,
    ) -> Result<Self> {
        if let Some(k) = kernel {
            self.same_dtype(op, &[k])?;
        }
        let dnn = self.device.dnn()?;
        let out = run(&dnn)?;
        Ok(self.wrap(out, self.dtype))
    }

    pub fn conv1d(
        &self,
        layout: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &Conv1dParams,
    ) -> Result<Self> {
        self.dnn_op("conv1d", Some(kernel), |dnn| {
            dnn.conv1d(self.operand(layout), kernel.operand(kernel_l), params)
        })
    }

    pub fn conv_transpose1d(
        &self,
        layout: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ConvTranspose1dParams,
    ) -> Result<Self> {
        self.dnn_op("conv_transpose1d", Some(kernel), |dnn| {
            dnn.conv_transpose1d(self.operand(layout), kernel.operand(kernel_l), params)
        })
    }

    pub fn conv2d(
        &self,
        layout: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &Conv2dParams,
    ) -> Result<Self> {
        self.dnn_op("conv2d", Some(kernel), |dnn| {
            dnn.conv2d(self.operand(layout), kernel.operand(kernel_l), params)
        })
    }

    pub fn conv_transpose2d(
        &self,
        layout: &Layout,
        kernel: &Self,
        kernel_l: &Layout,
        params: &ConvTranspose2dParams,
    ) -> Result<Self> {
        self.dnn_op("conv_transpose2d", Some(kernel), |dnn| {
            dnn.conv_transpose2d(self.operand(layout), kernel.operand(kernel_l), params)
        })
    }

    pub fn avg_pool2d(
        &self,
        layout: &Layout,
        kernel: (usize, usize),
        stride: (usize, usize),
    ) -> Result<Self> {
        let p = rocm_dnn::Pool2dParams { kernel, stride };
        self.dnn_op("avg_pool2d", None, |dnn| {
            dnn.avg_pool2d(self.operand(layout), &p)
        })
    }

    pub fn max_pool2d(
        &self,
        layout: &Layout,
        kernel: (usize, usize),
        stride: (usize, usize),
    ) -> Result<Self> {
        let p = rocm_dnn::Pool2dParams { kernel, stride };
        self.dnn_op("max_pool2d", None, |dnn| {
            dnn.max_pool2d(self.operand(layout), &p)
        })
    }

    pub fn upsample_nearest1d(&self, layout: &Layout, w: usize) -> Result<Self> {
        let out = rocm_indexing::upsample_nearest1d(self.raw(), self.operand(layout), w)?;
        Ok(self.wrap(out, self.dtype))
    }

    pub fn upsample_nearest2d(&self, layout: &Layout, h: usize, w: usize) -> Result<Self> {
        let out = rocm_indexing::upsample_nearest2d(self.raw(), self.operand(layout), h, w)?;
        Ok(self.wrap(out, self.dtype))
    }

    pub fn upsample_bilinear2d(
        &self,
        layout: &Layout,
        h: usize,
        w: usize,
        align_corners: bool,
        scale_h: Option<f64>,
        scale_w: Option<f64>,
    ) -> Result<Self> {
        let p = Bilinear {
            h_out: h,
            w_out: w,
            align_corners,
            scale_factors: (scale_h, scale_w),
        };
        let out = rocm_indexing::upsample_bilinear2d(self.raw(), self.operand(layout), p)?;
        Ok(self.wrap(out, self.dtype))
    }

    pub fn gather(&self, layout: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> Result<Self> {
        self.same_device("gather", &[ids])?;
        let out = rocm_indexing::gather(
            self.raw(),
            self.operand(layout),
            ids.operand(ids_l),
            dim,
            &self.device.options().index,
        )?;
        Ok(self.wrap(out, self.dtype))
    }

    /// `scatter_set`: in place on `self` (viewed as `layout`).
    pub fn scatter_set(
        &mut self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        self.same_dtype("scatter", &[src])?;
        self.same_device("scatter", &[ids])?;
        let operands = (self.operand(layout), ids.operand(ids_l), src.operand(src_l));
        rocm_indexing::scatter_set(self.raw(), operands, dim, &self.device.options().index)
    }

    /// `scatter_add_set`: in place on `self` (viewed as `layout`).
    pub fn scatter_add_set(
        &mut self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<()> {
        self.same_dtype("scatter_add", &[src])?;
        self.same_device("scatter_add", &[ids])?;
        let operands = (self.operand(layout), ids.operand(ids_l), src.operand(src_l));
        rocm_indexing::scatter_add_set(self.raw(), operands, dim, &self.device.options().index)
    }

    /// `index_select`: `self` (viewed as `layout`) is the source.
    pub fn index_select(
        &self,
        ids: &Self,
        layout: &Layout,
        ids_l: &Layout,
        dim: usize,
    ) -> Result<Self> {
        self.same_device("index_select", &[ids])?;
        let out = rocm_indexing::index_select(
            self.raw(),
            self.operand(layout),
            ids.operand(ids_l),
            dim,
            &self.device.options().index,
        )?;
        Ok(self.wrap(out, self.dtype))
    }

    /// `index_add`: a contiguous copy of `self` (viewed as `layout`) with `src` added at `ids`.
    pub fn index_add(
        &self,
        layout: &Layout,
        ids: &Self,
        ids_l: &Layout,
        src: &Self,
        src_l: &Layout,
        dim: usize,
    ) -> Result<Self> {
        self.same_dtype("index_add", &[src])?;
        self.same_device("index_add", &[ids])?;
        let out = self.contiguous_copy(layout)?;
        let out_l = Layout::contiguous(&layout.dims);
        let operands = (out.operand(&out_l), ids.operand(ids_l), src.operand(src_l));
        rocm_indexing::index_add_set(self.raw(), operands, dim, &self.device.options().index)?;
        Ok(out)
    }

    /// `matmul` of (batch, m, k) by (batch, k, n), as Candle's `(b, m, n, k)` tuple.
    pub fn matmul(
        &self,
        rhs: &Self,
        (batch, m, n, k): (usize, usize, usize, usize),
        layout: &Layout,
        rhs_l: &Layout,
    ) -> Result<Self> {
        self.same_dtype("matmul", &[rhs])?;
        let shape = rocm_blas::MatmulShape { batch, m, n, k };
        let out = self
            .device
            .blas()?
            .matmul(self.operand(layout), rhs.operand(rhs_l), shape)?;
        Ok(self.wrap(out, self.dtype))
    }

    /// `copy_strided_src`: the view `src_l` of `self` into `dst` from element `dst_offset`.
    pub fn copy_strided_src(
        &self,
        dst: &mut Self,
        dst_offset: usize,
        src_l: &Layout,
    ) -> Result<()> {
        self.same_dtype("copy_strided", &[dst])?;
        self.operand(src_l).copy_to(&dst.buffer, dst_offset)
    }

    /// `copy2d`: Candle's `d1` rows of `d2` elements (`rows`, `cols` here).
    pub fn copy2d(&self, dst: &mut Self, block: &Copy2d) -> Result<()> {
        self.same_dtype("copy2d", &[dst])?;
        rocm_elementwise::copy2d(self.raw(), self.dtype, &self.buffer, &dst.buffer, block)
    }

    /// Candle's `cat` of contiguous blocks: every `(source, block)` pair copied into `self`,
    /// up to eight blocks of equal rows a launch (`copy2d` one by one costs a launch each).
    pub fn copy2d_many(&mut self, parts: &[(&Self, Copy2d)]) -> Result<()> {
        let sources: Vec<&Self> = parts.iter().map(|(s, _)| *s).collect();
        self.same_dtype("copy2d", &sources)?;
        let blocks: Vec<(&rocm_device::Buffer, Copy2d)> =
            parts.iter().map(|(s, c)| (&s.buffer, *c)).collect();
        rocm_elementwise::copy2d_many(self.raw(), self.dtype, &self.buffer, &blocks)
    }

    /// `const_set`: every element of the view `layout` of `self` set to `value`.
    pub fn const_set(&mut self, value: Scalar, layout: &Layout) -> Result<()> {
        rocm_elementwise::const_set(self.raw(), self.operand(layout), value)
    }

    // ---- beyond BackendStorage ------------------------------------------------------------

    /// The view `layout` of `self` as a new contiguous storage.
    pub fn contiguous_copy(&self, layout: &Layout) -> Result<Self> {
        let out = self
            .raw()
            .alloc(layout.elem_count() * self.dtype.size_in_bytes())?;
        self.operand(layout).copy_to(&out, 0)?;
        Ok(self.wrap(out, self.dtype))
    }

    /// The whole storage on another device (through the host when the handles differ).
    pub fn to_device(&self, dst: &RocmDevice) -> Result<Self> {
        if self.device.same_device(dst) {
            return self.try_clone(&Layout::contiguous(&[self.len()]));
        }
        dst.storage_from_bytes(self.dtype, &self.to_host_bytes()?)
    }

    /// candle-nn's `softmax_last_dim`.
    pub fn softmax_last_dim(&self, layout: &Layout) -> Result<Self> {
        let out = rocm_reduce::softmax_last_dim(self.raw(), self.operand(layout))?;
        Ok(self.wrap(out, self.dtype))
    }

    /// `softmax(q k^T * scale) v` of queries (`self`, `[batch, heads, queries, head_dim]`) over
    /// a key/value cache (`[batch, kv_heads, cache_len, head_dim]`) in one launch
    /// (`rocm_attention::cached_attention`).
    pub fn cached_attention(
        &self,
        q_l: &Layout,
        (k, k_l): (&Self, &Layout),
        (v, v_l): (&Self, &Layout),
        mask: CacheMask<'_>,
        scale: f32,
    ) -> Result<Self> {
        let mask = mask.map(|(p, l)| p.operand(l));
        let out = rocm_attention::cached_attention(
            self.raw(),
            self.operand(q_l),
            k.operand(k_l),
            v.operand(v_l),
            mask,
            scale,
        )?;
        Ok(self.wrap(out, self.dtype))
    }

    /// Forward attention over whole sequences without a (seq x seq) buffer
    /// (`rocm_attention::flash_attention`): `self` is q (`[batch, seq_q, heads, head_dim]`, or
    /// `[tokens, heads, head_dim]` with `varlen`), k and v of kv heads; a new contiguous
    /// storage of q's shape.
    pub fn flash_attention(
        &self,
        q_l: &Layout,
        (k, k_l): (&Self, &Layout),
        (v, v_l): (&Self, &Layout),
        args: &FlashArgs<'_>,
        varlen: Option<&FlashVarLen<'_>>,
    ) -> Result<Self> {
        const OP: &str = "flash_attention";
        let mut others = vec![k, v];
        others.extend(args.alibi.map(|(a, _)| a));
        if let Some(l) = varlen {
            others.extend([l.cu_q.0, l.cu_k.0]);
        }
        self.same_device(OP, &others)?;
        let options = rocm_attention::FlashOptions {
            scale: args.scale,
            causal: args.causal,
            window_left: args.window_left,
            window_right: args.window_right,
            softcap: args.softcap,
            alibi: args.alibi.map(|(a, l)| a.operand(l)),
        };
        let varlen = varlen.map(|l| rocm_attention::VarLen {
            cu_q: l.cu_q.0.operand(l.cu_q.1),
            cu_k: l.cu_k.0.operand(l.cu_k.1),
            max_q: l.max_q,
            max_k: l.max_k,
        });
        let out = rocm_attention::flash_attention(
            self.raw(),
            (self.operand(q_l), k.operand(k_l), v.operand(v_l)),
            &options,
            varlen.as_ref(),
        )?;
        Ok(self.wrap(out, self.dtype))
    }

    /// A decode step's rotary embedding and cache write in one launch
    /// (`rocm_attention::rope_kv_write`): `self` holds q, k and v heads of each token at
    /// `positions`; returns q roped (`[heads, t, head_dim]`, or `[t, heads, head_dim]` with a
    /// cache a token), writes k roped and v into the caches in place; with `qk_norm` (q's and
    /// k's norm weights and the epsilon) q's and k's heads are rms-normed first.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_kv_write(
        &self,
        layout: &Layout,
        (cos, cos_l): (&Self, &Layout),
        (sin, sin_l): (&Self, &Layout),
        (positions, positions_l): (&Self, &Layout),
        (k, k_l): (&Self, &Layout),
        (v, v_l): (&Self, &Layout),
        heads: usize,
        interleaved: bool,
        qk_norm: Option<QkNorm<'_>>,
    ) -> Result<Self> {
        self.same_device("rope_kv_write", &[cos, sin, positions, k, v])?;
        if let Some(((qn, _), (kn, _), _)) = qk_norm {
            self.same_device("rope_kv_write", &[qn, kn])?;
        }
        let out = rocm_attention::rope_kv_write(
            self.raw(),
            self.operand(layout),
            (cos.operand(cos_l), sin.operand(sin_l)),
            positions.operand(positions_l),
            rocm_attention::KvCache {
                k: k.operand(k_l),
                v: v.operand(v_l),
            },
            heads,
            interleaved,
            qk_norm.map(|((qn, qn_l), (kn, kn_l), eps)| rocm_attention::QkNorm {
                q: qn.operand(qn_l),
                k: kn.operand(kn_l),
                eps,
            }),
        )?;
        Ok(self.wrap(out, self.dtype))
    }

    /// log-softmax over the last dim.
    pub fn log_softmax_last_dim(&self, layout: &Layout) -> Result<Self> {
        let out = rocm_reduce::log_softmax_last_dim(self.raw(), self.operand(layout))?;
        Ok(self.wrap(out, self.dtype))
    }

    /// candle-nn's `rms_norm` over the last dim.
    pub fn rms_norm(
        &self,
        layout: &Layout,
        alpha: &Self,
        alpha_l: &Layout,
        eps: f32,
    ) -> Result<Self> {
        self.same_dtype("rms_norm", &[alpha])?;
        let out = rocm_reduce::rms_norm(
            self.raw(),
            self.operand(layout),
            alpha.operand(alpha_l),
            eps,
        )?;
        Ok(self.wrap(out, self.dtype))
    }

    /// `sum = self + residual` and candle-nn's `rms_norm(sum)` in one launch
    /// (`rocm_reduce::add_rms_norm`); returns `(sum, normed)`.
    pub fn add_rms_norm(
        &self,
        layout: &Layout,
        (residual, residual_l): (&Self, &Layout),
        (alpha, alpha_l): (&Self, &Layout),
        eps: f32,
    ) -> Result<(Self, Self)> {
        self.same_dtype("add_rms_norm", &[residual, alpha])?;
        let (sum, out) = rocm_reduce::add_rms_norm(
            self.raw(),
            self.operand(layout),
            residual.operand(residual_l),
            alpha.operand(alpha_l),
            eps,
        )?;
        Ok((self.wrap(sum, self.dtype), self.wrap(out, self.dtype)))
    }

    /// `silu(self) * up` elementwise in one launch (`rocm_elementwise::silu_mul`).
    pub fn silu_mul(&self, layout: &Layout, (up, up_l): (&Self, &Layout)) -> Result<Self> {
        self.same_dtype("silu_mul", &[up])?;
        let out = rocm_elementwise::silu_mul(self.raw(), self.operand(layout), up.operand(up_l))?;
        Ok(self.wrap(out, self.dtype))
    }

    /// candle-nn's `layer_norm` over the last dim (`beta` optional).
    pub fn layer_norm(
        &self,
        layout: &Layout,
        alpha: &Self,
        alpha_l: &Layout,
        beta: Option<(&Self, &Layout)>,
        eps: f32,
    ) -> Result<Self> {
        self.same_dtype("layer_norm", &[alpha])?;
        if let Some((b, _)) = beta {
            self.same_dtype("layer_norm", &[b])?;
        }
        let out = rocm_reduce::layer_norm(
            self.raw(),
            self.operand(layout),
            alpha.operand(alpha_l),
            beta.map(|(b, l)| b.operand(l)),
            eps,
        )?;
        Ok(self.wrap(out, self.dtype))
    }

    /// candle-nn's `rope_i` / `rope` / `rope_thd`.
    pub fn rope(
        &self,
        variant: RopeVariant,
        layout: &Layout,
        cos: &Self,
        cos_l: &Layout,
        sin: &Self,
        sin_l: &Layout,
    ) -> Result<Self> {
        self.same_dtype(variant.name(), &[cos, sin])?;
        let out = rocm_elementwise::rope(
            self.raw(),
            variant,
            self.operand(layout),
            cos.operand(cos_l),
            sin.operand(sin_l),
        )?;
        Ok(self.wrap(out, self.dtype))
    }

    /// candle-nn's `sigmoid`.
    pub fn sigmoid(&self, layout: &Layout) -> Result<Self> {
        self.unary(UnaryOp::Sigmoid, layout)
    }

    /// candle-core's `arg_sort_last_dim`: u32 positions, stable, NaN largest.
    pub fn arg_sort_last_dim(&self, layout: &Layout, ascending: bool) -> Result<Self> {
        let out = rocm_indexing::arg_sort_last_dim(self.raw(), self.operand(layout), ascending)?;
        Ok(self.wrap(out, DType::U32))
    }
}

/// The [`UnaryOp`] of Candle's `UnaryOpT::NAME` (and candle-nn's "sigmoid").
pub fn unary_op_from_name(name: &str) -> Option<UnaryOp> {
    UnaryOp::ALL.into_iter().find(|op| op.name() == name)
}

/// The [`BinaryOp`] of Candle's `BinaryOpT::NAME`.
pub fn binary_op_from_name(name: &str) -> Option<BinaryOp> {
    BinaryOp::ALL.into_iter().find(|op| op.name() == name)
}

/// What [`RocmStorage::flash_attention`] computes besides q, k and v: rocm-attention's
/// `FlashOptions` with the ALiBi slopes as a storage and its layout.
#[derive(Debug, Clone, Copy)]
pub struct FlashArgs<'a> {
    pub scale: f32,
    pub causal: bool,
    pub window_left: Option<usize>,
    pub window_right: Option<usize>,
    pub softcap: Option<f32>,
    pub alibi: Option<(&'a RocmStorage, &'a Layout)>,
}

/// Packed sequences of variable lengths for [`RocmStorage::flash_attention`] (rocm-attention's
/// `VarLen`, the cumulative lengths as storages and their layouts).
#[derive(Debug, Clone, Copy)]
pub struct FlashVarLen<'a> {
    pub cu_q: (&'a RocmStorage, &'a Layout),
    pub cu_k: (&'a RocmStorage, &'a Layout),
    pub max_q: usize,
    pub max_k: usize,
}

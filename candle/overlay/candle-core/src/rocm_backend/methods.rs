//! Candle's backend methods on ROCm, written once. `backend_methods!(emit)` hands the two
//! impls to the macro `emit`: the backend (`rocm_backend`) compiles them as written
//! (`as_written`); a build without the feature (`dummy_rocm_backend`) keeps each signature with
//! an unreachable body (`unreachable_bodies`), so the list cannot drift between the two. The
//! bodies name items of `rocm_backend` (conversions, `candle_rocm`); they resolve where the list
//! is compiled.
// Each build uses one of the two emitters.
#![allow(unused_macros, unused_imports)]

macro_rules! backend_methods {
    ($emit:ident) => {
        $emit! {
        impl BackendStorage for RocmStorage {
            type Device = RocmDevice;

            fn try_clone(&self, l: &Layout) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: try_clone");
                self.wrap(self.0.try_clone(&layout(l)))
            }

            fn dtype(&self) -> DType {
                dtype_from_rocm(self.0.dtype())
            }

            fn device(&self) -> &Self::Device {
                RocmDevice::wrap_ref(self.0.device())
            }

            fn to_cpu_storage(&self) -> Result<CpuStorage> {
                let _host = rocm::host_time::span("candle-core: to_cpu_storage");
                let bytes = self.0.to_host_bytes().map_err(wrap)?;
                Ok(bytes_to_cpu(self.0.dtype(), &bytes))
            }

            fn affine(&self, l: &Layout, mul: f64, add: f64) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: affine");
                self.wrap(self.0.affine(&layout(l), mul, add))
            }

            fn powf(&self, l: &Layout, e: f64) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: powf");
                self.wrap(self.0.powf(&layout(l), e))
            }

            fn elu(&self, l: &Layout, alpha: f64) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: elu");
                self.wrap(self.0.elu(&layout(l), alpha))
            }

            fn reduce_op(&self, op: ReduceOp, l: &Layout, dims: &[usize]) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: reduce_op");
                self.wrap(self.0.reduce_op(reduce_op(op), &layout(l), dims))
            }

            fn cmp(&self, op: CmpOp, rhs: &Self, l: &Layout, rl: &Layout) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: cmp");
                self.wrap(
                    self.0
                        .cmp(cmp_op(op), &rhs.0, &layout(l), &layout(rl)),
                )
            }

            fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: to_dtype");
                let to = dtype_to_rocm(dtype, "to_dtype")?;
                self.wrap(self.0.to_dtype(&layout(l), to))
            }

            fn unary_impl<B: UnaryOpT>(&self, l: &Layout) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: unary_impl");
                let op = rocm::unary_op_from_name(B::NAME)
                    .ok_or_else(|| crate::Error::Msg(format!("rocm: no unary op `{}`", B::NAME)).bt())?;
                self.wrap(self.0.unary(op, &layout(l)))
            }

            fn binary_impl<B: BinaryOpT>(&self, rhs: &Self, l: &Layout, rl: &Layout) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: binary_impl");
                let op = rocm::binary_op_from_name(B::NAME)
                    .ok_or_else(|| crate::Error::Msg(format!("rocm: no binary op `{}`", B::NAME)).bt())?;
                self.wrap(self.0.binary(op, &rhs.0, &layout(l), &layout(rl)))
            }

            fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: where_cond");
                let (l, tl, fl) = (layout(l), layout(tl), layout(fl));
                self.wrap(self.0.where_cond(&l, &t.0, &tl, &f.0, &fl))
            }

            fn conv1d(
                &self,
                l: &Layout,
                kernel: &Self,
                kl: &Layout,
                p: &crate::conv::ParamsConv1D,
            ) -> Result<Self> {
                let p = rocm::Conv1dParams {
                    b_size: p.b_size,
                    l_in: p.l_in,
                    c_out: p.c_out,
                    c_in: p.c_in,
                    k_size: p.k_size,
                    padding: p.padding,
                    stride: p.stride,
                    dilation: p.dilation,
                    groups: 1,
                };
                self.wrap(
                    self.0
                        .conv1d(&layout(l), &kernel.0, &layout(kl), &p),
                )
            }

            fn conv_transpose1d(
                &self,
                l: &Layout,
                kernel: &Self,
                kl: &Layout,
                p: &crate::conv::ParamsConvTranspose1D,
            ) -> Result<Self> {
                let p = rocm::ConvTranspose1dParams {
                    b_size: p.b_size,
                    l_in: p.l_in,
                    c_out: p.c_out,
                    c_in: p.c_in,
                    k_size: p.k_size,
                    padding: p.padding,
                    output_padding: p.output_padding,
                    stride: p.stride,
                    dilation: p.dilation,
                    groups: 1,
                };
                self.wrap(
                    self.0
                        .conv_transpose1d(&layout(l), &kernel.0, &layout(kl), &p),
                )
            }

            fn conv2d(
                &self,
                l: &Layout,
                kernel: &Self,
                kl: &Layout,
                p: &crate::conv::ParamsConv2D,
            ) -> Result<Self> {
                let p = rocm::Conv2dParams {
                    b_size: p.b_size,
                    i_h: p.i_h,
                    i_w: p.i_w,
                    k_h: p.k_h,
                    k_w: p.k_w,
                    c_out: p.c_out,
                    c_in: p.c_in,
                    padding: p.padding,
                    stride: p.stride,
                    dilation: p.dilation,
                    groups: 1,
                };
                self.wrap(
                    self.0
                        .conv2d(&layout(l), &kernel.0, &layout(kl), &p),
                )
            }

            fn conv_transpose2d(
                &self,
                l: &Layout,
                kernel: &Self,
                kl: &Layout,
                p: &crate::conv::ParamsConvTranspose2D,
            ) -> Result<Self> {
                let p = rocm::ConvTranspose2dParams {
                    b_size: p.b_size,
                    i_h: p.i_h,
                    i_w: p.i_w,
                    k_h: p.k_h,
                    k_w: p.k_w,
                    c_out: p.c_out,
                    c_in: p.c_in,
                    padding: p.padding,
                    output_padding: p.output_padding,
                    stride: p.stride,
                    dilation: p.dilation,
                    groups: 1,
                };
                self.wrap(
                    self.0
                        .conv_transpose2d(&layout(l), &kernel.0, &layout(kl), &p),
                )
            }

            fn avg_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<Self> {
                self.wrap(self.0.avg_pool2d(&layout(l), k, s))
            }

            fn max_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<Self> {
                self.wrap(self.0.max_pool2d(&layout(l), k, s))
            }

            fn upsample_nearest1d(&self, l: &Layout, w: usize) -> Result<Self> {
                self.wrap(self.0.upsample_nearest1d(&layout(l), w))
            }

            fn upsample_nearest2d(&self, l: &Layout, h: usize, w: usize) -> Result<Self> {
                self.wrap(self.0.upsample_nearest2d(&layout(l), h, w))
            }

            fn upsample_bilinear2d(
                &self,
                l: &Layout,
                h: usize,
                w: usize,
                align_corners: bool,
                scale_h: Option<f64>,
                scale_w: Option<f64>,
            ) -> Result<Self> {
                let l = layout(l);
                self.wrap(
                    self.0
                        .upsample_bilinear2d(&l, h, w, align_corners, scale_h, scale_w),
                )
            }

            fn gather(&self, l: &Layout, ids: &Self, ids_l: &Layout, dim: usize) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: gather");
                self.wrap(
                    self.0
                        .gather(&layout(l), &ids.0, &layout(ids_l), dim),
                )
            }

            fn scatter_set(
                &mut self,
                l: &Layout,
                ids: &Self,
                ids_l: &Layout,
                src: &Self,
                src_l: &Layout,
                dim: usize,
            ) -> Result<()> {
                let _host = rocm::host_time::span("candle-core: scatter_set");
                let (l, ids_l, src_l) = (layout(l), layout(ids_l), layout(src_l));
                self.0
                    .scatter_set(&l, &ids.0, &ids_l, &src.0, &src_l, dim)
                    .map_err(wrap)
            }

            fn scatter_add_set(
                &mut self,
                l: &Layout,
                ids: &Self,
                ids_l: &Layout,
                src: &Self,
                src_l: &Layout,
                dim: usize,
            ) -> Result<()> {
                let _host = rocm::host_time::span("candle-core: scatter_add_set");
                let (l, ids_l, src_l) = (layout(l), layout(ids_l), layout(src_l));
                self.0
                    .scatter_add_set(&l, &ids.0, &ids_l, &src.0, &src_l, dim)
                    .map_err(wrap)
            }

            fn index_select(&self, ids: &Self, l: &Layout, ids_l: &Layout, dim: usize) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: index_select");
                self.wrap(
                    self.0
                        .index_select(&ids.0, &layout(l), &layout(ids_l), dim),
                )
            }

            fn index_add(
                &self,
                l: &Layout,
                ids: &Self,
                ids_l: &Layout,
                src: &Self,
                src_l: &Layout,
                dim: usize,
            ) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: index_add");
                let (l, ids_l, src_l) = (layout(l), layout(ids_l), layout(src_l));
                self.wrap(
                    self.0
                        .index_add(&l, &ids.0, &ids_l, &src.0, &src_l, dim),
                )
            }

            fn matmul(
                &self,
                rhs: &Self,
                bmnk: (usize, usize, usize, usize),
                l: &Layout,
                rl: &Layout,
            ) -> Result<Self> {
                let _host = rocm::host_time::span("candle-core: matmul");
                self.wrap(self.0.matmul(&rhs.0, bmnk, &layout(l), &layout(rl)))
            }

            fn copy_strided_src(&self, dst: &mut Self, dst_offset: usize, src_l: &Layout) -> Result<()> {
                let _host = rocm::host_time::span("candle-core: copy_strided_src");
                self.0
                    .copy_strided_src(&mut dst.0, dst_offset, &layout(src_l))
                    .map_err(wrap)
            }

            fn copy2d(
                &self,
                dst: &mut Self,
                d1: usize,
                d2: usize,
                src_s: usize,
                dst_s: usize,
                src_o: usize,
                dst_o: usize,
            ) -> Result<()> {
                let _host = rocm::host_time::span("candle-core: copy2d");
                let block = rocm::Copy2d {
                    rows: d1,
                    cols: d2,
                    src_stride: src_s,
                    dst_stride: dst_s,
                    src_offset: src_o,
                    dst_offset: dst_o,
                };
                self.0.copy2d(&mut dst.0, &block).map_err(wrap)
            }

            fn const_set(&mut self, s: crate::scalar::Scalar, l: &Layout) -> Result<()> {
                let _host = rocm::host_time::span("candle-core: const_set");
                self.0.const_set(scalar(s), &layout(l)).map_err(wrap)
            }
        }

        impl BackendDevice for RocmDevice {
            type Storage = RocmStorage;

            fn new(ordinal: usize) -> Result<Self> {
                Ok(RocmDevice(rocm::RocmDevice::new(ordinal).map_err(wrap)?))
            }

            fn location(&self) -> crate::DeviceLocation {
                crate::DeviceLocation::Rocm {
                    gpu_id: self.0.ordinal(),
                }
            }

            fn same_device(&self, rhs: &Self) -> bool {
                self.0.same_device(&rhs.0)
            }

            fn zeros_impl(&self, shape: &Shape, dtype: DType) -> Result<Self::Storage> {
                let _host = rocm::host_time::span("candle-core: zeros_impl");
                let dt = dtype_to_rocm(dtype, "zeros")?;
                Ok(self.wrap_storage(self.0.zeros(shape.elem_count(), dt).map_err(wrap)?))
            }

            unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> Result<Self::Storage> {
                let _host = rocm::host_time::span("candle-core: alloc_uninit");
                let dt = dtype_to_rocm(dtype, "alloc_uninit")?;
                Ok(self.wrap_storage(self.0.alloc_uninit(shape.elem_count(), dt).map_err(wrap)?))
            }

            fn storage_from_slice<T: crate::WithDType>(&self, data: &[T]) -> Result<Self::Storage> {
                self.storage_from_cpu_storage(&T::to_cpu_storage(data))
            }

            fn storage_from_cpu_storage(&self, s: &CpuStorage) -> Result<Self::Storage> {
                Ok(self.wrap_storage(upload_cpu(&self.0, s)?))
            }

            fn storage_from_cpu_storage_owned(&self, s: CpuStorage) -> Result<Self::Storage> {
                self.storage_from_cpu_storage(&s)
            }

            fn rand_uniform(&self, shape: &Shape, dtype: DType, lo: f64, hi: f64) -> Result<Self::Storage> {
                let dt = dtype_to_rocm(dtype, "rand_uniform")?;
                let s = self.0.rand_uniform(shape.elem_count(), dt, lo, hi);
                Ok(self.wrap_storage(s.map_err(wrap)?))
            }

            fn rand_normal(
                &self,
                shape: &Shape,
                dtype: DType,
                mean: f64,
                std: f64,
            ) -> Result<Self::Storage> {
                let dt = dtype_to_rocm(dtype, "rand_normal")?;
                let s = self.0.rand_normal(shape.elem_count(), dt, mean, std);
                Ok(self.wrap_storage(s.map_err(wrap)?))
            }

            fn set_seed(&self, seed: u64) -> Result<()> {
                self.0.set_seed(seed).map_err(wrap)
            }

            fn get_current_seed(&self) -> Result<u64> {
                self.0.get_current_seed().map_err(wrap)
            }

            fn synchronize(&self) -> Result<()> {
                self.0.synchronize().map_err(wrap)
            }
        }
        }
    };
}
pub(crate) use backend_methods;

/// The list as written.
macro_rules! as_written {
    ($($item:item)*) => {
        $($item)*
    };
}
pub(crate) use as_written;

/// The list's signatures with bodies that cannot run: a value of either type cannot exist
/// without the feature (`new` fails). The receiver token comes from the list (`$s`), so the
/// body's `self` is the signature's.
macro_rules! unreachable_bodies {
    ($(impl $trait_:ident for $ty:ident { type $assoc:ident = $assoc_ty:ty; $($fns:tt)* })*) => {
        $(impl $trait_ for $ty {
            type $assoc = $assoc_ty;
            unreachable_bodies!(@fns $($fns)*);
        })*
    };
    (@fns) => {};
    (@fns fn new($($arg:ident: $t:ty),*) -> $r:ty $body:block $($rest:tt)*) => {
        fn new($(_: $t),*) -> $r {
            Err(Error::NotCompiledWithRocmSupport)
        }
        unreachable_bodies!(@fns $($rest)*);
    };
    (@fns fn $name:ident$(<$g:ident: $bound:path>)?(&mut $s:ident $(, $arg:ident: $t:ty)* $(,)?) -> $r:ty $body:block $($rest:tt)*) => {
        fn $name$(<$g: $bound>)?(&mut $s $(, _: $t)*) -> $r {
            match $s.0 {}
        }
        unreachable_bodies!(@fns $($rest)*);
    };
    (@fns fn $name:ident$(<$g:ident: $bound:path>)?(&$s:ident $(, $arg:ident: $t:ty)* $(,)?) -> $r:ty $body:block $($rest:tt)*) => {
        fn $name$(<$g: $bound>)?(&$s $(, _: $t)*) -> $r {
            match $s.0 {}
        }
        unreachable_bodies!(@fns $($rest)*);
    };
    (@fns unsafe fn $name:ident(&$s:ident $(, $arg:ident: $t:ty)* $(,)?) -> $r:ty $body:block $($rest:tt)*) => {
        unsafe fn $name(&$s $(, _: $t)*) -> $r {
            match $s.0 {}
        }
        unreachable_bodies!(@fns $($rest)*);
    };
}
pub(crate) use unreachable_bodies;

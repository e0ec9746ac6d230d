// upsample.hip: nearest (1-D and 2-D) and bilinear 2-D upsampling of (b, c, [h,] w) tensors of
// any layout into a contiguous output, with the source positions of Candle's CPU backend.
// `outer` is the layout of the (b, c) dims with the input's start offset; the spatial dims
// come with their own strides.

// Nearest: source index min(n_in - 1, floor(o * scale)), scale = n_in / n_out in f64.
DEVICE u64 nearest_source(u64 o, double scale, u64 n_in) {
    const u64 s = (u64)((double)o * scale);
    return s < n_in - 1 ? s : n_in - 1;
}

template <typename R>
DEVICE void nearest1d_impl(const R* src, R* out, u64 n, const KernelLayout& outer, u64 stride_w,
                           u64 w_in, u64 w_out, double scale_w) {
    for (u64 o = grid_tid(); o < n; o += grid_threads()) {
        const u64 x = o % w_out, bc = o / w_out;
        out[o] = src[layout_offset(outer, bc) + nearest_source(x, scale_w, w_in) * stride_w];
    }
}

template <typename R>
DEVICE void nearest2d_impl(const R* src, R* out, u64 n, const KernelLayout& outer, u64 stride_h,
                           u64 stride_w, u64 h_in, u64 w_in, u64 h_out, u64 w_out, double scale_h,
                           double scale_w) {
    for (u64 o = grid_tid(); o < n; o += grid_threads()) {
        const u64 x = o % w_out, y = (o / w_out) % h_out, bc = o / (w_out * h_out);
        out[o] = src[layout_offset(outer, bc) + nearest_source(y, scale_h, h_in) * stride_h +
                     nearest_source(x, scale_w, w_in) * stride_w];
    }
}

// Bilinear source taps of output position o: (i0, i1, weight of i1). Products and sums are
// rounded one by one (compat.h's m_*_rn), as the CPU's f64 code (a fused multiply-add would
// differ in the last bit).
struct Taps { u64 i0, i1; double w; };
DEVICE Taps bilinear_taps(u64 o, double scale, u32 align_corners, u64 n_in) {
    const double s = align_corners ? m_mul_rn(scale, (double)o)
                                   : m_sub_rn(m_mul_rn(scale, m_add_rn((double)o, 0.5)), 0.5);
    const double c = s > 0.0 ? s : 0.0;
    Taps t;
    t.i0 = (u64)floor(c);
    if (t.i0 > n_in - 1) t.i0 = n_in - 1;  // never read past the row (the CPU would panic)
    t.i1 = t.i0 + 1 < n_in ? t.i0 + 1 : n_in - 1;
    const double w = m_sub_rn(c, (double)t.i0);
    t.w = w < 0.0 ? 0.0 : (w > 1.0 ? 1.0 : w);
    return t;
}

DEVICE double lerp_rn(double a, double b, double w) {
    return m_add_rn(m_mul_rn(a, m_sub_rn(1.0, w)), m_mul_rn(b, w));
}

template <typename T>
DEVICE void bilinear2d_impl(const T* src, T* out, u64 n, const KernelLayout& outer, u64 stride_h,
                            u64 stride_w, u64 h_in, u64 w_in, u64 h_out, u64 w_out, double scale_h,
                            double scale_w, u32 align_corners) {
    for (u64 o = grid_tid(); o < n; o += grid_threads()) {
        const u64 x = o % w_out, y = (o / w_out) % h_out, bc = o / (w_out * h_out);
        const Taps ty = bilinear_taps(y, scale_h, align_corners, h_in);
        const Taps tx = bilinear_taps(x, scale_w, align_corners, w_in);
        const T* base = src + layout_offset(outer, bc);
        const double v00 = cvt<double>(base[ty.i0 * stride_h + tx.i0 * stride_w]);
        const double v10 = cvt<double>(base[ty.i0 * stride_h + tx.i1 * stride_w]);
        const double v01 = cvt<double>(base[ty.i1 * stride_h + tx.i0 * stride_w]);
        const double v11 = cvt<double>(base[ty.i1 * stride_h + tx.i1 * stride_w]);
        const double top = lerp_rn(v00, v10, tx.w), bottom = lerp_rn(v01, v11, tx.w);
        out[o] = cvt<T>(lerp_rn(top, bottom, ty.w));
    }
}

// UPSAMPLE_PARAMS(T): the one parameter list of every entry, declared in rocm-kernels
// (`upsample::Params`).
#define NEAREST_KERNELS(W, R)                                                                      \
    KERNEL void upsample_nearest1d_##W(UPSAMPLE_PARAMS(R)) {                                       \
        nearest1d_impl(src, out, n, outer, stride_w, w_in, w_out, scale_w);                         \
    }                                                                                               \
    KERNEL void upsample_nearest2d_##W(UPSAMPLE_PARAMS(R)) {                                       \
        nearest2d_impl(src, out, n, outer, stride_h, stride_w, h_in, w_in, h_out, w_out, scale_h,   \
                       scale_w);                                                                    \
    }
#define BILINEAR_KERNEL(NAME, T)                                                                   \
    KERNEL void upsample_bilinear2d_##NAME(UPSAMPLE_PARAMS(T)) {                                   \
        bilinear2d_impl(src, out, n, outer, stride_h, stride_w, h_in, w_in, h_out, w_out, scale_h,  \
                        scale_w, align_corners);                                                    \
    }

CANDLE_ROCM_FOR_EACH_WIDTH(NEAREST_KERNELS)
CANDLE_ROCM_FOR_EACH_DTYPE(BILINEAR_KERNEL)

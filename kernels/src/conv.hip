// conv.hip: the portable convolution path (im2col before a gemm, col2im after one) and 2-D
// pooling, for (b, c, h, w) tensors; 1-D convolutions come in as h = 1.
//
// One geometry serves a convolution and its transpose: the "image" side is (c, h, w) and the
// "column" side has one column per output position (oh, ow) of the forward convolution and one
// row per (channel, ky, kx). im2col reads the image into columns; col2im is its adjoint and
// sums the columns back into the image, as a gather (each image element reads the few columns
// that touch it: no atomics, deterministic).

// Mirrors rocm_kernels::conv::ConvGeometry (repr(C)): strides and start of the image side in elements.
struct ConvGeometry {
    u64 start, stride_b, stride_c, stride_h, stride_w;
    u32 c, h, w;
    u32 kh, kw;
    u32 oh, ow;
    u32 step_h, step_w;  // convolution stride
    u32 pad_h, pad_w;
    u32 dil_h, dil_w;
    u32 fits_u32;  // every index and offset of the launch fits in 31 bits
};

// Index math in I (u32 where the host says every index and offset of the launch fits in 31
// bits: several times cheaper than 64-bit on both vendors) and its signed partner.
template <typename I> struct SignedOf;
template <> struct SignedOf<u32> { typedef i32 type; };
template <> struct SignedOf<u64> { typedef i64 type; };

// im2col: col[b][(ci, ky, kx)][(oy, ox)] for batches b0.. of the image, zero where the window
// hangs over the padding. One thread per (b, ci, oy, ox) writes its kh * kw column entries:
// consecutive threads write consecutive ox (coalesced), and the index is decoded once per
// kh * kw entries instead of once per entry.
template <typename I, typename R>
DEVICE void im2col_impl(const R* x, R* col, I n, I b0, const ConvGeometry& g) {
    typedef typename SignedOf<I>::type S;
    const I L = (I)g.oh * g.ow, taps = (I)g.kh * g.kw;
    const I sh = (I)g.stride_h, sw = (I)g.stride_w;
    for (I t = (I)grid_tid(); t < n; t += (I)grid_threads()) {
        const I l = t % L, bc = t / L;  // bc: local batch entry * c + channel
        const I ci = bc % g.c, b = bc / g.c + b0;
        const I ox = l % g.ow, oy = l / g.ow;
        const R* src = x + (I)g.start + b * (I)g.stride_b + ci * (I)g.stride_c;
        R* dst = col + bc * taps * L + l;
        // Signed: the window starts up to `pad` before the image.
        const S iy0 = (S)(oy * g.step_h) - (S)g.pad_h, ix0 = (S)(ox * g.step_w) - (S)g.pad_w;
        for (u32 ky = 0; ky < g.kh; ++ky) {
            const S iy = iy0 + (S)(ky * g.dil_h);
            const bool row_in = iy >= 0 && iy < (S)g.h;
            for (u32 kx = 0; kx < g.kw; ++kx) {
                const S ix = ix0 + (S)(kx * g.dil_w);
                R v{};  // all-zero bits: +0 of every dtype
                if (row_in && ix >= 0 && ix < (S)g.w) v = src[(I)iy * sh + (I)ix * sw];
                dst[(ky * g.kw + kx) * L] = v;
            }
        }
    }
}

// col2im: image[b][c][y][x] (contiguous, batches b0..) = the sum of every column entry whose
// window position lands on (y, x): column position oy reaches y through tap ky when
// y + pad - ky * dil = oy * step. Taps are visited in ascending (ky, kx) order on both paths.
template <typename I, typename T>
DEVICE void col2im_impl(const T* col, T* image, I n, I b0, const ConvGeometry& g) {
    typedef typename Acc<T>::type A;
    typedef typename SignedOf<I>::type S;
    const I L = (I)g.oh * g.ow, taps = (I)g.kh * g.kw;
    for (I o = (I)grid_tid(); o < n; o += (I)grid_threads()) {
        const I x = o % g.w, t = o / g.w;
        const I y = t % g.h, bc = t / g.h;  // bc: local batch entry * c + channel
        const T* rows = col + bc * taps * L;
        const S py = (S)(y + g.pad_h), px = (S)(x + g.pad_w);
        A sum = A(0);
        if (g.dil_h == 1 && g.dil_w == 1) {
            // Undilated: the taps that land here are ky0, ky0 + step, ... with column
            // positions oy0, oy0 - 1, ...: one division per axis.
            const u32 ky0 = (u32)(py % (S)g.step_h), kx0 = (u32)(px % (S)g.step_w);
            const S oy0 = py / (S)g.step_h, ox0 = px / (S)g.step_w;
            S oy = oy0;
            for (u32 ky = ky0; ky < g.kh && oy >= 0; ky += g.step_h, --oy) {
                if (oy >= (S)g.oh) continue;
                S ox = ox0;
                for (u32 kx = kx0; kx < g.kw && ox >= 0; kx += g.step_w, --ox) {
                    if (ox >= (S)g.ow) continue;
                    sum += cvt<A>(rows[(I)(ky * g.kw + kx) * L + (I)oy * g.ow + (I)ox]);
                }
            }
        } else {
            for (u32 ky = 0; ky < g.kh; ++ky) {
                const S ty = py - (S)(ky * g.dil_h);
                if (ty < 0 || ty % (S)g.step_h != 0 || ty / (S)g.step_h >= (S)g.oh) continue;
                const I oy = (I)(ty / (S)g.step_h);
                for (u32 kx = 0; kx < g.kw; ++kx) {
                    const S tx = px - (S)(kx * g.dil_w);
                    if (tx < 0 || tx % (S)g.step_w != 0 || tx / (S)g.step_w >= (S)g.ow) continue;
                    const I ox = (I)(tx / (S)g.step_w);
                    sum += cvt<A>(rows[(I)(ky * g.kw + kx) * L + oy * g.ow + ox]);
                }
            }
        }
        image[b0 * g.c * g.h * g.w + o] = cvt<T>(sum);
    }
}

// Pooling windows (no padding, as Candle's pool ops) over an image of any layout into a
// contiguous (b, c, oh, ow) output, computed as Candle's CPU backend does: max keeps the first
// element unless a later one compares greater (a NaN is kept only when it comes first); avg
// adds in T, rounding at each step, then multiplies by 1 / (kh * kw) rounded to T.
template <typename I, typename T>
DEVICE void pool2d_impl(const T* x, T* out, I n, const ConvGeometry& g, bool is_max) {
    typedef typename Acc<T>::type A;
    const T scale = cvt<T>(1.0 / ((double)g.kh * g.kw));
    const I sh = (I)g.stride_h, sw = (I)g.stride_w;
    for (I o = (I)grid_tid(); o < n; o += (I)grid_threads()) {
        const I ox = o % g.ow, t = o / g.ow;
        const I oy = t % g.oh, t2 = t / g.oh;
        const I c = t2 % g.c, b = t2 / g.c;
        const T* win = x + (I)g.start + b * (I)g.stride_b + c * (I)g.stride_c +
                       oy * g.step_h * sh + ox * g.step_w * sw;
        T acc = is_max ? win[0] : cvt<T>(A(0));
        for (u32 ky = 0; ky < g.kh; ++ky) {
            for (u32 kx = 0; kx < g.kw; ++kx) {
                const T v = win[(I)ky * sh + (I)kx * sw];
                if (is_max) {
                    if (cvt<A>(acc) < cvt<A>(v)) acc = v;
                } else {
                    acc = cvt<T>(cvt<A>(acc) + cvt<A>(v));
                }
            }
        }
        out[o] = is_max ? acc : cvt<T>(cvt<A>(acc) * cvt<A>(scale));
    }
}

// A tensor's start and four strides, in elements (mirrors rocm_kernels::conv::Strides4).
struct Strides4 { u64 start, s0, s1, s2, s3; };

// The sum of a direct transposed convolution: integers in wrapping arithmetic as Candle's CPU
// backend (the order of a wrapping sum does not change it), floats in their accumulator type.
template <typename T> struct DirectSum {
    typedef typename Wide<T>::type W;
    DEVICE static W of(T v) { return (W)v; }
    DEVICE static T out(W s) { return (T)s; }
};
#define DIRECT_SUM_FLOAT(T)                                         \
    template <> struct DirectSum<T> {                               \
        typedef Acc<T>::type W;                                     \
        DEVICE static W of(T v) { return cvt<W>(v); }               \
        DEVICE static T out(W s) { return cvt<T>(s); }              \
    };
DIRECT_SUM_FLOAT(bf16_t)
DIRECT_SUM_FLOAT(f16_t)
DIRECT_SUM_FLOAT(float)
DIRECT_SUM_FLOAT(double)

// Transposed convolution, directly: integers (the BLAS has no integer gemm) and small floats
// (one launch instead of a gemm and a col2im). Each output element (b, co, y, x) of the
// contiguous image sums x[b, ci, iy, ix] * w[ci, co % cout_g, ky, kx] over its group's input
// channels and the taps that land on (y, x).
template <typename I, typename T>
DEVICE void conv_transpose_direct_impl(const T* x, const T* w, T* out, I n, const ConvGeometry& g,
                                       Strides4 xs, Strides4 ws, u32 c_in, u32 groups) {
    typedef DirectSum<T> Sum;
    typedef typename Sum::W W;
    typedef typename SignedOf<I>::type S;
    const u32 cout_g = g.c / groups, cin_g = c_in / groups;
    for (I o = (I)grid_tid(); o < n; o += (I)grid_threads()) {
        const I px_ = o % g.w, t = o / g.w;
        const I y = t % g.h, t2 = t / g.h;
        const u32 co = (u32)(t2 % g.c);
        const I b = t2 / g.c;
        const u32 grp = co / cout_g, j = co % cout_g;
        const S py = (S)(y + g.pad_h), px = (S)(px_ + g.pad_w);
        W sum = 0;
        for (u32 ky = 0; ky < g.kh; ++ky) {
            const S ty = py - (S)(ky * g.dil_h);
            if (ty < 0 || ty % (S)g.step_h != 0 || ty / (S)g.step_h >= (S)g.oh) continue;
            const u64 iy = (u64)(ty / (S)g.step_h);
            for (u32 kx = 0; kx < g.kw; ++kx) {
                const S tx = px - (S)(kx * g.dil_w);
                if (tx < 0 || tx % (S)g.step_w != 0 || tx / (S)g.step_w >= (S)g.ow) continue;
                const u64 ix = (u64)(tx / (S)g.step_w);
                for (u32 c = 0; c < cin_g; ++c) {
                    const u64 ci = (u64)grp * cin_g + c;
                    const T xv = x[xs.start + (u64)b * xs.s0 + ci * xs.s1 + iy * xs.s2 + ix * xs.s3];
                    const T wv = w[ws.start + ci * ws.s0 + (u64)j * ws.s1 + (u64)ky * ws.s2 +
                                   (u64)kx * ws.s3];
                    sum += Sum::of(xv) * Sum::of(wv);
                }
            }
        }
        out[o] = Sum::out(sum);
    }
}

#define IM2COL_KERNEL(W, R)                                                                        \
    KERNEL void conv_im2col_##W(IM2COL_PARAMS(R)) {                                                \
        if (g.fits_u32) im2col_impl<u32, R>(x, col, (u32)n, (u32)b0, g);                           \
        else im2col_impl<u64, R>(x, col, n, b0, g);                                                 \
    }
#define COL2IM_KERNEL(NAME, T)                                                                     \
    KERNEL void conv_col2im_##NAME(COL2IM_PARAMS(T)) {                                             \
        if (g.fits_u32) col2im_impl<u32, T>(col, image, (u32)n, (u32)b0, g);                        \
        else col2im_impl<u64, T>(col, image, n, b0, g);                                             \
    }
#define POOL_KERNELS(NAME, T)                                                                      \
    KERNEL void pool_max2d_##NAME(POOL_PARAMS(T)) {                                                 \
        if (g.fits_u32) pool2d_impl<u32, T>(x, out, (u32)n, g, true);                               \
        else pool2d_impl<u64, T>(x, out, n, g, true);                                               \
    }                                                                                               \
    KERNEL void pool_avg2d_##NAME(POOL_PARAMS(T)) {                                                 \
        if (g.fits_u32) pool2d_impl<u32, T>(x, out, (u32)n, g, false);                              \
        else pool2d_impl<u64, T>(x, out, n, g, false);                                              \
    }

#define CONV_TRANSPOSE_DIRECT_KERNEL(NAME, T)                                                      \
    KERNEL void conv_transpose_direct_##NAME(CONV_TRANSPOSE_DIRECT_PARAMS(T)) {                   \
        if (g.fits_u32) conv_transpose_direct_impl<u32, T>(x, w, out, (u32)n, g, xs, ws, c_in, groups); \
        else conv_transpose_direct_impl<u64, T>(x, w, out, n, g, xs, ws, c_in, groups);             \
    }

CANDLE_ROCM_FOR_EACH_WIDTH(IM2COL_KERNEL)
CANDLE_ROCM_FOR_EACH_INT(CONV_TRANSPOSE_DIRECT_KERNEL)
CANDLE_ROCM_KEEP(bf16)(CONV_TRANSPOSE_DIRECT_KERNEL(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(CONV_TRANSPOSE_DIRECT_KERNEL(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(CONV_TRANSPOSE_DIRECT_KERNEL(f32, float))
CANDLE_ROCM_KEEP(f64)(CONV_TRANSPOSE_DIRECT_KERNEL(f64, double))
CANDLE_ROCM_FOR_EACH_FLOAT(COL2IM_KERNEL)
CANDLE_ROCM_FOR_EACH_DTYPE(POOL_KERNELS)

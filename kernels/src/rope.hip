// rope.hip: candle-nn's rotary embeddings on contiguous tensors, computed in Acc<T>.
// x is (b, h, t, d) for rope_i / rope and (b, t, h, d) for rope_thd; cos and sin hold d/2
// values per position, either one table (t, d/2) shared by the batch (cs_batch_stride = 0) or
// one per batch entry (cs_batch_stride = the table stride the CPU backend uses, t * d / 2).
// One thread per rotated pair, or per group of neighbouring pairs where alignment allows.

template <typename T>
DEVICE void rotate(const T* x, T* out, u64 i1, u64 i2, T c, T s) {
    typedef typename Acc<T>::type A;
    const A x1 = cvt<A>(x[i1]), x2 = cvt<A>(x[i2]);
    const A cc = cvt<A>(c), ss = cvt<A>(s);
    out[i1] = cvt<T>(x1 * cc - x2 * ss);
    out[i2] = cvt<T>(x1 * ss + x2 * cc);
}

template <typename T> DEVICE bool aligned_to(const T* p, usize bytes) {
    return ((usize)p & (bytes - 1)) == 0;
}

// Interleaved: pairs (2k, 2k + 1) of each (b, h) row of t * d values. When the rows allow it,
// a thread takes V neighbouring pairs: 16 bytes of x and 8 of cos and sin per access.
template <typename T>
DEVICE void rope_i_impl(const T* x, const T* cos, const T* sin, T* out, u64 bh, u64 h, u64 td,
                        u64 cs_batch_stride) {
    const u64 row_pairs = td / 2;
    const u64 pairs = bh * row_pairs;
    constexpr int V = sizeof(T) <= 4 ? 8 / sizeof(T) : 1;
    if (V > 1 && row_pairs % V == 0 && cs_batch_stride % V == 0 && aligned_to(x, 16) &&
        aligned_to(out, 16) && aligned_to(cos, 8) && aligned_to(sin, 8)) {
        typedef typename RawOf<sizeof(T) * 2 * V>::type RawX;
        typedef typename RawOf<sizeof(T) * V>::type RawCs;
        for (u64 g = grid_tid(); g < pairs / V; g += grid_threads()) {
            const u64 p = g * V;
            const u64 row = p / row_pairs, k = p % row_pairs;
            const u64 cs = k + (row / h) * cs_batch_stride;
            Pack<T, 2 * V> a, r;
            Pack<T, V> c, sn;
            a.raw = reinterpret_cast<const RawX*>(x)[g];
            c.raw = *reinterpret_cast<const RawCs*>(cos + cs);
            sn.raw = *reinterpret_cast<const RawCs*>(sin + cs);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                typedef typename Acc<T>::type A;
                const A x1 = cvt<A>(a.v[2 * j]), x2 = cvt<A>(a.v[2 * j + 1]);
                const A cc = cvt<A>(c.v[j]), ss = cvt<A>(sn.v[j]);
                r.v[2 * j] = cvt<T>(x1 * cc - x2 * ss);
                r.v[2 * j + 1] = cvt<T>(x1 * ss + x2 * cc);
            }
            reinterpret_cast<RawX*>(out)[g] = r.raw;
        }
        return;
    }
    for (u64 p = grid_tid(); p < pairs; p += grid_threads()) {
        const u64 row = p / row_pairs, k = p % row_pairs;
        const u64 cs = k + (row / h) * cs_batch_stride;
        rotate(x, out, 2 * p, 2 * p + 1, cos[cs], sin[cs]);
    }
}

// Halves: element j of the first half pairs with element j of the second half. When the
// halves allow it, a thread takes V neighbouring pairs: 16 bytes per access of each operand.
template <typename T>
DEVICE void rope_impl(const T* x, const T* cos, const T* sin, T* out, u64 bh, u64 h, u64 t, u64 d,
                      u64 cs_batch_stride) {
    const u64 half = d / 2;
    const u64 pairs = bh * t * half;
    constexpr int V = 16 / sizeof(T);
    if (V > 1 && half % V == 0 && cs_batch_stride % V == 0 && aligned_to(x, 16) &&
        aligned_to(out, 16) && aligned_to(cos, 16) && aligned_to(sin, 16)) {
        typedef typename RawOf<sizeof(T) * V>::type Raw;
        for (u64 g = grid_tid(); g < pairs / V; g += grid_threads()) {
            const u64 p = g * V;
            const u64 row = p / (t * half), rem = p % (t * half);
            const u64 i_t = rem / half, i_d = rem % half;
            const u64 i1 = row * t * d + i_t * d + i_d;
            const u64 cs = rem + (row / h) * cs_batch_stride;
            Pack<T, V> a, b, c, sn, r1, r2;
            a.raw = *reinterpret_cast<const Raw*>(x + i1);
            b.raw = *reinterpret_cast<const Raw*>(x + i1 + half);
            c.raw = *reinterpret_cast<const Raw*>(cos + cs);
            sn.raw = *reinterpret_cast<const Raw*>(sin + cs);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                typedef typename Acc<T>::type A;
                const A x1 = cvt<A>(a.v[j]), x2 = cvt<A>(b.v[j]);
                const A cc = cvt<A>(c.v[j]), ss = cvt<A>(sn.v[j]);
                r1.v[j] = cvt<T>(x1 * cc - x2 * ss);
                r2.v[j] = cvt<T>(x1 * ss + x2 * cc);
            }
            *reinterpret_cast<Raw*>(out + i1) = r1.raw;
            *reinterpret_cast<Raw*>(out + i1 + half) = r2.raw;
        }
        return;
    }
    for (u64 p = grid_tid(); p < pairs; p += grid_threads()) {
        const u64 row = p / (t * half), rem = p % (t * half);
        const u64 i_t = rem / half, i_d = rem % half;
        const u64 i1 = row * t * d + i_t * d + i_d;
        const u64 cs = rem + (row / h) * cs_batch_stride;
        rotate(x, out, i1, i1 + half, cos[cs], sin[cs]);
    }
}

// (b, t, h, d) layout, halves as in rope.
template <typename T>
DEVICE void rope_thd_impl(const T* x, const T* cos, const T* sin, T* out, u64 b, u64 t, u64 h,
                          u64 d, u64 cs_batch_stride) {
    const u64 half = d / 2;
    const u64 pairs = b * t * h * half;
    for (u64 p = grid_tid(); p < pairs; p += grid_threads()) {
        const u64 i_d = p % half;
        u64 q = p / half;
        const u64 i_h = q % h;
        q /= h;
        const u64 i_t = q % t, i_b = q / t;
        const u64 i1 = ((i_b * t + i_t) * h + i_h) * d + i_d;
        const u64 cs = i_t * half + i_d + i_b * cs_batch_stride;
        rotate(x, out, i1, i1 + half, cos[cs], sin[cs]);
    }
}

// ROPE_PARAMS(T): the parameter list declared in rocm-kernels (`rope::Params`: x, cos, sin,
// out, the first three dims d0 d1 d2, the head dim d, the tables' batch stride), defined by the
// runtime before this file.
#define ROPE_ENTRIES(NAME, T)                                                                   \
    KERNEL void rope_i_##NAME(ROPE_PARAMS(T)) {                                                 \
        rope_i_impl(x, cos, sin, out, d0 * d1, d1, d2 * d, cs_batch_stride);                    \
    }                                                                                           \
    KERNEL void rope_##NAME(ROPE_PARAMS(T)) {                                                   \
        rope_impl(x, cos, sin, out, d0 * d1, d1, d2, d, cs_batch_stride);                       \
    }                                                                                           \
    KERNEL void rope_thd_##NAME(ROPE_PARAMS(T)) {                                               \
        rope_thd_impl(x, cos, sin, out, d0, d1, d2, d, cs_batch_stride);                        \
    }
CANDLE_ROCM_KEEP(bf16)(ROPE_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(ROPE_ENTRIES(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(ROPE_ENTRIES(f32, float))
CANDLE_ROCM_KEEP(f64)(ROPE_ENTRIES(f64, double))

// ternary.hip: where_<cond>_<value>: out[i] = cond[i] != 0 ? t[i] : f[i], three independent
// strided layouts (broadcasts through stride 0), contiguous output.

template <typename C, typename T>
DEVICE void where_impl(const C* cond, const T* t, const T* f, T* out, u64 n,
                       const KernelLayout& lc, const KernelLayout& lt, const KernelLayout& lf) {
    const u64 nthreads = grid_threads();
    if (layout_is_contiguous(lc) && layout_is_contiguous(lt) && layout_is_contiguous(lf)) {
        const C* c0 = cond + lc.start;
        const T* t0 = t + lt.start;
        const T* f0 = f + lf.start;
        for (u64 i = grid_tid(); i < n; i += nthreads) out[i] = c0[i] != (C)0 ? t0[i] : f0[i];
        return;
    }
    for (u64 i = grid_tid(); i < n; i += nthreads) {
        out[i] = cond[layout_offset(lc, i)] != (C)0 ? t[layout_offset(lt, i)]
                                                     : f[layout_offset(lf, i)];
    }
}

#define WHERE(CN, CT, NAME, T)                                                                  \
    KERNEL void where_##CN##_##NAME(const CT* cond, const T* t, const T* f, T* out, u64 n,     \
                                    KernelLayout lc, KernelLayout lt, KernelLayout lf) {       \
        where_impl(cond, t, f, out, n, lc, lt, lf);                                             \
    }
#define WHERE_COND(NAME, T)                                                                     \
    WHERE(u8, u8, NAME, T) WHERE(u32, u32, NAME, T) WHERE(i16, i16, NAME, T)                   \
    WHERE(i32, i32, NAME, T) WHERE(i64, i64, NAME, T)
CANDLE_ROCM_FOR_EACH_DTYPE(WHERE_COND)

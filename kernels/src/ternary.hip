// ternary.hip: where_<cond>_<value>: out[i] = cond[i] != 0 ? t[i] : f[i], three independent
// strided layouts (broadcasts through stride 0), contiguous output.

// Contiguous operands: packs of 16 bytes of the wider type (8 bf16 values with 8 mask bytes)
// when all four pointers sit at the same position inside a pack, else one element at a time.
template <typename C, typename T>
DEVICE void where_contiguous(const C* c, const T* t, const T* f, T* out, u64 n) {
    const u64 tid = grid_tid(), nthreads = grid_threads();
    constexpr int N = PackWidth<C, T>::n;
    const u64 phase = pack_phase<N>(t);
    if (N == 1 || phase != pack_phase<N>(c) || phase != pack_phase<N>(f) ||
        phase != pack_phase<N>(out)) {
        for (u64 i = tid; i < n; i += nthreads) out[i] = c[i] != (C)0 ? t[i] : f[i];
        return;
    }
    u64 head = (N - phase) % N;
    if (head > n) head = n;
    for (u64 i = tid; i < head; i += nthreads) out[i] = c[i] != (C)0 ? t[i] : f[i];
    const u64 packs = (n - head) / N;
    typedef typename RawOf<sizeof(C) * N>::type RawC;
    typedef typename RawOf<sizeof(T) * N>::type RawT;
    const RawC* pc = reinterpret_cast<const RawC*>(c + head);
    const RawT* pt = reinterpret_cast<const RawT*>(t + head);
    const RawT* pf = reinterpret_cast<const RawT*>(f + head);
    RawT* po = reinterpret_cast<RawT*>(out + head);
    for (u64 p = tid; p < packs; p += nthreads) {
        Pack<C, N> m;
        Pack<T, N> a, b, r;
        m.raw = pc[p];
        a.raw = pt[p];
        b.raw = pf[p];
#pragma unroll
        for (int j = 0; j < N; ++j) r.v[j] = m.v[j] != (C)0 ? a.v[j] : b.v[j];
        po[p] = r.raw;
    }
    for (u64 i = head + packs * N + tid; i < n; i += nthreads) out[i] = c[i] != (C)0 ? t[i] : f[i];
}

template <typename C, typename T>
DEVICE void where_impl(const C* cond, const T* t, const T* f, T* out, u64 n,
                       const KernelLayout& lc, const KernelLayout& lt, const KernelLayout& lf) {
    const u64 nthreads = grid_threads();
    if (layout_is_contiguous(lc) && layout_is_contiguous(lt) && layout_is_contiguous(lf)) {
        where_contiguous(cond + lc.start, t + lt.start, f + lf.start, out, n);
        return;
    }
    for (u64 i = grid_tid(); i < n; i += nthreads) {
        out[i] = cond[layout_offset(lc, i)] != (C)0 ? t[layout_offset(lt, i)]
                                                     : f[layout_offset(lf, i)];
    }
}

// WHERE_PARAMS(CT, T): the parameter list declared in rocm-kernels (`ternary::WhereParams`),
// defined by the runtime before this file.
#define WHERE(CN, CT, NAME, T)                                                                  \
    KERNEL void where_##CN##_##NAME(WHERE_PARAMS(CT, T)) {                                      \
        where_impl(cond, t, f, out, n, lc, lt, lf);                                             \
    }
#define WHERE_COND(NAME, T)                                                                     \
    WHERE(u8, u8, NAME, T) WHERE(u32, u32, NAME, T) WHERE(i16, i16, NAME, T)                   \
    WHERE(i32, i32, NAME, T) WHERE(i64, i64, NAME, T)
CANDLE_ROCM_FOR_EACH_DTYPE(WHERE_COND)

// norm.hip: softmax and log-softmax over the last dim, rms_norm and layer_norm, on contiguous
// rows. One block per row (rows of any length: threads stride over it), two passes over the
// row: statistics, then the write. Statistics are f32 for bf16/f16/f32 and f64 for f64:
// - softmax: online max and rescaled sum of exp(x - max) (no overflow, one read),
// - rms_norm: sum of squares,
// - layer_norm: Welford counts/means/M2 merged pairwise (Chan et al.), so no E[x^2] - mean^2
//   cancellation.

#define NORM_MAX_WARPS 32

template <typename A, typename S, typename Op>
DEVICE S norm_block_combine(S v) {
    __shared__ S partial[NORM_MAX_WARPS];
    const u32 ws = warpSize;
    const u32 lane = threadIdx.x % ws, warp = threadIdx.x / ws;
    const u32 nwarps = (blockDim.x + ws - 1) / ws;
    for (u32 off = ws / 2; off > 0; off /= 2) v = Op::combine(v, Op::shfl(v, off));
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = partial[0];
    for (u32 w = 1; w < nwarps; ++w) v = Op::combine(v, partial[w]);  // every thread: broadcast
    __syncthreads();
    return v;
}

template <typename A> struct MaxSum { A m, s; };
template <typename A> struct SoftmaxOp {
    typedef MaxSum<A> S;
    DEVICE static S combine(S a, S b) {
        const A m = a.m > b.m ? a.m : b.m;
        if (m == m_neg_inf((A)0)) { S r; r.m = m; r.s = a.s + b.s; return r; }
        S r;
        r.m = m;
        r.s = (a.s == (A)0 ? (A)0 : a.s * m_exp(a.m - m)) + (b.s == (A)0 ? (A)0 : b.s * m_exp(b.m - m));
        return r;
    }
    DEVICE static S shfl(S v, int mask) {
        S r; r.m = warp_shfl_xor(v.m, mask); r.s = warp_shfl_xor(v.s, mask); return r;
    }
};
template <typename A> struct SumSq {
    typedef A S;
    DEVICE static S combine(S a, S b) { return a + b; }
    DEVICE static S shfl(S v, int mask) { return warp_shfl_xor(v, mask); }
};
template <typename A> struct Welford { A n, mean, m2; };
template <typename A> struct WelfordOp {
    typedef Welford<A> S;
    DEVICE static S combine(S a, S b) {
        if (b.n == (A)0) return a;
        if (a.n == (A)0) return b;
        S r;
        r.n = a.n + b.n;
        const A d = b.mean - a.mean;
        r.mean = a.mean + d * (b.n / r.n);
        r.m2 = a.m2 + b.m2 + d * d * (a.n * b.n / r.n);
        return r;
    }
    DEVICE static S shfl(S v, int mask) {
        S r;
        r.n = warp_shfl_xor(v.n, mask);
        r.mean = warp_shfl_xor(v.mean, mask);
        r.m2 = warp_shfl_xor(v.m2, mask);
        return r;
    }
};

template <typename A> struct SoftmaxVisit {
    MaxSum<A> st;
    template <typename T> DEVICE void operator()(T x, u64) {
        const A v = cvt<A>(x);
        if (v > st.m) { st.s = (st.s == (A)0 ? (A)0 : st.s * m_exp(st.m - v)) + (A)1; st.m = v; }
        else st.s += m_exp(v - st.m);
    }
};
template <typename A> struct SumSqVisit {
    A ss;
    template <typename T> DEVICE void operator()(T x, u64) { const A v = cvt<A>(x); ss += v * v; }
};
template <typename A> struct WelfordVisit {
    Welford<A> st;
    template <typename T> DEVICE void operator()(T x, u64) {
        const A v = cvt<A>(x);
        st.n += (A)1;
        const A d = v - st.mean;
        st.mean += d / st.n;
        st.m2 += d * (v - st.mean);
    }
};

// LOG: log-softmax.
template <typename T, bool LOG>
DEVICE void softmax_impl(const T* x, T* out, u64 rows, u64 len) {
    typedef typename Acc<T>::type A;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * len;
        T* yr = out + row * len;
        SoftmaxVisit<A> visit;
        visit.st.m = m_neg_inf((A)0); visit.st.s = (A)0;
        block_visit(xr, 0, len, visit);
        MaxSum<A> st = visit.st;
        st = norm_block_combine<A, MaxSum<A>, SoftmaxOp<A> >(st);
        const A log_s = m_log(st.s);
        const A inv = (A)1 / st.s;
        for (u64 i = threadIdx.x; i < len; i += blockDim.x) {
            const A v = cvt<A>(xr[i]) - st.m;
            yr[i] = cvt<T>(LOG ? v - log_s : m_exp(v) * inv);
        }
    }
}

template <typename T>
DEVICE void rms_norm_impl(const T* x, const T* alpha, T* out, u64 rows, u64 len, float eps) {
    typedef typename Acc<T>::type A;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * len;
        T* yr = out + row * len;
        SumSqVisit<A> visit;
        visit.ss = (A)0;
        block_visit(xr, 0, len, visit);
        A ss = visit.ss;
        ss = norm_block_combine<A, A, SumSq<A> >(ss);
        const A scale = (A)1 / m_sqrt(ss / (A)len + (A)eps);
        for (u64 i = threadIdx.x; i < len; i += blockDim.x)
            yr[i] = cvt<T>(cvt<A>(xr[i]) * scale * cvt<A>(alpha[i]));
    }
}

template <typename T>
DEVICE void layer_norm_impl(const T* x, const T* alpha, const T* beta, T* out, u64 rows, u64 len,
                            float eps, u32 has_beta) {
    typedef typename Acc<T>::type A;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * len;
        T* yr = out + row * len;
        WelfordVisit<A> visit;
        visit.st.n = (A)0; visit.st.mean = (A)0; visit.st.m2 = (A)0;
        block_visit(xr, 0, len, visit);
        Welford<A> st = visit.st;
        st = norm_block_combine<A, Welford<A>, WelfordOp<A> >(st);
        const A scale = (A)1 / m_sqrt(st.m2 / (A)len + (A)eps);
        for (u64 i = threadIdx.x; i < len; i += blockDim.x) {
            A v = (cvt<A>(xr[i]) - st.mean) * scale * cvt<A>(alpha[i]);
            if (has_beta) v += cvt<A>(beta[i]);
            yr[i] = cvt<T>(v);
        }
    }
}

#define NORM_ENTRIES(NAME, T)                                                                    \
    KERNEL void softmax_##NAME(const T* x, T* out, u64 rows, u64 len) {                          \
        softmax_impl<T, false>(x, out, rows, len);                                               \
    }                                                                                            \
    KERNEL void log_softmax_##NAME(const T* x, T* out, u64 rows, u64 len) {                      \
        softmax_impl<T, true>(x, out, rows, len);                                                \
    }                                                                                            \
    KERNEL void rms_norm_##NAME(const T* x, const T* alpha, T* out, u64 rows, u64 len, float eps) { \
        rms_norm_impl<T>(x, alpha, out, rows, len, eps);                                         \
    }                                                                                            \
    KERNEL void layer_norm_##NAME(const T* x, const T* alpha, const T* beta, T* out, u64 rows,   \
                                  u64 len, float eps, u32 has_beta) {                            \
        layer_norm_impl<T>(x, alpha, beta, out, rows, len, eps, has_beta);                       \
    }
CANDLE_ROCM_KEEP(bf16)(NORM_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(NORM_ENTRIES(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(NORM_ENTRIES(f32, float))
CANDLE_ROCM_KEEP(f64)(NORM_ENTRIES(f64, double))

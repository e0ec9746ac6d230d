// norm.hip: softmax and log-softmax over the last dim, rms_norm and layer_norm, on contiguous
// rows. One block per row (rows of any length: threads stride over it), two passes over the
// row: statistics, then the write. Statistics are f32 for bf16/f16/f32 and f64 for f64:
// - softmax: online max and rescaled sum of exp(x - max) (no overflow, one read),
// - rms_norm: sum of squares,
// - layer_norm: two passes over the row (the second from cache): the mean of d = x - k with k
//   the row's first value, then the sum of (d - mean(d))^2, so nothing like E[x^2] - mean^2
//   ever cancels; the output is formed from d - mean(d), small and accurate at any offset.
// The write pass reads and writes 16-byte packs where the row allows.

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
template <typename A> struct SoftmaxVisit {
    MaxSum<A> st;
    template <typename T> DEVICE void operator()(T x, u64) {
        const A v = cvt<A>(x);
        if (v > st.m) { st.s = (st.s == (A)0 ? (A)0 : st.s * m_exp(st.m - v)) + (A)1; st.m = v; }
        // -inf adds exp(-inf) = 0; computed, it would be exp(-inf + inf) = NaN while the
        // running max is still -inf (masked attention rows).
        else if (v != m_neg_inf((A)0)) st.s += m_exp(v - st.m);
    }
};
template <typename A> struct SumSqVisit {
    A ss;
    template <typename T> DEVICE void operator()(T x, u64) { const A v = cvt<A>(x); ss += v * v; }
};
// Sum of (x - k - c)^2 (c = 0: sum of x - k).
template <typename A> struct CenteredVisit {
    A k, c, sum;
    bool square;
    template <typename T> DEVICE void operator()(T x, u64) {
        const A d = (cvt<A>(x) - k) - c;
        sum += square ? d * d : d;
    }
};

// The write passes, as functors for block_map_row.
template <typename T, typename A, bool LOG> struct SoftmaxWrite {
    A m, log_s, inv;
    DEVICE T operator()(T x, u64) const {
        const A v = cvt<A>(x) - m;
        return cvt<T>(LOG ? v - log_s : m_exp(v) * inv);
    }
};
template <typename T, typename A> struct RmsWrite {
    const T* alpha;
    A scale;
    DEVICE T operator()(T x, u64 i) const { return cvt<T>(cvt<A>(x) * scale * cvt<A>(alpha[i])); }
};
template <typename T, typename A> struct LayerNormWrite {
    const T* alpha;
    const T* beta;
    A k, mean_d, scale;  // mean_d: the mean of x - k
    u32 has_beta;
    DEVICE T operator()(T x, u64 i) const {
        A v = ((cvt<A>(x) - k) - mean_d) * scale * cvt<A>(alpha[i]);
        if (has_beta) v += cvt<A>(beta[i]);
        return cvt<T>(v);
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
        SoftmaxWrite<T, A, LOG> write;
        write.m = st.m;
        write.log_s = m_log(st.s);
        write.inv = (A)1 / st.s;
        block_map_row(xr, yr, len, write);
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
        RmsWrite<T, A> write;
        write.alpha = alpha;
        write.scale = (A)1 / m_sqrt(ss / (A)len + (A)eps);
        block_map_row(xr, yr, len, write);
    }
}

template <typename T>
DEVICE void layer_norm_impl(const T* x, const T* alpha, const T* beta, T* out, u64 rows, u64 len,
                            float eps, u32 has_beta) {
    typedef typename Acc<T>::type A;
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * len;
        T* yr = out + row * len;
        CenteredVisit<A> visit;
        visit.k = cvt<A>(xr[0]);
        visit.c = (A)0;
        visit.sum = (A)0;
        visit.square = false;
        block_visit(xr, 0, len, visit);
        const A mean_d = norm_block_combine<A, A, SumSq<A> >(visit.sum) / (A)len;
        visit.c = mean_d;
        visit.sum = (A)0;
        visit.square = true;
        block_visit(xr, 0, len, visit);
        const A var = norm_block_combine<A, A, SumSq<A> >(visit.sum) / (A)len;
        LayerNormWrite<T, A> write;
        write.alpha = alpha;
        write.beta = beta;
        write.k = visit.k;
        write.mean_d = mean_d;
        write.scale = (A)1 / m_sqrt(var + (A)eps);
        write.has_beta = has_beta;
        block_map_row(xr, yr, len, write);
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

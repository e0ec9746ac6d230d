// norm.hip: softmax and log-softmax over the last dim, rms_norm and layer_norm, on contiguous
// rows. Statistics are f32 for bf16/f16/f32 and f64 for f64. Two kernel shapes:
//
// - Register rows (`<op>_regpack_<T>`, `<op>_regelem_<T>`), rows of up to 1024 x ROW_UNITS
//   units, a unit being a 16-byte pack (row length a multiple of the pack, 16-byte aligned
//   buffers) or one element. A group of G threads (a power of two, a kernel argument) holds one
//   row in registers: one read from memory, the statistics from registers, then the write from
//   registers. Groups of up to a warp combine through shuffles only; wider groups (long rows)
//   through shared memory, once per row. A block holds blockDim.x / G rows.
//   - softmax: each thread's max and its sum of exp(x - max), combined as (max, sum) pairs;
//     f32/f64 keep the exps in place of the inputs, so the write is a multiply; 16-bit rows
//     have no room for them and take the exps again;
//   - rms_norm: sum of squares; add_rms_norm first adds a residual row (rounded to T, as
//     Candle's add) and writes that sum too: a pre-norm block's residual add and next norm;
//   - layer_norm: of d = x - k, k the row's first element: each thread's count, mean and sum
//     of squared deviations from that mean (two passes over registers), combined with Chan's
//     formula, so nothing like E[x^2] - mean^2 cancels; the output is formed from d - mean(d).
// - Block rows (`<op>_<T>`): rows too long for registers. One block per row, threads striding
//   over it: the statistics pass (softmax: online max and rescaled sum; layer_norm: the mean of
//   d = x - k with k the row's first value, then the sum of (d - mean(d))^2 from cache), then
//   the write pass with 16-byte packs where the row allows.
//
// Every combine formula is symmetric in its two operands, so every lane of a butterfly ends
// with bit-identical statistics.

template <typename A> struct MaxSum { A m, s; };
template <typename A> struct SoftmaxOp {
    typedef MaxSum<A> S;
    typedef S State;
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

// The write passes: per element for block_map_row (`operator()`), per unit of N elements for
// register rows (`unit`, which loads the weights of the unit in one access).
template <typename T, int N> DEVICE Pack<T, N> load_unit(const T* base, u32 unit) {
    Pack<T, N> p;
    p.raw = reinterpret_cast<const typename RawOf<sizeof(T) * N>::type*>(base)[unit];
    return p;
}
template <typename T, typename A, bool LOG> struct SoftmaxWrite {
    A m, log_s, inv;
    DEVICE T operator()(T x, u64) const {
        const A v = cvt<A>(x) - m;
        return cvt<T>(LOG ? v - log_s : m_exp(v) * inv);
    }
    template <int N> DEVICE void unit(const Pack<T, N>& x, Pack<T, N>& y, u32) const {
#pragma unroll
        for (int j = 0; j < N; ++j) y.v[j] = (*this)(x.v[j], 0);
    }
};
template <typename T, typename A> struct RmsWrite {
    const T* alpha;
    A scale;
    DEVICE T value(T x, T a) const { return cvt<T>(cvt<A>(x) * scale * cvt<A>(a)); }
    DEVICE T operator()(T x, u64 i) const { return value(x, alpha[i]); }
    template <int N> DEVICE void unit(const Pack<T, N>& x, Pack<T, N>& y, u32 u) const {
        const Pack<T, N> a = load_unit<T, N>(alpha, u);
#pragma unroll
        for (int j = 0; j < N; ++j) y.v[j] = value(x.v[j], a.v[j]);
    }
};
template <typename T, typename A> struct LayerNormWrite {
    const T* alpha;
    const T* beta;
    A k, mean_d, scale;  // mean_d: the mean of x - k
    u32 has_beta;
    DEVICE A value(T x, T a) const { return ((cvt<A>(x) - k) - mean_d) * scale * cvt<A>(a); }
    DEVICE T operator()(T x, u64 i) const {
        A v = value(x, alpha[i]);
        if (has_beta) v += cvt<A>(beta[i]);
        return cvt<T>(v);
    }
    template <int N> DEVICE void unit(const Pack<T, N>& x, Pack<T, N>& y, u32 u) const {
        const Pack<T, N> a = load_unit<T, N>(alpha, u);
        if (has_beta) {
            const Pack<T, N> b = load_unit<T, N>(beta, u);
#pragma unroll
            for (int j = 0; j < N; ++j) y.v[j] = cvt<T>(value(x.v[j], a.v[j]) + cvt<A>(b.v[j]));
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) y.v[j] = cvt<T>(value(x.v[j], a.v[j]));
        }
    }
};

// x + r rounded to T, as Candle's add gives it.
template <typename T> struct Add2 {
    typedef typename Acc<T>::type A;
    DEVICE T operator()(T x, T r) const { return cvt<T>(cvt<A>(x) + cvt<A>(r)); }
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
        st = block_combine_all<SoftmaxOp<A> >(st);
        SoftmaxWrite<T, A, LOG> write;
        write.m = st.m;
        write.log_s = m_log(st.s);
        write.inv = (A)1 / st.s;
        block_map_row(xr, yr, len, write);
    }
}

// One row of rms_norm by a block.
template <typename T>
DEVICE void rms_norm_row(const T* xr, const T* alpha, T* yr, u64 len, float eps) {
    typedef typename Acc<T>::type A;
    SumSqVisit<A> visit;
    visit.ss = (A)0;
    block_visit(xr, 0, len, visit);
    A ss = visit.ss;
    ss = block_combine_all<SumOf<A> >(ss);
    RmsWrite<T, A> write;
    write.alpha = alpha;
    write.scale = (A)1 / m_sqrt(ss / (A)len + (A)eps);
    block_map_row(xr, yr, len, write);
}

template <typename T>
DEVICE void rms_norm_impl(const T* x, const T* alpha, T* out, u64 rows, u64 len, float eps) {
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x)
        rms_norm_row(x + row * len, alpha, out + row * len, len, eps);
}

// add_rms_norm, rows too long for registers: the block writes the row's sum, then norms it as
// rms_norm would (the same reads, so the same order of the sum of squares).
template <typename T>
DEVICE void add_rms_norm_impl(const T* x, const T* r, const T* alpha, T* sum, T* out, u64 rows,
                              u64 len, float eps) {
    for (u64 row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * len;
        const T* rr = r + row * len;
        T* sr = sum + row * len;
        for (u64 i = threadIdx.x; i < len; i += blockDim.x) sr[i] = Add2<T>()(xr[i], rr[i]);
        __syncthreads();
        rms_norm_row((const T*)sr, alpha, out + row * len, len, eps);
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
        const A mean_d = block_combine_all<SumOf<A> >(visit.sum) / (A)len;
        visit.c = mean_d;
        visit.sum = (A)0;
        visit.square = true;
        block_visit(xr, 0, len, visit);
        const A var = block_combine_all<SumOf<A> >(visit.sum) / (A)len;
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

// ---------------------------------------------------------------------------------------------
// Register rows.

#define ROW_UNITS 8

// Combines one state per thread over its group of G threads; every thread gets the result.
// G is uniform over the block, so every thread reaches the barriers. A group wider than a warp
// spans at most MAX_BLOCK_WARPS <= warpSize warps.
template <typename Op>
DEVICE typename Op::State group_combine(typename Op::State v, u32 G) {
    typedef typename Op::State S;
    __shared__ S partial[MAX_BLOCK_WARPS];
    const u32 ws = warpSize;
    v = warp_combine<Op>(v, G < ws ? G : ws);
    if (G <= ws) return v;
    // The group's warps' partials, one per lane, combined by a butterfly in every warp of the
    // group (log2 steps instead of a chain through all of them).
    const u32 lane = threadIdx.x % ws, warp = threadIdx.x / ws, warps = G / ws;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = warp_combine<Op>(partial[warp / warps * warps + lane % warps], warps);  // every aligned run of `warps` lanes
    __syncthreads();
    return v;
}

// (count, mean, sum of squared deviations) of a set of values.
template <typename A> struct Moments { A n, mean, m2; };
template <typename A> struct MomentsOp {
    typedef Moments<A> S;
    typedef S State;
    DEVICE static S combine(S a, S b) {
        if (a.n == (A)0) return b;
        if (b.n == (A)0) return a;
        S r;
        r.n = a.n + b.n;
        const A d = b.mean - a.mean;
        r.mean = a.mean * (a.n / r.n) + b.mean * (b.n / r.n);  // no overflow of n * mean
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

// One thread's part of a row: units lane, lane + G, ... below `units` (at most U of them),
// each of N elements.
template <typename T, int N, int U> struct RowPart {
    typedef typename RawOf<sizeof(T) * N>::type Raw;
    Pack<T, N> u[U];
    u32 lane, G, units;
    DEVICE u32 unit(int k) const { return lane + (u32)k * G; }
    DEVICE bool has(int k) const { return unit(k) < units; }
    DEVICE u32 held() const {
        u32 n = 0;
#pragma unroll
        for (int k = 0; k < U; ++k) n += has(k) ? 1 : 0;
        return n * N;
    }
    DEVICE void load(const T* row) {
        const Raw* p = reinterpret_cast<const Raw*>(row);
#pragma unroll
        for (int k = 0; k < U; ++k)
            if (has(k)) u[k].raw = p[unit(k)];
    }
    // f(value, element index) for each element held.
    template <typename F> DEVICE void each(F& f) const {
#pragma unroll
        for (int k = 0; k < U; ++k)
            if (has(k)) {
#pragma unroll
                for (int j = 0; j < N; ++j) f(u[k].v[j], (u64)unit(k) * N + j);
            }
    }
    // Each element held replaced by f(element) (T the type f takes and returns).
    template <typename F> DEVICE void update(F& f) {
#pragma unroll
        for (int k = 0; k < U; ++k)
            if (has(k)) {
#pragma unroll
                for (int j = 0; j < N; ++j) u[k].v[j] = f(u[k].v[j]);
            }
    }
    // Each element held replaced by f(element, o's element at the same place).
    template <typename F> DEVICE void update_with(const RowPart& o, const F& f) {
#pragma unroll
        for (int k = 0; k < U; ++k)
            if (has(k)) {
#pragma unroll
                for (int j = 0; j < N; ++j) u[k].v[j] = f(u[k].v[j], o.u[k].v[j]);
            }
    }
    // The held units of the output row, each computed by f.unit.
    template <typename F> DEVICE void write(T* row_out, const F& f) const {
        Raw* q = reinterpret_cast<Raw*>(row_out);
#pragma unroll
        for (int k = 0; k < U; ++k)
            if (has(k)) {
                Pack<T, N> r;
                f.unit(u[k], r, unit(k));
                q[unit(k)] = r.raw;
            }
    }
};

template <typename A> struct MaxVisit {
    A m;
    template <typename T> DEVICE void operator()(T x, u64) { m = m_max(m, cvt<A>(x)); }  // NaN-ignoring
};
// Sum of exp(x - m), with m finite (see exp_base).
template <typename A> struct ExpSumVisit {
    A m, s;
    template <typename T> DEVICE void operator()(T x, u64) { s += m_exp(cvt<A>(x) - m); }
};
// The exps of a part replace its values in place (where T is the statistics' type); returns
// their sum.
template <typename A> struct ExpInPlace {
    A m, s;
    template <typename T> DEVICE T operator()(T x) {
        const A e = m_exp(cvt<A>(x) - m);
        s += e;
        return cvt<T>(e);
    }
};
template <typename T, typename A> struct ScaleWrite {
    A scale;
    template <int N> DEVICE void unit(const Pack<T, N>& x, Pack<T, N>& y, u32) const {
#pragma unroll
        for (int j = 0; j < N; ++j) y.v[j] = cvt<T>(cvt<A>(x.v[j]) * scale);
    }
};
// What a part's exps are taken against: its max, or 0 for a part of only -inf (whose exps are
// then exp(-inf) = 0 without a check per element, where exp(-inf - -inf) would be NaN).
template <typename A> DEVICE A exp_base(A m) { return m == m_neg_inf((A)0) ? (A)0 : m; }

// Walks the rows of this block's groups; body(part, row) runs for every thread, with an empty
// part (units 0) where the group has no row, so the combines' barriers are reached by all.
template <typename T, int N, int U, typename Body>
DEVICE void reg_rows(const T* x, u64 rows, u64 len, u32 G, Body& body) {
    const u32 groups = blockDim.x / G;
    RowPart<T, N, U> part;
    part.lane = threadIdx.x % G;
    part.G = G;
    for (u64 row0 = (u64)blockIdx.x * groups; row0 < rows; row0 += (u64)gridDim.x * groups) {
        const u64 row = row0 + threadIdx.x / G;
        part.units = row < rows ? (u32)(len / N) : 0;
        if (row < rows) part.load(x + row * len);
        body(part, row < rows ? row : 0);
    }
}

template <typename T, bool LOG> struct SoftmaxRegBody {
    typedef typename Acc<T>::type A;
    T* out;
    u64 len;
    u32 G;
    template <typename P> DEVICE void operator()(P& part, u64 row) {
        MaxVisit<A> mx;
        mx.m = m_neg_inf((A)0);
        part.each(mx);
        MaxSum<A> st;
        st.m = mx.m;
        if (!LOG && sizeof(A) == sizeof(T)) {
            // f32/f64: one exp per element, kept in place for the write. The scale is NaN
            // when the whole row is -inf, as the CPU's 0/0.
            ExpInPlace<A> es;
            es.m = exp_base(mx.m);
            es.s = (A)0;
            part.update(es);
            st.s = es.s;
            st = group_combine<SoftmaxOp<A> >(st, G);
            ScaleWrite<T, A> write;
            write.scale = m_exp(mx.m - st.m) / st.s;
            part.write(out + row * len, write);
            return;
        }
        // 16-bit types (no room for the exps beside the inputs) and log-softmax: the write
        // takes its own exps.
        ExpSumVisit<A> es;
        es.m = exp_base(mx.m);
        es.s = (A)0;
        part.each(es);
        st.s = es.s;
        st = group_combine<SoftmaxOp<A> >(st, G);
        SoftmaxWrite<T, A, LOG> write;
        write.m = st.m;
        write.log_s = m_log(st.s);
        write.inv = (A)1 / st.s;
        part.write(out + row * len, write);
    }
};

template <typename T> struct RmsRegBody {
    typedef typename Acc<T>::type A;
    const T* alpha;
    T* out;
    u64 len;
    u32 G;
    float eps;
    template <typename P> DEVICE void operator()(P& part, u64 row) {
        SumSqVisit<A> sq;
        sq.ss = (A)0;
        part.each(sq);
        const A ss = group_combine<SumOf<A> >(sq.ss, G);
        RmsWrite<T, A> write;
        write.alpha = alpha;
        write.scale = (A)1 / m_sqrt(ss / (A)len + (A)eps);
        part.write(out + row * len, write);
    }
};

template <typename T> struct CopyWrite {
    template <int N> DEVICE void unit(const Pack<T, N>& x, Pack<T, N>& y, u32) const { y = x; }
};

// add_rms_norm in registers: the part of x plus the same part of r, rounded to T, written as
// the row's sum and normed from registers as RmsRegBody norms a row it loaded.
template <typename T> struct AddRmsRegBody {
    const T* r;
    T* sum;
    RmsRegBody<T> norm;
    template <typename P> DEVICE void operator()(P& part, u64 row) {
        P rp = part;
        rp.load(r + row * norm.len);
        part.update_with(rp, Add2<T>());
        part.write(sum + row * norm.len, CopyWrite<T>());
        norm(part, row);
    }
};

// The statistics of d = x - k, k the row's first element (as the block kernel does), so the
// sums are of small values even at a large offset, and the output is formed from d - mean(d).
template <typename T> struct LayerNormRegBody {
    typedef typename Acc<T>::type A;
    const T* x;
    const T* alpha;
    const T* beta;
    T* out;
    u64 len;
    u32 G, has_beta;
    float eps;
    template <typename P> DEVICE void operator()(P& part, u64 row) {
        CenteredVisit<A> visit;
        visit.k = cvt<A>(x[row * len]);
        visit.c = (A)0;
        visit.sum = (A)0;
        visit.square = false;
        part.each(visit);
        const u32 held = part.held();
        Moments<A> mo;
        mo.n = (A)held;
        mo.mean = held > 0 ? visit.sum / mo.n : (A)0;
        visit.c = mo.mean;
        visit.sum = (A)0;
        visit.square = true;
        part.each(visit);
        mo.m2 = visit.sum;
        mo = group_combine<MomentsOp<A> >(mo, G);
        LayerNormWrite<T, A> write;
        write.alpha = alpha;
        write.beta = beta;
        write.k = visit.k;
        write.mean_d = mo.mean;
        write.scale = (A)1 / m_sqrt(mo.m2 / (A)len + (A)eps);
        write.has_beta = has_beta;
        part.write(out + row * len, write);
    }
};

// Units of 16 bytes (VEC) or of one element.
template <typename T, bool VEC> struct UnitWidth { static constexpr int n = VEC ? 16 / sizeof(T) : 1; };

// Blocks of up to 1024 threads (one row of 8 K units): the compiler keeps to the registers that
// allows.
#define REG_KERNEL KERNEL __launch_bounds__(1024)
// ROW_PARAMS(T): the one parameter list of every entry, declared in rocm-kernels
// (`norm::RowParams`: x, r, alpha, beta, sum, out, rows, len, eps, has_beta, group).
#define NORM_REG_ENTRIES(NAME, T, SUFFIX, VEC)                                                   \
    REG_KERNEL void softmax_##SUFFIX##_##NAME(ROW_PARAMS(T)) {                                   \
        SoftmaxRegBody<T, false> body = {out, len, group};                                       \
        reg_rows<T, UnitWidth<T, VEC>::n, ROW_UNITS>(x, rows, len, group, body);                 \
    }                                                                                            \
    REG_KERNEL void log_softmax_##SUFFIX##_##NAME(ROW_PARAMS(T)) {                               \
        SoftmaxRegBody<T, true> body = {out, len, group};                                        \
        reg_rows<T, UnitWidth<T, VEC>::n, ROW_UNITS>(x, rows, len, group, body);                 \
    }                                                                                            \
    REG_KERNEL void rms_norm_##SUFFIX##_##NAME(ROW_PARAMS(T)) {                                  \
        RmsRegBody<T> body = {alpha, out, len, group, eps};                                      \
        reg_rows<T, UnitWidth<T, VEC>::n, ROW_UNITS>(x, rows, len, group, body);                 \
    }                                                                                            \
    REG_KERNEL void add_rms_norm_##SUFFIX##_##NAME(ROW_PARAMS(T)) {                              \
        AddRmsRegBody<T> body = {r, sum, {alpha, out, len, group, eps}};                         \
        reg_rows<T, UnitWidth<T, VEC>::n, ROW_UNITS>(x, rows, len, group, body);                 \
    }                                                                                            \
    REG_KERNEL void layer_norm_##SUFFIX##_##NAME(ROW_PARAMS(T)) {                                \
        LayerNormRegBody<T> body = {x, alpha, beta, out, len, group, has_beta, eps};             \
        reg_rows<T, UnitWidth<T, VEC>::n, ROW_UNITS>(x, rows, len, group, body);                 \
    }

#define NORM_ENTRIES(NAME, T)                                                                    \
    KERNEL void softmax_##NAME(ROW_PARAMS(T)) { softmax_impl<T, false>(x, out, rows, len); }     \
    KERNEL void log_softmax_##NAME(ROW_PARAMS(T)) { softmax_impl<T, true>(x, out, rows, len); }  \
    KERNEL void rms_norm_##NAME(ROW_PARAMS(T)) {                                                 \
        rms_norm_impl<T>(x, alpha, out, rows, len, eps);                                         \
    }                                                                                            \
    KERNEL void add_rms_norm_##NAME(ROW_PARAMS(T)) {                                             \
        add_rms_norm_impl<T>(x, r, alpha, sum, out, rows, len, eps);                             \
    }                                                                                            \
    KERNEL void layer_norm_##NAME(ROW_PARAMS(T)) {                                               \
        layer_norm_impl<T>(x, alpha, beta, out, rows, len, eps, has_beta);                       \
    }                                                                                            \
    NORM_REG_ENTRIES(NAME, T, regpack, true)                                                     \
    NORM_REG_ENTRIES(NAME, T, regelem, false)
CANDLE_ROCM_KEEP(bf16)(NORM_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(NORM_ENTRIES(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(NORM_ENTRIES(f32, float))
CANDLE_ROCM_KEEP(f64)(NORM_ENTRIES(f64, double))

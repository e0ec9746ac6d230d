// reduce.hip: sum, min, max, argmin, argmax over any set of dims of any layout.
// The host splits the input layout into `kept` (the output dims, with the input's start
// offset) and `red` (the reduced dims, start 0): element r of output o is
// in[layout_offset(kept, o) + offset(red, r)]. One block reduces one output over one chunk of
// its reduction; with several chunks (long reductions, few outputs, so the whole GPU works)
// blocks write partial states and `<op>_finish` combines them. Block reductions take the warp
// size from warpSize (32 or 64), never a constant.
//
// Semantics of Candle's CPU backend: sums of integers wrap (accumulated in an unsigned type of
// at least 32 bits), floats accumulate in f32 (f64 for f64). min/max keep the first of equal
// values; a NaN is picked only when it is element 0 of the reduction (the CPU loop starts
// from element 0 and `acc < NaN` is false), later NaNs are passed over.

// Entry points per dtype: sum, min, max, argmin, argmax (first pass), sum_finish,
// min_finish, max_finish, argmin_finish, argmax_finish (second pass), and sum_columns,
// min_columns, max_columns, argmin_columns, argmax_columns (a thread an output).

template <typename T> struct SumAcc { typedef float type; };
template <> struct SumAcc<double> { typedef double type; };
template <> struct SumAcc<u8> { typedef u32 type; };
template <> struct SumAcc<u32> { typedef u32 type; };
template <> struct SumAcc<i16> { typedef u32 type; };
template <> struct SumAcc<i32> { typedef u32 type; };
template <> struct SumAcc<i64> { typedef u64 type; };

// The value type min/max compare in.
template <typename T> struct CmpVal { typedef float type; };
template <> struct CmpVal<double> { typedef double type; };
template <> struct CmpVal<u8> { typedef i64 type; };
template <> struct CmpVal<u32> { typedef i64 type; };
template <> struct CmpVal<i16> { typedef i64 type; };
template <> struct CmpVal<i32> { typedef i64 type; };
template <> struct CmpVal<i64> { typedef i64 type; };

template <typename S> struct SumOp {
    typedef S State;
    DEVICE static S identity() { return (S)0; }
    DEVICE static S combine(S a, S b) { return a + b; }
    DEVICE static S shfl(S v, int lane_mask) { return warp_shfl_xor(v, lane_mask); }
    template <typename T> DEVICE static S step(S acc, T x, u64) { return acc + cvt<S>(x); }
    template <typename T> DEVICE static S seed(S acc, const T*) { return acc; }
};

// idx NO_INDEX: no element taken yet.
#define NO_INDEX 0xffffffffu
template <typename V> struct MinMaxState { V val; u32 idx; };

template <typename V> DEVICE bool is_nan(V v) { return v != v; }

// The value every element equals or beats: -inf / +inf for the floats, the i64 extremes for
// the integers (compared as i64).
template <typename V, bool IS_MAX> DEVICE V worst_value();
template <> DEVICE float worst_value<float, true>() { return __int_as_float((int)0xff800000u); }
template <> DEVICE float worst_value<float, false>() { return __int_as_float(0x7f800000); }
template <> DEVICE double worst_value<double, true>() { return __longlong_as_double((long long)0xfff0000000000000ull); }
template <> DEVICE double worst_value<double, false>() { return __longlong_as_double(0x7ff0000000000000ll); }
template <> DEVICE i64 worst_value<i64, true>() { return (i64)0x8000000000000000ull; }
template <> DEVICE i64 worst_value<i64, false>() { return (i64)0x7fffffffffffffffull; }

// IS_MAX: the larger value wins; ties and everything else as described above.
template <typename V, bool IS_MAX> struct MinMaxOp {
    typedef MinMaxState<V> State;
    DEVICE static State identity() { State s; s.val = worst_value<V, IS_MAX>(); s.idx = NO_INDEX; return s; }
    DEVICE static bool beats(V a, V b) { return IS_MAX ? a > b : a < b; }
    DEVICE static State combine(State a, State b) {
        if (a.idx == NO_INDEX) return b;
        if (b.idx == NO_INDEX) return a;
        if (is_nan(a.val)) return a;  // only element 0 can be a kept NaN
        if (is_nan(b.val)) return b;
        if (beats(b.val, a.val) || (b.val == a.val && b.idx < a.idx)) return b;
        return a;
    }
    DEVICE static State shfl(State s, int lane_mask) {
        State r;
        r.val = warp_shfl_xor(s.val, lane_mask);
        r.idx = warp_shfl_xor(s.idx, lane_mask);
        return r;
    }
    // One element, in increasing r per thread: taken only when strictly better (ties keep the
    // first; a NaN never beats, nor is beaten). From the identity, elements equal to the worst
    // value (and NaNs) are never taken: that state loses every combine, and such an element
    // can only be the answer when element 0 is too (or is a NaN), which `seed` has taken.
    template <typename T> DEVICE static State step(State s, T x, u64 r) {
        const V v = cvt<V>(x);
        if (beats(v, s.val)) { s.val = v; s.idx = (u32)r; }
        return s;
    }
    // Element 0 of the reduction (at `first`), taken whatever it is: the thread that visits
    // it calls this before its loop (the loop sees it again and keeps it).
    template <typename T> DEVICE static State seed(State, const T* first) {
        State s;
        s.val = cvt<V>(first[0]);
        s.idx = 0;
        return s;
    }
};

// Folds visited elements into a running state (for block_visit).
template <typename Op> struct StepInto {
    typename Op::State acc;
    template <typename T> DEVICE void operator()(T x, u64 r) { acc = Op::step(acc, x, r); }
};

DEVICE u64 red_offset(const KernelLayout& red, u64 r) {
    if (red.ndim == 0) return 0;
    if (red.ndim == 1) return r * red.strides[0];
    return layout_offset(red, r);
}

template <typename T, typename Op, typename Out, typename Fin>
DEVICE void reduce_impl(const T* in, Out* out, typename Op::State* partials, u64 n_out, u64 red_len,
                        const KernelLayout& kept, const KernelLayout& red, u64 chunk_len, Fin fin) {
    typedef typename Op::State S;
    const u64 chunk = blockIdx.y;
    const u64 r0 = chunk * chunk_len;
    const u64 r1 = r0 + chunk_len < red_len ? r0 + chunk_len : red_len;
    for (u64 o = blockIdx.x; o < n_out; o += gridDim.x) {
        const T* base = in + layout_offset(kept, o);
        S acc = Op::identity();
        // Thread 0 visits element 0 first on every path below.
        if (r0 == 0 && r1 > 0 && threadIdx.x == 0) acc = Op::seed(acc, base);
        if (red.ndim <= 1 && (red.ndim == 0 || red.strides[0] == 1)) {
            StepInto<Op> visit;
            visit.acc = acc;
            block_visit(base, r0, r1, visit);
            acc = visit.acc;
        } else {
            for (u64 r = r0 + threadIdx.x; r < r1; r += blockDim.x)
                acc = Op::step(acc, base[red_offset(red, r)], r);
        }
        acc = block_combine_first<Op>(acc);
        if (threadIdx.x == 0) {
            if (gridDim.y == 1) out[o] = fin(acc);
            else partials[o * gridDim.y + chunk] = acc;
        }
    }
}

// A thread an output, the reduction's elements in order (element 0 seeded first, as thread 0
// of the block path does): for many outputs whose reduction is short or not contiguous (a sum
// over dim -2), where neighbouring threads then read neighbouring addresses and a block an
// output would read one element a thread at the reduction's stride.
template <typename T, typename Op, typename Out, typename Fin>
DEVICE void columns_impl(const T* in, Out* out, u64 n_out, u64 red_len, const KernelLayout& kept,
                         const KernelLayout& red, Fin fin) {
    for (u64 o = grid_tid(); o < n_out; o += grid_threads()) {
        const T* base = in + layout_offset(kept, o);
        typename Op::State acc = Op::seed(Op::identity(), base);
        for (u64 r = 0; r < red_len; ++r) acc = Op::step(acc, base[red_offset(red, r)], r);
        out[o] = fin(acc);
    }
}

template <typename Op, typename Out, typename Fin>
DEVICE void finish_impl(const typename Op::State* partials, Out* out, u64 n_out, u64 chunks, Fin fin) {
    typedef typename Op::State S;
    for (u64 o = blockIdx.x; o < n_out; o += gridDim.x) {
        S acc = Op::identity();
        for (u64 c = threadIdx.x; c < chunks; c += blockDim.x) {
            // chunks are visited in increasing order per thread: ties keep the lower index
            acc = Op::combine(acc, partials[o * chunks + c]);
        }
        acc = block_combine_first<Op>(acc);
        if (threadIdx.x == 0) out[o] = fin(acc);
    }
}

template <typename T> struct FinSum {
    template <typename S> DEVICE T operator()(S s) const { return cvt<T>(s); }
};
template <typename T> struct FinVal {
    template <typename S> DEVICE T operator()(S s) const { return cvt<T>(s.val); }
};
struct FinIdx {
    template <typename S> DEVICE u32 operator()(S s) const { return s.idx; }
};

// Integer sums: truncate the wrapped unsigned accumulator (cvt would saturate).
#define INT_SUM_FIN(T) \
    template <> struct FinSum<T> { template <typename S> DEVICE T operator()(S s) const { return (T)s; } };
INT_SUM_FIN(u8) INT_SUM_FIN(u32) INT_SUM_FIN(i16) INT_SUM_FIN(i32) INT_SUM_FIN(i64)

// REDUCE_PARAMS(T, OUT), FINISH_PARAMS(OUT), COLUMNS_PARAMS(T, OUT): the parameter lists
// declared in rocm-kernels (`reduce::{ReduceParams, FinishParams, ColumnsParams}`); the partial
// states are untyped there (their type is the op's).
#define REDUCE_OP(OP, NAME, T, OPT, OUT, FIN)                                                    \
    KERNEL void OP##_##NAME(REDUCE_PARAMS(T, OUT)) {                                             \
        reduce_impl<T, OPT>(input, out, (OPT::State*)partials, n_out, red_len, kept, red,        \
                            chunk_len, FIN());                                                   \
    }                                                                                            \
    KERNEL void OP##_finish_##NAME(FINISH_PARAMS(OUT)) {                                         \
        finish_impl<OPT>((const OPT::State*)partials, out, n_out, chunks, FIN());                \
    }                                                                                            \
    KERNEL void OP##_columns_##NAME(COLUMNS_PARAMS(T, OUT)) {                                    \
        columns_impl<T, OPT>(input, out, n_out, red_len, kept, red, FIN());                      \
    }
#define REDUCE_ALL(NAME, T)                                                                      \
    REDUCE_OP(sum, NAME, T, SumOp<typename SumAcc<T>::type>, T, FinSum<T>)                      \
    REDUCE_OP(min, NAME, T, MinMaxOp<typename CmpVal<T>::type COMMA false>, T, FinVal<T>)       \
    REDUCE_OP(max, NAME, T, MinMaxOp<typename CmpVal<T>::type COMMA true>, T, FinVal<T>)        \
    REDUCE_OP(argmin, NAME, T, MinMaxOp<typename CmpVal<T>::type COMMA false>, u32, FinIdx)     \
    REDUCE_OP(argmax, NAME, T, MinMaxOp<typename CmpVal<T>::type COMMA true>, u32, FinIdx)
#define COMMA ,
CANDLE_ROCM_FOR_EACH_DTYPE(REDUCE_ALL)

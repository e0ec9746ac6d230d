// map.h: grid-stride elementwise loops shared by the unary, binary, cast and ternary families.
// Contiguous operands move up to 16 bytes per access when every pointer sits at the same
// position inside a pack (a scalar head brings them to the boundary, a scalar tail finishes);
// strided operands decode their offsets through layout_offset. The output is contiguous.
#pragma once

DEVICE bool layout_is_contiguous(const KernelLayout& l) {
    return l.ndim == 0 || (l.ndim == 1 && l.strides[0] == 1);
}
DEVICE u64 grid_tid() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
DEVICE u64 grid_threads() { return (u64)gridDim.x * blockDim.x; }

// Raw storage of a pack of BYTES bytes, so loads and stores are single vector accesses.
template <int BYTES> struct RawOf;
template <> struct RawOf<16> { typedef Raw16 type; };
template <> struct RawOf<8> { typedef u64 type; };
template <> struct RawOf<4> { typedef u32 type; };
template <> struct RawOf<2> { typedef u16 type; };
template <> struct RawOf<1> { typedef u8 type; };

template <typename T, int N> union Pack {
    typename RawOf<sizeof(T) * N>::type raw;
    T v[N];
    DEVICE Pack() {}
};

// Elements per pack for an op reading A and writing B: 16 bytes of the wider one.
template <typename A, typename B> struct PackWidth {
    static constexpr int n = 16 / (sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B));
};

template <int N, typename T> DEVICE u64 pack_phase(const T* p) { return ((usize)p / sizeof(T)) % N; }

// out[i] = f(in[i]) for the n elements of layout l.
template <typename In, typename Out, typename F>
DEVICE void map1(const In* in, Out* out, u64 n, const KernelLayout& l, const F& f) {
    const u64 tid = grid_tid(), nthreads = grid_threads();
    if (!layout_is_contiguous(l)) {
        for (u64 i = tid; i < n; i += nthreads) out[i] = f(in[layout_offset(l, i)]);
        return;
    }
    const In* src = in + l.start;
    constexpr int N = PackWidth<In, Out>::n;
    const u64 phase = pack_phase<N>(src);
    if (N == 1 || phase != pack_phase<N>(out)) {
        for (u64 i = tid; i < n; i += nthreads) out[i] = f(src[i]);
        return;
    }
    u64 head = (N - phase) % N;
    if (head > n) head = n;
    for (u64 i = tid; i < head; i += nthreads) out[i] = f(src[i]);
    const u64 packs = (n - head) / N;
    typedef typename RawOf<sizeof(In) * N>::type RawIn;
    typedef typename RawOf<sizeof(Out) * N>::type RawOut;
    const RawIn* ps = reinterpret_cast<const RawIn*>(src + head);
    RawOut* po = reinterpret_cast<RawOut*>(out + head);
    for (u64 p = tid; p < packs; p += nthreads) {
        Pack<In, N> a;
        a.raw = ps[p];
        Pack<Out, N> r;
#pragma unroll
        for (int j = 0; j < N; ++j) r.v[j] = f(a.v[j]);
        po[p] = r.raw;
    }
    for (u64 i = head + packs * N + tid; i < n; i += nthreads) out[i] = f(src[i]);
}

// Whether element runs [i, i + N) with i a multiple of N sit at off(i) + k * step for one step
// of 0 (broadcast) or 1 (contiguous, N-aligned), so a pack costs one offset decode. Returns the
// step, or -1 when the layout has no such runs.
template <int N> DEVICE int pack_step(const KernelLayout& l) {
    if (l.ndim == 0) return 0;
    const u64 inner = l.strides[l.ndim - 1];
    if (inner > 1 || l.dims[l.ndim - 1] % N != 0) return -1;
    if (inner == 1) {
        if (l.start % N != 0) return -1;
        for (u32 d = 0; d + 1 < l.ndim; ++d)
            if (l.strides[d] % N != 0) return -1;
    }
    return (int)inner;
}

template <typename T, int N>
DEVICE void load_pack(const T* base, u64 off, int step, Pack<T, N>& p) {
    if (step == 1) {
        p.raw = *reinterpret_cast<const typename RawOf<sizeof(T) * N>::type*>(base + off);
    } else {
        const T v = base[off];
#pragma unroll
        for (int j = 0; j < N; ++j) p.v[j] = v;
    }
}

// out[i] = f(a[i], b[i]) for two operands of the same shape (broadcasts have stride 0).
template <typename In, typename Out, typename F>
DEVICE void map2(const In* a, const In* b, Out* out, u64 n, const KernelLayout& la,
                 const KernelLayout& lb, const F& f) {
    const u64 tid = grid_tid(), nthreads = grid_threads();
    constexpr int N = PackWidth<In, Out>::n;
    if (!layout_is_contiguous(la) || !layout_is_contiguous(lb)) {
        // Broadcasts such as (r, c) + (1, c) or (r, c) * (r, 1): one decode per pack.
        const int step_a = pack_step<N>(la), step_b = pack_step<N>(lb);
        if (N > 1 && step_a >= 0 && step_b >= 0 && n % N == 0 && pack_phase<N>(a) == 0 &&
            pack_phase<N>(b) == 0 && pack_phase<N>(out) == 0) {
            typedef typename RawOf<sizeof(Out) * N>::type RawOut;
            RawOut* po = reinterpret_cast<RawOut*>(out);
            for (u64 p = tid; p < n / N; p += nthreads) {
                const u64 i = p * N;
                Pack<In, N> x, y;
                load_pack<In, N>(a, layout_offset(la, i), step_a, x);
                load_pack<In, N>(b, layout_offset(lb, i), step_b, y);
                Pack<Out, N> r;
#pragma unroll
                for (int j = 0; j < N; ++j) r.v[j] = f(x.v[j], y.v[j]);
                po[p] = r.raw;
            }
            return;
        }
        for (u64 i = tid; i < n; i += nthreads)
            out[i] = f(a[layout_offset(la, i)], b[layout_offset(lb, i)]);
        return;
    }
    const In* sa = a + la.start;
    const In* sb = b + lb.start;
    const u64 phase = pack_phase<N>(sa);
    if (N == 1 || phase != pack_phase<N>(sb) || phase != pack_phase<N>(out)) {
        for (u64 i = tid; i < n; i += nthreads) out[i] = f(sa[i], sb[i]);
        return;
    }
    u64 head = (N - phase) % N;
    if (head > n) head = n;
    for (u64 i = tid; i < head; i += nthreads) out[i] = f(sa[i], sb[i]);
    const u64 packs = (n - head) / N;
    typedef typename RawOf<sizeof(In) * N>::type RawIn;
    typedef typename RawOf<sizeof(Out) * N>::type RawOut;
    const RawIn* pa = reinterpret_cast<const RawIn*>(sa + head);
    const RawIn* pb = reinterpret_cast<const RawIn*>(sb + head);
    RawOut* po = reinterpret_cast<RawOut*>(out + head);
    for (u64 p = tid; p < packs; p += nthreads) {
        Pack<In, N> x, y;
        x.raw = pa[p];
        y.raw = pb[p];
        Pack<Out, N> r;
#pragma unroll
        for (int j = 0; j < N; ++j) r.v[j] = f(x.v[j], y.v[j]);
        po[p] = r.raw;
    }
    for (u64 i = head + packs * N + tid; i < n; i += nthreads) out[i] = f(sa[i], sb[i]);
}

// Wrapping integer arithmetic without C++'s signed-overflow and promotion traps: computed in
// an unsigned type at least 32 bits wide, truncated back.
template <typename T> struct Wide { typedef u32 type; };
template <> struct Wide<i64> { typedef u64 type; };
template <typename T> DEVICE bool is_signed_int() { return (T)(-1) < (T)0; }

// Calls f(value, index) for the elements [begin, end) of a unit-stride run, the calling thread
// taking every blockDim.x-th element (or 16-byte pack of elements when `run + begin` is
// 16-byte aligned). Each thread sees its indices in increasing order. Packs are loaded
// VISIT_BATCH at a time before any is folded, so a thread keeps several loads in flight
// (the folds of a reduction form one dependent chain).
#define VISIT_BATCH 4
template <typename T, typename F>
DEVICE void block_visit(const T* run, u64 begin, u64 end, F& f) {
    constexpr int N = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    typedef typename RawOf<sizeof(T) * N>::type Raw;
    if (N > 1 && ((usize)(run + begin) & 15) == 0) {
        const u64 packs = (end - begin) / N;
        const Raw* p = reinterpret_cast<const Raw*>(run + begin);
        const u64 stride = blockDim.x;
        u64 k = threadIdx.x;
        for (; k + (VISIT_BATCH - 1) * stride < packs; k += VISIT_BATCH * stride) {
            Pack<T, N> v[VISIT_BATCH];
#pragma unroll
            for (int u = 0; u < VISIT_BATCH; ++u) v[u].raw = p[k + u * stride];
#pragma unroll
            for (int u = 0; u < VISIT_BATCH; ++u)
#pragma unroll
                for (int j = 0; j < N; ++j) f(v[u].v[j], begin + (k + u * stride) * N + j);
        }
        for (; k < packs; k += stride) {
            Pack<T, N> v;
            v.raw = p[k];
#pragma unroll
            for (int j = 0; j < N; ++j) f(v.v[j], begin + k * N + j);
        }
        for (u64 i = begin + packs * N + threadIdx.x; i < end; i += blockDim.x) f(run[i], i);
        return;
    }
    for (u64 i = begin + threadIdx.x; i < end; i += blockDim.x) f(run[i], i);
}

// Element types of the byte-moving kernels, by width: M(name, raw type).
#define CANDLE_ROCM_FOR_EACH_WIDTH(M)                                                \
    CANDLE_ROCM_KEEP(w1)(M(w1, u8)) CANDLE_ROCM_KEEP(w2)(M(w2, u16))                 \
    CANDLE_ROCM_KEEP(w4)(M(w4, u32)) CANDLE_ROCM_KEEP(w8)(M(w8, u64))                \
    CANDLE_ROCM_KEEP(w16)(M(w16, Raw16))

// out[i] = f(run[i], i) for i in [0, n) of a unit-stride row, the calling thread taking every
// blockDim.x-th element, or 16-byte pack when `run` and `out` are both 16-byte aligned (rows
// of 16-bit types are then read and written 8 elements per access).
template <typename T, typename F>
DEVICE void block_map_row(const T* run, T* out, u64 n, F& f) {
    constexpr int N = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    typedef typename RawOf<sizeof(T) * N>::type Raw;
    if (N > 1 && (((usize)run | (usize)out) & 15) == 0) {
        const u64 packs = n / N;
        const Raw* p = reinterpret_cast<const Raw*>(run);
        Raw* q = reinterpret_cast<Raw*>(out);
        for (u64 k = threadIdx.x; k < packs; k += blockDim.x) {
            Pack<T, N> v, r;
            v.raw = p[k];
#pragma unroll
            for (int j = 0; j < N; ++j) r.v[j] = f(v.v[j], k * N + j);
            q[k] = r.raw;
        }
        for (u64 i = packs * N + threadIdx.x; i < n; i += blockDim.x) out[i] = f(run[i], i);
        return;
    }
    for (u64 i = threadIdx.x; i < n; i += blockDim.x) out[i] = f(run[i], i);
}


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
struct alignas(16) Raw16 { u64 lo, hi; };
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

// out[i] = f(a[i], b[i]) for two operands of the same shape (broadcasts have stride 0).
template <typename In, typename Out, typename F>
DEVICE void map2(const In* a, const In* b, Out* out, u64 n, const KernelLayout& la,
                 const KernelLayout& lb, const F& f) {
    const u64 tid = grid_tid(), nthreads = grid_threads();
    if (!layout_is_contiguous(la) || !layout_is_contiguous(lb)) {
        for (u64 i = tid; i < n; i += nthreads)
            out[i] = f(a[layout_offset(la, i)], b[layout_offset(lb, i)]);
        return;
    }
    const In* sa = a + la.start;
    const In* sb = b + lb.start;
    constexpr int N = PackWidth<In, Out>::n;
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

// fill.hip: fill with a constant, iota (start + i * step), contiguous copy, strided copy,
// constant set through a strided layout, and the 2-D block copy behind cat / slice_set.
// Contiguous paths move 16 bytes per thread when the pointers allow it.

struct alignas(16) Vec16 { u64 lo, hi; };

template <typename T>
DEVICE bool aligned16(const T* p) { return ((usize)p & 15) == 0; }

template <typename T>
DEVICE void fill_impl(T* out, T value, u64 n) {
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    constexpr u64 per_vec = sizeof(Vec16) / sizeof(T);
    if (per_vec > 1 && aligned16(out)) {
        Vec16 pattern;
        T* lanes = reinterpret_cast<T*>(&pattern);
        for (u64 j = 0; j < per_vec; ++j) lanes[j] = value;
        const u64 nvec = n / per_vec;
        Vec16* vout = reinterpret_cast<Vec16*>(out);
        for (u64 v = tid; v < nvec; v += nthreads) vout[v] = pattern;
        for (u64 i = nvec * per_vec + tid; i < n; i += nthreads) out[i] = value;
    } else {
        for (u64 i = tid; i < n; i += nthreads) out[i] = value;
    }
}

template <typename T>
DEVICE void iota_impl(T* out, T start, T step, u64 n) {
    typedef typename Acc<T>::type A;
    const A a0 = cvt<A>(start);
    const A d = cvt<A>(step);
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += nthreads) {
        out[i] = cvt<T>(a0 + (A)i * d);
    }
}

template <typename T>
DEVICE void copy_impl(const T* src, T* dst, u64 n) {
    const u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 nthreads = (u64)gridDim.x * blockDim.x;
    constexpr u64 per_vec = sizeof(Vec16) / sizeof(T);
    if (per_vec > 1 && aligned16(src) && aligned16(dst)) {
        const u64 nvec = n / per_vec;
        const Vec16* vs = reinterpret_cast<const Vec16*>(src);
        Vec16* vd = reinterpret_cast<Vec16*>(dst);
        for (u64 v = tid; v < nvec; v += nthreads) vd[v] = vs[v];
        for (u64 i = nvec * per_vec + tid; i < n; i += nthreads) dst[i] = src[i];
    } else {
        for (u64 i = tid; i < n; i += nthreads) dst[i] = src[i];
    }
}

// dst[i] = src[layout_offset(src_layout, i)] for the n elements of src_layout, dst contiguous.
struct Identity { template <typename T> DEVICE T operator()(T x) const { return x; } };
template <typename T>
DEVICE void copy_strided_impl(const T* src, T* dst, u64 n, const KernelLayout& src_layout) {
    map1(src, dst, n, src_layout, Identity());
}

// dst[layout_offset(l, i)] = value for the n elements of l.
template <typename T>
DEVICE void const_set_impl(T* dst, T value, u64 n, const KernelLayout& l) {
    if (layout_is_contiguous(l)) {
        fill_impl<T>(dst + l.start, value, n);
        return;
    }
    const u64 nthreads = grid_threads();
    for (u64 i = grid_tid(); i < n; i += nthreads) dst[layout_offset(l, i)] = value;
}

// Candle's copy2d, and its cat of several such blocks in one launch: up to COPY2D_MAX_BLOCKS
// blocks of the same `rows`, block b copying rows x cols[b] units from src[b] (rows
// src_stride[b] apart) to dst + dst_col[b] (rows dst_stride apart). Units are the widest
// (up to 16 bytes) that the host found to divide every size, stride and offset, so one entry
// per width serves every dtype. blockIdx.z picks the block; columns run over x, rows over y,
// both grid-stride, so no index is divided.
#define COPY2D_MAX_BLOCKS 8
struct Copy2dBlocks {
    u64 src[COPY2D_MAX_BLOCKS];
    u64 cols[COPY2D_MAX_BLOCKS];
    u64 src_stride[COPY2D_MAX_BLOCKS];
    u64 dst_col[COPY2D_MAX_BLOCKS];
};

template <typename T>
DEVICE void copy2d_impl(T* dst, u64 rows, u64 dst_stride, const Copy2dBlocks& blocks) {
    const u32 b = blockIdx.z;
    const T* src = reinterpret_cast<const T*>(blocks.src[b]);
    const u64 cols = blocks.cols[b], src_stride = blocks.src_stride[b];
    dst += blocks.dst_col[b];
    const u64 col0 = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 col_step = (u64)gridDim.x * blockDim.x;
    for (u64 r = blockIdx.y; r < rows; r += gridDim.y) {
        const T* s = src + r * src_stride;
        T* d = dst + r * dst_stride;
        for (u64 c = col0; c < cols; c += col_step) d[c] = s[c];
    }
}

// Batched 2-D transpose into a contiguous (batch, d0, d1) output from a source whose d0 axis
// has stride 1: out[b][i0][i1] = src[start + b * s_batch + i0 + i1 * s1]. A 32 x 32 tile goes
// through shared memory so both the reads (along i0) and the writes (along i1) coalesce.
#define TRANSPOSE_TILE 32
#define TRANSPOSE_ROWS 8
template <typename T>
DEVICE void transpose_impl(const T* src, T* dst, u64 batch, u64 d0, u64 d1, u64 s_batch, u64 s1,
                           u64 start) {
    __shared__ T tile[TRANSPOSE_TILE][TRANSPOSE_TILE + 1];
    const u64 i0b = (u64)blockIdx.x * TRANSPOSE_TILE, i1b = (u64)blockIdx.y * TRANSPOSE_TILE;
    const u32 tx = threadIdx.x, ty = threadIdx.y;
    for (u64 b = blockIdx.z; b < batch; b += gridDim.z) {
        const T* s = src + start + b * s_batch;
        T* d = dst + b * d0 * d1;
        for (u32 j = ty; j < TRANSPOSE_TILE; j += TRANSPOSE_ROWS) {
            const u64 i0 = i0b + tx, i1 = i1b + j;
            if (i0 < d0 && i1 < d1) tile[j][tx] = s[i0 + i1 * s1];
        }
        __syncthreads();
        for (u32 j = ty; j < TRANSPOSE_TILE; j += TRANSPOSE_ROWS) {
            const u64 i0 = i0b + j, i1 = i1b + tx;
            if (i0 < d0 && i1 < d1) d[i0 * d1 + i1] = tile[tx][j];
        }
        __syncthreads();
    }
}

// The same transpose moving pairs of elements per access (a 64 x 64 tile, each thread two
// neighbours in both phases), for elements of at most 4 bytes: the host uses it when every
// pair is aligned (even start, source stride, batch stride, d1 and destination offset).
template <typename T> struct alignas(2 * sizeof(T)) PairOf { T a, b; };
template <typename T>
DEVICE void transpose_pairs_impl(const T* src, T* dst, u64 batch, u64 d0, u64 d1, u64 s_batch,
                                 u64 s1, u64 start) {
    __shared__ T tile[64][65];
    const u64 i0b = (u64)blockIdx.x * 64, i1b = (u64)blockIdx.y * 64;
    const u32 tx = threadIdx.x, ty = threadIdx.y;
    for (u64 b = blockIdx.z; b < batch; b += gridDim.z) {
        const T* s = src + start + b * s_batch;
        T* d = dst + b * d0 * d1;
        for (u32 j = ty; j < 64; j += 8) {
            const u64 i1 = i1b + j, i0 = i0b + 2 * tx;
            if (i1 < d1) {
                if (i0 + 1 < d0) {
                    const PairOf<T> p = *reinterpret_cast<const PairOf<T>*>(s + i0 + i1 * s1);
                    tile[j][2 * tx] = p.a;
                    tile[j][2 * tx + 1] = p.b;
                } else if (i0 < d0) {
                    tile[j][2 * tx] = s[i0 + i1 * s1];
                }
            }
        }
        __syncthreads();
        for (u32 j = ty; j < 64; j += 8) {
            const u64 i0 = i0b + j, i1 = i1b + 2 * tx;
            if (i0 < d0 && i1 < d1) {  // d1 is even: i1 + 1 < d1 too
                PairOf<T> p;
                p.a = tile[2 * tx][j];
                p.b = tile[2 * tx + 1][j];
                *reinterpret_cast<PairOf<T>*>(d + i0 * d1 + i1) = p;
            }
        }
        __syncthreads();
    }
}

#define FILL_ENTRY_POINTS(NAME, T)                                                              \
    KERNEL void fill_##NAME(T* out, T value, u64 n) { fill_impl<T>(out, value, n); }             \
    KERNEL void iota_##NAME(T* out, T start, T step, u64 n) { iota_impl<T>(out, start, step, n); } \
    KERNEL void copy_##NAME(const T* src, T* dst, u64 n) { copy_impl<T>(src, dst, n); }          \
    KERNEL void copy_strided_##NAME(COPY_STRIDED_PARAMS(T)) {                                    \
        copy_strided_impl<T>(src, dst, n, src_layout);                                           \
    }                                                                                            \
    KERNEL void const_set_##NAME(CONST_SET_PARAMS(T)) {                                          \
        const_set_impl<T>(dst, value, n, l);                                                     \
    }                                                                                            \
    KERNEL void transpose_##NAME(TRANSPOSE_PARAMS(T)) {                                          \
        transpose_impl<T>(src, dst, batch, d0, d1, s_batch, s1, start);                          \
    }                                                                                            \
    KERNEL void transpose_pairs_##NAME(TRANSPOSE_PARAMS(T)) {                                    \
        transpose_pairs_impl<T>(src, dst, batch, d0, d1, s_batch, s1, start);                    \
    }

#define COPY2D_ENTRY_POINTS(W, R)                                                                 \
    KERNEL void copy2d_##W(COPY2D_PARAMS(R)) {                                                   \
        copy2d_impl<R>(dst, rows, dst_stride, blocks);                                           \
    }

CANDLE_ROCM_FOR_EACH_DTYPE(FILL_ENTRY_POINTS)
CANDLE_ROCM_FOR_EACH_WIDTH(COPY2D_ENTRY_POINTS)

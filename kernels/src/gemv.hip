// gemv.hip: dense products of a few activation rows by a matrix read along k, the shape of a
// decode step's linear layers (x . w^T with w row-major) and of attention scores over a cache:
// y[b][r][j] = sum_i x[b][r][i] * w[b][j][i], rows r < `rows` <= GEMV_MAX_ROWS, f32 sums.
//
// A group of `group` lanes (a power of two dividing the warp, picked by the host so that short
// rows do not leave lanes idle) takes weight row j. Each lane loads 16-byte packs of the row
// (GEMV_UNROLL of them before the first multiply, so several loads are in flight) and the same
// packs of each activation row; the group's butterfly adds the lanes' sums. The weights are
// read once. `packed` (set by the host when k and every row start allow it) selects the 16-byte
// path, else the values are read one by one. A warp's groups walk the rows in step, so every
// lane of a wavefront reaches each shuffle. `gemv1` is the one-row form: one accumulator, fewer
// registers, more warps on a multiprocessor.

#define GEMV_MAX_ROWS 8
#define GEMV_UNROLL 4

struct GemvShape {
    u64 n, k, batch;
    u64 w_ld, w_batch, x_ld, x_batch, y_ld, y_batch;
    u32 rows, group, packed, out_f32;
};

template <typename T, int N>
DEVICE void gemv_fma(const Pack<T, N>& w, const T* x, u64 pack, float& acc) {
    Pack<T, N> xp;
    xp.raw = reinterpret_cast<const typename RawOf<16>::type*>(x)[pack];
#pragma unroll
    for (int e = 0; e < N; ++e) acc += cvt<float>(w.v[e]) * cvt<float>(xp.v[e]);
}

template <int R, typename T>
DEVICE void gemv_impl(const T* w, const T* x, void* y, const GemvShape s) {
    constexpr int N = 16 / sizeof(T);
    typedef typename RawOf<16>::type Raw;
    const u32 group = s.group;
    const u32 lane = threadIdx.x % group;
    const u64 per_warp = warpSize / group;
    const u64 warp = (u64)blockIdx.x * (blockDim.x / warpSize) + threadIdx.x / warpSize;
    const u64 warps = (u64)gridDim.x * (blockDim.x / warpSize);
    const u64 total = s.batch * s.n;
    for (u64 first = warp * per_warp; first < total; first += warps * per_warp) {
        const u64 g = first + (threadIdx.x % warpSize) / group;
        const bool live = g < total;
        const u64 b = live ? g / s.n : 0, j = live ? g - b * s.n : 0;
        const T* wr = w + b * s.w_batch + j * s.w_ld;
        const T* xb = x + b * s.x_batch;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
        if (live && s.packed) {
            const u64 packs = s.k / N;
            const Raw* wp = reinterpret_cast<const Raw*>(wr);
            u64 p = lane;
            for (; p + (GEMV_UNROLL - 1) * group < packs; p += GEMV_UNROLL * group) {
                Pack<T, N> wv[GEMV_UNROLL];
#pragma unroll
                for (int u = 0; u < GEMV_UNROLL; ++u) wv[u].raw = wp[p + u * group];
#pragma unroll
                for (int u = 0; u < GEMV_UNROLL; ++u)
#pragma unroll
                    for (int r = 0; r < R; ++r)
                        if (r < (int)s.rows) gemv_fma(wv[u], xb + r * s.x_ld, p + u * group, acc[r]);
            }
            for (; p < packs; p += group) {
                Pack<T, N> wv;
                wv.raw = wp[p];
#pragma unroll
                for (int r = 0; r < R; ++r)
                    if (r < (int)s.rows) gemv_fma(wv, xb + r * s.x_ld, p, acc[r]);
            }
        } else if (live) {
            for (u64 i = lane; i < s.k; i += group) {
                const float wv = cvt<float>(wr[i]);
#pragma unroll
                for (int r = 0; r < R; ++r)
                    if (r < (int)s.rows) acc[r] += wv * cvt<float>(xb[r * s.x_ld + i]);
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (r >= (int)s.rows) break;
            const float sum = warp_combine<SumOf<float> >(acc[r], group);
            if (live && lane == 0) {
                const u64 at = b * s.y_batch + r * s.y_ld + j;
                if (s.out_f32) ((float*)y)[at] = sum;
                else ((T*)y)[at] = cvt<T>(sum);
            }
        }
    }
}

// The arguments, in this order: w, x, y, then n k batch w_ld w_batch x_ld x_batch y_ld y_batch
// (u64, elements), then rows group packed out_f32 (u32).
#define GEMV_ARGS(T)                                                                              \
    const T *w, const T *x, void *y, u64 n, u64 k, u64 batch, u64 w_ld, u64 w_batch, u64 x_ld, \
        u64 x_batch, u64 y_ld, u64 y_batch, u32 rows, u32 group, u32 packed, u32 out_f32
#define GEMV_SHAPE {n, k, batch, w_ld, w_batch, x_ld, x_batch, y_ld, y_batch, rows, group, packed, out_f32}
#define GEMV_ENTRIES(NAME, T)                                                                     \
    KERNEL void gemv_##NAME(GEMV_ARGS(T)) {                                                       \
        const GemvShape s = GEMV_SHAPE;                                                           \
        gemv_impl<GEMV_MAX_ROWS, T>(w, x, y, s);                                                  \
    }                                                                                             \
    KERNEL void gemv1_##NAME(GEMV_ARGS(T)) {                                                      \
        const GemvShape s = GEMV_SHAPE;                                                           \
        gemv_impl<1, T>(w, x, y, s);                                                              \
    }
CANDLE_ROCM_KEEP(bf16)(GEMV_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(GEMV_ENTRIES(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(GEMV_ENTRIES(f32, float))

// gemv.hip: one activation row times a matrix read along k, the shape of a decode step's linear
// layers (x . w^T with w row-major) and of attention scores over a cache (q . k^T, a matrix a
// batch entry): y[b][j] = sum_i x[b][i] * w[b][j][i], f32 sums.
//
// A group of `group` lanes (a power of two, picked by the host) takes weight row j: fewer than
// a warp for short rows (several rows a warp), a warp, or several warps of the block for long
// rows over few outputs (the warps' sums meet in shared memory), so that the device holds
// enough loads in flight whatever the shape. Each lane loads 16-byte packs of the row
// (GEMV_UNROLL of them before the first multiply) and the same packs of x; the group's
// butterfly adds the lanes' sums. The weights are read once. `packed` (set by the host when k
// and every row start allow it) selects the 16-byte path, else values are read one by one.
// The grid is at most what the device holds at once; blocks walk the rows in step, so every
// lane of a block reaches each shuffle and barrier. (More activation rows read the weights
// once for all, but the x loads and conversions a weight pack then needs made the kernel
// slower than the BLAS from two rows: bench/results/2026-11-26-h100-gemv.md.)

#define GEMV_UNROLL 4
#define GEMV_BLOCK 256

struct GemvShape {
    u64 n, k, batch;
    u64 w_ld, w_batch, x_batch, y_batch;
    u32 group, packed, out_f32;
};

template <typename T, int N>
DEVICE float gemv_dot(const Pack<T, N>& w, const Pack<T, N>& x) {
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < N; ++e) s += cvt<float>(w.v[e]) * cvt<float>(x.v[e]);
    return s;
}

template <typename T>
DEVICE void gemv_impl(const T* w, const T* x, void* y, const GemvShape s) {
    constexpr int N = 16 / sizeof(T);
    typedef typename RawOf<16>::type Raw;
    __shared__ float partial[GEMV_BLOCK / 32];
    const u32 group = s.group;
    const u32 lane = threadIdx.x % group;
    const u32 rows_per_block = blockDim.x / group;
    const u64 total = s.batch * s.n;
    for (u64 first = (u64)blockIdx.x * rows_per_block; first < total;
         first += (u64)gridDim.x * rows_per_block) {
        const u64 g = first + threadIdx.x / group;
        const bool live = g < total;
        const u64 b = live ? g / s.n : 0, j = live ? g - b * s.n : 0;
        const T* wr = w + b * s.w_batch + j * s.w_ld;
        const T* xb = x + b * s.x_batch;
        float acc = 0.0f;
        if (live && s.packed) {
            const u64 packs = s.k / N;
            const Raw* wp = reinterpret_cast<const Raw*>(wr);
            const Raw* xp = reinterpret_cast<const Raw*>(xb);
            u64 p = lane;
            for (; p + (GEMV_UNROLL - 1) * group < packs; p += GEMV_UNROLL * group) {
                Pack<T, N> wv[GEMV_UNROLL];
#pragma unroll
                for (int u = 0; u < GEMV_UNROLL; ++u) wv[u].raw = wp[p + u * group];
#pragma unroll
                for (int u = 0; u < GEMV_UNROLL; ++u) {
                    Pack<T, N> xv;
                    xv.raw = xp[p + u * group];
                    acc += gemv_dot(wv[u], xv);
                }
            }
            for (; p < packs; p += group) {
                Pack<T, N> wv, xv;
                wv.raw = wp[p];
                xv.raw = xp[p];
                acc += gemv_dot(wv, xv);
            }
        } else if (live) {
            for (u64 i = lane; i < s.k; i += group) acc += cvt<float>(wr[i]) * cvt<float>(xb[i]);
        }
        float sum;
        if (group <= (u32)warpSize) {
            sum = warp_combine<SumOf<float> >(acc, group);
        } else {
            // a row over group / warpSize warps: each warp's sum, then the first lane of the
            // row's first warp adds them in warp order
            const float mine = warp_sum(acc);
            if (threadIdx.x % warpSize == 0) partial[threadIdx.x / warpSize] = mine;
            __syncthreads();
            sum = 0.0f;
            if (lane == 0) {
                const u32 w0 = threadIdx.x / warpSize;
                for (u32 i = 0; i < group / warpSize; ++i) sum += partial[w0 + i];
            }
            __syncthreads();
        }
        if (live && lane == 0) {
            const u64 at = b * s.y_batch + j;
            if (s.out_f32) ((float*)y)[at] = sum;
            else ((T*)y)[at] = cvt<T>(sum);
        }
    }
}

// The arguments, in this order: w, x, y, then n k batch w_ld w_batch x_batch y_batch (u64,
// elements), then group packed out_f32 (u32).
#define GEMV_ENTRIES(NAME, T)                                                                     \
    KERNEL void __launch_bounds__(GEMV_BLOCK)                                                     \
        gemv_##NAME(const T* w, const T* x, void* y, u64 n, u64 k, u64 batch, u64 w_ld,          \
                    u64 w_batch, u64 x_batch, u64 y_batch, u32 group, u32 packed, u32 out_f32) { \
        const GemvShape s = {n, k, batch, w_ld, w_batch, x_batch, y_batch, group, packed, out_f32}; \
        gemv_impl<T>(w, x, y, s);                                                                 \
    }
CANDLE_ROCM_KEEP(bf16)(GEMV_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(GEMV_ENTRIES(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(GEMV_ENTRIES(f32, float))

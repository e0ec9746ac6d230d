// gemm.hip: the portable strided-batched gemm, for devices where no vendor BLAS loads (and
// the tests that pin its answers). BLAS's column-major terms: C (m x n, ldc) = op(A) op(B),
// op(A) m x k and op(B) k x n, each transposed or not; one batch index with a stride per
// matrix (0 broadcasts). Products accumulate in f32 (f64 for f64) one fused multiply-add at a
// time along k, like the vendor BLAS's plain paths; f16 and bf16 results are rounded once.
//
// A block computes a GEMM_TILE_M x GEMM_TILE_N tile of C with GEMM_THREADS threads, each
// thread 4 x 4 outputs; k advances GEMM_TILE_K at a time through shared memory, each
// operand's tile read along its contiguous dimension.

#define GEMM_TILE_M 64
#define GEMM_TILE_N 64
#define GEMM_TILE_K 16
#define GEMM_THREADS 256

DEVICE float gemm_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
DEVICE double gemm_fma(double a, double b, double c) { return __fma_rn(a, b, c); }

template <typename T, typename O>
DEVICE void gemm_impl(GEMM_PARAMS(T, O)) {
    typedef typename Acc<T>::type A;
    // one column of padding keeps the column reads of a warp on distinct banks
    __shared__ A sa[GEMM_TILE_K][GEMM_TILE_M + 1];
    __shared__ A sb[GEMM_TILE_K][GEMM_TILE_N + 1];
    const u32 tid = threadIdx.x;
    const u32 tx = tid % 16, ty = tid / 16;
    const u64 i0 = (u64)blockIdx.x * GEMM_TILE_M;
    const u64 j0 = (u64)blockIdx.y * GEMM_TILE_N;
    for (u64 bi = blockIdx.z; bi < batch; bi += gridDim.z) {
        const T* pa = a + bi * stride_a;
        const T* pb = b + bi * stride_b;
        O* pc = c + bi * stride_c;
        A acc[4][4];
        for (u32 x = 0; x < 4; ++x)
            for (u32 y = 0; y < 4; ++y) acc[x][y] = (A)0;
        for (u64 l0 = 0; l0 < k; l0 += GEMM_TILE_K) {
            for (u32 r = 0; r < GEMM_TILE_M * GEMM_TILE_K / GEMM_THREADS; ++r) {
                const u32 e = tid + r * GEMM_THREADS;
                // consecutive threads walk the dimension that is contiguous in memory
                const u32 ai = trans_a ? e / GEMM_TILE_K : e % GEMM_TILE_M;
                const u32 al = trans_a ? e % GEMM_TILE_K : e / GEMM_TILE_M;
                const u64 gi = i0 + ai, gal = l0 + al;
                A va = (A)0;
                if (gi < m && gal < k) va = cvt<A>(trans_a ? pa[gal + gi * lda] : pa[gi + gal * lda]);
                sa[al][ai] = va;
                const u32 bj = trans_b ? e % GEMM_TILE_N : e / GEMM_TILE_K;
                const u32 bl = trans_b ? e / GEMM_TILE_N : e % GEMM_TILE_K;
                const u64 gj = j0 + bj, gbl = l0 + bl;
                A vb = (A)0;
                if (gj < n && gbl < k) vb = cvt<A>(trans_b ? pb[gj + gbl * ldb] : pb[gbl + gj * ldb]);
                sb[bl][bj] = vb;
            }
            __syncthreads();
            for (u32 l = 0; l < GEMM_TILE_K; ++l) {
                A av[4], bv[4];
                for (u32 x = 0; x < 4; ++x) av[x] = sa[l][tx + 16 * x];
                for (u32 y = 0; y < 4; ++y) bv[y] = sb[l][ty + 16 * y];
                for (u32 x = 0; x < 4; ++x)
                    for (u32 y = 0; y < 4; ++y) acc[x][y] = gemm_fma(av[x], bv[y], acc[x][y]);
            }
            __syncthreads();
        }
        for (u32 y = 0; y < 4; ++y) {
            const u64 j = j0 + ty + 16 * y;
            for (u32 x = 0; x < 4; ++x) {
                const u64 i = i0 + tx + 16 * x;
                if (i < m && j < n) pc[i + j * ldc] = cvt<O>(acc[x][y]);
            }
        }
    }
}

#define GEMM_ENTRY_POINTS(NAME, T) \
    KERNEL __launch_bounds__(GEMM_THREADS) void gemm_##NAME(GEMM_PARAMS(T, T)) { \
        gemm_impl<T, T>(a, b, c, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch, \
                        trans_a, trans_b); \
    }
#define GEMM_F32OUT_ENTRY_POINTS(NAME, T) \
    KERNEL __launch_bounds__(GEMM_THREADS) void gemm_f32out_##NAME(GEMM_PARAMS(T, float)) { \
        gemm_impl<T, float>(a, b, c, m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, \
                            batch, trans_a, trans_b); \
    }

CANDLE_ROCM_KEEP(bf16)(GEMM_ENTRY_POINTS(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(GEMM_ENTRY_POINTS(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(GEMM_ENTRY_POINTS(f32, float))
CANDLE_ROCM_KEEP(f64)(GEMM_ENTRY_POINTS(f64, double))
CANDLE_ROCM_KEEP(bf16)(GEMM_F32OUT_ENTRY_POINTS(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(GEMM_F32OUT_ENTRY_POINTS(f16, f16_t))

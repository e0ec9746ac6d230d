// sort.hip: arg_sort along the last dim of a contiguous (rows, len) tensor, any row length.
//
// Each element becomes a 64-bit key that orders as the value does (the bits of a descending
// sort are inverted) and is paired with its column; pairs compare by (key, column). Every pair
// is distinct, so sorting them is deterministic and equals a stable sort: equal values keep
// their order, as the CPU backend's stable sort keeps them. -0.0 equals +0.0 (as partial_cmp
// says); NaN is the largest value (last ascending, first descending), as in PyTorch.
//
// Rows of up to ARGSORT_TILE elements are sorted by one block in shared memory (bitonic
// network over the padded power of two). Longer rows are cut into tiles sorted that way, then
// merged in passes of doubling run width: each element finds its output position as its rank
// in its own run plus the number of smaller pairs in the partner run (a binary search), so a
// pass is one independent thread per element. The last pass writes the u32 columns.

#define ARGSORT_TILE 2048

DEVICE u64 float_key(float f) {
    if (f != f) return ~0ull;
    if (f == 0.0f) f = 0.0f;  // -0.0 sorts with +0.0
    const u32 b = f32_bits(f);
    return (u64)((b >> 31) ? ~b : (b | 0x80000000u));
}
DEVICE u64 double_key(double d) {
    if (d != d) return ~0ull;
    if (d == 0.0) d = 0.0;
    const u64 b = (u64)__double_as_longlong(d);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

template <typename T> struct SortKey { DEVICE static u64 of(T x) { return float_key(cvt<float>(x)); } };
template <> struct SortKey<double> { DEVICE static u64 of(double x) { return double_key(x); } };
template <> struct SortKey<u8> { DEVICE static u64 of(u8 x) { return x; } };
template <> struct SortKey<u32> { DEVICE static u64 of(u32 x) { return x; } };
#define SIGNED_KEY(T) \
    template <> struct SortKey<T> { DEVICE static u64 of(T x) { return (u64)(i64)x ^ 0x8000000000000000ull; } };
SIGNED_KEY(i16) SIGNED_KEY(i32) SIGNED_KEY(i64)

DEVICE bool pair_less(u64 ka, u32 ia, u64 kb, u32 ib) { return ka < kb || (ka == kb && ia < ib); }

// Sorts tile blockIdx.x % tiles of row blockIdx.x / tiles. Shared memory: p2 keys, p2 columns.
// With `final_out` the sorted columns go there, else the pairs go to keys_out / idx_out.
template <typename T>
DEVICE void argsort_tile_impl(const T* src, u64* keys_out, u32* idx_out, u32* final_out, u64 rows,
                              u64 len, u32 p2, u32 descending) {
    extern __shared__ u64 sort_smem[];
    u64* sk = sort_smem;
    u32* si = reinterpret_cast<u32*>(sort_smem + p2);
    const u64 tiles = (len + ARGSORT_TILE - 1) / ARGSORT_TILE;
    for (u64 b = blockIdx.x; b < rows * tiles; b += gridDim.x) {
        const u64 row = b / tiles, begin = (b % tiles) * ARGSORT_TILE;
        const u64 count = len - begin < p2 ? len - begin : p2;
        const T* x = src + row * len + begin;
        for (u32 j = threadIdx.x; j < p2; j += blockDim.x) {
            if (j < count) {
                const u64 k = SortKey<T>::of(x[j]);
                sk[j] = descending ? ~k : k;
                si[j] = (u32)(begin + j);
            } else {
                sk[j] = ~0ull;  // padding sorts after every element
                si[j] = 0xffffffffu;
            }
        }
        __syncthreads();
        for (u32 k = 2; k <= p2; k <<= 1) {
            for (u32 j = k >> 1; j > 0; j >>= 1) {
                for (u32 q = threadIdx.x; q < p2 / 2; q += blockDim.x) {
                    const u32 lo = 2 * q - (q & (j - 1)), hi = lo + j;
                    const bool up = (lo & k) == 0;
                    if (pair_less(sk[hi], si[hi], sk[lo], si[lo]) == up) {
                        const u64 tk = sk[lo]; sk[lo] = sk[hi]; sk[hi] = tk;
                        const u32 ti = si[lo]; si[lo] = si[hi]; si[hi] = ti;
                    }
                }
                __syncthreads();
            }
        }
        for (u32 j = threadIdx.x; j < count; j += blockDim.x) {
            const u64 at = row * len + begin + j;
            if (final_out) final_out[at] = si[j];
            else { keys_out[at] = sk[j]; idx_out[at] = si[j]; }
        }
        __syncthreads();
    }
}

// Number of pairs in run[0 .. n) that are below (k, i).
DEVICE u64 count_below(const u64* keys, const u32* idx, u64 n, u64 k, u32 i) {
    u64 lo = 0, hi = n;
    while (lo < hi) {
        const u64 mid = (lo + hi) / 2;
        if (pair_less(keys[mid], idx[mid], k, i)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Merges sorted runs of `width` pairwise; with `final_out` only the columns are written.
DEVICE void argsort_merge_impl(const u64* kin, const u32* iin, u64* kout, u32* iout, u32* final_out,
                               u64 rows, u64 len, u64 width) {
    for (u64 g = grid_tid(); g < rows * len; g += grid_threads()) {
        const u64 row = g / len, p = g % len, run = p / width;
        const u64 a0 = (run & ~1ull) * width, b0 = a0 + width;
        const u64 a_len = len - a0 < width ? len - a0 : width;
        const u64 b_len = b0 >= len ? 0 : (len - b0 < width ? len - b0 : width);
        const u64* rk = kin + row * len;
        const u32* ri = iin + row * len;
        const u64 k = rk[p];
        const u32 i = ri[p];
        const u64 pos = (run & 1) ? a0 + (p - b0) + count_below(rk + a0, ri + a0, a_len, k, i)
                                  : p + count_below(rk + b0, ri + b0, b_len, k, i);
        const u64 at = row * len + pos;
        if (final_out) final_out[at] = i;
        else { kout[at] = k; iout[at] = i; }
    }
}

// SORT_TILE_PARAMS(T), SORT_MERGE_PARAMS(T): the parameter lists declared in rocm-kernels
// (`sort::{TileParams, MergeParams}`).
#define SORT_KERNELS(NAME, T)                                                                      \
    KERNEL void argsort_tile_##NAME(SORT_TILE_PARAMS(T)) {                                         \
        argsort_tile_impl(src, keys_out, idx_out, final_out, rows, len, p2, descending);            \
    }                                                                                               \
    KERNEL void argsort_merge_##NAME(SORT_MERGE_PARAMS(T)) {                                       \
        argsort_merge_impl(kin, iin, kout, iout, final_out, rows, len, width);                      \
    }

CANDLE_ROCM_FOR_EACH_DTYPE(SORT_KERNELS)

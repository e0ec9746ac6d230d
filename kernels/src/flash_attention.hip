// flash_attention.hip: softmax(q k^T * scale + bias) v over whole sequences, forward, without
// a (seq x seq) buffer: each query row walks its visible keys once, keeping a running max, sum
// and weighted sum of v (the online softmax), all in f32.
//
// q is [tokens_q, heads, head_dim], k and v are [tokens_k, kv_heads, head_dim], out is q's
// shape (Candle's (batch, seq, heads, head_dim) is tokens = batch x seq); query head h reads kv
// head h / (heads / kv_heads) in place (grouped- and multi-query attention). Sequence b's
// queries are rows cu_q[b] .. cu_q[b + 1] and its keys cu_k[b] .. cu_k[b + 1] (variable
// lengths), or b x seq_q .. and b x seq_k .. where cu_q / cu_k are null.
//
// Query i of a sequence of len_q queries over len_k keys sits at key position
// p = i + len_k - len_q (the queries are the keys' last positions, as flash-attn aligns them)
// and sees keys j with p - window_left <= j <= p + window_right (a negative window: no limit on
// that side; causal is window_right = 0). Its score for key j: s = q.k_j * scale, or with a
// softcap c > 0, c * tanh(q.k_j * scale / c); with ALiBi, s - slope(b, h) * |p - j|. A row that
// sees no key is written as zeros.
//
// Two forms. flash_attention_<dtype> has no matrix units: a warp a query row (FA_ROWS rows a block, so the rows
// of a block read the same keys from cache), each lane holding head_dim / warpSize dims of q
// and of the output; a key's score is the warp's sum of the lanes' products. The accumulator is
// f32 for every dtype. It is the f32 path and the reference of the tiled form.
//
// flash_tiled_d<DMAX>_<dtype> (bf16, f16) runs on the matrix units (compat.h's 16x16x16 tile
// operation): a block of FT_WARPS warps takes FT_ROWS query rows of one head, 16 a warp; key
// and value tiles of BC rows pass through shared memory in two stages (the next tile is copied
// while this one is used: cp.async on NVIDIA); each warp computes its rows' scores
// s = q k^T on the tiles, the online softmax on them in registers (a running max and sum per
// row, in log2 units), and o += p v with p rounded to the dtype (as flash-attention 2 does;
// the sum stays f32). DMAX is the widest head it takes (64, 128, 256): narrower heads are
// padded with zeros.

#define FA_ROWS 8
#define FA_MAX_HEAD_DIM 256
// Dims a lane holds: FA_MAX_HEAD_DIM over the narrowest warp.
#define FA_LANE_DIMS (FA_MAX_HEAD_DIM / 32)

template <typename T>
DEVICE void flash_attention(const T* q, const T* k, const T* v, T* out, const float* alibi, const u32* cu_q,
                            const u32* cu_k, u32 heads, u32 kv_heads, u32 head_dim, u32 seq_q, u32 seq_k,
                            u32 alibi_batch_stride, float scale, float softcap, i32 window_left,
                            i32 window_right) {
    const u32 lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    const u32 b = blockIdx.z, h = blockIdx.y;
    const u32 q0 = cu_q ? cu_q[b] : b * seq_q, len_q = cu_q ? cu_q[b + 1] - q0 : seq_q;
    const u32 k0 = cu_k ? cu_k[b] : b * seq_k, len_k = cu_k ? cu_k[b + 1] - k0 : seq_k;
    const u32 i = blockIdx.x * FA_ROWS + warp;
    if (i >= len_q) return;  // a whole warp: no shuffle below misses a lane
    const u32 kvh = h / (heads / kv_heads);
    const u64 q_row = ((u64)(q0 + i) * heads + h) * head_dim;
    // the row's position among the keys and its visible keys [lo, hi)
    const i64 p = (i64)i + (i64)len_k - (i64)len_q;
    i64 lo = window_left < 0 ? 0 : p - window_left;
    i64 hi = window_right < 0 ? (i64)len_k : p + window_right + 1;
    lo = lo < 0 ? 0 : lo;
    hi = hi > (i64)len_k ? (i64)len_k : hi;
    const float slope = alibi ? alibi[(u64)b * alibi_batch_stride + h] : 0.0f;
    float qd[FA_LANE_DIMS], acc[FA_LANE_DIMS];
#pragma unroll
    for (int t = 0; t < FA_LANE_DIMS; ++t) {
        const u32 e = lane + t * warpSize;
        qd[t] = e < head_dim ? cvt<float>(q[q_row + e]) : 0.0f;
        acc[t] = 0.0f;
    }
    const float neg_inf = m_neg_inf(0.0f);
    float m = neg_inf, l = 0.0f;
    for (i64 j = lo; j < hi; ++j) {
        const u64 kv_row = ((u64)(k0 + j) * kv_heads + kvh) * head_dim;
        float dot = 0.0f;
#pragma unroll
        for (int t = 0; t < FA_LANE_DIMS; ++t) {
            const u32 e = lane + t * warpSize;
            if (e < head_dim) dot += qd[t] * cvt<float>(k[kv_row + e]);
        }
        dot = warp_sum(dot);
        float s = softcap > 0.0f ? softcap * m_tanh(dot * scale / softcap) : dot * scale;
        if (alibi) s -= slope * (float)(p > j ? p - j : j - p);
        const float m_new = s > m ? s : m;
        // m is -inf only before the first key, where l and acc are still 0
        const float rescale = m == neg_inf ? 0.0f : m_exp(m - m_new);
        const float w = m_exp(s - m_new);
        l = l * rescale + w;
#pragma unroll
        for (int t = 0; t < FA_LANE_DIMS; ++t) {
            const u32 e = lane + t * warpSize;
            acc[t] = acc[t] * rescale + (e < head_dim ? w * cvt<float>(v[kv_row + e]) : 0.0f);
        }
        m = m_new;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int t = 0; t < FA_LANE_DIMS; ++t) {
        const u32 e = lane + t * warpSize;
        if (e < head_dim) out[q_row + e] = cvt<T>(acc[t] * inv);
    }
}


#define FT_WARPS 4
#define FT_ROWS 64
static_assert(FT_ROWS == 16 * FT_WARPS, "16 query rows a warp");

// Loads keys and values [kt, kt + BC) of kv head `kvh` into one stage of the tiles: rows past
// the sequence and dims past head_dim are zeros. 16-byte copies that may complete later where
// head_dim and the pointers allow (the caller commits and waits), else element by element.
template <typename T, int DMAX, int BC>
DEVICE void flash_load_tile(T* ks, T* vs, const T* k, const T* v, u64 base, u64 kv_stride, i64 kt, i64 lk,
                            u32 head_dim, bool wide) {
    const u32 LD = DMAX + 8;
    if (wide) {
        for (u32 i = threadIdx.x; i < BC * (DMAX / 8); i += blockDim.x) {
            const u32 r = i / (DMAX / 8), dim = (i % (DMAX / 8)) * 8;
            const bool in = kt + r < lk && dim < head_dim;
            const u64 at = in ? base + (u64)(kt + r) * kv_stride + dim : 0;
            async_copy16(ks + r * LD + dim, k + at, in ? 16 : 0);
            async_copy16(vs + r * LD + dim, v + at, in ? 16 : 0);
        }
    } else {
        for (u32 i = threadIdx.x; i < BC * DMAX; i += blockDim.x) {
            const u32 r = i / DMAX, dim = i % DMAX;
            const bool in = kt + r < lk && dim < head_dim;
            const u64 at = base + (u64)(kt + r) * kv_stride + dim;
            ks[r * LD + dim] = in ? k[at] : cvt<T>(0.0f);
            vs[r * LD + dim] = in ? v[at] : cvt<T>(0.0f);
        }
    }
}

template <typename T, int DMAX, int BC>
DEVICE void flash_tiled(const T* q, const T* k, const T* v, T* out, const float* alibi, const u32* cu_q,
                        const u32* cu_k, u32 heads, u32 kv_heads, u32 head_dim, u32 seq_q, u32 seq_k,
                        u32 alibi_batch_stride, float scale, float softcap, i32 window_left, i32 window_right) {
    const u32 LD = DMAX + 8;  // a tile row's stride: 16-byte rows, rows 4 banks apart
    const u32 TILE = BC * (DMAX + 8);
    // two stages: the next tile loads while this one is used
    __shared__ Raw16 ks_raw[2 * BC * (DMAX + 8) / 8], vs_raw[2 * BC * (DMAX + 8) / 8];
    T* ks = (T*)ks_raw;
    T* vs = (T*)vs_raw;
    const u32 warp = threadIdx.x / warpSize;
#if defined(MMA_C_IS_A)
    T* scratch = nullptr;
#else
    __shared__ Raw16 scratch_raw[FT_WARPS][16 * MMA_SCRATCH_LD / 8];
    T* scratch = (T*)scratch_raw[warp];
#endif
    const u32 b = blockIdx.z, h = blockIdx.y;
    const u32 q0 = cu_q ? cu_q[b] : b * seq_q, len_q = cu_q ? cu_q[b + 1] - q0 : seq_q;
    const u32 k0 = cu_k ? cu_k[b] : b * seq_k, len_k = cu_k ? cu_k[b + 1] - k0 : seq_k;
    const u32 row0 = blockIdx.x * FT_ROWS;
    if (row0 >= len_q) return;  // the whole block
    const u32 kvh = h / (heads / kv_heads);
    const u64 q_stride = (u64)heads * head_dim, kv_stride = (u64)kv_heads * head_dim;
    const u64 kv_base = (u64)k0 * kv_stride + (u64)kvh * head_dim;
    const i64 shift = (i64)len_k - (i64)len_q, lk = (i64)len_k;
    // keys some row of the block sees [blk_lo, blk_hi), and those all its rows see [all_lo, all_hi)
    const u32 last = (row0 + FT_ROWS < len_q ? row0 + FT_ROWS : len_q) - 1;
    const i64 p_first = (i64)row0 + shift, p_last = (i64)last + shift;
    const i64 blk_lo = window_left < 0 ? 0 : (p_first - window_left > 0 ? p_first - window_left : 0);
    const i64 all_lo = window_left < 0 ? 0 : (p_last - window_left > 0 ? p_last - window_left : 0);
    const i64 blk_hi = window_right < 0 ? lk : (p_last + window_right + 1 < lk ? p_last + window_right + 1 : lk);
    const i64 all_hi = window_right < 0 ? lk : (p_first + window_right + 1 < lk ? p_first + window_right + 1 : lk);
    const u32 dsteps = (head_dim + 15) / 16;
    const bool wide = head_dim % 8 == 0 && (usize)k % 16 == 0 && (usize)v % 16 == 0;
    if (blk_lo < blk_hi) flash_load_tile<T, DMAX, BC>(ks, vs, k, v, kv_base, kv_stride, blk_lo, lk, head_dim, wide);
    async_commit();
    u32 qa[DMAX / 16][MMA_A / 2];
    float o[DMAX / 16][MMA_C];
#pragma unroll
    for (u32 t = 0; t < DMAX / 16; ++t) {
#pragma unroll
        for (u32 e = 0; e < MMA_A; e += 2) {
            u32 r, c;
            mma_a_at(e, r, c);
            const u32 row = row0 + warp * 16 + r, dim = t * 16 + c;
            const u64 at = (q0 + row) * q_stride + (u64)h * head_dim + dim;
            const bool in = row < len_q;
            qa[t][e / 2] = mma_word(in && dim < head_dim ? q[at].bits : 0, in && dim + 1 < head_dim ? q[at + 1].bits : 0);
        }
#pragma unroll
        for (u32 e = 0; e < MMA_C; ++e) o[t][e] = 0.0f;
    }
    const float neg_inf = m_neg_inf(0.0f), log2e = 1.4426950408889634f;
    float m[MMA_ROW_SLOTS], l[MMA_ROW_SLOTS];
#pragma unroll
    for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) { m[r] = neg_inf; l[r] = 0.0f; }
    const float slope = alibi ? alibi[(u64)b * alibi_batch_stride + h] : 0.0f;
    u32 stage = 0;
    for (i64 kt = blk_lo; kt < blk_hi; kt += BC, stage ^= 1) {
        // the next tile into the other stage (read two iterations ago, released by the barrier
        // at the end of the last one), then wait for this one
        if (kt + BC < blk_hi)
            flash_load_tile<T, DMAX, BC>(ks + (stage ^ 1) * TILE, vs + (stage ^ 1) * TILE, k, v, kv_base,
                                         kv_stride, kt + BC, lk, head_dim, wide);
        async_commit();
        async_wait<1>();
        __syncthreads();
        const T* kst = ks + stage * TILE;
        const T* vst = vs + stage * TILE;
        // k-steps outside, key tiles inside: consecutive products are independent
        float s[BC / 16][MMA_C];
#pragma unroll
        for (u32 n = 0; n < BC / 16; ++n)
#pragma unroll
            for (u32 e = 0; e < MMA_C; ++e) s[n][e] = 0.0f;
#pragma unroll
        for (u32 t = 0; t < DMAX / 16; ++t) {
            if (t < dsteps) {
#pragma unroll
                for (u32 n = 0; n < BC / 16; ++n) {
                    u32 fb[MMA_B / 2];
                    mma_load_b_nk(fb, kst + n * 16 * LD + t * 16, LD);
                    mma_16x16x16<T>(qa[t], fb, s[n]);
                }
            }
        }
        // scores in log2 units, masked where a row does not see the key
        const bool edge = kt < all_lo || kt + BC > all_hi;
        float mx[MMA_ROW_SLOTS];
#pragma unroll
        for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) mx[r] = neg_inf;
#pragma unroll
        for (u32 n = 0; n < BC / 16; ++n) {
#pragma unroll
            for (u32 e = 0; e < MMA_C; ++e) {
                u32 r, c;
                mma_c_at(e, r, c);
                const i64 p = (i64)(row0 + warp * 16 + r) + shift, j = kt + n * 16 + c;
                float x = softcap > 0.0f ? softcap * m_tanh(s[n][e] * scale / softcap) : s[n][e] * scale;
                if (alibi) x -= slope * (float)(p > j ? p - j : j - p);
                x *= log2e;
                if (edge) {
                    const bool seen = j < lk && p - shift < (i64)len_q &&
                                      (window_left < 0 || j >= p - window_left) &&
                                      (window_right < 0 || j <= p + window_right);
                    if (!seen) x = neg_inf;
                }
                s[n][e] = x;
                const u32 slot = mma_c_slot(e);
                mx[slot] = x > mx[slot] ? x : mx[slot];
            }
        }
        float base[MMA_ROW_SLOTS];
#pragma unroll
        for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) {
            const float row_max = warp_combine<MaxOf<float> >(mx[r], MMA_ROW_LANES);
            const float m_new = row_max > m[r] ? row_max : m[r];
            base[r] = m_new == neg_inf ? 0.0f : m_new;  // a row that has seen nothing yet
            const float rescale = m_exp2(m[r] - base[r]);
            l[r] *= rescale;
            m[r] = m_new;
            mx[r] = rescale;
        }
#pragma unroll
        for (u32 t = 0; t < DMAX / 16; ++t)
#pragma unroll
            for (u32 e = 0; e < MMA_C; ++e) o[t][e] *= mx[mma_c_slot(e)];
#pragma unroll
        for (u32 n = 0; n < BC / 16; ++n)
#pragma unroll
            for (u32 e = 0; e < MMA_C; ++e) {
                const u32 slot = mma_c_slot(e);
                const float w = m_exp2(s[n][e] - base[slot]);
                s[n][e] = w;
                l[slot] += w;
            }
#pragma unroll
        for (u32 n = 0; n < BC / 16; ++n) {
            u32 pa[MMA_A / 2];
            mma_c_to_a(s[n], pa, scratch);
#pragma unroll
            for (u32 t = 0; t < DMAX / 16; ++t) {
                if (t < dsteps) {
                    u32 fb[MMA_B / 2];
                    mma_load_b_kn(fb, vst + n * 16 * LD + t * 16, LD);
                    mma_16x16x16<T>(pa, fb, o[t]);
                }
            }
        }
        __syncthreads();  // this stage is free for the load two tiles on
    }
    async_wait<0>();
#pragma unroll
    for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) {
        const float sum = warp_combine<SumOf<float> >(l[r], MMA_ROW_LANES);
        l[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
    }
#pragma unroll
    for (u32 t = 0; t < DMAX / 16; ++t)
#pragma unroll
        for (u32 e = 0; e < MMA_C; ++e) {
            u32 r, c;
            mma_c_at(e, r, c);
            const u32 row = row0 + warp * 16 + r, dim = t * 16 + c;
            if (row < len_q && dim < head_dim)
                out[(q0 + row) * q_stride + (u64)h * head_dim + dim] = cvt<T>(o[t][e] * l[mma_c_slot(e)]);
        }
}

// FLASH_PARAMS: the parameter list declared in rocm-kernels (`flash_attention::Params`).
#define FLASH_ATTENTION_ENTRY(NAME, T)                                                          \
    KERNEL __launch_bounds__(FA_ROWS * 64) void flash_attention_##NAME(FLASH_PARAMS(T)) {       \
        flash_attention<T>(q, k, v, out, alibi, cu_q, cu_k, heads, kv_heads, head_dim, seq_q,  \
                           seq_k, alibi_batch_stride, scale, softcap, window_left,             \
                           window_right);                                                      \
    }
CANDLE_ROCM_KEEP(bf16)(FLASH_ATTENTION_ENTRY(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(FLASH_ATTENTION_ENTRY(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(FLASH_ATTENTION_ENTRY(f32, float))

// Key tiles of 64, 32 and 16 rows at head dims to 64, 128 and 256: two stages of key and value
// tiles stay within 48 KiB of shared memory beside the wave64 emulation's exchange slots. On
// NVIDIA the blocks an SM must hold (MINB: 4, 3, 1) bound the registers (128 and 168 at head
// dims 64 and 128: 16 and 12 warps an SM instead of 12 and 8, a few bytes spilled); the
// emulation's blocks are twice as wide.
#if defined(CANDLE_ROCM_MMA_SYNC)
#define FT_BOUNDS(MINB) __launch_bounds__(FT_WARPS * 32, MINB)
#else
#define FT_BOUNDS(MINB) __launch_bounds__(FT_WARPS * 64)
#endif
#define FLASH_TILED_ENTRY(NAME, T, D, DMAX, BC, MINB)                                            \
    KERNEL FT_BOUNDS(MINB) void flash_tiled_##D##_##NAME(FLASH_PARAMS(T)) {                      \
        flash_tiled<T, DMAX, BC>(q, k, v, out, alibi, cu_q, cu_k, heads, kv_heads, head_dim,     \
                                 seq_q, seq_k, alibi_batch_stride, scale, softcap, window_left,  \
                                 window_right);                                                  \
    }
#define FLASH_TILED_ENTRIES(NAME, T)                                                             \
    FLASH_TILED_ENTRY(NAME, T, d64, 64, 64, 4) FLASH_TILED_ENTRY(NAME, T, d128, 128, 32, 3)      \
    FLASH_TILED_ENTRY(NAME, T, d256, 256, 16, 1)
CANDLE_ROCM_KEEP(bf16)(FLASH_TILED_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(FLASH_TILED_ENTRIES(f16, f16_t))

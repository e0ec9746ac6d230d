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
// operation) on FlashAttention-2's schedule: a block of FT_WARPS warps takes a few 16-row tiles
// of one head's queries a warp; one key tile and one value tile pass through shared memory, the
// value tile loading while the scores s = q k^T are computed and the next key tile while o += p v
// is; the online softmax runs on the scores in registers (a running max and sum per row, in log2
// units), p rounded to the dtype for p v (the sum stays f32). DMAX is the widest head it takes
// (64, 128, 256): narrower heads are padded with zeros.

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

// The tiled form's shape at each widest head D: FT_<set>_MT_<D> 16-row tiles of queries a warp
// (each key and value fragment serves them all), FT_<set>_BC_<D> keys a tile, FT_<set>_QS_<D> 1
// where q is read from shared memory at every tile (0: held in registers from the start). Set
// SYNC is mma.sync's (NVIDIA's blocks opt into more than 48 KiB of shared memory); set LDS fits
// AMD's 64 KiB workgroups with the warps' scratch tiles (the wave64 emulation runs it too, its
// exchange slots beside it).
#define FT_SYNC_MT_64 2
#define FT_SYNC_BC_64 64
#define FT_SYNC_QS_64 0
#define FT_SYNC_MT_128 2
#define FT_SYNC_BC_128 32
#define FT_SYNC_QS_128 1
#define FT_SYNC_MT_256 1
#define FT_SYNC_BC_256 32
#define FT_SYNC_QS_256 1
#define FT_LDS_MT_64 2
#define FT_LDS_BC_64 64
#define FT_LDS_QS_64 0
#define FT_LDS_MT_128 2
#define FT_LDS_BC_128 32
#define FT_LDS_QS_128 1
#define FT_LDS_MT_256 1
#define FT_LDS_BC_256 16
#define FT_LDS_QS_256 1
#if defined(CANDLE_ROCM_MMA_SYNC)
#define FT_SHAPE(X, D) FT_SYNC_##X##_##D
#else
#define FT_SHAPE(X, D) FT_LDS_##X##_##D
#endif
// A tile row's stride in elements: 16-byte rows, consecutive rows 4 banks apart.
#define FT_LD(DMAX) ((DMAX) + 8)

// Loads `rows` rows [r0, r0 + rows) of a [tokens, heads, head_dim] tensor's head at `base`
// (row stride `stride`) into `dst` (stride FT_LD(DMAX)) element by element, where the 16-byte
// copies of flash_copy_tile do not apply (a head or pointer off 16 bytes): rows at or past `end`
// and dims past head_dim are zeros.
template <typename T, int DMAX>
DEVICE void flash_load_rows(T* dst, const T* src, u64 base, u64 stride, i64 r0, u32 rows, i64 end, u32 head_dim) {
    const u32 LD = FT_LD(DMAX);
    for (u32 i = threadIdx.x; i < rows * DMAX; i += blockDim.x) {
        const u32 r = i / DMAX, dim = i % DMAX;
        const bool in = r0 + r < end && dim < head_dim;
        dst[r * LD + dim] = in ? src[base + (u64)(r0 + r) * stride + dim] : cvt<T>(0.0f);
    }
}

// Copies a key or value tile with 16-byte copies (where head_dim and the pointers allow): the
// block's threads cover a row in FT_CHUNKS(DMAX) chunks, thread t the chunk t % chunks of rows
// t / chunks, + step, ...; the addresses are taken once a tile (the generic loop's 64-bit index
// arithmetic a copy was a third of the loop's instructions). Rows at or past `end`, and dims past
// head_dim (`dim_in` false; never under FULL), are zeros.
#define FT_CHUNKS(DMAX) ((DMAX) / 8)
template <typename T, int DMAX, int BC, bool FULL>
DEVICE void flash_copy_tile(T* dst, const T* src, u64 stride, i32 r0, i32 end, u32 row, u32 step, u32 dim,
                            bool dim_in) {
    constexpr u32 LD = FT_LD(DMAX);
    // the most copies a thread makes: a block has at least FT_WARPS x 32 threads
    constexpr u32 PASSES = (BC * FT_CHUNKS(DMAX) + FT_WARPS * 32 - 1) / (FT_WARPS * 32);
    const SharedAt to = shared_at(dst + row * LD + dim);
    const u32 to_hop = step * LD * (u32)sizeof(T);
    const T* from = src + (u64)(r0 + row) * stride + dim;
    const u64 hop = (u64)step * stride;
    if (end - r0 >= (i32)BC && (FULL || dim_in)) {
        // every row of the tile is in the tensor (all tiles but a sequence's last)
#pragma unroll
        for (u32 j = 0; j < PASSES; ++j) {
            if (row + j * step < BC) async_copy16_at(to, j * to_hop, from, 16);
            from += hop;
        }
    } else {
        const u32 valid = end - r0 >= (i32)BC ? BC : (u32)(end - r0);
#pragma unroll
        for (u32 j = 0; j < PASSES; ++j) {
            const u32 r = row + j * step;
            if (r < BC) {
                const bool in = dim_in && r < valid;
                async_copy16_at(to, j * to_hop, in ? from : src, in ? 16 : 0);
            }
            from += hop;
        }
    }
}

// x clamped to [0, hi].
DEVICE i32 flash_clamp(i64 x, i32 hi) { return x < 0 ? 0 : (x > hi ? hi : (i32)x); }

// The tiled form (FlashAttention-2's schedule): a block of FT_WARPS warps takes MT x 16 query
// rows a warp; one key tile and one value tile of BC rows in shared memory, the value tile
// loading while the scores are computed and the next key tile while p v is; shared memory is
// dynamic (`TiledShape::shared_bytes` on the host).
template <typename T, int DMAX, int MT, int BC, bool QS, bool FULL>
DEVICE void flash_tiled(const T* q, const T* k, const T* v, T* out, const float* alibi, const u32* cu_q,
                        const u32* cu_k, u32 heads, u32 kv_heads, u32 head_dim, u32 seq_q, u32 seq_k,
                        u32 alibi_batch_stride, float scale, float softcap, i32 window_left, i32 window_right) {
    constexpr u32 LD = FT_LD(DMAX), ROWS = 16 * MT * FT_WARPS, KSTEPS = DMAX / 16, NT = BC / 16;
    extern __shared__ Raw16 flash_shared[];
    T* ks = (T*)flash_shared;  // BC x LD
    T* vs = ks + BC * LD;      // BC x LD
    T* qs = vs + BC * LD;      // ROWS x LD where QS
    const u32 warp = threadIdx.x / warpSize;
#if defined(MMA_C_IS_A)
    T* scratch = nullptr;
#else
    T* scratch = qs + (QS ? ROWS * LD : 0) + warp * 16 * MMA_SCRATCH_LD;
#endif
    const u32 b = blockIdx.z, h = blockIdx.y;
    const u32 q0 = cu_q ? cu_q[b] : b * seq_q, len_q = cu_q ? cu_q[b + 1] - q0 : seq_q;
    const u32 k0 = cu_k ? cu_k[b] : b * seq_k, len_k = cu_k ? cu_k[b + 1] - k0 : seq_k;
    // the last rows first: under a causal mask they see the most keys, and the short blocks
    // fill the device's tail
    const u32 row0 = (gridDim.x - 1 - blockIdx.x) * ROWS;
    if (row0 >= len_q) return;  // the whole block
    const u32 wrow = row0 + warp * 16 * MT;  // this warp's first row
    const u32 kvh = h / (heads / kv_heads);
    const u64 q_stride = (u64)heads * head_dim, kv_stride = (u64)kv_heads * head_dim;
    const u64 q_base = (u64)q0 * q_stride + (u64)h * head_dim;
    const u64 kv_base = (u64)k0 * kv_stride + (u64)kvh * head_dim;
    // key positions in 32 bits (a sequence's keys fit in device memory), the window's ends
    // clamped to [0, len_k] from 64-bit sums
    const i32 shift = (i32)len_k - (i32)len_q, lk = (i32)len_k;
    // keys some row of the block sees [blk_lo, blk_hi), and those all its rows see [all_lo, all_hi)
    const u32 last = (row0 + ROWS < len_q ? row0 + ROWS : len_q) - 1;
    const i64 p_first = (i64)row0 + shift, p_last = (i64)last + shift;
    const i32 blk_lo = flash_clamp(window_left < 0 ? 0 : p_first - window_left, lk);
    const i32 all_lo = flash_clamp(window_left < 0 ? 0 : p_last - window_left, lk);
    const i32 blk_hi = flash_clamp(window_right < 0 ? lk : p_last + window_right + 1, lk);
    const i32 all_hi = flash_clamp(window_right < 0 ? lk : p_first + window_right + 1, lk);
    // FULL: head_dim is DMAX, every k step is taken (no branch between the steps' products)
    const u32 dsteps = FULL ? KSTEPS : (head_dim + 15) / 16;
    const bool wide = head_dim % 8 == 0 && (usize)q % 16 == 0 && (usize)k % 16 == 0 && (usize)v % 16 == 0;
    // this thread's share of a tile's 16-byte copies (flash_copy_tile)
    const u32 c_row = threadIdx.x / FT_CHUNKS(DMAX), c_step = blockDim.x / FT_CHUNKS(DMAX);
    const u32 c_dim = threadIdx.x % FT_CHUNKS(DMAX) * 8;
    const bool c_in = c_dim < head_dim;
    const T* k_head = k + kv_base;
    const T* v_head = v + kv_base;
    if (QS) {
        if (wide) flash_copy_tile<T, DMAX, ROWS, FULL>(qs, q + q_base, q_stride, row0, len_q, c_row, c_step, c_dim, c_in);
        else flash_load_rows<T, DMAX>(qs, q, q_base, q_stride, row0, ROWS, len_q, head_dim);
    }
    if (blk_lo < blk_hi) {
        if (wide) flash_copy_tile<T, DMAX, BC, FULL>(ks, k_head, kv_stride, blk_lo, lk, c_row, c_step, c_dim, c_in);
        else flash_load_rows<T, DMAX>(ks, k, kv_base, kv_stride, blk_lo, BC, lk, head_dim);
    }
    async_commit();
    // q's fragments where they stay in registers (one word per index where q is read from
    // shared memory: the array must not be empty)
    u32 qa[MT][QS ? 1 : KSTEPS][MMA_A / 2];
    if (!QS) {
#pragma unroll
        for (u32 i = 0; i < MT; ++i)
#pragma unroll
            for (u32 t = 0; t < (QS ? 1 : KSTEPS); ++t)
#pragma unroll
                for (u32 e = 0; e < MMA_A; e += 2) {
                    u32 r, c;
                    mma_a_at(e, r, c);
                    const u32 row = wrow + i * 16 + r, dim = t * 16 + c;
                    const u64 at = q_base + row * q_stride + dim;
                    const bool in = row < len_q;
                    qa[i][t][e / 2] = mma_word(in && dim < head_dim ? q[at].bits : 0,
                                               in && dim + 1 < head_dim ? q[at + 1].bits : 0);
                }
    }
    float o[MT][KSTEPS][MMA_C];
#pragma unroll
    for (u32 i = 0; i < MT; ++i)
#pragma unroll
        for (u32 t = 0; t < KSTEPS; ++t)
#pragma unroll
            for (u32 e = 0; e < MMA_C; ++e) o[i][t][e] = 0.0f;
    const float neg_inf = m_neg_inf(0.0f), log2e = 1.4426950408889634f;
    // Where nothing but the scale touches the scores (and it is positive), the running max is
    // taken over the raw products and each weight is one fused multiply-add and one exp2:
    // 2^(s * scale * log2(e) - max); otherwise the scores are made in log2 units first.
    const bool plain = softcap <= 0.0f && !alibi && scale > 0.0f;
    const float mul = plain ? scale * log2e : 1.0f;
    float m[MT][MMA_ROW_SLOTS], l[MT][MMA_ROW_SLOTS];
#pragma unroll
    for (u32 i = 0; i < MT; ++i)
#pragma unroll
        for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) { m[i][r] = neg_inf; l[i][r] = 0.0f; }
    const float slope = alibi ? alibi[(u64)b * alibi_batch_stride + h] : 0.0f;
    // the tiles' fragments at offsets the unrolled loops fix
    const MmaShared<T, MMA_FRAG_A> q_frag(qs + (wrow - row0) * LD, LD);
    const MmaShared<T, MMA_FRAG_B_NK> k_frag(ks, LD);
    const MmaShared<T, MMA_FRAG_B_KN> v_frag(vs, LD);
    for (i32 kt = blk_lo; kt < blk_hi; kt += BC) {
        // the key tile (and q) has landed, and every warp is done with the last value tile
        async_wait<0>();
        __syncthreads();
        if (wide) flash_copy_tile<T, DMAX, BC, FULL>(vs, v_head, kv_stride, kt, lk, c_row, c_step, c_dim, c_in);
        else flash_load_rows<T, DMAX>(vs, v, kv_base, kv_stride, kt, BC, lk, head_dim);
        async_commit();
        float s[MT][NT][MMA_C];
#pragma unroll
        for (u32 i = 0; i < MT; ++i)
#pragma unroll
            for (u32 n = 0; n < NT; ++n)
#pragma unroll
                for (u32 e = 0; e < MMA_C; ++e) s[i][n][e] = 0.0f;
        // k-steps outside, key tiles inside: consecutive products are independent
#pragma unroll
        for (u32 t = 0; t < KSTEPS; ++t) {
            if (FULL || t < dsteps) {
                u32 qf[MT][MMA_A / 2];
#pragma unroll
                for (u32 i = 0; i < MT; ++i) {
                    if (QS) {
                        q_frag.load(qf[i], i * 16 * LD + t * 16);
                    } else {
#pragma unroll
                        for (u32 w = 0; w < MMA_A / 2; ++w) qf[i][w] = qa[i][QS ? 0 : t][w];
                    }
                }
#pragma unroll
                for (u32 n = 0; n < NT; ++n) {
                    u32 fb[MMA_B / 2];
                    k_frag.load(fb, n * 16 * LD + t * 16);
#pragma unroll
                    for (u32 i = 0; i < MT; ++i) mma_16x16x16<T>(qf[i], fb, s[i][n]);
                }
            }
        }
        // the scores in log2 units unless plain (then the running max is over the raw products),
        // masked where a row does not see the key (tiles on the edge of the block's window only:
        // a causal block's diagonal); each a pass of its own, so a plain tile off the edge runs
        // no test an element. Positions in 32 bits: d is the query's position less the key's.
        const bool edge = kt < all_lo || kt + BC > all_hi;
        if (!plain) {
#pragma unroll
            for (u32 i = 0; i < MT; ++i)
#pragma unroll
                for (u32 n = 0; n < NT; ++n)
#pragma unroll
                    for (u32 e = 0; e < MMA_C; ++e) {
                        u32 r, c;
                        mma_c_at(e, r, c);
                        const i32 d = (i32)(wrow + i * 16 + r) + shift - (kt + (i32)(n * 16 + c));
                        float x = s[i][n][e];
                        x = softcap > 0.0f ? softcap * m_tanh(x * scale / softcap) : x * scale;
                        if (alibi) x -= slope * (float)(d < 0 ? -d : d);
                        s[i][n][e] = x * log2e;
                    }
        }
        if (edge) {
            const i32 left = window_left < 0 ? 0x7fffffff : window_left;
            const i32 right = window_right < 0 ? 0x7fffffff : window_right;
#pragma unroll
            for (u32 i = 0; i < MT; ++i)
#pragma unroll
                for (u32 n = 0; n < NT; ++n)
#pragma unroll
                    for (u32 e = 0; e < MMA_C; ++e) {
                        u32 r, c;
                        mma_c_at(e, r, c);
                        const i32 row = (i32)(wrow + i * 16 + r), j = kt + (i32)(n * 16 + c);
                        const i32 d = row + shift - j;
                        const bool seen = j < lk && row < (i32)len_q && d <= left && -d <= right;
                        s[i][n][e] = seen ? s[i][n][e] : neg_inf;
                    }
        }
        float mx[MT][MMA_ROW_SLOTS];
#pragma unroll
        for (u32 i = 0; i < MT; ++i)
#pragma unroll
            for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) {
                // two chains a row slot: half the dependent steps (m_max ignores NaN, as the
                // comparison it replaced)
                float a = neg_inf, c = neg_inf;
#pragma unroll
                for (u32 n = 0; n < NT; ++n)
#pragma unroll
                    for (u32 e = 0; e < MMA_C; ++e)
                        if (mma_c_slot(e) == r) {
                            if ((n * MMA_C + e) % 2) c = m_max(c, s[i][n][e]);
                            else a = m_max(a, s[i][n][e]);
                        }
                mx[i][r] = m_max(a, c);
            }
        float base[MT][MMA_ROW_SLOTS];
        bool moved = false;
#pragma unroll
        for (u32 i = 0; i < MT; ++i)
#pragma unroll
            for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) {
                const float row_max = warp_combine<MaxOf<float> >(mx[i][r], MMA_ROW_LANES) * mul;
                const float m_new = row_max > m[i][r] ? row_max : m[i][r];
                base[i][r] = m_new == neg_inf ? 0.0f : m_new;  // a row that has seen nothing yet
                const float rescale = m_exp2_fast(m[i][r] - base[i][r]);
                moved |= m_new != m[i][r];
                l[i][r] *= rescale;
                m[i][r] = m_new;
                mx[i][r] = rescale;
            }
#pragma unroll
        for (u32 i = 0; i < MT; ++i)
#pragma unroll
            for (u32 n = 0; n < NT; ++n)
#pragma unroll
                for (u32 e = 0; e < MMA_C; ++e) {
                    const u32 slot = mma_c_slot(e);
                    const float w = m_exp2_fast(s[i][n][e] * mul - base[i][slot]);
                    s[i][n][e] = w;
                    l[i][slot] += w;
                }
        // o keeps its scale where no row of the warp found a larger score (most tiles once a
        // row has seen a few)
        if (warp_ballot(moved)) {
#pragma unroll
            for (u32 i = 0; i < MT; ++i)
#pragma unroll
                for (u32 t = 0; t < KSTEPS; ++t)
#pragma unroll
                    for (u32 e = 0; e < MMA_C; ++e) o[i][t][e] *= mx[i][mma_c_slot(e)];
        }
        // the value tile has landed, and every warp is done with the key tile: the next one loads
        async_wait<0>();
        __syncthreads();
        if (kt + BC < blk_hi) {
            if (wide) flash_copy_tile<T, DMAX, BC, FULL>(ks, k_head, kv_stride, kt + BC, lk, c_row, c_step, c_dim, c_in);
            else flash_load_rows<T, DMAX>(ks, k, kv_base, kv_stride, kt + BC, BC, lk, head_dim);
        }
        async_commit();
#pragma unroll
        for (u32 n = 0; n < NT; ++n) {
            u32 pa[MT][MMA_A / 2];
#pragma unroll
            for (u32 i = 0; i < MT; ++i) mma_c_to_a(s[i][n], pa[i], scratch);
#pragma unroll
            for (u32 t = 0; t < KSTEPS; ++t) {
                if (FULL || t < dsteps) {
                    u32 fb[MMA_B / 2];
                    v_frag.load(fb, n * 16 * LD + t * 16);
#pragma unroll
                    for (u32 i = 0; i < MT; ++i) mma_16x16x16<T>(pa[i], fb, o[i][t]);
                }
            }
        }
    }
    async_wait<0>();
#pragma unroll
    for (u32 i = 0; i < MT; ++i)
#pragma unroll
        for (u32 r = 0; r < MMA_ROW_SLOTS; ++r) {
            const float sum = warp_combine<SumOf<float> >(l[i][r], MMA_ROW_LANES);
            l[i][r] = sum > 0.0f ? 1.0f / sum : 0.0f;
        }
    if (wide && (usize)out % 16 == 0) {
        // o through shared memory (the tiles' space: every warp is past its last product) and
        // out in 16-byte rows: a block's rows leave as whole lines, not a 2-byte store an element
        static_assert(ROWS <= 2 * BC + (QS ? ROWS : 0), "o's rows fit the tiles' shared memory");
        T* os = (T*)flash_shared;  // ROWS x LD
        __syncthreads();
#pragma unroll
        for (u32 i = 0; i < MT; ++i)
#pragma unroll
            for (u32 t = 0; t < KSTEPS; ++t)
#if defined(MMA_C_IS_A)
                // elements 2w and 2w + 1 are neighbours in a row: one 4-byte store
#pragma unroll
                for (u32 e = 0; e < MMA_C; e += 2) {
                    u32 r, c;
                    mma_c_at(e, r, c);
                    const float inv = l[i][mma_c_slot(e)];
                    *(u32*)(os + (wrow - row0 + i * 16 + r) * LD + t * 16 + c) =
                        mma_pack<T>(o[i][t][e] * inv, o[i][t][e + 1] * inv);
                }
#else
#pragma unroll
                for (u32 e = 0; e < MMA_C; ++e) {
                    u32 r, c;
                    mma_c_at(e, r, c);
                    os[(wrow - row0 + i * 16 + r) * LD + t * 16 + c] = cvt<T>(o[i][t][e] * l[i][mma_c_slot(e)]);
                }
#endif
        __syncthreads();
        for (u32 x = threadIdx.x; x < ROWS * FT_CHUNKS(DMAX); x += blockDim.x) {
            const u32 r = x / FT_CHUNKS(DMAX), dim = x % FT_CHUNKS(DMAX) * 8;
            if (row0 + r < len_q && dim < head_dim)
                *(Raw16*)(out + q_base + (u64)(row0 + r) * q_stride + dim) = *(const Raw16*)(os + r * LD + dim);
        }
        return;
    }
#pragma unroll
    for (u32 i = 0; i < MT; ++i)
#pragma unroll
        for (u32 t = 0; t < KSTEPS; ++t)
#pragma unroll
            for (u32 e = 0; e < MMA_C; ++e) {
                u32 r, c;
                mma_c_at(e, r, c);
                const u32 row = wrow + i * 16 + r, dim = t * 16 + c;
                if (row < len_q && dim < head_dim)
                    out[q_base + row * q_stride + dim] = cvt<T>(o[i][t][e] * l[i][mma_c_slot(e)]);
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

// One block an SM is all the registers allow at head dims 128 and 256 (MT x 16 rows of o in f32
// a warp); two at 64. The emulation's blocks are twice as wide.
#if defined(CANDLE_ROCM_MMA_SYNC)
#define FT_BOUNDS(MINB) __launch_bounds__(FT_WARPS * 32, MINB)
#else
#define FT_BOUNDS(MINB) __launch_bounds__(FT_WARPS * 64)
#endif
// Heads of exactly DMAX (the common case) take every k step without a test between them, on
// mma.sync (bench/results/2026-11-29-h200-flash-attention-instructions.md).
#define FLASH_TILED_CALL(T, DMAX, FULL)                                                            \
    flash_tiled<T, DMAX, FT_SHAPE(MT, DMAX), FT_SHAPE(BC, DMAX), FT_SHAPE(QS, DMAX), FULL>(        \
        q, k, v, out, alibi, cu_q, cu_k, heads, kv_heads, head_dim, seq_q, seq_k,                  \
        alibi_batch_stride, scale, softcap, window_left, window_right)
#if defined(CANDLE_ROCM_MMA_SYNC)
#define FLASH_TILED_FORMS(T, DMAX)                                                                 \
    if (head_dim == DMAX) FLASH_TILED_CALL(T, DMAX, true);                                         \
    else FLASH_TILED_CALL(T, DMAX, false);
#else
// Elsewhere the partial form alone (it computes a head of DMAX too): the full one doubles the
// module's code (hiprtc's compile time for four archs, gfx1100's branches past their 16-bit
// reach) for a gain that only mma.sync's measurements show.
#define FLASH_TILED_FORMS(T, DMAX) FLASH_TILED_CALL(T, DMAX, false);
#endif
#define FLASH_TILED_ENTRY(NAME, T, D, DMAX, MINB)                                                  \
    KERNEL FT_BOUNDS(MINB) void flash_tiled_##D##_##NAME(FLASH_PARAMS(T)) {                        \
        FLASH_TILED_FORMS(T, DMAX)                                                                 \
    }
#define FLASH_TILED_ENTRIES(NAME, T)                                                               \
    FLASH_TILED_ENTRY(NAME, T, d64, 64, 2) FLASH_TILED_ENTRY(NAME, T, d128, 128, 1)                \
    FLASH_TILED_ENTRY(NAME, T, d256, 256, 1)
CANDLE_ROCM_KEEP(bf16)(FLASH_TILED_ENTRIES(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(FLASH_TILED_ENTRIES(f16, f16_t))

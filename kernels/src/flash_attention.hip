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
// This is the form without matrix units: a warp a query row (FA_ROWS rows a block, so the rows
// of a block read the same keys from cache), each lane holding head_dim / warpSize dims of q
// and of the output; a key's score is the warp's sum of the lanes' products. The accumulator is
// f32 for every dtype.

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

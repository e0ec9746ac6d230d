// GGUF (ggml) blocks on the device: dequantization, as Candle 0.11.1's CPU backend computes it.
//
// Blocks are read as bytes in ggml's layout (every block size is even, and a tensor's blocks
// start on a 16-byte boundary, so the 2- and 4-byte fields are aligned). Each value is computed
// with the CPU's operations in the CPU's order and without contraction (m_mul_rn,
// m_add_rn, m_sub_rn), so the results are bit-exact with `QTensor::dequantize`.
//
// Entries: `dequantize_<out>_<type>` (out: f32, f16, bf16; type: the GgmlDType as a key such as
// q4_0 or q4k), `embedding_<out>_<type>` (the rows `ids` of a (rows, k) table) and
// `matvec_<x>_<type>` (x . w^T for up to 8 rows of activations x, accumulated in f32).

DEVICE float q_f16(const u8* p) {
    f16_t h;
    h.bits = (u16)(p[0] | (p[1] << 8));
    return f16_to_f32(h);
}
DEVICE u32 q_u32(const u8* p) { return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24); }

// ---- the types of 32-element blocks ----------------------------------------------------------

struct Q4_0 {
    static constexpr int BLOCK = 32, BYTES = 18;
    DEVICE static float value(const u8* b, int i) {
        const int j = i & 15;
        const int q = i < 16 ? (b[2 + j] & 15) : (b[2 + j] >> 4);
        return m_mul_rn((float)(q - 8), q_f16(b));
    }
};
struct Q4_1 {
    static constexpr int BLOCK = 32, BYTES = 20;
    DEVICE static float value(const u8* b, int i) {
        const int j = i & 15;
        const int q = i < 16 ? (b[4 + j] & 15) : (b[4 + j] >> 4);
        return m_add_rn(m_mul_rn((float)q, q_f16(b)), q_f16(b + 2));
    }
};
// 5-bit quants: the fifth bit of element j is bit j of qh (j < 16) or bit j + 12 shifted (j >= 16).
DEVICE int q5_value(const u8* qh_at, const u8* qs, int i) {
    const u32 qh = q_u32(qh_at);
    const int j = i & 15;
    if (i < 16) return (qs[j] & 15) | (int)(((qh >> j) << 4) & 0x10);
    return (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
}
struct Q5_0 {
    static constexpr int BLOCK = 32, BYTES = 22;
    DEVICE static float value(const u8* b, int i) {
        return m_mul_rn((float)(q5_value(b + 2, b + 6, i) - 16), q_f16(b));
    }
};
struct Q5_1 {
    static constexpr int BLOCK = 32, BYTES = 24;
    DEVICE static float value(const u8* b, int i) {
        return m_add_rn(m_mul_rn((float)q5_value(b + 4, b + 8, i), q_f16(b)), q_f16(b + 2));
    }
};
struct Q8_0 {
    static constexpr int BLOCK = 32, BYTES = 34;
    DEVICE static float value(const u8* b, int i) { return m_mul_rn((float)(i8)b[2 + i], q_f16(b)); }
};
struct Q8_1 {
    static constexpr int BLOCK = 32, BYTES = 36;
    DEVICE static float value(const u8* b, int i) { return m_mul_rn((float)(i8)b[4 + i], q_f16(b)); }
};

// ---- k-quants: 256-element super-blocks ------------------------------------------------------

struct Q2K {  // scales[16], qs[64], d, dmin
    static constexpr int BLOCK = 256, BYTES = 84;
    DEVICE static float value(const u8* b, int i) {
        const int chunk = i >> 7, p = i & 127, j = p >> 5, half = (p >> 4) & 1, l = p & 15;
        const int sc = b[chunk * 8 + j * 2 + half];
        const float dl = m_mul_rn(q_f16(b + 80), (float)(sc & 15));
        const float ml = m_mul_rn(q_f16(b + 82), (float)(sc >> 4));
        const int q = (b[16 + chunk * 32 + half * 16 + l] >> (2 * j)) & 3;
        return m_sub_rn(m_mul_rn(dl, (float)q), ml);
    }
};

struct Q3K {  // hmask[32], qs[64], scales[12], d
    static constexpr int BLOCK = 256, BYTES = 110;
    // The 6-bit scale `is`, unpacked from the 12 packed bytes as ggml does.
    DEVICE static int scale(const u8* s, int is) {
        const u32 a0 = q_u32(s), a1 = q_u32(s + 4), tmp = q_u32(s + 8);
        const u32 k1 = 0x03030303u, k2 = 0x0f0f0f0fu;
        u32 aux;
        switch (is >> 2) {
            case 0: aux = (a0 & k2) | ((tmp & k1) << 4); break;
            case 1: aux = (a1 & k2) | (((tmp >> 2) & k1) << 4); break;
            case 2: aux = ((a0 >> 4) & k2) | (((tmp >> 4) & k1) << 4); break;
            default: aux = ((a1 >> 4) & k2) | (((tmp >> 6) & k1) << 4); break;
        }
        return (int)(i8)(u8)(aux >> (8 * (is & 3)));
    }
    DEVICE static float value(const u8* b, int i) {
        const int chunk = i >> 7, p = i & 127, j = p >> 5, si = (p >> 4) & 1, l = p & 15;
        const int is = chunk * 8 + j * 2 + si;
        const float dl = m_mul_rn(q_f16(b + 108), m_sub_rn((float)scale(b + 96, is), 32.0f));
        const int q = (b[32 + chunk * 32 + l + 16 * si] >> (2 * j)) & 3;
        const int m = 1 << (chunk * 4 + j);
        const int h = (b[l + 16 * si] & m) ? 0 : 4;
        return m_mul_rn(dl, (float)(q - h));
    }
};

// (scale, min) number j of the 12 packed bytes of Q4K / Q5K.
DEVICE void scale_min_k4(int j, const u8* q, int& d, int& m) {
    if (j < 4) {
        d = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        d = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

struct Q4K {  // d, dmin, scales[12], qs[128]
    static constexpr int BLOCK = 256, BYTES = 144;
    DEVICE static float value(const u8* b, int i) {
        const int j64 = i >> 6, p = i & 63, hi = p >> 5;
        int sc, m;
        scale_min_k4(2 * j64 + hi, b + 4, sc, m);
        const float d1 = m_mul_rn(q_f16(b), (float)sc), m1 = m_mul_rn(q_f16(b + 2), (float)m);
        const int q = b[16 + j64 * 32 + (p & 31)];
        return m_sub_rn(m_mul_rn(d1, (float)(hi ? q >> 4 : q & 15)), m1);
    }
};

struct Q5K {  // d, dmin, scales[12], qh[32], qs[128]
    static constexpr int BLOCK = 256, BYTES = 176;
    DEVICE static float value(const u8* b, int i) {
        const int j64 = i >> 6, p = i & 63, hi = p >> 5, l = p & 31;
        int sc, m;
        scale_min_k4(2 * j64 + hi, b + 4, sc, m);
        const float d1 = m_mul_rn(q_f16(b), (float)sc), m1 = m_mul_rn(q_f16(b + 2), (float)m);
        const int u = (hi ? 2 : 1) << (2 * j64);
        const float high = (b[16 + l] & u) ? 16.0f : 0.0f;
        const int ql = b[48 + j64 * 32 + l];
        return m_sub_rn(m_mul_rn(d1, m_add_rn((float)(hi ? ql >> 4 : ql & 15), high)), m1);
    }
};

struct Q6K {  // ql[128], qh[64], scales[16] (i8), d
    static constexpr int BLOCK = 256, BYTES = 210;
    DEVICE static float value(const u8* b, int i) {
        const int idx = i >> 7, p = i & 127, part = p >> 5, l = p & 31;
        const u8* ql = b + 64 * idx;
        const u8 qh = b[128 + 32 * idx + l];
        const u8 lo = (part & 1) ? ql[l + 32] : ql[l];
        const int q = ((part < 2 ? lo & 15 : lo >> 4) | (((qh >> (2 * part)) & 3) << 4)) - 32;
        const int sc = (i8)b[192 + 8 * idx + (l >> 4) + 2 * part];
        return m_mul_rn(m_mul_rn(q_f16(b + 208), (float)sc), (float)q);
    }
};

struct Q8K {  // d (f32), qs[256], bsums[16]
    static constexpr int BLOCK = 256, BYTES = 292;
    DEVICE static float value(const u8* b, int i) {
        return m_mul_rn(f32_from_bits(q_u32(b)), (float)(i8)b[4 + i]);
    }
};

// ---- plain float "blocks" --------------------------------------------------------------------

struct QF32 {
    static constexpr int BLOCK = 1, BYTES = 4;
    DEVICE static float value(const u8* b, int) { return f32_from_bits(q_u32(b)); }
};
struct QF16 {
    static constexpr int BLOCK = 1, BYTES = 2;
    DEVICE static float value(const u8* b, int) { return q_f16(b); }
};
struct QBF16 {
    static constexpr int BLOCK = 1, BYTES = 2;
    DEVICE static float value(const u8* b, int) {
        bf16_t h;
        h.bits = (u16)(b[0] | (b[1] << 8));
        return bf16_to_f32(h);
    }
};

// ---- kernels ---------------------------------------------------------------------------------

DEVICE void q_store(float* out, u64 i, float v) { out[i] = v; }
DEVICE void q_store(f16_t* out, u64 i, float v) { out[i] = f32_to_f16(v); }
DEVICE void q_store(bf16_t* out, u64 i, float v) { out[i] = f32_to_bf16(v); }

// n values (a whole number of blocks) of the blocks at `in`.
template <typename Q, typename O>
DEVICE void dequantize(const u8* in, O* out, u64 n) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 blk = i / Q::BLOCK;
        q_store(out, i, Q::value(in + blk * Q::BYTES, (int)(i - blk * Q::BLOCK)));
    }
}

// out[r, :] = table[ids[r], :] for a (rows, k) table; an id outside the table gives a zero row
// and, where `bad` is not null, is counted there.
template <typename Q, typename O>
DEVICE void embedding(const u8* table, const u32* ids, O* out, u64 n_ids, u64 rows, u64 k, u32* bad) {
    const u64 row_bytes = k / Q::BLOCK * Q::BYTES;
    const u64 n = n_ids * k;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 r = i / k, c = i - r * k;
        const u64 id = ids[r];
        float v = 0.0f;
        if (id < rows) {
            const u64 blk = c / Q::BLOCK;
            v = Q::value(table + id * row_bytes + blk * Q::BYTES, (int)(c - blk * Q::BLOCK));
        } else if (bad != 0 && c == 0) {
            atomicAdd(bad, 1u);
        }
        q_store(out, i, v);
    }
}

// ---- mat-vec: y = x . w^T for 1 to MATVEC_MAX_ROWS rows of activations -----------------------

#define MATVEC_MAX_ROWS 8

DEVICE float q_load(const float* x, u64 i) { return x[i]; }
DEVICE float q_load(const f16_t* x, u64 i) { return f16_to_f32(x[i]); }
DEVICE float q_load(const bf16_t* x, u64 i) { return bf16_to_f32(x[i]); }

// One warp (of whatever width the device has) per row j of the (n, k) weights: the lanes walk
// the row's values in step, each multiplies its value into every activation row, and a
// butterfly over the warp sums each row's products. The weights are read in place, once.
template <typename Q, typename X>
DEVICE void matvec(const u8* w, const X* x, X* y, u64 n, u64 k, u32 rows) {
    const u32 lane = threadIdx.x % warpSize;
    const u64 warps = blockDim.x / warpSize;
    const u64 row_bytes = k / Q::BLOCK * Q::BYTES;
    for (u64 j = blockIdx.x * warps + threadIdx.x / warpSize; j < n; j += (u64)gridDim.x * warps) {
        float acc[MATVEC_MAX_ROWS];
#pragma unroll
        for (int r = 0; r < MATVEC_MAX_ROWS; ++r) acc[r] = 0.0f;
        const u8* wj = w + j * row_bytes;
        for (u64 i = lane; i < k; i += warpSize) {
            const u64 blk = i / Q::BLOCK;
            const float v = Q::value(wj + blk * Q::BYTES, (int)(i - blk * Q::BLOCK));
#pragma unroll
            for (int r = 0; r < MATVEC_MAX_ROWS; ++r)
                if (r < (int)rows) acc[r] += v * q_load(x, r * k + i);
        }
#pragma unroll
        for (int r = 0; r < MATVEC_MAX_ROWS; ++r) {
            if (r >= (int)rows) break;
            float s = acc[r];
            for (int o = warpSize / 2; o > 0; o >>= 1) s += warp_shfl_xor(s, o);
            if (lane == 0) q_store(y, r * n + j, s);
        }
    }
}

#define QUANT_KERNELS(NAME, Q)                                                                   \
    KERNEL void dequantize_f32_##NAME(const u8* in, float* out, u64 n) { dequantize<Q>(in, out, n); } \
    KERNEL void dequantize_f16_##NAME(const u8* in, f16_t* out, u64 n) { dequantize<Q>(in, out, n); } \
    KERNEL void dequantize_bf16_##NAME(const u8* in, bf16_t* out, u64 n) { dequantize<Q>(in, out, n); } \
    KERNEL void embedding_f32_##NAME(const u8* t, const u32* ids, float* out, u64 n_ids, u64 rows, u64 k, u32* bad) { \
        embedding<Q>(t, ids, out, n_ids, rows, k, bad);                                               \
    }                                                                                            \
    KERNEL void embedding_f16_##NAME(const u8* t, const u32* ids, f16_t* out, u64 n_ids, u64 rows, u64 k, u32* bad) { \
        embedding<Q>(t, ids, out, n_ids, rows, k, bad);                                               \
    }                                                                                            \
    KERNEL void embedding_bf16_##NAME(const u8* t, const u32* ids, bf16_t* out, u64 n_ids, u64 rows, u64 k, u32* bad) { \
        embedding<Q>(t, ids, out, n_ids, rows, k, bad);                                               \
    }                                                                                            \
    KERNEL void matvec_f32_##NAME(const u8* w, const float* x, float* y, u64 n, u64 k, u32 rows) { \
        matvec<Q>(w, x, y, n, k, rows);                                                          \
    }                                                                                            \
    KERNEL void matvec_f16_##NAME(const u8* w, const f16_t* x, f16_t* y, u64 n, u64 k, u32 rows) { \
        matvec<Q>(w, x, y, n, k, rows);                                                          \
    }                                                                                            \
    KERNEL void matvec_bf16_##NAME(const u8* w, const bf16_t* x, bf16_t* y, u64 n, u64 k, u32 rows) { \
        matvec<Q>(w, x, y, n, k, rows);                                                          \
    }

// One variant per type: the runtime compiles the types a model uses.
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_f32)
QUANT_KERNELS(f32, QF32)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_f16)
QUANT_KERNELS(f16, QF16)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_bf16)
QUANT_KERNELS(bf16, QBF16)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q4_0)
QUANT_KERNELS(q4_0, Q4_0)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q4_1)
QUANT_KERNELS(q4_1, Q4_1)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q5_0)
QUANT_KERNELS(q5_0, Q5_0)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q5_1)
QUANT_KERNELS(q5_1, Q5_1)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q8_0)
QUANT_KERNELS(q8_0, Q8_0)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q8_1)
QUANT_KERNELS(q8_1, Q8_1)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q2k)
QUANT_KERNELS(q2k, Q2K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q3k)
QUANT_KERNELS(q3k, Q3K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q4k)
QUANT_KERNELS(q4k, Q4K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q5k)
QUANT_KERNELS(q5k, Q5K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q6k)
QUANT_KERNELS(q6k, Q6K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q8k)
QUANT_KERNELS(q8k, Q8K)
#endif

// GGUF (ggml) blocks on the device: dequantization, as Candle 0.11.1's CPU backend computes it.
//
// The device layout. A buffer of `total` blocks holds, first, every block's quant bytes (the
// run of QBYTES bytes at QSTART of ggml's block: the packed values), block after block, then
// every block's other fields (ggml's bytes before QSTART, then those after the quants). A block
// type's QBYTES is a multiple of 16, so the quants of each block start on a 16-byte boundary and are
// read with 16-byte loads (ggml's 18-, 34- or 210-byte blocks allow only 2-byte loads); the
// other fields keep the alignment ggml gives them. The float types are their own layout. The
// host converts between the two (rocm-quantized's `layout`), so that the device layout never
// leaves the device and the two are exchanged bit for bit.
//
// Each value is computed with the CPU's operations in the CPU's order and without contraction
// (m_mul_rn, m_add_rn, m_sub_rn), so the results are bit-exact with `QTensor::dequantize`.
//
// Entries: `dequantize_<out>_<type>` (out: f32, f16, bf16; type: the GgmlDType as a key such as
// q4_0 or q4k) and `embedding_<out>_<type>` (the rows `ids` of a (rows, k) table) for every type;
// for the float types `matvec_<x>_<type>` (x . w^T for up to 8 rows of activations x) and
// `quantize_q8_<x>` (activations of dtype x to q8); for the block types `matvec_q8_<x>_<type>`
// (the same product from q8 activations, with integer dot products), `moe_q8_<x>_<type>`
// (one expert matrix per token and slot) and `moe_grouped_q8_<x>_<type>` (the same, the pairs
// of an expert taken together, after `moe_route_<type>` sorts them). Every entry takes the
// weights as (w, total): the buffer and its number of blocks.

// The f16 in the low 16 bits.
DEVICE float q_f16_bits(u32 bits) {
    f16_t h;
    h.bits = (u16)bits;
    return f16_to_f32(h);
}
DEVICE float q_f16(const u8* p) {
    return q_f16_bits(*(const u16*)p);  // every f16 field of a block is 2-byte aligned
}
DEVICE u32 q_u32(const u8* p) { return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24); }

// The activation schemes of the integer dot products (see quantize_q8).
#define Q8_SCHEME_0 0
#define Q8_SCHEME_1 1
#define Q8_SCHEME_K 2

// Four bytes as one int, from an address aligned to A (2 or 4) bytes.
template <int A> DEVICE u32 q_ld32(const u8* p) {
    if (A == 4) return *(const u32*)p;
    return (u32)*(const u16*)p | ((u32)*(const u16*)(p + 2) << 16);
}

// Sixteen bytes from a 16-byte aligned address, as four little-endian ints.
struct alignas(16) QBytes16 { u32 w[4]; };
DEVICE QBytes16 q_ld128(const u8* p) { return *(const QBytes16*)p; }

// One block in the device layout: its quant bytes and its other fields.
struct QBlock {
    const u8* q;
    const u8* m;
};

// Block `blk` of a buffer of `total` blocks of Q in the device layout.
template <typename Q>
DEVICE QBlock q_block(const u8* w, u64 total, u64 blk) {
    constexpr u64 META = Q::BYTES - Q::QBYTES;
    return QBlock{w + blk * Q::QBYTES, w + total * Q::QBYTES + blk * META};
}

// A 32-value sub-block of weights for the integer dot products: q holds the 32 quants as
// signed bytes (four per int, in value order) and, for each 16-value half h, the dot with
// q8 activations (d_x, x quants) is d_x * (a[h] * sum(q * x) + b[h] * sum(x)).
struct QSub {
    int q[8];
    float a[2], b[2];
    DEVICE void same(float a_, float b_) { a[0] = a[1] = a_; b[0] = b[1] = b_; }
};

// The 32 bytes at p (16-byte aligned) as eight ints.
DEVICE void q_ld256(const u8* p, u32* w) {
    const QBytes16 lo = q_ld128(p), hi = q_ld128(p + 16);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        w[i] = lo.w[i];
        w[4 + i] = hi.w[i];
    }
}

// ---- the types of 32-element blocks ----------------------------------------------------------
// In each: BLOCK values in BYTES bytes (ggml), the quants at [QSTART, QSTART + QBYTES) of
// ggml's block; the comment names the other fields in their order in the device layout.

struct Q4_0 {  // d
    static constexpr int BLOCK = 32, BYTES = 18, QSTART = 2, QBYTES = 16;
    DEVICE static float value(QBlock b, int i) {
        const int j = i & 15;
        const int q = i < 16 ? (b.q[j] & 15) : (b.q[j] >> 4);
        return m_mul_rn((float)(q - 8), q_f16(b.m));
    }
    static constexpr int SUBS = 1;
    static constexpr int XSCHEME = Q8_SCHEME_0;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int, QSub& o) {
        const QBytes16 v = q_ld128(b.q);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            o.q[i] = (int)(v.w[i] & 0x0f0f0f0fu);
            o.q[4 + i] = (int)((v.w[i] >> 4) & 0x0f0f0f0fu);
        }
        const float d = q_f16(b.m);
        o.same(d, -8.0f * d);
    }
};
struct Q4_1 {  // d, m
    static constexpr int BLOCK = 32, BYTES = 20, QSTART = 4, QBYTES = 16;
    DEVICE static float value(QBlock b, int i) {
        const int j = i & 15;
        const int q = i < 16 ? (b.q[j] & 15) : (b.q[j] >> 4);
        return m_add_rn(m_mul_rn((float)q, q_f16(b.m)), q_f16(b.m + 2));
    }
    static constexpr int SUBS = 1;
    static constexpr int XSCHEME = Q8_SCHEME_1;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int, QSub& o) {
        const QBytes16 v = q_ld128(b.q);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            o.q[i] = (int)(v.w[i] & 0x0f0f0f0fu);
            o.q[4 + i] = (int)((v.w[i] >> 4) & 0x0f0f0f0fu);
        }
        o.same(q_f16(b.m), q_f16(b.m + 2));
    }
};
// 5-bit quants: the fifth bit of element j is bit j of qh (j < 16) or bit j + 12 shifted (j >= 16).
DEVICE int q5_value(u32 qh, const u8* qs, int i) {
    const int j = i & 15;
    if (i < 16) return (qs[j] & 15) | (int)(((qh >> j) << 4) & 0x10);
    return (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
}
// The low nibbles (half 0) or high nibbles of the 16 quant bytes v, with the fifth bits from
// qh (bit j for value j of the half), as 8-bit lanes of four ints per half.
DEVICE void q5_sub(u32 qh, const QBytes16& v, QSub& o) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const u32 h = qh >> (16 * half + 4 * i);
            const u32 high = ((h & 1) << 4) | ((h & 2) << 11) | ((h & 4) << 18) | ((h & 8) << 25);
            o.q[4 * half + i] = (int)(((v.w[i] >> (4 * half)) & 0x0f0f0f0fu) | high);
        }
    }
}
struct Q5_0 {  // d, qh
    static constexpr int BLOCK = 32, BYTES = 22, QSTART = 6, QBYTES = 16;
    DEVICE static float value(QBlock b, int i) {
        return m_mul_rn((float)(q5_value(q_u32(b.m + 2), b.q, i) - 16), q_f16(b.m));
    }
    static constexpr int SUBS = 1;
    static constexpr int XSCHEME = Q8_SCHEME_0;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int, QSub& o) {
        q5_sub(q_ld32<2>(b.m + 2), q_ld128(b.q), o);  // 6-byte fields: qh is 2-byte aligned
        const float d = q_f16(b.m);
        o.same(d, -16.0f * d);
    }
};
struct Q5_1 {  // d, m, qh
    static constexpr int BLOCK = 32, BYTES = 24, QSTART = 8, QBYTES = 16;
    DEVICE static float value(QBlock b, int i) {
        return m_add_rn(m_mul_rn((float)q5_value(q_u32(b.m + 4), b.q, i), q_f16(b.m)), q_f16(b.m + 2));
    }
    static constexpr int SUBS = 1;
    static constexpr int XSCHEME = Q8_SCHEME_1;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int, QSub& o) {
        q5_sub(q_ld32<4>(b.m + 4), q_ld128(b.q), o);
        o.same(q_f16(b.m), q_f16(b.m + 2));
    }
};
struct Q8_0 {  // d
    static constexpr int BLOCK = 32, BYTES = 34, QSTART = 2, QBYTES = 32;
    DEVICE static float value(QBlock b, int i) { return m_mul_rn((float)(i8)b.q[i], q_f16(b.m)); }
    static constexpr int SUBS = 1;
    static constexpr int XSCHEME = Q8_SCHEME_0;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int, QSub& o) {
        q_ld256(b.q, (u32*)o.q);
        o.same(q_f16(b.m), 0.0f);
    }
};
struct Q8_1 {  // d, s
    static constexpr int BLOCK = 32, BYTES = 36, QSTART = 4, QBYTES = 32;
    DEVICE static float value(QBlock b, int i) { return m_mul_rn((float)(i8)b.q[i], q_f16(b.m)); }
    static constexpr int SUBS = 1;
    static constexpr int XSCHEME = Q8_SCHEME_1;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int, QSub& o) {
        q_ld256(b.q, (u32*)o.q);
        o.same(q_f16(b.m), 0.0f);
    }
};

// ---- k-quants: 256-element super-blocks ------------------------------------------------------

struct Q2K {  // quants: scales[16], qs[64]; other fields: d, dmin
    static constexpr int BLOCK = 256, BYTES = 84, QSTART = 0, QBYTES = 80;
    DEVICE static float value(QBlock b, int i) {
        const int chunk = i >> 7, p = i & 127, j = p >> 5, half = (p >> 4) & 1, l = p & 15;
        const int sc = b.q[chunk * 8 + j * 2 + half];
        const float dl = m_mul_rn(q_f16(b.m), (float)(sc & 15));
        const float ml = m_mul_rn(q_f16(b.m + 2), (float)(sc >> 4));
        const int q = (b.q[16 + chunk * 32 + half * 16 + l] >> (2 * j)) & 3;
        return m_sub_rn(m_mul_rn(dl, (float)q), ml);
    }
    static constexpr int SUBS = 8;
    static constexpr int XSCHEME = Q8_SCHEME_K;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int s, QSub& o) {
        const int chunk = s >> 2, j = s & 3;
        u32 v[8];
        q_ld256(b.q + 16 + chunk * 32, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) o.q[i] = (int)((v[i] >> (2 * j)) & 0x03030303u);
        // d and dmin in one load (the 4-byte fields are 4-byte aligned), the halves' scales in one
        const u32 dm = q_ld32<4>(b.m), scs = *(const u16*)(b.q + chunk * 8 + j * 2);
        const float d = q_f16_bits(dm & 0xffffu), dmin = q_f16_bits(dm >> 16);
        for (int h = 0; h < 2; ++h) {
            const int sc = (int)((scs >> (8 * h)) & 0xffu);
            o.a[h] = d * (float)(sc & 15);
            o.b[h] = -dmin * (float)(sc >> 4);
        }
    }
};

struct Q3K {  // quants: hmask[32], qs[64]; other fields: scales[12], d
    static constexpr int BLOCK = 256, BYTES = 110, QSTART = 0, QBYTES = 96;
    // The 6-bit scale `is`, unpacked from the 12 packed bytes as ggml does.
    DEVICE static int scale(const u8* s, int is) {
        const u32 a0 = q_ld32<2>(s), a1 = q_ld32<2>(s + 4), tmp = q_ld32<2>(s + 8);
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
    DEVICE static float value(QBlock b, int i) {
        const int chunk = i >> 7, p = i & 127, j = p >> 5, si = (p >> 4) & 1, l = p & 15;
        const int is = chunk * 8 + j * 2 + si;
        const float dl = m_mul_rn(q_f16(b.m + 12), m_sub_rn((float)scale(b.m, is), 32.0f));
        const int q = (b.q[32 + chunk * 32 + l + 16 * si] >> (2 * j)) & 3;
        const int m = 1 << (chunk * 4 + j);
        const int h = (b.q[l + 16 * si] & m) ? 0 : 4;
        return m_mul_rn(dl, (float)(q - h));
    }
    static constexpr int SUBS = 8;
    static constexpr int XSCHEME = Q8_SCHEME_K;  // the activation type the CPU pairs with it
    // Quants as q + 4 * hbit (0..7); the offset 4 goes into b.
    DEVICE static void sub(QBlock b, int s, QSub& o) {
        const int chunk = s >> 2, j = s & 3, hb = chunk * 4 + j;
        u32 qv[8], hv[8];
        q_ld256(b.q + 32 + chunk * 32, qv);
        q_ld256(b.q, hv);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const u32 q = (qv[i] >> (2 * j)) & 0x03030303u;
            const u32 h = (hv[i] >> hb) & 0x01010101u;
            o.q[i] = (int)(q | (h << 2));
        }
        const float d = q_f16(b.m + 12);
        for (int h = 0; h < 2; ++h) {
            o.a[h] = d * (float)(scale(b.m, chunk * 8 + j * 2 + h) - 32);
            o.b[h] = -4.0f * o.a[h];
        }
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

// Q4_K's and Q5_K's other fields (d, dmin, scales[12]: 16 bytes, 16-byte aligned in the
// device layout) in one load: sub-block j's 6-bit scale and min as scale_min_k4 reads them, and
// the two f16 factors.
struct K4Head {
    QBytes16 h;
    DEVICE explicit K4Head(const u8* m) : h(q_ld128(m)) {}
    // byte i of word w of the scales (word 0: scales[0..4), 1: [4..8), 2: [8..12))
    DEVICE u32 sc(int w, int i) const { return (h.w[1 + w] >> (8 * i)) & 0xffu; }
    DEVICE void scale_min(int j, int& d, int& m) const {
        if (j < 4) {
            d = (int)(sc(0, j) & 63);
            m = (int)(sc(1, j) & 63);
        } else {
            const int i = j - 4;
            d = (int)((sc(2, i) & 15) | ((sc(0, i) >> 6) << 4));
            m = (int)((sc(2, i) >> 4) | ((sc(1, i) >> 6) << 4));
        }
    }
    DEVICE float d() const { return q_f16_bits(h.w[0] & 0xffffu); }
    DEVICE float dmin() const { return q_f16_bits(h.w[0] >> 16); }
};

struct Q4K {  // quants: qs[128]; other fields: d, dmin, scales[12]
    static constexpr int BLOCK = 256, BYTES = 144, QSTART = 16, QBYTES = 128;
    DEVICE static float value(QBlock b, int i) {
        const int j64 = i >> 6, p = i & 63, hi = p >> 5;
        int sc, m;
        scale_min_k4(2 * j64 + hi, b.m + 4, sc, m);
        const float d1 = m_mul_rn(q_f16(b.m), (float)sc), m1 = m_mul_rn(q_f16(b.m + 2), (float)m);
        const int q = b.q[j64 * 32 + (p & 31)];
        return m_sub_rn(m_mul_rn(d1, (float)(hi ? q >> 4 : q & 15)), m1);
    }
    static constexpr int SUBS = 8;
    static constexpr int XSCHEME = Q8_SCHEME_K;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int s, QSub& o) {
        const int j64 = s >> 1, hi = s & 1;
        u32 v[8];
        q_ld256(b.q + j64 * 32, v);
#pragma unroll
        for (int i = 0; i < 8; ++i) o.q[i] = (int)((v[i] >> (4 * hi)) & 0x0f0f0f0fu);
        const K4Head head(b.m);
        int sc, m;
        head.scale_min(s, sc, m);
        o.same(head.d() * (float)sc, -head.dmin() * (float)m);
    }
};

struct Q5K {  // quants: qh[32], qs[128]; other fields: d, dmin, scales[12]
    static constexpr int BLOCK = 256, BYTES = 176, QSTART = 16, QBYTES = 160;
    DEVICE static float value(QBlock b, int i) {
        const int j64 = i >> 6, p = i & 63, hi = p >> 5, l = p & 31;
        int sc, m;
        scale_min_k4(2 * j64 + hi, b.m + 4, sc, m);
        const float d1 = m_mul_rn(q_f16(b.m), (float)sc), m1 = m_mul_rn(q_f16(b.m + 2), (float)m);
        const int u = (hi ? 2 : 1) << (2 * j64);
        const float high = (b.q[l] & u) ? 16.0f : 0.0f;
        const int ql = b.q[32 + j64 * 32 + l];
        return m_sub_rn(m_mul_rn(d1, m_add_rn((float)(hi ? ql >> 4 : ql & 15), high)), m1);
    }
    static constexpr int SUBS = 8;
    static constexpr int XSCHEME = Q8_SCHEME_K;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int s, QSub& o) {
        const int j64 = s >> 1, hi = s & 1;
        u32 lv[8], hv[8];
        q_ld256(b.q + 32 + j64 * 32, lv);
        q_ld256(b.q, hv);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const u32 lo = (lv[i] >> (4 * hi)) & 0x0f0f0f0fu;
            const u32 h = (hv[i] >> (2 * j64 + hi)) & 0x01010101u;
            o.q[i] = (int)(lo | (h << 4));
        }
        const K4Head head(b.m);
        int sc, m;
        head.scale_min(s, sc, m);
        o.same(head.d() * (float)sc, -head.dmin() * (float)m);
    }
};

struct Q6K {  // quants: ql[128], qh[64]; other fields: scales[16] (i8), d
    static constexpr int BLOCK = 256, BYTES = 210, QSTART = 0, QBYTES = 192;
    DEVICE static float value(QBlock b, int i) {
        const int idx = i >> 7, p = i & 127, part = p >> 5, l = p & 31;
        const u8* ql = b.q + 64 * idx;
        const u8 qh = b.q[128 + 32 * idx + l];
        const u8 lo = (part & 1) ? ql[l + 32] : ql[l];
        const int q = ((part < 2 ? lo & 15 : lo >> 4) | (((qh >> (2 * part)) & 3) << 4)) - 32;
        const int sc = (i8)b.m[8 * idx + (l >> 4) + 2 * part];
        return m_mul_rn(m_mul_rn(q_f16(b.m + 16), (float)sc), (float)q);
    }
    static constexpr int SUBS = 8;
    static constexpr int XSCHEME = Q8_SCHEME_K;  // the activation type the CPU pairs with it
    // Quants as 0..63; the offset 32 goes into b.
    DEVICE static void sub(QBlock b, int s, QSub& o) {
        const int idx = s >> 2, part = s & 3;
        const int shift = part < 2 ? 0 : 4;
        u32 lv[8], hv[8];
        q_ld256(b.q + 64 * idx + ((part & 1) ? 32 : 0), lv);
        q_ld256(b.q + 128 + 32 * idx, hv);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const u32 lo = (lv[i] >> shift) & 0x0f0f0f0fu;
            const u32 h = (hv[i] >> (2 * part)) & 0x03030303u;
            o.q[i] = (int)(lo | (h << 4));
        }
        const float d = q_f16(b.m + 16);
        const u32 scs = *(const u16*)(b.m + 8 * idx + 2 * part);
        for (int h = 0; h < 2; ++h) {
            o.a[h] = d * (float)(i8)(u8)(scs >> (8 * h));
            o.b[h] = -32.0f * o.a[h];
        }
    }
};

struct Q8K {  // quants: qs[256]; other fields: d (f32), bsums[16]
    static constexpr int BLOCK = 256, BYTES = 292, QSTART = 4, QBYTES = 256;
    DEVICE static float value(QBlock b, int i) {
        return m_mul_rn(f32_from_bits(q_u32(b.m)), (float)(i8)b.q[i]);
    }
    static constexpr int SUBS = 8;
    static constexpr int XSCHEME = Q8_SCHEME_K;  // the activation type the CPU pairs with it
    DEVICE static void sub(QBlock b, int s, QSub& o) {
        q_ld256(b.q + 32 * s, (u32*)o.q);
        o.same(f32_from_bits(q_ld32<4>(b.m)), 0.0f);
    }
};

// ---- plain float "blocks": their own layout --------------------------------------------------

struct QF32 {
    static constexpr int BLOCK = 1, BYTES = 4, QSTART = 0, QBYTES = 4;
    DEVICE static float value(QBlock b, int) { return f32_from_bits(q_u32(b.q)); }
};
struct QF16 {
    static constexpr int BLOCK = 1, BYTES = 2, QSTART = 0, QBYTES = 2;
    DEVICE static float value(QBlock b, int) { return q_f16(b.q); }
};
struct QBF16 {
    static constexpr int BLOCK = 1, BYTES = 2, QSTART = 0, QBYTES = 2;
    DEVICE static float value(QBlock b, int) {
        bf16_t h;
        h.bits = (u16)(b.q[0] | (b.q[1] << 8));
        return bf16_to_f32(h);
    }
};

// ---- kernels ---------------------------------------------------------------------------------

DEVICE void q_store(float* out, u64 i, float v) { out[i] = v; }
DEVICE void q_store(f16_t* out, u64 i, float v) { out[i] = f32_to_f16(v); }
DEVICE void q_store(bf16_t* out, u64 i, float v) { out[i] = f32_to_bf16(v); }

// Eight values in one (f16, bf16) or two (f32) 16-byte stores; `out + i` 16-byte aligned.
DEVICE void q_store8(float* out, u64 i, const float* v) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        Raw16 r;
        r.lo = f32_bits(v[4 * h]) | (u64)f32_bits(v[4 * h + 1]) << 32;
        r.hi = f32_bits(v[4 * h + 2]) | (u64)f32_bits(v[4 * h + 3]) << 32;
        *(Raw16*)(out + i + 4 * h) = r;
    }
}
template <typename O> DEVICE void q_store8(O* out, u64 i, const float* v) {
    u64 word[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        O x;
        q_store(&x, 0, v[j]);
        word[j / 4] |= (u64)x.bits << (16 * (j % 4));
    }
    *(Raw16*)(out + i) = Raw16{word[0], word[1]};
}

// Values a thread of `dequantize` takes where a block holds a multiple of them (every block
// type): the block's address is taken once for them and they leave in 16-byte stores (one value
// a thread stored 2 bytes at a time). Each value still reads its own sub-block fields: the
// compiler does not merge them (SASS of Q4_K, NVRTC sm_90: 53 instructions a value, 68 before).
#define DEQUANTIZE_VALUES 8

// n values (a whole number of blocks) from block `first` of the `total` blocks at w; out is
// 16-byte aligned (a fresh buffer). The arithmetic is Q::value's, so the results stay the CPU's.
template <typename Q, typename O>
DEVICE void dequantize(const u8* w, u64 total, u64 first, O* out, u64 n) {
    if (Q::BLOCK % DEQUANTIZE_VALUES == 0) {
        for (u64 g = blockIdx.x * (u64)blockDim.x + threadIdx.x; g < n / DEQUANTIZE_VALUES;
             g += (u64)gridDim.x * blockDim.x) {
            constexpr u64 GROUPS = Q::BLOCK / DEQUANTIZE_VALUES;  // a block's groups of values
            const u64 blk = g / GROUPS;
            const QBlock b = q_block<Q>(w, total, first + blk);
            const int at = (int)(g - blk * GROUPS) * DEQUANTIZE_VALUES;
            // every value first, then the stores (a store may alias the block's bytes)
            float v[DEQUANTIZE_VALUES];
#pragma unroll
            for (int j = 0; j < DEQUANTIZE_VALUES; ++j) v[j] = Q::value(b, at + j);
            q_store8(out, g * DEQUANTIZE_VALUES, v);
        }
    } else {
        for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
            const u64 blk = i / Q::BLOCK;
            q_store(out, i, Q::value(q_block<Q>(w, total, first + blk), (int)(i - blk * Q::BLOCK)));
        }
    }
}

// out[r, :] = table[ids[r], :] for a (rows, k) table of `total` blocks; an id outside the table
// gives a zero row and, where `bad` is not null, is counted there.
template <typename Q, typename O>
DEVICE void embedding(const u8* table, u64 total, const u32* ids, O* out, u64 n_ids, u64 rows, u64 k, u32* bad) {
    const u64 row_blocks = k / Q::BLOCK;
    const u64 n = n_ids * k;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 r = i / k, c = i - r * k;
        const u64 id = ids[r];
        float v = 0.0f;
        if (id < rows) {
            const u64 blk = c / Q::BLOCK;
            v = Q::value(q_block<Q>(table, total, id * row_blocks + blk), (int)(c - blk * Q::BLOCK));
        } else if (bad != 0 && c == 0) {
            atomicAdd(bad, 1u);
        }
        q_store(out, i, v);
    }
}

// ---- mat-vec: y = x . w^T for 1 to MATVEC_MAX_ROWS rows of activations -----------------------

#define MATVEC_MAX_ROWS 8
// Threads of a mat-vec block (and of the mixture of experts' mat-vecs).
#define MATVEC_BLOCK 256
// Bounded so, AMD's compilers give the mixture of experts' K-quant mat-vecs the registers a
// block of that size allows (the default assumes blocks of 1024 threads: at 128 VGPRs moe_q8
// spilled 12-220 bytes a lane to scratch on gfx90a and gfx942).
#define MATVEC_BOUNDS __launch_bounds__(MATVEC_BLOCK)

DEVICE float q_load(const float* x, u64 i) { return x[i]; }
DEVICE float q_load(const f16_t* x, u64 i) { return f16_to_f32(x[i]); }
DEVICE float q_load(const bf16_t* x, u64 i) { return bf16_to_f32(x[i]); }

// The N values x[at..at + N) as f32 (N * sizeof(X) a multiple of 16): 16-byte loads where the
// address allows (a view may start anywhere), else one value at a time.
DEVICE float q_unpack(u32 w, int half, const float*) { return half == 0 ? f32_from_bits(w) : 0.0f; }
DEVICE float q_unpack(u32 w, int half, const f16_t*) {
    f16_t h;
    h.bits = (u16)(w >> (16 * half));
    return f16_to_f32(h);
}
DEVICE float q_unpack(u32 w, int half, const bf16_t*) { return f32_from_bits((w >> (16 * half)) << 16); }
template <int N, typename X>
DEVICE void q_load_run(const X* x, u64 at, float* v) {
    const X* p = x + at;
    if (((usize)p & 15) != 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) v[i] = q_load(p, i);
        return;
    }
    constexpr int per_word = 4 / sizeof(X) > 0 ? 4 / sizeof(X) : 1;  // values in a u32
    constexpr int vectors = N * sizeof(X) / 16;
    const QBytes16* q = (const QBytes16*)p;
#pragma unroll
    for (int c = 0; c < vectors; ++c) {
        const QBytes16 b = q[c];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int h = 0; h < per_word; ++h) v[(c * 4 + i) * per_word + h] = q_unpack(b.w[i], h, p);
    }
}

// One warp (of whatever width the device has) per row j of the (n, k) weights (`total` blocks
// in the buffer): the lanes walk the row's values in step, each multiplies its value into every
// activation row, and a butterfly over the warp sums each row's products. The weights are read
// in place, once.
template <typename Q, typename X>
DEVICE void matvec(const u8* w, u64 total, const X* x, X* y, u64 n, u64 k, u32 rows) {
    const u32 lane = threadIdx.x % warpSize;
    const u64 warps = blockDim.x / warpSize;
    const u64 row_blocks = k / Q::BLOCK;
    for (u64 j = blockIdx.x * warps + threadIdx.x / warpSize; j < n; j += (u64)gridDim.x * warps) {
        float acc[MATVEC_MAX_ROWS];
#pragma unroll
        for (int r = 0; r < MATVEC_MAX_ROWS; ++r) acc[r] = 0.0f;
        for (u64 i = lane; i < k; i += warpSize) {
            const u64 blk = i / Q::BLOCK;
            const float v = Q::value(q_block<Q>(w, total, j * row_blocks + blk), (int)(i - blk * Q::BLOCK));
#pragma unroll
            for (int r = 0; r < MATVEC_MAX_ROWS; ++r)
                if (r < (int)rows) acc[r] += v * q_load(x, r * k + i);
        }
#pragma unroll
        for (int r = 0; r < MATVEC_MAX_ROWS; ++r) {
            if (r >= (int)rows) break;
            float s = acc[r];
            s = warp_sum(s);
            if (lane == 0) q_store(y, r * n + j, s);
        }
    }
}

// ---- q8 activations and the integer mat-vec ---------------------------------------------------
//
// `quantize_q8_<x>` turns m contiguous rows of k activations (k a multiple of 32; of 256 for the
// K scheme) into the form the integer dot products read: m * k signed bytes, then at byte m * k
// one 8-byte record per 32 values: the scale d (f32 bits) and the sums of the first and the last
// 16 bytes (two i16). The scheme is the activation type Candle's CPU pairs with the weights'
// type (its `VecDotType`), computed as the CPU computes it, so the integer sums are the CPU's:
// - Q8_0 (for Q4_0, Q5_0, Q8_0) and Q8_1 (for Q4_1, Q5_1, Q8_1): per 32 values d = amax / 127,
//   bytes round(x * (1 / d)), d kept as an f16 (Q8_1's sum term is rebuilt from the bytes in
//   the dot, as the CPU stores it);
// - Q8K (for the k-quants): per 256 values iscale = -127 / (the value of largest magnitude),
//   bytes round(x * iscale) clamped to i8, d = 1 / iscale in f32 (in each of the 8 records).

DEVICE float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

// The largest magnitude of a run of values and its signed value, the first of equal magnitudes
// winning (the CPU's scan); `at` orders runs when two are combined.
struct QMax { float amax, max; u32 at; };

DEVICE QMax qmax_combine(QMax a, QMax b) {
    return (b.amax > a.amax || (b.amax == a.amax && b.at < a.at)) ? b : a;
}

// Sub-block s (the 32 values v) of activations in q8 form: its bytes at q + s * 32, its record
// at meta + s * 8. Every lane of the warp calls it (`live` false past the end, v zeros) because
// the K scheme's 256-value maximum is combined over the 8 lanes that hold one 256-value block
// (consecutive s on consecutive lanes, the first on a lane that is a multiple of 8).
DEVICE void q8_write_sub(const float* v, u64 s, bool live, u8* q, u8* meta, u32 scheme) {
    float d, id;
    if (scheme == Q8_SCHEME_K) {
        QMax m = {0.0f, 0.0f, (u32)(s & 7)};
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            if (m.amax < m_abs(v[i])) {
                m.amax = m_abs(v[i]);
                m.max = v[i];
            }
        }
        for (int o = 1; o < 8; o <<= 1) {
            QMax other = {warp_shfl_xor(m.amax, o), warp_shfl_xor(m.max, o), warp_shfl_xor(m.at, o)};
            m = qmax_combine(m, other);
        }
        id = m.amax == 0.0f ? 0.0f : -127.0f / m.max;
        d = m.amax == 0.0f ? 0.0f : 1.0f / id;
    } else {
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; ++i) amax = m_max(amax, m_abs(v[i]));
        const float d32 = amax / 127.0f;
        id = d32 != 0.0f ? 1.0f / d32 : 0.0f;
        d = f16_round(d32);
    }
    if (!live) return;
    QBytes16 b16[2];
    int sums[2] = {0, 0};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const int b = (int)m_max(-128.0f, m_min(127.0f, m_round(m_mul_rn(v[i], id))));
        sums[i >> 4] += b;
        if ((i & 3) == 0) b16[i >> 4].w[(i >> 2) & 3] = 0;
        b16[i >> 4].w[(i >> 2) & 3] |= (u32)(u8)(i8)b << (8 * (i & 3));
    }
    QBytes16* dst = (QBytes16*)(q + s * 32);
    dst[0] = b16[0];
    dst[1] = b16[1];
    u32* rec = (u32*)(meta + s * 8);
    rec[0] = f32_bits(d);
    rec[1] = (u32)(u16)(i16)sums[0] | ((u32)(u16)(i16)sums[1] << 16);
}

// q8_write_sub of sub-block s of the activations x.
template <typename X>
DEVICE void quantize_q8_sub(const X* x, u64 s, bool live, u8* q, u8* meta, u32 scheme) {
    float v[32];
    if (live) {
        q_load_run<32>(x, s * 32, v);
    } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) v[i] = 0.0f;
    }
    q8_write_sub(v, s, live, q, meta, scheme);
}

// The m x k activations in q8 form, one sub-block per thread. The loop runs whole warps (all
// lanes reach the K scheme's shuffles); the grid is a whole number of warps.
template <typename X>
DEVICE void quantize_q8(const X* x, u8* out, u64 m, u64 k, u32 scheme) {
    const u64 subs = m * k / 32;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 first = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    const u64 lane0 = first - threadIdx.x % warpSize;
    for (u64 base = lane0; base < subs; base += stride) {
        const u64 s = base + threadIdx.x % warpSize;
        quantize_q8_sub(x, s, s < subs, out, out + m * k, scheme);
    }
}

// ---- fused producers of q8 activations: a decode step's norms and gated MLP -----------------
//
// They write what quantize_q8 would write from the float result of the ops they replace (the
// result rounded to x's dtype first, as those ops store it), so the mat-vec that reads it needs
// no quantizing launch of its own.

// v rounded to the dtype of X, as a store of it would round it.
DEVICE float q_as(float v, const float*) { return v; }
DEVICE float q_as(float v, const f16_t*) { return f16_to_f32(f32_to_f16(v)); }
DEVICE float q_as(float v, const bf16_t*) { return bf16_to_f32(f32_to_bf16(v)); }

// q8_write_sub with the 32 values of sub-block s spread over four consecutive lanes: lane
// `quarter` (0..3, the lane's index mod 4) holds the 8 values v of positions 8 * quarter... The
// same bytes and record as q8_write_sub. Every lane of the warp calls it (`live` false past
// the end, v zeros); for the K scheme the 32 lanes that hold one 256-value block start on a lane
// that is a multiple of 32.
DEVICE void q8_write_quarter(const float* v, u64 s, u32 quarter, bool live, u8* q, u8* meta, u32 scheme) {
    float d, id;
    if (scheme == Q8_SCHEME_K) {
        QMax m = {0.0f, 0.0f, (u32)((s & 7) * 4 + quarter)};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if (m.amax < m_abs(v[i])) {
                m.amax = m_abs(v[i]);
                m.max = v[i];
            }
        }
        for (int o = 1; o < 32; o <<= 1) {
            QMax other = {warp_shfl_xor(m.amax, o), warp_shfl_xor(m.max, o), warp_shfl_xor(m.at, o)};
            m = qmax_combine(m, other);
        }
        id = m.amax == 0.0f ? 0.0f : -127.0f / m.max;
        d = m.amax == 0.0f ? 0.0f : 1.0f / id;
    } else {
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = m_max(amax, m_abs(v[i]));
        amax = m_max(amax, warp_shfl_xor(amax, 1));
        amax = m_max(amax, warp_shfl_xor(amax, 2));
        const float d32 = amax / 127.0f;
        id = d32 != 0.0f ? 1.0f / d32 : 0.0f;
        d = f16_round(d32);
    }
    u32 w[2] = {0u, 0u};
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int b = (int)m_max(-128.0f, m_min(127.0f, m_round(m_mul_rn(v[i], id))));
        sum += b;
        w[i >> 2] |= (u32)(u8)(i8)b << (8 * (i & 3));
    }
    // quarters 0 and 1 hold the first 16 values, 2 and 3 the last
    sum += warp_shfl_xor(sum, 1);
    const int other_half = warp_shfl_xor(sum, 2);
    if (!live) return;
    u32* dst = (u32*)(q + s * 32 + quarter * 8);
    dst[0] = w[0];
    dst[1] = w[1];
    if (quarter == 0) {
        u32* rec = (u32*)(meta + s * 8);
        rec[0] = f32_bits(d);
        rec[1] = (u32)(u16)(i16)sum | ((u32)(u16)(i16)other_half << 16);
    }
}

// 1 / sqrt(mean(s^2) + eps) of a row of k values from each thread's sum of squares `ss`
// (every thread alike).
DEVICE float rms_q8_scale(float ss, u64 k, float eps) {
    ss = block_combine_all<SumOf<float> >(ss);
    return 1.0f / m_sqrt(ss / (float)k + eps);
}

// The 8 values at `at` of the norm's input: x, or x + r rounded to X and stored to sum.
template <typename X>
DEVICE void rms_q8_load(const X* x, const X* r, X* sum, u64 at, u32 has_residual, float* v) {
    q_load_run<8>(x, at, v);
    if (has_residual) {
        float rv[8];
        q_load_run<8>(r, at, rv);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            v[i] = q_as(v[i] + rv[i], x);
            q_store(sum, at + i, v[i]);
        }
    }
}

// Runs of 8 values a thread of rms_norm_q8 kept in registers from the load to the quantization,
// and the most threads of its blocks (rows of up to 8192 values stay in registers).
#define RMS_Q8_RUNS 2
#define RMS_Q8_MAX_THREADS 512

// For each of the m rows of x (k values, k a multiple of 32, of 256 for the K scheme): with a
// residual r (has_residual), s = x + r is stored to `sum` and normed in place of x; out gets the
// q8 form of the (m, k) rms norm s * (1 / sqrt(mean(s^2) + eps)) * alpha, and `normed` (where
// has_normed) the norm itself in X, as rms_norm writes it (a router's input). One block a row of
// whole warps; thread t takes the runs of 8 values t, t + blockDim, ... (four lanes a
// sub-block). Where that is at most RMS_Q8_RUNS runs a thread, the runs and alpha's stay in
// registers, so the row is read once and the reduction is the only wait between load and
// store; longer rows are read again after the reduction (the sums from `sum`, which each thread
// stored itself). Both forms add and round in the same order.
template <typename X>
DEVICE void rms_norm_q8(const X* x, const X* r, X* sum, const X* alpha, u8* out, X* normed, u64 m, u64 k,
                        float eps, u32 scheme, u32 has_residual, u32 has_normed) {
    const u32 lane = threadIdx.x % warpSize;
    const u64 runs = k / 8;
    const bool in_registers = runs <= (u64)RMS_Q8_RUNS * blockDim.x;
    for (u64 row = blockIdx.x; row < m; row += gridDim.x) {
        const X* xr = x + row * k;
        const X* rr = r + row * k;
        X* sr = sum + row * k;
        float ss = 0.0f;
        if (in_registers) {
            float v[RMS_Q8_RUNS][8], a[RMS_Q8_RUNS][8];
#pragma unroll
            for (int i = 0; i < RMS_Q8_RUNS; ++i) {
                const u64 c = threadIdx.x + (u64)i * blockDim.x;
                if (c < runs) {
                    q_load_run<8>(alpha, c * 8, a[i]);
                    rms_q8_load(xr, rr, sr, c * 8, has_residual, v[i]);
#pragma unroll
                    for (int e = 0; e < 8; ++e) ss += v[i][e] * v[i][e];
                }
            }
            const float scale = rms_q8_scale(ss, k, eps);
#pragma unroll
            for (int i = 0; i < RMS_Q8_RUNS; ++i) {
                const u64 base = threadIdx.x - lane + (u64)i * blockDim.x;  // the same for the warp
                if (base >= runs) break;
                const u64 c = base + lane;
                const bool live = c < runs;
                float w[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) w[e] = live ? q_as(v[i][e] * scale * a[i][e], x) : 0.0f;
                if (has_normed != 0 && live) q_store8(normed, row * k + c * 8, w);
                q8_write_quarter(w, row * (k / 32) + c / 4, (u32)(c % 4), live, out, out + m * k, scheme);
            }
            continue;
        }
        for (u64 c = threadIdx.x; c < runs; c += blockDim.x) {
            float v[8];
            rms_q8_load(xr, rr, sr, c * 8, has_residual, v);
#pragma unroll
            for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
        }
        const float scale = rms_q8_scale(ss, k, eps);
        const X* src = has_residual ? sr : xr;
        for (u64 base = threadIdx.x - lane; base < runs; base += blockDim.x) {
            const u64 c = base + lane;
            const bool live = c < runs;
            float v[8], a[8];
            if (live) {
                q_load_run<8>(src, c * 8, v);
                q_load_run<8>(alpha, c * 8, a);
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = live ? q_as(v[e] * scale * a[e], x) : 0.0f;
            if (has_normed != 0 && live) q_store8(normed, row * k + c * 8, v);
            q8_write_quarter(v, row * (k / 32) + c / 4, (u32)(c % 4), live, out, out + m * k, scheme);
        }
    }
}

// out = the q8 form of the (m, w) activations silu(g) * u, for rows [g | u] of gate_up (m, 2w;
// w a multiple of 32, of 256 for the K scheme). A run of 8 values a thread (four lanes a
// sub-block), whole warps.
template <typename X>
DEVICE void swiglu_q8(const X* gate_up, u8* out, u64 m, u64 w, u32 scheme) {
    const u64 row_runs = w / 8, runs = m * row_runs;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    const u64 lane0 = blockIdx.x * (u64)blockDim.x + threadIdx.x - threadIdx.x % warpSize;
    for (u64 base = lane0; base < runs; base += stride) {
        const u64 c = base + threadIdx.x % warpSize;
        const bool live = c < runs;
        float v[8];
        if (live) {
            const u64 row = c / row_runs, at = (c - row * row_runs) * 8;
            float u[8];
            q_load_run<8>(gate_up + row * 2 * w, at, v);
            q_load_run<8>(gate_up + row * 2 * w + w, at, u);
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = q_as(q_as(v[i] / (1.0f + m_exp(-v[i])), gate_up) * u[i], gate_up);
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = 0.0f;
        }
        // rows are whole sub-blocks: run c is quarter c % 4 of sub-block c / 4
        q8_write_quarter(v, c / 4, (u32)(c % 4), live, out, out + m * w, scheme);
    }
}

// The dot of one 32-value weight sub-block `w` with sub-block s of a row of q8 activations (its
// bytes at xs, its record at rec), as the CPU sums it.
template <typename Q>
DEVICE float q8_sub_dot(const QSub& w, const u8* xs, const u8* rec_at) {
    const QBytes16* xv = (const QBytes16*)xs;
    const QBytes16 lo = xv[0], hi = xv[1];
    int i0 = 0, i1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        i0 = dot4_i8(w.q[i], (int)lo.w[i], i0);
        i1 = dot4_i8(w.q[4 + i], (int)hi.w[i], i1);
    }
    const u32* rec = (const u32*)rec_at;
    const float d = f32_from_bits(rec[0]);
    const int s0 = (i16)(u16)(rec[1] & 0xffffu), s1 = (i16)(u16)(rec[1] >> 16);
    const float dots = d * (w.a[0] * (float)i0 + w.a[1] * (float)i1);
    if (Q::XSCHEME == Q8_SCHEME_1) {
        // the CPU's Q8_1 sum: f16(f16(sum) * d), in f16 arithmetic
        return dots + w.b[0] * f16_round(f16_round((float)(s0 + s1)) * d);
    }
    return dots + d * (w.b[0] * (float)s0 + w.b[1] * (float)s1);
}

// The activation rows a dot reads: row r of a pass is row r of the q8 buffer (`QRowsIn`), or
// row at[r] of it (`QRowsAt`, rows gathered).
struct QRowsIn {
    DEVICE u64 operator[](int r) const { return (u64)r; }
};
template <int N>
struct QRowsAt {
    u32 at[N];
    DEVICE u64 operator[](int r) const { return at[r]; }
};

// The dot of one weight row (its first block `row0` of the `total` blocks at w) with `rows` rows
// of q8 activations (rows xr[0], xr[1], ... of xq and meta), added to acc: lane `lane` of
// `width` takes the 32-value sub-blocks lane, lane + width, ...
template <typename Q, int MAXR, typename R = QRowsIn>
DEVICE void q8_row_dot(const u8* w, u64 total, u64 row0, const u8* xq, const u8* meta, u64 k, u32 rows, u32 lane,
                       u32 width, float* acc, R xr = R()) {
    const u64 subs = k / 32;
    // unrolled so that the loads of several sub-blocks are in flight at once
#pragma unroll 4
    for (u64 s = lane; s < subs; s += width) {
        const u64 blk = s / Q::SUBS;
        QSub sw;
        Q::sub(q_block<Q>(w, total, row0 + blk), (int)(s - blk * Q::SUBS), sw);
#pragma unroll
        for (int r = 0; r < MAXR; ++r) {
            if (r >= (int)rows) break;
            acc[r] += q8_sub_dot<Q>(sw, xq + xr[r] * k + s * 32, meta + (xr[r] * subs + s) * 8);
        }
    }
}

// y = x . w^T from q8 activations: each group of `wpr` warps (1, 2, 4 or 8; at most the block's
// warps) takes one weight row, each warp every wpr-th run of sub-blocks of it; the warps' sums
// meet in shared memory. One warp a row leaves most of the device idle where the rows are few
// (4096 rows are half the warps an H100 holds): more warps a row keep more loads in flight.
// MAXR: the activation rows a pass takes (MATVEC_MAX_ROWS, or 1 for decode's single row: its
// own entry, `matvec1_q8`, without the seven other accumulators' registers, so that more warps
// fit a multiprocessor).
template <typename Q, int MAXR, typename X>
DEVICE void matvec_q8(const u8* w, u64 total, const u8* xq, X* y, u64 n, u64 k, u32 rows, u32 wpr) {
    __shared__ float partial[MAX_BLOCK_WARPS][MAXR];
    const u32 lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    const u32 rows_per_block = blockDim.x / warpSize / wpr;
    const u32 part = warp % wpr, slot = warp / wpr;
    const u64 row_blocks = k / Q::BLOCK;
    const u8* meta = xq + rows * k;
    // the loop is uniform over the block (its barriers)
    for (u64 j0 = blockIdx.x * (u64)rows_per_block; j0 < n; j0 += (u64)gridDim.x * rows_per_block) {
        const u64 j = j0 + slot;
        float acc[MAXR];
        // rows in groups of MAXR: the weight rows come from memory once, then from
        // the cache for the next group
        for (u32 r0 = 0; r0 < rows; r0 += MAXR) {
            const u32 group = rows - r0 < MAXR ? rows - r0 : MAXR;
#pragma unroll
            for (int r = 0; r < MAXR; ++r) acc[r] = 0.0f;
            if (j < n)
                q8_row_dot<Q, MAXR>(w, total, j * row_blocks, xq + r0 * k, meta + r0 * (k / 32) * 8, k, group,
                              part * warpSize + lane, wpr * warpSize, acc);
#pragma unroll
            for (int r = 0; r < MAXR; ++r) {
                if (r >= (int)group) break;
                float v = acc[r];
                v = warp_sum(v);
                acc[r] = v;
            }
            if (wpr == 1) {
                if (lane == 0 && j < n)
                    for (u32 r = 0; r < group; ++r) q_store(y, (r0 + r) * n + j, acc[r]);
                continue;
            }
            if (lane == 0)
                for (u32 r = 0; r < group; ++r) partial[warp][r] = acc[r];
            __syncthreads();
            if (part == 0 && lane == 0 && j < n) {
                for (u32 r = 0; r < group; ++r) {
                    float v = 0.0f;
                    for (u32 p = 0; p < wpr; ++p) v += partial[warp + p][r];
                    q_store(y, (r0 + r) * n + j, v);
                }
            }
            __syncthreads();
        }
    }
}

// matvec_q8 for activations not yet quantized: each block first writes the q8 form of all
// `rows` rows of x into its shared memory (rows * k * 5 / 4 bytes, the launch's dynamic shared
// memory), then reads it from there: one launch instead of two.
template <typename Q, int MAXR, typename X>
DEVICE void matvec_q8_fused(const u8* w, u64 total, const X* x, X* y, u64 n, u64 k, u32 rows, u32 wpr) {
    extern __shared__ QBytes16 q8_shared[];
    u8* xq = (u8*)q8_shared;
    const u64 subs = rows * k / 32;
    for (u64 base = threadIdx.x - threadIdx.x % warpSize; base < subs; base += blockDim.x) {
        const u64 s = base + threadIdx.x % warpSize;
        quantize_q8_sub(x, s, s < subs, xq, xq + rows * k, Q::XSCHEME);
    }
    __syncthreads();
    matvec_q8<Q, MAXR>(w, total, xq, y, n, k, rows, wpr);
}

// Weight rows a warp of moe_q8 takes: their sub-blocks' loads in flight together, and a
// decode step's expert products (8 pairs of 768-1536 rows) in one wave of warps.
#define MOE_Q8_ROWS 4

// Mixture of experts: w (`total` blocks) holds `experts` (n, k) matrices; for token t and slot e
// of ids (tokens, top), y[t, e, :] = w[ids[t, e]] . x[t, e or 0, :]^T (x has `x_slots` rows per
// token: top, or 1 when every expert reads the same row). Grid: y over the (t, e) pairs, x over
// groups of MOE_Q8_ROWS rows, a warp a group (its lanes over the sub-blocks, each lane's sums
// in the order of q8_row_dot's). An expert id past `experts` gives a zero row and, where `bad`
// is not null, is counted there.
template <typename Q, typename X>
DEVICE void moe_q8(const u8* w, u64 total, const u8* xq, const u32* ids, X* y, u64 n, u64 k, u64 experts, u64 top,
                   u64 x_slots, u64 pairs, u32* bad) {
    const u32 lane = threadIdx.x % warpSize;
    const u64 warps = blockDim.x / warpSize;
    const u64 row_blocks = k / Q::BLOCK, subs = k / 32;
    const u8* meta = xq + pairs / top * x_slots * k;
    for (u64 p = blockIdx.y; p < pairs; p += gridDim.y) {
        const u64 e = ids[p];
        const u64 xr = x_slots == 1 ? p / top : p;
        if (e >= experts) {
            if (bad != 0 && blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(bad, 1u);
            for (u64 j = blockIdx.x * (u64)blockDim.x + threadIdx.x; j < n; j += (u64)gridDim.x * blockDim.x)
                q_store(y, p * n + j, 0.0f);
            continue;
        }
        const u8* xs = xq + xr * k;
        const u8* xm = meta + xr * subs * 8;
        for (u64 j0 = (blockIdx.x * warps + threadIdx.x / warpSize) * MOE_Q8_ROWS; j0 < n;
             j0 += (u64)gridDim.x * warps * MOE_Q8_ROWS) {
            float acc[MOE_Q8_ROWS];
#pragma unroll
            for (int r = 0; r < MOE_Q8_ROWS; ++r) acc[r] = 0.0f;
            for (u64 sb = lane; sb < subs; sb += warpSize) {
                const u64 blk = sb / Q::SUBS;
#pragma unroll
                for (int r = 0; r < MOE_Q8_ROWS; ++r) {
                    if (j0 + r >= n) break;
                    QSub sw;
                    Q::sub(q_block<Q>(w, total, (e * n + j0 + r) * row_blocks + blk), (int)(sb - blk * Q::SUBS), sw);
                    acc[r] += q8_sub_dot<Q>(sw, xs + sb * 32, xm + sb * 8);
                }
            }
#pragma unroll
            for (int r = 0; r < MOE_Q8_ROWS; ++r) {
                if (j0 + r >= n) break;
                const float v = warp_sum(acc[r]);
                if (lane == 0) q_store(y, p * n + j0 + r, v);
            }
        }
    }
}

// Mixture of experts by expert: moe_q8's products with an expert's weight rows read once per
// MOE_GROUP_PAIRS of its pairs instead of once per pair (a prompt's pairs share experts). Two
// launches: `moe_route` sorts the pairs by expert on the device, then `moe_grouped_q8` gives each
// block one chunk of up to MOE_GROUP_PAIRS pairs of one expert, so the work per block stays the
// same however unevenly the experts are picked.
#define MOE_GROUP_PAIRS 8
// The most experts the routing sorts in shared memory (a count and a cursor each); more take
// moe_q8.
#define MOE_ROUTE_MAX_EXPERTS 4096

// route (u32): [0, pairs) the pairs ordered by expert (ids past the experts last, as bucket
// `experts`); then first[b], b in 0..=experts + 1: where bucket b's pairs start; then
// chunk_first[b], b in 0..=experts + 1: the first chunk of bucket b (a chunk: `chunk`
// consecutive pairs of one bucket: MOE_GROUP_PAIRS for moe_grouped_q8, MMQ_BN for moe_mmq). One block; the order within a bucket is whatever the
// atomics give (each pair's product does not depend on it).
DEVICE void moe_route(const u32* ids, u32* route, u64 pairs, u64 experts, u32 chunk) {
    __shared__ u32 count[MOE_ROUTE_MAX_EXPERTS + 1], cursor[MOE_ROUTE_MAX_EXPERTS + 1];
    const u64 buckets = experts + 1;
    u32* first = route + pairs;
    u32* chunk_first = first + buckets + 1;
    for (u64 b = threadIdx.x; b < buckets; b += blockDim.x) count[b] = 0;
    __syncthreads();
    for (u64 p = threadIdx.x; p < pairs; p += blockDim.x) {
        const u64 id = ids[p];
        atomicAdd(&count[id < experts ? id : experts], 1u);
    }
    __syncthreads();
    // the buckets' starts: a serial scan (at most a few thousand buckets, once a call)
    if (threadIdx.x == 0) {
        u32 at = 0, chunks = 0;
        for (u64 b = 0; b < buckets; ++b) {
            first[b] = at;
            chunk_first[b] = chunks;
            cursor[b] = at;
            at += count[b];
            chunks += (count[b] + chunk - 1) / chunk;
        }
        first[buckets] = at;
        chunk_first[buckets] = chunks;
    }
    __syncthreads();
    for (u64 p = threadIdx.x; p < pairs; p += blockDim.x) {
        const u64 id = ids[p];
        route[atomicAdd(&cursor[id < experts ? id : experts], 1u)] = (u32)p;
    }
}

// Block (x, c) takes chunk c of the route (blocks past the last chunk return) and the rows x,
// x + gridDim.x, ... of a warp's stride; each warp dots its rows with the chunk's pairs at once.
// A pair's sums run in moe_q8's order, so the results are moe_q8's bit for bit, whichever pairs
// share a chunk. A chunk of ids past the experts writes zero rows (counted once, where `bad` is
// not null).
template <typename Q, typename X>
DEVICE void moe_grouped_q8(const u8* w, u64 total, const u8* xq, const u32* route, X* y, u64 n, u64 k, u64 experts,
                           u64 top, u64 x_slots, u64 pairs, u32* bad) {
    const u32* first = route + pairs;
    const u32* chunk_first = first + experts + 2;
    const u64 c = blockIdx.y;
    if (c >= chunk_first[experts + 1]) return;
    // the bucket whose chunks hold c: the last b with chunk_first[b] <= c
    u64 lo = 0, hi = experts;
    while (lo < hi) {
        const u64 mid = (lo + hi + 1) / 2;
        if (chunk_first[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    const u64 e = lo;
    const u64 start = first[e] + (c - chunk_first[e]) * MOE_GROUP_PAIRS;
    const u64 left = first[e + 1] - start;
    const u32 group = left < MOE_GROUP_PAIRS ? (u32)left : MOE_GROUP_PAIRS;
    const u32 lane = threadIdx.x % warpSize;
    const u64 warps = blockDim.x / warpSize;
    const u64 first_row = blockIdx.x * warps + threadIdx.x / warpSize, row_stride = (u64)gridDim.x * warps;
    u32 pair[MOE_GROUP_PAIRS];
    QRowsAt<MOE_GROUP_PAIRS> xr;
#pragma unroll
    for (int r = 0; r < MOE_GROUP_PAIRS; ++r) {
        pair[r] = route[start + (r < (int)group ? r : 0)];
        xr.at[r] = x_slots == 1 ? pair[r] / (u32)top : pair[r];
    }
    if (e == experts) {
        if (bad != 0 && blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(bad, group);
        for (u32 r = 0; r < group; ++r)
            if (lane == 0)
                for (u64 j = first_row; j < n; j += row_stride) q_store(y, (u64)pair[r] * n + j, 0.0f);
        return;
    }
    const u64 row_blocks = k / Q::BLOCK;
    const u8* meta = xq + pairs / top * x_slots * k;
    for (u64 j = first_row; j < n; j += row_stride) {
        float acc[MOE_GROUP_PAIRS];
#pragma unroll
        for (int r = 0; r < MOE_GROUP_PAIRS; ++r) acc[r] = 0.0f;
        q8_row_dot<Q, MOE_GROUP_PAIRS>(w, total, (e * n + j) * row_blocks, xq, meta, k, group, lane, warpSize, acc,
                                       xr);
#pragma unroll
        for (int r = 0; r < MOE_GROUP_PAIRS; ++r) {
            if (r >= (int)group) break;
            float v = acc[r];
            v = warp_sum(v);
            if (lane == 0) q_store(y, (u64)pair[r] * n + j, v);
        }
    }
}

// Slots of a token whose products moe_q8_sum reads together (a decode step's top 8: every
// slot's loads of a sub-block in flight at once, not one slot's after another's).
#define MOE_SUM_SLOTS 8

// A token's weighted sum over its experts, for a decode step's down projection: for token t,
// y[t, :] = sum over slots s of topw[t, s] * (w[ids[t, s]] . x[t * x_slots / top + ..]^T), each
// pair's product rounded to X, scaled and added in slot order as the ops (moe_q8, a multiply by
// the weights, a sum over the slots) compute it: one launch for three. Grid: y over tokens, x
// over rows (a warp a row, its lanes over the sub-blocks, MOE_SUM_SLOTS slots at a time). An
// expert id past `experts` adds nothing (counted in `bad` where not null).
template <typename Q, typename X>
DEVICE void moe_q8_sum(const u8* w, u64 total, const u8* xq, const u32* ids, const float* topw, X* y, u64 n, u64 k,
                       u64 experts, u64 top, u64 x_slots, u64 tokens, u32* bad) {
    const u32 lane = threadIdx.x % warpSize;
    const u64 warps = blockDim.x / warpSize;
    const u64 row_blocks = k / Q::BLOCK, subs = k / 32;
    const u8* meta = xq + tokens * x_slots * k;
    for (u64 t = blockIdx.y; t < tokens; t += gridDim.y) {
        for (u64 j = blockIdx.x * warps + threadIdx.x / warpSize; j < n; j += (u64)gridDim.x * warps) {
            float sum = 0.0f;
            for (u64 s0 = 0; s0 < top; s0 += MOE_SUM_SLOTS) {
                // the slots' experts and activation rows (live: a slot within top with a real
                // expert; the same for every lane)
                u64 first[MOE_SUM_SLOTS], xr[MOE_SUM_SLOTS];
                bool live[MOE_SUM_SLOTS];
                float acc[MOE_SUM_SLOTS];
#pragma unroll
                for (int i = 0; i < MOE_SUM_SLOTS; ++i) {
                    const u64 p = t * top + s0 + i;
                    const u64 e = s0 + i < top ? ids[p] : experts;
                    live[i] = e < experts;
                    if (s0 + i < top && !live[i] && bad != 0 && j == 0 && lane == 0) atomicAdd(bad, 1u);
                    first[i] = (e * n + j) * row_blocks;
                    xr[i] = x_slots == 1 ? t : p;
                    acc[i] = 0.0f;
                }
                for (u64 sb = lane; sb < subs; sb += warpSize) {
                    const u64 blk = sb / Q::SUBS;
#pragma unroll
                    for (int i = 0; i < MOE_SUM_SLOTS; ++i) {
                        if (!live[i]) continue;
                        QSub sw;
                        Q::sub(q_block<Q>(w, total, first[i] + blk), (int)(sb - blk * Q::SUBS), sw);
                        acc[i] += q8_sub_dot<Q>(sw, xq + xr[i] * k + sb * 32, meta + (xr[i] * subs + sb) * 8);
                    }
                }
#pragma unroll
                for (int i = 0; i < MOE_SUM_SLOTS; ++i) {
                    if (!live[i]) continue;
                    const float v = q_as(warp_sum(acc[i]), y);
                    sum = m_add_rn(sum, m_mul_rn(v, topw[t * top + s0 + i]));
                }
            }
            if (lane == 0) q_store(y, t * n + j, sum);
        }
    }
}

// The most experts `moe_topk` picks among (a block's shared memory holds their probabilities).
#define MOE_TOPK_MAX_EXPERTS 4096

// A token's router choice by one warp: the softmax of its `experts` logits (`logit(e)`), the
// `top` largest probabilities (the lower expert first among equal ones, as a stable sort puts
// them) and their experts, the probabilities divided by their sum where `renorm`. The
// arithmetic of the ops it replaces (softmax, a sort, a gather, a sum and a division), to the
// order of the softmax's sums. A row with fewer than `top` numbers names expert `experts` (past
// the weights: the products give zero rows) in the slots it cannot fill. `prob` is the warp's
// own shared space for the experts' probabilities.
template <typename Logit>
DEVICE void moe_topk_row(Logit logit, float* prob, u32* ids, float* weights, u64 experts, u32 top, u32 renorm) {
    const u32 lane = threadIdx.x % warpSize;
    const float none = m_neg_inf(0.0f);
    float most = none;
    for (u64 e = lane; e < experts; e += warpSize) most = m_max(most, logit(e));
    most = warp_max(most);
    float sum = 0.0f;
    for (u64 e = lane; e < experts; e += warpSize) {
        const float v = m_exp(m_sub_rn(logit(e), most));
        prob[e] = v;
        sum += v;
    }
    sum = warp_sum(sum);
    for (u64 e = lane; e < experts; e += warpSize) prob[e] = prob[e] / sum;
    mma_warp_sync();
    float picked = 0.0f;
    for (u32 i = 0; i < top; ++i) {
        // each lane's best, then the warp's: the larger, or the lower expert of equal ones
        float best = none;
        u32 at = (u32)experts;
        for (u64 e = lane; e < experts; e += warpSize) {
            if (prob[e] > best) {
                best = prob[e];
                at = (u32)e;
            }
        }
        for (int o = warpSize / 2; o > 0; o /= 2) {
            const float ob = warp_shfl_xor(best, o);
            const u32 oa = warp_shfl_xor(at, o);
            if (ob > best || (ob == best && oa < at)) {
                best = ob;
                at = oa;
            }
        }
        if (at == (u32)experts) best = 0.0f;
        picked = m_add_rn(picked, best);
        if (lane == 0) {
            ids[i] = at;
            weights[i] = best;
        }
        mma_warp_sync();
        if (lane == 0 && at < (u32)experts) prob[at] = none;
        mma_warp_sync();
    }
    if (renorm != 0 && lane == 0)
        for (u32 i = 0; i < top; ++i) weights[i] = weights[i] / picked;
    mma_warp_sync();
}

// The most experts `moe_topk` picks among (a block's shared memory holds their probabilities).
#define MOE_TOPK_MAX_EXPERTS 4096

// A router's choice for each token from its logits (tokens, experts): a block of one warp a
// token (moe_topk_row).
template <typename X>
DEVICE void moe_topk(const X* logits, u32* ids, float* weights, u64 tokens, u64 experts, u32 top, u32 renorm) {
    __shared__ float prob[MOE_TOPK_MAX_EXPERTS];
    for (u64 t = blockIdx.x; t < tokens; t += gridDim.x) {
        const X* row = logits + t * experts;
        moe_topk_row([&](u64 e) { return q_load(row, e); }, prob, ids + t * top, weights + t * top, experts, top,
                     renorm);
    }
}

// Warps of a `moe_router_topk` block, and the most experts it picks among (its last block
// holds a row of probabilities a warp).
#define MOE_ROUTER_WARPS 4
#define MOE_ROUTER_MAX_EXPERTS 512
// Runs of 8 values a thread loads before it multiplies them (every load of a row of up to
// MOE_ROUTER_RUNS * 8 * the block's threads values in flight at once).
#define MOE_ROUTER_RUNS 4

// A decode step's router and its choice in one launch: logits = h . w^T for h (tokens, hidden)
// and the router's weights w (experts, hidden), rounded to X as the product's output is (into
// `logits`, f32 (tokens, experts)); then each token's choice as moe_topk makes it. A block an
// expert (its threads split the row; a token's sum by the block's combine); the block that draws
// the last ticket (each block's logits made visible first) reads them all (volatile: past its
// multiprocessor's cache), picks for a token a warp and sets the ticket back to zero for the
// next launch.
template <typename X>
DEVICE void moe_router_topk(const X* h, const X* w, float* logits, u32* tickets, u32* ids, float* weights,
                            u64 tokens, u64 experts, u64 hidden, u32 top, u32 renorm) {
    __shared__ float prob[MOE_ROUTER_WARPS][MOE_ROUTER_MAX_EXPERTS];
    __shared__ u32 last;
    const u32 warp = threadIdx.x / warpSize;
    const u64 e = blockIdx.x, runs = hidden / 8;
    const X* we = w + e * hidden;
    for (u64 t = 0; t < tokens; ++t) {
        const X* ht = h + t * hidden;
        float s = 0.0f;
        for (u64 c0 = threadIdx.x; c0 < runs; c0 += (u64)MOE_ROUTER_RUNS * blockDim.x) {
            float a[MOE_ROUTER_RUNS][8], b[MOE_ROUTER_RUNS][8];
#pragma unroll
            for (int u = 0; u < MOE_ROUTER_RUNS; ++u) {
                const u64 c = c0 + (u64)u * blockDim.x;
                if (c < runs) {
                    q_load_run<8>(we, c * 8, a[u]);
                    q_load_run<8>(ht, c * 8, b[u]);
                } else {
#pragma unroll
                    for (int j = 0; j < 8; ++j) a[u][j] = b[u][j] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < MOE_ROUTER_RUNS; ++u)
#pragma unroll
                for (int j = 0; j < 8; ++j) s += a[u][j] * b[u][j];
        }
        for (u64 i = runs * 8 + threadIdx.x; i < hidden; i += blockDim.x) s += q_load(we, i) * q_load(ht, i);
        s = block_combine_all<SumOf<float> >(s);
        if (threadIdx.x == 0) logits[t * experts + e] = q_as(s, h);
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(tickets, 1u) == gridDim.x - 1 ? 1u : 0u;
    __syncthreads();
    if (last == 0u) return;
    __threadfence();
    for (u64 t = warp; t < tokens; t += MOE_ROUTER_WARPS) {
        const volatile float* row = logits + t * experts;
        moe_topk_row([&](u64 x) { return (float)row[x]; }, prob[warp], ids + t * top, weights + t * top, experts,
                     top, renorm);
    }
    if (threadIdx.x == 0) tickets[0] = 0u;
}

// Every type: dequantize and embedding.
#define QUANT_KERNELS(NAME, Q)                                                                   \
    KERNEL void dequantize_f32_##NAME(DEQUANTIZE_PARAMS(float)) {                                \
        dequantize<Q>(w, total, first, out, n);                                                  \
    }                                                                                            \
    KERNEL void dequantize_f16_##NAME(DEQUANTIZE_PARAMS(f16_t)) {                                \
        dequantize<Q>(w, total, first, out, n);                                                  \
    }                                                                                            \
    KERNEL void dequantize_bf16_##NAME(DEQUANTIZE_PARAMS(bf16_t)) {                              \
        dequantize<Q>(w, total, first, out, n);                                                  \
    }                                                                                            \
    KERNEL void embedding_f32_##NAME(EMBEDDING_PARAMS(float)) {                                  \
        embedding<Q>(t, total, ids, out, n_ids, rows, k, bad);                                   \
    }                                                                                            \
    KERNEL void embedding_f16_##NAME(EMBEDDING_PARAMS(f16_t)) {                                  \
        embedding<Q>(t, total, ids, out, n_ids, rows, k, bad);                                   \
    }                                                                                            \
    KERNEL void embedding_bf16_##NAME(EMBEDDING_PARAMS(bf16_t)) {                                \
        embedding<Q>(t, total, ids, out, n_ids, rows, k, bad);                                   \
    }

// ---- quantized products on the int8 matrix units: y = x . w^T for many rows of x --------------
//
// A block takes MMQ_BM weight rows by MMQ_BN rows of q8 activations; each k step MMQ_KSUBS
// 32-value sub-blocks of both go through shared memory: a thread unpacks a weight row's sub-block with
// its type's `sub` (the same quants and scales the mat-vec reads) or copies an activation row's
// bytes and record, then each of the MMQ_WARPS warps multiplies its 16 weight rows by every
// 16-row tile of the activations on compat.h's mma_i8_16x16x32 and scales the exact integer
// sums as q8_sub_dot does (per 16-value half for the types whose halves have their own scales).
#define MMQ_BM 64
#define MMQ_BN 64
#define MMQ_WARPS 4
// Sub-blocks of 32 values a k step takes through shared memory.
#define MMQ_KSUBS 4
// Row stride of the shared int8 tiles in bytes (a multiple of 4; 16 past the step's bytes
// puts the 8 rows a fragment load reads on 8 different groups of 4 banks).
#define MMQ_LD (32 * MMQ_KSUBS + 16)

// The types whose 16-value halves carry scales of their own (QSub's a[0] != a[1]).
template <typename Q> struct MmqHalves { static constexpr bool value = false; };
template <> struct MmqHalves<Q2K> { static constexpr bool value = true; };
template <> struct MmqHalves<Q3K> { static constexpr bool value = true; };
template <> struct MmqHalves<Q6K> { static constexpr bool value = true; };

// The types whose b term is a constant offset of the quants (b = -OFFSET a in QSub): the
// product takes the quants less the offset as signed bytes and has no b term (the CPU's own
// integer form of them); Q8_0 and Q8_K have none to begin with (MmqNoB).
template <typename Q> struct MmqOffset { static constexpr u32 value = 0; };
template <> struct MmqOffset<Q4_0> { static constexpr u32 value = 8; };
template <> struct MmqOffset<Q5_0> { static constexpr u32 value = 16; };
template <> struct MmqOffset<Q3K> { static constexpr u32 value = 4; };
template <> struct MmqOffset<Q6K> { static constexpr u32 value = 32; };
template <typename Q> struct MmqNoB { static constexpr bool value = MmqOffset<Q>::value != 0; };
template <> struct MmqNoB<Q8_0> { static constexpr bool value = true; };
template <> struct MmqNoB<Q8K> { static constexpr bool value = true; };

// Four bytes less `off` each, as signed bytes (each byte below 128, off below 128: no byte
// borrows from the next).
DEVICE u32 mmq_sub_bytes(u32 x, u32 off) {
    const u32 y = off * 0x01010101u, h = 0x80808080u;
    return ((x | h) - y) ^ ((x ^ ~y) & h);
}

// The words of a lane's a operand whose k lie in 16-value half `h` (the others zero).
DEVICE void mmq_half_words(const u32* a, u32 h, u32* out) {
#pragma unroll
    for (u32 w = 0; w < MMA_I8_A / 4; ++w) {
        u32 row, kk;
        mma_i8_a_at(4 * w, row, kk);
        out[w] = kk / 16 == h ? a[w] : 0u;
    }
}

// The activation rows of one block of the product: `count` of them, the t-th reading row
// x_row(t) of the q8 activations and writing row y_row(t) of y.
struct MmqDenseCols {
    u64 c0;
    u32 count;
    DEVICE u64 x_row(u32 t) const { return c0 + t; }
    DEVICE u64 y_row(u32 t) const { return c0 + t; }
};
// A chunk of the mixture of experts' pairs of one expert (moe_route's order): pair p reads
// row p / top of x (one row a token) or row p, and writes row p of y.
struct MmqPairCols {
    const u32* pairs;
    u32 count;
    u64 top, x_slots;
    DEVICE u64 x_row(u32 t) const { return x_slots == 1 ? pairs[t] / top : pairs[t]; }
    DEVICE u64 y_row(u32 t) const { return pairs[t]; }
};

// Where a block of the product writes: y, or (a split of k) its f32 partial sums at ws (one
// instantiation of the tile for both, so one kernel holds one set of its shared tiles).
// (The kernel's own pointers and an offset, not a pointer chosen at run time: a chosen one
// loses its address space on AMD and every store becomes a flat one.)
template <typename X>
struct MmqOut {
    X* y;
    float* ws;
    u64 ws_at;
    bool split;
    DEVICE void store(u64 i, float v) const {
        if (split) ws[ws_at + i] = v;
        else q_store(y, i, v);
    }
};

// The int8 product's blocks are MMQ_WARPS warps of at most 64 lanes: bounded so, AMD's
// compilers give a thread the registers a block of that size allows (the default assumes
// blocks of 1024 and spilled the K-quants' staged units to scratch).
#define MMQ_BOUNDS __launch_bounds__(MMQ_WARPS * 64)

// What one thread reads of a k step: MMQ_UNITS weight sub-blocks (unpacked) and as many
// activation ones (quants and record). A block of MMQ_WARPS warps of 32 lanes takes every unit in
// these rounds; wider warps leave the later rounds to no thread. A thread reads all its units
// before it writes any to shared memory (its loads in flight together), and reads the next step's
// while the matrix units work on this one's.
#define MMQ_UNITS (MMQ_BM * MMQ_KSUBS / (MMQ_WARPS * 32))
static_assert(MMQ_BM == MMQ_BN, "a thread stages as many weight units as activation units");
// The scales of a k step in shared memory, field by field: a row's field holds one float for
// each of the step's MMQ_KSUBS sub-blocks, and a use reads its 4 bytes (a 16-byte record a
// row and sub-block, read whole at every use, took 1.02-1.16x this form's time on the H200).
static_assert(MMQ_KSUBS == 4, "a scale field is 16 bytes: one float for each sub-block of the step");
struct alignas(16) MmqScales { float v[4]; };
// The fields of a weight row: a[0], a[1] (types whose halves have their own scales), then
// b[0], b[1] (types with a b term); of an activation row: d, then d times each half's sum
// (halves with b terms of their own) or the factor of the one b term. A row takes an odd
// number of 16-byte slots, so the 8 rows a fragment's lanes read lie on distinct banks.
template <typename Q> struct MmqFields {
    static constexpr int W = (MmqHalves<Q>::value ? 2 : 1) * (MmqNoB<Q>::value ? 1 : 2);
    static constexpr int X = MmqNoB<Q>::value ? 1 : MmqHalves<Q>::value ? 3 : 2;
    static constexpr int W_SLOTS = W | 1, X_SLOTS = X | 1;
};

struct MmqStaged {
    QSub w[MMQ_UNITS];
    QBytes16 x[MMQ_UNITS][2];
    u32 rec[MMQ_UNITS][2];
};

// Whether round i has no units left for a block of MMQ_WARPS warps (decided when the kernel
// is compiled: warpSize is a constant of the target).
DEVICE bool mmq_round_idle(int i) { return (u32)i * MMQ_WARPS * warpSize >= MMQ_BM * MMQ_KSUBS; }

// Reads the units of the k step from sub-block s0 into `st`. A weight unit past the rows or k
// reads the nearest real one instead (no branch around the loads; the write zeroes it).
template <typename Q, typename Cols>
DEVICE void mmq_read(MmqStaged& st, const u8* w, u64 total, u64 w_block0, u64 n, u64 r0, const u8* xq,
                     const u8* meta, u64 k, u64 s0, u64 s_end, const Cols& cols) {
    const u64 subs = k / 32, blocks_per_row = k / Q::BLOCK;
#pragma unroll
    for (int i = 0; i < MMQ_UNITS; ++i) {
        if (mmq_round_idle(i)) break;
        const u32 u = threadIdx.x + i * blockDim.x, row = u / MMQ_KSUBS, sub = u % MMQ_KSUBS;
        const u64 s = s0 + sub < s_end ? s0 + sub : s_end - 1;
        const u64 r = r0 + row < n ? r0 + row : n - 1;
        Q::sub(q_block<Q>(w, total, w_block0 + r * blocks_per_row + s / Q::SUBS), (int)(s % Q::SUBS), st.w[i]);
        // rows past the block's activations read nothing (whole warps of them where there are
        // fewer than MMQ_BN: the write zeroes them)
        if (row < cols.count) {
            const u64 c = cols.x_row(row);
            const QBytes16* src = (const QBytes16*)(xq + c * k + s * 32);
            st.x[i][0] = src[0];
            st.x[i][1] = src[1];
            const u32* rec = (const u32*)(meta + (c * subs + s) * 8);
            st.rec[i][0] = rec[0];
            st.rec[i][1] = rec[1];
        }
    }
}

// One block of the product: weight rows r0.. (of the n of the matrix whose first block is
// `w_block0`) by the activation rows `cols` over the sub-blocks [s_begin, s_end) of k;
// `meta` holds the q8 records.
template <typename Q, typename X, typename Cols>
DEVICE void mmq_tile(const u8* w, u64 total, u64 w_block0, u64 n, u64 r0, const u8* xq, const u8* meta, u64 k,
                     u64 s_begin, u64 s_end, Cols cols, MmqOut<X> y) {
    __shared__ QBytes16 sw[MMQ_BM * MMQ_LD / 16];
    __shared__ QBytes16 sx[MMQ_BN * MMQ_LD / 16];
    using F = MmqFields<Q>;
    __shared__ MmqScales wscale[MMQ_BM * F::W_SLOTS];
    __shared__ MmqScales xscale[MMQ_BN * F::X_SLOTS];
    const u32 tid = threadIdx.x, warp = tid / warpSize;
    float acc[MMQ_BN / 16][MMA_C];
#pragma unroll
    for (int j = 0; j < MMQ_BN / 16; ++j)
#pragma unroll
        for (int e = 0; e < MMA_C; ++e) acc[j][e] = 0.0f;
    MmqStaged st = {};
    mmq_read<Q>(st, w, total, w_block0, n, r0, xq, meta, k, s_begin, s_end, cols);
    for (u64 s0 = s_begin; s0 < s_end; s0 += MMQ_KSUBS) {
#pragma unroll
        for (int i = 0; i < MMQ_UNITS; ++i) {
            if (mmq_round_idle(i)) break;
            const u32 u = tid + i * blockDim.x, row = u / MMQ_KSUBS, sub = u % MMQ_KSUBS;
            const bool in_k = s0 + sub < s_end;
            // the weight row's sub-block, its quants less the type's offset as signed bytes (two
            // 16-byte stores: a quarter warp's on distinct banks)
            const bool w_live = in_k && r0 + row < n;
            QBytes16 q[2];
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int b = 0; b < 4; ++b) {
                    const u32 v = (u32)st.w[i].q[4 * h + b];
                    q[h].w[b] = !w_live ? 0u : MmqOffset<Q>::value ? mmq_sub_bytes(v, MmqOffset<Q>::value) : v;
                }
            QBytes16* dst = sw + row * (MMQ_LD / 16) + 2 * sub;
            dst[0] = q[0];
            dst[1] = q[1];
            float f[4];
            int nf = 0;
            f[nf++] = st.w[i].a[0];
            if (MmqHalves<Q>::value) f[nf++] = st.w[i].a[1];
            if (!MmqNoB<Q>::value) {
                f[nf++] = st.w[i].b[0];
                if (MmqHalves<Q>::value) f[nf++] = st.w[i].b[1];
            }
#pragma unroll
            for (int t = 0; t < F::W; ++t) wscale[row * F::W_SLOTS + t].v[sub] = w_live ? f[t] : 0.0f;
            // the activation row's quants and its record's scales
            const bool x_live = in_k && row < cols.count;
            dst = sx + row * (MMQ_LD / 16) + 2 * sub;
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int b = 0; b < 4; ++b) q[h].w[b] = x_live ? st.x[i][h].w[b] : 0u;
            dst[0] = q[0];
            dst[1] = q[1];
            const float d = f32_from_bits(st.rec[i][0]);
            const int s0i = (i16)(u16)(st.rec[i][1] & 0xffffu), s1i = (i16)(u16)(st.rec[i][1] >> 16);
            // d; d times each half's sum (the halves with b terms of their own) or the factor of
            // a b term shared by the halves (the CPU's f16 form for Q8_1)
            nf = 0;
            f[nf++] = d;
            if (!MmqNoB<Q>::value) {
                if (MmqHalves<Q>::value) {
                    f[nf++] = d * (float)s0i;
                    f[nf++] = d * (float)s1i;
                } else {
                    f[nf++] = Q::XSCHEME == Q8_SCHEME_1 ? f16_round(f16_round((float)(s0i + s1i)) * d)
                                                        : d * (float)(s0i + s1i);
                }
            }
#pragma unroll
            for (int t = 0; t < F::X; ++t) xscale[row * F::X_SLOTS + t].v[sub] = x_live ? f[t] : 0.0f;
        }
        __syncthreads();
        // the next step's units in flight while this one's are multiplied (past the last step,
        // its own again, unused)
        mmq_read<Q>(st, w, total, w_block0, n, r0, xq, meta, k, s0 + MMQ_KSUBS, s_end, cols);
#pragma unroll
        for (int sub = 0; sub < MMQ_KSUBS; ++sub) {
            u32 fa[MMA_I8_A / 4], fa_half[2][MMA_I8_A / 4];
            mma_i8_load_a(fa, (const i8*)sw + 16 * warp * MMQ_LD + 32 * sub, MMQ_LD);
            if (MmqHalves<Q>::value) {
                mmq_half_words(fa, 0, fa_half[0]);
                mmq_half_words(fa, 1, fa_half[1]);
            }
#pragma unroll
            for (int j = 0; j < MMQ_BN / 16; ++j) {
                // activation tiles past the block's rows hold zeros: none of their products
                if (16 * j >= (int)cols.count) break;
                u32 fb[MMA_I8_B / 4];
                mma_i8_load_b(fb, (const i8*)sx + 16 * j * MMQ_LD + 32 * sub, MMQ_LD);
                int isum[2][MMA_C];
#pragma unroll
                for (int e = 0; e < MMA_C; ++e) isum[0][e] = isum[1][e] = 0;
                if (MmqHalves<Q>::value) {
                    mma_i8_16x16x32(fa_half[0], fb, isum[0]);
                    mma_i8_16x16x32(fa_half[1], fb, isum[1]);
                } else {
                    mma_i8_16x16x32(fa, fb, isum[0]);
                }
#pragma unroll
                for (int e = 0; e < MMA_C; ++e) {
                    u32 row, col;
                    mma_c_at(e, row, col);
                    const MmqScales* ws = wscale + (16 * warp + row) * F::W_SLOTS;
                    const MmqScales* xs = xscale + (16 * j + col) * F::X_SLOTS;
                    float a = acc[j][e];
                    a += xs[0].v[sub] * ws[0].v[sub] * (float)isum[0][e];
                    if (MmqHalves<Q>::value) a += xs[0].v[sub] * ws[1].v[sub] * (float)isum[1][e];
                    if (!MmqNoB<Q>::value) {
                        if (MmqHalves<Q>::value) {
                            a += ws[2].v[sub] * xs[1].v[sub];
                            a += ws[3].v[sub] * xs[2].v[sub];
                        } else {
                            a += ws[1].v[sub] * xs[1].v[sub];
                        }
                    }
                    acc[j][e] = a;
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < MMQ_BN / 16; ++j)
#pragma unroll
        for (int e = 0; e < MMA_C; ++e) {
            u32 row, col;
            mma_c_at(e, row, col);
            const u64 r = r0 + 16 * warp + row;
            const u32 t = 16 * j + col;
            if (r < n && t < cols.count) y.store(cols.y_row(t) * n + r, acc[j][e]);
        }
}

// y = x . w^T: block (x, y, z) takes weight rows 64 x.., activation rows 64 y.. and the
// `ksplit` sub-blocks of k from z ksplit on. One split writes y; several (where the tiles are
// too few to fill the device) write their partial sums to ws (gridDim.z of m x n f32), which
// `mmq_reduce` adds in split order.
template <typename Q, typename X>
DEVICE void mmq(const u8* w, u64 total, const u8* xq, X* y, u64 n, u64 k, u64 m, float* ws, u64 ksplit) {
    const u64 c0 = (u64)blockIdx.y * MMQ_BN;
    const MmqDenseCols cols = {c0, (u32)(m - c0 < MMQ_BN ? m - c0 : MMQ_BN)};
    const u64 subs = k / 32, s_begin = blockIdx.z * ksplit;
    const u64 s_end = s_begin + ksplit < subs ? s_begin + ksplit : subs;
    const u64 r0 = (u64)blockIdx.x * MMQ_BM;
    const MmqOut<X> out = {y, ws, blockIdx.z * m * n, gridDim.z > 1};
    mmq_tile<Q>(w, total, 0, n, r0, xq, xq + m * k, k, s_begin, s_end, cols, out);
}

// y[i] = the sum of the `splits` partial sums ws[z * count + i], in split order.
template <typename X>
DEVICE void mmq_reduce(const float* ws, X* y, u64 count, u32 splits) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < count; i += (u64)gridDim.x * blockDim.x) {
        float v = ws[i];
        for (u32 z = 1; z < splits; ++z) v += ws[z * count + i];
        q_store(y, i, v);
    }
}

// Mixture of experts on the int8 matrix units: moe_grouped_q8's product, a block per MMQ_BN
// pairs of one expert (moe_route run with chunks of MMQ_BN) and MMQ_BM of its weight rows.
template <typename Q, typename X>
DEVICE void moe_mmq(const u8* w, u64 total, const u8* xq, const u32* route, X* y, u64 n, u64 k, u64 experts,
                    u64 top, u64 x_slots, u64 pairs, u32* bad) {
    const u32* first = route + pairs;
    const u32* chunk_first = first + experts + 2;
    const u64 c = blockIdx.y;
    if (c >= chunk_first[experts + 1]) return;
    u64 lo = 0, hi = experts;
    while (lo < hi) {
        const u64 mid = (lo + hi + 1) / 2;
        if (chunk_first[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    const u64 e = lo;
    const u64 start = first[e] + (c - chunk_first[e]) * MMQ_BN;
    const u64 left = first[e + 1] - start;
    const MmqPairCols cols = {route + start, (u32)(left < MMQ_BN ? left : MMQ_BN), top, x_slots};
    const u64 r0 = (u64)blockIdx.x * MMQ_BM;
    if (e == experts) {
        // ids past the experts: zero rows, counted once
        if (bad != 0 && blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(bad, cols.count);
        for (u32 i = threadIdx.x; i < cols.count * MMQ_BM; i += blockDim.x) {
            const u64 r = r0 + i % MMQ_BM;
            if (r < n) q_store(y, cols.y_row(i / MMQ_BM) * n + r, 0.0f);
        }
        return;
    }
    const u8* meta = xq + pairs / top * x_slots * k;
    const MmqOut<X> out = {y, (float*)0, 0, false};
    mmq_tile<Q>(w, total, e * n * (k / Q::BLOCK), n, r0, xq, meta, k, (u64)0, k / 32, cols, out);
}

// The float types (f32, f16, bf16 weights): the float mat-vec, and quantizing activations of
// that dtype to q8.
#define FLOAT_KERNELS(NAME, Q, X)                                                                \
    QUANT_KERNELS(NAME, Q)                                                                       \
    KERNEL void matvec_f32_##NAME(MATVEC_PARAMS(float)) { matvec<Q>(w, total, x, y, n, k, rows); } \
    KERNEL void matvec_f16_##NAME(MATVEC_PARAMS(f16_t)) { matvec<Q>(w, total, x, y, n, k, rows); } \
    KERNEL void matvec_bf16_##NAME(MATVEC_PARAMS(bf16_t)) { matvec<Q>(w, total, x, y, n, k, rows); } \
    KERNEL void quantize_q8_##NAME(QUANTIZE_Q8_PARAMS(X)) { quantize_q8(x, out, m, k, scheme); } \
    KERNEL __launch_bounds__(RMS_Q8_MAX_THREADS) void rms_norm_q8_##NAME(RMS_NORM_Q8_PARAMS(X)) { \
        rms_norm_q8(x, r, sum, alpha, out, normed, m, k, eps, scheme, has_residual, has_normed); \
    }                                                                                            \
    KERNEL void swiglu_q8_##NAME(SWIGLU_Q8_PARAMS(X)) { swiglu_q8(gate_up, out, m, w, scheme); }   \
    KERNEL void moe_topk_##NAME(MOE_TOPK_PARAMS(X)) { moe_topk(logits, ids, weights, tokens, experts, top, renorm); } \
    KERNEL void moe_router_topk_##NAME(MOE_ROUTER_TOPK_PARAMS(X)) {                              \
        moe_router_topk(h, w, logits, tickets, ids, weights, tokens, experts, hidden, top, renorm); \
    }                                                                                            \
    KERNEL void mmq_reduce_##NAME(MMQ_REDUCE_PARAMS(X)) { mmq_reduce(ws, y, count, splits); }

// The block types: the integer mat-vec and the mixture of experts on q8 activations.
#define BLOCK_MATVEC(NAME, Q, XN, X)                                                             \
    KERNEL void matvec_q8_##XN##_##NAME(MATVEC_Q8_PARAMS(X)) {                                   \
        matvec_q8<Q, MATVEC_MAX_ROWS>(w, total, xq, y, n, k, rows, wpr);                         \
    }                                                                                            \
    KERNEL void matvec1_q8_##XN##_##NAME(MATVEC_Q8_PARAMS(X)) {                                  \
        matvec_q8<Q, 1>(w, total, xq, y, n, k, rows, wpr);                                       \
    }                                                                                            \
    KERNEL void matvec_q8f_##XN##_##NAME(MATVEC_Q8F_PARAMS(X)) {                                 \
        matvec_q8_fused<Q, MATVEC_MAX_ROWS>(w, total, x, y, n, k, rows, wpr);                    \
    }                                                                                            \
    KERNEL void matvec1_q8f_##XN##_##NAME(MATVEC_Q8F_PARAMS(X)) {                                \
        matvec_q8_fused<Q, 1>(w, total, x, y, n, k, rows, wpr);                                  \
    }                                                                                            \
    KERNEL MATVEC_BOUNDS void moe_q8_##XN##_##NAME(MOE_Q8_PARAMS(X)) {                           \
        moe_q8<Q>(w, total, xq, ids, y, n, k, experts, top, x_slots, pairs, bad);                \
    }                                                                                            \
    KERNEL MATVEC_BOUNDS void moe_q8_sum_##XN##_##NAME(MOE_Q8_SUM_PARAMS(X)) {                   \
        moe_q8_sum<Q>(w, total, xq, ids, topw, y, n, k, experts, top, x_slots, tokens, bad);     \
    }                                                                                            \
    KERNEL MATVEC_BOUNDS void moe_grouped_q8_##XN##_##NAME(MOE_GROUPED_Q8_PARAMS(X)) {           \
        moe_grouped_q8<Q>(w, total, xq, route, y, n, k, experts, top, x_slots, pairs, bad);      \
    }                                                                                            \
    KERNEL MMQ_BOUNDS void mmq_##XN##_##NAME(MMQ_PARAMS(X)) {                                    \
        mmq<Q>(w, total, xq, y, n, k, m, ws, ksplit);                                            \
    }                                                                                            \
    KERNEL MMQ_BOUNDS void moe_mmq_##XN##_##NAME(MOE_GROUPED_Q8_PARAMS(X)) {                      \
        moe_mmq<Q>(w, total, xq, route, y, n, k, experts, top, x_slots, pairs, bad);             \
    }
#define BLOCK_KERNELS(NAME, Q)                                                                   \
    QUANT_KERNELS(NAME, Q)                                                                       \
    KERNEL void moe_route_##NAME(MOE_ROUTE_PARAMS()) { moe_route(ids, route, pairs, experts, chunk); }  \
    BLOCK_MATVEC(NAME, Q, f32, float)                                                            \
    BLOCK_MATVEC(NAME, Q, f16, f16_t)                                                            \
    BLOCK_MATVEC(NAME, Q, bf16, bf16_t)

// One variant per type: the runtime compiles the types a model uses.
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_f32)
FLOAT_KERNELS(f32, QF32, float)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_f16)
FLOAT_KERNELS(f16, QF16, f16_t)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_bf16)
FLOAT_KERNELS(bf16, QBF16, bf16_t)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q4_0)
BLOCK_KERNELS(q4_0, Q4_0)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q4_1)
BLOCK_KERNELS(q4_1, Q4_1)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q5_0)
BLOCK_KERNELS(q5_0, Q5_0)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q5_1)
BLOCK_KERNELS(q5_1, Q5_1)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q8_0)
BLOCK_KERNELS(q8_0, Q8_0)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q8_1)
BLOCK_KERNELS(q8_1, Q8_1)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q2k)
BLOCK_KERNELS(q2k, Q2K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q3k)
BLOCK_KERNELS(q3k, Q3K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q4k)
BLOCK_KERNELS(q4k, Q4K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q5k)
BLOCK_KERNELS(q5k, Q5K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q6k)
BLOCK_KERNELS(q6k, Q6K)
#endif
#if !defined(CANDLE_ROCM_DTYPE_FILTER) || defined(CANDLE_ROCM_ONLY_q8k)
BLOCK_KERNELS(q8k, Q8K)
#endif

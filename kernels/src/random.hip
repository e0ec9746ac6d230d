// random.hip: uniform and normal draws from Philox4x32-10 (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011). Counter-based: the draw of element pair i in call
// `offset` under `seed` is a pure function of (seed, offset, i), so a draw is reproducible
// for a seed and independent of the launch shape.

struct Philox4 { u32 x, y, z, w; };

DEVICE Philox4 philox4x32_10(Philox4 c, u32 k0, u32 k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        const u32 lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
        const u32 lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
        c = Philox4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
        k0 += 0x9E3779B9u;  // the Weyl key schedule
        k1 += 0xBB67AE85u;
    }
    return c;
}

// Uniform in [0, 1) from one or two words; the open-below form (0, 1] feeds the logarithm.
DEVICE float unit_f32(u32 a) { return (float)(a >> 8) * 5.9604644775390625e-8f; }
DEVICE double unit_f64(u32 a, u32 b) {
    return (double)(((u64)a << 21) | (b >> 11)) * 1.1102230246251565e-16;
}

// Computation type per output: double for f64, float for the others (16- and 8-bit floats
// are drawn in f32 and rounded once).
template <typename T> struct DrawType { typedef float type; };
template <> struct DrawType<double> { typedef double type; };

// Two uniforms in [0, 1) (first open below when `open_low`) from one Philox block.
DEVICE void units(Philox4 r, bool open_low, float& u0, float& u1) {
    u0 = open_low ? unit_f32(r.x) + 5.9604644775390625e-8f : unit_f32(r.x);
    u1 = unit_f32(r.z);
}
DEVICE void units(Philox4 r, bool open_low, double& u0, double& u1) {
    u0 = open_low ? unit_f64(r.x, r.y) + 1.1102230246251565e-16 : unit_f64(r.x, r.y);
    u1 = unit_f64(r.z, r.w);
}

DEVICE Philox4 block_for(u64 pair, u64 seed, u64 offset) {
    return philox4x32_10(Philox4{(u32)pair, (u32)(pair >> 32), (u32)offset, (u32)(offset >> 32)},
                         (u32)seed, (u32)(seed >> 32));
}

// out[2i], out[2i + 1] = lo + (hi - lo) * u for two uniforms u of pair i.
template <typename T>
DEVICE void uniform_impl(T* out, u64 n, u64 seed, u64 offset, double lo, double hi) {
    typedef typename DrawType<T>::type D;
    const D a = (D)lo, span = (D)(hi - lo);
    for (u64 pair = grid_tid(); 2 * pair < n; pair += grid_threads()) {
        D u0, u1;
        units(block_for(pair, seed, offset), false, u0, u1);
        out[2 * pair] = cvt<T>(a + span * u0);
        if (2 * pair + 1 < n) out[2 * pair + 1] = cvt<T>(a + span * u1);
    }
}

// out[2i], out[2i + 1] = mean + std * (the Box-Muller pair of pair i).
template <typename T>
DEVICE void normal_impl(T* out, u64 n, u64 seed, u64 offset, double mean, double std) {
    typedef typename DrawType<T>::type D;
    const D m = (D)mean, s = (D)std, two_pi = (D)6.283185307179586;
    for (u64 pair = grid_tid(); 2 * pair < n; pair += grid_threads()) {
        D u0, u1;
        units(block_for(pair, seed, offset), true, u0, u1);
        const D r = m_sqrt(-(D)2 * m_log(u0));
        out[2 * pair] = cvt<T>(m + s * r * m_cos(two_pi * u1));
        if (2 * pair + 1 < n) out[2 * pair + 1] = cvt<T>(m + s * r * m_sin(two_pi * u1));
    }
}

#define RANDOM_KERNELS(NAME, T)                                                                    \
    KERNEL void rand_uniform_##NAME(RAND_UNIFORM_PARAMS(T)) {                                     \
        uniform_impl(out, n, seed, offset, lo, hi);                                                 \
    }                                                                                               \
    KERNEL void rand_normal_##NAME(RAND_NORMAL_PARAMS(T)) {                                       \
        normal_impl(out, n, seed, offset, mean, std);                                               \
    }

CANDLE_ROCM_KEEP(bf16)(RANDOM_KERNELS(bf16, bf16_t))
CANDLE_ROCM_KEEP(f16)(RANDOM_KERNELS(f16, f16_t))
CANDLE_ROCM_KEEP(f32)(RANDOM_KERNELS(f32, float))
CANDLE_ROCM_KEEP(f64)(RANDOM_KERNELS(f64, double))
CANDLE_ROCM_KEEP(f8e4m3)(RANDOM_KERNELS(f8e4m3, f8e4m3_t))

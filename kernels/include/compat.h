// compat.h: the one place where the AMD (hiprtc) and NVIDIA (NVRTC) builds of a kernel differ.
// Prepended to every module by the runtime; the host defines exactly one of CANDLE_ROCM_AMD or
// CANDLE_ROCM_NVIDIA (with CANDLE_ROCM_WAVE64_EMULATION for emulated 64-lane wavefronts). The
// warp size is never assumed: kernels use warpSize.
//
// No vendor header is included: NVRTC ships no cuda_fp16.h, and hiprtc's half headers differ
// between ROCm releases. The 16- and 8-bit float types are plain storage structs with
// conversions through f32 (hardware instructions where both vendors have one).
#pragma once

#if defined(CANDLE_ROCM_AMD) == defined(CANDLE_ROCM_NVIDIA)
#error "define exactly one of CANDLE_ROCM_AMD and CANDLE_ROCM_NVIDIA"
#endif

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char i8;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef u64 usize;

#define KERNEL extern "C" __global__
#define DEVICE __device__ __forceinline__

// 16 bytes, the unit of the wide loads and copies.
struct alignas(16) Raw16 { u64 lo, hi; };

// ---------------------------------------------------------------------------------------------
// Bit casts.
DEVICE u32 f32_bits(float f) { return __float_as_uint(f); }
DEVICE float f32_from_bits(u32 u) { return __uint_as_float(u); }

// ---------------------------------------------------------------------------------------------
// 16- and 8-bit float storage types (layout identical on both platforms and to Rust's half /
// float8 crates).
struct f16_t { u16 bits; };
struct bf16_t { u16 bits; };
struct f8e4m3_t { u8 bits; };

#if defined(CANDLE_ROCM_AMD)
DEVICE float f16_to_f32(f16_t h) {
    union { u16 u; _Float16 f; } c;
    c.u = h.bits;
    return (float)c.f;
}
DEVICE f16_t f32_to_f16(float f) {
    union { u16 u; _Float16 h; } c;
    c.h = (_Float16)f;  // v_cvt_f16_f32: round to nearest even
    f16_t r; r.bits = c.u; return r;
}
DEVICE double f16_to_f64(f16_t h) { return (double)f16_to_f32(h); }
#else
DEVICE float f16_to_f32(f16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
    return f;
}
DEVICE f16_t f32_to_f16(float f) {
    f16_t r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
    return r;
}
DEVICE double f16_to_f64(f16_t h) { return (double)f16_to_f32(h); }
#endif

// bf16 is the top half of an f32: portable bit arithmetic, round to nearest even, NaN kept quiet.
DEVICE float bf16_to_f32(bf16_t b) { return f32_from_bits(((u32)b.bits) << 16); }
DEVICE bf16_t f32_to_bf16(float f) {
    u32 u = f32_bits(f);
    bf16_t r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = (u16)((u >> 16) | 0x40u);
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.bits = (u16)(u >> 16);
    return r;
}

// f8e4m3 (OCP "FN" variant: no infinities, 0x7f/0xff are NaN, max finite 448).
DEVICE float f8e4m3_to_f32(f8e4m3_t v) {
    u32 sign = ((u32)(v.bits & 0x80u)) << 24;
    u32 exp = (v.bits >> 3) & 0xfu;
    u32 man = v.bits & 0x7u;
    if (exp == 0xfu && man == 0x7u) return f32_from_bits(sign | 0x7fc00000u);
    if (exp == 0) {
        // subnormal: man * 2^-9
        float mag = (float)man * 0.001953125f;
        return sign ? -mag : mag;
    }
    return f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}
// Round to nearest even; values beyond the largest finite saturate to +-448, NaN stays NaN.
DEVICE f8e4m3_t f32_to_f8e4m3(float f) {
    u32 u = f32_bits(f);
    u8 sign = (u8)((u >> 24) & 0x80u);
    u32 abs = u & 0x7fffffffu;
    f8e4m3_t r;
    if (abs > 0x7f800000u) { r.bits = sign | 0x7fu; return r; }
    if (abs >= 0x43e00000u) { r.bits = sign | 0x7eu; return r; }  // >= 448 (and inf)
    if (abs < 0x3c800000u) {
        // below 2^-6: subnormal range, quantum 2^-9
        float q = f32_from_bits(abs) * 512.0f;
        u32 m = (u32)q;
        float rem = q - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) m += 1;
        r.bits = sign | (u8)m;  // m == 8 rolls into the smallest normal, as it should
        return r;
    }
    u32 exp = (abs >> 23) - 120u;
    u32 man = abs & 0x7fffffu;
    u32 keep = man >> 20;
    u32 rest = man & 0xfffffu;
    if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) keep += 1;
    u32 bits = (exp << 3) + keep;  // a carry into the exponent is correct rounding
    if (bits > 0x7eu) bits = 0x7eu;
    r.bits = sign | (u8)bits;
    return r;
}

// f64 -> bf16 as Rust's half::bf16::from_f64: the low 32 bits of the f64 are dropped first,
// then the rest is rounded to nearest even (so a tie is judged on the truncated value).
DEVICE bf16_t f64_to_bf16(double d) {
    u64 bits = (u64)__double_as_longlong(d);
    u32 x = (u32)(bits >> 32);
    u32 sign = x & 0x80000000u;
    u32 exp = x & 0x7ff00000u;
    u32 man = x & 0x000fffffu;
    bf16_t r;
    if (exp == 0x7ff00000u) {
        u32 nan_bit = (man == 0 && (u32)bits == 0) ? 0u : 0x40u;
        r.bits = (u16)((sign >> 16) | 0x7f80u | nan_bit | (man >> 13));
        return r;
    }
    u32 half_sign = sign >> 16;
    i32 e = (i32)(exp >> 20) - 1023 + 127;
    if (e >= 0xff) { r.bits = (u16)(half_sign | 0x7f80u); return r; }
    if (e <= 0) {
        if (7 - e > 21) { r.bits = (u16)half_sign; return r; }
        u32 m = man | 0x00100000u;
        u32 hm = m >> (14 - e);
        u32 round_bit = 1u << (13 - e);
        if ((m & round_bit) != 0 && (m & (3u * round_bit - 1u)) != 0) hm += 1;
        r.bits = (u16)(half_sign | hm);
        return r;
    }
    u32 out = half_sign | ((u32)e << 7) | (man >> 13);
    u32 round_bit = 0x1000u;
    if ((man & round_bit) != 0 && (man & (3u * round_bit - 1u)) != 0) out += 1;
    r.bits = (u16)out;
    return r;
}

// f64 -> f8e4m3 with one rounding (nearest even), as float8's F8E4M3::from_f64.
DEVICE f8e4m3_t f64_to_f8e4m3(double d) {
    u64 u = (u64)__double_as_longlong(d);
    u8 sign = (u8)((u >> 56) & 0x80u);
    u64 abs = u & 0x7fffffffffffffffull;
    f8e4m3_t r;
    if (abs > 0x7ff0000000000000ull) { r.bits = sign | 0x7fu; return r; }
    if (abs >= 0x407c000000000000ull) { r.bits = sign | 0x7eu; return r; }  // >= 448 (and inf)
    if (abs < 0x3f90000000000000ull) {
        // below 2^-6: subnormal range, quantum 2^-9 (the scaling is exact)
        double q = __longlong_as_double((long long)abs) * 512.0;
        u32 m = (u32)q;
        double rem = q - (double)m;
        if (rem > 0.5 || (rem == 0.5 && (m & 1u))) m += 1;
        r.bits = sign | (u8)m;
        return r;
    }
    u32 exp = (u32)(abs >> 52) - 1016u;
    u64 man = abs & 0xfffffffffffffull;
    u32 keep = (u32)(man >> 49);
    u64 rest = man & 0x1ffffffffffffull;
    const u64 half_q = 0x1000000000000ull;
    if (rest > half_q || (rest == half_q && (keep & 1u))) keep += 1;
    u32 out = (exp << 3) + keep;
    if (out > 0x7eu) out = 0x7eu;
    r.bits = sign | (u8)out;
    return r;
}

// ---------------------------------------------------------------------------------------------
// Float -> integer as Rust's `as`: truncate toward zero, saturate at the type's bounds, NaN -> 0.
// (A plain C++ cast is undefined out of range and wraps on some paths.)
// `lo` is the smallest value (exact in f64), `hi` the first power of two past the largest.
template <typename I> struct IntBounds;
#define CANDLE_ROCM_INT_BOUNDS(I, LO, HI, MAXV) \
    template <> struct IntBounds<I> { static constexpr double lo = LO, hi = HI; static constexpr I max = MAXV; };
CANDLE_ROCM_INT_BOUNDS(u8, 0.0, 256.0, 0xff)
CANDLE_ROCM_INT_BOUNDS(u32, 0.0, 4294967296.0, 0xffffffffu)
CANDLE_ROCM_INT_BOUNDS(i16, -32768.0, 32768.0, 0x7fff)
CANDLE_ROCM_INT_BOUNDS(i32, -2147483648.0, 2147483648.0, 0x7fffffff)
CANDLE_ROCM_INT_BOUNDS(i64, -9223372036854775808.0, 9223372036854775808.0, 0x7fffffffffffffffll)
template <typename I> DEVICE I saturating_int(double x) {
    if (x != x) return (I)0;
    if (x <= IntBounds<I>::lo) return (I)IntBounds<I>::lo;
    if (x >= IntBounds<I>::hi) return IntBounds<I>::max;
    return (I)x;
}

// ---------------------------------------------------------------------------------------------
// Conversions used by templates: cvt<To>(from), with the semantics of Candle's CPU backend
// (Rust `as` between numbers, half/float8 for the narrow floats). Arithmetic on 16/8-bit
// floats goes through f32.
template <typename To, typename From> struct Cvt { static DEVICE To run(From x) { return (To)x; } };
#define CANDLE_ROCM_FLOAT_TO_INT(I) \
    template <> struct Cvt<I, float> { static DEVICE I run(float x) { return saturating_int<I>((double)x); } }; \
    template <> struct Cvt<I, double> { static DEVICE I run(double x) { return saturating_int<I>(x); } };
CANDLE_ROCM_FLOAT_TO_INT(u8)
CANDLE_ROCM_FLOAT_TO_INT(u32)
CANDLE_ROCM_FLOAT_TO_INT(i16)
CANDLE_ROCM_FLOAT_TO_INT(i32)
CANDLE_ROCM_FLOAT_TO_INT(i64)
// Integers and f32 reach the narrow floats through f32, as the CPU backend's `v as f32` does.
template <typename From> struct Cvt<f16_t, From> { static DEVICE f16_t run(From x) { return f32_to_f16((float)x); } };
template <typename From> struct Cvt<bf16_t, From> { static DEVICE bf16_t run(From x) { return f32_to_bf16((float)x); } };
template <typename From> struct Cvt<f8e4m3_t, From> { static DEVICE f8e4m3_t run(From x) { return f32_to_f8e4m3((float)x); } };
template <typename To> struct Cvt<To, f16_t> { static DEVICE To run(f16_t x) { return Cvt<To, float>::run(f16_to_f32(x)); } };
template <typename To> struct Cvt<To, bf16_t> { static DEVICE To run(bf16_t x) { return Cvt<To, float>::run(bf16_to_f32(x)); } };
template <typename To> struct Cvt<To, f8e4m3_t> { static DEVICE To run(f8e4m3_t x) { return Cvt<To, float>::run(f8e4m3_to_f32(x)); } };
template <> struct Cvt<f16_t, f16_t> { static DEVICE f16_t run(f16_t x) { return x; } };
template <> struct Cvt<bf16_t, bf16_t> { static DEVICE bf16_t run(bf16_t x) { return x; } };
template <> struct Cvt<f8e4m3_t, f8e4m3_t> { static DEVICE f8e4m3_t run(f8e4m3_t x) { return x; } };
// Between two narrow floats: through f32 (exact for the widening direction).
#define CANDLE_ROCM_NARROW_CVT(TO, FROM, TO_F, FROM_F) \
    template <> struct Cvt<TO, FROM> { static DEVICE TO run(FROM x) { return TO_F(FROM_F(x)); } };
CANDLE_ROCM_NARROW_CVT(f16_t, bf16_t, f32_to_f16, bf16_to_f32)
CANDLE_ROCM_NARROW_CVT(f16_t, f8e4m3_t, f32_to_f16, f8e4m3_to_f32)
CANDLE_ROCM_NARROW_CVT(bf16_t, f16_t, f32_to_bf16, f16_to_f32)
CANDLE_ROCM_NARROW_CVT(bf16_t, f8e4m3_t, f32_to_bf16, f8e4m3_to_f32)
CANDLE_ROCM_NARROW_CVT(f8e4m3_t, f16_t, f32_to_f8e4m3, f16_to_f32)
CANDLE_ROCM_NARROW_CVT(f8e4m3_t, bf16_t, f32_to_f8e4m3, bf16_to_f32)
// From f64: f16 goes through f32 as half does on x86 (F16C), bf16 and f8e4m3 directly.
template <> struct Cvt<f16_t, double> { static DEVICE f16_t run(double x) { return f32_to_f16((float)x); } };
template <> struct Cvt<bf16_t, double> { static DEVICE bf16_t run(double x) { return f64_to_bf16(x); } };
template <> struct Cvt<f8e4m3_t, double> { static DEVICE f8e4m3_t run(double x) { return f64_to_f8e4m3(x); } };
// To f64 from a narrow float: exact through f32.
template <> struct Cvt<double, f16_t> { static DEVICE double run(f16_t x) { return (double)f16_to_f32(x); } };
template <> struct Cvt<double, bf16_t> { static DEVICE double run(bf16_t x) { return (double)bf16_to_f32(x); } };
template <> struct Cvt<double, f8e4m3_t> { static DEVICE double run(f8e4m3_t x) { return (double)f8e4m3_to_f32(x); } };
template <typename To, typename From> DEVICE To cvt(From x) { return Cvt<To, From>::run(x); }

// The type arithmetic on T is done in: f32 for the narrow floats, T itself otherwise.
template <typename T> struct Acc { typedef T type; };
template <> struct Acc<f16_t> { typedef float type; };
template <> struct Acc<bf16_t> { typedef float type; };
template <> struct Acc<f8e4m3_t> { typedef float type; };

// ---------------------------------------------------------------------------------------------
// Warp primitives. Lane masks are 64-bit on both platforms (wave64 on CDNA).
typedef u64 lane_mask_t;
#if defined(CANDLE_ROCM_AMD)
template <typename T> DEVICE T warp_shfl_xor(T v, int lane_mask) { return __shfl_xor(v, lane_mask); }
template <typename T> DEVICE T warp_shfl_down(T v, unsigned int delta) { return __shfl_down(v, delta); }
template <typename T> DEVICE T warp_shfl(T v, int src_lane) { return __shfl(v, src_lane); }
DEVICE lane_mask_t warp_ballot(int pred) { return (lane_mask_t)__ballot(pred); }
#elif defined(CANDLE_ROCM_WAVE64_EMULATION)
// NVIDIA with emulated 64-lane wavefronts (the verification mode of CDNA's wave64): two
// hardware warps form one wavefront. warpSize is 64 and lane ids run 0..63 over the block's
// linear thread index; every cross-lane step goes through a 64-slot exchange in shared memory
// between two named barriers over the wavefront's threads (barrier 1 + its index; barrier 0
// stays __syncthreads'). AMD's semantics: a shuffle source past the wavefront reads the
// caller's own value, ballots are 64-bit. Every thread of a wavefront must reach each
// primitive (as the kernels' uniform control flow already ensures); blocks hold at most
// CANDLE_ROCM_WAVE64_MAX_WAVES wavefronts (the device reports the block limit).
#define CANDLE_ROCM_FULL_MASK 0xffffffffu
#define warpSize 64
#define CANDLE_ROCM_WAVE64_MAX_WAVES 8
__shared__ u64 candle_rocm_wave_slots[CANDLE_ROCM_WAVE64_MAX_WAVES][64];
DEVICE u32 wave_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
DEVICE u32 wave_lane() { return wave_tid() & 63u; }
DEVICE u32 wave_index() { return wave_tid() >> 6; }
// The wavefront's threads: 64, or what the block has left for its last one (whole warps).
DEVICE void wave_sync() {
    const u32 threads = blockDim.x * blockDim.y * blockDim.z;
    const u32 left = threads - wave_index() * 64u;
    const u32 count = left >= 64u ? 64u : (left + 31u) & ~31u;
    asm volatile("bar.sync %0, %1;" ::"r"(wave_index() + 1u), "r"(count) : "memory");
}
// Lane `src` (0..63) of the wavefront's values `v`.
template <typename T> DEVICE T wave_read(T v, u32 src) {
    static_assert(sizeof(T) <= 8, "a lane exchanges at most 8 bytes");
    union Bits { T t; u64 u; };  // plain-data lane values, bit-copied
    Bits mine;
    mine.u = 0;
    mine.t = v;
    u64* slots = candle_rocm_wave_slots[wave_index()];
    slots[wave_lane()] = mine.u;
    wave_sync();
    Bits got;
    got.u = slots[src & 63u];
    wave_sync();
    return got.t;
}
template <typename T> DEVICE T warp_shfl_xor(T v, int lane_mask) {
    const u32 self = wave_lane(), src = self ^ (u32)lane_mask;
    return wave_read(v, src < 64u ? src : self);
}
template <typename T> DEVICE T warp_shfl_down(T v, unsigned int delta) {
    const u32 self = wave_lane();
    return wave_read(v, self + delta < 64u ? self + delta : self);
}
template <typename T> DEVICE T warp_shfl(T v, int src_lane) { return wave_read(v, (u32)src_lane & 63u); }
DEVICE lane_mask_t warp_ballot(int pred) {
    const u32 half = __ballot_sync(CANDLE_ROCM_FULL_MASK, pred);
    u64* slots = candle_rocm_wave_slots[wave_index()];
    if ((wave_lane() & 31u) == 0) slots[wave_lane() >> 5] = half;
    wave_sync();
    const u32 threads = blockDim.x * blockDim.y * blockDim.z;
    const bool upper = threads - wave_index() * 64u > 32u;  // a last wavefront of one warp has no upper half
    const lane_mask_t mask = slots[0] | (upper ? slots[1] << 32 : 0ull);
    wave_sync();
    return mask;
}
#else
#define CANDLE_ROCM_FULL_MASK 0xffffffffu
template <typename T> DEVICE T warp_shfl_xor(T v, int lane_mask) { return __shfl_xor_sync(CANDLE_ROCM_FULL_MASK, v, lane_mask); }
template <typename T> DEVICE T warp_shfl_down(T v, unsigned int delta) { return __shfl_down_sync(CANDLE_ROCM_FULL_MASK, v, delta); }
template <typename T> DEVICE T warp_shfl(T v, int src_lane) { return __shfl_sync(CANDLE_ROCM_FULL_MASK, v, src_lane); }
DEVICE lane_mask_t warp_ballot(int pred) { return (lane_mask_t)__ballot_sync(CANDLE_ROCM_FULL_MASK, pred); }
#endif

// The most warps (or wavefronts) a block holds: 1024 threads of 32 lanes. Kernels size their
// per-warp shared scratch by it.
#define MAX_BLOCK_WARPS 32

// ---------------------------------------------------------------------------------------------
// Integer dot product: the four signed bytes of a times those of b, summed, plus c.
// NVIDIA: dp4a. AMD: v_dot4_i32_i8 on CDNA (gfx908..gfx950) and RDNA2, v_dot4_i32_iu8 (both
// operands signed) on RDNA3 and RDNA4; other targets multiply the bytes one at a time.
#if defined(CANDLE_ROCM_AMD)
DEVICE int dot4_i8(int a, int b, int c) {
#if defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || \
    defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__) || defined(__gfx1030__) || \
    defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1034__) || defined(__gfx1035__) || \
    defined(__gfx1036__)
#define CANDLE_ROCM_DOT4_NATIVE 1
    return __builtin_amdgcn_sdot4(a, b, c, false);
#elif defined(__GFX11__) || defined(__GFX12__)
#define CANDLE_ROCM_DOT4_NATIVE 1
    return __builtin_amdgcn_sudot4(true, a, true, b, c, false);
#else
    for (int i = 0; i < 32; i += 8) c += (int)(i8)(a >> i) * (int)(i8)(b >> i);
    return c;
#endif
}
#else
#define CANDLE_ROCM_DOT4_NATIVE 1
DEVICE int dot4_i8(int a, int b, int c) { return __dp4a(a, b, c); }
#endif

// ---------------------------------------------------------------------------------------------
// Matrix units. The operation matrix kernels use: a warp (wavefront) adds the product of two
// 16x16 tiles of a 16-bit float type T (f16_t or bf16_t) to a 16x16 f32 tile,
// mma_16x16x16<T>(a, b, c): c += a b, on the target's instruction:
//   CANDLE_ROCM_MMA_SYNC   NVIDIA: two mma.sync.m16n8k16 (32 lanes)
//   CANDLE_ROCM_MMA_MFMA   CDNA gfx90a / gfx94x / gfx950: v_mfma_f32_16x16x16{f16,bf16_1k}
//                          (64 lanes); under the wave64 emulation the same instructions in
//                          software with AMD's register layouts (below)
//   CANDLE_ROCM_MMA_WMMA11 RDNA3 gfx11: v_wmma_f32_16x16x16_{f16,bf16} (wave32)
//   CANDLE_ROCM_MMA_WMMA12 RDNA4 gfx12: the same instructions' gfx12 forms (wave32)
// A lane holds MMA_A elements of a, MMA_B of b and MMA_C of c; mma_a_at(e), mma_b_at(e) and
// mma_c_at(e) say which (row, column) of its tile element e is. Elements 2w and 2w + 1 of a and
// of b are neighbours along k in every layout: the a and b operands are held as MMA_A / 2 and
// MMA_B / 2 u32 words of two elements (element 2w in the low half), the form the instructions
// take. Those maps, the loads from shared memory and the accumulator's row groups live here
// and nowhere else. Targets without matrix units (CANDLE_ROCM_HAS_MMA 0) get gfx11's maps and
// an mma_16x16x16 that traps: the host launches matrix kernels only on devices that have them.
#if defined(CANDLE_ROCM_NVIDIA) && !defined(CANDLE_ROCM_WAVE64_EMULATION)
#define CANDLE_ROCM_MMA_SYNC 1
#elif defined(CANDLE_ROCM_WAVE64_EMULATION) || defined(__gfx90a__) || defined(__gfx940__) || \
    defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)
#define CANDLE_ROCM_MMA_MFMA 1
#elif defined(__GFX12__)
#define CANDLE_ROCM_MMA_WMMA12 1
#elif defined(__GFX11__)
#define CANDLE_ROCM_MMA_WMMA11 1
#endif
#if defined(CANDLE_ROCM_MMA_SYNC) || defined(CANDLE_ROCM_MMA_MFMA) || \
    defined(CANDLE_ROCM_MMA_WMMA11) || defined(CANDLE_ROCM_MMA_WMMA12)
#define CANDLE_ROCM_HAS_MMA 1
#else
#define CANDLE_ROCM_HAS_MMA 0
#endif

DEVICE u32 mma_lane() { return threadIdx.x % warpSize; }
// Two 16-bit values as one operand word (lo in the low half).
DEVICE u32 mma_word(u16 lo, u16 hi) { return (u32)lo | ((u32)hi << 16); }
// Two f32 values rounded to T (nearest even) as one operand word.
template <typename T> DEVICE u32 mma_pack(float lo, float hi);
#if defined(CANDLE_ROCM_NVIDIA)
template <> DEVICE u32 mma_pack<bf16_t>(float lo, float hi) {
    u32 w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}
template <> DEVICE u32 mma_pack<f16_t>(float lo, float hi) {
    u32 w;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}
#else
template <> DEVICE u32 mma_pack<bf16_t>(float lo, float hi) { return mma_word(f32_to_bf16(lo).bits, f32_to_bf16(hi).bits); }
template <> DEVICE u32 mma_pack<f16_t>(float lo, float hi) { return mma_word(f32_to_f16(lo).bits, f32_to_f16(hi).bits); }
#endif

#if defined(CANDLE_ROCM_AMD)
// c's N floats through an instruction that takes and returns its accumulator as a vector V.
template <typename V, int N, typename Op> DEVICE void vector_accumulate(float* c, Op op) {
    V acc;
    for (int i = 0; i < N; ++i) acc[i] = c[i];
    acc = op(acc);
    for (int i = 0; i < N; ++i) c[i] = acc[i];
}
#endif

// The single instructions, on operand words as the hardware holds them (the probes test each
// one against a host model of its layout). Row and column below are those of the
// instruction's own A (M x K), B (K x N) and C (M x N); a[e] is element e of the lane's a.
#if defined(CANDLE_ROCM_MMA_SYNC)
// m16n8k16, g = lane / 4, t = lane % 4: a[e] at (g + 8 ((e / 2) % 2), 2t + e % 2 + 8 (e / 4));
// b[e] at (2t + e % 2 + 8 (e / 2), g); c[e] at (g + 8 (e / 2), 2t + e % 2).
template <typename T> struct MmaSync;
template <> struct MmaSync<bf16_t> { static DEVICE void run(const u32* a, const u32* b, float* c) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
} };
template <> struct MmaSync<f16_t> { static DEVICE void run(const u32* a, const u32* b, float* c) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
} };
template <typename T> DEVICE void mma_m16n8k16(const u32* a, const u32* b, float* c) { MmaSync<T>::run(a, b, c); }
#endif

#if defined(CANDLE_ROCM_MMA_MFMA)
// MFMA M x M x K (M = 16: K = 16; M = 32: K = 8), four consecutive k a lane: a[e] at
// (lane % M, 4 (lane / M) + e), b[e] at (4 (lane / M) + e, lane % M); c[e] at
// (4 (lane / 16) + e, lane % 16) for M = 16 and (8 (e / 4) + 4 (lane / 32) + e % 4, lane % 32)
// for M = 32 (AMD's CDNA3 ISA, "matrix fused multiply-add" layouts).
template <int M> DEVICE void mfma_c_at(u32 lane, u32 e, u32& row, u32& col) {
    if (M == 16) { row = 4 * (lane / 16) + e; col = lane % 16; }
    else { row = 8 * (e / 4) + 4 * (lane / 32) + e % 4; col = lane % 32; }
}
#if defined(CANDLE_ROCM_AMD)
typedef short cr_i16x4 __attribute__((ext_vector_type(4)));
typedef _Float16 cr_f16x4 __attribute__((ext_vector_type(4)));
typedef float cr_f32x4 __attribute__((ext_vector_type(4)));
typedef float cr_f32x16 __attribute__((ext_vector_type(16)));
DEVICE u64 mma_words64(const u32* x) { return (u64)x[0] | ((u64)x[1] << 32); }
template <typename T> struct Mfma;
template <> struct Mfma<bf16_t> {
    static DEVICE cr_i16x4 in(const u32* x) { return __builtin_bit_cast(cr_i16x4, mma_words64(x)); }
    static DEVICE cr_f32x4 m16(const u32* a, const u32* b, cr_f32x4 c) { return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(in(a), in(b), c, 0, 0, 0); }
    static DEVICE cr_f32x16 m32(const u32* a, const u32* b, cr_f32x16 c) { return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(in(a), in(b), c, 0, 0, 0); }
};
template <> struct Mfma<f16_t> {
    static DEVICE cr_f16x4 in(const u32* x) { return __builtin_bit_cast(cr_f16x4, mma_words64(x)); }
    static DEVICE cr_f32x4 m16(const u32* a, const u32* b, cr_f32x4 c) { return __builtin_amdgcn_mfma_f32_16x16x16f16(in(a), in(b), c, 0, 0, 0); }
    static DEVICE cr_f32x16 m32(const u32* a, const u32* b, cr_f32x16 c) { return __builtin_amdgcn_mfma_f32_32x32x8f16(in(a), in(b), c, 0, 0, 0); }
};
template <typename T> DEVICE void mfma_16x16x16(const u32* a, const u32* b, float* c) {
    vector_accumulate<cr_f32x4, 4>(c, [&](cr_f32x4 acc) { return Mfma<T>::m16(a, b, acc); });
}
template <typename T> DEVICE void mfma_32x32x8(const u32* a, const u32* b, float* c) {
    vector_accumulate<cr_f32x16, 16>(c, [&](cr_f32x16 acc) { return Mfma<T>::m32(a, b, acc); });
}
#else
// The emulation: each lane posts its four a and four b values (8 bytes each) to its
// wavefront's slots, then computes its own c elements from the slots in f32 (the products of
// two 16-bit floats are exact in f32). CANDLE_ROCM_PLANT_TRANSPOSED_B (tests only) reads each
// K x K block of b transposed: the layout fault the probes must catch.
__shared__ u64 candle_rocm_mfma_b_slots[CANDLE_ROCM_WAVE64_MAX_WAVES][64];
template <typename T> DEVICE float mfma_value(u64 word, u32 e) {
    T t;
    t.bits = (u16)(word >> (16 * e));
    return cvt<float>(t);
}
template <typename T, int M> DEVICE void mfma_emulated(const u32* a, const u32* b, float* c) {
    const int K = 256 / M;
    u64* sa = candle_rocm_wave_slots[wave_index()];
    u64* sb = candle_rocm_mfma_b_slots[wave_index()];
    const u32 lane = wave_lane();
    sa[lane] = (u64)a[0] | ((u64)a[1] << 32);
    sb[lane] = (u64)b[0] | ((u64)b[1] << 32);
    wave_sync();
    for (u32 e = 0; e < (u32)(M * M / 64); ++e) {
        u32 row, col;
        mfma_c_at<M>(lane, e, row, col);
        float acc = c[e];
        for (u32 k = 0; k < (u32)K; ++k) {
            const float x = mfma_value<T>(sa[row + M * (k / 4)], k % 4);
#if defined(CANDLE_ROCM_PLANT_TRANSPOSED_B)
            const u32 bk = col % K, bn = k + K * (col / K);
#else
            const u32 bk = k, bn = col;
#endif
#if defined(CANDLE_ROCM_PLANT_MISREAD_MFMA_B)
            // the planted misreading, shared with mma_b_at: b(k, n) looked for where b^T's
            // layout keeps it (16x16x16 only)
            const u64 bword = M == 16 ? sb[bk + M * (bn / 4)] : sb[bn + M * (bk / 4)];
            const u32 belem = M == 16 ? bn % 4 : bk % 4;
            acc = __fmaf_rn(x, mfma_value<T>(bword, belem), acc);
#else
            acc = __fmaf_rn(x, mfma_value<T>(sb[bn + M * (bk / 4)], bk % 4), acc);
#endif
        }
        c[e] = acc;
    }
    wave_sync();
}
template <typename T> DEVICE void mfma_16x16x16(const u32* a, const u32* b, float* c) { mfma_emulated<T, 16>(a, b, c); }
template <typename T> DEVICE void mfma_32x32x8(const u32* a, const u32* b, float* c) { mfma_emulated<T, 32>(a, b, c); }
#endif
#endif

#if defined(CANDLE_ROCM_MMA_WMMA11) || defined(CANDLE_ROCM_MMA_WMMA12)
typedef short cr_i16x16 __attribute__((ext_vector_type(16)));
typedef _Float16 cr_f16x16 __attribute__((ext_vector_type(16)));
typedef short cr_i16x8 __attribute__((ext_vector_type(8)));
typedef _Float16 cr_f16x8 __attribute__((ext_vector_type(8)));
typedef float cr_f32x8 __attribute__((ext_vector_type(8)));
template <int N> struct WmmaWords { u32 w[N]; };
template <typename V, int N> DEVICE V wmma_in(const u32* x) {
    WmmaWords<N> words;
    for (int i = 0; i < N; ++i) words.w[i] = x[i];
    return __builtin_bit_cast(V, words);
}
template <typename T> struct Wmma;
#if defined(CANDLE_ROCM_MMA_WMMA11)
// gfx11, wave32: a[e] at (lane % 16, e) and b[e] at (e, lane % 16), e < 16 (lanes 16-31 hold
// copies of lanes 0-15); c[e] at (2e + lane / 16, lane % 16), e < 8.
template <> struct Wmma<bf16_t> { static DEVICE cr_f32x8 run(const u32* a, const u32* b, cr_f32x8 c) {
    return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(wmma_in<cr_i16x16, 8>(a), wmma_in<cr_i16x16, 8>(b), c);
} };
template <> struct Wmma<f16_t> { static DEVICE cr_f32x8 run(const u32* a, const u32* b, cr_f32x8 c) {
    return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(wmma_in<cr_f16x16, 8>(a), wmma_in<cr_f16x16, 8>(b), c);
} };
#else
// gfx12, wave32: a[e] at (lane % 16, 8 (lane / 16) + e) and b[e] at (8 (lane / 16) + e,
// lane % 16), e < 8; c[e] at (8 (lane / 16) + e, lane % 16).
template <> struct Wmma<bf16_t> { static DEVICE cr_f32x8 run(const u32* a, const u32* b, cr_f32x8 c) {
    return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(wmma_in<cr_i16x8, 4>(a), wmma_in<cr_i16x8, 4>(b), c);
} };
template <> struct Wmma<f16_t> { static DEVICE cr_f32x8 run(const u32* a, const u32* b, cr_f32x8 c) {
    return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(wmma_in<cr_f16x8, 4>(a), wmma_in<cr_f16x8, 4>(b), c);
} };
#endif
template <typename T> DEVICE void wmma_16x16x16(const u32* a, const u32* b, float* c) {
    vector_accumulate<cr_f32x8, 8>(c, [&](cr_f32x8 acc) { return Wmma<T>::run(a, b, acc); });
}
#endif

// The 16x16x16 tile operation and its maps. MMA_ROW_LANES: the aligned group of lanes that
// holds one row of c (a row's max and sum combine over it); MMA_ROW_SLOTS: the distinct rows a
// lane holds, mma_c_slot(e) the one of element e.
#if defined(CANDLE_ROCM_MMA_SYNC)
#define MMA_A 8
#define MMA_B 8
#define MMA_C 8
#define MMA_ROW_LANES 4
#define MMA_ROW_SLOTS 2
// two n8 halves: b[0..3] and c[0..3] for columns 0-7, b[4..7] and c[4..7] for 8-15.
DEVICE void mma_a_at(u32 e, u32& row, u32& k) {
    const u32 l = mma_lane();
    row = l / 4 + 8 * ((e / 2) % 2);
    k = 2 * (l % 4) + e % 2 + 8 * (e / 4);
}
DEVICE void mma_b_at(u32 e, u32& k, u32& col) {
    const u32 l = mma_lane();
    k = 2 * (l % 4) + e % 2 + 8 * ((e / 2) % 2);
    col = l / 4 + 8 * (e / 4);
}
DEVICE void mma_c_at(u32 e, u32& row, u32& col) {
    const u32 l = mma_lane();
    row = l / 4 + 8 * ((e / 2) % 2);
    col = 2 * (l % 4) + e % 2 + 8 * (e / 4);
}
DEVICE u32 mma_c_slot(u32 e) { return (e / 2) % 2; }
template <typename T> DEVICE void mma_16x16x16(const u32* a, const u32* b, float* c) {
    mma_m16n8k16<T>(a, b, c);
    mma_m16n8k16<T>(a, b + 2, c + 4);
}
// c's element e sits where a's element e does: a product's c is the next product's a as is.
#define MMA_C_IS_A 1
#elif defined(CANDLE_ROCM_MMA_MFMA)
#define MMA_A 4
#define MMA_B 4
#define MMA_C 4
#define MMA_ROW_LANES 16
#define MMA_ROW_SLOTS 4
DEVICE void mma_a_at(u32 e, u32& row, u32& k) { row = mma_lane() % 16; k = 4 * (mma_lane() / 16) + e; }
#if defined(CANDLE_ROCM_PLANT_MISREAD_MFMA_B)
// The planted misreading (tests only): b's layout read as its transpose's.
DEVICE void mma_b_at(u32 e, u32& k, u32& col) { k = mma_lane() % 16; col = 4 * (mma_lane() / 16) + e; }
#else
DEVICE void mma_b_at(u32 e, u32& k, u32& col) { k = 4 * (mma_lane() / 16) + e; col = mma_lane() % 16; }
#endif
DEVICE void mma_c_at(u32 e, u32& row, u32& col) { mfma_c_at<16>(mma_lane(), e, row, col); }
DEVICE u32 mma_c_slot(u32 e) { return e; }
template <typename T> DEVICE void mma_16x16x16(const u32* a, const u32* b, float* c) { mfma_16x16x16<T>(a, b, c); }
#elif defined(CANDLE_ROCM_MMA_WMMA12)
#define MMA_A 8
#define MMA_B 8
#define MMA_C 8
#define MMA_ROW_LANES 16
#define MMA_ROW_SLOTS 8
DEVICE void mma_a_at(u32 e, u32& row, u32& k) { row = mma_lane() % 16; k = 8 * (mma_lane() / 16) + e; }
DEVICE void mma_b_at(u32 e, u32& k, u32& col) { k = 8 * (mma_lane() / 16) + e; col = mma_lane() % 16; }
DEVICE void mma_c_at(u32 e, u32& row, u32& col) { row = 8 * (mma_lane() / 16) + e; col = mma_lane() % 16; }
DEVICE u32 mma_c_slot(u32 e) { return e; }
template <typename T> DEVICE void mma_16x16x16(const u32* a, const u32* b, float* c) { wmma_16x16x16<T>(a, b, c); }
#else
#define MMA_A 16
#define MMA_B 16
#define MMA_C 8
#define MMA_ROW_LANES 16
#define MMA_ROW_SLOTS 8
DEVICE void mma_a_at(u32 e, u32& row, u32& k) { row = mma_lane() % 16; k = e; }
DEVICE void mma_b_at(u32 e, u32& k, u32& col) { k = e; col = mma_lane() % 16; }
#if defined(CANDLE_ROCM_PLANT_MISREAD_WMMA_C)
// The planted misreading (tests only): gfx11's c rows taken as gfx12 lays them out.
DEVICE void mma_c_at(u32 e, u32& row, u32& col) { row = 8 * (mma_lane() / 16) + e; col = mma_lane() % 16; }
#else
DEVICE void mma_c_at(u32 e, u32& row, u32& col) { row = 2 * e + mma_lane() / 16; col = mma_lane() % 16; }
#endif
DEVICE u32 mma_c_slot(u32 e) { return e; }
#if defined(CANDLE_ROCM_MMA_WMMA11)
template <typename T> DEVICE void mma_16x16x16(const u32* a, const u32* b, float* c) { wmma_16x16x16<T>(a, b, c); }
#else
template <typename T> DEVICE void mma_16x16x16(const u32*, const u32*, float*) { __builtin_trap(); }
#endif
#endif

// The warp's shared-memory writes are seen by its own later reads.
DEVICE void mma_warp_sync() {
#if defined(CANDLE_ROCM_AMD)
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#elif defined(CANDLE_ROCM_WAVE64_EMULATION)
    wave_sync();
#else
    __syncwarp();
#endif
}

#if defined(CANDLE_ROCM_NVIDIA)
// A shared-memory address as the 32-bit form ldmatrix and cp.async take.
DEVICE u32 shared_address(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
#endif

// Loads from shared memory (`ld` a multiple of 8, `s` 16-byte aligned: ldmatrix's rows on
// NVIDIA, 32-bit pairs elsewhere). a(row, k) = s[row * ld + k]; b given as rows of n,
// b(k, n) = s[n * ld + k]; b given as rows of k, b(k, n) = s[k * ld + n].
// The fragments a shared-memory tile gives (see mma_load_a, mma_load_b and MmaShared).
#define MMA_FRAG_A 0
#define MMA_FRAG_B_NK 1
#define MMA_FRAG_B_KN 2
#if defined(CANDLE_ROCM_MMA_SYNC)
// ldmatrix.x4: four 8x8 matrices of 16-bit elements, lanes 8i..8i+7 addressing matrix i's rows
// (TRANS: each transposed as it loads). The element of the tile (row stride `ld`) this lane
// addresses for a fragment of KIND: a's matrix i is rows 8 (i % 2).. by k 8 (i / 2)..; b's
// (rows of n) n 8 (i / 2).. by k 8 (i % 2)..; b's (rows of k, transposed) k 8 (i % 2).. by n
// 8 (i / 2)...
template <int KIND> DEVICE u32 ldmatrix_lane_offset(u32 ld) {
    const u32 l = mma_lane(), i = l / 8;
    if (KIND == MMA_FRAG_B_NK) return (8 * (i / 2) + l % 8) * ld + 8 * (i % 2);
    return (8 * (i % 2) + l % 8) * ld + 8 * (i / 2);
}
template <bool TRANS> DEVICE void ldmatrix_x4(u32* r, u32 at) {
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
}
#endif

template <typename T> DEVICE void mma_load_a(u32* a, const T* s, u32 ld) {
#if defined(CANDLE_ROCM_MMA_SYNC)
    ldmatrix_x4<false>(a, shared_address(s + ldmatrix_lane_offset<MMA_FRAG_A>(ld)));
#else
#pragma unroll
    for (u32 e = 0; e < MMA_A; e += 2) {
        u32 row, k;
        mma_a_at(e, row, k);
        a[e / 2] = *(const u32*)(s + row * ld + k);
    }
#endif
}
// b given as rows of n (ROWS_OF_K false) or as rows of k (true). The planted fault
// (CANDLE_ROCM_PLANT_TRANSPOSED_B, tests only) reads the NVIDIA tiles the other way.
template <bool ROWS_OF_K, typename T> DEVICE void mma_load_b(u32* b, const T* s, u32 ld) {
#if defined(CANDLE_ROCM_MMA_SYNC) && !defined(CANDLE_ROCM_PLANT_TRANSPOSED_B)
    ldmatrix_x4<ROWS_OF_K>(b, shared_address(s + ldmatrix_lane_offset<ROWS_OF_K ? MMA_FRAG_B_KN : MMA_FRAG_B_NK>(ld)));
#else
#if defined(CANDLE_ROCM_PLANT_TRANSPOSED_B) && defined(CANDLE_ROCM_MMA_SYNC)
    const bool by_k = !ROWS_OF_K;
#else
    const bool by_k = ROWS_OF_K;
#endif
#if defined(CANDLE_ROCM_PLANT_MISREAD_MFMA_B)
    // the planted misreading: each element where mma_b_at says (its neighbour is along n)
#pragma unroll
    for (u32 e = 0; e < MMA_B; e += 2) {
        u32 k0, n0, k1, n1;
        mma_b_at(e, k0, n0);
        mma_b_at(e + 1, k1, n1);
        b[e / 2] = by_k ? mma_word(s[k0 * ld + n0].bits, s[k1 * ld + n1].bits)
                        : mma_word(s[n0 * ld + k0].bits, s[n1 * ld + k1].bits);
    }
#else
#pragma unroll
    for (u32 e = 0; e < MMA_B; e += 2) {
        u32 k, n;
        mma_b_at(e, k, n);
        b[e / 2] = by_k ? mma_word(s[k * ld + n].bits, s[(k + 1) * ld + n].bits)
                        : *(const u32*)(s + n * ld + k);
    }
#endif
#endif
}
template <typename T> DEVICE void mma_load_b_nk(u32* b, const T* s, u32 ld) { mma_load_b<false>(b, s, ld); }
template <typename T> DEVICE void mma_load_b_kn(u32* b, const T* s, u32 ld) { mma_load_b<true>(b, s, ld); }

// A shared-memory tile's fragments at offsets fixed at compile time: MmaShared<T, KIND> takes
// the tile (`s`, row stride `ld`) once and load(r, offset) reads the fragment whose first
// element is s[offset] as mma_load_a (KIND MMA_FRAG_A), mma_load_b_nk (MMA_FRAG_B_NK) or
// mma_load_b_kn (MMA_FRAG_B_KN) would. On NVIDIA the lane's 32-bit shared address is computed
// once, so an unrolled loop's loads are ldmatrix with immediate offsets; elsewhere it is the
// plain loads.
template <typename T, int KIND> struct MmaShared {
#if defined(CANDLE_ROCM_MMA_SYNC) && !defined(CANDLE_ROCM_PLANT_TRANSPOSED_B)
    u32 addr;  // the lane's ldmatrix address
    DEVICE MmaShared(const T* s, u32 ld) : addr(shared_address(s + ldmatrix_lane_offset<KIND>(ld))) {}
    DEVICE void load(u32* r, u32 offset) const { ldmatrix_x4<KIND == MMA_FRAG_B_KN>(r, addr + offset * (u32)sizeof(T)); }
#else
    const T* s;
    u32 ld;
    DEVICE MmaShared(const T* s_, u32 ld_) : s(s_), ld(ld_) {}
    DEVICE void load(u32* r, u32 offset) const {
        if (KIND == MMA_FRAG_A) mma_load_a(r, s + offset, ld);
        else if (KIND == MMA_FRAG_B_NK) mma_load_b_nk(r, s + offset, ld);
        else mma_load_b_kn(r, s + offset, ld);
    }
#endif
};

// The row stride of a warp's scratch tile for mma_c_to_a (16 rows).
#define MMA_SCRATCH_LD 24
// c (f32, a product's result) as the a operand of the next product, rounded to T. Where the
// layouts differ it goes through `scratch`, this warp's 16 x MMA_SCRATCH_LD tile of T.
template <typename T> DEVICE void mma_c_to_a(const float* c, u32* a, T* scratch) {
#if defined(MMA_C_IS_A)
    (void)scratch;
#pragma unroll
    for (u32 w = 0; w < MMA_A / 2; ++w) a[w] = mma_pack<T>(c[2 * w], c[2 * w + 1]);
#else
#pragma unroll
    for (u32 e = 0; e < MMA_C; ++e) {
        u32 row, col;
        mma_c_at(e, row, col);
        scratch[row * MMA_SCRATCH_LD + col] = cvt<T>(c[e]);
    }
    mma_warp_sync();
    mma_load_a(a, scratch, MMA_SCRATCH_LD);
    mma_warp_sync();
#endif
}

// ---------------------------------------------------------------------------------------------
// int8 matrix units: c (16x16 i32) += a (16x32 i8) b (32x16 i8), mma_i8_16x16x32(a, b, c), for
// the quantized products. A lane holds MMA_I8_A elements of a and MMA_I8_B of b as words of four
// (element 4w + j in byte j of word w; the four are neighbours along k in every layout) and
// c as the f16 tiles' MMA_C values at mma_c_at (the i32 accumulators sit where the f32 ones do
// on every target). On the target's instructions:
//   CANDLE_ROCM_MMA_SYNC   two mma.sync.m16n8k32.s8 (n 0-7, 8-15)
//   CANDLE_ROCM_MMA_MFMA   gfx942 / gfx950: v_mfma_i32_16x16x32_i8; gfx90a: two
//                          v_mfma_i32_16x16x16i8 (the lane's two words, k permuted the same
//                          way in a and b); under the wave64 emulation in software
//   CANDLE_ROCM_MMA_WMMA11 two v_wmma_i32_16x16x16_iu8 (k 0-15, 16-31), signed operands
//   CANDLE_ROCM_MMA_WMMA12 the same, gfx12 forms
#if defined(CANDLE_ROCM_MMA_SYNC)
// m16n8k32 s8, g = lane / 4, t = lane % 4: a[e] at (g + 8 ((e / 4) % 2), 4t + e % 4 + 16 (e / 8));
// b[e] at (4t + e % 4 + 16 (e / 4), g), e < 8; c[e] at (g + 8 (e / 2), 2t + e % 2).
DEVICE void mma_m16n8k32_s8(const u32* a, const u32* b, int* c) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#define MMA_I8_A 16
#define MMA_I8_B 16
DEVICE void mma_i8_a_at(u32 e, u32& row, u32& k) {
    const u32 l = mma_lane();
    row = l / 4 + 8 * ((e / 4) % 2);
    k = 4 * (l % 4) + e % 4 + 16 * (e / 8);
}
// b[0..7] for columns 0-7, b[8..15] for 8-15 (the two instructions' b operands).
DEVICE void mma_i8_b_at(u32 e, u32& k, u32& col) {
    const u32 l = mma_lane(), i = e % 8;
    k = 4 * (l % 4) + i % 4 + 16 * (i / 4);
    col = l / 4 + 8 * (e / 8);
}
DEVICE void mma_i8_16x16x32(const u32* a, const u32* b, int* c) {
    mma_m16n8k32_s8(a, b, c);
    mma_m16n8k32_s8(a, b + 2, c + 4);
}
#elif defined(CANDLE_ROCM_MMA_MFMA)
// 16x16x32 i8: a[e] at (lane % 16, 8 (lane / 16) + e), b[e] at (8 (lane / 16) + e, lane % 16),
// e < 8; c[e] at (4 (lane / 16) + e, lane % 16) (AMD's CDNA3 ISA tables).
#define MMA_I8_A 8
#define MMA_I8_B 8
DEVICE void mma_i8_a_at(u32 e, u32& row, u32& k) { row = mma_lane() % 16; k = 8 * (mma_lane() / 16) + e; }
DEVICE void mma_i8_b_at(u32 e, u32& k, u32& col) { k = 8 * (mma_lane() / 16) + e; col = mma_lane() % 16; }
#if defined(CANDLE_ROCM_AMD)
typedef int cr_i32x4 __attribute__((ext_vector_type(4)));
// The arch's one int8 MFMA: gfx90a's v_mfma_i32_16x16x16i8 (a lane's word holds k 4 (l / 16)..+3
// of the instruction's 16), else v_mfma_i32_16x16x32_i8 (two words, k 8 (l / 16)..+7).
#if defined(__gfx90a__)
#define MFMA_I8_WORDS 1
#else
#define MFMA_I8_WORDS 2
#endif
DEVICE void mfma_i8_instruction(const u32* a, const u32* b, int* c) {
    cr_i32x4 acc = {c[0], c[1], c[2], c[3]};
#if defined(__gfx90a__)
    acc = __builtin_amdgcn_mfma_i32_16x16x16i8((int)a[0], (int)b[0], acc, 0, 0, 0);
#else
    acc = __builtin_amdgcn_mfma_i32_16x16x32_i8((long)mma_words64(a), (long)mma_words64(b), acc, 0, 0, 0);
#endif
    for (int i = 0; i < 4; ++i) c[i] = acc[i];
}
// On gfx90a the lane's first words then its second make all 32 k of a and b, paired alike.
DEVICE void mfma_i32_16x16x32_i8(const u32* a, const u32* b, int* c) {
    for (int w = 0; w < 2; w += MFMA_I8_WORDS) mfma_i8_instruction(a + w, b + w, c);
}
#else
// The emulation: each lane posts its eight a and eight b values (8 bytes each), then computes
// its own c elements from the slots.
DEVICE void mfma_i32_16x16x32_i8(const u32* a, const u32* b, int* c) {
    u64* sa = candle_rocm_wave_slots[wave_index()];
    u64* sb = candle_rocm_mfma_b_slots[wave_index()];
    const u32 lane = wave_lane();
    sa[lane] = (u64)a[0] | ((u64)a[1] << 32);
    sb[lane] = (u64)b[0] | ((u64)b[1] << 32);
    wave_sync();
    for (u32 e = 0; e < 4; ++e) {
        const u32 row = 4 * (lane / 16) + e, col = lane % 16;
        int acc = c[e];
        for (u32 k = 0; k < 32; ++k) {
            const int x = (i8)(u8)(sa[row + 16 * (k / 8)] >> (8 * (k % 8)));
            acc += x * (int)(i8)(u8)(sb[col + 16 * (k / 8)] >> (8 * (k % 8)));
        }
        c[e] = acc;
    }
    wave_sync();
}
#endif
DEVICE void mma_i8_16x16x32(const u32* a, const u32* b, int* c) { mfma_i32_16x16x32_i8(a, b, c); }
#elif defined(CANDLE_ROCM_MMA_WMMA11) || defined(CANDLE_ROCM_MMA_WMMA12)
typedef int cr_i32x8 __attribute__((ext_vector_type(8)));
typedef int cr_i32x4 __attribute__((ext_vector_type(4)));
typedef int cr_i32x2 __attribute__((ext_vector_type(2)));
#if defined(CANDLE_ROCM_MMA_WMMA11)
// gfx11 iu8, wave32: a[e] at (lane % 16, e), b[e] at (e, lane % 16), e < 16 an instruction
// (lanes 16-31 hold copies of lanes 0-15); c as the f32 tile's.
#define MMA_I8_A 32
#define MMA_I8_B 32
DEVICE void mma_i8_a_at(u32 e, u32& row, u32& k) { row = mma_lane() % 16; k = e; }
DEVICE void mma_i8_b_at(u32 e, u32& k, u32& col) { k = e; col = mma_lane() % 16; }
DEVICE cr_i32x8 wmma_i8(const u32* a, const u32* b, cr_i32x8 c) {
    return __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32(true, wmma_in<cr_i32x4, 4>(a), true, wmma_in<cr_i32x4, 4>(b), c, false);
}
#define WMMA_I8_WORDS 4
#else
// gfx12 iu8, wave32: a[e] at (lane % 16, 8 (lane / 16) + e), b[e] at (8 (lane / 16) + e,
// lane % 16), e < 8 an instruction; c as the f32 tile's.
#define MMA_I8_A 16
#define MMA_I8_B 16
DEVICE void mma_i8_a_at(u32 e, u32& row, u32& k) { row = mma_lane() % 16; k = 16 * (e / 8) + 8 * (mma_lane() / 16) + e % 8; }
DEVICE void mma_i8_b_at(u32 e, u32& k, u32& col) { k = 16 * (e / 8) + 8 * (mma_lane() / 16) + e % 8; col = mma_lane() % 16; }
DEVICE cr_i32x8 wmma_i8(const u32* a, const u32* b, cr_i32x8 c) {
    return __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, wmma_in<cr_i32x2, 2>(a), true, wmma_in<cr_i32x2, 2>(b), c, false);
}
#define WMMA_I8_WORDS 2
#endif
DEVICE void mma_i8_16x16x32(const u32* a, const u32* b, int* c) {
    cr_i32x8 acc;
    for (int i = 0; i < 8; ++i) acc[i] = c[i];
    acc = wmma_i8(a, b, acc);
    acc = wmma_i8(a + WMMA_I8_WORDS, b + WMMA_I8_WORDS, acc);
    for (int i = 0; i < 8; ++i) c[i] = acc[i];
}
#else
#define MMA_I8_A 32
#define MMA_I8_B 32
DEVICE void mma_i8_a_at(u32 e, u32& row, u32& k) { row = mma_lane() % 16; k = e; }
DEVICE void mma_i8_b_at(u32 e, u32& k, u32& col) { k = e; col = mma_lane() % 16; }
DEVICE void mma_i8_16x16x32(const u32*, const u32*, int*) { __builtin_trap(); }
#endif

// The int8 operands from shared memory (`ld` a multiple of 4, rows 4-byte aligned):
// a(row, k) = s[row * ld + k]; b given as rows of n, b(k, n) = s[n * ld + k] (the activations'
// rows of tokens, k contiguous).
DEVICE void mma_i8_load_a(u32* a, const i8* s, u32 ld) {
#pragma unroll
    for (u32 e = 0; e < MMA_I8_A; e += 4) {
        u32 row, k;
        mma_i8_a_at(e, row, k);
        a[e / 4] = *(const u32*)(s + row * ld + k);
    }
}
DEVICE void mma_i8_load_b(u32* b, const i8* s, u32 ld) {
#pragma unroll
    for (u32 e = 0; e < MMA_I8_B; e += 4) {
        u32 k, n;
        mma_i8_b_at(e, k, n);
        b[e / 4] = *(const u32*)(s + n * ld + k);
    }
}

// A shared-memory destination of async copies taken once and stepped by byte offsets: the
// 32-bit address on NVIDIA (a loop of copies does not convert a pointer each time), the pointer
// elsewhere.
#if defined(CANDLE_ROCM_NVIDIA)
typedef u32 SharedAt;
DEVICE SharedAt shared_at(void* p) { return shared_address(p); }
DEVICE void async_copy16_at(SharedAt dst, u32 offset, const void* src, u32 bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + offset), "l"(src), "r"(bytes) : "memory");
}
#endif

// Copies of 16 bytes from global to shared memory that may complete later (cp.async on
// NVIDIA; a plain copy elsewhere): `bytes` 16 copies, 0 writes zeros. async_commit() closes a
// group of them; async_wait<N>() waits until at most N of this thread's groups are pending.
DEVICE void async_copy16(void* dst, const void* src, u32 bytes) {
#if defined(CANDLE_ROCM_NVIDIA)
    async_copy16_at(shared_at(dst), 0, src, bytes);
#else
    Raw16 v = {0, 0};
    if (bytes) v = *(const Raw16*)src;
    *(Raw16*)dst = v;
#endif
}
#if !defined(CANDLE_ROCM_NVIDIA)
typedef char* SharedAt;
DEVICE SharedAt shared_at(void* p) { return (char*)p; }
DEVICE void async_copy16_at(SharedAt dst, u32 offset, const void* src, u32 bytes) {
    async_copy16(dst + offset, src, bytes);
}
#endif
DEVICE void async_commit() {
#if defined(CANDLE_ROCM_NVIDIA)
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N> DEVICE void async_wait() {
#if defined(CANDLE_ROCM_NVIDIA)
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// ---------------------------------------------------------------------------------------------
// Atomics on 16- and 8-bit types: compare-and-swap on the enclosing aligned 32-bit word.
// `op(old) -> new` is applied to the narrow value held at `addr`.
template <typename Op>
DEVICE void atomic_update_u16(u16* addr, Op op) {
    u32* word = (u32*)((usize)addr & ~(usize)3);
    u32 shift = ((usize)addr & 2) ? 16u : 0u;
    u32 old = *(volatile u32*)word;
    u32 assumed;
    do {
        assumed = old;
        u16 cur = (u16)((assumed >> shift) & 0xffffu);
        u32 next = (assumed & ~(0xffffu << shift)) | ((u32)op(cur) << shift);
        old = atomicCAS(word, assumed, next);
    } while (old != assumed);
}
template <typename Op>
DEVICE void atomic_update_u8(u8* addr, Op op) {
    u32* word = (u32*)((usize)addr & ~(usize)3);
    u32 shift = ((u32)((usize)addr & 3)) * 8u;
    u32 old = *(volatile u32*)word;
    u32 assumed;
    do {
        assumed = old;
        u8 cur = (u8)((assumed >> shift) & 0xffu);
        u32 next = (assumed & ~(0xffu << shift)) | ((u32)op(cur) << shift);
        old = atomicCAS(word, assumed, next);
    } while (old != assumed);
}

struct AddF16 { float v; DEVICE u16 operator()(u16 c) const { f16_t h; h.bits = c; return f32_to_f16(f16_to_f32(h) + v).bits; } };
struct AddBF16 { float v; DEVICE u16 operator()(u16 c) const { bf16_t h; h.bits = c; return f32_to_bf16(bf16_to_f32(h) + v).bits; } };
struct AddI16 { i16 v; DEVICE u16 operator()(u16 c) const { return (u16)(c + (u16)v); } };
struct AddU8 { u8 v; DEVICE u8 operator()(u8 c) const { return (u8)(c + v); } };
struct AddF8E4M3 { float v; DEVICE u8 operator()(u8 c) const { f8e4m3_t h; h.bits = c; return f32_to_f8e4m3(f8e4m3_to_f32(h) + v).bits; } };

// atomic_add(addr, v) for every dtype: native where the hardware has it.
DEVICE void atomic_add(float* a, float v) { atomicAdd(a, v); }
DEVICE void atomic_add(double* a, double v) { atomicAdd(a, v); }
DEVICE void atomic_add(u32* a, u32 v) { atomicAdd(a, v); }
DEVICE void atomic_add(i32* a, i32 v) { atomicAdd(a, v); }
DEVICE void atomic_add(i64* a, i64 v) { atomicAdd((u64*)a, (u64)v); }  // two's complement wraps alike
DEVICE void atomic_add(f16_t* a, f16_t v) { atomic_update_u16(&a->bits, AddF16{f16_to_f32(v)}); }
DEVICE void atomic_add(bf16_t* a, bf16_t v) { atomic_update_u16(&a->bits, AddBF16{bf16_to_f32(v)}); }
DEVICE void atomic_add(i16* a, i16 v) { atomic_update_u16((u16*)a, AddI16{v}); }
DEVICE void atomic_add(u8* a, u8 v) { atomic_update_u8(a, AddU8{v}); }
DEVICE void atomic_add(f8e4m3_t* a, f8e4m3_t v) { atomic_update_u8(&a->bits, AddF8E4M3{f8e4m3_to_f32(v)}); }

// ---------------------------------------------------------------------------------------------
// Dtype list for instantiation: M(name, type), names as Candle's DType::as_str.
// A module may be compiled for one dtype only (the runtime defines CANDLE_ROCM_DTYPE_FILTER and
// CANDLE_ROCM_ONLY_<dtype>), so a program pays the compile time of the dtypes it uses.
#if defined(CANDLE_ROCM_DTYPE_FILTER)
#define CANDLE_ROCM_KEEP(NAME) CANDLE_ROCM_KEEP_##NAME
#else
#define CANDLE_ROCM_KEEP(NAME) CANDLE_ROCM_KEEP_ALL
#endif
#define CANDLE_ROCM_KEEP_ALL(x) x
#if defined(CANDLE_ROCM_ONLY_u8)
#define CANDLE_ROCM_KEEP_u8(x) x
#else
#define CANDLE_ROCM_KEEP_u8(x)
#endif
#if defined(CANDLE_ROCM_ONLY_u32)
#define CANDLE_ROCM_KEEP_u32(x) x
#else
#define CANDLE_ROCM_KEEP_u32(x)
#endif
#if defined(CANDLE_ROCM_ONLY_i16)
#define CANDLE_ROCM_KEEP_i16(x) x
#else
#define CANDLE_ROCM_KEEP_i16(x)
#endif
#if defined(CANDLE_ROCM_ONLY_i32)
#define CANDLE_ROCM_KEEP_i32(x) x
#else
#define CANDLE_ROCM_KEEP_i32(x)
#endif
#if defined(CANDLE_ROCM_ONLY_i64)
#define CANDLE_ROCM_KEEP_i64(x) x
#else
#define CANDLE_ROCM_KEEP_i64(x)
#endif
#if defined(CANDLE_ROCM_ONLY_bf16)
#define CANDLE_ROCM_KEEP_bf16(x) x
#else
#define CANDLE_ROCM_KEEP_bf16(x)
#endif
#if defined(CANDLE_ROCM_ONLY_f16)
#define CANDLE_ROCM_KEEP_f16(x) x
#else
#define CANDLE_ROCM_KEEP_f16(x)
#endif
#if defined(CANDLE_ROCM_ONLY_f32)
#define CANDLE_ROCM_KEEP_f32(x) x
#else
#define CANDLE_ROCM_KEEP_f32(x)
#endif
#if defined(CANDLE_ROCM_ONLY_f64)
#define CANDLE_ROCM_KEEP_f64(x) x
#else
#define CANDLE_ROCM_KEEP_f64(x)
#endif
#if defined(CANDLE_ROCM_ONLY_f8e4m3)
#define CANDLE_ROCM_KEEP_f8e4m3(x) x
#else
#define CANDLE_ROCM_KEEP_f8e4m3(x)
#endif
// Byte widths, the filter keys of kernels that only move bytes (gathers, scatters, nearest
// upsampling): one instantiation serves every dtype of that size.
#if defined(CANDLE_ROCM_ONLY_w1)
#define CANDLE_ROCM_KEEP_w1(x) x
#else
#define CANDLE_ROCM_KEEP_w1(x)
#endif
#if defined(CANDLE_ROCM_ONLY_w2)
#define CANDLE_ROCM_KEEP_w2(x) x
#else
#define CANDLE_ROCM_KEEP_w2(x)
#endif
#if defined(CANDLE_ROCM_ONLY_w4)
#define CANDLE_ROCM_KEEP_w4(x) x
#else
#define CANDLE_ROCM_KEEP_w4(x)
#endif
#if defined(CANDLE_ROCM_ONLY_w8)
#define CANDLE_ROCM_KEEP_w8(x) x
#else
#define CANDLE_ROCM_KEEP_w8(x)
#endif
#if defined(CANDLE_ROCM_ONLY_w16)
#define CANDLE_ROCM_KEEP_w16(x) x
#else
#define CANDLE_ROCM_KEEP_w16(x)
#endif
#if defined(CANDLE_ROCM_ONLY_i8)
#define CANDLE_ROCM_KEEP_i8(x) x
#else
#define CANDLE_ROCM_KEEP_i8(x)
#endif
#define CANDLE_ROCM_FOR_EACH_INT(M)                                                  \
    CANDLE_ROCM_KEEP(u8)(M(u8, u8)) CANDLE_ROCM_KEEP(u32)(M(u32, u32))               \
    CANDLE_ROCM_KEEP(i16)(M(i16, i16)) CANDLE_ROCM_KEEP(i32)(M(i32, i32))            \
    CANDLE_ROCM_KEEP(i64)(M(i64, i64))
#define CANDLE_ROCM_FOR_EACH_FLOAT(M)                                                \
    CANDLE_ROCM_KEEP(bf16)(M(bf16, bf16_t)) CANDLE_ROCM_KEEP(f16)(M(f16, f16_t))     \
    CANDLE_ROCM_KEEP(f32)(M(f32, float)) CANDLE_ROCM_KEEP(f64)(M(f64, double))       \
    CANDLE_ROCM_KEEP(f8e4m3)(M(f8e4m3, f8e4m3_t))
#define CANDLE_ROCM_FOR_EACH_DTYPE(M) CANDLE_ROCM_FOR_EACH_INT(M) CANDLE_ROCM_FOR_EACH_FLOAT(M)

// ---------------------------------------------------------------------------------------------
// Math on the arithmetic types (f32 and f64), one overload set for templates. Accurate library
// functions, never the fast approximations: results are compared with the CPU backend.
#define CANDLE_ROCM_MATH(NAME, F32, F64) \
    DEVICE float NAME(float x) { return F32(x); } \
    DEVICE double NAME(double x) { return F64(x); }
CANDLE_ROCM_MATH(m_exp, expf, exp)
CANDLE_ROCM_MATH(m_exp2, exp2f, exp2)
// 2^x for f32 where a few ulps do not matter (the softmax weights of flash attention): the
// hardware's approximation (NVIDIA's ex2.approx, flushing results below 2^-126 to 0; AMD's
// v_exp_f32).
DEVICE float m_exp2_fast(float x) {
#if defined(CANDLE_ROCM_NVIDIA)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#elif defined(CANDLE_ROCM_AMD)
    return __builtin_amdgcn_exp2f(x);
#else
    return exp2f(x);
#endif
}
CANDLE_ROCM_MATH(m_log, logf, log)
CANDLE_ROCM_MATH(m_sin, sinf, sin)
CANDLE_ROCM_MATH(m_cos, cosf, cos)
CANDLE_ROCM_MATH(m_tanh, tanhf, tanh)
CANDLE_ROCM_MATH(m_erf, erff, erf)
CANDLE_ROCM_MATH(m_ceil, ceilf, ceil)
CANDLE_ROCM_MATH(m_floor, floorf, floor)
// Halves away from zero, as Rust's round. On AMD, for f32 it is built from trunc and the sign
// bit as an integer: LLVM narrows roundf of a widened f16 to its own f16 expansion of round,
// whose copysign ROCm 6.4 compiles for gfx11 (true16) with the sign of the register's other
// half (v_bfi_b32 on the whole register), so half of a vector's elements took their
// neighbour's sign (the ISA emulator caught it).
#if defined(CANDLE_ROCM_AMD)
DEVICE float m_round(float x) {
    const float a = fabsf(x);
    float r = truncf(a);
    if (a - r >= 0.5f) r += 1.0f;
    return f32_from_bits(f32_bits(r) | (f32_bits(x) & 0x80000000u));
}
DEVICE double m_round(double x) { return round(x); }
#else
CANDLE_ROCM_MATH(m_round, roundf, round)
#endif
CANDLE_ROCM_MATH(m_normcdf, normcdff, normcdf)
CANDLE_ROCM_MATH(m_abs, fabsf, fabs)
CANDLE_ROCM_MATH(m_sqrt, sqrtf, sqrt)
DEVICE float m_pow(float x, float e) { return powf(x, e); }
DEVICE double m_pow(double x, double e) { return pow(x, e); }
DEVICE float m_max(float a, float b) { return fmaxf(a, b); }  // NaN-ignoring, as Rust's max
DEVICE float m_min(float a, float b) { return fminf(a, b); }
DEVICE double m_max(double a, double b) { return fmax(a, b); }
// Products rounded on their own (never fused into a following add), where a result must match
// a CPU computation that rounds each step. HIP's __fmul_rn is a plain `*`, which hiprtc's
// default contraction (-ffp-contract=fast-honor-pragmas) fuses with the next add, so on AMD
// the operations carry the pragma instead (the ISA emulator caught affine's f16 product fused
// into v_fma_f16 there).
//
// The product also passes through an empty asm statement: ROCm 6.4's LLVM otherwise selects a
// product rounded to f16 as v_fma_mix{lo,hi}_f16 with a +0 addend, which turns a -0 product
// into +0 (the ISA emulator caught q4_0's zero values of a negative scale dequantized to f16
// as +0 where the CPU's are -0).
#if defined(CANDLE_ROCM_AMD)
DEVICE float m_mul_rn(float a, float b) {
#pragma clang fp contract(off)
    float p = a * b;
    asm volatile("" : "+v"(p));
    return p;
}
DEVICE double m_mul_rn(double a, double b) {
#pragma clang fp contract(off)
    double p = a * b;
    asm volatile("" : "+v"(p));
    return p;
}
DEVICE float m_add_rn(float a, float b) {
#pragma clang fp contract(off)
    return a + b;
}
DEVICE float m_sub_rn(float a, float b) {
#pragma clang fp contract(off)
    return a - b;
}
DEVICE double m_add_rn(double a, double b) {
#pragma clang fp contract(off)
    return a + b;
}
DEVICE double m_sub_rn(double a, double b) {
#pragma clang fp contract(off)
    return a - b;
}
#else
DEVICE float m_mul_rn(float a, float b) { return __fmul_rn(a, b); }
DEVICE double m_mul_rn(double a, double b) { return __dmul_rn(a, b); }
DEVICE float m_add_rn(float a, float b) { return __fadd_rn(a, b); }
DEVICE float m_sub_rn(float a, float b) { return __fsub_rn(a, b); }
DEVICE double m_add_rn(double a, double b) { return __dadd_rn(a, b); }
DEVICE double m_sub_rn(double a, double b) { return __dsub_rn(a, b); }
#endif
// -inf of the argument's type (no INFINITY macro without the C headers).
DEVICE float m_neg_inf(float) { return __int_as_float((int)0xff800000u); }
DEVICE double m_neg_inf(double) { return __longlong_as_double((long long)0xfff0000000000000ull); }
DEVICE bool m_signbit(float x) { return (f32_bits(x) >> 31) != 0; }
DEVICE bool m_signbit(double x) { return ((u64)__double_as_longlong(x) >> 63) != 0; }

// compat.h: the one place where the AMD (hiprtc) and NVIDIA (NVRTC) builds of a kernel differ.
// Prepended to every module by the runtime; the host defines exactly one of CANDLE_ROCM_AMD or
// CANDLE_ROCM_NVIDIA. The warp size is never assumed: kernels use warpSize.
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
DEVICE f16_t f64_to_f16(double d) {
    union { u16 u; _Float16 h; } c;
    c.h = (_Float16)d;  // one rounding, as Rust's half::f16::from_f64
    f16_t r; r.bits = c.u; return r;
}
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
DEVICE f16_t f64_to_f16(double d) {
    f16_t r;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(r.bits) : "d"(d));
    return r;
}
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

// ---------------------------------------------------------------------------------------------
// Conversions used by templates: cvt<To>(from). Arithmetic on 16/8-bit floats goes through f32.
template <typename To, typename From> struct Cvt { static DEVICE To run(From x) { return (To)x; } };
template <typename From> struct Cvt<f16_t, From> { static DEVICE f16_t run(From x) { return f32_to_f16((float)x); } };
template <typename From> struct Cvt<bf16_t, From> { static DEVICE bf16_t run(From x) { return f32_to_bf16((float)x); } };
template <typename From> struct Cvt<f8e4m3_t, From> { static DEVICE f8e4m3_t run(From x) { return f32_to_f8e4m3((float)x); } };
template <typename To> struct Cvt<To, f16_t> { static DEVICE To run(f16_t x) { return (To)f16_to_f32(x); } };
template <typename To> struct Cvt<To, bf16_t> { static DEVICE To run(bf16_t x) { return (To)bf16_to_f32(x); } };
template <typename To> struct Cvt<To, f8e4m3_t> { static DEVICE To run(f8e4m3_t x) { return (To)f8e4m3_to_f32(x); } };
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
template <> struct Cvt<f16_t, double> { static DEVICE f16_t run(double x) { return f64_to_f16(x); } };
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
#else
#define CANDLE_ROCM_FULL_MASK 0xffffffffu
template <typename T> DEVICE T warp_shfl_xor(T v, int lane_mask) { return __shfl_xor_sync(CANDLE_ROCM_FULL_MASK, v, lane_mask); }
template <typename T> DEVICE T warp_shfl_down(T v, unsigned int delta) { return __shfl_down_sync(CANDLE_ROCM_FULL_MASK, v, delta); }
template <typename T> DEVICE T warp_shfl(T v, int src_lane) { return __shfl_sync(CANDLE_ROCM_FULL_MASK, v, src_lane); }
DEVICE lane_mask_t warp_ballot(int pred) { return (lane_mask_t)__ballot_sync(CANDLE_ROCM_FULL_MASK, pred); }
#endif

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
#define CANDLE_ROCM_FOR_EACH_DTYPE(M) \
    M(u8, u8) M(u32, u32) M(i16, i16) M(i32, i32) M(i64, i64) \
    M(bf16, bf16_t) M(f16, f16_t) M(f32, float) M(f64, double) M(f8e4m3, f8e4m3_t)

// cast.hip: cast_<from>_<to> for every pair of the 10 dtypes, with Candle's CPU semantics
// (cvt in compat.h): float -> int truncates and saturates (NaN -> 0), int -> int wraps,
// anything -> bf16/f16/f8e4m3 rounds to nearest even (f8e4m3 saturates at +-448).

template <typename From, typename To> struct CastFn {
    DEVICE To operator()(From x) const { return cvt<To>(x); }
};

#define CAST(SN, ST, DN, DT)                                                                    \
    KERNEL void cast_##SN##_##DN(const ST* in, DT* out, u64 n, KernelLayout l) {                \
        map1(in, out, n, l, CastFn<ST, DT>());                                                  \
    }
#define CAST_FROM(SN, ST)                                                                       \
    CAST(SN, ST, u8, u8) CAST(SN, ST, u32, u32) CAST(SN, ST, i16, i16) CAST(SN, ST, i32, i32)  \
    CAST(SN, ST, i64, i64) CAST(SN, ST, bf16, bf16_t) CAST(SN, ST, f16, f16_t)                 \
    CAST(SN, ST, f32, float) CAST(SN, ST, f64, double) CAST(SN, ST, f8e4m3, f8e4m3_t)
CANDLE_ROCM_FOR_EACH_DTYPE(CAST_FROM)

// cast.hip: cast_<from>_<to> for every pair of the 10 dtypes, with Candle's CPU semantics
// (cvt in compat.h): float -> int truncates and saturates (NaN -> 0), int -> int wraps,
// anything -> bf16/f16/f8e4m3 rounds to nearest even (f8e4m3 saturates at +-448).

template <typename From, typename To> struct CastFn {
    DEVICE To operator()(From x) const { return cvt<To>(x); }
};

#define CAST(SN, ST, DN, DT)                                                                    \
    KERNEL void cast_##SN##_##DN(CAST_PARAMS(ST, DT)) {                                         \
        map1(input, out, n, l, CastFn<ST, DT>());                                                  \
    }
// Instantiated per destination dtype: `cast_<from>_<to>` is in the module variant of `to`
// (the table's key is the entry's last part).
#define CAST_TO(DN, DT)                                                                         \
    CAST(u8, u8, DN, DT) CAST(u32, u32, DN, DT) CAST(i16, i16, DN, DT) CAST(i32, i32, DN, DT)  \
    CAST(i64, i64, DN, DT) CAST(bf16, bf16_t, DN, DT) CAST(f16, f16_t, DN, DT)                 \
    CAST(f32, float, DN, DT) CAST(f64, double, DN, DT) CAST(f8e4m3, f8e4m3_t, DN, DT)
CANDLE_ROCM_FOR_EACH_DTYPE(CAST_TO)

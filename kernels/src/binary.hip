// binary.hip: add, sub, mul, div, maximum, minimum and the comparisons (to u8), for every dtype,
// with Candle's CPU semantics: floats compute in Acc<T> and round once (as half/float8 do for
// one op); integers wrap; an integer division by zero gives 0 (the CPU backend panics there).
// maximum/minimum return one of the operands unchanged: max(a, b) = a < b ? b : a. silu_mul
// (floats): silu(a) * b.

template <typename T> struct Arith {
    typedef typename Acc<T>::type A;
    DEVICE static T add(T a, T b) { return cvt<T>(cvt<A>(a) + cvt<A>(b)); }
    DEVICE static T sub(T a, T b) { return cvt<T>(cvt<A>(a) - cvt<A>(b)); }
    DEVICE static T mul(T a, T b) { return cvt<T>(cvt<A>(a) * cvt<A>(b)); }
    DEVICE static T div(T a, T b) { return cvt<T>(cvt<A>(a) / cvt<A>(b)); }
};
template <typename T> struct IntArith {
    typedef typename Wide<T>::type W;
    DEVICE static T add(T a, T b) { return (T)((W)a + (W)b); }
    DEVICE static T sub(T a, T b) { return (T)((W)a - (W)b); }
    DEVICE static T mul(T a, T b) { return (T)((W)a * (W)b); }
    DEVICE static T div(T a, T b) {
        if (b == (T)0) return (T)0;
        // MIN / -1 overflows: wrap to MIN like the other ops instead of trapping.
        if (is_signed_int<T>() && b == (T)(-1)) return (T)((W)0 - (W)a);
        return a / b;
    }
};
#define INT_ARITH(T) template <> struct Arith<T> : IntArith<T> {};
INT_ARITH(u8) INT_ARITH(u32) INT_ARITH(i16) INT_ARITH(i32) INT_ARITH(i64)

template <typename T> DEVICE typename Acc<T>::type key(T x) { return cvt<typename Acc<T>::type>(x); }

#define BIN_FN(OP, EXPR) \
    template <typename T> struct Bin_##OP { DEVICE T operator()(T a, T b) const { return EXPR; } };
BIN_FN(add, Arith<T>::add(a, b))
BIN_FN(sub, Arith<T>::sub(a, b))
BIN_FN(mul, Arith<T>::mul(a, b))
BIN_FN(div, Arith<T>::div(a, b))
BIN_FN(maximum, key(a) < key(b) ? b : a)
BIN_FN(minimum, key(a) > key(b) ? b : a)

#define CMP_FN(OP, EXPR) \
    template <typename T> struct Cmp_##OP { DEVICE u8 operator()(T a, T b) const { return (u8)(EXPR); } };
CMP_FN(eq, key(a) == key(b))
CMP_FN(ne, key(a) != key(b))
CMP_FN(lt, key(a) < key(b))
CMP_FN(le, key(a) <= key(b))
CMP_FN(gt, key(a) > key(b))
CMP_FN(ge, key(a) >= key(b))

#define BINARY(OP, NAME, T)                                                                     \
    KERNEL void OP##_##NAME(BINARY_PARAMS(T)) {                                                 \
        map2(a, b, out, n, la, lb, Bin_##OP<T>());                                              \
    }
#define CMP(OP, NAME, T)                                                                        \
    KERNEL void OP##_##NAME(CMP_PARAMS(T)) {                                                    \
        map2(a, b, out, n, la, lb, Cmp_##OP<T>());                                              \
    }
#define BINARY_ALL(NAME, T)                                                                     \
    BINARY(add, NAME, T) BINARY(sub, NAME, T) BINARY(mul, NAME, T) BINARY(div, NAME, T)        \
    BINARY(maximum, NAME, T) BINARY(minimum, NAME, T)                                          \
    CMP(eq, NAME, T) CMP(ne, NAME, T) CMP(lt, NAME, T) CMP(le, NAME, T) CMP(gt, NAME, T)       \
    CMP(ge, NAME, T)
CANDLE_ROCM_FOR_EACH_DTYPE(BINARY_ALL)

// silu(a) * b for floats, rounded to T after the silu and after the product as silu then mul
// give it: candle-nn's gated MLP, silu(gate) * up, in one launch.
template <typename T> struct Bin_silu_mul {
    DEVICE T operator()(T a, T b) const {
        typedef typename Acc<T>::type A;
        const A x = cvt<A>(a);
        return Arith<T>::mul(cvt<T>(x / ((A)1 + m_exp(-x))), b);
    }
};
#define SILU_MUL(NAME, T) BINARY(silu_mul, NAME, T)
CANDLE_ROCM_FOR_EACH_FLOAT(SILU_MUL)

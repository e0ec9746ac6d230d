// unary.hip: unary math, elu, powf and affine, with Candle's CPU semantics.
// Floats compute in Acc<T> (f32 for bf16/f16/f8e4m3) and round once at the end. Integers
// implement what the CPU backend computes for them: abs/relu/sign for real, ceil/floor/round
// as the identity, and 0 for gelu, gelu_erf, erf and silu; the other math ops reject integers.

// Math ops on the arithmetic type A (float or double).
#define FLOAT_OP(NAME, EXPR) \
    struct Op_##NAME { template <typename A> DEVICE A operator()(A x, A p) const { return EXPR; } };
FLOAT_OP(neg, -x)
FLOAT_OP(recip, (A)1 / x)
FLOAT_OP(exp, m_exp(x))
FLOAT_OP(log, m_log(x))
FLOAT_OP(sin, m_sin(x))
FLOAT_OP(cos, m_cos(x))
FLOAT_OP(tanh, m_tanh(x))
FLOAT_OP(erf, m_erf(x))
FLOAT_OP(ceil, m_ceil(x))
FLOAT_OP(floor, m_floor(x))
FLOAT_OP(round, m_round(x))
FLOAT_OP(normcdf, m_normcdf(x))
FLOAT_OP(abs, m_abs(x))
FLOAT_OP(sqr, x * x)
FLOAT_OP(sqrt, m_sqrt(x))
// tanh form; sqrt(2/pi) as a literal (rounded to A like the CPU backend's constant)
FLOAT_OP(gelu, (A)0.5 * x * ((A)1 + m_tanh((A)0.7978845608028654 * x * ((A)1 + (A)0.044715 * x * x))))
FLOAT_OP(gelu_erf, (m_erf(x * (A)0.7071067811865476) + (A)1) * (A)0.5 * x)
FLOAT_OP(relu, m_max(x, (A)0))
FLOAT_OP(silu, x / ((A)1 + m_exp(-x)))
FLOAT_OP(sign, (A)(x > (A)0) - (A)(x < (A)0))
FLOAT_OP(sigmoid, (A)1 / ((A)1 + m_exp(-x)))
// p = alpha; the CPU backend keeps v when its sign bit is clear
FLOAT_OP(elu, m_signbit(x) ? (m_exp(x) - (A)1) * p : x)
// p = exponent
FLOAT_OP(powf, m_pow(x, p))

// Applies Op in the arithmetic type of T. The parameter was rounded to T first, as the CPU
// backend does with T::from_f64.
template <typename T, typename Op> struct FloatFn {
    typedef typename Acc<T>::type A;
    A p;
    DEVICE T operator()(T x) const { return cvt<T>(Op()(cvt<A>(x), p)); }
};

#define UNARY_FLOAT(OP, NAME, T)                                                                \
    KERNEL void OP##_##NAME(UNARY_PARAMS(T)) {                                                  \
        typedef typename Acc<T>::type A;                                                        \
        FloatFn<T, Op_##OP> f;                                                                  \
        f.p = cvt<A>(cvt<T>(p));                                                                \
        map1(input, out, n, l, f);                                                              \
    }
#define UNARY_FLOAT_ALL(NAME, T)                                                                \
    UNARY_FLOAT(neg, NAME, T) UNARY_FLOAT(recip, NAME, T) UNARY_FLOAT(exp, NAME, T)            \
    UNARY_FLOAT(log, NAME, T) UNARY_FLOAT(sin, NAME, T) UNARY_FLOAT(cos, NAME, T)              \
    UNARY_FLOAT(tanh, NAME, T) UNARY_FLOAT(erf, NAME, T) UNARY_FLOAT(ceil, NAME, T)            \
    UNARY_FLOAT(floor, NAME, T) UNARY_FLOAT(round, NAME, T) UNARY_FLOAT(normcdf, NAME, T)      \
    UNARY_FLOAT(abs, NAME, T) UNARY_FLOAT(sqr, NAME, T) UNARY_FLOAT(sqrt, NAME, T)             \
    UNARY_FLOAT(gelu, NAME, T) UNARY_FLOAT(gelu_erf, NAME, T) UNARY_FLOAT(relu, NAME, T)       \
    UNARY_FLOAT(silu, NAME, T) UNARY_FLOAT(sign, NAME, T) UNARY_FLOAT(sigmoid, NAME, T)        \
    UNARY_FLOAT(elu, NAME, T) UNARY_FLOAT(powf, NAME, T)
CANDLE_ROCM_FOR_EACH_FLOAT(UNARY_FLOAT_ALL)

// Integer ops (wrapping, as Rust release builds).
struct IntAbs { template <typename T> DEVICE T operator()(T x) const {
    return (is_signed_int<T>() && x < (T)0) ? (T)((typename Wide<T>::type)0 - (typename Wide<T>::type)x) : x; } };
struct IntIdentity { template <typename T> DEVICE T operator()(T x) const { return x; } };
struct IntRelu { template <typename T> DEVICE T operator()(T x) const { return x < (T)0 ? (T)0 : x; } };
struct IntSign { template <typename T> DEVICE T operator()(T x) const { return (T)((x > (T)0) - (x < (T)0)); } };
struct IntZero { template <typename T> DEVICE T operator()(T) const { return (T)0; } };

#define UNARY_INT(OP, FN, NAME, T)                                                              \
    KERNEL void OP##_##NAME(UNARY_PARAMS(T)) {                                                  \
        map1(input, out, n, l, FN());                                                              \
    }
#define UNARY_INT_ALL(NAME, T)                                                                  \
    UNARY_INT(abs, IntAbs, NAME, T) UNARY_INT(ceil, IntIdentity, NAME, T)                      \
    UNARY_INT(floor, IntIdentity, NAME, T) UNARY_INT(round, IntIdentity, NAME, T)              \
    UNARY_INT(relu, IntRelu, NAME, T) UNARY_INT(sign, IntSign, NAME, T)                        \
    UNARY_INT(gelu, IntZero, NAME, T) UNARY_INT(gelu_erf, IntZero, NAME, T)                    \
    UNARY_INT(erf, IntZero, NAME, T) UNARY_INT(silu, IntZero, NAME, T)
CANDLE_ROCM_FOR_EACH_INT(UNARY_INT_ALL)

// affine: x * mul + add, with mul and add converted to T first (T::from_f64 on the CPU), and
// the product rounded to T before the add, as the CPU backend's two operations in T do.
template <typename T> struct AffineFloat {
    typedef typename Acc<T>::type A;
    A mul, add;
    DEVICE T operator()(T x) const {
        const T product = cvt<T>(m_mul_rn(cvt<A>(x), mul));
        return cvt<T>(cvt<A>(product) + add);
    }
};
template <typename T> struct AffineInt {
    typedef typename Wide<T>::type W;
    W mul, add;
    DEVICE T operator()(T x) const { return (T)((W)x * mul + add); }
};
#define AFFINE_FLOAT(NAME, T)                                                                   \
    KERNEL void affine_##NAME(AFFINE_PARAMS(T)) {                                               \
        typedef typename Acc<T>::type A;                                                        \
        AffineFloat<T> f;                                                                       \
        f.mul = cvt<A>(cvt<T>(mul));                                                            \
        f.add = cvt<A>(cvt<T>(add));                                                            \
        map1(input, out, n, l, f);                                                                 \
    }
#define AFFINE_INT(NAME, T)                                                                     \
    KERNEL void affine_##NAME(AFFINE_PARAMS(T)) {                                               \
        typedef typename Wide<T>::type W;                                                       \
        AffineInt<T> f;                                                                         \
        f.mul = (W)cvt<T>(mul);                                                                 \
        f.add = (W)cvt<T>(add);                                                                 \
        map1(input, out, n, l, f);                                                                 \
    }
CANDLE_ROCM_FOR_EACH_FLOAT(AFFINE_FLOAT)
CANDLE_ROCM_FOR_EACH_INT(AFFINE_INT)

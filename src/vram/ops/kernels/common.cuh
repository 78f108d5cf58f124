// What every op kernel shares: element types, conversions between them, and math on the
// "opmath" type (float for __half and __nv_bfloat16, as PyTorch; the type itself otherwise).
//
// Python puts this text in front of a kernel family's source (ops/_sources.py), so that one
// NVRTC program holds the family and everything it needs.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace vram {

// 16 bytes moved as bits (an element of complex128's size in the copies and index kernels).
struct alignas(16) Bits16 {
    unsigned long long lo, hi;
};

struct complex64 {
    float re, im;
};
struct complex128 {
    double re, im;
};

// ---- traits ----------------------------------------------------------------------------
template <typename A, typename B> struct IsSame { static constexpr bool value = false; };
template <typename A> struct IsSame<A, A> { static constexpr bool value = true; };

template <typename T> struct IsComplex { static constexpr bool value = false; };
template <> struct IsComplex<complex64> { static constexpr bool value = true; };
template <> struct IsComplex<complex128> { static constexpr bool value = true; };

template <typename T> struct IsFloat { static constexpr bool value = false; };
template <> struct IsFloat<float> { static constexpr bool value = true; };
template <> struct IsFloat<double> { static constexpr bool value = true; };

template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<__half> { using type = float; };
template <> struct OpMath<__nv_bfloat16> { using type = float; };

// ---- conversions -------------------------------------------------------------------------
__device__ inline float widen(__half x) { return __half2float(x); }
__device__ inline float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ inline T widen(T x) { return x; }

// A real (non-complex) value to the element type To.
template <typename To, typename From> __device__ inline To narrow(From x) {
    if constexpr (IsSame<To, __half>::value) {
        if constexpr (IsSame<From, double>::value) return __double2half(x);
        else return __float2half(static_cast<float>(x));
    } else if constexpr (IsSame<To, __nv_bfloat16>::value) {
        if constexpr (IsSame<From, double>::value) return __double2bfloat16(x);
        else return __float2bfloat16(static_cast<float>(x));
    } else if constexpr (IsComplex<To>::value) {
        using R = decltype(To::re);
        return To{static_cast<R>(x), R(0)};
    } else if constexpr (IsSame<To, bool>::value) {
        return x != From(0);
    } else {
        return static_cast<To>(x);
    }
}

// Any element or opmath value to the type To (complex to real keeps the real part).
template <typename To, typename From> __device__ inline To convert(From x) {
    if constexpr (IsSame<To, From>::value) {
        return x;
    } else {
        auto w = widen(x);
        using W = decltype(w);
        if constexpr (IsComplex<W>::value) {
            if constexpr (IsComplex<To>::value) {
                using R = decltype(To::re);
                return To{static_cast<R>(w.re), static_cast<R>(w.im)};
            } else if constexpr (IsSame<To, bool>::value) {
                return w.re != 0 || w.im != 0;  // as PyTorch: a complex is true when nonzero
            } else {
                return narrow<To>(w.re);
            }
        } else {
            return narrow<To>(w);
        }
    }
}

// ---- complex arithmetic ------------------------------------------------------------------
template <typename C> __device__ inline C cadd(C a, C b) { return C{a.re + b.re, a.im + b.im}; }
template <typename C> __device__ inline C csub(C a, C b) { return C{a.re - b.re, a.im - b.im}; }
template <typename C> __device__ inline C cmul(C a, C b) {
    return C{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <typename C> __device__ inline C cdiv(C a, C b) {  // Smith's algorithm
    using R = decltype(C::re);
    if (fabs(b.re) >= fabs(b.im)) {
        R r = b.im / b.re, d = b.re + b.im * r;
        return C{(a.re + a.im * r) / d, (a.im - a.re * r) / d};
    }
    R r = b.re / b.im, d = b.im + b.re * r;
    return C{(a.re * r + a.im) / d, (a.im * r - a.re) / d};
}
#define VRAM_COMPLEX_OPS(C)                                                                    \
    __device__ inline C operator+(C a, C b) { return cadd(a, b); }                             \
    __device__ inline C operator-(C a, C b) { return csub(a, b); }                             \
    __device__ inline C operator*(C a, C b) { return cmul(a, b); }                             \
    __device__ inline C operator/(C a, C b) { return cdiv(a, b); }                             \
    __device__ inline C operator-(C a) { return C{-a.re, -a.im}; }                             \
    __device__ inline bool operator==(C a, C b) { return a.re == b.re && a.im == b.im; }       \
    __device__ inline bool operator!=(C a, C b) { return !(a == b); }
VRAM_COMPLEX_OPS(complex64)
VRAM_COMPLEX_OPS(complex128)
#undef VRAM_COMPLEX_OPS

// ---- math on float and double, one name for both ------------------------------------------
#define VRAM_MATH1(name, f32, f64)                                                             \
    __device__ inline float name(float x) { return f32(x); }                                   \
    __device__ inline double name(double x) { return f64(x); }
VRAM_MATH1(m_exp, expf, exp)
VRAM_MATH1(m_exp2, exp2f, exp2)
VRAM_MATH1(m_expm1, expm1f, expm1)
VRAM_MATH1(m_log, logf, log)
VRAM_MATH1(m_log2, log2f, log2)
VRAM_MATH1(m_log10, log10f, log10)
VRAM_MATH1(m_log1p, log1pf, log1p)
VRAM_MATH1(m_sqrt, sqrtf, sqrt)
VRAM_MATH1(m_rsqrt, rsqrtf, rsqrt)
VRAM_MATH1(m_sin, sinf, sin)
VRAM_MATH1(m_cos, cosf, cos)
VRAM_MATH1(m_tan, tanf, tan)
VRAM_MATH1(m_tanh, tanhf, tanh)
VRAM_MATH1(m_erf, erff, erf)
VRAM_MATH1(m_floor, floorf, floor)
VRAM_MATH1(m_ceil, ceilf, ceil)
VRAM_MATH1(m_trunc, truncf, trunc)
VRAM_MATH1(m_rint, rintf, rint)
VRAM_MATH1(m_fabs, fabsf, fabs)
VRAM_MATH1(m_erfc, erfcf, erfc)
VRAM_MATH1(m_erfinv, erfinvf, erfinv)
VRAM_MATH1(m_lgamma, lgammaf, lgamma)
VRAM_MATH1(m_sinh, sinhf, sinh)
VRAM_MATH1(m_cosh, coshf, cosh)
VRAM_MATH1(m_asin, asinf, asin)
VRAM_MATH1(m_acos, acosf, acos)
VRAM_MATH1(m_atan, atanf, atan)
VRAM_MATH1(m_asinh, asinhf, asinh)
VRAM_MATH1(m_acosh, acoshf, acosh)
VRAM_MATH1(m_atanh, atanhf, atanh)
#undef VRAM_MATH1
__device__ inline float m_pow(float a, float b) { return powf(a, b); }
__device__ inline double m_pow(double a, double b) { return pow(a, b); }
__device__ inline float m_fmod(float a, float b) { return fmodf(a, b); }
__device__ inline double m_fmod(double a, double b) { return fmod(a, b); }
__device__ inline float m_atan2(float a, float b) { return atan2f(a, b); }
__device__ inline double m_atan2(double a, double b) { return atan2(a, b); }
__device__ inline float m_copysign(float a, float b) { return copysignf(a, b); }
__device__ inline double m_copysign(double a, double b) { return copysign(a, b); }
__device__ inline float m_hypot(float a, float b) { return hypotf(a, b); }
__device__ inline double m_hypot(double a, double b) { return hypot(a, b); }

// PyTorch's calc_digamma (ATen/native/cuda/Math.cuh): the reflection formula below zero,
// the recurrence up to 10, then the asymptotic series; +-inf at +-0, NaN at the poles.
template <typename T> __device__ inline T m_digamma(T x) {
    const double pi = 3.14159265358979323846;
    const T psi_10 = T(2.25175258906672110764);
    const T a[] = {T(8.33333333333333333333E-2), T(-2.10927960927960927961E-2),
                   T(7.57575757575757575758E-3), T(-4.16666666666666666667E-3),
                   T(3.96825396825396825397E-3), T(-8.33333333333333333333E-3),
                   T(8.33333333333333333333E-2)};
    if (x == T(0)) return m_copysign(T(1) / T(0), -x);
    T result = 0;
    if (x < T(0)) {
        if (x == m_trunc(x)) return T(0) / T(0);
        double whole;
        const double r = modf(static_cast<double>(x), &whole);
        result = static_cast<T>(-pi / tan(pi * r));
        x = T(1) - x;
    }
    while (x < T(10)) {
        result -= T(1) / x;
        x += T(1);
    }
    if (x == T(10)) return result + psi_10;
    T y = 0;
    if (x < T(1.0e17)) {
        const T z = T(1) / (x * x);
        T p = 0;
        for (int i = 0; i < 7; ++i) p = p * z + a[i];
        y = z * p;
    }
    return m_log(x) - (T(0.5) / x) - y + result;
}

template <typename T> __device__ inline bool is_nan(T x) {
    if constexpr (IsFloat<T>::value) return x != x;
    else return false;
}

// Largest and lowest finite values of an element type (nan_to_num's defaults).
template <typename T> struct Limits;
template <> struct Limits<float> {
    static __device__ float max() { return 3.4028234663852886e38f; }
};
template <> struct Limits<double> {
    static __device__ double max() { return 1.7976931348623157e308; }
};
template <> struct Limits<__half> {
    static __device__ float max() { return 65504.0f; }
};
template <> struct Limits<__nv_bfloat16> {
    static __device__ float max() { return 3.3895313892515355e38f; }
};

}  // namespace vram

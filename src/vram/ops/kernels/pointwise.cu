// The functors of the pointwise ops (run by loops.cuh). Each is a struct template over the
// compute type C with `using compute = C;`; its fields, when it has any, are all of type C
// and Python packs them in order (ops/_pointwise.py). PyTorch's formulas are kept where the
// result depends on them (floor division, remainder, lerp, nan_to_num, clamp's NaN rules).

namespace vram {

#define VRAM_FUNCTOR(Name, ...)                                                                \
    template <typename C> struct Name {                                                        \
        using compute = C;                                                                     \
        __VA_ARGS__                                                                            \
    };

// ---- wrappers: numbers in the place of tensor operands ----------------------------------------
// The numbers come first and the wrapped op's fields after them, so that an op without fields
// (an empty struct) adds nothing before what Python packs. ScalarB<Op>: op(x, s), as a + 2;
// ScalarA<Op>: op(s, x), as 2 - a; BindMiddle<Op>: op(x, s, y), as where(c, 1.0, b);
// BindLast<Op>: op(x, y, s), as lerp(a, b, 0.5); BindLastTwo<Op>: op(x, s, t), as clamp(a, 0, 1).
template <typename Op> struct ScalarB {
    using compute = typename Op::compute;
    compute s;
    Op op;
    __device__ auto operator()(compute x) const { return op(x, s); }
};
template <typename Op> struct ScalarA {
    using compute = typename Op::compute;
    compute s;
    Op op;
    __device__ auto operator()(compute x) const { return op(s, x); }
};
template <typename Op> struct BindMiddle {
    using compute = typename Op::compute;
    compute s;
    Op op;
    __device__ auto operator()(compute x, compute y) const { return op(x, s, y); }
};
template <typename Op> struct BindLast {
    using compute = typename Op::compute;
    compute s;
    Op op;
    __device__ auto operator()(compute x, compute y) const { return op(x, y, s); }
};
template <typename Op> struct BindLastTwo {
    using compute = typename Op::compute;
    compute s;
    compute t;
    Op op;
    __device__ auto operator()(compute x) const { return op(x, s, t); }
};

// ---- constants ------------------------------------------------------------------------------
VRAM_FUNCTOR(Fill, C value; __device__ C operator()() const { return value; })
VRAM_FUNCTOR(Copy, __device__ C operator()(C x) const { return x; })

// ---- unary ----------------------------------------------------------------------------------
VRAM_FUNCTOR(Neg, __device__ C operator()(C x) const { return -x; })
VRAM_FUNCTOR(Abs, __device__ C operator()(C x) const {
    if constexpr (IsFloat<C>::value) return m_fabs(x);
    else if constexpr (IsSame<C, bool>::value) return x;
    else return x < 0 ? C(-x) : x;
})
VRAM_FUNCTOR(Sign, __device__ C operator()(C x) const {
    if constexpr (IsSame<C, bool>::value) return x;
    else return C((C(0) < x) - (x < C(0)));
})
VRAM_FUNCTOR(Exp, __device__ C operator()(C x) const { return m_exp(x); })
VRAM_FUNCTOR(Exp2, __device__ C operator()(C x) const { return m_exp2(x); })
VRAM_FUNCTOR(Expm1, __device__ C operator()(C x) const { return m_expm1(x); })
VRAM_FUNCTOR(Log, __device__ C operator()(C x) const { return m_log(x); })
VRAM_FUNCTOR(Log2, __device__ C operator()(C x) const { return m_log2(x); })
VRAM_FUNCTOR(Log10, __device__ C operator()(C x) const { return m_log10(x); })
VRAM_FUNCTOR(Log1p, __device__ C operator()(C x) const { return m_log1p(x); })
VRAM_FUNCTOR(Sqrt, __device__ C operator()(C x) const { return m_sqrt(x); })
VRAM_FUNCTOR(Rsqrt, __device__ C operator()(C x) const { return m_rsqrt(x); })
VRAM_FUNCTOR(Reciprocal, __device__ C operator()(C x) const { return C(1) / x; })
VRAM_FUNCTOR(Sin, __device__ C operator()(C x) const { return m_sin(x); })
VRAM_FUNCTOR(Cos, __device__ C operator()(C x) const { return m_cos(x); })
VRAM_FUNCTOR(Tan, __device__ C operator()(C x) const { return m_tan(x); })
VRAM_FUNCTOR(Tanh, __device__ C operator()(C x) const { return m_tanh(x); })
VRAM_FUNCTOR(Sigmoid, __device__ C operator()(C x) const { return C(1) / (C(1) + m_exp(-x)); })
VRAM_FUNCTOR(Erf, __device__ C operator()(C x) const { return m_erf(x); })
VRAM_FUNCTOR(Floor, __device__ C operator()(C x) const {
    if constexpr (IsFloat<C>::value) return m_floor(x);
    else return x;
})
VRAM_FUNCTOR(Ceil, __device__ C operator()(C x) const {
    if constexpr (IsFloat<C>::value) return m_ceil(x);
    else return x;
})
VRAM_FUNCTOR(Round, __device__ C operator()(C x) const {  // half to even, as PyTorch
    if constexpr (IsFloat<C>::value) return m_rint(x);
    else return x;
})
VRAM_FUNCTOR(Trunc, __device__ C operator()(C x) const {
    if constexpr (IsFloat<C>::value) return m_trunc(x);
    else return x;
})
VRAM_FUNCTOR(LogicalNot, __device__ bool operator()(C x) const { return !convert<bool>(x); })
VRAM_FUNCTOR(BitwiseNot, __device__ C operator()(C x) const {
    if constexpr (IsSame<C, bool>::value) return !x;
    else return ~x;
})
VRAM_FUNCTOR(IsNan, __device__ bool operator()(C x) const { return is_nan(x); })
VRAM_FUNCTOR(IsInf, __device__ bool operator()(C x) const {
    if constexpr (IsFloat<C>::value) return isinf(x);
    else return false;
})
VRAM_FUNCTOR(IsFinite, __device__ bool operator()(C x) const {
    if constexpr (IsFloat<C>::value) return isfinite(x);
    else return true;
})
// posinf and neginf are the replacements as the output dtype holds them (Python fills in
// that dtype's largest and lowest finite values when they are None).
VRAM_FUNCTOR(NanToNum, C nan; C posinf; C neginf; __device__ C operator()(C x) const {
    if constexpr (IsFloat<C>::value) {  // integers and bools have no NaN or infinity
        if (x != x) return nan;
        if (isinf(x)) return x > C(0) ? posinf : neginf;
    }
    return x;
})
VRAM_FUNCTOR(Relu, __device__ C operator()(C x) const { return x > C(0) ? x : (x != x ? x : C(0)); })
VRAM_FUNCTOR(Silu, __device__ C operator()(C x) const { return x / (C(1) + m_exp(-x)); })
VRAM_FUNCTOR(Gelu, __device__ C operator()(C x) const {  // erf form
    return x * C(0.5) * (C(1) + m_erf(x * C(0.70710678118654752440)));
})
VRAM_FUNCTOR(GeluTanh, __device__ C operator()(C x) const {
    const C inner = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);
    return C(0.5) * x * (C(1) + m_tanh(inner));
})

// ---- unary: the math PyTorch has beyond the above ------------------------------------------
VRAM_FUNCTOR(Erfc, __device__ C operator()(C x) const { return m_erfc(x); })
VRAM_FUNCTOR(Erfinv, __device__ C operator()(C x) const { return m_erfinv(x); })
VRAM_FUNCTOR(Lgamma, __device__ C operator()(C x) const { return m_lgamma(x); })
VRAM_FUNCTOR(Digamma, __device__ C operator()(C x) const { return m_digamma(x); })
VRAM_FUNCTOR(Sinh, __device__ C operator()(C x) const { return m_sinh(x); })
VRAM_FUNCTOR(Cosh, __device__ C operator()(C x) const { return m_cosh(x); })
VRAM_FUNCTOR(Asin, __device__ C operator()(C x) const { return m_asin(x); })
VRAM_FUNCTOR(Acos, __device__ C operator()(C x) const { return m_acos(x); })
VRAM_FUNCTOR(Atan, __device__ C operator()(C x) const { return m_atan(x); })
VRAM_FUNCTOR(Asinh, __device__ C operator()(C x) const { return m_asinh(x); })
VRAM_FUNCTOR(Acosh, __device__ C operator()(C x) const { return m_acosh(x); })
VRAM_FUNCTOR(Atanh, __device__ C operator()(C x) const { return m_atanh(x); })
VRAM_FUNCTOR(Square, __device__ C operator()(C x) const { return x * x; })
VRAM_FUNCTOR(Frac, __device__ C operator()(C x) const { return x - m_trunc(x); })
// sign for real numbers (NaN gives 0, as PyTorch); z / |z| for complex ones (0 at 0)
VRAM_FUNCTOR(Sgn, __device__ C operator()(C x) const {
    if constexpr (IsComplex<C>::value) {
        using R = decltype(C::re);
        if (x.re == R(0) && x.im == R(0)) return C{R(0), R(0)};
        const R r = m_hypot(x.re, x.im);
        return C{x.re / r, x.im / r};
    } else if constexpr (IsSame<C, bool>::value) {
        return x;
    } else {
        return C((C(0) < x) - (x < C(0)));
    }
})
VRAM_FUNCTOR(Sinc, __device__ C operator()(C x) const {
    if (x == C(0)) return C(1);
    const C product = C(3.14159265358979323846) * x;
    return m_sin(product) / product;
})
VRAM_FUNCTOR(Deg2Rad, __device__ C operator()(C x) const { return x * C(0.017453292519943295769); })
VRAM_FUNCTOR(Rad2Deg, __device__ C operator()(C x) const { return x * C(57.295779513082320876798); })
// eps < 0 (None in Python): no clamping; else x clamped to [eps, 1 - eps] first
VRAM_FUNCTOR(Logit, C eps; __device__ C operator()(C x) const {
    if (eps >= C(0)) {
        const C hi = C(1) - eps;
        x = x < eps ? eps : (x > hi ? hi : x);
    }
    return m_log(x / (C(1) - x));
})

// ---- activations (nn.functional), PyTorch's CUDA formulas ------------------------------------
VRAM_FUNCTOR(Hardtanh, C lo; C hi; __device__ C operator()(C x) const {
    return x < lo ? lo : (x > hi ? hi : x);
})
VRAM_FUNCTOR(LeakyRelu, C slope; __device__ C operator()(C x) const {
    return x > C(0) ? x : x * slope;
})
// elu, selu and celu: alpha, scale and input_scale as PyTorch's elu kernel takes them
VRAM_FUNCTOR(Elu, C alpha; C scale; C input_scale; __device__ C operator()(C x) const {
    return x > C(0) ? x * scale : m_expm1(x * input_scale) * (alpha * scale);
})
VRAM_FUNCTOR(Softplus, C beta; C threshold; __device__ C operator()(C x) const {
    return x * beta > threshold ? x : m_log1p(m_exp(x * beta)) / beta;
})
VRAM_FUNCTOR(Threshold, C threshold; C value; __device__ C operator()(C x) const {
    return x <= threshold ? value : x;
})
VRAM_FUNCTOR(Hardswish, __device__ C operator()(C x) const {
    const C t = x + C(3);
    const C low = t < C(0) ? C(0) : t;
    return x * (C(6) < low ? C(6) : low) * C(1.0f / 6.0f);
})
VRAM_FUNCTOR(Hardsigmoid, __device__ C operator()(C x) const {
    const C t = x + C(3);
    const C low = t < C(0) ? C(0) : t;
    return (C(6) < low ? C(6) : low) * C(1.0f / 6.0f);
})
VRAM_FUNCTOR(Mish, __device__ C operator()(C x) const { return x * m_tanh(m_log1p(m_exp(x))); })
VRAM_FUNCTOR(LogSigmoid, __device__ C operator()(C x) const {
    const C low = x < C(0) ? x : C(0);
    return low - m_log1p(m_exp(-m_fabs(x)));
})

// ---- binary ---------------------------------------------------------------------------------
VRAM_FUNCTOR(Add, C alpha; __device__ C operator()(C a, C b) const { return a + alpha * b; })
VRAM_FUNCTOR(Sub, C alpha; __device__ C operator()(C a, C b) const { return a - alpha * b; })
VRAM_FUNCTOR(Mul, __device__ C operator()(C a, C b) const {
    if constexpr (IsSame<C, bool>::value) return a && b;
    else return a * b;
})
VRAM_FUNCTOR(Div, __device__ C operator()(C a, C b) const { return a / b; })
VRAM_FUNCTOR(DivTrunc, __device__ C operator()(C a, C b) const {
    if constexpr (IsFloat<C>::value) return m_trunc(a / b);
    else return a / b;
})
VRAM_FUNCTOR(DivFloor, __device__ C operator()(C a, C b) const {
    if constexpr (IsFloat<C>::value) {  // PyTorch's div_floor_floating
        if (b == C(0)) return a / b;
        const C mod = m_fmod(a, b);
        C div = (a - mod) / b;
        if (mod != C(0) && (b < C(0)) != (mod < C(0))) div -= C(1);
        C floordiv;
        if (div != C(0)) {
            floordiv = m_floor(div);
            if (div - floordiv > C(0.5)) floordiv += C(1);
        } else {
            floordiv = m_copysign(C(0), a / b);
        }
        return floordiv;
    } else {  // PyTorch's div_floor_integer
        if ((a < 0) != (b < 0)) {
            const C q = a / b, r = a % b;
            return r != 0 ? C(q - 1) : q;
        }
        return a / b;
    }
})
VRAM_FUNCTOR(Remainder, __device__ C operator()(C a, C b) const {
    if constexpr (IsFloat<C>::value) {
        C mod = m_fmod(a, b);
        if (mod != C(0) && (b < C(0)) != (mod < C(0))) mod += b;
        return mod;
    } else {
        C r = a % b;
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        return r;
    }
})
VRAM_FUNCTOR(Fmod, __device__ C operator()(C a, C b) const {
    if constexpr (IsFloat<C>::value) return m_fmod(a, b);
    else return a % b;
})
VRAM_FUNCTOR(Pow, __device__ C operator()(C a, C b) const {
    if constexpr (IsFloat<C>::value) {
        return m_pow(a, b);
    } else {  // PyTorch's powi: negative exponents give 0 except for bases 1 and -1
        if (b < 0) {
            if (a == 1) return C(1);
            if (a == -1) return (b % 2 == 0) ? C(1) : C(-1);
            return C(0);
        }
        C result = 1, base = a;
        for (C e = b; e; e /= 2) {
            if (e & 1) result *= base;
            base *= base;
        }
        return result;
    }
})
VRAM_FUNCTOR(Maximum, __device__ C operator()(C a, C b) const {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
})
VRAM_FUNCTOR(Minimum, __device__ C operator()(C a, C b) const {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? a : b;
})
VRAM_FUNCTOR(Atan2, __device__ C operator()(C a, C b) const { return m_atan2(a, b); })
VRAM_FUNCTOR(LogicalAnd, __device__ bool operator()(C a, C b) const {
    return convert<bool>(a) && convert<bool>(b);
})
VRAM_FUNCTOR(LogicalOr, __device__ bool operator()(C a, C b) const {
    return convert<bool>(a) || convert<bool>(b);
})
VRAM_FUNCTOR(LogicalXor, __device__ bool operator()(C a, C b) const {
    return convert<bool>(a) != convert<bool>(b);
})
VRAM_FUNCTOR(BitwiseAnd, __device__ C operator()(C a, C b) const { return a & b; })
VRAM_FUNCTOR(BitwiseOr, __device__ C operator()(C a, C b) const { return a | b; })
VRAM_FUNCTOR(BitwiseXor, __device__ C operator()(C a, C b) const { return a ^ b; })
VRAM_FUNCTOR(Eq, __device__ bool operator()(C a, C b) const { return a == b; })
VRAM_FUNCTOR(Ne, __device__ bool operator()(C a, C b) const { return a != b; })
VRAM_FUNCTOR(Lt, __device__ bool operator()(C a, C b) const { return a < b; })
VRAM_FUNCTOR(Le, __device__ bool operator()(C a, C b) const { return a <= b; })
VRAM_FUNCTOR(Gt, __device__ bool operator()(C a, C b) const { return a > b; })
VRAM_FUNCTOR(Ge, __device__ bool operator()(C a, C b) const { return a >= b; })

VRAM_FUNCTOR(Hypot, __device__ C operator()(C a, C b) const { return m_hypot(a, b); })
VRAM_FUNCTOR(Copysign, __device__ C operator()(C a, C b) const { return m_copysign(a, b); })
VRAM_FUNCTOR(LogAddExp, __device__ C operator()(C a, C b) const {
    if (isinf(a) && a == b) return a;
    const C m = a > b ? a : b;
    return m + m_log1p(m_exp(-m_fabs(a - b)));
})
VRAM_FUNCTOR(LogAddExp2, __device__ C operator()(C a, C b) const {
    if (isinf(a) && a == b) return a;
    const C m = a > b ? a : b;
    return m + m_log1p(m_exp2(-m_fabs(a - b))) * C(1.4426950408889634);
})
VRAM_FUNCTOR(Xlogy, __device__ C operator()(C x, C y) const {
    if (y != y) return y;
    if (x == C(0)) return C(0);
    return x * m_log(y);
})
VRAM_FUNCTOR(Heaviside, __device__ C operator()(C x, C values) const {
    return x == C(0) ? values : C(x > C(0));
})
// PyTorch's isclose: equal, or both NaN with equal_nan, or finite |a - b| within
// atol + |rtol * b| (floating point only; Python runs integers through other ops)
VRAM_FUNCTOR(IsClose, C rtol; C atol; C equal_nan; __device__ bool operator()(C a, C b) const {
    if (a == b) return true;
    if (equal_nan != C(0) && a != a && b != b) return true;
    const C actual = m_fabs(a - b);
    return isfinite(actual) && actual <= atol + m_fabs(rtol * b);
})

// ---- ternary --------------------------------------------------------------------------------
VRAM_FUNCTOR(Where, __device__ C operator()(C c, C a, C b) const {
    return convert<bool>(c) ? a : b;
})
// clamp(x, lo, hi) with tensors or scalars for the bounds: NaN in x or a bound is the result.
VRAM_FUNCTOR(Clamp, __device__ C operator()(C x, C lo, C hi) const {
    if (x != x) return x;
    if (lo != lo) return lo;
    if (hi != hi) return hi;
    const C low = x < lo ? lo : x;
    return low > hi ? hi : low;
})
VRAM_FUNCTOR(ClampMin, __device__ C operator()(C x, C lo) const {
    if (x != x) return x;
    if (lo != lo) return lo;
    return x < lo ? lo : x;
})
VRAM_FUNCTOR(ClampMax, __device__ C operator()(C x, C hi) const {
    if (x != x) return x;
    if (hi != hi) return hi;
    return x > hi ? hi : x;
})
VRAM_FUNCTOR(Addcmul, C value; __device__ C operator()(C x, C a, C b) const {
    return x + value * a * b;
})
VRAM_FUNCTOR(Addcdiv, C value; __device__ C operator()(C x, C a, C b) const {
    return x + value * (a / b);
})
VRAM_FUNCTOR(Lerp, __device__ C operator()(C start, C end, C weight) const {  // PyTorch's lerp
    const C diff = end - start;
    const C w = weight < C(0) ? -weight : weight;
    return w < C(0.5) ? start + weight * diff : end - diff * (C(1) - weight);
})

#undef VRAM_FUNCTOR

}  // namespace vram

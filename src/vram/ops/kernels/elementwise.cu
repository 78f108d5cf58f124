// vram's elementwise kernels: fill, copy (with a dtype cast; tiled for transposes) and the
// binary arithmetic ops.
//
// Every kernel is strided: a Layout gives the (coalesced) shape and, per operand, the strides
// in elements, outermost dimension first. Pointers already point at element 0 of each
// operand (storage offset applied). Kernels use a grid-stride loop over the flat index.
//
// Element types are template parameters; Python names the instances it launches
// ("vram::binary<float, vram::AddOp>") and NVRTC instantiates them from these templates.
// Arithmetic happens in the "opmath" type: float for __half and __nv_bfloat16 (as PyTorch),
// the element type itself otherwise.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace vram {

constexpr int kMaxDims = 8;  // dimensions after coalescing
constexpr int kMaxOperands = 3;

// Python packs this struct with NumPy (ops/_launch.py: LAYOUT_DTYPE); keep both in step.
struct Layout {
    long long ndim;
    long long numel;
    long long shape[kMaxDims];
    long long stride[kMaxOperands][kMaxDims];
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

template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<__half> { using type = float; };
template <> struct OpMath<__nv_bfloat16> { using type = float; };

// ---- conversions -------------------------------------------------------------------------
__device__ inline float widen(__half x) { return __half2float(x); }
__device__ inline float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ inline T widen(T x) { return x; }

// A real (non-complex) opmath value to the element type To.
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
    } else {
        return static_cast<To>(x);
    }
}

// Any element or opmath value to the element type To (complex to real keeps the real part).
template <typename To, typename From> __device__ inline To convert(From x) {
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
__device__ inline complex64 operator+(complex64 a, complex64 b) { return cadd(a, b); }
__device__ inline complex64 operator-(complex64 a, complex64 b) { return csub(a, b); }
__device__ inline complex64 operator*(complex64 a, complex64 b) { return cmul(a, b); }
__device__ inline complex64 operator/(complex64 a, complex64 b) { return cdiv(a, b); }
__device__ inline complex128 operator+(complex128 a, complex128 b) { return cadd(a, b); }
__device__ inline complex128 operator-(complex128 a, complex128 b) { return csub(a, b); }
__device__ inline complex128 operator*(complex128 a, complex128 b) { return cmul(a, b); }
__device__ inline complex128 operator/(complex128 a, complex128 b) { return cdiv(a, b); }

// ---- the binary operators (on opmath values) ----------------------------------------------
struct AddOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct SubOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a - b; }
};
struct MulOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a * b; }
};
struct DivOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a / b; }
};

// ---- indexing ----------------------------------------------------------------------------
// Element offsets of flat index i in the first N operands.
template <int N> __device__ inline void offsets(const Layout& l, long long i, long long* off) {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = static_cast<int>(l.ndim) - 1; d >= 0; --d) {
        long long index = i % l.shape[d];
        i /= l.shape[d];
        for (int k = 0; k < N; ++k) off[k] += index * l.stride[k][d];
    }
}

__device__ inline long long first_index() {
    return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline long long grid_step() { return static_cast<long long>(gridDim.x) * blockDim.x; }

// ---- kernels -------------------------------------------------------------------------------
template <typename T> __global__ void fill(T* out, T value, Layout l) {
    long long off[1];
    for (long long i = first_index(); i < l.numel; i += grid_step()) {
        offsets<1>(l, i, off);
        out[off[0]] = value;
    }
}

template <typename To, typename From> __global__ void copy(To* out, const From* src, Layout l) {
    long long off[2];
    for (long long i = first_index(); i < l.numel; i += grid_step()) {
        offsets<2>(l, i, off);
        out[off[0]] = convert<To>(src[off[1]]);
    }
}

// A copy without a cast whose operands are contiguous along different dimensions (a batch
// of transposes, as in A.mT.contiguous()): 32 x 32 tiles through shared memory, so that
// the reads and the writes are both coalesced. Dimension p is the one the output walks
// contiguously, q the source's; a block takes a tile at a time, the other dimensions
// named by the tile's index. E is any type of the elements' size (the bits are copied).
template <typename E> __global__ void copy_tiled(E* out, const E* src, int p, int q, Layout l) {
    __shared__ E tile[32][33];
    const long long np = l.shape[p], nq = l.shape[q];
    const long long tiles_p = (np + 31) / 32, tiles_q = (nq + 31) / 32;
    const long long tiles = tiles_p * tiles_q * (l.numel / (np * nq));
    const int x = threadIdx.x;
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const long long p0 = (t % tiles_p) * 32, q0 = (t / tiles_p % tiles_q) * 32;
        long long rest = t / (tiles_p * tiles_q), at_out = 0, at_src = 0;
        for (int d = static_cast<int>(l.ndim) - 1; d >= 0; --d) {
            if (d == p || d == q) continue;
            const long long index = rest % l.shape[d];
            rest /= l.shape[d];
            at_out += index * l.stride[0][d];
            at_src += index * l.stride[1][d];
        }
        for (int y = threadIdx.y; y < 32; y += blockDim.y) {  // read along q
            const long long i = p0 + y, j = q0 + x;
            if (i < np && j < nq) tile[y][x] = src[at_src + i * l.stride[1][p] + j * l.stride[1][q]];
        }
        __syncthreads();
        for (int y = threadIdx.y; y < 32; y += blockDim.y) {  // write along p
            const long long i = p0 + x, j = q0 + y;
            if (i < np && j < nq) out[at_out + i * l.stride[0][p] + j * l.stride[0][q]] = tile[x][y];
        }
        __syncthreads();  // the tile is read before the next one is written
    }
}

template <typename T, typename Op>
__global__ void binary(T* out, const T* a, const T* b, Layout l) {
    long long off[3];
    for (long long i = first_index(); i < l.numel; i += grid_step()) {
        offsets<3>(l, i, off);
        out[off[0]] = convert<T>(Op()(widen(a[off[1]]), widen(b[off[2]])));
    }
}

// out = op(a, scalar), or op(scalar, a) when ``reverse`` (as in 2 - t).
template <typename T, typename Op>
__global__ void binary_scalar(T* out, const T* a, typename OpMath<T>::type scalar, bool reverse,
                              Layout l) {
    long long off[2];
    for (long long i = first_index(); i < l.numel; i += grid_step()) {
        offsets<2>(l, i, off);
        auto x = widen(a[off[1]]);
        out[off[0]] = convert<T>(reverse ? Op()(scalar, x) : Op()(x, scalar));
    }
}

}  // namespace vram

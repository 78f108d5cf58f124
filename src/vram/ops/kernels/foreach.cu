// The foreach kernels (PyTorch's _foreach_* ops): one elementwise functor applied to every
// tensor of a list, through multi_tensor_apply (multi_tensor.cuh, prepended by Python).
//
// One kernel template: lists 0 .. NIn-1 are inputs, list Out is written (Out == 0 writes the
// first input in place; Out == NIn writes a separate output list). The functor gets the
// inputs in the opmath type, a scalar and alpha. The scalar is, by kScalar: 0 the call's;
// 1 the tensor's own from a scalar list (its extra holds the double's bits); 2 one element
// of type T in device memory (its extra holds the address: a 1-element tensor broadcast over
// the tensor). Python names the instances it launches, e.g.
// "vram::foreach::apply<float, vram::foreach::AddList, 3, 2, 2, 0, 818>".

namespace vram {
namespace foreach {

template <typename M> __device__ __forceinline__ M max_propagate_nan(M a, M b) {
    return (a != a || a > b) ? a : b;  // NaN wins, as torch.maximum
}

// ---- functors: f(x[], scalar, alpha) in the opmath type M ------------------------------------
struct AddScalar {  // alpha is 1 but for a broadcast tensor added with an alpha
    template <typename M> __device__ M operator()(const M* x, M s, M alpha) const {
        return x[0] + alpha * s;
    }
};
struct SubScalar {
    template <typename M> __device__ M operator()(const M* x, M s, M alpha) const {
        return x[0] - alpha * s;
    }
};
struct MulScalar {
    template <typename M> __device__ M operator()(const M* x, M s, M) const { return x[0] * s; }
};
struct DivScalar {
    template <typename M> __device__ M operator()(const M* x, M s, M) const { return x[0] / s; }
};
struct MaximumScalar {
    template <typename M> __device__ M operator()(const M* x, M s, M) const {
        return max_propagate_nan(x[0], s);
    }
};
struct PowScalar {  // x ** s
    template <typename M> __device__ M operator()(const M* x, M s, M) const {
        return pow(x[0], s);
    }
};
struct ScalarPow {  // s ** x
    template <typename M> __device__ M operator()(const M* x, M s, M) const {
        return pow(s, x[0]);
    }
};
struct AddList {
    template <typename M> __device__ M operator()(const M* x, M, M alpha) const {
        return x[0] + alpha * x[1];
    }
};
struct SubList {
    template <typename M> __device__ M operator()(const M* x, M, M alpha) const {
        return x[0] - alpha * x[1];
    }
};
struct MulList {
    template <typename M> __device__ M operator()(const M* x, M, M) const { return x[0] * x[1]; }
};
struct DivList {
    template <typename M> __device__ M operator()(const M* x, M, M) const { return x[0] / x[1]; }
};
struct MaximumList {
    template <typename M> __device__ M operator()(const M* x, M, M) const {
        return max_propagate_nan(x[0], x[1]);
    }
};
struct Lerp {  // x0 + s * (x1 - x0), PyTorch's two-sided formula
    template <typename M> __device__ M operator()(const M* x, M w, M) const {
        const M diff = x[1] - x[0];
        return (w < M(0.5) && w > M(-0.5)) ? x[0] + w * diff : x[1] - diff * (M(1) - w);
    }
};
struct Addcmul {
    template <typename M> __device__ M operator()(const M* x, M s, M) const {
        return x[0] + s * x[1] * x[2];
    }
};
struct Addcdiv {
    template <typename M> __device__ M operator()(const M* x, M s, M) const {
        return x[0] + s * x[1] / x[2];
    }
};
struct Sqrt {
    template <typename M> __device__ M operator()(const M* x, M, M) const { return sqrt(x[0]); }
};
struct Neg {
    template <typename M> __device__ M operator()(const M* x, M, M) const { return -x[0]; }
};
struct Reciprocal {
    template <typename M> __device__ M operator()(const M* x, M, M) const { return M(1) / x[0]; }
};
struct Zero {
    template <typename M> __device__ M operator()(const M*, M, M) const { return M(0); }
};
struct Copy {
    template <typename M> __device__ M operator()(const M* x, M, M) const { return x[0]; }
};

template <typename T, typename Op, int NIn>
__device__ __forceinline__ T apply_one(T* const* ptr, long long i, typename mt::OpMath<T>::type s,
                                       typename mt::OpMath<T>::type alpha) {
    using M = typename mt::OpMath<T>::type;
    M x[NIn > 0 ? NIn : 1];
#pragma unroll
    for (int k = 0; k < NIn; ++k) x[k] = mt::load_math(ptr[k][i]);
    return mt::store_math<T>(Op()(x, s, alpha));
}

template <typename T, typename Op, int D, int NIn, int Out, int kScalar, int N>
__global__ void __launch_bounds__(512)
    apply(mt::TensorListMeta<D, N, kScalar != 0> meta, int tile, double scalar, double alpha) {
    static_assert(Out == 0 || Out == NIn, "write the first input, or a list after the inputs");
    using M = typename mt::OpMath<T>::type;
    constexpr int V = mt::kVectorBytes / sizeof(T);
    const int t = mt::find_tensor(meta, blockIdx.x);
    long long start;
    int count;
    mt::tile_span(meta, t, blockIdx.x, tile, &start, &count);
    M s = static_cast<M>(scalar);
    if (kScalar == 1) s = static_cast<M>(__longlong_as_double(meta.extra[t]));
    if (kScalar == 2) s = mt::load_math(*reinterpret_cast<const T*>(meta.extra[t]));
    const M a = static_cast<M>(alpha);

    T* ptr[D];
    bool vectors = true;
#pragma unroll
    for (int d = 0; d < D; ++d) {
        ptr[d] = reinterpret_cast<T*>(meta.addresses[d][t]) + start;
        vectors = vectors && mt::aligned(ptr[d]);
    }
    int done = 0;
    if (vectors) {
        const int nvec = count / V;
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            alignas(16) T in[NIn > 0 ? NIn : 1][V];
            alignas(16) T out[V];
#pragma unroll
            for (int k = 0; k < NIn; ++k) mt::load_vector<V>(in[k], ptr[k] + v * V);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                M x[NIn > 0 ? NIn : 1];
#pragma unroll
                for (int k = 0; k < NIn; ++k) x[k] = mt::load_math(in[k][e]);
                out[e] = mt::store_math<T>(Op()(x, s, a));
            }
            mt::store_vector<V>(ptr[Out] + v * V, out);
        }
        done = nvec * V;
    }
    for (int i = done + threadIdx.x; i < count; i += blockDim.x) {
        ptr[Out][i] = apply_one<T, Op, NIn>(ptr, i, s, a);
    }
}

}  // namespace foreach
}  // namespace vram

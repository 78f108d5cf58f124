// The loops every pointwise op runs in (PyTorch's cuda/Loops.cuh): a functor applied to the
// elements of up to three inputs, written to one output.
//
// - A functor F has `using compute = ...;` (the opmath type) and `operator()` taking NIN
//   values of that type. Inputs are converted to it as they are loaded, and the result to
//   the output's type as it is stored, so mixed dtypes need no cast launches. Scalars an op
//   takes (alpha, a Python number operand) are fields of the functor, passed by value.
// - Three layouts, chosen once per plan (ops/_iterator.py):
//     pointwise_flat     every operand contiguous in one order: a flat index;
//     pointwise_vec      the same, with VEC elements per load and store where every pointer
//                        is 16-byte aligned, UNROLL loads in flight a thread (the tail is
//                        done element by element);
//     pointwise_strided  any strides, broadcast (stride 0) included: per operand the
//                        (coalesced) sizes and strides in elements, innermost dimension
//                        first; Index is int where every offset fits, else long long.
// - Unused inputs (NIN < 3) are `char` pointers that are never read.
// - Grid-stride loops: any grid size covers any number of elements.

namespace vram {

constexpr int kMaxDims = 16;  // dimensions of a strided launch after coalescing
constexpr int kOperands = 4;  // the output and three inputs

// Python packs this struct with NumPy (ops/_iterator.py: strided_dtype); keep both in step.
template <typename Index> struct Strided {
    Index sizes[kMaxDims];
    Index strides[kMaxDims][kOperands];
    int ndim;
};

template <int VEC, typename T> struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

__device__ inline long long thread_index() {
    return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline long long thread_count() {
    return static_cast<long long>(gridDim.x) * blockDim.x;
}

template <int NIN, typename F, typename A, typename B, typename D>
__device__ inline auto call(const F& f, A a, B b, D d) {
    using C = typename F::compute;
    if constexpr (NIN == 0) return f();
    else if constexpr (NIN == 1) return f(convert<C>(a));
    else if constexpr (NIN == 2) return f(convert<C>(a), convert<C>(b));
    else return f(convert<C>(a), convert<C>(b), convert<C>(d));
}

template <int NIN, typename F, typename Out, typename A, typename B, typename D>
__global__ void __launch_bounds__(256)
    pointwise_flat(F f, long long n, Out* __restrict__ out, const A* __restrict__ a,
                   const B* __restrict__ b, const D* __restrict__ d) {
    for (long long i = thread_index(); i < n; i += thread_count()) {
        A x{};
        B y{};
        D z{};
        if constexpr (NIN >= 1) x = a[i];
        if constexpr (NIN >= 2) y = b[i];
        if constexpr (NIN >= 3) z = d[i];
        out[i] = convert<Out>(call<NIN>(f, x, y, z));
    }
}

template <int VEC, typename T> __device__ inline void load(const T* p, long long v, T (&dst)[VEC]) {
    const Pack<VEC, T> pack = reinterpret_cast<const Pack<VEC, T>*>(p)[v];
#pragma unroll
    for (int k = 0; k < VEC; ++k) dst[k] = pack.v[k];
}

// UNROLL packs a thread: a block takes UNROLL * blockDim.x consecutive packs (each load
// coalesced across the block) and issues all their loads before it computes, so that a
// thread has UNROLL loads of each operand in flight.
template <int VEC, int UNROLL, int NIN, typename F, typename Out, typename A, typename B,
          typename D>
__global__ void __launch_bounds__(256)
    pointwise_vec(F f, long long n, Out* __restrict__ out, const A* __restrict__ a,
                  const B* __restrict__ b, const D* __restrict__ d) {
    const long long packs = n / VEC;
    const long long tile = static_cast<long long>(blockDim.x) * UNROLL;
    for (long long base = blockIdx.x * tile + threadIdx.x; base < packs;
         base += static_cast<long long>(gridDim.x) * tile) {
        A x[UNROLL][VEC] = {};
        B y[UNROLL][VEC] = {};
        D z[UNROLL][VEC] = {};
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long long v = base + u * static_cast<long long>(blockDim.x);
            if (v < packs) {
                if constexpr (NIN >= 1) load<VEC>(a, v, x[u]);
                if constexpr (NIN >= 2) load<VEC>(b, v, y[u]);
                if constexpr (NIN >= 3) load<VEC>(d, v, z[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const long long v = base + u * static_cast<long long>(blockDim.x);
            if (v < packs) {
                Pack<VEC, Out> result;
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    result.v[k] = convert<Out>(call<NIN>(f, x[u][k], y[u][k], z[u][k]));
                }
                reinterpret_cast<Pack<VEC, Out>*>(out)[v] = result;
            }
        }
    }
    const long long i = packs * VEC + thread_index();  // the tail, an element a thread
    if (i < n) {
        A x{};
        B y{};
        D z{};
        if constexpr (NIN >= 1) x = a[i];
        if constexpr (NIN >= 2) y = b[i];
        if constexpr (NIN >= 3) z = d[i];
        out[i] = convert<Out>(call<NIN>(f, x, y, z));
    }
}

template <int NIN, typename Index, typename F, typename Out, typename A, typename B, typename D>
__global__ void __launch_bounds__(256)
    pointwise_strided(F f, long long n, Out* __restrict__ out, const A* __restrict__ a,
                      const B* __restrict__ b, const D* __restrict__ d, Strided<Index> l) {
    for (long long i = thread_index(); i < n; i += thread_count()) {
        Index rest = static_cast<Index>(i);
        Index o0 = 0, o1 = 0, o2 = 0, o3 = 0;
#pragma unroll
        for (int dim = 0; dim < kMaxDims; ++dim) {
            if (dim == l.ndim) break;
            const Index size = l.sizes[dim];
            const Index index = rest % size;
            rest /= size;
            o0 += index * l.strides[dim][0];
            if constexpr (NIN >= 1) o1 += index * l.strides[dim][1];
            if constexpr (NIN >= 2) o2 += index * l.strides[dim][2];
            if constexpr (NIN >= 3) o3 += index * l.strides[dim][3];
        }
        A x{};
        B y{};
        D z{};
        if constexpr (NIN >= 1) x = a[o1];
        if constexpr (NIN >= 2) y = b[o2];
        if constexpr (NIN >= 3) z = d[o3];
        out[o0] = convert<Out>(call<NIN>(f, x, y, z));
    }
}

}  // namespace vram

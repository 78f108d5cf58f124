// multi_tensor_apply: one launch updates many tensors (PyTorch's MultiTensorApply.cuh).
//
// The launch metadata is a kernel parameter passed by value (no device copy per launch):
// for each tensor of the launch, its address in each of the D lists, its element count,
// an optional 8-byte extra (a per-tensor scalar as double bits, or a pointer such as an
// optimizer's step tensor) and the first tile it owns. Python packs the same struct with
// NumPy (ops/_multi_tensor.py: meta_dtype); keep both in step.
//
// Blocks and tiles: tensor t owns tiles first_tile[t] .. first_tile[t + 1] - 1, each of
// `tile` elements (the last one may be shorter). Block b works tile b: it finds its tensor
// by a binary search over first_tile, so the metadata grows with tensors, not blocks, and
// one launch covers every chunk of up to N tensors. Tiles are smaller than PyTorch's 65,536
// element chunks so that the last wave of blocks is short.
//
// Loads and stores are 16-byte vectors where a tile's pointers are all 16-byte aligned (a
// scalar tail handles the rest), else scalar.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace vram {
namespace mt {

template <int D, int N, bool kExtra>
struct TensorListMeta {
    unsigned long long addresses[D][N];
    unsigned long long extra[kExtra ? N : 1];
    int numel[N];
    int first_tile[N];
    int ntensors;
};

// The tensor whose tiles include `block` (first_tile is increasing; first_tile[0] == 0).
template <int D, int N, bool kExtra>
__device__ __forceinline__ int find_tensor(const TensorListMeta<D, N, kExtra>& meta, int block) {
    int lo = 0, hi = meta.ntensors - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (meta.first_tile[mid] <= block) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

// ---- element types -------------------------------------------------------------------------
// Arithmetic runs in the "opmath" type: float for __half and __nv_bfloat16, else the type.
template <typename T> struct OpMath { using type = T; };
template <> struct OpMath<__half> { using type = float; };
template <> struct OpMath<__nv_bfloat16> { using type = float; };

__device__ __forceinline__ float load_math(__half x) { return __half2float(x); }
__device__ __forceinline__ float load_math(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float load_math(float x) { return x; }
__device__ __forceinline__ double load_math(double x) { return x; }

// Storing an opmath value: a double reaches __half / __nv_bfloat16 through float, as
// PyTorch's c10::Half(float) and c10::BFloat16(float) constructors do.
template <typename T> struct Store;
template <> struct Store<__half> {
    static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ __half from(double x) {
        return __float2half_rn(static_cast<float>(x));
    }
};
template <> struct Store<__nv_bfloat16> {
    static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ __nv_bfloat16 from(double x) {
        return __float2bfloat16_rn(static_cast<float>(x));
    }
};
template <> struct Store<float> {
    static __device__ __forceinline__ float from(float x) { return x; }
    static __device__ __forceinline__ float from(double x) { return static_cast<float>(x); }
};
template <> struct Store<double> {
    static __device__ __forceinline__ double from(float x) { return x; }
    static __device__ __forceinline__ double from(double x) { return x; }
};

template <typename T, typename M> __device__ __forceinline__ T store_math(M x) {
    return Store<T>::from(x);
}

// ---- vector access ---------------------------------------------------------------------------
constexpr int kVectorBytes = 16;

__device__ __forceinline__ bool aligned(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) % kVectorBytes) == 0;
}

// V elements of T from/to 16-byte aligned memory, as V * sizeof(T) / 16 vector accesses.
template <int V, typename T> __device__ __forceinline__ void load_vector(T* dst, const T* src) {
    static_assert((V * sizeof(T)) % kVectorBytes == 0, "whole 16-byte vectors");
#pragma unroll
    for (int k = 0; k < static_cast<int>(V * sizeof(T) / kVectorBytes); ++k) {
        reinterpret_cast<uint4*>(dst)[k] = reinterpret_cast<const uint4*>(src)[k];
    }
}

template <int V, typename T> __device__ __forceinline__ void store_vector(T* dst, const T* src) {
#pragma unroll
    for (int k = 0; k < static_cast<int>(V * sizeof(T) / kVectorBytes); ++k) {
        reinterpret_cast<uint4*>(dst)[k] = reinterpret_cast<const uint4*>(src)[k];
    }
}

// The span of block `block`'s tile in tensor t: its first element and its length.
template <int D, int N, bool kExtra>
__device__ __forceinline__ void tile_span(
    const TensorListMeta<D, N, kExtra>& meta, int t, int block, int tile, long long* start,
    int* count) {
    *start = static_cast<long long>(block - meta.first_tile[t]) * tile;
    const long long left = static_cast<long long>(meta.numel[t]) - *start;
    *count = left < tile ? static_cast<int>(left) : tile;
}

}  // namespace mt
}  // namespace vram

// The activations PyTorch applies after a GEMM that cuBLASLt could not fuse
// (_addmm_activation's unfused path): relu, and gelu with the tanh approximation (the one
// cuBLASLt's GELU epilogue computes). In place, strided, in float for __half and
// __nv_bfloat16 and in the element type otherwise.
//
// The Layout struct is vram's (ops/kernels/elementwise.cu, ops/_launch.py: LAYOUT_DTYPE);
// keep the three in step.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace vram_blas {

constexpr int kMaxDims = 8;
constexpr int kMaxOperands = 3;

struct Layout {
    long long ndim;
    long long numel;
    long long shape[kMaxDims];
    long long stride[kMaxOperands][kMaxDims];
};

__device__ inline float widen(__half x) { return __half2float(x); }
__device__ inline float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float widen(float x) { return x; }
__device__ inline double widen(double x) { return x; }

template <typename T> __device__ inline T narrow(float x);
template <> __device__ inline __half narrow<__half>(float x) { return __float2half(x); }
template <> __device__ inline __nv_bfloat16 narrow<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}
template <> __device__ inline float narrow<float>(float x) { return x; }
template <typename T> __device__ inline T narrow(double x) { return x; }

struct Relu {
    template <typename R> __device__ R operator()(R x) const { return x > R(0) ? x : R(0); }
};

struct GeluTanh {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    template <typename R> __device__ R operator()(R x) const {
        const R kBeta = R(0.7978845608028654);
        const R kKappa = R(0.044715);
        R inner = kBeta * (x + kKappa * x * x * x);
        return R(0.5) * x * (R(1) + tanh(inner));
    }
};

template <typename T, typename Op> __global__ void activation(T* out, Layout l) {
    long long step = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < l.numel; i += step) {
        long long rest = i, offset = 0;
        for (int d = static_cast<int>(l.ndim) - 1; d >= 0; --d) {
            offset += (rest % l.shape[d]) * l.stride[0][d];
            rest /= l.shape[d];
        }
        out[offset] = narrow<T>(Op()(widen(out[offset])));
    }
}

}  // namespace vram_blas

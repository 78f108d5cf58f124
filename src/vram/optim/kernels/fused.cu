// vram's fused optimizer kernels: Adam/AdamW and SGD over many tensors per launch, through
// multi_tensor_apply (ops/kernels/multi_tensor.cuh, prepended by Python).
//
// The arithmetic is the one PyTorch 2.11's fused kernels (FusedAdamKernel.cu with
// fused_adam_utils.cuh, FusedSgdKernel.cu) execute as nvcc compiled them for sm_90, read off
// their machine code: every hyperparameter is cast to the opmath type first (float for
// float16 / bfloat16 / float32, double for float64), the moments are lerped with FMAs, and
// where nvcc fused a multiply into an add, or left it unfused, differs between code paths of
// one kernel. Each such choice is written here with explicit round-to-nearest intrinsics
// (mul_rn, add_rn, fma_rn), which NVRTC never contracts, so the results are PyTorch's bit for
// bit rather than whatever contraction NVRTC picks. The paths depend on how PyTorch would
// have walked the tensor (see TorchPath) and on the options; parameters and gradients have
// type P; Adam's state has type S (P, or float for float16 / bfloat16 parameters with float32
// state: vram's own option). float64 follows the float rules (PyTorch's double kernels were
// not compared).

namespace vram {
namespace optim {

__device__ __forceinline__ float math_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double math_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float math_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double math_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float fma_rn(float x, float y, float z) { return __fmaf_rn(x, y, z); }
__device__ __forceinline__ double fma_rn(double x, double y, double z) { return __fma_rn(x, y, z); }
__device__ __forceinline__ float mul_rn(float x, float y) { return __fmul_rn(x, y); }
__device__ __forceinline__ double mul_rn(double x, double y) { return __dmul_rn(x, y); }
__device__ __forceinline__ float add_rn(float x, float y) { return __fadd_rn(x, y); }
__device__ __forceinline__ double add_rn(double x, double y) { return __dadd_rn(x, y); }
__device__ __forceinline__ float div_rn(float x, float y) { return __fdiv_rn(x, y); }
__device__ __forceinline__ double div_rn(double x, double y) { return __ddiv_rn(x, y); }

// How PyTorch's multi_tensor_apply would walk a tensor, which picks the code path (and so
// the roundings) of its fused kernels. A 65,536-element chunk takes the vectorized path
// when the tensor's element count is a multiple of kILP (4) and every list's address is
// 16-byte aligned (then element i is lane i % 4 of its vector), else the ragged path (then
// element i is lane (i % 2048) / 512: blocks of 512 threads, 4 elements a thread).
// Tensors cut into several metadata entries (over 2**30 elements) are judged per entry.
struct TorchPath {
    bool vectorized;
    __device__ __forceinline__ int lane(long long index) const {
        return vectorized ? static_cast<int>(index & 3) : static_cast<int>((index & 2047) >> 9);
    }
};

template <int D, int N, bool kExtra>
__device__ __forceinline__ TorchPath torch_path(const mt::TensorListMeta<D, N, kExtra>& meta,
                                                int t) {
    bool aligned = (meta.numel[t] & 3) == 0;
#pragma unroll
    for (int d = 0; d < D; ++d) {
        aligned = aligned && (meta.addresses[d][t] % 16) == 0;
    }
    return TorchPath{aligned};
}

// ---- Adam / AdamW ----------------------------------------------------------------------------
template <typename M> struct AdamScalars {
    M lr, beta1, beta2, weight_decay, eps;
    M grad_scale;  // read once per block; used only when scaled
    bool scaled, maximize, adamw;
};

// One element: PyTorch's adam_math as compiled. `grad` comes back unscaled (it is stored only
// when a grad_scale was given); `lane` is the element's lane in PyTorch's walk (TorchPath).
//
// Adam's L2 decay `grad += param * weight_decay` is the one rounding that varies: nvcc fused
// it (fma) with AMSGrad or a grad_scale; without either it left it unfused (param *
// weight_decay rounded, then added) under maximize, and in lane 0 otherwise.
template <typename M, bool kAmsgrad>
__device__ __forceinline__ void adam_math(M& param, M& grad, M& exp_avg, M& exp_avg_sq,
                                          M& max_exp_avg_sq, const AdamScalars<M>& c,
                                          const M bias_correction1,
                                          const M bias_correction2_sqrt, const int lane) {
    const M lr = c.lr, beta1 = c.beta1, beta2 = c.beta2;
    const M weight_decay = c.weight_decay, eps = c.eps;
    if (c.scaled) {
        grad = div_rn(grad, c.grad_scale);
    }
    M g = c.maximize ? -grad : grad;
    if (weight_decay != 0) {
        if (c.adamw) {
            param = fma_rn(-mul_rn(lr, weight_decay), param, param);
        } else if (kAmsgrad || c.scaled || (!c.maximize && lane != 0)) {
            g = fma_rn(param, weight_decay, g);
        } else {
            g = add_rn(g, mul_rn(param, weight_decay));
        }
    }
    exp_avg = fma_rn(beta1, exp_avg, fma_rn(-beta1, g, g));
    const M g2 = mul_rn(g, g);
    exp_avg_sq = fma_rn(beta2, exp_avg_sq, fma_rn(-beta2, g2, g2));
    const M step_size = div_rn(lr, bias_correction1);
    M largest = exp_avg_sq;
    if (kAmsgrad) {
        max_exp_avg_sq = max_exp_avg_sq < exp_avg_sq ? exp_avg_sq : max_exp_avg_sq;  // std::max
        largest = max_exp_avg_sq;
    }
    const M denom = add_rn(div_rn(math_sqrt(largest), bias_correction2_sqrt), eps);
    param = add_rn(param, -div_rn(mul_rn(step_size, exp_avg), denom));
}

// Lists: params, grads, exp_avgs, exp_avg_sqs (, max_exp_avg_sqs when D == 5); each tensor's
// extra is the address of its float32 step (already incremented for this step).
template <typename P, typename S, int D, int N>
__global__ void __launch_bounds__(512, 2)
    fused_adam(mt::TensorListMeta<D, N, true> meta, int tile, double lr, double beta1,
               double beta2, double weight_decay, double eps, const float* lr_ptr,
               const float* grad_scale, const float* found_inf, int maximize, int adamw) {
    static_assert(D == 4 || D == 5, "depth 4 for Adam, 5 for AMSGrad");
    static_assert(sizeof(S) >= sizeof(P), "state at least as wide as the parameters");
    constexpr bool kAmsgrad = D == 5;
    using M = typename mt::OpMath<P>::type;
    constexpr int V = mt::kVectorBytes / sizeof(P);
    if (found_inf && *found_inf == 1) {
        return;
    }
    const int t = mt::find_tensor(meta, blockIdx.x);
    long long start;
    int count;
    mt::tile_span(meta, t, blockIdx.x, tile, &start, &count);

    const AdamScalars<M> c{lr_ptr ? static_cast<M>(*lr_ptr) : static_cast<M>(lr),
                           static_cast<M>(beta1),
                           static_cast<M>(beta2),
                           static_cast<M>(weight_decay),
                           static_cast<M>(eps),
                           grad_scale ? static_cast<M>(*grad_scale) : M(1),
                           grad_scale != nullptr,
                           maximize != 0,
                           adamw != 0};
    const M step = static_cast<M>(*reinterpret_cast<const float*>(meta.extra[t]));
    const M bc1 = 1 - math_pow(c.beta1, step);
    const M bc2_sqrt = math_sqrt(1 - math_pow(c.beta2, step));

    P* const param = reinterpret_cast<P*>(meta.addresses[0][t]) + start;
    P* const grad = reinterpret_cast<P*>(meta.addresses[1][t]) + start;
    S* const exp_avg = reinterpret_cast<S*>(meta.addresses[2][t]) + start;
    S* const exp_avg_sq = reinterpret_cast<S*>(meta.addresses[3][t]) + start;
    S* const max_sq = reinterpret_cast<S*>(meta.addresses[D - 1][t]) + start;
    const bool vectors = mt::aligned(param) && mt::aligned(grad) && mt::aligned(exp_avg) &&
                         mt::aligned(exp_avg_sq) && mt::aligned(max_sq);
    const TorchPath path = torch_path(meta, t);
    int done = 0;
    if (vectors) {
        const int nvec = count / V;
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            const int i = v * V;
            alignas(16) P rp[V], rg[V];
            alignas(16) S rm[V], rv[V], rx[kAmsgrad ? V : 1];
            mt::load_vector<V>(rp, param + i);
            mt::load_vector<V>(rg, grad + i);
            mt::load_vector<V>(rm, exp_avg + i);
            mt::load_vector<V>(rv, exp_avg_sq + i);
            if (kAmsgrad) mt::load_vector<V>(rx, max_sq + i);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                M p = mt::load_math(rp[e]), g = mt::load_math(rg[e]);
                M m = mt::load_math(rm[e]), s = mt::load_math(rv[e]);
                M x = kAmsgrad ? mt::load_math(rx[kAmsgrad ? e : 0]) : M(0);
                adam_math<M, kAmsgrad>(p, g, m, s, x, c, bc1, bc2_sqrt, path.lane(start + i + e));
                rp[e] = mt::store_math<P>(p);
                rg[e] = mt::store_math<P>(g);
                rm[e] = mt::store_math<S>(m);
                rv[e] = mt::store_math<S>(s);
                if (kAmsgrad) rx[kAmsgrad ? e : 0] = mt::store_math<S>(x);
            }
            mt::store_vector<V>(param + i, rp);
            if (grad_scale) mt::store_vector<V>(grad + i, rg);
            mt::store_vector<V>(exp_avg + i, rm);
            mt::store_vector<V>(exp_avg_sq + i, rv);
            if (kAmsgrad) mt::store_vector<V>(max_sq + i, rx);
        }
        done = nvec * V;
    }
    for (int i = done + threadIdx.x; i < count; i += blockDim.x) {
        M p = mt::load_math(param[i]), g = mt::load_math(grad[i]);
        M m = mt::load_math(exp_avg[i]), s = mt::load_math(exp_avg_sq[i]);
        M x = kAmsgrad ? mt::load_math(max_sq[i]) : M(0);
        adam_math<M, kAmsgrad>(p, g, m, s, x, c, bc1, bc2_sqrt, path.lane(start + i));
        param[i] = mt::store_math<P>(p);
        if (grad_scale) grad[i] = mt::store_math<P>(g);
        exp_avg[i] = mt::store_math<S>(m);
        exp_avg_sq[i] = mt::store_math<S>(s);
        if (kAmsgrad) max_sq[i] = mt::store_math<S>(x);
    }
}

// ---- SGD ---------------------------------------------------------------------------------------
template <typename M> struct SgdScalars {
    M lr, weight_decay, momentum, dampening;
    M grad_scale;  // read once per block; used only when scaled
    bool scaled, nesterov, maximize, first_step;
};

// One element: PyTorch's sgd_math as compiled; `lane` and `path` as for Adam.
//
// The momentum buffer `momentum * buf + (1 - dampening) * g` is fma(1 - dampening, g,
// momentum * buf rounded), except on PyTorch's vectorized path with maximize, no weight decay
// and no grad_scale, where nvcc fused the other product: fma(momentum, buf, (1 - dampening) *
// g rounded). The update `p -= lr * g` is an fma, except for float32 on the vectorized path
// with a grad_scale, where lanes 0 to 2 round lr * g before subtracting it.
template <typename P, typename M, bool kMomentum>
__device__ __forceinline__ void sgd_math(M& p, M& grad, M& buf, const SgdScalars<M>& c,
                                         const TorchPath path, const int lane) {
    const M momentum = c.momentum, dampening = c.dampening, weight_decay = c.weight_decay;
    if (c.scaled) {
        grad = div_rn(grad, c.grad_scale);
    }
    M g = c.maximize ? -grad : grad;
    if (weight_decay != 0) {
        g = fma_rn(p, weight_decay, g);
    }
    if (kMomentum) {
        M momentum_buffer = g;
        if (!c.first_step) {
            const M keep = 1 - dampening;
            if (path.vectorized && c.maximize && weight_decay == 0 && !c.scaled) {
                momentum_buffer = fma_rn(momentum, buf, mul_rn(keep, g));
            } else {
                momentum_buffer = fma_rn(keep, g, mul_rn(momentum, buf));
            }
        }
        buf = momentum_buffer;
        g = c.nesterov ? fma_rn(momentum, momentum_buffer, g) : momentum_buffer;
    }
    constexpr bool kFloat32 = sizeof(P) == 4 && sizeof(M) == 4;
    if (kFloat32 && path.vectorized && c.scaled && lane != 3) {
        p = add_rn(p, -mul_rn(c.lr, g));
    } else {
        p = fma_rn(-c.lr, g, p);
    }
}

// Lists: params, grads (, momentum_buffers when D == 3).
template <typename P, int D, int N>
__global__ void __launch_bounds__(512, 2)
    fused_sgd(mt::TensorListMeta<D, N, false> meta, int tile, double lr, double weight_decay,
              double momentum, double dampening, const float* lr_ptr, const float* grad_scale,
              const float* found_inf, int nesterov, int maximize, int first_step) {
    static_assert(D == 2 || D == 3, "depth 2 without momentum, 3 with");
    constexpr bool kMomentum = D == 3;
    using M = typename mt::OpMath<P>::type;
    constexpr int V = mt::kVectorBytes / sizeof(P);
    if (found_inf && *found_inf == 1) {
        return;
    }
    const int t = mt::find_tensor(meta, blockIdx.x);
    long long start;
    int count;
    mt::tile_span(meta, t, blockIdx.x, tile, &start, &count);
    const SgdScalars<M> c{lr_ptr ? static_cast<M>(*lr_ptr) : static_cast<M>(lr),
                          static_cast<M>(weight_decay),
                          static_cast<M>(momentum),
                          static_cast<M>(dampening),
                          grad_scale ? static_cast<M>(*grad_scale) : M(1),
                          grad_scale != nullptr,
                          nesterov != 0,
                          maximize != 0,
                          first_step != 0};

    P* const param = reinterpret_cast<P*>(meta.addresses[0][t]) + start;
    P* const grad = reinterpret_cast<P*>(meta.addresses[1][t]) + start;
    P* const bufs = reinterpret_cast<P*>(meta.addresses[D - 1][t]) + start;
    const bool vectors = mt::aligned(param) && mt::aligned(grad) && mt::aligned(bufs);
    const TorchPath path = torch_path(meta, t);
    int done = 0;
    if (vectors) {
        const int nvec = count / V;
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            const int i = v * V;
            alignas(16) P rp[V], rg[V], rb[kMomentum ? V : 1];
            mt::load_vector<V>(rp, param + i);
            mt::load_vector<V>(rg, grad + i);
            if (kMomentum && !c.first_step) mt::load_vector<V>(rb, bufs + i);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                M p = mt::load_math(rp[e]), g = mt::load_math(rg[e]);
                M b = (kMomentum && !c.first_step) ? mt::load_math(rb[kMomentum ? e : 0]) : M(0);
                sgd_math<P, M, kMomentum>(p, g, b, c, path, path.lane(start + i + e));
                rp[e] = mt::store_math<P>(p);
                rg[e] = mt::store_math<P>(g);
                if (kMomentum) rb[kMomentum ? e : 0] = mt::store_math<P>(b);
            }
            mt::store_vector<V>(param + i, rp);
            if (grad_scale) mt::store_vector<V>(grad + i, rg);
            if (kMomentum) mt::store_vector<V>(bufs + i, rb);
        }
        done = nvec * V;
    }
    for (int i = done + threadIdx.x; i < count; i += blockDim.x) {
        M p = mt::load_math(param[i]), g = mt::load_math(grad[i]);
        M b = (kMomentum && !c.first_step) ? mt::load_math(bufs[i]) : M(0);
        sgd_math<P, M, kMomentum>(p, g, b, c, path, path.lane(start + i));
        param[i] = mt::store_math<P>(p);
        if (grad_scale) grad[i] = mt::store_math<P>(g);
        if (kMomentum) bufs[i] = mt::store_math<P>(b);
    }
}

// ---- optimizer steps -------------------------------------------------------------------------
// The float32 step tensors of one launch: step += 1 before an update (PyTorch's
// _foreach_add_(steps, 1)), step -= found_inf after it when a found_inf was given.
template <int N> struct StepList {
    unsigned long long steps[N];
    int n;
};

template <int N> __global__ void increment_steps(StepList<N> list) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < list.n) {
        float* step = reinterpret_cast<float*>(list.steps[i]);
        *step = *step + 1.0f;
    }
}

template <int N> __global__ void unskip_steps(StepList<N> list, const float* found_inf) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < list.n) {
        float* step = reinterpret_cast<float*>(list.steps[i]);
        *step = *step - 1.0f * *found_inf;
    }
}

}  // namespace optim
}  // namespace vram

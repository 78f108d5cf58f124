// vram's fused optimizer kernels: Adam/AdamW and SGD over many tensors per launch, through
// multi_tensor_apply (ops/kernels/multi_tensor.cuh, prepended by Python).
//
// The arithmetic is PyTorch's (aten/src/ATen/native/cuda/fused_adam_utils.cuh and
// FusedSgdKernel.cu, since PyTorch 2.8) expression for expression: every hyperparameter is
// cast to the opmath type first (float for float16 / bfloat16 / float32, double for
// float64), the moments are lerped with explicit FMAs, and the rest is written in the same
// order so that the compiler contracts the same multiplies and adds into FMAs. Parameters and
// gradients have type P; Adam's state has type S (P, or float for float16 / bfloat16
// parameters with float32 state: vram's own option).

namespace vram {
namespace optim {

__device__ __forceinline__ float math_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double math_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float math_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double math_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float math_fma(float x, float y, float z) { return fmaf(x, y, z); }
__device__ __forceinline__ double math_fma(double x, double y, double z) { return fma(x, y, z); }

// ---- Adam / AdamW ----------------------------------------------------------------------------
template <typename M> struct AdamScalars {
    M lr, beta1, beta2, weight_decay, eps;
    M grad_scale;  // read once per block; used only when scaled
    bool scaled, maximize, adamw;
};

// One element: PyTorch's adam_math. `grad` comes back unscaled (it is stored only when a
// grad_scale was given).
template <typename M, bool kAmsgrad>
__device__ __forceinline__ void adam_math(M& param, M& grad, M& exp_avg, M& exp_avg_sq,
                                          M& max_exp_avg_sq, const AdamScalars<M>& c,
                                          const M bias_correction1,
                                          const M bias_correction2_sqrt) {
    const M lr = c.lr, beta1 = c.beta1, beta2 = c.beta2;
    const M weight_decay = c.weight_decay, eps = c.eps;
    if (c.scaled) {
        grad /= c.grad_scale;
    }
    M g = grad;
    if (c.maximize) {
        g = -g;
    }
    if (weight_decay != 0) {
        if (c.adamw) {
            param -= lr * weight_decay * param;
        } else {
            g += param * weight_decay;
        }
    }
    exp_avg = math_fma(beta1, exp_avg, math_fma(-beta1, g, g));
    exp_avg_sq = math_fma(beta2, exp_avg_sq, math_fma(-beta2, g * g, g * g));
    const M step_size = lr / bias_correction1;
    M denom;
    if (kAmsgrad) {
        max_exp_avg_sq = max_exp_avg_sq < exp_avg_sq ? exp_avg_sq : max_exp_avg_sq;  // std::max
        denom = (math_sqrt(max_exp_avg_sq) / bias_correction2_sqrt) + eps;
    } else {
        denom = (math_sqrt(exp_avg_sq) / bias_correction2_sqrt) + eps;
    }
    param -= step_size * exp_avg / denom;
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
                adam_math<M, kAmsgrad>(p, g, m, s, x, c, bc1, bc2_sqrt);
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
        adam_math<M, kAmsgrad>(p, g, m, s, x, c, bc1, bc2_sqrt);
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

// One element: PyTorch's sgd_math.
template <typename M, bool kMomentum>
__device__ __forceinline__ void sgd_math(M& p, M& grad, M& buf, const SgdScalars<M>& c) {
    const M momentum = c.momentum, dampening = c.dampening, weight_decay = c.weight_decay;
    if (c.scaled) {
        grad /= c.grad_scale;
    }
    M g = grad;
    if (c.maximize) {
        g = -g;
    }
    if (weight_decay != 0) {
        g += weight_decay * p;
    }
    if (kMomentum) {
        const M momentum_buffer = c.first_step ? g : (momentum * buf + (1 - dampening) * g);
        buf = momentum_buffer;
        if (c.nesterov) {
            g = g + momentum * momentum_buffer;
        } else {
            g = momentum_buffer;
        }
    }
    p -= c.lr * g;
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
                sgd_math<M, kMomentum>(p, g, b, c);
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
        sgd_math<M, kMomentum>(p, g, b, c);
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

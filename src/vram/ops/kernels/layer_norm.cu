// layer_norm (PyTorch's layer_norm_kernel.cu) over the rows of a contiguous [rows, n] tensor:
// y = (x - mean) * rstd * weight + bias with rstd = rsqrt(var + eps), var the biased
// variance, computed in C (float for __half and __nv_bfloat16). weight and bias (of type W:
// the input's, or float for a half or bfloat16 input) may be null.
//
// - layer_norm_rows: blockDim.x threads per row, blockDim.y rows per block; each thread keeps
//   ITEMS vectors of VEC elements of its row in registers: one read (the mean, then the sum
//   of squared deviations from it, both in registers), one write; weight and bias are read
//   in 16-byte loads beside the row's vectors.
// - layer_norm_online (rows longer than registers hold, or 16-bit rows where more rows in
//   flight beat one read): one row per block, the mean and squared deviations merged vector
//   by vector (Chan's formula) in one pass, a second pass re-reads the row (from the cache)
//   and writes.

namespace vram {

template <typename C> struct Moments {
    C mean;
    C m2;
    long long n;
};

template <typename C> __device__ inline Moments<C> merge_moments(Moments<C> a, Moments<C> b) {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const long long n = a.n + b.n;
    const C wb = C(b.n) / C(n);
    const C delta = b.mean - a.mean;
    return Moments<C>{a.mean + delta * wb, a.m2 + b.m2 + delta * delta * C(a.n) * wb, n};
}

template <typename C, typename W>
__device__ inline C affine(C x, const W* __restrict__ weight, const W* __restrict__ bias,
                           long long at) {
    if (weight != nullptr) x *= convert<C>(weight[at]);
    if (bias != nullptr) x += convert<C>(bias[at]);
    return x;
}

// VEC values of a weight or bias at `at` (a multiple of VEC), in 16-byte loads (the
// parameter's start 16-byte aligned: the plan sees to it).
template <int VEC, typename C, typename W, typename Index>
__device__ inline void load_params(C (&dst)[VEC], const W* __restrict__ p, Index at) {
    constexpr int kPiece = 16 / sizeof(W) < VEC ? 16 / sizeof(W) : VEC;
#pragma unroll
    for (int c = 0; c < VEC / kPiece; ++c) {
        const Vec<kPiece, W> q = load_vec<kPiece>(p + at + c * kPiece);
#pragma unroll
        for (int k = 0; k < kPiece; ++k) dst[c * kPiece + k] = convert<C>(q.v[k]);
    }
}

// (x - mean) * rstd * weight + bias of the VEC values at `at` of a row, stored as one
// vector (weight and bias read as vectors too).
template <int VEC, typename In, typename C, typename W, typename Index>
__device__ inline void store_normalized(In* __restrict__ dst, const C (&x)[VEC], C mean, C rstd,
                                        const W* __restrict__ weight, const W* __restrict__ bias,
                                        Index at) {
    C w[VEC], b[VEC];
    if (weight != nullptr) load_params(w, weight, at);
    if (bias != nullptr) load_params(b, bias, at);
    Vec<VEC, In> q;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        C y = (x[k] - mean) * rstd;
        if (weight != nullptr) y *= w[k];
        if (bias != nullptr) y += b[k];
        q.v[k] = convert<In>(y);
    }
    *reinterpret_cast<Vec<VEC, In>*>(dst + at) = q;
}

template <typename In, typename W, typename C, int VEC, int ITEMS, int THREADS>
__global__ void __launch_bounds__(THREADS)
    layer_norm_rows(const In* __restrict__ in, In* __restrict__ out, const W* __restrict__ weight,
                    const W* __restrict__ bias, long long rows, int n, C eps) {
    __shared__ C scratch[kMaxWarps];
    auto sum_of = [](C a, C b) { return a + b; };
    for (long long first = static_cast<long long>(blockIdx.x) * blockDim.y; first < rows;
         first += static_cast<long long>(gridDim.x) * blockDim.y) {
        const long long row = first + threadIdx.y;
        const bool active = row < rows;
        C v[ITEMS][VEC];
        load_row(v, in + (active ? row : 0) * n, n, active, C(0));
        C s = C(0);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) s += v[i][k];
        }
        const C mean = group_allreduce(s, sum_of, scratch) / C(n);
        C q = C(0);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const C d = v[i][k] - mean;
                if (row_at<VEC>(i) + k < n) q += d * d;
            }
        }
        const C rstd = m_rsqrt(group_allreduce(q, sum_of, scratch) / C(n) + eps);
        if (!active) continue;
        In* dst = out + row * n;
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int at = row_at<VEC>(i);
            if (at + VEC <= n) {
                store_normalized(dst, v[i], mean, rstd, weight, bias, at);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; ++k) {
                    if (at + k < n) {
                        dst[at + k] = convert<In>(affine((v[i][k] - mean) * rstd, weight, bias,
                                                         at + k));
                    }
                }
            }
        }
    }
}

// The moments of one vector's VEC values: its mean and squared deviations from it.
template <typename C, int VEC, typename In>
__device__ inline Moments<C> moments_of(const Vec<VEC, In>& p) {
    C x[VEC];
    C s = C(0);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        x[k] = convert<C>(p.v[k]);
        s += x[k];
    }
    const C mean = s / C(VEC);
    C q = C(0);
#pragma unroll
    for (int k = 0; k < VEC; ++k) q += (x[k] - mean) * (x[k] - mean);
    return Moments<C>{mean, q, VEC};
}

// One row per block; n a multiple of VEC. A thread loads UNROLL vectors before it folds them
// (each merged whole into the running moments: one division a vector, Chan's formula);
// BLOCKS blocks of THREADS fit a multiprocessor (the registers are bounded to that).
template <typename In, typename W, typename C, int VEC, int UNROLL, int THREADS, int BLOCKS>
__global__ void __launch_bounds__(THREADS, BLOCKS)
    layer_norm_online(const In* __restrict__ in, In* __restrict__ out,
                      const W* __restrict__ weight, const W* __restrict__ bias, long long rows,
                      long long n, C eps) {
    __shared__ Moments<C> scratch[kMaxWarps];
    const long long step = static_cast<long long>(blockDim.x) * VEC;
    auto merge_of = [](const Moments<C>& a, const Moments<C>& b) { return merge_moments(a, b); };
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const In* src = in + row * n;
        In* dst = out + row * n;
        Moments<C> acc{C(0), C(0), 0};
        for (long long at = static_cast<long long>(threadIdx.x) * VEC; at < n;
             at += step * UNROLL) {
            Vec<VEC, In> p[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if (at + u * step < n) p[u] = load_vec<VEC>(src + at + u * step);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                if (at + u * step < n) acc = merge_moments(acc, moments_of<C>(p[u]));
            }
        }
        acc = group_allreduce(acc, merge_of, scratch);
        const C rstd = m_rsqrt(acc.m2 / C(n) + eps);
        for (long long at = static_cast<long long>(threadIdx.x) * VEC; at < n; at += step) {
            const Vec<VEC, In> p = load_vec<VEC>(src + at);
            C x[VEC];
#pragma unroll
            for (int k = 0; k < VEC; ++k) x[k] = convert<C>(p.v[k]);
            store_normalized(dst, x, acc.mean, rstd, weight, bias, at);
        }
    }
}

}  // namespace vram

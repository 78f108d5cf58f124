// softmax and log_softmax (PyTorch's SoftMax.cu, PersistentSoftmax.cuh) over a contiguous
// tensor seen as [outer, n, inner], computed in C (float for __half and __nv_bfloat16).
//
// - softmax_rows (inner == 1): blockDim.x threads per row (part of a warp, a warp or several
//   warps), blockDim.y rows per block. Each thread keeps ITEMS vectors of VEC elements of its
//   row in registers, so the row is read once: its max, the sum of exp(x - max) (each
//   exponential computed once and kept), the result (times 1 / sum: one multiply a value).
// - softmax_online (inner == 1, rows longer than registers hold): one pass keeps (max, sum)
//   rescaled as the max grows (online softmax), a second pass writes: two reads, one write.
// - softmax_columns (inner > 1): blockDim.x threads take consecutive columns (coalesced),
//   blockDim.y threads split the softmax dim; an online pass, then a writing pass.
// As PyTorch: softmax = exp(x - max) / sum, log_softmax = x - max - log(sum); a row that
// holds NaN or +inf, or only -inf, gives NaN.

namespace vram {

template <typename C> struct Online {
    C max;
    C sum;  // of exp(x - max); 0 only for no element yet
};

// While the max is -inf every element so far is -inf: the sum counts them (exp(x - max) is
// NaN then, which is the result PyTorch gives for a row of -inf).
template <typename C> __device__ inline Online<C> merge(Online<C> a, Online<C> b) {
    if (a.sum == C(0)) return b;
    if (b.sum == C(0)) return a;
    const C m = max_nan(a.max, b.max);
    if (m == Bounds<C>::lowest()) return Online<C>{m, a.sum + b.sum};
    return Online<C>{m, a.sum * m_exp(a.max - m) + b.sum * m_exp(b.max - m)};
}

template <bool LOG, typename C> __device__ inline C softmax_value(C x, C max, C sum) {
    if constexpr (LOG) return x - max - m_log(sum);
    else return m_exp(x - max) / sum;
}

template <typename In, typename Out, typename C, bool LOG, int VEC, int ITEMS, int THREADS>
__global__ void __launch_bounds__(THREADS)
    softmax_rows(const In* __restrict__ in, Out* __restrict__ out, long long rows, int n) {
    __shared__ C scratch[kMaxWarps];
    auto max_of = [](C a, C b) { return max_nan(a, b); };
    auto sum_of = [](C a, C b) { return a + b; };
    for (long long first = static_cast<long long>(blockIdx.x) * blockDim.y; first < rows;
         first += static_cast<long long>(gridDim.x) * blockDim.y) {
        const long long row = first + threadIdx.y;
        const bool active = row < rows;
        C v[ITEMS][VEC];
        load_row(v, in + (active ? row : 0) * n, n, active, Bounds<C>::lowest());
        C m = Bounds<C>::lowest();
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) m = max_nan(m, v[i][k]);
        }
        m = group_allreduce(m, max_of, scratch);
        // each element becomes exp(x - max) (softmax) or x - max (log_softmax) as it is
        // summed, so the store only scales or shifts it. Padding (-inf) adds exp(-inf - max)
        // = 0, or NaN where the row's own elements already make the sum NaN (a max of +-inf
        // or NaN): no test of the row's end is needed.
        C s = C(0);
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                const C shifted = v[i][k] - m;
                const C e = m_exp(shifted);
                s += e;
                v[i][k] = LOG ? shifted : e;
            }
        }
        s = group_allreduce(s, sum_of, scratch);
        if (!active) continue;
        const C scale = LOG ? m_log(s) : C(1) / s;
        store_row<VEC, ITEMS>(out + row * n, n, [&](int i, int k, int) {
            return LOG ? v[i][k] - scale : v[i][k] * scale;
        });
    }
}

// One row per block; n a multiple of VEC.
template <typename In, typename Out, typename C, bool LOG, int VEC>
__global__ void __launch_bounds__(1024)
    softmax_online(const In* __restrict__ in, Out* __restrict__ out, long long rows, long long n) {
    __shared__ Online<C> scratch[kMaxWarps];
    const long long step = static_cast<long long>(blockDim.x) * VEC;
    auto merge_of = [](const Online<C>& a, const Online<C>& b) { return merge(a, b); };
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const In* src = in + row * n;
        Out* dst = out + row * n;
        Online<C> acc{Bounds<C>::lowest(), C(0)};
        for (long long at = static_cast<long long>(threadIdx.x) * VEC; at < n; at += step) {
            const Vec<VEC, In> p = load_vec<VEC>(src + at);
#pragma unroll
            for (int k = 0; k < VEC; ++k) acc = merge(acc, Online<C>{convert<C>(p.v[k]), C(1)});
        }
        acc = group_allreduce(acc, merge_of, scratch);
        for (long long at = static_cast<long long>(threadIdx.x) * VEC; at < n; at += step) {
            const Vec<VEC, In> p = load_vec<VEC>(src + at);
            Vec<VEC, Out> q;
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                q.v[k] = convert<Out>(softmax_value<LOG>(convert<C>(p.v[k]), acc.max, acc.sum));
            }
            *reinterpret_cast<Vec<VEC, Out>*>(dst + at) = q;
        }
    }
}

template <typename In, typename Out, typename C, bool LOG>
__global__ void __launch_bounds__(1024)
    softmax_columns(const In* __restrict__ in, Out* __restrict__ out, long long outer,
                    long long n, long long inner) {
    __shared__ Online<C> scratch[1024];
    const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
    const long long tiles = (inner + bx - 1) / bx;
    for (long long b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
        const long long i = (b % tiles) * bx + tx;
        const bool active = i < inner;
        const long long base = (b / tiles) * n * inner + i;
        Online<C> acc{Bounds<C>::lowest(), C(0)};
        if (active) {
            for (long long j = ty; j < n; j += by) {
                acc = merge(acc, Online<C>{convert<C>(in[base + j * inner]), C(1)});
            }
        }
        scratch[ty * bx + tx] = acc;
        __syncthreads();
        for (int s = by / 2; s > 0; s /= 2) {
            if (ty < s) scratch[ty * bx + tx] = merge(scratch[ty * bx + tx], scratch[(ty + s) * bx + tx]);
            __syncthreads();
        }
        const Online<C> total = scratch[tx];
        if (active) {
            for (long long j = ty; j < n; j += by) {
                const C x = convert<C>(in[base + j * inner]);
                out[base + j * inner] = convert<Out>(softmax_value<LOG>(x, total.max, total.sum));
            }
        }
        __syncthreads();
    }
}

}  // namespace vram

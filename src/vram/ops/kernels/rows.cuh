// Rows held in registers (softmax, layer_norm): each thread of a row group (the blockDim.x
// threads of one threadIdx.y) keeps ITEMS vectors of VEC elements of the row, so that a row
// is read once. Item i, element k of a thread is the row's element
// (i * blockDim.x + threadIdx.x) * VEC + k; a full vector is one 16-byte load or store
// (the row's start and length are multiples of VEC: the plan sees to it).

namespace vram {

template <int VEC> __device__ inline int row_at(int i) {
    return (i * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x)) * VEC;
}

// The row's elements as C; `pad` where the row has none (past its end, or not `active`).
template <int VEC, int ITEMS, typename C, typename In>
__device__ inline void load_row(C (&v)[ITEMS][VEC], const In* __restrict__ src, int n,
                                bool active, C pad) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int at = row_at<VEC>(i);
        if (active && at + VEC <= n) {
            const Vec<VEC, In> p = load_vec<VEC>(src + at);
#pragma unroll
            for (int k = 0; k < VEC; ++k) v[i][k] = convert<C>(p.v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                v[i][k] = active && at + k < n ? convert<C>(src[at + k]) : pad;
            }
        }
    }
}

// Writes value(i, k, at) for each element `at` of the row (item i, element k of the thread).
template <int VEC, int ITEMS, typename Out, typename F>
__device__ inline void store_row(Out* __restrict__ dst, int n, F value) {
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int at = row_at<VEC>(i);
        if (at + VEC <= n) {
            Vec<VEC, Out> p;
#pragma unroll
            for (int k = 0; k < VEC; ++k) p.v[k] = convert<Out>(value(i, k, at + k));
            *reinterpret_cast<Vec<VEC, Out>*>(dst + at) = p;
        } else {
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                if (at + k < n) dst[at + k] = convert<Out>(value(i, k, at + k));
            }
        }
    }
}

}  // namespace vram

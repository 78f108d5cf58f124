// cumsum and cumprod along one dim of a contiguous tensor seen as [outer, n, inner]. Elements
// are converted to D (the dtype= argument) as they are loaded and combined in A (float for
// __half and __nv_bfloat16, long long for integer sums).
//
// - scan_rows (inner == 1): blockDim.x threads per row (part of a warp, a warp or several
//   warps), blockDim.y rows per block. The row goes in tiles of blockDim.x elements: an
//   inclusive scan of the tile (warp shuffles, then the warps' totals through shared
//   memory) on top of the carry of the tiles before it.
// - scan_columns (inner > 1): a thread per column walks it in order; consecutive threads
//   take consecutive columns, so loads coalesce.

namespace vram {

template <typename A, bool PROD> __device__ inline A scan_identity() {
    if constexpr (PROD) {
        if constexpr (IsComplex<A>::value) return A{1, 0};
        else return A(1);
    } else {
        return A{};
    }
}

template <typename A, bool PROD> __device__ inline A scan_op(A a, A b) {
    if constexpr (PROD) return a * b;
    else return a + b;
}

template <typename In, typename D, typename A, typename Out, bool PROD>
__global__ void __launch_bounds__(1024)
    scan_rows(const In* __restrict__ in, Out* __restrict__ out, long long rows, long long n) {
    __shared__ A totals[kMaxWarps];
    const int lanes = blockDim.x, lane = threadIdx.x;
    const int width = lanes < kWarpSize ? lanes : kWarpSize;
    const int warps = lanes / kWarpSize;  // per row, when a row has several
    for (long long first = static_cast<long long>(blockIdx.x) * blockDim.y; first < rows;
         first += static_cast<long long>(gridDim.x) * blockDim.y) {
        const long long row = first + threadIdx.y;
        const bool active = row < rows;
        A carry = scan_identity<A, PROD>();
        for (long long t = 0; t < n; t += lanes) {
            const long long i = t + lane;
            A v = active && i < n ? convert<A>(convert<D>(in[row * n + i]))
                                  : scan_identity<A, PROD>();
            for (int d = 1; d < width; d *= 2) {
                const A u = shfl_up(v, d, width);
                if (lane % width >= d) v = scan_op<A, PROD>(u, v);
            }
            A total;
            if (lanes > kWarpSize) {
                A* mine = totals + threadIdx.y * warps;
                __syncthreads();  // the last tile's readers are done with totals
                if (lane % kWarpSize == kWarpSize - 1) mine[lane / kWarpSize] = v;
                __syncthreads();
                A before = scan_identity<A, PROD>();
                total = scan_identity<A, PROD>();
                for (int w = 0; w < warps; ++w) {
                    if (w < lane / kWarpSize) before = scan_op<A, PROD>(before, mine[w]);
                    total = scan_op<A, PROD>(total, mine[w]);
                }
                v = scan_op<A, PROD>(before, v);
            } else {
                total = shfl(v, width - 1, width);
            }
            if (active && i < n) out[row * n + i] = convert<Out>(scan_op<A, PROD>(carry, v));
            carry = scan_op<A, PROD>(carry, total);
        }
    }
}

template <typename In, typename D, typename A, typename Out, bool PROD>
__global__ void __launch_bounds__(512)
    scan_columns(const In* __restrict__ in, Out* __restrict__ out, long long outer, long long n,
                 long long inner) {
    const long long columns = outer * inner;
    for (long long c = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         c < columns; c += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long base = (c / inner) * n * inner + c % inner;
        A acc = scan_identity<A, PROD>();
        for (long long j = 0; j < n; ++j) {
            acc = scan_op<A, PROD>(acc, convert<A>(convert<D>(in[base + j * inner])));
            out[base + j * inner] = convert<Out>(acc);
        }
    }
}

}  // namespace vram

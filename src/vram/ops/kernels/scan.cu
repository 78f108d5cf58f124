// cumsum and cumprod along one dim of a contiguous tensor seen as [outer, n, inner]. Elements
// are converted to D (the dtype= argument) as they are loaded and combined in A (float for
// __half and __nv_bfloat16, long long for integer sums).
//
// - scan_rows (inner == 1): blockDim.x threads per row (part of a warp, a warp or several
//   warps), blockDim.y rows per block. The row goes in tiles of blockDim.x elements: an
//   inclusive scan of the tile (warp shuffles, then the warps' totals through shared
//   memory) on top of the carry of the tiles before it.
// - scan_tile_totals, scan_rows, scan_tiles: rows too long and too few to keep the GPU busy a
//   block a row: tiles of a row are scanned by blocks of their own (see below).
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

// Scans [begin, end) of a row (`in` and `out` at the row's start) with the blockDim.x threads
// of the calling row group, on top of `carry`; every thread of the block calls it the same
// number of times (it may synchronize). `totals`: kMaxWarps values of shared memory.
template <typename In, typename D, typename A, typename Out, bool PROD>
__device__ inline void scan_range(const In* __restrict__ in, Out* __restrict__ out,
                                  long long begin, long long end, A carry, bool active,
                                  A* totals) {
    const int lanes = blockDim.x, lane = threadIdx.x;
    const int width = lanes < kWarpSize ? lanes : kWarpSize;
    const int warps = lanes / kWarpSize;  // per row, when a row has several
    for (long long t = begin; t < end; t += lanes) {
        const long long i = t + lane;
        A v = active && i < end ? convert<A>(convert<D>(in[i])) : scan_identity<A, PROD>();
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
        if (active && i < end) out[i] = convert<Out>(scan_op<A, PROD>(carry, v));
        carry = scan_op<A, PROD>(carry, total);
    }
}

template <typename In, typename D, typename A, typename Out, bool PROD>
__global__ void __launch_bounds__(1024)
    scan_rows(const In* __restrict__ in, Out* __restrict__ out, long long rows, long long n) {
    __shared__ A totals[kMaxWarps];
    for (long long first = static_cast<long long>(blockIdx.x) * blockDim.y; first < rows;
         first += static_cast<long long>(gridDim.x) * blockDim.y) {
        const long long row = first + threadIdx.y;
        const bool active = row < rows;
        const long long at = (active ? row : 0) * n;
        scan_range<In, D, A, Out, PROD>(in + at, out + at, 0, n, scan_identity<A, PROD>(),
                                        active, totals);
    }
}

// Long rows, in three launches: scan_tile_totals (each block: the total of one tile of one
// row: grid (tiles, rows)), scan_rows over those totals, then scan_tiles (each block scans
// its tile on top of the running total of the tiles before it).
template <typename In, typename D, typename A, bool PROD>
__global__ void __launch_bounds__(1024)
    scan_tile_totals(const In* __restrict__ in, A* __restrict__ totals, long long n,
                     long long tile) {
    __shared__ A scratch[kMaxWarps];
    const long long row = blockIdx.y, begin = static_cast<long long>(blockIdx.x) * tile;
    const long long end = min(n, begin + tile);
    A acc = scan_identity<A, PROD>();
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
        acc = scan_op<A, PROD>(acc, convert<A>(convert<D>(in[row * n + i])));
    }
    auto op = [](A a, A b) { return scan_op<A, PROD>(a, b); };
    acc = group_allreduce(acc, op, scratch);
    if (threadIdx.x == 0) totals[row * gridDim.x + blockIdx.x] = acc;
}

template <typename In, typename D, typename A, typename Out, bool PROD>
__global__ void __launch_bounds__(1024)
    scan_tiles(const In* __restrict__ in, Out* __restrict__ out, const A* __restrict__ running,
               long long n, long long tile) {
    __shared__ A totals[kMaxWarps];
    const long long row = blockIdx.y, begin = static_cast<long long>(blockIdx.x) * tile;
    const A carry = blockIdx.x ? running[row * gridDim.x + blockIdx.x - 1]
                               : scan_identity<A, PROD>();
    scan_range<In, D, A, Out, PROD>(in + row * n, out + row * n, begin, min(n, begin + tile),
                                    carry, true, totals);
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

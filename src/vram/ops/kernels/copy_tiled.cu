// The pointwise engine's copy when its two sides are contiguous along different dimensions (a
// batch of transposes, as in A.mT.contiguous()): 32 x 32 tiles through shared memory, so that
// the reads and the writes are both coalesced. Follows common.cuh and loops.cuh (Strided).
//
// Dimension p is the one the output walks contiguously, q the source's (indices into the
// launch's Strided layout: operand 0 the output, 1 the source); a block takes a tile at a
// time, the other dimensions named by the tile's index. E is any type of the elements' size:
// the bits are copied (the plan takes this path only where the dtypes are the same).

namespace vram {

template <typename E, typename Index>
__global__ void __launch_bounds__(256)
    copy_tiled(E* __restrict__ out, const E* __restrict__ src, int p, int q, long long tiles,
               Strided<Index> l) {
    __shared__ E tile[32][33];
    const long long np = l.sizes[p], nq = l.sizes[q];
    const long long tiles_p = (np + 31) / 32, tiles_q = (nq + 31) / 32;
    const Index op = l.strides[p][0], oq = l.strides[q][0];
    const Index sp = l.strides[p][1], sq = l.strides[q][1];
    const int x = threadIdx.x;
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
        const long long p0 = (t % tiles_p) * 32, q0 = (t / tiles_p % tiles_q) * 32;
        long long rest = t / (tiles_p * tiles_q), at_out = 0, at_src = 0;
        for (int d = 0; d < l.ndim; ++d) {
            if (d == p || d == q) continue;
            const long long index = rest % l.sizes[d];
            rest /= l.sizes[d];
            at_out += index * l.strides[d][0];
            at_src += index * l.strides[d][1];
        }
        for (int y = threadIdx.y; y < 32; y += blockDim.y) {  // read along q
            const long long i = p0 + y, j = q0 + x;
            if (i < np && j < nq) tile[y][x] = src[at_src + i * sp + j * sq];
        }
        __syncthreads();
        for (int y = threadIdx.y; y < 32; y += blockDim.y) {  // write along p
            const long long i = p0 + x, j = q0 + y;
            if (i < np && j < nq) out[at_out + i * op + j * oq] = tile[x][y];
        }
        __syncthreads();  // the tile is read before the next one is written
    }
}

}  // namespace vram

// Just enough of CUDA to run vram.linalg's LU kernels (kernels/lu.cu) on a CPU, for tests on
// machines without a GPU: every thread of a block is a std::thread, __syncthreads is a
// std::barrier of the block, a warp shuffle is an exchange through memory between two
// barriers of the warp, and __shared__ variables are function statics (one block runs at a
// time). Slow, but it runs the kernels' own code: the same indexing, barriers and races.
#pragma once

#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

inline thread_local dim3 threadIdx;
inline thread_local dim3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(bytes) alignas(bytes)
#define __CUDA_ARCH__ 900  // the kernels' sm_80+ paths (warp reductions) are the ones run

namespace cuda_on_cpu {
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline unsigned char exchange[1024][16];
}  // namespace cuda_on_cpu

inline void __syncthreads() { cuda_on_cpu::block_barrier->arrive_and_wait(); }

inline void __syncwarp(unsigned = 0xffffffffu) {
    cuda_on_cpu::warp_barriers[threadIdx.x / 32]->arrive_and_wait();
}

namespace cuda_on_cpu {
// Every thread of the warp offers ``value`` and gets the one thread ``source`` offered.
template <typename T> T exchange_value(T value, unsigned source) {
    const unsigned t = threadIdx.x;
    std::memcpy(exchange[t], &value, sizeof(T));
    warp_barriers[t / 32]->arrive_and_wait();
    T other;
    std::memcpy(&other, exchange[source], sizeof(T));
    warp_barriers[t / 32]->arrive_and_wait();
    return other;
}
}  // namespace cuda_on_cpu

template <typename T> T __shfl_xor_sync(unsigned, T value, int offset) {
    return cuda_on_cpu::exchange_value(value, threadIdx.x ^ (unsigned)offset);
}

template <typename T> T __shfl_sync(unsigned, T value, int lane) {
    return cuda_on_cpu::exchange_value(value, (threadIdx.x & ~31u) + ((unsigned)lane & 31u));
}

inline unsigned __ballot_sync(unsigned, bool predicate) {
    using namespace cuda_on_cpu;
    const unsigned t = threadIdx.x;
    exchange[t][0] = predicate ? 1 : 0;
    warp_barriers[t / 32]->arrive_and_wait();
    unsigned bits = 0;
    for (unsigned lane = 0; lane < 32; ++lane)
        if (exchange[(t & ~31u) + lane][0]) bits |= 1u << lane;
    warp_barriers[t / 32]->arrive_and_wait();
    return bits;
}

// redux.sync: every lane of the warp gets the max / min of the values its lanes offer
namespace cuda_on_cpu {
template <typename Pick> unsigned reduce_warp(unsigned value, Pick pick) {
    const unsigned t = threadIdx.x;
    std::memcpy(exchange[t], &value, sizeof(value));
    warp_barriers[t / 32]->arrive_and_wait();
    unsigned best = value;
    for (unsigned lane = 0; lane < 32; ++lane) {
        unsigned other;
        std::memcpy(&other, exchange[(t & ~31u) + lane], sizeof(other));
        best = pick(best, other);
    }
    warp_barriers[t / 32]->arrive_and_wait();
    return best;
}
}  // namespace cuda_on_cpu

inline unsigned __reduce_max_sync(unsigned, unsigned value) {
    return cuda_on_cpu::reduce_warp(value, [](unsigned x, unsigned y) { return x > y ? x : y; });
}

inline unsigned __reduce_min_sync(unsigned, unsigned value) {
    return cuda_on_cpu::reduce_warp(value, [](unsigned x, unsigned y) { return x < y ? x : y; });
}

inline unsigned __float_as_uint(float x) {
    unsigned bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return bits;
}

inline long long __double_as_longlong(double x) {
    long long bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return bits;
}

inline int __ffs(int x) { return x == 0 ? 0 : __builtin_ctz((unsigned)x) + 1; }

namespace cuda_on_cpu {
// Run ``kernel`` (a callable taking no argument) over ``grid`` blocks of ``block.x`` threads
// (a multiple of 32), one block after another.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
    gridDim = grid;
    blockDim = block;
    const unsigned threads = block.x;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                std::barrier<> barrier((std::ptrdiff_t)threads);
                block_barrier = &barrier;
                warp_barriers.clear();
                for (unsigned w = 0; w < (threads + 31) / 32; ++w)
                    warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
                std::vector<std::thread> running;
                for (unsigned t = 0; t < threads; ++t)
                    running.emplace_back([&, t] {
                        threadIdx = dim3{t, 0, 0};
                        blockIdx = dim3{x, y, z};
                        kernel();
                        // a thread that returned early still counts at the block's barrier
                        // (kernels return early only after their last barrier)
                    });
                for (auto& thread : running) thread.join();
            }
}
}  // namespace cuda_on_cpu

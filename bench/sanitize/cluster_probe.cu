// The exchange of src/vram/linalg/kernels/lu.cu's cluster panels alone, in the forms whose
// treatment by compute-sanitizer tells a kernel bug from a tool that cannot follow the copy.
//
// A cluster of 8 blocks of 128 threads (as ``panel<float, 8, 128, 1, 32>``) exchanges, once a
// column for 32 columns, one 144-byte offer a block (``Offer<float, 32>``): every block sends
// its offer into slot ``rank`` of every block's inbox, and every block then checks that its
// inbox holds every block's offer of that column. FORM (a -D define) picks how:
//
//   0 lu                  lu.cu's sequence: the inbox slot and the mbarrier mapped into the
//                         receiver with mapa.shared::cluster from this block's shared::cta
//                         address, one cp.async.bulk.shared::cluster.shared::cta each, the
//                         block's own offer included; the cluster barrier before leaving
//   1 lu_no_exit_barrier  the same without that last barrier (lu.cu as the issue ran it)
//   2 lu_remote           lu's copies to the other blocks only; the own offer by plain stores
//   3 cccl                the addresses as NVIDIA's C++ API makes them (cooperative_groups'
//                         map_shared_rank, a generic address, then cvta to shared: what
//                         cuda::ptx::cp_async_bulk does with it), copied by cuda::ptx where
//                         the header is there
//   4 st_async            16-byte st.async.shared::cluster stores counted on the same mbarrier
//   5 dsmem               plain stores through map_shared_rank and a cluster barrier a column
//                         (the CUDA programming guide's distributed shared memory)
//   6 unmapped            control: lu's copy given this block's shared::cta addresses where
//                         shared::cluster ones are due (the issue's hypothesis); the offers
//                         then land in the sender's own inbox
//
// The program prints one line (the form, whether it ran, how many checked values were wrong)
// and exits 0 (all delivered), 3 (values wrong), 4 (a CUDA error) or 5 (not sm_90).
// bench/sanitize/cluster_probe.py builds each form and runs it bare and under the tools.

#include <cooperative_groups.h>
#if defined(__has_include)
#if __has_include(<cuda/ptx>)
#include <cuda/ptx>
#define PROBE_CUDA_PTX 1
#endif
#endif

#ifndef FORM
#define FORM 0
#endif

namespace probe {

namespace cg = cooperative_groups;
typedef long long i64;
typedef unsigned long long u64;

constexpr int LU = 0, LU_NO_EXIT_BARRIER = 1, LU_REMOTE = 2, CCCL = 3, ST_ASYNC = 4, DSMEM = 5,
              UNMAPPED = 6;
constexpr int CLUSTER = 8;
constexpr int CLUSTERS = 2;
constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int NB = 32;
constexpr int COLUMNS = 32;
constexpr bool MBARRIERS = FORM != DSMEM;

struct alignas(16) Offer {  // lu.cu's Offer<float, 32>: 144 bytes
    float row[NB];
    float key;
    i64 place;
};
static_assert(sizeof(Offer) == 144, "an offer is lu.cu's");

__device__ __forceinline__ unsigned shared_address(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// lu.cu's in_block: this block's shared address as the same variable of block ``rank``
__device__ __forceinline__ unsigned in_block(const void* p, unsigned rank) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(out)
                 : "r"(shared_address(p)), "r"(rank));
    return out;
}

// lu.cu's send
__device__ __forceinline__ void send(unsigned to, const void* from, unsigned bytes, unsigned bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes"
        " [%0], [%1], %2, [%3];" ::"r"(to), "r"(shared_address(from)), "r"(bytes), "r"(bar)
        : "memory");
}

__device__ __forceinline__ void fence_for_copies() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_init(u64* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_expect(u64* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 ::"r"(shared_address(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_wait(u64* bar, unsigned parity) {
    asm volatile(
        "{\n\t.reg .pred done;\n\t"
        "WAIT:\n\t"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
        "@!done bra WAIT;\n\t}" ::"r"(shared_address(bar)), "r"(parity) : "memory");
}

__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// the cccl form's copy: ``to`` and ``bar`` are generic addresses in the receiving block
__device__ __forceinline__ void send_cccl(void* to, const Offer* from, u64* bar) {
#ifdef PROBE_CUDA_PTX
    cuda::ptx::cp_async_bulk(cuda::ptx::space_cluster, cuda::ptx::space_shared, to, from,
                             (unsigned)sizeof(Offer),
                             reinterpret_cast<cuda::std::uint64_t*>(bar));
#else  // what cuda::ptx::cp_async_bulk does with them (its __as_ptr_remote_dsmem)
    send((unsigned)__cvta_generic_to_shared(to), from, sizeof(Offer),
         (unsigned)__cvta_generic_to_shared(bar));
#endif
}

// 16 bytes of ``from`` stored into ``to`` of another block, counted on its mbarrier ``bar``
__device__ __forceinline__ void st_async16(unsigned to, const unsigned* from, unsigned bar) {
    asm volatile(
        "st.async.weak.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], "
        "{%1, %2, %3, %4}, [%5];" ::"r"(to), "r"(from[0]), "r"(from[1]), "r"(from[2]),
        "r"(from[3]), "r"(bar)
        : "memory");
}

__device__ __forceinline__ float value(unsigned rank, int c, int j) {
    return (float)(rank * 10000 + c * 100 + j);
}

__global__ void __launch_bounds__(THREADS) exchange(int* wrong) {
    // lu.cu's shared variables, in its order
    __shared__ Offer offers[2][WARPS];
    __shared__ Offer inbox[2][CLUSTER];
    __shared__ u64 arrived[2];

    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = blockIdx.x % CLUSTER;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (MBARRIERS && tid == 0) {
        mbarrier_init(&arrived[0]);
        mbarrier_init(&arrived[1]);
    }
    cluster_arrive();
    cluster_wait();

    for (int c = 0; c < COLUMNS; ++c) {
        const int buf = c & 1;
        if (lane == 0) {  // every warp's offer, as lu.cu's warps write theirs
            Offer& mine = offers[buf][warp];
            for (int j = 0; j < NB; ++j) mine.row[j] = value(rank, c, j) + (float)warp;
            mine.key = (float)(rank + c);
            mine.place = (i64)rank * 1000 + c;
            if (MBARRIERS) fence_for_copies();
        }
        __syncthreads();
        const Offer* best = &offers[buf][0];
        const unsigned bytes = sizeof(Offer);
        if (warp == 0) {
            if (FORM == LU || FORM == LU_NO_EXIT_BARRIER) {
                if (lane == 0) mbarrier_expect(&arrived[buf], CLUSTER * bytes);
                if (lane < CLUSTER) {
                    send(in_block(&inbox[buf][rank], lane), best, bytes,
                         in_block(&arrived[buf], lane));
                }
            } else if (FORM == LU_REMOTE) {
                if (lane == (int)rank) inbox[buf][rank] = *best;
                __syncwarp();
                if (lane == 0) mbarrier_expect(&arrived[buf], (CLUSTER - 1) * bytes);
                if (lane < CLUSTER && lane != (int)rank) {
                    send(in_block(&inbox[buf][rank], lane), best, bytes,
                         in_block(&arrived[buf], lane));
                }
            } else if (FORM == CCCL) {
                if (lane == 0) mbarrier_expect(&arrived[buf], CLUSTER * bytes);
                if (lane < CLUSTER) {
                    send_cccl(cluster.map_shared_rank(&inbox[buf][rank], lane), best,
                              cluster.map_shared_rank(&arrived[buf], lane));
                }
            } else if (FORM == ST_ASYNC) {
                if (lane == 0) mbarrier_expect(&arrived[buf], CLUSTER * bytes);
                constexpr int CHUNKS = sizeof(Offer) / 16;
                for (int e = lane; e < CLUSTER * CHUNKS; e += 32) {
                    const unsigned to = e / CHUNKS, chunk = e % CHUNKS;
                    const unsigned* from = reinterpret_cast<const unsigned*>(best) + 4 * chunk;
                    st_async16(in_block(&inbox[buf][rank], to) + 16 * chunk, from,
                               in_block(&arrived[buf], to));
                }
            } else if (FORM == DSMEM) {
                constexpr int CHUNKS = sizeof(Offer) / 16;
                for (int e = lane; e < CLUSTER * CHUNKS; e += 32) {
                    const unsigned to = e / CHUNKS, chunk = e % CHUNKS;
                    float4* there = reinterpret_cast<float4*>(
                                        cluster.map_shared_rank(&inbox[buf][rank], to)) +
                                    chunk;
                    *there = reinterpret_cast<const float4*>(best)[chunk];
                }
            } else if (FORM == UNMAPPED) {
                if (lane == 0) mbarrier_expect(&arrived[buf], CLUSTER * bytes);
                if (lane < CLUSTER) {
                    send(shared_address(&inbox[buf][rank]), best, bytes,
                         shared_address(&arrived[buf]));
                }
            }
        }
        if (MBARRIERS) {
            mbarrier_wait(&arrived[buf], (unsigned)(c >> 1) & 1u);
        } else {
            cluster_arrive();
            cluster_wait();
        }
        // every block's offer of this column, from every block
        for (int e = tid; e < CLUSTER * NB; e += THREADS) {
            const int v = e / NB, j = e % NB;
            bool right = inbox[buf][v].row[j] == value(v, c, j);
            if (j == 0) {
                right = right && inbox[buf][v].key == (float)(v + c);
                right = right && inbox[buf][v].place == (i64)v * 1000 + c;
            }
            if (!right) atomicAdd(wrong, 1);
        }
    }
    if (FORM != LU_NO_EXIT_BARRIER) {
        cluster_arrive();
        cluster_wait();
    }
}

constexpr const char* NAMES[] = {"lu",    "lu_no_exit_barrier", "lu_remote", "cccl",
                                 "st_async", "dsmem",          "unmapped"};

}  // namespace probe

#ifndef __CUDACC_RTC__
#include <cstdio>

int main() {
    using namespace probe;
    const char* name = NAMES[FORM];
    int major = 0;
    cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (err != cudaSuccess) {
        std::printf("form %s: %s (%s)\n", name, cudaGetErrorName(err), cudaGetErrorString(err));
        return 4;
    }
    if (major < 9) {
        std::printf("form %s: needs compute capability 9.0 (clusters), this GPU has %d.x\n", name,
                    major);
        return 5;
    }
    int* wrong = nullptr;
    err = cudaMalloc(&wrong, sizeof(int));
    if (err == cudaSuccess) err = cudaMemset(wrong, 0, sizeof(int));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(CLUSTER * CLUSTERS);
    config.blockDim = dim3(THREADS);
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = CLUSTER;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    if (err == cudaSuccess) err = cudaLaunchKernelEx(&config, exchange, wrong);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    int count = -1;
    if (err == cudaSuccess) err = cudaMemcpy(&count, wrong, sizeof(int), cudaMemcpyDeviceToHost);
    const int checked = CLUSTER * CLUSTERS * COLUMNS * CLUSTER * NB;
#ifdef PROBE_CUDA_PTX
    const char* via = "cuda::ptx";
#else
    const char* via = "its expansion (no <cuda/ptx>)";
#endif
    if (err != cudaSuccess) {
        std::printf("form %s: %s (%s)\n", name, cudaGetErrorName(err), cudaGetErrorString(err));
        return 4;
    }
    std::printf("form %s: ran, %d of %d values wrong%s%s\n", name, count, checked,
                FORM == CCCL ? "; copied by " : "", FORM == CCCL ? via : "");
    return count == 0 ? 0 : 3;
}
#endif

// Fused scaled dot product attention, forward (FlashAttention-2's algorithm) for __half and
// __nv_bfloat16 with head dim D of 64 or 128, on tensor cores (mma.sync m16n8k16, fp32
// accumulators).
//
// A block takes BM = 64 * MT query rows of one (batch, head): four warps of 16 * MT rows.
// The rows' Q tile is loaded once into shared memory and from there into registers (MMA
// A fragments). K and V are streamed in tiles of BN = 64 keys through shared memory with
// cp.async: V's tile loads while S = Q K^T is computed, the next K's while O += P V is, so
// each tile's load hides behind the other's math (FlashAttention-2's order). Per row the
// running max and sum of exp2 (fp32, the log2(e) factor folded into the scale) rescale O
// as the max grows (online softmax); O is divided by the sum at the end.
//
// Shared memory tiles are rows of D elements in 16-byte chunks, chunk c of row r stored at
// c ^ (r & 7): the eight rows an ldmatrix reads land in eight different bank groups.
//
// Masks (PyTorch's semantics): keys past S do not take part; CAUSAL keeps key j <= row i
// (top-left aligned); MASK 1 is a bool mask (true takes part), MASK 2 an additive float
// mask of type M; both are read through four strides, so any broadcast costs nothing. A
// row with no key taking part gives zeros (PyTorch's safe softmax).
//
// Every pointer and row stride of q, k, v and o is 16-byte aligned (the plan checks).

namespace vram {
namespace attention {

struct Shape {
    long long q[3];  // strides in elements: batch, head, row
    long long k[3];
    long long v[3];
    long long o[3];
    long long m[4];  // mask: batch, head, row, column
    int heads;       // query heads (the grid's x is batch * heads)
    int group_k;     // query heads per key head (grouped-query attention; 1 otherwise)
    int group_v;     // query heads per value head
    int rows;        // L
    int keys;        // S
};

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockN = 64;                // keys per tile
constexpr float kLog2e = 1.4426950408889634f;
#define kMinusInf __int_as_float(0xff800000)

__device__ inline unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, or 16 zero bytes when !valid (nothing is read).
__device__ inline void copy16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
                 "l"(src), "r"(valid ? 16 : 0));
}
__device__ inline void commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ inline void wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ inline void ldmatrix4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}
__device__ inline void ldmatrix4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
}

// c[16x8] += a[16x16] * b[16x8], fp32 accumulators.
template <typename T>
__device__ inline void mma(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (IsSame<T, __nv_bfloat16>::value) {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// 2^x in one MUFU instruction (exp2f adds a denormal fixup the softmax does not need):
// -inf gives 0; results below 2^-126 flush to 0.
__device__ inline float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two floats as a pair of T in one register (the first in the low half).
template <typename T> __device__ inline unsigned pack(float lo, float hi) {
    if constexpr (IsSame<T, __nv_bfloat16>::value) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
}

// The element offset of chunk ``chunk`` (8 elements) of row ``row`` in a swizzled tile.
template <int D> __device__ inline int swizzle(int row, int chunk) {
    return row * D + ((chunk ^ (row & 7)) << 3);
}

// ROWS rows of D elements from ``g`` (row stride ``stride``), rows first.. of which those
// below ``limit`` exist, into the swizzled tile ``s``; missing rows become zeros.
template <typename T, int ROWS, int D>
__device__ inline void load_tile(T* s, const T* g, long long stride, int first, int limit) {
    constexpr int kChunks = D / 8;
    static_assert((ROWS * kChunks) % kThreads == 0, "a tile is whole rounds of 16-byte chunks");
#pragma unroll
    for (int i = 0; i < ROWS * kChunks / kThreads; ++i) {
        const int at = threadIdx.x + i * kThreads;
        const int r = at / kChunks, c = at % kChunks;
        const bool valid = first + r < limit;
        const T* src = g + static_cast<long long>(valid ? first + r : first) * stride + c * 8;
        copy16(s + swizzle<D>(r, c), src, valid);
    }
}

// The A fragment of Q's rows first..first + 15, columns 16 * ks.. (ldmatrix: lanes 0-15 give
// rows 0-15 of the left 8 columns, lanes 16-31 of the right 8).
template <int D, typename T>
__device__ inline void load_q(unsigned (&a)[4], const T* sq, int first, int ks, int lane) {
    const int r = first + (lane & 7) + ((lane >> 3) & 1) * 8;
    ldmatrix4(a, sq + swizzle<D>(r, ks * 2 + (lane >> 4)));
}

template <typename M> __device__ inline float mask_value(const M* p) {
    if constexpr (IsSame<M, bool>::value) return *p ? 0.0f : kMinusInf;
    else return widen(*p) * kLog2e;
}

template <typename T, typename M, int MASK, bool CAUSAL, int D, int MT>
__global__ void __launch_bounds__(kThreads)
    forward(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
            T* __restrict__ o, const M* __restrict__ mask, float scale, Shape shape) {
    static_assert(D == 64 || D == 128, "head dim 64 or 128");
    constexpr int BM = 16 * MT * kWarps;   // query rows of the block
    constexpr int BN = kBlockN;
    constexpr int NT = BN / 8;             // 8-key column tiles of S
    constexpr int DT = D / 8;              // 8-wide column tiles of O
    constexpr int KS = D / 16;             // k steps of Q K^T
    __shared__ __align__(128) T sq[BM * D];
    __shared__ __align__(128) T sk[BN * D];
    __shared__ __align__(128) T sv[BN * D];

    const int L = shape.rows, S = shape.keys;
    const int b = blockIdx.x / shape.heads, h = blockIdx.x % shape.heads;
    const int m0 = (gridDim.y - 1 - blockIdx.y) * BM;  // the longest (causal) blocks first
    const T* qg = q + b * shape.q[0] + h * shape.q[1];
    const T* kg = k + b * shape.k[0] + (h / shape.group_k) * shape.k[1];
    const T* vg = v + b * shape.v[0] + (h / shape.group_v) * shape.v[1];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;  // the MMA fragments' row group and column pair
    const int wrow = warp * 16 * MT;        // the warp's first row in the block

    const int row0 = m0 + wrow + g;  // the row of this thread's first accumulator elements
    const M* mask_bh = MASK != 0 ? mask + b * shape.m[0] + h * shape.m[1] : mask;

    const int n_end = CAUSAL ? min(S, m0 + BM) : S;
    const int n_blocks = (n_end + BN - 1) / BN;
    const float scale_log2 = scale * kLog2e;

    load_tile<T, BM, D>(sq, qg, shape.q[2], m0, L);
    load_tile<T, BN, D>(sk, kg, shape.k[2], 0, S);
    commit();

    // Q's A fragments: all of them kept (head dim 64), or each k step's reloaded (128)
    constexpr bool kQInRegisters = D == 64;
    unsigned qf[MT][kQInRegisters ? KS : 1][4];
    float acc[MT][DT][4];
    float row_max[MT][2], row_sum[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < DT; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;
        row_max[mt][0] = row_max[mt][1] = kMinusInf;
        row_sum[mt][0] = row_sum[mt][1] = 0.0f;
    }

    for (int nb = 0; nb < n_blocks; ++nb) {
        const int n0 = nb * BN;
        wait_all();
        __syncthreads();  // K's tile (and Q's) arrived; every warp is done with V's tile
        load_tile<T, BN, D>(sv, vg, shape.v[2], n0, S);
        commit();
        if constexpr (kQInRegisters) {
            if (nb == 0) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                    for (int ks = 0; ks < KS; ++ks) load_q<D>(qf[mt][ks], sq, wrow + mt * 16, ks, lane);
                }
            }
        }

        // S = Q K^T
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int j = 0; j < NT; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
        }
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            if constexpr (!kQInRegisters) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) load_q<D>(qf[mt][0], sq, wrow + mt * 16, ks, lane);
            }
#pragma unroll
            for (int jp = 0; jp < NT / 2; ++jp) {
                unsigned kf[4];
                const int r = jp * 16 + (lane & 7) + (lane >> 4) * 8;
                ldmatrix4(kf, sk + swizzle<D>(r, ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma<T>(s[mt][2 * jp], qf[mt][kQInRegisters ? ks : 0], kf[0], kf[1]);
                    mma<T>(s[mt][2 * jp + 1], qf[mt][kQInRegisters ? ks : 0], kf[2], kf[3]);
                }
            }
        }

        // scale, mask, online softmax
        const bool edge = n0 + BN > S || (CAUSAL && n0 + BN - 1 > m0);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int i = row0 + mt * 16 + 8 * r;  // this element's row
                const M* mask_row = mask_bh;
                if constexpr (MASK != 0) mask_row += (i < L ? i : L - 1) * shape.m[2];
                float top = kMinusInf;
#pragma unroll
                for (int j = 0; j < NT; ++j) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int col = n0 + j * 8 + 2 * t + e;
                        float x = s[mt][j][2 * r + e] * scale_log2;
                        if constexpr (MASK != 0) {
                            if (col < S) x += mask_value(mask_row + col * shape.m[3]);
                        }
                        if (edge && (col >= S || (CAUSAL && col > i))) x = kMinusInf;
                        s[mt][j][2 * r + e] = x;
                        top = fmaxf(top, x);
                    }
                }
                top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
                top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
                const float now = fmaxf(row_max[mt][r], top);
                const float base = now == kMinusInf ? 0.0f : now;  // no key yet: exp2(-inf) = 0
                const float rescale = fast_exp2(row_max[mt][r] - base);
                row_max[mt][r] = now;
                float sum = 0.0f;
#pragma unroll
                for (int j = 0; j < NT; ++j) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float p = fast_exp2(s[mt][j][2 * r + e] - base);
                        s[mt][j][2 * r + e] = p;
                        sum += p;
                    }
                }
                row_sum[mt][r] = row_sum[mt][r] * rescale + sum;
#pragma unroll
                for (int j = 0; j < DT; ++j) {
                    acc[mt][j][2 * r] *= rescale;
                    acc[mt][j][2 * r + 1] *= rescale;
                }
            }
        }

        wait_all();
        __syncthreads();  // V's tile arrived; every warp is done with K's tile
        if (nb + 1 < n_blocks) load_tile<T, BN, D>(sk, kg, shape.k[2], n0 + BN, S);
        commit();

        // O += P V
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            unsigned pf[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                pf[mt][0] = pack<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pf[mt][1] = pack<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pf[mt][2] = pack<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pf[mt][3] = pack<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < DT / 2; ++dp) {
                unsigned vf[4];
                const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                ldmatrix4_trans(vf, sv + swizzle<D>(r, dp * 2 + (lane >> 4)));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma<T>(acc[mt][2 * dp], pf[mt], vf[0], vf[1]);
                    mma<T>(acc[mt][2 * dp + 1], pf[mt], vf[2], vf[3]);
                }
            }
        }
    }

    if (n_blocks == 0) {  // no key (the plan launches none such): Q's loads still land
        wait_all();
        __syncthreads();
    }
    // O / sum, through the warp's own rows of Q's tile, out in 16-byte stores
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float sum = row_sum[mt][r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // no key took part: zeros
            const int rr = wrow + mt * 16 + g + 8 * r;
#pragma unroll
            for (int j = 0; j < DT; ++j) {
                const unsigned packed = pack<T>(acc[mt][j][2 * r] * inv, acc[mt][j][2 * r + 1] * inv);
                *reinterpret_cast<unsigned*>(sq + swizzle<D>(rr, j) + 2 * t) = packed;
            }
        }
    }
    __syncwarp();
    constexpr int kChunks = D / 8;
    T* og = o + b * shape.o[0] + h * shape.o[1];
#pragma unroll
    for (int i = 0; i < 16 * MT * kChunks / 32; ++i) {
        const int at = lane + i * 32;
        const int r = at / kChunks, c = at % kChunks;
        const int i_row = m0 + wrow + r;
        if (i_row < L) {
            const uint4 value = *reinterpret_cast<const uint4*>(sq + swizzle<D>(wrow + r, c));
            *reinterpret_cast<uint4*>(og + i_row * shape.o[2] + c * 8) = value;
        }
    }
}

}  // namespace attention
}  // namespace vram

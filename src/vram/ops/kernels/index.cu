// Indexing, joining and range kernels (PyTorch's cuda/IndexKernel.cu, ScatterGatherKernel.cu,
// Shape.cu, TriangularOps.cu, Nonzero.cu, RangeFactories.cu). Python puts common.cuh in front.
//
// - gather / scatter: one loop over an iteration shape for every op that reads or writes
//   through index tensors (index_select, gather, t[idx], scatter, scatter_add, index_put_).
//   Per element: the offsets of the operands (the output or destination, the source, K
//   index tensors) from their strides over the iteration shape (`Offsets`, innermost dim
//   first), then each index value (wrapped when negative if WRAP, checked against the size of
//   the dimension it indexes) times that dimension's stride is added to the indexed
//   operand's offset. A bad index stops the kernel with a device-side assert, as PyTorch's.
// - cat_rows: many contiguous inputs into one contiguous output in one launch, an input per
//   blockIdx.y, each a [rows, len] block at column `col` of [rows, row] output rows.
// - triangle: tril / triu over any strides (dimension 0 of `Offsets` the columns, 1 the rows).
// - count_blocks, scan_counts, compact: nonzero and masked_select in three launches: each
//   block counts the set elements of its chunk, one block turns the counts into starts (and
//   the total, which the host reads), then each block writes its chunk's hits in order.
// - linspace: PyTorch's formula (from the start below the halfway point, from the end after).

namespace vram {
namespace index {

constexpr int kMaxDims = 16;  // dimensions of an iteration shape (MAX_DIMS in _iterator.py)
constexpr int kBlock = 256;   // threads per block of every kernel but scan_counts
constexpr int kScanBlock = 1024;

// Python packs this struct with NumPy (ops/_index_plans.py: offsets_dtype); keep both in step.
template <typename Index, int N> struct Offsets {
    Index sizes[kMaxDims];
    Index strides[kMaxDims][N];
    int ndim;
};

template <typename T, int K> struct Pointers {
    T* p[K];
};

// Per index tensor: the size of the dimension it indexes and that dimension's stride.
template <int K> struct Indexed {
    long long sizes[K];
    long long strides[K];
};

extern "C" __device__ void __assertfail(const char* message, const char* file, unsigned line,
                                        const char* function, size_t char_size);

__device__ __noinline__ void index_out_of_bounds() {
    __assertfail("index out of bounds", "vram/ops/kernels/index.cu", __LINE__, "vram::index", 1);
}

__device__ inline long long first_index() {
    return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline long long grid_stride() {
    return static_cast<long long>(gridDim.x) * blockDim.x;
}

// The operands' offsets of element i; where ``inner`` is given, i's indices along dimensions
// 0 and 1 too (the columns and rows of tril / triu).
template <typename Index, int N>
__device__ inline void offsets(const Offsets<Index, N>& l, long long i, Index (&o)[N],
                               Index* inner = nullptr) {
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = 0;
    Index rest = static_cast<Index>(i);
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
        if (d == l.ndim) break;
        const Index size = l.sizes[d];
        const Index next = rest / size;
        const Index at = rest - next * size;
        rest = next;
        if (inner != nullptr && d < 2) inner[d] = at;
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] += at * l.strides[d][k];
    }
}

// The element offset an operand reaches through the index values at `o[2..]`.
template <typename I, int K, typename Index, bool WRAP>
__device__ inline long long indexed(long long at, const Pointers<const I, K>& idx,
                                    const Index (&o)[K + 2], const Indexed<K>& ix) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
        long long v = static_cast<long long>(idx.p[k][o[2 + k]]);
        if (WRAP && v < 0) v += ix.sizes[k];
        if (v < 0 || v >= ix.sizes[k]) index_out_of_bounds();
        at += v * ix.strides[k];
    }
    return at;
}

// out[o0] = src[o1 + sum_k idx_k[o_k] * stride_k]
template <typename T, typename I, int K, typename Index, bool WRAP>
__global__ void __launch_bounds__(kBlock)
    gather(T* __restrict__ out, const T* __restrict__ src, Pointers<const I, K> idx, long long n,
           Offsets<Index, K + 2> l, Indexed<K> ix) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        Index o[K + 2];
        offsets(l, i, o);
        out[o[0]] = src[indexed<I, K, Index, WRAP>(o[1], idx, o, ix)];
    }
}

// ---- atomics for scatter_add, index_put_(accumulate=True) and reduce="multiply" -------------
template <int S> struct Unsigned;
template <> struct Unsigned<1> { using type = unsigned char; };
template <> struct Unsigned<2> { using type = unsigned short; };
template <> struct Unsigned<4> { using type = unsigned int; };
template <> struct Unsigned<8> { using type = unsigned long long; };

template <typename To, typename From> __device__ inline To bits_as(From x) {
    static_assert(sizeof(To) == sizeof(From), "a reinterpretation keeps the size");
    To y;
    memcpy(&y, &x, sizeof(To));
    return y;
}

// *address = f(*address), atomically, by compare-and-swap of the word that holds it (the
// aligned 4-byte word around a 1- or 2-byte element).
template <typename T, typename F> __device__ inline void atomic_update(T* address, F f) {
    using U = typename Unsigned<sizeof(T)>::type;
    if constexpr (sizeof(T) >= 4) {
        U* word = reinterpret_cast<U*>(address);
        U old = *word, assumed;
        do {
            assumed = old;
            old = atomicCAS(word, assumed, bits_as<U>(f(bits_as<T>(assumed))));
        } while (assumed != old);
    } else {
        const size_t at = reinterpret_cast<size_t>(address);
        unsigned int* word = reinterpret_cast<unsigned int*>(at & ~static_cast<size_t>(3));
        const unsigned int shift = static_cast<unsigned int>(at & 3) * 8;
        const unsigned int mask = ((1u << (8 * sizeof(T))) - 1u) << shift;
        unsigned int old = *word, assumed;
        do {
            assumed = old;
            const U now = static_cast<U>((assumed & mask) >> shift);
            const U next = bits_as<U>(f(bits_as<T>(now)));
            old = atomicCAS(word, assumed,
                            (assumed & ~mask) | (static_cast<unsigned int>(next) << shift));
        } while (assumed != old);
    }
}

template <typename T> __device__ inline void atomic_add(T* address, T value) {
    if constexpr (IsSame<T, float>::value || IsSame<T, double>::value ||
                  IsSame<T, int>::value || IsSame<T, __half>::value ||
                  IsSame<T, __nv_bfloat16>::value) {
        atomicAdd(address, value);
    } else if constexpr (IsSame<T, long long>::value) {
        atomicAdd(reinterpret_cast<unsigned long long*>(address),
                  static_cast<unsigned long long>(value));
    } else if constexpr (IsComplex<T>::value) {
        atomicAdd(&address->re, value.re);
        atomicAdd(&address->im, value.im);
    } else if constexpr (IsSame<T, bool>::value) {
        atomic_update(address, [value](bool x) { return x || value; });
    } else {  // 8- and 16-bit integers
        atomic_update(address, [value](T x) { return static_cast<T>(x + value); });
    }
}

template <typename T> __device__ inline void atomic_mul(T* address, T value) {
    using C = typename OpMath<T>::type;
    if constexpr (IsSame<T, bool>::value) {
        atomic_update(address, [value](bool x) { return x && value; });
    } else {
        atomic_update(address, [value](T x) { return convert<T>(convert<C>(x) * convert<C>(value)); });
    }
}

constexpr int kAssign = 0, kAdd = 1, kMultiply = 2;

// dst[o0 + sum_k idx_k[o_k] * stride_k] (=, +=, *=) src[o1]
template <typename T, typename I, int K, typename Index, int MODE, bool WRAP>
__global__ void __launch_bounds__(kBlock)
    scatter(T* dst, const T* __restrict__ src, Pointers<const I, K> idx, long long n,
            Offsets<Index, K + 2> l, Indexed<K> ix) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        Index o[K + 2];
        offsets(l, i, o);
        T* at = dst + indexed<I, K, Index, WRAP>(o[0], idx, o, ix);
        const T value = src[o[1]];
        if constexpr (MODE == kAssign) *at = value;
        else if constexpr (MODE == kAdd) atomic_add(at, value);
        else atomic_mul(at, value);
    }
}

// ---- cat ----------------------------------------------------------------------------------------
template <int N> struct Places {
    long long len[N];  // elements of a row of input k
    long long col[N];  // where that row starts in an output row
};

// Long rows go a tile of kBlock units at a time (one division a tile); short ones an element a
// thread (one division an element, in 32 bits where the block of the input fits them).
template <typename U, int N>
__global__ void __launch_bounds__(kBlock)
    cat_rows(U* __restrict__ out, Pointers<const U, N> in, long long rows, long long row,
             Places<N> at) {
    const int k = blockIdx.y;
    const long long len = at.len[k];
    const U* __restrict__ src = in.p[k];
    U* __restrict__ dst = out + at.col[k];
    if (len >= kBlock / 2) {
        const long long per_row = (len + kBlock - 1) / kBlock;
        const long long tiles = rows * per_row;
        for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
            const long long r = t / per_row;
            const long long c = (t - r * per_row) * kBlock + threadIdx.x;
            if (c < len) dst[r * row + c] = src[r * len + c];
        }
        return;
    }
    const long long total = rows * len;
    if (total <= 0x7fffffffLL) {
        const unsigned int n = static_cast<unsigned int>(len);
        for (long long i = first_index(); i < total; i += grid_stride()) {
            const unsigned int j = static_cast<unsigned int>(i);
            const unsigned int r = j / n;
            dst[static_cast<long long>(r) * row + (j - r * n)] = src[i];
        }
        return;
    }
    for (long long i = first_index(); i < total; i += grid_stride()) {
        const long long r = i / len;
        dst[r * row + (i - r * len)] = src[i];
    }
}

// ---- tril / triu --------------------------------------------------------------------------------
template <typename U, typename Index, bool UPPER>
__global__ void __launch_bounds__(kBlock)
    triangle(U* out, const U* in, long long n, long long diagonal, Offsets<Index, 2> l) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        Index o[2], at[2];  // at: the column and the row
        offsets(l, i, o, at);
        const long long band = static_cast<long long>(at[0]) - static_cast<long long>(at[1]);
        const bool keep = UPPER ? band >= diagonal : band <= diagonal;
        out[o[0]] = keep ? in[o[1]] : U{};
    }
}

// ---- nonzero and masked_select ------------------------------------------------------------------
// Operand 0 of `l` is the mask (or the tensor nonzero reads), operand 1 the values masked_select
// copies; the dimensions are in row-major order (innermost first), never merged, so that the
// hits come out in PyTorch's order and a hit's coordinates are its indices along them.
template <typename T, typename Index>
__global__ void __launch_bounds__(kBlock)
    count_blocks(const T* __restrict__ mask, long long n, long long chunk, Offsets<Index, 2> l,
                 long long* __restrict__ counts) {
    __shared__ long long warps[kBlock / 32];
    const long long begin = static_cast<long long>(blockIdx.x) * chunk;
    const long long end = min(n, begin + chunk);
    long long mine = 0;
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
        Index o[2];
        offsets(l, i, o);
        mine += convert<bool>(mask[o[0]]) ? 1 : 0;
    }
#pragma unroll
    for (int lane = 16; lane > 0; lane /= 2) mine += __shfl_down_sync(0xffffffffu, mine, lane);
    if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
        long long total = 0;
        for (int w = 0; w < kBlock / 32; ++w) total += warps[w];
        counts[blockIdx.x] = total;
    }
}

// counts[0..blocks) -> their exclusive prefix sums; counts[blocks] = the total. One block.
__global__ void __launch_bounds__(kScanBlock) scan_counts(long long* counts, long long blocks) {
    __shared__ long long warps[kScanBlock / 32];
    const long long per = (blocks + kScanBlock - 1) / kScanBlock;
    const long long begin = min(blocks, threadIdx.x * per);
    const long long end = min(blocks, begin + per);
    long long mine = 0;
    for (long long i = begin; i < end; ++i) mine += counts[i];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    long long inclusive = mine;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const long long up = __shfl_up_sync(0xffffffffu, inclusive, d);
        if (lane >= d) inclusive += up;
    }
    if (lane == 31) warps[warp] = inclusive;
    __syncthreads();
    long long before = inclusive - mine;
    for (int w = 0; w < warp; ++w) before += warps[w];
    __syncthreads();
    for (long long i = begin; i < end; ++i) {
        const long long c = counts[i];
        counts[i] = before;
        before += c;
    }
    if (threadIdx.x == kScanBlock - 1) counts[blocks] = before;
}

// Each block walks its chunk a tile of kBlock elements at a time; a hit's place is the
// block's start, the hits of earlier tiles, of earlier warps and of earlier lanes.
template <typename T, typename Index, typename Emit>
__device__ inline void compact_chunk(const T* __restrict__ mask, long long n, long long chunk,
                                     const Offsets<Index, 2>& l, long long place, Emit emit) {
    __shared__ int warps[kBlock / 32];
    const long long begin = static_cast<long long>(blockIdx.x) * chunk;
    const long long end = min(n, begin + chunk);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long tile = begin; tile < end; tile += kBlock) {
        const long long i = tile + threadIdx.x;
        Index o[2] = {0, 0};
        bool hit = false;
        if (i < end) {
            offsets(l, i, o);
            hit = convert<bool>(mask[o[0]]);
        }
        const unsigned int ballot = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) warps[warp] = __popc(ballot);
        __syncthreads();
        int before = __popc(ballot & ((1u << lane) - 1u)), total = 0;
#pragma unroll
        for (int w = 0; w < kBlock / 32; ++w) {
            before += w < warp ? warps[w] : 0;
            total += warps[w];
        }
        if (hit) emit(place + before, i, o);
        place += total;
        __syncthreads();
    }
}

// The coordinates of every nonzero element: out[hit][d], hits in row-major order.
template <typename T, typename Index>
__global__ void __launch_bounds__(kBlock)
    nonzero(const T* __restrict__ in, long long n, long long chunk, Offsets<Index, 2> l,
            const long long* __restrict__ starts, long long* __restrict__ out) {
    const int ndim = l.ndim;
    compact_chunk(in, n, chunk, l, starts[blockIdx.x], [&](long long at, long long i, Index (&)[2]) {
        long long rest = i;
        for (int d = 0; d < ndim; ++d) {
            const long long size = l.sizes[d];
            out[at * ndim + (ndim - 1 - d)] = rest % size;
            rest /= size;
        }
    });
}

// The values where the mask is set, in row-major order.
template <typename U, typename Index>
__global__ void __launch_bounds__(kBlock)
    masked_select(const bool* __restrict__ mask, const U* __restrict__ values, long long n,
                  long long chunk, Offsets<Index, 2> l, const long long* __restrict__ starts,
                  U* __restrict__ out) {
    compact_chunk(mask, n, chunk, l, starts[blockIdx.x],
                  [&](long long at, long long, Index (&o)[2]) { out[at] = values[o[1]]; });
}

// ---- linspace and logspace ----------------------------------------------------------------------
// PyTorch's arithmetic: in T for floating and complex T, each step of it rounded to T for
// __half and __nv_bfloat16 (c10::Half's operators), in float for integer T (S is float then).
template <typename T, typename S> __device__ inline S rounded(S x) {
    if constexpr (IsSame<T, __half>::value || IsSame<T, __nv_bfloat16>::value) {
        return widen(convert<T>(x));
    } else {
        return x;
    }
}

template <typename T, typename S, bool LOG>
__global__ void __launch_bounds__(kBlock)
    linspace(T* __restrict__ out, long long n, long long halfway, S start, S end, S step,
             S base) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const bool low = i < halfway;
        const S count = rounded<T>(convert<S>(static_cast<double>(low ? i : n - i - 1)));
        const S offset = rounded<T>(step * count);
        const S value = rounded<T>(low ? start + offset : end - offset);
        if constexpr (LOG) out[i] = convert<T>(m_pow(base, value));
        else out[i] = convert<T>(value);
    }
}

}  // namespace index
}  // namespace vram

// The reductions (PyTorch's Reduce.cuh and SharedReduceOps.h): an op folds the elements of
// each output's reduced range into an accumulator, combines accumulators, and stores the
// result. ops/_reduce.py plans every launch and holds the NumPy reference of each op.
//
// - An op: `acc` its accumulator type; identity(); reduce(acc, x, i) folds element x (of the
//   dtype type D) whose index in the reduced range is i; combine(a, b); store(acc, out,
//   out2, o) writes output o (out2: the indices of max/min/argmax, the mean of var_mean).
//   Fields (mean's factor, var's correction, a norm's p) are packed by Python in order.
// - The input as the plan sees it (ReduceLayout): output o is at offset kept(o), and its
//   r-th reduced element at kept(o) + reduced(r); both are (size, stride) lists innermost
//   first. For the index ops the reduced dims keep the tensor's order, so r is the index
//   torch reports; for the others they are in memory order.
// - reduce_inner: blockDim.x threads share an output and walk its reduced range (16-byte
//   vector loads when the range is contiguous and aligned: VEC > 1, UNROLL of them in
//   flight, folded into ACCS accumulators; INTERLEAVE: the splits take interleaved tiles of
//   the range instead of a chunk each); blockDim.y outputs per block. reduce_outer: blockDim.x threads take consecutive outputs (coalesced when
//   the innermost kept dim is contiguous) and blockDim.y threads split the reduced range,
//   combined through shared memory. gridDim.y > 1 splits the reduced range across blocks:
//   each writes its accumulator to `partials` [outputs, splits] and reduce_partials (a
//   second launch) combines them. Outputs are contiguous: output o is out[o].

namespace vram {

constexpr int kReduceDims = 16;  // dims of each list after coalescing (MAX_REDUCE_DIMS)
constexpr int kUnroll = 4;       // loads in flight per thread of a strided range

// Python packs this struct with NumPy (ops/_reduce.py: layout_dtype); keep both in step.
template <typename Index> struct ReduceLayout {
    Index outputs;  // elements of the output
    Index length;   // elements each output reduces
    Index chunk;    // elements of the reduced range each split takes (a multiple of VEC)
    Index kept_sizes[kReduceDims];
    Index kept_strides[kReduceDims];
    Index red_sizes[kReduceDims];
    Index red_strides[kReduceDims];
    int kept_ndim;
    int red_ndim;
};

template <typename Index>
__device__ inline Index offset_of(Index i, const Index* sizes, const Index* strides, int ndim) {
    if (ndim == 1) return i * strides[0];
    Index offset = 0;
    for (int d = 0; d < ndim; ++d) {
        offset += (i % sizes[d]) * strides[d];
        i /= sizes[d];
    }
    return offset;
}

// ---- helpers on real and complex values -------------------------------------------------------
template <typename A> __device__ inline A one() {
    if constexpr (IsComplex<A>::value) return A{1, 0};
    else return A(1);
}
template <typename V, typename R> __device__ inline V scale(V v, R r) {
    if constexpr (IsComplex<V>::value) return V{v.re * r, v.im * r};
    else return v * r;
}
template <typename V, typename R> __device__ inline V divide(V v, R r) {
    if constexpr (IsComplex<V>::value) return V{v.re / r, v.im / r};
    else return v / r;
}
template <typename V> __device__ inline auto real_dot(V a, V b) {  // Re(a * conj(b))
    if constexpr (IsComplex<V>::value) return a.re * b.re + a.im * b.im;
    else return a * b;
}
template <typename V> __device__ inline auto magnitude(V v) {
    if constexpr (IsComplex<V>::value) {
        if constexpr (IsSame<V, complex64>::value) return hypotf(v.re, v.im);
        else return hypot(v.re, v.im);
    } else {
        return m_fabs(v);
    }
}

// ---- the ops ---------------------------------------------------------------------------------
template <typename A> struct StoresAcc {  // ops whose accumulator is their result
    template <typename Out, typename Out2>
    __device__ void store(A a, Out* out, Out2*, long long o) const {
        out[o] = convert<Out>(a);
    }
};

template <typename A> struct SumOp : StoresAcc<A> {
    using acc = A;
    __device__ A identity() const { return A{}; }
    template <typename X, typename I> __device__ A reduce(A a, X x, I) const {
        return a + convert<A>(x);
    }
    __device__ A combine(A a, A b) const { return a + b; }
};

template <typename A> struct ProdOp : StoresAcc<A> {
    using acc = A;
    __device__ A identity() const { return one<A>(); }
    template <typename X, typename I> __device__ A reduce(A a, X x, I) const {
        return a * convert<A>(x);
    }
    __device__ A combine(A a, A b) const { return a * b; }
};

// PyTorch's MeanOps: the sum times factor = outputs / elements (1 / length).
template <typename A, typename R> struct MeanOp {
    R factor;
    using acc = A;
    __device__ A identity() const { return A{}; }
    template <typename X, typename I> __device__ A reduce(A a, X x, I) const {
        return a + convert<A>(x);
    }
    __device__ A combine(A a, A b) const { return a + b; }
    template <typename Out, typename Out2>
    __device__ void store(A a, Out* out, Out2*, long long o) const {
        out[o] = convert<Out>(scale(a, factor));
    }
};

template <typename A, bool MAX> struct ExtremeOp : StoresAcc<A> {  // amax, amin, max(), min()
    using acc = A;
    __device__ A identity() const { return MAX ? Bounds<A>::lowest() : Bounds<A>::highest(); }
    __device__ A combine(A a, A b) const { return MAX ? max_nan(a, b) : min_nan(a, b); }
    template <typename X, typename I> __device__ A reduce(A a, X x, I) const {
        return combine(a, convert<A>(x));
    }
};

template <typename A> struct ValueIndex {
    A value;
    long long index;  // -1: no element yet
};

// argmax, argmin, and max/min with a dim: the first NaN, else the first extreme value.
template <typename A, bool MAX> struct ArgOp {
    using acc = ValueIndex<A>;
    __device__ acc identity() const {
        return acc{MAX ? Bounds<A>::lowest() : Bounds<A>::highest(), -1};
    }
    __device__ static bool wins(const acc& a, const acc& b) {
        if (b.index < 0) return true;
        if (a.index < 0) return false;
        if (is_nan(a.value)) return !is_nan(b.value) || a.index < b.index;
        if (is_nan(b.value)) return false;
        if (a.value == b.value) return a.index < b.index;
        return MAX ? a.value > b.value : a.value < b.value;
    }
    __device__ acc combine(acc a, acc b) const { return wins(a, b) ? a : b; }
    template <typename X, typename I> __device__ acc reduce(acc a, X x, I i) const {
        return combine(a, acc{convert<A>(x), static_cast<long long>(i)});
    }
    template <typename Out>
    __device__ void store(acc a, Out* out, long long* indices, long long o) const {
        if (out != nullptr) out[o] = convert<Out>(a.value);
        indices[o] = a.index;
    }
};

template <typename V, typename R> struct Welford {
    V mean;
    R m2;
    long long n;
};

// var and std (PyTorch's WelfordOps): V the value type (real or complex), R its real type.
// out2, when given, gets the mean (var_mean, std_mean).
template <typename V, typename R, bool SQRT> struct VarOp {
    R correction;
    using acc = Welford<V, R>;
    __device__ acc identity() const { return acc{V{}, R(0), 0}; }
    template <typename X, typename I> __device__ acc reduce(acc a, X x, I) const {
        const V v = convert<V>(x);
        const long long n = a.n + 1;
        const V delta = v - a.mean;
        const V mean = a.mean + divide(delta, R(n));
        return acc{mean, a.m2 + real_dot(delta, v - mean), n};
    }
    __device__ acc combine(acc a, acc b) const {
        if (a.n == 0) return b;
        if (b.n == 0) return a;
        const long long n = a.n + b.n;
        const R wb = R(b.n) / R(n);
        const V delta = b.mean - a.mean;
        const V mean = a.mean + scale(delta, wb);
        return acc{mean, a.m2 + b.m2 + real_dot(delta, delta) * R(a.n) * wb, n};
    }
    template <typename Out, typename Out2>
    __device__ void store(acc a, Out* out, Out2* mean, long long o) const {
        const R nf = R(a.n);
        const R var = a.m2 / (nf > correction ? nf - correction : R(0));
        out[o] = convert<Out>(SQRT ? m_sqrt(var) : var);
        if (mean != nullptr) mean[o] = convert<Out2>(a.mean);
    }
};

// Vector norms (PyTorch's NormOps): KIND 0 counts nonzeros, 1 sums |x|, 2 sums |x|^2 and
// takes the root, 3 is max |x|, 4 min |x|, 5 sums |x|^p and takes the p-th root.
template <typename R, int KIND> struct NormOp {
    R p;
    using acc = R;
    __device__ R identity() const { return KIND == 4 ? Bounds<R>::highest() : R(0); }
    __device__ R combine(R a, R b) const {
        if constexpr (KIND == 3) return max_nan(a, b);
        else if constexpr (KIND == 4) return min_nan(a, b);
        else return a + b;
    }
    template <typename X, typename I> __device__ R reduce(R a, X x, I) const {
        const auto v = widen(x);
        if constexpr (KIND == 0) {
            return a + R(convert<bool>(v) ? 1 : 0);
        } else if constexpr (KIND == 2) {
            return a + R(real_dot(v, v));
        } else {
            const R m = R(magnitude(v));
            if constexpr (KIND == 1) return a + m;
            else if constexpr (KIND == 3) return max_nan(a, m);
            else if constexpr (KIND == 4) return min_nan(a, m);
            else return a + m_pow(m, p);
        }
    }
    template <typename Out, typename Out2>
    __device__ void store(R a, Out* out, Out2*, long long o) const {
        if constexpr (KIND == 2) a = m_sqrt(a);
        else if constexpr (KIND == 5) a = m_pow(a, R(1) / p);
        out[o] = convert<Out>(a);
    }
};

template <bool ALL> struct LogicalOp : StoresAcc<bool> {  // all, any
    using acc = bool;
    __device__ bool identity() const { return ALL; }
    __device__ bool combine(bool a, bool b) const { return ALL ? (a && b) : (a || b); }
    template <typename X, typename I> __device__ bool reduce(bool a, X x, I) const {
        return combine(a, convert<bool>(x));
    }
};

template <typename A> struct MaxSum {
    A max;
    A sum;  // of exp(x - max); 0 only for no element yet
};

// logsumexp in one pass: (max, sum of exp(x - max)) rescaled as the max grows. An infinite
// max is the result (+inf: inf; -inf: every element is -inf), NaN propagates.
template <typename A> struct LogSumExpOp {
    using acc = MaxSum<A>;
    __device__ acc identity() const { return acc{Bounds<A>::lowest(), A(0)}; }
    __device__ acc combine(acc a, acc b) const {
        if (a.sum == A(0)) return b;
        if (b.sum == A(0)) return a;
        const A m = max_nan(a.max, b.max);
        if (is_inf(m)) return acc{m, A(1)};
        return acc{m, a.sum * m_exp(a.max - m) + b.sum * m_exp(b.max - m)};
    }
    template <typename X, typename I> __device__ acc reduce(acc a, X x, I) const {
        return combine(a, acc{convert<A>(x), A(1)});
    }
    template <typename Out, typename Out2>
    __device__ void store(acc a, Out* out, Out2*, long long o) const {
        out[o] = convert<Out>(m_log(a.sum) + a.max);
    }
};

// ---- folding one output's range ----------------------------------------------------------
// ACCS accumulators of one range: the first starts from `acc`, the others from the identity;
// UNROLL loads at r, r + step, ... folded into them (load u into accumulator u % ACCS); their
// combination at the end.
template <typename Op, int ACCS>
__device__ inline void start_parts(const Op& op, typename Op::acc acc,
                                   typename Op::acc (&part)[ACCS]) {
    part[0] = acc;
#pragma unroll
    for (int a = 1; a < ACCS; ++a) part[a] = op.identity();
}

template <int VEC, int UNROLL, typename D, typename Op, int ACCS, typename In, typename Index>
__device__ inline void fold_tile(const Op& op, typename Op::acc (&part)[ACCS],
                                 const In* __restrict__ row, Index r, Index step) {
    static_assert(UNROLL % ACCS == 0, "the unrolled loads fold evenly into the accumulators");
    Vec<VEC, In> p[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) p[u] = load_vec<VEC>(row + r + u * step);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            part[u % ACCS] = op.reduce(part[u % ACCS], convert<D>(p[u].v[k]), r + u * step + k);
        }
    }
}

template <typename Op, int ACCS>
__device__ inline typename Op::acc combine_parts(const Op& op, typename Op::acc (&part)[ACCS]) {
#pragma unroll
    for (int a = 1; a < ACCS; ++a) part[0] = op.combine(part[0], part[a]);
    return part[0];
}

// [begin, end) of a contiguous range at `row`, VEC elements a load (row and begin aligned),
// UNROLL loads in flight; the tail element by element. Load u of a step folds into
// accumulator u % ACCS: ACCS independent chains, combined at the end (combine is
// commutative and the index ops break ties by index, so any grouping gives their result).
template <int VEC, int UNROLL, int ACCS, typename D, typename Op, typename In, typename Index>
__device__ inline typename Op::acc fold_contiguous(const Op& op, typename Op::acc acc,
                                                   const In* __restrict__ row, Index begin,
                                                   Index end, Index lane, Index lanes) {
    using Acc = typename Op::acc;
    const Index step = lanes * VEC;
    const Index vend = begin + (end - begin) / VEC * VEC;
    Index r = begin + lane * VEC;
    Acc part[ACCS];
    start_parts(op, acc, part);
    for (; r + (UNROLL - 1) * step < vend; r += UNROLL * step) {
        fold_tile<VEC, UNROLL, D>(op, part, row, r, step);
    }
    for (; r < vend; r += step) {
        const Vec<VEC, In> p = load_vec<VEC>(row + r);
#pragma unroll
        for (int k = 0; k < VEC; ++k) part[0] = op.reduce(part[0], convert<D>(p.v[k]), r + k);
    }
    for (Index t = vend + lane; t < end; t += lanes) {
        part[0] = op.reduce(part[0], convert<D>(row[t]), t);
    }
    return combine_parts(op, part);
}

// The whole contiguous range [0, length) at `row`, split across gridDim.y blocks by
// interleaved tiles (a tile: UNROLL loads of the block): split y takes tiles y, y + splits,
// y + 2 * splits, ... so that at any time the splits read one compact stretch of memory,
// not one stretch each. The tail past the last vector goes to split 0.
template <int VEC, int UNROLL, int ACCS, typename D, typename Op, typename In, typename Index>
__device__ inline typename Op::acc fold_interleaved(const Op& op, typename Op::acc acc,
                                                    const In* __restrict__ row, Index length,
                                                    Index lane, Index lanes, Index split,
                                                    Index splits) {
    using Acc = typename Op::acc;
    const Index step = lanes * VEC;  // a load of the block
    const Index stride = splits * step * UNROLL;
    const Index vend = length / VEC * VEC;
    Index r = split * step * UNROLL + lane * VEC;
    Acc part[ACCS];
    start_parts(op, acc, part);
    for (; r + (UNROLL - 1) * step < vend; r += stride) {
        fold_tile<VEC, UNROLL, D>(op, part, row, r, step);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {  // this split's last tile, when it is cut short
        const Index at = r + u * step;
        if (at < vend) {
            const Vec<VEC, In> p = load_vec<VEC>(row + at);
#pragma unroll
            for (int k = 0; k < VEC; ++k) part[0] = op.reduce(part[0], convert<D>(p.v[k]), at + k);
        }
    }
    if (split == 0) {
        for (Index t = vend + lane; t < length; t += lanes) {
            part[0] = op.reduce(part[0], convert<D>(row[t]), t);
        }
    }
    return combine_parts(op, part);
}

// [begin, end) of a strided range: element r at base[reduced(r)].
template <typename D, typename Op, typename In, typename Index>
__device__ inline typename Op::acc fold_strided(const Op& op, typename Op::acc acc,
                                                const In* __restrict__ base,
                                                const ReduceLayout<Index>& l, Index begin,
                                                Index end, Index lane, Index lanes) {
    Index r = begin + lane;
    for (; r + (kUnroll - 1) * lanes < end; r += kUnroll * lanes) {
        D x[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const Index at = offset_of(r + u * lanes, l.red_sizes, l.red_strides, l.red_ndim);
            x[u] = convert<D>(base[at]);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) acc = op.reduce(acc, x[u], r + u * lanes);
    }
    for (; r < end; r += lanes) {
        const Index at = offset_of(r, l.red_sizes, l.red_strides, l.red_ndim);
        acc = op.reduce(acc, convert<D>(base[at]), r);
    }
    return acc;
}

template <typename Op, typename Out, typename Out2>
__device__ inline void finish(const Op& op, const typename Op::acc& acc, Out* out, Out2* out2,
                              typename Op::acc* partials, long long o) {
    if (gridDim.y == 1) op.store(acc, out, out2, o);
    else partials[o * gridDim.y + blockIdx.y] = acc;
}

// ---- the kernels -----------------------------------------------------------------------------
template <typename Op, typename In, typename D, typename Out, typename Out2, typename Index,
          int VEC, int UNROLL, int ACCS, bool INTERLEAVE>
__global__ void __launch_bounds__(512, 4)
    reduce_inner(Op op, const In* __restrict__ in, Out* __restrict__ out,
                 Out2* __restrict__ out2, typename Op::acc* __restrict__ partials,
                 ReduceLayout<Index> l) {
    using Acc = typename Op::acc;
    __shared__ Acc scratch[kMaxWarps];
    const Index begin = static_cast<Index>(blockIdx.y) * l.chunk;
    const Index end = min(l.length, begin + l.chunk);
    const Index lane = threadIdx.x, lanes = blockDim.x;
    auto combine = [&op](const Acc& a, const Acc& b) { return op.combine(a, b); };
    for (Index first = static_cast<Index>(blockIdx.x) * blockDim.y; first < l.outputs;
         first += static_cast<Index>(gridDim.x) * blockDim.y) {
        const Index o = first + threadIdx.y;
        Acc acc = op.identity();
        if (o < l.outputs) {
            const In* row = in + offset_of(o, l.kept_sizes, l.kept_strides, l.kept_ndim);
            if constexpr (VEC > 1) {
                if constexpr (INTERLEAVE) {
                    acc = fold_interleaved<VEC, UNROLL, ACCS, D>(
                        op, acc, row, l.length, lane, lanes, Index(blockIdx.y), Index(gridDim.y));
                } else {
                    acc = fold_contiguous<VEC, UNROLL, ACCS, D>(op, acc, row, begin, end, lane,
                                                                lanes);
                }
            } else {
                acc = fold_strided<D>(op, acc, row, l, begin, end, lane, lanes);
            }
        }
        acc = group_allreduce(acc, combine, scratch);
        if (threadIdx.x == 0 && o < l.outputs) finish(op, acc, out, out2, partials, o);
    }
}

template <typename Op, typename In, typename D, typename Out, typename Out2, typename Index>
__global__ void __launch_bounds__(512, 4)
    reduce_outer(Op op, const In* __restrict__ in, Out* __restrict__ out,
                 Out2* __restrict__ out2, typename Op::acc* __restrict__ partials,
                 ReduceLayout<Index> l) {
    using Acc = typename Op::acc;
    __shared__ Acc scratch[512];
    const Index begin = static_cast<Index>(blockIdx.y) * l.chunk;
    const Index end = min(l.length, begin + l.chunk);
    const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x;
    for (Index first = static_cast<Index>(blockIdx.x) * bx; first < l.outputs;
         first += static_cast<Index>(gridDim.x) * bx) {
        const Index o = first + tx;
        Acc acc = op.identity();
        if (o < l.outputs) {
            const In* base = in + offset_of(o, l.kept_sizes, l.kept_strides, l.kept_ndim);
            acc = fold_strided<D>(op, acc, base, l, begin, end, Index(ty), Index(blockDim.y));
        }
        scratch[ty * bx + tx] = acc;
        __syncthreads();
        for (int s = blockDim.y / 2; s > 0; s /= 2) {
            if (ty < s) scratch[ty * bx + tx] = op.combine(scratch[ty * bx + tx],
                                                           scratch[(ty + s) * bx + tx]);
            __syncthreads();
        }
        if (ty == 0 && o < l.outputs) finish(op, scratch[tx], out, out2, partials, o);
        __syncthreads();
    }
}

template <typename Op, typename Out, typename Out2>
__global__ void __launch_bounds__(512)
    reduce_partials(Op op, const typename Op::acc* __restrict__ partials, Out* __restrict__ out,
                    Out2* __restrict__ out2, long long outputs, int splits) {
    using Acc = typename Op::acc;
    __shared__ Acc scratch[kMaxWarps];
    auto combine = [&op](const Acc& a, const Acc& b) { return op.combine(a, b); };
    for (long long first = static_cast<long long>(blockIdx.x) * blockDim.y; first < outputs;
         first += static_cast<long long>(gridDim.x) * blockDim.y) {
        const long long o = first + threadIdx.y;
        Acc acc = op.identity();
        if (o < outputs) {
            for (int s = threadIdx.x; s < splits; s += blockDim.x) {
                acc = op.combine(acc, partials[o * splits + s]);
            }
        }
        acc = group_allreduce(acc, combine, scratch);
        if (threadIdx.x == 0 && o < outputs) op.store(acc, out, out2, o);
    }
}

}  // namespace vram

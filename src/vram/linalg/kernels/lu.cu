// vram.linalg's own LU for batches of real matrices: a blocked right-looking factorization
// (LAPACK's getrf, run for the whole batch at once) and a solve from its factors.
//
// One step of the factorization, for the column panel [k0, k0 + jb) of every matrix:
// - panel: factor rows [k0, m) of the panel with partial pivoting, one block per matrix
//   (or, for tall panels on sm_90, a cluster of blocks sharing their offers through
//   distributed shared memory), the panel in registers (each thread holds R rows of NB
//   columns); rows are never moved while it runs, a position per row says where it is,
//   and every row is stored at its final place at the end. ``panel_warp`` is a warp per
//   matrix of at most 32 rows; ``panel_tall`` one block for a tall panel of a small batch,
//   W of its columns in registers at a time. Pivots are LAPACK's (1-based, absolute row
//   numbers); info is the first zero pivot (1-based), as getrf's.
// - swap_trsm: the panel's row interchanges applied, in order, to every other column, and
//   the columns right of the panel solved with the panel's unit lower triangle (U12); a
//   warp per column, the interchanges composed into one gather first.
// - the trailing update A22 -= L21 U12 is one cuBLAS strided-batched GEMM (the caller's).
// getrs solves op(A) X = B from the factors: one block per matrix and RT right-hand sides,
// one thread per row; getrs_warp a warp per matrix of at most 32 rows with few right-hand
// sides, getrs_columns a thread per right-hand side for such matrices with many.
//
// Matrices are column-major (element (i, j) at i + j * m), one after another ``stride``
// elements apart, as vram.linalg lays them out. Every kernel takes ONE argument, a struct
// of 8-byte fields (pointers and long long), so a launch packs one buffer.

namespace vram_lu {

typedef unsigned long long u64;
typedef long long i64;

__device__ __forceinline__ float magnitude(float x) { return fabsf(x); }
__device__ __forceinline__ double magnitude(double x) { return fabs(x); }
// LAPACK's sfmin: below it, a column is divided by its pivot instead of scaled by 1 / pivot
template <typename T> __device__ __forceinline__ T smallest_normal();
template <> __device__ __forceinline__ float smallest_normal<float>() { return 1.17549435e-38f; }
template <> __device__ __forceinline__ double smallest_normal<double>() {
    return 2.2250738585072014e-308;
}

// The pivot search's key: |x|, with NaN below every number (a NaN is a pivot only where
// every candidate is NaN), and -1 for a row that is not a candidate. Keys and positions
// make a strict total order, so every lane of a butterfly reduction ends with one winner.
template <typename T> __device__ __forceinline__ T search_key(T x) {
    T m = magnitude(x);
    return m != m ? T(-0.5) : m;
}

template <typename T>
__device__ __forceinline__ bool beats(T key, i64 pos, T other_key, i64 other_pos) {
    return key > other_key || (key == other_key && pos < other_pos);
}

constexpr i64 NONE = 0x7fffffffffffffffLL;  // the position of "no candidate"

// The pivot search by warp reductions (redux.sync, sm_80 and later) instead of a
// butterfly: a key's image is an unsigned integer in the key's order: -1 (no candidate)
// -> 0, -0.5 (NaN) -> 1, a magnitude -> its bits + 2 (the bits of floats >= 0 order as the
// floats do). A float's image fits one word, a double's takes two.
__device__ __forceinline__ u64 key_image(float key) {
    return key >= 0.0f ? (u64)__float_as_uint(key) + 2ull : (key == -0.5f ? 1ull : 0ull);
}

__device__ __forceinline__ u64 key_image(double key) {
    return key >= 0.0 ? (u64)__double_as_longlong(key) + 2ull : (key == -0.5 ? 1ull : 0ull);
}

// The warp's best (image, place), left in every lane: the largest image, then the
// smallest place (the order of ``beats``). ``WIDE``: images may take two words.
template <bool WIDE> __device__ __forceinline__ void warp_pick(u64& image, int& place) {
    const unsigned all = 0xffffffffu;
#if __CUDA_ARCH__ >= 800
    unsigned high = 0, best_high = 0;
    if constexpr (WIDE) {
        high = (unsigned)(image >> 32);
        best_high = __reduce_max_sync(all, high);
    }
    const unsigned low = (unsigned)image;
    const unsigned best_low = __reduce_max_sync(all, high == best_high ? low : 0u);
    const bool best = high == best_high && low == best_low;
    place = (int)__reduce_min_sync(all, best ? (unsigned)place : 0xffffffffu);
    image = ((u64)best_high << 32) | best_low;
#else
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const u64 other_image = __shfl_xor_sync(all, image, offset);
        const int other_place = __shfl_xor_sync(all, place, offset);
        if (other_image > image || (other_image == image && other_place < place)) {
            image = other_image;
            place = other_place;
        }
    }
#endif
}

// The place of the warp's best (key, place) (non-negative places; 0x7fffffff for none).
template <typename T> __device__ __forceinline__ int pivot_place(T key, int place) {
    u64 image = key_image(key);
    warp_pick<sizeof(T) == 8>(image, place);
    return place;
}

// The best of the offers (key, place) that lanes [0, count) hold (lanes past them: none),
// found by ``pivot_place``: its place in every lane (NONE: no candidate anywhere), and the
// lane that holds it (places are unique; the first lane when there is none).
template <typename T>
__device__ __forceinline__ int best_offer(T key, i64 place, int lane, int count, i64& best) {
    const bool mine = lane < count && place != NONE;
    const int found = pivot_place(mine ? key : T(-1), mine ? (int)place : 0x7fffffff);
    best = found == 0x7fffffff ? NONE : found;
    const unsigned holders = __ballot_sync(0xffffffffu, lane < count && place == best);
    return holders ? __ffs((int)holders) - 1 : 0;
}

// row[c] for a runtime c, with every index known at compile time (row stays in registers)
template <typename T, int NB> __device__ __forceinline__ T column(const T (&row)[NB], int c) {
    T x = row[0];
#pragma unroll
    for (int j = 1; j < NB; ++j) {
        if (j == c) x = row[j];
    }
    return x;
}

struct PanelArgs {
    u64 lu;           // T*: the factors, column-major, ld = m
    i64 lu_stride;    // elements between matrices
    u64 src;          // const T*: where the panel is read from (lu itself, or the input)
    i64 src_batch;    // src's strides, in elements: between matrices, rows, columns
    i64 src_row;
    i64 src_col;
    u64 ipiv;         // int*: pivots (k per matrix)
    i64 ipiv_stride;  // k
    u64 info;         // int*: one per matrix
    i64 m;
    i64 k0;           // the panel's first column (and row)
    i64 jb;           // its width, at most NB
    i64 pivot;        // 0: no row interchanges
    i64 update;       // > 0 (``panel`` only): the previous panel's width, whose step on
                      // this panel's columns (interchanges, U12, A -= L21 U12) the panel
                      // applies first (the look-ahead's: ``previous_step``)
    u64 failed;       // int*, or 0: set to 1 where a matrix has a zero pivot (page-locked
                      // host memory, which the host reads after a synchronization)
};

// LAPACK's interchange of rows c and p, as positions: the row at p goes to c and the row
// at c to p (rows themselves never move while a panel runs)
template <typename P, int R>
__device__ __forceinline__ void interchange(P (&pos)[R], i64 c, i64 p) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (pos[r] == p) {
            pos[r] = (P)c;
        } else if (pos[r] == c) {
            pos[r] = (P)p;
        }
    }
}

// LAPACK applies a panel's interchanges one after another: rows c and target[c] (counted
// from the panel's first row, target[c] >= c), for c in order. A warp composes them into
// one gather: lane i < jb learns the row whose value ends in row i (``top``), and lane t <
// ``moved`` the t-th row below the panel's rows that changes (``out_row``) and the row its
// value comes from (``out_src``: always one of the panel's rows, since a row below only
// ever takes the value that row c holds when its turn comes, one of theirs). Every value a
// column needs can then be read at once, and written after: one memory latency, not one
// per interchange.
struct Gather {
    int top, out_row, out_src, moved;
};

__device__ __forceinline__ Gather compose(const int* target, int jb, int lane) {
    const unsigned all = 0xffffffffu;
    Gather g{lane, -1, -1, 0};
    for (int c = 0; c < jb; ++c) {
        const int r = target[c];  // the same in every lane
        if (r == c) continue;
        if (r < jb) {  // two of the panel's rows
            const int at_c = __shfl_sync(all, g.top, c), at_r = __shfl_sync(all, g.top, r);
            if (lane == c) g.top = at_r;
            if (lane == r) g.top = at_c;
        } else {  // a row below them: its slot in the list, new or not
            const unsigned found = __ballot_sync(all, g.out_row == r);
            const int slot = found ? __ffs((int)found) - 1 : g.moved;
            if (!found) {
                if (lane == slot) g.out_row = g.out_src = r;
                ++g.moved;
            }
            const int at_c = __shfl_sync(all, g.top, c);
            const int at_r = __shfl_sync(all, g.out_src, slot);
            if (lane == c) g.top = at_r;
            if (lane == slot) g.out_src = at_c;
        }
    }
    return g;
}

// info of matrix b after a panel whose first zero pivot is ``first_zero`` (0: none): the
// first panel sets it, a later one only where no earlier panel found one; any zero pivot
// raises the ``failed`` flag (a plain store: every writer writes 1)
__device__ __forceinline__ void record_info(const PanelArgs& args, i64 b, int first_zero) {
    int* info = reinterpret_cast<int*>(args.info) + b;
    if (args.k0 == 0) {
        *info = first_zero;
    } else if (first_zero != 0 && *info == 0) {
        *info = first_zero;
    }
    if (first_zero != 0 && args.failed != 0) *reinterpret_cast<volatile int*>(args.failed) = 1;
}

// A cluster barrier in two halves: every thread of the cluster arrives, then waits until
// every thread has arrived; the release and acquire make each block's shared memory writes
// before its arrival (its mbarriers' initialization) visible to the others after the wait.
template <int CLUSTER> __device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

template <int CLUSTER> __device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

template <int CLUSTER> __device__ __forceinline__ void cluster_barrier() {
    cluster_arrive<CLUSTER>();
    cluster_wait<CLUSTER>();
}

// The cluster's exchange of offers (sm_90): each block sends its offer (its best row's
// values, key and place) into every block's inbox with a bulk copy, whose bytes count down
// the receiving block's mbarrier for that column (its ``expect_tx``); a block waits on its
// own mbarrier alone, so a column costs one one-way trip through distributed shared memory,
// not a cluster barrier (about 0.7 us on an H100) and remote reads after it. (Templates, so
// that the CPU emulation, which runs one block, never compiles them.)
template <typename T> __device__ __forceinline__ unsigned shared_address(const T* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// a shared address of this block as the same variable of block ``rank`` of the cluster
template <typename T> __device__ __forceinline__ unsigned in_block(const T* p, unsigned rank) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
                 : "=r"(out)
                 : "r"(shared_address(p)), "r"(rank));
    return out;
}

// ``bytes`` (a multiple of 16) copied from ``from`` (this block's shared memory) to ``to``
// (a cluster shared address) by the bulk copy engine, counted on the mbarrier ``bar`` there
template <typename T>
__device__ __forceinline__ void send(unsigned to, const T* from, unsigned bytes, unsigned bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes"
        " [%0], [%1], %2, [%3];" ::"r"(to), "r"(shared_address(from)), "r"(bytes), "r"(bar)
        : "memory");
}

// this thread's shared memory writes ordered before later bulk copies' reads of them
template <int CLUSTER> __device__ __forceinline__ void fence_for_copies() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

template <typename T> __device__ __forceinline__ void mbarrier_init(T* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// this block's one arrival at ``bar`` for a column, expecting ``bytes`` from the cluster
template <typename T> __device__ __forceinline__ void mbarrier_expect(T* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 ::"r"(shared_address(bar)), "r"(bytes) : "memory");
}

// until the phase of ``bar`` of this ``parity`` has completed (every byte arrived)
template <typename T> __device__ __forceinline__ void mbarrier_wait(T* bar, unsigned parity) {
    asm volatile(
        "{\n\t.reg .pred done;\n\t"
        "WAIT:\n\t"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
        "@!done bra WAIT;\n\t}" ::"r"(shared_address(bar)), "r"(parity) : "memory");
}

// A warp's best row (or in a cluster, a block's): its values (from the current column on),
// its key and its place. A multiple of 16 bytes, 16-byte aligned: a row is read 16 bytes a
// load, and a cluster sends an offer whole, one bulk copy a block.
template <typename T, int NB> struct alignas(16) Offer {
    T row[NB];
    T key;
    i64 place;
};

// u = row[0, 16 / sizeof(T)): one 16-byte load of shared memory
template <typename T>
__device__ __forceinline__ void load16(T (&u)[16 / sizeof(T)], const T* row) {
#ifdef __CUDACC__
    if constexpr (sizeof(T) == 4) {
        const float4 v = *reinterpret_cast<const float4*>(row);
        u[0] = v.x, u[1] = v.y, u[2] = v.z, u[3] = v.w;
    } else {
        const double2 v = *reinterpret_cast<const double2*>(row);
        u[0] = v.x, u[1] = v.y;
    }
#else
    for (int v = 0; v < 16 / (int)sizeof(T); ++v) u[v] = row[v];
#endif
}

// The panel of one matrix is held by CLUSTER blocks (a thread block cluster when CLUSTER >
// 1, launched with that cluster size; blockIdx.x / CLUSTER is the matrix), each block
// THREADS threads of R rows: rows (rank * R + r) * THREADS + threadIdx.x of the panel.
// A column: every warp offers its best row in its block's shared memory; after the block's
// barrier every warp finds the block's best alike (in a cluster, warp 0 then sends it to
// every block's inbox, and every warp picks the best of the inbox). Each search is two
// warp reductions (three for doubles: ``best_offer``), not a butterfly of shuffles or a
// scan. Offers and inboxes alternate between two buffers by column parity: a block sends
// column c + 1's offer only after it took every offer of column c, which every block sent
// after it had read its inbox of column c - 1, so no offer lands on one still read.
// The look-ahead's step before a panel (``args.update`` = p > 0): the previous panel's
// [k0 - p, k0) interchanges, U12 and update, applied to this panel's columns alone (what
// swap_trsm and the GEMM do to the others), before the panel is factored.
// ``previous_step`` first, before the panel's rows are read: the interchanges composed
// (``compose``, by the first warp) into the list of this panel's rows that take the value
// of one of the previous panel's rows, which the rows' loads then read instead (``row_of``);
// and U12 (those rows of these columns, gathered, then times L11^-1, a lane a column) into
// ``prev.upper``. Then ``update_first``: each row of the panel (rows k0.. of its columns, in
// ``a``) less its row of L21 (final: columns k0 - p.., in the previous panel) times U12.
// The kernel stores U12 at the end, once every block of the cluster has read what it
// replaces. (NB is a multiple of 8, and p at most NB.)
template <typename T, int NB> struct Previous {
    T lower[NB][NB + 1];  // the previous panel's L11 (unit lower)
    T upper[NB][NB];      // U12 of this panel's columns (zero beyond p rows, jb columns)
    int target[NB];       // its interchanges: row c swaps with row target[c] (from k0 - p)
    int top[32];          // the previous panel's row (from k0 - p) whose values row j
                          // takes (a slot a lane: lanes past p keep their own)
    int row[NB];          // the rows of this panel (from k0) that they change
    int from[NB];         // and the previous panel's row (from k0 - p) each takes
    int moved;
};

template <typename T, int THREADS, int NB>
__device__ __forceinline__ void previous_step(const PanelArgs& args, i64 b,
                                              Previous<T, NB>& prev) {
    constexpr int WARPS = THREADS / 32;
    const i64 m = args.m, k0 = args.k0, jb = args.jb;
    const int p = (int)args.update;
    const i64 q0 = k0 - p;  // the previous panel's first row and column
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const T* lu = reinterpret_cast<const T*>(args.lu) + b * args.lu_stride;
    if (tid < p) {
        const int* ipiv = reinterpret_cast<const int*>(args.ipiv) + b * args.ipiv_stride;
        prev.target[tid] = args.pivot ? (int)(ipiv[q0 + tid] - 1 - q0) : tid;
    }
    __syncthreads();
    if (warp == 0) {  // the interchanges composed
        const Gather g = compose(prev.target, p, lane);
        prev.top[lane] = g.top;
        if (lane < g.moved) {
            prev.row[lane] = g.out_row - p;
            prev.from[lane] = g.out_src;
        }
        if (lane == 0) prev.moved = g.moved;
    }
    // L11: by the warps after the first (a block of one warp: by it, once it composed)
    constexpr int LOADERS = WARPS > 1 ? THREADS - 32 : THREADS;
    for (int e = WARPS > 1 ? tid - 32 : tid; e >= 0 && e < p * p; e += LOADERS) {
        const int i = e % p, c = e / p;
        prev.lower[i][c] = lu[(q0 + i) + (q0 + c) * m];
    }
    __syncthreads();
    for (int c = warp; c < NB; c += WARPS) {  // the rows of U12, gathered (lane j: row j)
        if (lane < NB) {
            prev.upper[lane][c] =
                (c < jb && lane < p) ? lu[(q0 + prev.top[lane]) + (k0 + c) * m] : T(0);
        }
    }
    __syncthreads();
    if (warp == 0 && lane < NB) {  // times L11^-1: lane c solves column c
        T x[NB];
#pragma unroll
        for (int j = 0; j < NB; ++j) x[j] = prev.upper[j][lane];
#pragma unroll
        for (int j = 0; j < NB; ++j) {
#pragma unroll
            for (int i = j + 1; i < NB; ++i) {
                if (i < p) x[i] -= prev.lower[i][j] * x[j];
            }
        }
#pragma unroll
        for (int j = 0; j < NB; ++j) prev.upper[j][lane] = x[j];
    }
    __syncthreads();
}

// the row (from the matrix's first) whose values row i of the panel (from k0) holds once
// the previous step's interchanges are applied (``previous_step``'s list; no step: i's own)
template <typename T, int NB>
__device__ __forceinline__ i64 row_of(const PanelArgs& args, const Previous<T, NB>& prev,
                                      i64 i) {
    i64 found = args.k0 + i;
    if (args.update > 0) {
        const int moved = prev.moved;
        for (int t = 0; t < moved; ++t) {
            if (prev.row[t] == i) found = args.k0 - args.update + prev.from[t];
        }
    }
    return found;
}

template <typename T, int THREADS, int R, int NB>
__device__ __forceinline__ void update_first(const PanelArgs& args, i64 b, unsigned rank,
                                             T (&a)[R][NB], const Previous<T, NB>& prev) {
    static_assert(NB % 8 == 0, "the L21 row is read 8 columns at a time");
    const i64 m = args.m, k0 = args.k0;
    const int p = (int)args.update;
    const T* lu = reinterpret_cast<const T*>(args.lu) + b * args.lu_stride;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const i64 i = ((i64)rank * R + r) * THREADS + threadIdx.x;
        if (i >= m - k0) continue;
        const T* lower = lu + (k0 + i) + (k0 - p) * m;  // its row of L21
#pragma unroll 1
        for (int j0 = 0; j0 < p; j0 += 8) {  // 8 loads at once, then their products
            T l[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) l[j] = j0 + j < p ? lower[(j0 + j) * m] : T(0);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
#pragma unroll
                for (int c = 0; c < NB; ++c) a[r][c] -= l[j] * prev.upper[j0 + j][c];
            }
        }
    }
}

template <typename T, int CLUSTER, int THREADS, int R, int NB>
__global__ void __launch_bounds__(THREADS) panel(const PanelArgs args) {
    constexpr int WARPS = THREADS / 32;
    static_assert(NB % (16 / sizeof(T)) == 0, "a row is read 16 bytes at a time");
    __shared__ Offer<T, NB> offers[2][WARPS];  // each warp's, by column parity
    // a cluster's: every block's offer, and the mbarriers that count their bytes
    __shared__ Offer<T, NB> inbox[2][CLUSTER];
    __shared__ u64 arrived[2];
    __shared__ Previous<T, NB> prev;  // the look-ahead's previous step (``update_first``)

    const i64 b = blockIdx.x / CLUSTER;
    const unsigned rank = blockIdx.x % CLUSTER;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const i64 m = args.m, k0 = args.k0, jb = args.jb;
    const i64 h = m - k0;  // the panel's rows
    const bool pivot = args.pivot != 0;
    const bool leader = rank == 0 && tid == 0;  // writes pivots and info

    if (args.update > 0) previous_step<T, THREADS, NB>(args, b, prev);
    T a[R][NB];
    i64 pos[R];  // where each of this thread's rows is now (-1: no row)
    const T* src = reinterpret_cast<const T*>(args.src) + b * args.src_batch;
    i64 from[R];  // the row each of this thread's rows reads
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const i64 i = ((i64)rank * R + r) * THREADS + tid;
        pos[r] = i < h ? i : -1;
        from[r] = row_of(args, prev, i);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const T* row = src + from[r] * args.src_row + k0 * args.src_col;
#pragma unroll
        for (int c = 0; c < NB; ++c) {
            a[r][c] = (pos[r] >= 0 && c < jb) ? row[c * args.src_col] : T(0);
        }
    }
    if (args.update > 0) update_first<T, THREADS, R, NB>(args, b, rank, a, prev);

    if constexpr (CLUSTER > 1) {
        if (tid == 0) {
            mbarrier_init(&arrived[0]);
            mbarrier_init(&arrived[1]);
        }
        cluster_barrier<CLUSTER>();  // every block's mbarriers ready before any offer is sent
    }

    // The columns in turn (a loop, not unrolled: each step touches every register column
    // with a compile-time index and a runtime mask, so the registers stay registers and the
    // kernel stays small).
    i64 first_zero = 0;
#pragma unroll 1
    for (int c = 0; c < jb; ++c) {
        const int buf = c & 1;
        // this thread's best candidate, then the warp's
        T key = T(-1);
        i64 place = NONE;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const bool candidate = pivot ? pos[r] >= c : pos[r] == c;
            if (candidate) {
                const T k = search_key(column(a[r], c));
                if (beats(k, pos[r], key, place)) {
                    key = k;
                    place = pos[r];
                }
            }
        }
        // the warp's offer (found by warp reductions) goes to shared memory from the thread
        // that holds its row; lane 0 offers "none" for a warp without a candidate
        const int found = pivot_place(key, place == NONE ? 0x7fffffff : (int)place);
        bool wrote = false;
        if (found == 0x7fffffff) {
            if (lane == 0) {
                offers[buf][warp].key = T(-1);
                offers[buf][warp].place = NONE;
                wrote = true;
            }
        } else if (place == found) {
            wrote = true;
            offers[buf][warp].key = key;
            offers[buf][warp].place = place;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (pos[r] == place) {
#pragma unroll
                    for (int j = 0; j < NB; ++j) {
                        if (j >= c) offers[buf][warp].row[j] = a[r][j];
                    }
                }
            }
        }
        if constexpr (CLUSTER > 1) {
            if (wrote) fence_for_copies<CLUSTER>();
        }
        __syncthreads();
        // the block's best, found by every warp alike (lane v takes warp v's offer)
        const T offered_key = lane < WARPS ? offers[buf][lane].key : T(-1);
        const i64 offered_place = lane < WARPS ? offers[buf][lane].place : NONE;
        i64 p = NONE;
        const Offer<T, NB>* best = &offers[buf][best_offer(offered_key, offered_place, lane,
                                                           WARPS, p)];
        const T* prow = best->row;
        if constexpr (CLUSTER > 1) {
            // warp 0 sends the block's best to every block's inbox
            if (warp == 0) {
                if (lane == 0) mbarrier_expect(&arrived[buf], CLUSTER * sizeof(Offer<T, NB>));
                if (lane < CLUSTER) {
                    send(in_block(&inbox[buf][rank], lane), best, sizeof(Offer<T, NB>),
                         in_block(&arrived[buf], lane));
                }
            }
            // the cluster's best, found by every warp alike (lane v takes block v's offer)
            mbarrier_wait(&arrived[buf], (unsigned)(c >> 1) & 1u);
            const T sent_key = lane < CLUSTER ? inbox[buf][lane].key : T(-1);
            const i64 sent_place = lane < CLUSTER ? inbox[buf][lane].place : NONE;
            prow = inbox[buf][best_offer(sent_key, sent_place, lane, CLUSTER, p)].row;
        }
        const T d = prow[c];
        interchange(pos, c, p);
        if (leader) {
            if (pivot) {
                int* ipiv = reinterpret_cast<int*>(args.ipiv) + b * args.ipiv_stride;
                ipiv[k0 + c] = (int)(k0 + p + 1);
            }
            if (d == T(0) && first_zero == 0) first_zero = k0 + c + 1;
        }
        // L's column (a zero pivot leaves it unscaled, as LAPACK), then the rank-1 update
        const bool scale = d != T(0);
        const bool reciprocal = magnitude(d) >= smallest_normal<T>();
        const T inverse = scale ? T(1) / d : T(0);
        T l[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            l[r] = T(0);
            if (pos[r] > c) {
                T x = column(a[r], c);
                if (scale) x = reciprocal ? x * inverse : x / d;
                l[r] = x;
#pragma unroll
                for (int j = 0; j < NB; ++j) {
                    if (j == c) a[r][j] = x;
                }
            }
        }
        // (the pivot row read 16 bytes a load)
        constexpr int V = 16 / sizeof(T);
#pragma unroll
        for (int q = 0; q < NB / V; ++q) {
            T u[V];
            load16(u, prow + q * V);
#pragma unroll
            for (int v = 0; v < V; ++v) {
                if (q * V + v > c) {
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        if (pos[r] > c) a[r][q * V + v] -= l[r] * u[v];
                    }
                }
            }
        }
    }

    // Note [Leaving a cluster]: a block's shared memory must outlive every distributed
    // shared memory operation on it, and its last offers may still be on their way out (a
    // bulk copy's completion is counted at the receiver, not at the sender). So each block
    // arrives once every offer sent to it has arrived (its last wait is behind it), and waits
    // for the others just before it leaves: then every copy, its read of the source
    // included, is done. The factors' stores in between hide the wait. (Every block has also
    // read what U12 replaces before it sent its first offer.)
    if constexpr (CLUSTER > 1) cluster_arrive<CLUSTER>();
    if (leader) record_info(args, b, (int)first_zero);
    T* out = reinterpret_cast<T*>(args.lu) + b * args.lu_stride;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (pos[r] >= 0) {
            T* row = out + (k0 + pos[r]) + k0 * m;
#pragma unroll
            for (int c = 0; c < NB; ++c) {
                if (c < jb) row[c * m] = a[r][c];
            }
        }
    }
    if (args.update > 0 && rank == 0) {
        const int p = (int)args.update;
        for (int e = tid; e < p * NB; e += THREADS) {
            const int j = e % p, c = e / p;
            if (c < jb) out[(k0 - p + j) + (k0 + c) * m] = prev.upper[j][c];
        }
    }
    if constexpr (CLUSTER > 1) cluster_wait<CLUSTER>();
}

// The same step for a panel of at most 32 rows (a whole matrix of n <= 32, or the last
// panel of a larger one): one warp per matrix, a row per lane, every loop unrolled (each
// column touches only the columns right of it), no block barrier. Where the panel's rows
// lie contiguous (a row-major input read where it lies), lane c reads column c of one row
// a step, coalesced, and the rows reach their lanes through a shared memory tile (a lane
// reading its own row touches 32 lines an access: for 4096 32 x 32 matrices on an H100,
// 39.5 us that way, 25.4 through the tile, 24.3 from column-major input); otherwise a
// lane reads its row, a column a step.
// Where there are thousands of them the multiprocessor's shuffle / shared memory pipe is
// what limits it, so each column costs few of its instructions: the pivot search is two
// warp reductions (three for doubles) of ``pivot_place`` instead of a ten-shuffle
// butterfly, and the pivot row reaches the lanes by one shuffle per column right of c
// (no store and load through shared memory). Lane c keeps column c's pivot; the pivots
// are written together at the end.
// (Launch bounds for 32 warps of floats a multiprocessor, 16 of doubles: 64 / 128
// registers, no spill; 4096 matrices are then one wave on an H100, not one and a half.)
// Probes on an H100, 4096 32 x 32 floats: 27.9 us in all, 22.8 with the loads and stores
// taken out, 12.7 for the loads and stores alone: the shuffles bound it. Fewer of them,
// R rows a lane and R matrices a warp (R = 2, 4), took 36-103 us (doubles, R = 2: 150-213
// against 58-66): the owner's row picked among R by selects, butterflies for the search,
// and fewer warps to hide latency.
// Through shared memory (the owner's row stored 16 bytes at a time, read by all) 31.0.
template <typename T>
__global__ void __launch_bounds__(32, sizeof(T) == 4 ? 32 : 16) panel_warp(const PanelArgs args) {
    constexpr int NB = 32;
    const unsigned all = 0xffffffffu;

    const i64 b = blockIdx.x;
    const int lane = threadIdx.x;
    const i64 m = args.m, k0 = args.k0, jb = args.jb;
    const int h = (int)(m - k0);
    const bool pivot = args.pivot != 0;

    T a[NB];
    int pos = lane < h ? lane : -1;
    const T* src = reinterpret_cast<const T*>(args.src) + b * args.src_batch +
                   k0 * (args.src_row + args.src_col);
    if (args.src_col == 1) {
        __shared__ T tile[NB][NB + 1];  // row r at tile[r]: a lane's reads hit distinct banks
#pragma unroll
        for (int r = 0; r < NB; ++r)
            tile[r][lane] = (r < h && lane < jb) ? src[r * args.src_row + lane] : T(0);
        __syncwarp();
#pragma unroll
        for (int c = 0; c < NB; ++c) a[c] = tile[lane][c];
    } else {
        const T* row = src + lane * args.src_row;
#pragma unroll
        for (int c = 0; c < NB; ++c) a[c] = (lane < h && c < jb) ? row[c * args.src_col] : T(0);
    }

    int first_zero = 0;
    int my_pivot = 0;  // lane c: the position column c's pivot came from
#pragma unroll
    for (int c = 0; c < NB; ++c) {
        if (c < jb) {  // the same for every lane
            const bool candidate = pivot ? pos >= c : pos == c;
            const int place = pivot_place(candidate ? search_key(a[c]) : T(-1),
                                          candidate ? pos : 0x7fffffff);
            const int owner = __ffs(__ballot_sync(all, pos == place)) - 1;
            const T d = __shfl_sync(all, a[c], owner);
            if (lane == c) my_pivot = place;
            if (pos == place) {
                pos = c;
            } else if (pos == c) {
                pos = place;
            }
            if (d == T(0) && first_zero == 0) first_zero = (int)(k0 + c + 1);
            const bool below = pos > c;
            T x = a[c];
            if (below && d != T(0))
                x = magnitude(d) >= smallest_normal<T>() ? x * (T(1) / d) : x / d;
            if (below) a[c] = x;
#pragma unroll
            for (int j = c + 1; j < NB; ++j) {
                const T u = __shfl_sync(all, a[j], owner);  // every lane: a full-warp shuffle
                if (below) a[j] -= x * u;
            }
        }
    }

    if (pivot && lane < jb) {
        int* ipiv = reinterpret_cast<int*>(args.ipiv) + b * args.ipiv_stride;
        ipiv[k0 + lane] = (int)(k0 + my_pivot + 1);
    }
    if (lane == 0) record_info(args, b, first_zero);
    if (pos >= 0) {
        T* out = reinterpret_cast<T*>(args.lu) + b * args.lu_stride + (k0 + pos) + k0 * m;
#pragma unroll
        for (int c = 0; c < NB; ++c) {
            if (c < jb) out[c * m] = a[c];
        }
    }
}

// The same step for a tall panel of ONE block (one matrix's panel on one multiprocessor,
// for a batch too small to fill the GPU): rows too many for a 32-column panel in one
// block's registers, so the block holds W columns at a time (a sub-panel) and the rest of
// the panel stays in global memory (the matrix itself, in L2), a recursive getrf inside
// the panel:
// - a column of the sub-panel costs ONE barrier: every warp offers its best row with that
//   row's W values, and after the barrier every warp finds the block's best among the
//   offers alike (warp reductions) and reads the winning row from the offer;
// - after a sub-panel, its U12 (the pivot rows' later columns, solved with the sub-panel's
//   unit lower triangle, kept from the winning rows) is found by one thread a column, and
//   every thread subtracts L21 U12 from its own rows of the later columns (a GEMM of
//   rank W, right-looking), keeping the next sub-panel in registers.
// Rows stay where they are while the panel runs (thread t holds rows r * THREADS + t, so
// loads and stores of a column are coalesced); a position per row says where it is, and
// at the end every row that moved (at most 2 jb of them) is copied to its place.
template <typename T, int THREADS, int R, int W>
__global__ void __launch_bounds__(THREADS) panel_tall(const PanelArgs args) {
    constexpr int NB = 32;
    constexpr int WARPS = THREADS / 32;
    static_assert(NB % W == 0 && WARPS <= 32 && THREADS >= NB, "sub-panels; an offer a lane");
    __shared__ T offer_row[2][WARPS][W];  // each warp's best row, by column parity
    __shared__ u64 offer_image[2][WARPS];
    __shared__ int offer_place[2][WARPS];
    __shared__ int offer_home[2][WARPS];  // where that row lies (its row from k0)
    __shared__ T lower[NB][W];            // row c: the pivot row of column c, its sub-panel
    __shared__ int home[NB];              // the row (from k0) column c's pivot row lies in
    __shared__ T upper[W][NB];            // a sub-panel's U12

    const unsigned all = 0xffffffffu;
    const i64 b = blockIdx.x;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const i64 k0 = args.k0;
    const int m = (int)args.m;  // (a panel of one matrix on one block: its rows fit an int)
    const int jb = (int)args.jb;
    const int h = (int)(m - k0);
    const bool pivot = args.pivot != 0;
    T* lu = reinterpret_cast<T*>(args.lu) + b * args.lu_stride + k0 + k0 * args.m;  // (k0, k0)

    int pos[R];  // where each of this thread's rows is now (-1: no row)
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int i = r * THREADS + tid;
        pos[r] = i < h ? i : -1;
    }
    T a[R][W];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int j = 0; j < W; ++j) a[r][j] = (pos[r] >= 0 && j < jb) ? lu[pos[r] + j * m] : T(0);
    }

    int first_zero = 0;
#pragma unroll 1
    for (int c0 = 0; c0 < jb; c0 += W) {
#pragma unroll
        for (int cc = 0; cc < W; ++cc) {
            const int c = c0 + cc;
            if (c < jb) {  // the same for every thread
                const int buf = c & 1;
                u64 image = 0;
                int place = 0x7fffffff;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const bool candidate = pivot ? pos[r] >= c : pos[r] == c;
                    const u64 mine = candidate ? key_image(search_key(a[r][cc])) : 0ull;
                    if (candidate && (mine > image || (mine == image && pos[r] < place))) {
                        image = mine;
                        place = pos[r];
                    }
                }
                warp_pick<sizeof(T) == 8>(image, place);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (pos[r] == place) {  // this thread holds the warp's best row
#pragma unroll
                        for (int j = 0; j < W; ++j) offer_row[buf][warp][j] = a[r][j];
                        offer_home[buf][warp] = r * THREADS + tid;
                    }
                }
                if (lane == 0) {
                    offer_image[buf][warp] = image;
                    offer_place[buf][warp] = place;
                }
                __syncthreads();
                // the block's best, found by every warp alike: lane v takes warp v's offer
                u64 best_image = lane < WARPS ? offer_image[buf][lane] : 0ull;
                const int offered = lane < WARPS ? offer_place[buf][lane] : 0x7fffffff;
                int p = offered;
                warp_pick<sizeof(T) == 8>(best_image, p);
                const int winner = __ffs(__ballot_sync(all, lane < WARPS && offered == p)) - 1;
                const T* prow = offer_row[buf][winner];
                const T d = prow[cc];
                interchange(pos, c, p);
                if (tid < W) lower[c][tid] = prow[tid];
                if (tid == 0) {
                    home[c] = offer_home[buf][winner];
                    if (pivot) {
                        int* ipiv = reinterpret_cast<int*>(args.ipiv) + b * args.ipiv_stride;
                        ipiv[k0 + c] = (int)(k0 + p + 1);
                    }
                    if (d == T(0) && first_zero == 0) first_zero = (int)(k0 + c + 1);
                }
                // L's column (a zero pivot leaves it unscaled, as LAPACK), the rank-1 update
                const bool scale = d != T(0);
                const bool reciprocal = magnitude(d) >= smallest_normal<T>();
                const T inverse = scale ? T(1) / d : T(0);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (pos[r] > c) {
                        T x = a[r][cc];
                        if (scale) x = reciprocal ? x * inverse : x / d;
                        a[r][cc] = x;
#pragma unroll
                        for (int j = cc + 1; j < W; ++j) a[r][j] -= x * prow[j];
                    }
                }
            }
        }

        // the sub-panel goes back where its rows lie (the last one: where they belong)
        const int next = c0 + W;
        const bool last = next >= jb;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (pos[r] >= 0) {
                T* row = lu + (last ? pos[r] : r * THREADS + tid);
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    if (c0 + j < jb) row[(c0 + j) * m] = a[r][j];
                }
            }
        }
        if (last) break;
        __syncthreads();  // lower and home complete; the pivot rows' later columns written
        // U12: the pivot rows' columns right of the sub-panel, solved with its unit lower
        // triangle (lower[c0 + t][u], u < t): one thread a column
        const int later = jb - next;
        if (tid < later) {
            const int col = next + tid;
            T u[W];
#pragma unroll
            for (int t = 0; t < W; ++t) u[t] = lu[home[c0 + t] + col * m];
#pragma unroll
            for (int t = 0; t < W; ++t) {
#pragma unroll
                for (int v = 0; v < t; ++v) u[t] -= lower[c0 + t][v] * u[v];
                upper[t][col] = u[t];
                lu[home[c0 + t] + col * m] = u[t];
            }
        }
        __syncthreads();
        // L21 U12 off this thread's rows below the sub-panel's pivots, right of it, W
        // columns at a time, the farthest first: the next sub-panel's columns come last and
        // stay in registers, each row's replacing its L (a[r]) once that row is done
#pragma unroll 1
        for (int g = (later - 1) / W; g >= 0; --g) {
            const int col0 = next + g * W;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                T* row = lu + (r * THREADS + tid);
                T x[W];
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    x[j] = T(0);
                    if (pos[r] >= 0 && col0 + j < jb) x[j] = row[(col0 + j) * m];
                }
                if (pos[r] >= next) {
#pragma unroll
                    for (int t = 0; t < W; ++t) {
#pragma unroll
                        for (int j = 0; j < W; ++j) {
                            if (col0 + j < jb) x[j] -= a[r][t] * upper[t][col0 + j];
                        }
                    }
                }
#pragma unroll
                for (int j = 0; j < W; ++j) {
                    if (g == 0) {
                        a[r][j] = x[j];
                    } else if (pos[r] >= 0 && col0 + j < jb) {
                        row[(col0 + j) * m] = x[j];
                    }
                }
            }
        }
    }

    if (tid == 0) record_info(args, b, first_zero);
    // the rows that moved, to their places: the columns before the last sub-panel, W at a
    // time (every moved row read, then written)
    const int done = ((jb - 1) / W) * W;  // the last sub-panel's first column
#pragma unroll 1
    for (int c0 = 0; c0 < done; c0 += W) {
        __syncthreads();
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (pos[r] >= 0 && pos[r] != r * THREADS + tid) {
#pragma unroll
                for (int j = 0; j < W; ++j) a[r][j] = lu[(r * THREADS + tid) + (c0 + j) * m];
            }
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (pos[r] >= 0 && pos[r] != r * THREADS + tid) {
#pragma unroll
                for (int j = 0; j < W; ++j) lu[pos[r] + (c0 + j) * m] = a[r][j];
            }
        }
    }
}

struct SwapArgs {
    u64 lu;  // T*
    i64 lu_stride;
    u64 ipiv;  // const int*
    i64 ipiv_stride;
    i64 m;
    i64 k0;
    i64 jb;
    i64 pivot;
    i64 c0, c1, d0, d1;  // the columns taken: [c0, c1) then [d0, d1), none in the panel
};

// The t-th column swap_trsm takes.
__device__ __forceinline__ i64 taken(const SwapArgs& args, i64 t) {
    const i64 first = args.c1 - args.c0;
    return t < first ? args.c0 + t : args.d0 + (t - first);
}

// The panel's row interchanges applied to the columns [c0, c1) and [d0, d1) (every column
// outside the panel [k0, k0 + jb), or a part of them: see _blocked's look-ahead), and in
// those right of the panel rows [k0, k0 + jb) <- L11^-1 rows [k0, k0 + jb) (L11 unit lower,
// from the panel). blockIdx.x is the matrix, blockIdx.y a tile of COLS of those columns; a
// warp takes one column at a time (lane i: row k0 + i), COLS / WARPS of them, after each
// warp composed the interchanges into one gather (``compose``).
template <typename T, int NB, int WARPS, int COLS>
__global__ void __launch_bounds__(WARPS * 32) swap_trsm(const SwapArgs args) {
    static_assert(NB <= 32 && COLS % WARPS == 0, "a lane per panel row; whole warps");
    __shared__ T lower[NB][NB + 1];
    __shared__ int target[NB];  // ipiv[k0 + c] - 1 - k0: the row (from k0) c swaps with

    const unsigned all = 0xffffffffu;
    const i64 b = blockIdx.x;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const i64 m = args.m, k0 = args.k0;
    const int jb = (int)args.jb;
    T* a = reinterpret_cast<T*>(args.lu) + b * args.lu_stride;
    const i64 count = args.c1 - args.c0 + args.d1 - args.d0;  // the columns taken
    const i64 tile = (i64)blockIdx.y * COLS;  // this block's first column of them
    const i64 last = (tile + COLS < count ? tile + COLS : count) - 1;  // this block's last
    if (taken(args, last) > k0) {  // some column right of the panel: L11 is needed
        for (int e = tid; e < jb * jb; e += WARPS * 32) {
            const int i = e % jb, c = e / jb;
            lower[i][c] = a[(k0 + i) + (k0 + c) * m];
        }
    }
    if (tid < jb) {
        const int* ipiv = reinterpret_cast<const int*>(args.ipiv) + b * args.ipiv_stride;
        target[tid] = args.pivot ? (int)(ipiv[k0 + tid] - 1 - k0) : tid;
    }
    __syncthreads();

    const Gather g = compose(target, jb, lane);

    for (int t = warp; t < COLS; t += WARPS) {
        if (tile + t >= count) break;  // the same in every lane of the warp
        const i64 j = taken(args, tile + t);
        T* col = a + k0 + j * m;
        T x = lane < jb ? col[g.top] : T(0);
        const T y = lane < g.moved ? col[g.out_src] : T(0);
        __syncwarp();  // every read of the column before any write
        if (lane < g.moved) col[g.out_row] = y;
        if (j > k0) {
            for (int c = 0; c + 1 < jb; ++c) {
                const T xc = __shfl_sync(all, x, c);
                if (lane > c && lane < jb) x -= lower[lane][c] * xc;
            }
        }
        if (lane < jb) col[lane] = x;
    }
}

struct SolveArgs {
    u64 lu;  // const T*: n x n factors, ld = n
    i64 lu_stride;
    u64 ipiv;  // const int*: n per matrix
    i64 ipiv_stride;
    u64 b;  // const T*: the right-hand sides, any strides (may be x itself)
    i64 b_batch;
    i64 b_row;
    i64 b_col;
    u64 x;  // T*: the solution, column-major n x nrhs, ld = n
    i64 x_stride;
    i64 n;
    i64 nrhs;
    i64 trans;  // 0: A X = B; else A^T X = B
};

// The solves' row order, by the block's threads (``swaps``: scratch of n): row r of P B is
// row order[r] of B, and for A^T the solved row j goes to row destination[j] of X
// (LAPACK's interchanges, in order, or for A^T in reverse, composed into one gather).
// Ends with a barrier: every thread may read the three arrays after it.
__device__ __forceinline__ void solve_order(const int* ipiv, int n, bool transposed, int* swaps,
                                            int* order, int* destination) {
    const int tid = threadIdx.x, threads = blockDim.x;
    for (int r = tid; r < n; r += threads) {
        swaps[r] = ipiv[r] - 1;
        order[r] = r;
    }
    __syncthreads();
    if (tid == 0) {
        for (int s = 0; s < n; ++s) {
            const int r = transposed ? n - 1 - s : s;
            const int t = swaps[r], kept = order[r];
            order[r] = order[t];
            order[t] = kept;
        }
    }
    __syncthreads();
    if (transposed) {
        for (int r = tid; r < n; r += threads) destination[order[r]] = r;
        __syncthreads();
    }
}

// One column of a solve by shuffles: lane ``source`` holds the column's row (divided first
// by ``diag``, its diagonal, where ``divide``), and every lane subtracts ``f`` (its factor
// in that column, 0 where it takes none) times that row's values.
template <typename T, int RT>
__device__ __forceinline__ void shuffle_column(T (&v)[RT], T f, int source, bool divide, T diag) {
    if (divide && (int)(threadIdx.x % 32) == source) {
#pragma unroll
        for (int r = 0; r < RT; ++r) v[r] /= diag;
    }
#pragma unroll
    for (int r = 0; r < RT; ++r) v[r] -= f * __shfl_sync(0xffffffffu, v[r], source);
}

// One chunk of ``getrs``: its rows [k0, k0 + CHUNK) solved, forward (L, unit lower, or
// U^T, lower) or backward (U, upper, or L^T, unit upper), and the rows after it (forward)
// or before it (backward) updated. The chunk's warp takes its rows a column at a time, by
// shuffles, its other lanes' rows updated on the way, and leaves them in ``solved``; the
// other warps' rows still to solve take the chunk's columns at once after the barrier.
// The factors are read before the barrier. Thread i holds row i (``v``, RT values).
template <bool FORWARD, typename T, int RT, int CHUNK>
__device__ __forceinline__ void solve_chunk(T (&v)[RT], T (&solved)[CHUNK][RT], const T* lu,
                                            int n, int k0, bool transposed, T diag) {
    const int i = threadIdx.x, lane = i % 32, warp = i / 32;
    const int owner = k0 / 32;  // the chunk's warp
    const bool later = FORWARD ? warp > owner : warp < owner;
    // op(A)'s factors (i, k0 + t) below (forward) or above the diagonal, else 0: row i of
    // L or U (a column a step), or for A^T column i of U or L (contiguous)
    T f[CHUNK];
    const bool reads = (later || warp == owner) && i < n;
    const T* at = lu + (transposed ? k0 + (i64)i * n : i + (i64)k0 * n);
    const int step = transposed ? 1 : n;
#pragma unroll
    for (int t = 0; t < CHUNK; ++t) {
        const int k = k0 + t;
        f[t] = reads && k < n && (FORWARD ? i > k : i < k) ? at[t * step] : T(0);
    }
    if (warp == owner) {
        const bool divide = FORWARD == transposed;  // by U's or U^T's diagonal
#pragma unroll
        for (int s = 0; s < CHUNK; ++s) {
            const int t = FORWARD ? s : CHUNK - 1 - s;
            if (k0 + t < n) shuffle_column(v, f[t], (k0 + t) % 32, divide, diag);  // row k0 + t
        }
        const int row = lane - k0 % 32;  // of the chunk
        if (row >= 0 && row < CHUNK) {
#pragma unroll
            for (int r = 0; r < RT; ++r) solved[row][r] = v[r];
        }
    }
    __syncthreads();
    if (later) {
#pragma unroll
        for (int t = 0; t < CHUNK; ++t) {
#pragma unroll
            for (int r = 0; r < RT; ++r) v[r] -= f[t] * solved[t][r];
        }
    }
}

// One block per (matrix, RT right-hand sides), one thread per row (n <= blockDim.x <= 1024):
// A = P^T L U, so X = U^-1 L^-1 P B, or for A^T: X = P^T L^-T U^-T B, in chunks of rows
// (``solve_chunk``): one barrier a chunk (its solved rows in one of two buffers, taken in
// turn) instead of one a row. Every read of B comes before the first chunk's barrier and
// every write of X after the last one, so B may be X (in place). Kernel times on an H100
// (ms, float, a barrier a row / chunks of 8 / of 16 rows; 64 right-hand sides: 8 a block,
// or before, 32 a block of at most 128 rows):
//
//   256 x 256, 1 rhs   0.119 / 0.085 / 0.072      256 x 256, 64 rhs    0.817 / 0.627 / 0.632
//   1024 x 16, 1 rhs   0.610 / 0.405 / 0.346      128 x 1024, 64 rhs   0.769 / 0.633 (8 a block)
//                                                   64 x 2048, 16 rhs  0.555 / 0.115 (8 a block)
//
// So chunks of 16 rows for one right-hand side, 8 for eight (doubles in 16-row chunks took
// 1.31 against 1.10 ms at 256 x 256 x 64; ptxas -v: 64 registers, 28 bytes of spill for
// doubles with eight right-hand sides, none elsewhere).
template <typename T, int RT>
__global__ void __launch_bounds__(1024) getrs(const SolveArgs args) {
    constexpr int CHUNK = RT == 1 ? 16 : 8;  // rows a chunk
    constexpr int MAX_N = 1024;
    __shared__ int order[MAX_N];        // row r of P B is row order[r] of B (for A^T: row r
                                        // of X is the solved row order[r])
    __shared__ int destination[MAX_N];  // for A^T: where the solved row r goes in X
    __shared__ int swaps[MAX_N];        // the pivots, 0-based
    __align__(16) __shared__ T solved[2][CHUNK][RT];  // a chunk's solved rows; vector reads

    // blockIdx.x is (matrix, tile of RT right-hand sides), the tiles of a matrix adjacent:
    // they run together, and its factors are read from memory once, then from L2
    const i64 tiles = (args.nrhs + RT - 1) / RT;
    const i64 b = blockIdx.x / tiles;
    const int i = threadIdx.x;
    const i64 n = args.n;
    const int chunks = (int)((n + CHUNK - 1) / CHUNK);
    const i64 first = (i64)(blockIdx.x % tiles) * RT;  // this block's first right-hand side
    const bool transposed = args.trans != 0;
    const T* lu = reinterpret_cast<const T*>(args.lu) + b * args.lu_stride;
    const int* ipiv = reinterpret_cast<const int*>(args.ipiv) + b * args.ipiv_stride;

    solve_order(ipiv, (int)n, transposed, swaps, order, destination);
    T v[RT];
    const T* rhs = reinterpret_cast<const T*>(args.b) + b * args.b_batch;
    const i64 from = i < n ? (transposed ? i : order[i]) : 0;
#pragma unroll
    for (int r = 0; r < RT; ++r) {
        const bool live = i < n && first + r < args.nrhs;
        v[r] = live ? rhs[from * args.b_row + (first + r) * args.b_col] : T(0);
    }
    const T diag = i < n ? lu[i + (i64)i * n] : T(1);  // what row i divides by, read once

    int buf = 0;
    for (int c = 0; c < chunks; ++c, buf ^= 1)
        solve_chunk<true>(v, solved[buf], lu, (int)n, c * CHUNK, transposed, diag);
    for (int c = chunks - 1; c >= 0; --c, buf ^= 1)
        solve_chunk<false>(v, solved[buf], lu, (int)n, c * CHUNK, transposed, diag);

    if (i < n) {
        T* x = reinterpret_cast<T*>(args.x) + b * args.x_stride;
        const i64 to = transposed ? destination[i] : i;
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            if (first + r < args.nrhs) x[to + (first + r) * n] = v[r];
        }
    }
}

// The solve for n <= 32 with few right-hand sides (at most RT): a warp per (matrix, tile of
// RT right-hand sides), a row a lane, the lane's row of op(A)'s factors in registers, and
// each step's solved value reaching the other lanes by a shuffle (no barrier, no shared
// memory round trip a step). The factors come in through a shared memory tile, read a
// column a step (coalesced), so that a lane may take its row (A) or its column (A^T)
// alike. The interchanges are composed by shuffles into ``order`` (row r of P B is row
// order[r] of B; for A^T, row r of X is the solved row order[r]). Every read of B comes
// before the first shuffle of a solved value and every write of X after the last, so B
// may be X (in place). At 4096 32 x 32 floats on an H100, 12.1 us against getrs's 20.3 (a
// row a thread, in chunks) with one right-hand side; with eight, within 4% of it.
template <typename T, int RT>
__global__ void __launch_bounds__(32) getrs_warp(const SolveArgs args) {
    constexpr int N = 32;
    const unsigned all = 0xffffffffu;
    __shared__ T tile[N][N + 1];  // tile[c][r]: the factors' (r, c), padded

    const i64 tiles = (args.nrhs + RT - 1) / RT;
    const i64 b = blockIdx.x / tiles;
    const i64 first = (i64)(blockIdx.x % tiles) * RT;  // this warp's first right-hand side
    const int lane = threadIdx.x;
    const int n = (int)args.n;
    const bool transposed = args.trans != 0;
    const T* lu = reinterpret_cast<const T*>(args.lu) + b * args.lu_stride;
    const int* ipiv = reinterpret_cast<const int*>(args.ipiv) + b * args.ipiv_stride;

#pragma unroll
    for (int c = 0; c < N; ++c) tile[c][lane] = (c < n && lane < n) ? lu[lane + c * n] : T(0);
    const int swap = lane < n ? ipiv[lane] - 1 : lane;  // lane r: row r's interchange
    __syncwarp();
    T a[N];  // A: row lane of L and U; A^T: row lane of U^T and L^T (column lane of both)
#pragma unroll
    for (int k = 0; k < N; ++k) a[k] = transposed ? tile[lane][k] : tile[k][lane];

    int order = lane;
#pragma unroll
    for (int s = 0; s < N; ++s) {
        const int r = transposed ? N - 1 - s : s;  // the same in every lane
        if (r < n) {
            const int t = __shfl_sync(all, swap, r);
            const int at_r = __shfl_sync(all, order, r), at_t = __shfl_sync(all, order, t);
            if (lane == r) order = at_t;
            if (lane == t) order = at_r;
        }
    }

    T v[RT];
    const T* rhs = reinterpret_cast<const T*>(args.b) + b * args.b_batch;
    const i64 from = transposed ? lane : order;
#pragma unroll
    for (int j = 0; j < RT; ++j) {
        const bool live = lane < n && first + j < args.nrhs;
        v[j] = live ? rhs[from * args.b_row + (first + j) * args.b_col] : T(0);
    }
    // forward: L (unit lower) or U^T (lower); backward: U (upper) or L^T (unit upper)
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k < n) shuffle_column(v, lane > k ? a[k] : T(0), k, transposed, a[k]);
    }
#pragma unroll
    for (int k = N - 1; k >= 0; --k) {
        if (k < n) shuffle_column(v, lane < k ? a[k] : T(0), k, !transposed, a[k]);
    }

    T* x = reinterpret_cast<T*>(args.x) + b * args.x_stride;
#pragma unroll
    for (int j = 0; j < RT; ++j) {
        const T out = transposed ? __shfl_sync(all, v[j], order) : v[j];
        if (lane < n && first + j < args.nrhs) x[lane + (first + j) * n] = out;
    }
}

// The solve for n <= 32 with many right-hand sides: a thread per right-hand side (its
// column of B in registers) instead of a thread per row, the matrix's factors in shared
// memory, read by every thread alike (broadcasts). The row-a-thread kernel shares a
// solved row through shared memory every step, and where thousands of small matrices
// have many right-hand sides that traffic is what bounds it; here each factor is read
// once a thread and nothing else is shared. A block per (matrix, blockDim.x right-hand
// sides), its tiles adjacent. Every read of B comes before the last barrier and every
// write of X after it, so B may be X (in place). The interchanges and the order of the
// steps are those of ``getrs``.
constexpr int SOLVE_COLUMNS_THREADS = 64;  // the most right-hand sides a block

template <typename T>
__global__ void __launch_bounds__(SOLVE_COLUMNS_THREADS) getrs_columns(const SolveArgs args) {
    constexpr int N = 32;
    __align__(16) __shared__ T factors[N][N];  // [column][row]: a column read as vectors
    __shared__ int order[N];
    __shared__ int destination[N];
    __shared__ int swaps[N];

    const int threads = (int)blockDim.x;
    const i64 tiles = (args.nrhs + threads - 1) / threads;
    const i64 b = blockIdx.x / tiles;
    const int tid = threadIdx.x;
    const int n = (int)args.n;
    const i64 col = (i64)(blockIdx.x % tiles) * threads + tid;  // this thread's right-hand side
    const bool transposed = args.trans != 0;
    const T* lu = reinterpret_cast<const T*>(args.lu) + b * args.lu_stride;
    const int* ipiv = reinterpret_cast<const int*>(args.ipiv) + b * args.ipiv_stride;

    for (int e = tid; e < n * n; e += threads) factors[e / n][e % n] = lu[e];
    solve_order(ipiv, n, transposed, swaps, order, destination);

    const bool live = col < args.nrhs;  // (every thread stays: it meets the last barrier)
    const T* rhs = reinterpret_cast<const T*>(args.b) + b * args.b_batch + col * args.b_col;
    T v[N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
        v[r] = T(0);
        if (live && r < n) v[r] = rhs[(i64)(transposed ? r : order[r]) * args.b_row];
    }
    if (!transposed) {
#pragma unroll
        for (int k = 0; k < N; ++k) {  // L (unit lower), forward
            if (k < n) {
#pragma unroll
                for (int i = k + 1; i < N; ++i) v[i] -= factors[k][i] * v[k];
            }
        }
#pragma unroll
        for (int k = N - 1; k >= 0; --k) {  // U, backward
            if (k < n) {
                v[k] /= factors[k][k];
#pragma unroll
                for (int i = 0; i < k; ++i) v[i] -= factors[k][i] * v[k];
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k) {  // U^T (lower), forward
            if (k < n) {
                v[k] /= factors[k][k];
#pragma unroll
                for (int i = k + 1; i < N; ++i) v[i] -= factors[i][k] * v[k];
            }
        }
#pragma unroll
        for (int k = N - 1; k >= 0; --k) {  // L^T (unit upper), backward
            if (k < n) {
#pragma unroll
                for (int i = 0; i < k; ++i) v[i] -= factors[i][k] * v[k];
            }
        }
    }
    // X through shared memory: the block's columns are one run of X, written coalesced
    // (a thread writing its own column would touch a line per lane a store)
    __shared__ T staged[SOLVE_COLUMNS_THREADS][N + 1];  // [column][row], padded
#pragma unroll
    for (int r = 0; r < N; ++r) {
        if (r < n) staged[tid][transposed ? destination[r] : r] = v[r];
    }
    __syncthreads();
    const i64 first = col - tid;
    const i64 count = (args.nrhs - first < threads ? args.nrhs - first : threads) * n;
    T* x = reinterpret_cast<T*>(args.x) + b * args.x_stride + first * n;
    for (int e = tid; e < count; e += threads) x[e] = staged[e / n][e % n];
}

}  // namespace vram_lu

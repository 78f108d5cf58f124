// What the reduction, scan and row kernels share: bounds of element types, NaN-propagating
// max and min, vector loads, and the combining of values across a group of threads.
//
// A group is the blockDim.x threads of one row of a block (threadIdx.y picks the row):
// part of a warp (blockDim.x < 32: consecutive lanes, so a shuffle of that width stays in
// the group), one warp, or several warps (blockDim.x a multiple of 32, combined through
// shared memory). blockDim.x is always a power of two and a block is whole warps, so every
// lane of a warp reaches every shuffle.

namespace vram {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;
constexpr int kMaxWarps = 32;  // warps in a block of 1024 threads

// ---- bounds ----------------------------------------------------------------------------------
// lowest(): the identity of max (-inf for floating point); highest(): the identity of min.
template <typename T> struct Bounds;
template <> struct Bounds<float> {
    static __device__ float lowest() { return __int_as_float(0xff800000); }
    static __device__ float highest() { return __int_as_float(0x7f800000); }
};
template <> struct Bounds<double> {
    static __device__ double lowest() { return __longlong_as_double(0xfff0000000000000ll); }
    static __device__ double highest() { return __longlong_as_double(0x7ff0000000000000ll); }
};
template <> struct Bounds<signed char> {
    static __device__ signed char lowest() { return -128; }
    static __device__ signed char highest() { return 127; }
};
template <> struct Bounds<short> {
    static __device__ short lowest() { return -32768; }
    static __device__ short highest() { return 32767; }
};
template <> struct Bounds<int> {
    static __device__ int lowest() { return -2147483647 - 1; }
    static __device__ int highest() { return 2147483647; }
};
template <> struct Bounds<long long> {
    static __device__ long long lowest() { return -9223372036854775807ll - 1; }
    static __device__ long long highest() { return 9223372036854775807ll; }
};
template <> struct Bounds<unsigned char> {
    static __device__ unsigned char lowest() { return 0; }
    static __device__ unsigned char highest() { return 255; }
};
template <> struct Bounds<bool> {
    static __device__ bool lowest() { return false; }
    static __device__ bool highest() { return true; }
};

// max and min that return NaN when either is NaN (torch.amax, torch.max, the inf norms)
template <typename T> __device__ inline T max_nan(T a, T b) {
    return (is_nan(a) || a > b) ? a : b;
}
template <typename T> __device__ inline T min_nan(T a, T b) {
    return (is_nan(a) || a < b) ? a : b;
}

template <typename T> __device__ inline bool is_inf(T x) {
    if constexpr (IsFloat<T>::value) return x == Bounds<T>::highest() || x == Bounds<T>::lowest();
    else return false;
}

// ---- vector loads ----------------------------------------------------------------------------
template <int N, typename T> struct alignas(sizeof(T) * N) Vec {
    T v[N];
};

template <int N, typename T> __device__ inline Vec<N, T> load_vec(const T* p) {
    return *reinterpret_cast<const Vec<N, T>*>(p);
}

// ---- shuffles of any accumulator type, moved as 32-bit words ----------------------------------
template <typename T, typename Move> __device__ inline T shuffle(const T& value, Move move) {
    constexpr int kWords = (sizeof(T) + 3) / 4;
    int words[kWords] = {};
    memcpy(words, &value, sizeof(T));
#pragma unroll
    for (int k = 0; k < kWords; ++k) words[k] = move(words[k]);
    T result;
    memcpy(&result, words, sizeof(T));
    return result;
}

template <typename T> __device__ inline T shfl_xor(const T& value, int mask, int width) {
    return shuffle(value, [=](int w) { return __shfl_xor_sync(kFullMask, w, mask, width); });
}
template <typename T> __device__ inline T shfl_up(const T& value, int delta, int width) {
    return shuffle(value, [=](int w) { return __shfl_up_sync(kFullMask, w, delta, width); });
}
template <typename T> __device__ inline T shfl(const T& value, int lane, int width) {
    return shuffle(value, [=](int w) { return __shfl_sync(kFullMask, w, lane, width); });
}

// ---- a group's combined value --------------------------------------------------------------
// Every thread of the group gets f over the group's values. The same order of combining in
// every group, so every thread of a group holds the same bits. `scratch` holds kMaxWarps
// values in shared memory; every thread of the block must call this (it may synchronize).
template <typename T, typename F> __device__ inline T group_allreduce(T v, F f, T* scratch) {
    const int width = blockDim.x < kWarpSize ? blockDim.x : kWarpSize;
    for (int mask = width / 2; mask > 0; mask /= 2) v = f(v, shfl_xor(v, mask, width));
    if (blockDim.x <= kWarpSize) return v;
    const int warps = blockDim.x / kWarpSize;  // per group
    T* mine = scratch + threadIdx.y * warps;
    __syncthreads();  // an earlier call's readers are done with scratch
    if (threadIdx.x % kWarpSize == 0) mine[threadIdx.x / kWarpSize] = v;
    __syncthreads();
    v = mine[0];
    for (int w = 1; w < warps; ++w) v = f(v, mine[w]);
    return v;
}

}  // namespace vram

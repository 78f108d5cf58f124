// Random numbers: curand's Philox4x32-10 streams as PyTorch's CUDA generator drives them,
// the distributions of PyTorch's CUDA kernels, dropout and randperm.
//
// Every kernel takes the generator's (seed, offset) by value, or, while a stream captures a
// CUDA graph, a pointer to the generator's device state {seed, offset} and the offset of
// this launch within the graph (PyTorch's PhiloxCudaState): then each replay reads the
// state that CUDAGraph.replay wrote for it, so every replay draws new numbers.
//
// ops/_random/_philox.py computes the same in NumPy; its Note [The layout of a draw] says
// which element takes which number.

namespace vram {
namespace rng {

constexpr unsigned kW0 = 0x9E3779B9u;  // Philox's key increments
constexpr unsigned kW1 = 0xBB67AE85u;
constexpr unsigned kM0 = 0xD2511F53u;  // Philox's multipliers
constexpr unsigned kM1 = 0xCD9E8D57u;
constexpr int kBlock = 256;  // threads per block of every kernel here

// Philox4x32-10 of counter c under key k (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3"; curand's curand_Philox4x32_10).
__device__ inline uint4 philox(uint4 c, uint2 k) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k.x += kW0;
            k.y += kW1;
        }
        const unsigned hi0 = __umulhi(kM0, c.x), lo0 = kM0 * c.x;
        const unsigned hi1 = __umulhi(kM1, c.z), lo1 = kM1 * c.z;
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

// curand_init(seed, subsequence, offset) for an offset that is a multiple of 4, then one
// block per curand4(): the counter is subsequence * 2**64 + offset / 4, plus one per call.
struct Stream {
    uint4 counter;
    uint2 key;

    __device__ Stream(unsigned long long seed, unsigned long long subsequence,
                      unsigned long long offset) {
        const unsigned long long low = offset / 4;
        counter = make_uint4(unsigned(low), unsigned(low >> 32), unsigned(subsequence),
                             unsigned(subsequence >> 32));
        key = make_uint2(unsigned(seed), unsigned(seed >> 32));
    }

    __device__ uint4 next() {
        const uint4 block = philox(counter, key);
        if (++counter.x == 0 && ++counter.y == 0 && ++counter.z == 0) ++counter.w;
        return block;
    }
};

// The (seed, offset) a launch uses: given, or read from the generator's device state.
__device__ inline void resolve(unsigned long long& seed, unsigned long long& offset,
                               const unsigned long long* state) {
    if (state != nullptr) {
        seed = state[0];
        offset += state[1];
    }
}

// ---- samplers: one Philox block -> `unroll` values, as curand's --------------------------
__device__ inline float uniform_float(unsigned x) {  // (0, 1]: curand_uniform
    return __uint2float_rn(x) * 0x1p-32f + 0x1p-33f;
}

__device__ inline double uniform_double(unsigned x, unsigned y) {  // (0, 1], 53 bits
    const unsigned long long z = (unsigned long long)x ^ ((unsigned long long)y << 21);
    return double(z) * 0x1p-53 + 0x1p-54;
}

constexpr float kInv2Pi32 = 2.3283064e-10f * 6.2831855f;  // curand's CURAND_2POW32_INV_2PI

__device__ inline float2 box_muller(unsigned x, unsigned y) {  // curand's _curand_box_muller
    const float u = uniform_float(x);
    const float v = fmaf(__uint2float_rn(y), kInv2Pi32, kInv2Pi32 / 2.0f);
    const float s = sqrtf(-2.0f * logf(u));
    float sine, cosine;
    __sincosf(v, &sine, &cosine);
    return make_float2(sine * s, cosine * s);
}

struct UniformFloat {
    static constexpr int unroll = 4;
    using value = float;
    __device__ static void draw(uint4 r, float (&v)[4]) {
        v[0] = uniform_float(r.x);
        v[1] = uniform_float(r.y);
        v[2] = uniform_float(r.z);
        v[3] = uniform_float(r.w);
    }
};

struct UniformDouble {
    static constexpr int unroll = 2;
    using value = double;
    __device__ static void draw(uint4 r, double (&v)[2]) {
        v[0] = uniform_double(r.x, r.y);
        v[1] = uniform_double(r.z, r.w);
    }
};

struct NormalFloat {
    static constexpr int unroll = 4;
    using value = float;
    __device__ static void draw(uint4 r, float (&v)[4]) {
        const float2 a = box_muller(r.x, r.y), b = box_muller(r.z, r.w);
        v[0] = a.x;
        v[1] = a.y;
        v[2] = b.x;
        v[3] = b.y;
    }
};

struct NormalDouble {  // curand's _curand_box_muller_double
    static constexpr int unroll = 2;
    using value = double;
    __device__ static void draw(uint4 r, double (&v)[2]) {
        const double u = uniform_double(r.x, r.y);
        const unsigned long long zy =
            (unsigned long long)r.z ^ ((unsigned long long)r.w << 21);
        const double angle = double(zy) * 0x1p-52 + 0x1p-53;
        const double s = sqrt(-2.0 * log(u));
        double sine, cosine;
        sincospi(angle, &sine, &cosine);
        v[0] = sine * s;
        v[1] = cosine * s;
    }
};

struct Bits32 {
    static constexpr int unroll = 4;
    using value = unsigned long long;
    __device__ static void draw(uint4 r, unsigned long long (&v)[4]) {
        v[0] = r.x;
        v[1] = r.y;
        v[2] = r.z;
        v[3] = r.w;
    }
};

struct Bits64 {
    static constexpr int unroll = 2;
    using value = unsigned long long;
    __device__ static void draw(uint4 r, unsigned long long (&v)[2]) {
        v[0] = ((unsigned long long)r.x << 32) | r.y;
        v[1] = ((unsigned long long)r.z << 32) | r.w;
    }
};

// r * scale + shift: fused in float (as nvcc contracts PyTorch's), two roundings in double
// (so that NumPy reproduces it exactly).
__device__ inline float mul_add(float r, float scale, float shift) { return fmaf(r, scale, shift); }
__device__ inline double mul_add(double r, double scale, double shift) {
    return __dadd_rn(__dmul_rn(r, scale), shift);
}

// ---- transforms: a sampled value -> the element (`index` for those that read an input) ----
template <typename T, typename A> struct UniformTo {  // uniform_(low, high)
    A low, span, high;  // low and high as T values
    __device__ T operator()(A r, long long) const {
        const T value = narrow<T>(mul_add(r, span, low));
        return widen(value) == high ? narrow<T>(low) : value;
    }
};

template <typename T, typename A> struct Normal {  // normal_(mean, std)
    A mean, std;
    __device__ T operator()(A r, long long) const { return narrow<T>(mul_add(r, std, mean)); }
};

template <typename T> struct FromTo {  // random_(low, high); span 0: all 64 bits, as they are
    unsigned long long span;
    long long low;
    __device__ T operator()(unsigned long long bits, long long) const {
        const unsigned long long value = span ? bits % span + (unsigned long long)low : bits;
        return narrow<T>((long long)value);
    }
};

template <typename T, typename A> struct Bernoulli {  // bernoulli_(p)
    A p;
    __device__ T operator()(A r, long long) const { return narrow<T>(A(r < p ? 1 : 0)); }
};

template <typename T, typename A> struct BernoulliTensor {  // bernoulli_(p tensor)
    const A* p;  // one probability per element, laid out as the output
    __device__ T operator()(A r, long long index) const {
        return narrow<T>(A(r <= p[index] ? 1 : 0));
    }
};

template <typename T, typename A> struct Dropout {  // x * (r < keep) * scale
    const T* input;  // laid out as the output
    A keep, scale;
    __device__ T operator()(float r, long long index) const {
        const A mask = A(r) < keep ? A(1) : A(0);
        return narrow<T>(widen(input[index]) * mask * scale);
    }
};

// ---- the kernels ----------------------------------------------------------------------
// A draw (PyTorch's distribution_nullary_kernel): thread t of T takes elements
// t + T * (unroll * j + lane) from its j-th Philox block.
template <typename Sampler, typename T, typename Transform>
__global__ void __launch_bounds__(kBlock)
    draw(T* out, long long n, unsigned long long seed, unsigned long long offset,
         const unsigned long long* state, Transform transform) {
    resolve(seed, offset, state);
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long threads = (long long)gridDim.x * blockDim.x;
    Stream stream(seed, thread, offset);
    for (long long first = thread; first < n; first += threads * Sampler::unroll) {
        typename Sampler::value values[Sampler::unroll];
        Sampler::draw(stream.next(), values);
#pragma unroll
        for (int lane = 0; lane < Sampler::unroll; ++lane) {
            const long long index = first + threads * lane;
            if (index < n) out[index] = transform(values[lane], index);
        }
    }
}

// Note [randperm]
// out[i] is the first value below n on the cycle of i under a bijection P of [0, 2**bits)
// (cycle walking, Black and Rogaway): a permutation of [0, n), each element computed on
// its own, so one launch of n threads and no sort. P is an unbalanced Feistel network of
// kPermuteRounds rounds on (high, low) halves with additive rounds, (high, low) ->
// (low, high + F_r(low) mod 2**left), whose round function F_r is Philox under a key drawn
// from the generator's stream (thread 0, one block: the offset advances by 4). Additive
// rounds make the permutation's parity random (XOR rounds give only even permutations);
// twelve rounds, as fewer leave a measurable bias over the permutations of small n (8
// rounds do on 2**3 elements). With 2**bits < 2 n a walk takes two steps on average.
constexpr int kPermuteRounds = 12;

struct Permutation {
    uint4 material;  // the stream's block: the round key (x, y) and counter words (z, w)
    unsigned right, left;  // bits of the low and high halves
    unsigned long long low_mask, left_mask;

    __device__ unsigned long long operator()(unsigned long long x) const {
#pragma unroll 1
        for (unsigned round = 0; round < kPermuteRounds; ++round) {
            const unsigned long long low = x & low_mask, high = x >> right;
            const uint4 f = philox(make_uint4(unsigned(low), round, material.z, material.w),
                                   make_uint2(material.x, material.y));
            x = (low << left) | ((high + f.x) & left_mask);
        }
        return x;
    }
};

template <typename T>
__global__ void __launch_bounds__(kBlock)
    randperm(T* __restrict__ out, long long n, unsigned long long seed,
             unsigned long long offset, const unsigned long long* state, unsigned bits) {
    resolve(seed, offset, state);
    Permutation permute;
    permute.material = Stream(seed, 0, offset).next();
    permute.right = bits / 2;
    permute.left = bits - permute.right;
    permute.low_mask = (1ull << permute.right) - 1;
    permute.left_mask = (1ull << permute.left) - 1;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        unsigned long long value = permute((unsigned long long)i);
        while (value >= (unsigned long long)n) value = permute(value);
        out[i] = narrow<T>((long long)value);
    }
}

// CUDAGraph.replay's prologue: the generator's state for this replay.
__global__ void set_state(unsigned long long* state, unsigned long long seed,
                          unsigned long long offset) {
    state[0] = seed;
    state[1] = offset;
}

}  // namespace rng
}  // namespace vram

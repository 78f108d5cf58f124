"""The arithmetic of vram's random numbers in NumPy: Philox4x32-10, the element layout of a
draw and the transforms of kernels/random.cu, bit for bit where the kernel's arithmetic is
exact (integers, uniform floats and doubles, Bernoulli draws) and within the rounding of
log, sqrt, sin and cos for normal ones. The simulated GPU and the cpu device run these.

Note [The layout of a draw]
A draw of ``numel`` values is PyTorch's ``distribution_nullary_kernel``: ``T`` threads
(blocks of 256, at most 1056 blocks: PyTorch's grid on a 132-SM H100, fixed here so that the
numbers never depend on the device), thread ``t`` starts curand's Philox stream at
``(seed, subsequence t, offset)`` and its ``j``-th call gives one 128-bit block, which
feeds ``unroll`` elements: element ``e = t + T * (unroll * j + lane)``. The block of
thread ``t``, call ``j`` is Philox4x32-10 of the counter ``t * 2**64 + offset // 4 + j``
(words low to high) under the key ``seed`` (low word first). A draw advances the
generator's offset by 4 per call a thread makes: ``increment(numel, unroll)``.

Samplers (how a block becomes ``unroll`` values, as curand's):
- ``uniform32`` (4 floats in (0, 1]): ``x * 2**-32 + 2**-33`` per word;
- ``uniform64`` (2 doubles in (0, 1]): 53 bits ``x ^ (y << 21)``, ``* 2**-53 + 2**-54``;
- ``normal32`` (4 floats): Box-Muller of the words (x, y), then (z, w); the kernel uses
  the fast ``__sincosf``, as curand does, so its sines and cosines differ from these by
  that approximation's error (a few times 1e-7 before the radius scales them);
- ``normal64`` (2 doubles): Box-Muller of the 53-bit values of (x, y) and (z, w);
- ``bits32`` (the 4 words), ``bits64`` (``x << 32 | y`` and ``z << 32 | w``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "BLOCK",
    "MAX_BLOCKS",
    "UNROLL",
    "philox",
    "threads",
    "increment",
    "sample",
    "fma32",
    "uniform_to",
    "normal",
    "from_to",
    "randperm",
    "permutation",
    "PERMUTE_ROUNDS",
]

BLOCK = 256  # threads per block of a draw
MAX_BLOCKS = 1056  # blocks per draw at most: 132 multiprocessors x 8 blocks (an H100's)
UNROLL = {"uniform32": 4, "uniform64": 2, "normal32": 4, "normal64": 2, "bits32": 4, "bits64": 2}
PERMUTE_ROUNDS = 12  # Feistel rounds of randperm's bijection (kPermuteRounds)

_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)  # Philox's key increments
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # Philox's multipliers
_MASK32 = 0xFFFFFFFF
_U32 = np.uint64(_MASK32)
_S32 = np.uint64(32)
_F32 = np.float32
_INV_2PI_32 = _F32(_F32(2.3283064e-10) * _F32(6.2831855))  # curand's CURAND_2POW32_INV_2PI


def philox(c0: Any, c1: Any, c2: Any, c3: Any, k0: Any, k1: Any) -> tuple[np.ndarray, ...]:
    """Philox4x32-10 of the counter words ``c0..c3`` under the key ``(k0, k1)`` (arrays
    or ints, broadcast together; low words first): the four output words as uint64 arrays
    (each below 2**32)."""
    c0, c1, c2, c3, k0, k1 = (np.asarray(v, np.uint64) for v in (c0, c1, c2, c3, k0, k1))
    for r in range(10):
        if r:
            k0, k1 = (k0 + _W0) & _U32, (k1 + _W1) & _U32
        p0 = c0 * _M0
        p1 = c2 * _M1
        c0, c1, c2, c3 = (p1 >> _S32) ^ c1 ^ k0, p1 & _U32, (p0 >> _S32) ^ c3 ^ k1, p0 & _U32
    return c0, c1, c2, c3


def threads(numel: int) -> int:
    """Threads of a draw of ``numel`` values (see Note [The layout of a draw])."""
    return BLOCK * min(-(-numel // BLOCK), MAX_BLOCKS)


def increment(numel: int, unroll: int) -> int:
    """How far a draw of ``numel`` values advances the generator's offset."""
    return ((numel - 1) // (threads(numel) * unroll) + 1) * 4


def _blocks(seed: int, offset: int, numel: int, unroll: int) -> tuple[np.ndarray, ...]:
    """Every thread's blocks of a draw: four (calls, threads) word arrays."""
    count = threads(numel)
    calls = -(-numel // (count * unroll))
    base = np.uint64(offset // 4)
    low = base + np.arange(calls, dtype=np.uint64)[:, None]  # wraps past 2**64, carrying
    high = np.arange(count, dtype=np.uint64)[None, :] + (low < base).astype(np.uint64)
    return philox(low & _U32, low >> _S32, high & _U32, high >> _S32, seed & _MASK32, seed >> 32)


def _uniform32(word: np.ndarray) -> np.ndarray:
    return word.astype(np.uint32).astype(_F32) * _F32(2.0**-32) + _F32(2.0**-33)


def _uniform64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    z = x ^ (y << np.uint64(21))
    return z.astype(np.float64) * 2.0**-53 + 2.0**-54


def _box_muller32(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = _uniform32(x)
    v = fma32(y.astype(np.uint32).astype(_F32), _INV_2PI_32, _INV_2PI_32 / _F32(2))
    s = np.sqrt(_F32(-2) * np.log(u.astype(np.float64)).astype(_F32))
    v64 = v.astype(np.float64)
    return np.sin(v64).astype(_F32) * s, np.cos(v64).astype(_F32) * s


def _box_muller64(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> tuple:
    u = _uniform64(x, y)
    v = (z ^ (w << np.uint64(21))).astype(np.float64) * 2.0**-52 + 2.0**-53
    s = np.sqrt(-2.0 * np.log(u))
    return np.sin(np.pi * v) * s, np.cos(np.pi * v) * s


def sample(kind: str, seed: int, offset: int, numel: int) -> np.ndarray:
    """The ``numel`` values of a draw by sampler ``kind`` (float32, float64 or uint64)."""
    x, y, z, w = _blocks(seed, offset, numel, UNROLL[kind])
    if kind == "uniform32":
        lanes = [_uniform32(word) for word in (x, y, z, w)]
    elif kind == "uniform64":
        lanes = [_uniform64(x, y), _uniform64(z, w)]
    elif kind == "normal32":
        lanes = [*_box_muller32(x, y), *_box_muller32(z, w)]
    elif kind == "normal64":
        lanes = list(_box_muller64(x, y, z, w))
    elif kind == "bits32":
        lanes = [x, y, z, w]
    else:
        lanes = [(x << _S32) | y, (z << _S32) | w]
    return np.stack(lanes, axis=1).reshape(-1)[:numel]  # (calls, lanes, threads): e's order


def fma32(a: Any, b: Any, c: Any) -> np.ndarray:
    """``fmaf(a, b, c)`` of float32 values, rounded once as the GPU's fused multiply-add:
    the product is exact in float64, and the float64 sum's own rounding error decides the
    float32 rounding where that sum lands exactly between two floats."""
    a, b, c = (np.asarray(v, _F32).astype(np.float64) for v in (a, b, c))
    p = a * b
    s = p + c
    t = s - p
    error = (p - (s - t)) + (c - t)  # s + error == p + c exactly (TwoSum)
    f = s.astype(_F32)
    with np.errstate(invalid="ignore"):
        toward = np.where(s > f.astype(np.float64), np.inf, -np.inf).astype(_F32)
        other = np.nextafter(f, toward)
        middle = (f.astype(np.float64) + other.astype(np.float64)) / 2 == s
        up = np.maximum(f, other)
        down = np.minimum(f, other)
    return np.where(middle & (error != 0), np.where(error > 0, up, down), f)


def _mul_add(r: np.ndarray, scale: Any, shift: Any) -> np.ndarray:
    """``r * scale + shift`` as the kernel computes it: fused for float, two roundings for
    double (the kernel keeps them apart so that this can be exact)."""
    if r.dtype == _F32:
        return fma32(r, scale, shift)
    return r * np.float64(scale) + np.float64(shift)


def uniform_to(r: np.ndarray, low: Any, span: Any, high: Any, dtype: np.dtype) -> np.ndarray:
    """PyTorch's CUDA ``uniform_``: ``r * span + low`` in ``dtype``, and ``low`` where that
    rounds to ``high`` (curand's (0, 1] turned into [low, high))."""
    value = _mul_add(r, span, low)
    if dtype != value.dtype:
        value = value.astype(dtype)
    hits = value.astype(r.dtype) == r.dtype.type(high)
    return np.where(hits, np.asarray(low, r.dtype).astype(dtype), value)


def normal(r: np.ndarray, mean: Any, std: Any, dtype: np.dtype) -> np.ndarray:
    """``r * std + mean``, in ``dtype``."""
    return _mul_add(r, std, mean).astype(dtype, copy=False)


def from_to(bits: np.ndarray, span: int, low: int, dtype: np.dtype) -> np.ndarray:
    """PyTorch's ``random_(from, to)``: ``bits % span + low`` in 64-bit two's complement
    (``span`` 0: the 64 bits as they are), converted to ``dtype`` (through float32 for
    16-bit floats, as the kernel converts)."""
    if span:
        bits = bits % np.uint64(span) + np.uint64(low & 0xFFFFFFFFFFFFFFFF)
    value = bits.view(np.int64)
    if dtype.itemsize == 2 and dtype.kind not in "iu":
        value = value.astype(_F32)
    return value.astype(dtype)


def randperm(seed: int, offset: int, n: int) -> np.ndarray:
    """A permutation of ``range(n)`` (int64): see kernels/random.cu's Note [randperm]."""
    if n <= 1:
        return np.zeros(n, np.int64)
    base = offset // 4
    key = philox(base & _MASK32, base >> 32, 0, 0, *_key(seed))
    return permutation(key, n)


def permutation(key: tuple, n: int) -> np.ndarray:
    """randperm's permutation of ``range(n)`` under the Philox block ``key`` (four words;
    arrays of shape (k,) give k permutations, shape (k, n))."""
    k0, k1, k2, k3 = (np.asarray(v, np.uint64) for v in key)
    shape = (*np.broadcast_shapes(k0.shape, k1.shape, k2.shape, k3.shape), n)
    keys = [np.broadcast_to(v[..., None], shape).reshape(-1) for v in (k0, k1, k2, k3)]
    bits = (n - 1).bit_length()
    right = bits // 2
    left = bits - right
    low_mask, left_mask = np.uint64((1 << right) - 1), np.uint64((1 << left) - 1)

    def permute(x: np.ndarray, k: list[np.ndarray]) -> np.ndarray:
        for r in range(PERMUTE_ROUNDS):
            low, high = x & low_mask, x >> np.uint64(right)
            f = philox(low, r, k[2], k[3], k[0], k[1])[0]
            x = (low << np.uint64(left)) | ((high + f) & left_mask)
        return x

    out = permute(np.broadcast_to(np.arange(n, dtype=np.uint64), shape).reshape(-1), keys)
    outside = out >= np.uint64(n)
    while outside.any():  # cycle walking: the bijection of [0, 2**bits) restricted to [0, n)
        out[outside] = permute(out[outside], [k[outside] for k in keys])
        outside = out >= np.uint64(n)
    return out.astype(np.int64).reshape(shape)


def _key(seed: int) -> tuple[int, int]:
    return seed & _MASK32, seed >> 32

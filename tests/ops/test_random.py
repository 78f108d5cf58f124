"""Random numbers on sim (and cpu): generators, seeding, the ops' numbers, distributions,
errors, and graph capture. The NumPy reference (the sim's kernel) is checked against an
independent Philox with curand's stream semantics, written here from the paper's rounds."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

import vram
import vram.nn.functional as F
from vram.ops._random import _philox

pytestmark = pytest.mark.usefixtures("sim0")

MASK32 = 0xFFFFFFFF


# ---- an independent Philox4x32-10 with curand's state machine (pure Python ints) ---------
def philox_rounds(ctr: list[int], key: list[int]) -> list[int]:
    c, k = list(ctr), list(key)
    for r in range(10):
        if r:
            k = [(k[0] + 0x9E3779B9) & MASK32, (k[1] + 0xBB67AE85) & MASK32]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & MASK32, (p0 >> 32) ^ c[3] ^ k[1], p0 & MASK32]
    return c


class CurandPhilox:
    """curandStatePhilox4_32_10_t: curand_init(seed, subsequence, offset), curand4()."""

    def __init__(self, seed: int, subsequence: int, offset: int) -> None:
        self.key = [seed & MASK32, seed >> 32]
        self.ctr = 0
        self.ctr += subsequence << 64  # skipahead_sequence: the high 64 bits
        self.state = offset & 3  # skipahead: the output index, then whole blocks
        self.ctr += offset >> 2
        self.output = self.block()

    def block(self) -> list[int]:
        ctr = self.ctr % (1 << 128)
        return philox_rounds([(ctr >> (32 * i)) & MASK32 for i in range(4)], self.key)

    def curand4(self) -> list[int]:
        previous = self.output
        self.ctr += 1
        self.output = self.block()
        return (previous + self.output)[self.state : self.state + 4]


def element_words(seed: int, offset: int, numel: int, unroll: int) -> list[list[int]]:
    """Each element's block and lane, walked as PyTorch's distribution kernel does."""
    threads = 256 * min(-(-numel // 256), 1056)
    found: list[list[int]] = [[] for _ in range(numel)]
    for t in range(min(threads, numel)):
        stream = CurandPhilox(seed, t, offset)
        first = t
        while first < numel:
            block = stream.curand4()
            for lane in range(unroll):
                e = first + threads * lane
                if e < numel:
                    found[e] = block[lane * (4 // unroll) : (lane + 1) * (4 // unroll)]
            first += threads * unroll
    return found


def test_philox_matches_the_random123_known_answers():
    vectors = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((MASK32,) * 4, (MASK32,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for ctr, key, expected in vectors:
        assert philox_rounds(list(ctr), list(key)) == list(expected)
        assert [int(v) for v in _philox.philox(*ctr, *key)] == list(expected)


@pytest.mark.parametrize(
    ("seed", "offset", "numel"),
    [(0, 0, 7), (67280421310721, 12, 1000), (2**64 - 1, 2**40, 300), (5, (2**64 - 1) * 4, 9)],
)
def test_reference_layout_matches_an_independent_curand_stream(seed, offset, numel):
    bits32 = _philox.sample("bits32", seed, offset, numel)
    bits64 = _philox.sample("bits64", seed, offset, numel)
    assert [[int(v)] for v in bits32] == element_words(seed, offset, numel, 4)
    pairs = element_words(seed, offset, numel, 2)
    assert [int(v) for v in bits64] == [(x << 32) | y for x, y in pairs]


def test_reference_layout_across_threads_and_calls():
    # past 1056 blocks of 256 threads the threads loop: element e uses thread e % T's call
    numel = 1056 * 256 * 4 + 5
    assert _philox.threads(numel) == 1056 * 256
    assert _philox.increment(numel, 4) == 8
    assert _philox.increment(numel, 2) == 12
    values = _philox.sample("bits32", 3, 8, numel)
    for e in (0, 270335, 270336, 3 * 270336 + 7, numel - 1):
        t, r = e % 270336, e // 270336
        stream = CurandPhilox(3, t, 8)
        for _ in range(r // 4):
            stream.curand4()
        assert int(values[e]) == stream.curand4()[r % 4]


def test_uniform_transforms_are_curands():
    words = np.array([0, 1, 2**24, 2**31 + 77, MASK32 - 100, MASK32], np.uint64)
    got = _philox._uniform32(words)
    for w, v in zip(words, got, strict=True):
        exact = Fraction(int(np.float32(int(w)))) / 2**32 + Fraction(1, 2**33)
        assert Fraction(float(v)) == Fraction(float(np.float32(float(exact))))
    assert got[-1] == 1.0 and got[0] == np.float32(2**-33)
    x = np.array([0, MASK32, 12345], np.uint64)
    y = np.array([0, MASK32, 999], np.uint64)
    z = [int(a) ^ (int(b) << 21) for a, b in zip(x, y, strict=True)]
    expected = [float(Fraction(v, 2**53) + Fraction(1, 2**54)) for v in z]
    assert _philox._uniform64(x, y).tolist() == expected


def round_to_float32(value: Fraction) -> np.float32:
    f = np.float32(float(value))
    candidates = [np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf))]
    return min(
        candidates,
        key=lambda c: (abs(Fraction(float(c)) - value), int(np.array(c).view(np.uint32)) & 1),
    )


def test_fma32_rounds_once():
    # a product on a float32 midpoint plus a term double rounding would lose
    half = np.float32(1 + 2**-12)
    cases = [(half, half, np.float32(2**-80)), (half, half, np.float32(-(2**-80)))]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 200)).astype(np.float32)
    c = (rng.standard_normal(200) * 1e-3).astype(np.float32)
    cases += list(zip(a, b, c, strict=True))
    for x, y, z in cases:
        exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        assert _philox.fma32(x, y, z) == round_to_float32(exact)
    naive = np.float32(float(half) * float(half) + 2**-80)
    assert _philox.fma32(half, half, np.float32(2**-80)) != naive


def test_normal_reference_is_box_muller():
    values = _philox.sample("normal32", 9, 0, 64)
    x, y, z, w = _philox._blocks(9, 0, 64, 4)
    u = (x[0].astype(np.float64) + 0.5) / 2**32
    v = (y[0].astype(np.float64) + 0.5) / 2**32 * 2 * np.pi
    expected = np.sqrt(-2 * np.log(u)) * np.sin(v)
    np.testing.assert_allclose(values[:64], expected[:64], rtol=2e-5, atol=2e-6)
    doubles = _philox.sample("normal64", 9, 0, 64)
    assert doubles.dtype == np.float64 and np.all(np.isfinite(doubles))


# ---- the ops' numbers --------------------------------------------------------------------
def test_same_seed_same_numbers_other_seed_other_numbers():
    vram.manual_seed(1234)
    a = vram.rand(1000).numpy()
    b = vram.randn(1000).numpy()
    vram.manual_seed(1234)
    assert np.array_equal(vram.rand(1000).numpy(), a)
    assert np.array_equal(vram.randn(1000).numpy(), b)
    vram.manual_seed(1235)
    assert not np.array_equal(vram.rand(1000).numpy(), a)


@pytest.mark.parametrize("shape", [(1000,), (3, 5), (2, 0)])
@pytest.mark.parametrize("device", [None, "sim:0"])
def test_randns_remembered_call_draws_what_its_general_path_draws(shape, device):
    """Note [randn's common call]: the kept plan gives the numbers, dtype, shape and
    generator offset that the general path (a dtype given) gives, call after call."""
    where = None if device is None else vram.device(device)
    generator = vram.cuda.default_generators[0]
    runs = []
    for dtype in (vram.float32, None):  # the general path; then the common call (kept)
        vram.manual_seed(5)
        calls = [vram.randn(*shape, dtype=dtype, device=where) for _ in range(3)]
        runs.append(
            ([(t.dtype, t.shape, t.numpy().tolist()) for t in calls], generator.get_offset())
        )
    assert runs[0] == runs[1]


def test_randns_kept_plans_follow_the_default_dtype_the_device_and_the_sizes_types():
    def outcome(call):
        try:
            t = call()
        except Exception as error:  # (whatever the general path does, before and after)
            return type(error).__name__, str(error)
        return t.dtype, t.device, t.shape

    bools = outcome(lambda: vram.randn(True, 2))
    for _ in range(2):
        assert outcome(lambda: vram.randn(1, 2)) == (vram.float32, vram.device("sim:0"), (1, 2))
    assert outcome(lambda: vram.randn(True, 2)) == bools  # (True, 2) == (1, 2) as a key
    vram.set_default_dtype(vram.float64)
    try:
        assert outcome(lambda: vram.randn(1, 2))[0] is vram.float64
    finally:
        vram.set_default_dtype(vram.float32)
    with vram.device("sim:1"):
        assert outcome(lambda: vram.randn(1, 2))[1] == vram.device("sim:1")
    assert outcome(lambda: vram.randn(1, 2))[1] == vram.device("sim:0")


def test_draws_advance_the_offset_by_what_they_consume(sim0):
    vram.manual_seed(7)
    generator = vram.cuda.default_generators[0]
    assert generator.get_offset() == 0
    vram.rand(1000)  # one float4 per thread
    assert generator.get_offset() == 4
    vram.rand(3, dtype=vram.float64)
    assert generator.get_offset() == 8
    vram.rand(1056 * 256 * 4 + 1)  # the threads come round a second time
    assert generator.get_offset() == 16
    vram.rand(0)
    vram.randn(2, 0)
    assert generator.get_offset() == 16  # nothing drawn, nothing consumed
    vram.randperm(10)
    assert generator.get_offset() == 20


def test_rand_is_the_reference_at_the_generators_offset():
    vram.manual_seed(99)
    vram.rand(5)
    got = vram.rand(3000).numpy()
    raw = _philox.sample("uniform32", 99, 4, 3000)
    expected = _philox.uniform_to(raw, 0.0, 1.0, 1.0, np.dtype(np.float32))
    assert np.array_equal(got, expected)
    assert got.min() >= 0 and got.max() < 1


def test_uniform_bounds_are_fused_multiply_adds():
    g = vram.Generator("sim:0").manual_seed(3)
    got = vram.empty(5000).uniform_(-3.0, 5.5, generator=g).numpy()
    raw = _philox.sample("uniform32", 3, 0, 5000)
    expected = _philox.fma32(raw, np.float32(8.5), np.float32(-3.0))
    expected = np.where(expected == np.float32(5.5), np.float32(-3.0), expected)
    assert np.array_equal(got, expected)
    assert got.min() >= -3.0 and got.max() < 5.5


@pytest.mark.parametrize("dt", [vram.float16, vram.bfloat16, vram.float32, vram.float64])
def test_rand_dtypes(dt):
    vram.manual_seed(5)
    got = vram.rand(20000, dtype=dt)
    assert got.dtype is dt
    values = got.numpy().astype(np.float64)
    assert values.min() >= 0 and values.max() < 1  # 1.0 turns into 0, as PyTorch's
    assert abs(values.mean() - 0.5) < 0.01
    if dt is vram.float64:
        raw = _philox.sample("uniform64", 5, 0, 20000)
        assert np.array_equal(got.numpy(), raw)
        assert len(np.unique(values)) == 20000


def test_uniform_moments():
    vram.manual_seed(11)
    x = vram.rand(400_000).numpy().astype(np.float64)
    assert abs(x.mean() - 0.5) < 0.003
    assert abs(x.var() - 1 / 12) < 0.002
    counts = np.histogram(x, bins=20, range=(0, 1))[0]
    assert np.all(np.abs(counts - 20_000) < 800)


@pytest.mark.parametrize("dt", [vram.float32, vram.float64, vram.bfloat16])
def test_normal_moments(dt):
    vram.manual_seed(12)
    x = vram.randn(400_000, dtype=dt).numpy().astype(np.float64)
    assert abs(x.mean()) < 0.01
    assert abs(x.std() - 1) < 0.01
    kurtosis = ((x - x.mean()) ** 4).mean() / x.var() ** 2
    assert abs(kurtosis - 3) < 0.1
    assert abs((np.abs(x) < 1).mean() - 0.6827) < 0.005
    y = vram.empty(100_000, dtype=dt).normal_(3.0, 0.5).numpy().astype(np.float64)
    assert abs(y.mean() - 3) < 0.01 and abs(y.std() - 0.5) < 0.01


def test_randn_is_the_reference():
    vram.manual_seed(13)
    got = vram.randn(1001).numpy()
    assert np.array_equal(got, _philox.sample("normal32", 13, 0, 1001))
    got = vram.randn(1001, dtype=vram.float64).numpy()
    assert np.array_equal(got, _philox.sample("normal64", 13, 4, 1001))


def test_complex_draws():
    vram.manual_seed(14)
    z = vram.randn(100_000, dtype=vram.complex64).numpy()
    assert abs(z.real.var() - 0.5) < 0.01 and abs(z.imag.var() - 0.5) < 0.01
    u = vram.rand(1000, dtype=vram.complex128).numpy()
    assert u.real.min() >= 0 and u.imag.max() < 1


def test_randint_bounds_and_dtypes():
    vram.manual_seed(15)
    x = vram.randint(-3, 4, (50_000,))
    assert x.dtype is vram.int64
    values = x.numpy()
    assert values.min() == -3 and values.max() == 3
    assert np.all(np.abs(np.bincount(values + 3) - 50_000 / 7) < 400)
    assert vram.randint(10, (3, 4)).shape == (3, 4)
    assert vram.randint(high=5, size=(6,)).numpy().max() < 5
    assert vram.randint(0, 2, (100,), dtype=vram.bool).dtype is vram.bool
    small = vram.randint(0, 256, (10_000,), dtype=vram.uint8).numpy()
    assert small.min() == 0 and small.max() == 255
    floats = vram.randint(-5, 5, (1000,), dtype=vram.float16).numpy()
    assert set(np.unique(floats)) <= set(range(-5, 5))


def test_randint_wide_range_takes_64_bits():
    vram.manual_seed(16)
    high = 2**40
    values = vram.randint(0, high, (20_000,)).numpy()
    assert values.min() >= 0 and values.max() < high
    assert abs(values.mean() / high - 0.5) < 0.01
    raw = _philox.sample("bits64", 16, 0, 20_000)
    assert np.array_equal(values, (raw % np.uint64(high)).astype(np.int64))


def test_random_():
    vram.manual_seed(17)
    ints = vram.empty(1000, dtype=vram.int32).random_().numpy()
    assert ints.min() >= 0 and ints.max() > 2**30
    flags = vram.empty(1000, dtype=vram.bool).random_().numpy()
    assert 400 < flags.sum() < 600
    halves = vram.empty(1000, dtype=vram.float16).random_().numpy()
    assert halves.min() >= 0 and halves.max() <= 2049
    assert vram.empty(100).random_(10).numpy().max() < 10
    above = vram.empty(100, dtype=vram.int8).random_(100, None).numpy()
    assert above.min() >= 100
    every = vram.empty(1000, dtype=vram.int64).random_(-(2**63), None).numpy()
    assert every.min() < -(2**60) and every.max() > 2**60


def test_randperm_is_a_permutation():
    vram.manual_seed(18)
    for n in (0, 1, 2, 3, 5, 64, 1000, 65537):
        p = vram.randperm(n).numpy()
        assert p.dtype == np.int64
        assert np.array_equal(np.sort(p), np.arange(n))
    a, b = vram.randperm(1000).numpy(), vram.randperm(1000).numpy()
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(1000))
    half = vram.randperm(2049, dtype=vram.float16).numpy()
    assert np.array_equal(np.sort(half), np.arange(2049, dtype=np.float16))
    assert vram.randperm(5, dtype=vram.float32).dtype is vram.float32


def test_randperm_is_uniform_over_small_permutations():
    samples = 4800  # permutations of 4, each under the key of its own seed and offset
    seeds = np.arange(samples, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(1)
    offsets = np.arange(samples, dtype=np.uint64)
    key = _philox.philox(offsets, 0, 0, 0, seeds & np.uint64(MASK32), seeds >> np.uint64(32))
    perms = _philox.permutation(key, 4)
    assert np.array_equal(np.sort(perms, axis=1), np.tile(np.arange(4), (samples, 1)))
    codes = perms @ np.array([64, 16, 4, 1])
    counts = np.unique(codes, return_counts=True)[1]
    assert len(counts) == 24
    expected = samples / 24
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 60  # 23 degrees of freedom: p < 1e-4 beyond this
    parities = [sum(p[i] > p[j] for i in range(4) for j in range(i + 1, 4)) % 2 for p in perms]
    assert abs(np.mean(parities) - 0.5) < 0.03  # odd permutations too (additive rounds)


def test_bernoulli_rates():
    vram.manual_seed(19)
    x = vram.empty(200_000).bernoulli_(0.3).numpy()
    assert set(np.unique(x)) == {0.0, 1.0}
    assert abs(x.mean() - 0.3) < 0.005
    assert vram.empty(10, dtype=vram.int64).bernoulli_(1.0).numpy().tolist() == [1] * 10
    assert vram.empty(10, dtype=vram.bool).bernoulli_(0.0).numpy().tolist() == [False] * 10
    p = vram.tensor([0.0, 0.25, 1.0]).expand(100_000, 3).contiguous()
    draws = vram.bernoulli(p).numpy()
    assert draws[:, 0].sum() == 0 and draws[:, 2].sum() == 100_000
    assert abs(draws[:, 1].mean() - 0.25) < 0.005
    row = vram.empty(50_000, 2, dtype=vram.uint8).bernoulli_(vram.tensor([0.1, 0.9]))
    assert np.allclose(row.numpy().mean(axis=0), [0.1, 0.9], atol=0.01)
    scalar = vram.bernoulli(vram.zeros(100_000), 0.75).numpy()
    assert abs(scalar.mean() - 0.75) < 0.005
    on_host = vram.empty(1000).bernoulli_(vram.full((1000,), 0.5, device="cpu"))
    assert 400 < on_host.numpy().sum() < 600


def test_bernoulli_is_the_reference():
    vram.manual_seed(20)
    got = vram.empty(1000).bernoulli_(0.4).numpy()
    raw = _philox.sample("uniform32", 20, 0, 1000)
    assert np.array_equal(got, (raw < np.float32(0.4)).astype(np.float32))


def test_dropout_scales_and_zeroes():
    vram.manual_seed(21)
    x = vram.full((400, 500), 3.0)
    y = F.dropout(x, 0.2).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.8) < 0.005
    assert np.all(y[kept] == np.float32(3.0) * np.float32(1 / np.float32(0.8)))
    assert np.all(x.numpy() == 3.0)  # not in place
    assert F.dropout(x, 0.2, training=False) is x
    assert F.dropout(x, 0.0) is x
    assert np.all(F.dropout(x, 1.0).numpy() == 0)
    same = F.dropout(x, 0.5, inplace=True)
    assert same is x and 0.45 < (x.numpy() == 0).mean() < 0.55


def test_dropout_layouts_and_dtypes():
    g = vram.Generator("sim:0").manual_seed(22)
    x = vram.arange(24, dtype=vram.float32).reshape(4, 6).t()  # dense, permuted
    y = F.dropout(x, 0.5, generator=g)
    assert y.stride() == x.stride()
    kept = y.numpy() != 0
    assert np.allclose(y.numpy()[kept], 2 * x.numpy()[kept])
    gaps = vram.ones(6, 8)[:, ::2]
    z = F.dropout(gaps, 0.5, inplace=True, generator=g)
    assert z is gaps and set(np.unique(gaps.numpy())) <= {0.0, 2.0}
    for dt in (vram.float16, vram.bfloat16, vram.float64):
        w = F.dropout(vram.ones(1000, dtype=dt), 0.25, generator=g)
        scaled = float(np.float32(1) / np.float32(0.75)) if dt is not vram.float64 else 4 / 3
        expected = {0.0, float(np.array(scaled).astype(dt.np))}
        assert w.dtype is dt and set(np.unique(w.numpy().astype(np.float64))) == expected
    nan = F.dropout(vram.full((1000,), float("nan")), 0.5).numpy()
    assert np.all(np.isnan(nan))  # input * mask * scale, as PyTorch's


def test_dropout_errors():
    x = vram.ones(4)
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        F.dropout(x, 1.5)
    with pytest.raises(RuntimeError, match="desired output type Long"):
        F.dropout(vram.ones(4, dtype=vram.int64), 0.5)
    with pytest.raises(TypeError, match="input"):
        F.dropout(np.ones(4), 0.5)


# ---- layouts -----------------------------------------------------------------------------
def test_in_place_draws_follow_memory_order():
    g = vram.Generator("sim:0")
    flat = vram.empty(24).normal_(generator=g.manual_seed(23)).numpy()
    permuted = vram.empty(6, 4).t().normal_(generator=g.manual_seed(23))
    assert np.array_equal(permuted.t().contiguous().numpy().reshape(-1), flat)
    base = vram.zeros(4, 8)
    base[:, ::2].uniform_(generator=g.manual_seed(23))
    expected = vram.empty(16).uniform_(generator=g.manual_seed(23)).numpy().reshape(4, 4)
    assert np.array_equal(base.numpy()[:, ::2], expected)
    assert np.all(base.numpy()[:, 1::2] == 0)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        vram.zeros(1, 3).expand(4, 3).normal_()


def test_like_forms_keep_dtype_device_and_layout():
    x = vram.empty(3, 5, dtype=vram.float16).t()
    r = vram.rand_like(x)
    assert r.dtype is vram.float16 and r.shape == (5, 3) and r.stride() == x.stride()
    n = vram.randn_like(x, dtype=vram.float64)
    assert n.dtype is vram.float64 and n.shape == (5, 3)
    i = vram.randint_like(vram.zeros(100), 3, 7)
    assert i.dtype is vram.float32 and set(np.unique(i.numpy())) <= {3.0, 4.0, 5.0, 6.0}
    assert vram.randint_like(vram.zeros(10, dtype=vram.int32), 5).dtype is vram.int32
    host = vram.rand_like(vram.zeros(4), device="cpu")
    assert host.device == vram.device("cpu")


def test_normal_forms():
    vram.manual_seed(24)
    mean = vram.arange(0.0, 4.0)
    y = vram.normal(mean.expand(100_000, 4), 0.1).numpy()
    assert np.allclose(y.mean(axis=0), [0, 1, 2, 3], atol=0.01)
    z = vram.normal(vram.zeros(50_000, 2), vram.tensor([1.0, 4.0])).numpy()
    assert np.allclose(z.std(axis=0), [1, 4], rtol=0.03)
    w = vram.normal(5.0, vram.full((50_000,), 2.0, dtype=vram.float64))
    assert w.dtype is vram.float64 and abs(w.numpy().mean() - 5) < 0.05
    v = vram.normal(1.0, 2.0, (3, 4), dtype=vram.float64)
    assert v.shape == (3, 4) and v.dtype is vram.float64
    with pytest.raises(RuntimeError, match="normal expects all elements of std >= 0.0"):
        vram.normal(vram.zeros(2), vram.tensor([1.0, -1.0]))
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0, but found std -1"):
        vram.normal(vram.zeros(2), -1.0)
    with pytest.raises(TypeError, match="size"):
        vram.normal(0.0, 1.0)


def test_cpu_and_sim_draw_the_same_numbers():
    vram.manual_seed(25)
    on_sim = vram.randn(3000).numpy()
    host_generator = vram.Generator("cpu").manual_seed(25)
    on_cpu = vram.randn(3000, device="cpu", generator=host_generator).numpy()
    assert np.array_equal(on_sim, on_cpu)
    assert np.array_equal(
        vram.randperm(50, generator=vram.Generator("sim:0").manual_seed(3)).numpy(),
        vram.randperm(50, device="cpu", generator=vram.Generator().manual_seed(3)).numpy(),
    )


def test_out_arguments():
    out = vram.empty(5, dtype=vram.float64)
    assert vram.rand(5, out=out) is out
    assert vram.randint(0, 3, (5,), out=vram.empty(5, dtype=vram.int64)).dtype is vram.int64
    with pytest.raises(RuntimeError, match="shape"):
        vram.rand(4, out=out)


# ---- generators and seeding --------------------------------------------------------------
def test_generator_state_round_trip():
    g = vram.Generator("sim:0").manual_seed(31)
    vram.rand(100, generator=g)
    state = g.get_state()
    assert state.dtype is vram.uint8 and state.shape == (16,) and state.device.type == "cpu"
    assert int.from_bytes(bytes(state.numpy()[:8]), "little") == 31
    assert int.from_bytes(bytes(state.numpy()[8:]), "little") == 4
    first = vram.randn(50, generator=g).numpy()
    g.manual_seed(0)
    g.set_state(state)
    assert np.array_equal(vram.randn(50, generator=g).numpy(), first)
    g.set_state(vram.tensor(list((77).to_bytes(8, "little")), dtype=vram.uint8, device="cpu"))
    assert g.initial_seed() == 77 and g.get_offset() == 0
    with pytest.raises(RuntimeError, match="RNG state is wrong size"):
        g.set_state(vram.zeros(5, dtype=vram.uint8, device="cpu"))
    with pytest.raises(TypeError, match="uint8 cpu tensor"):
        g.set_state(vram.zeros(16, dtype=vram.int64, device="cpu"))
    with pytest.raises(TypeError, match="new_state"):
        g.set_state([1, 2])


def test_generator_seeds_and_offsets():
    g = vram.Generator()
    assert g.device == vram.device("cpu") and g.initial_seed() == 67280421310721
    assert g.manual_seed(-1).initial_seed() == 2**64 - 1
    with pytest.raises(ValueError, match="out of range"):
        g.manual_seed(2**64)
    with pytest.raises(RuntimeError, match="manual_seed expected a long, but got float"):
        g.manual_seed(1.5)
    new = g.seed()
    assert g.initial_seed() == new and g.get_offset() == 0
    g.set_offset(40)
    assert g.get_offset() == 40
    with pytest.raises(RuntimeError, match="offset must be a multiple of 4"):
        g.set_offset(3)


def test_generator_device_must_match():
    with pytest.raises(
        RuntimeError, match="Expected a 'sim' device type for generator but found 'cpu'"
    ):
        vram.rand(3, generator=vram.Generator())
    with pytest.raises(TypeError, match="generator"):
        vram.rand(3, generator=5)


def test_manual_seed_seeds_every_device_present_and_future():
    returned = vram.manual_seed(41)
    assert returned is vram.cuda.default_generators[0]
    a = vram.rand(10, device="sim:0").numpy()
    b = vram.rand(10, device="sim:1").numpy()
    assert np.array_equal(a, b)
    assert vram.initial_seed() == 41 and vram.cuda.initial_seed() == 41
    vram.cuda.manual_seed(42)  # the current device only
    assert vram.cuda.default_generators[0].initial_seed() == 42
    assert vram.cuda.default_generators[1].initial_seed() == 41
    vram.cuda.manual_seed_all(43)
    assert [g.initial_seed() for g in vram.cuda.default_generators] == [43, 43]
    states = vram.cuda.get_rng_state_all()
    vram.rand(10, device="sim:1")
    vram.cuda.set_rng_state_all(states)
    assert vram.cuda.default_generators[1].get_offset() == 0
    value = vram.seed()
    assert vram.initial_seed() == value and value < 2**53


def test_random_errors():
    with pytest.raises(
        NotImplementedError, match="\"check_uniform_bounds\" not implemented for 'Long'"
    ):
        vram.rand(2, dtype=vram.int64)
    with pytest.raises(
        NotImplementedError, match="\"normal_kernel_cuda\" not implemented for 'Int'"
    ):
        vram.randn(2, dtype=vram.int32)
    with pytest.raises(RuntimeError, match="from=5 >= to=3"):
        vram.randint(5, 3, (3,))
    with pytest.raises(RuntimeError, match="to - 1 is out of bounds for uint8"):
        vram.randint(0, 300, (3,), dtype=vram.uint8)
    with pytest.raises(RuntimeError, match="from is out of bounds for uint8"):
        vram.randint(-1, 3, (3,), dtype=vram.uint8)
    with pytest.raises(TypeError, match="argument 'size' must be tuple of ints, not int"):
        vram.randint(3, 3)
    with pytest.raises(TypeError, match="argument 'high' must be int, not float"):
        vram.randint(2.5, (2,))
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range"):
        vram.empty(3).uniform_(2, 1)
    with pytest.raises(RuntimeError, match="to is out of bounds for float16"):
        vram.empty(3, dtype=vram.float16).uniform_(0, 70000)
    with pytest.raises(RuntimeError, match="which result in to-from to exceed the limit"):
        vram.empty(3).uniform_(-3e38, 3e38)
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0, but found std -1"):
        vram.empty(3).normal_(0, -1)
    with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\], but got p=2"):
        vram.bernoulli(vram.zeros(2), 2.0)
    with pytest.raises(RuntimeError, match="expected probabilities tensor to have floating type"):
        vram.bernoulli(vram.tensor([1, 0]))
    with pytest.raises(RuntimeError, match="The expanded size of the tensor"):
        vram.empty(3).bernoulli_(vram.tensor([0.5, 0.5]))
    with pytest.raises(RuntimeError, match="n cannot be greater than 2049 for Half type."):
        vram.randperm(3000, dtype=vram.float16)
    with pytest.raises(RuntimeError, match="int8_t without overflow"):
        vram.randperm(200, dtype=vram.int8)
    with pytest.raises(NotImplementedError, match="\"randperm\" not implemented for 'Bool'"):
        vram.randperm(3, dtype=vram.bool)
    with pytest.raises(RuntimeError, match="negative dimension"):
        vram.randperm(-1)
    with pytest.raises(NotImplementedError, match="random_kernel_cuda"):
        vram.empty(3, dtype=vram.complex64).random_()


def test_integer_bounds_of_floating_dtypes_warn():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vram.randint(0, 2**30, (4,), dtype=vram.float32)
    assert any("to - 1 is out of bounds [-(2^24), 2^24]" in str(w.message) for w in caught)


# ---- graph capture (Note [Graph-safe generators]) ----------------------------------------
def test_captured_draws_are_new_at_each_replay(sim0):
    vram.manual_seed(51)
    g = vram.CUDAGraph()
    with vram.graph(g):
        u = vram.rand(1000)
        n = vram.randn(10, dtype=vram.float64)
        d = F.dropout(vram.ones(100), 0.5)
    generator = vram.cuda.default_generators[0]
    assert generator.get_offset() == 0  # capture draws nothing
    replays = []
    for _ in range(3):
        g.replay()
        replays.append((u.numpy().copy(), n.numpy().copy(), d.numpy().copy()))
    assert generator.get_offset() == 36  # three replays of 4 + 4 + 4
    assert not np.array_equal(replays[0][0], replays[1][0])
    vram.manual_seed(51)
    for uu, nn, dd in replays:  # each replay drew what eager draws at its offsets draw
        assert np.array_equal(vram.rand(1000).numpy(), uu)
        assert np.array_equal(vram.randn(10, dtype=vram.float64).numpy(), nn)
        assert np.array_equal(F.dropout(vram.ones(100), 0.5).numpy(), dd)
    after = vram.rand(5).numpy()  # an eager draw after replays does not repeat them
    vram.manual_seed(51)
    vram.cuda.default_generators[0].set_offset(36)
    assert np.array_equal(vram.rand(5).numpy(), after)


def test_each_graph_keeps_its_own_state_and_only_when_it_draws(sim0):
    x = vram.zeros(8)
    before = vram.memory_allocated()
    quiet = vram.CUDAGraph()
    with vram.graph(quiet):
        x.add_(1)
    assert vram.memory_allocated() == before  # no draw, no device state
    vram.manual_seed(54)
    first, second = vram.CUDAGraph(), vram.CUDAGraph()
    with vram.graph(first):
        x.uniform_()
    with vram.graph(second):
        y = vram.rand(8)
    assert len({state.ptr for _, state, _ in first._replays + second._replays}) == 2
    first.replay()
    second.replay()
    vram.manual_seed(54)
    assert np.array_equal(vram.rand(8).numpy(), x.numpy())
    assert np.array_equal(vram.rand(8).numpy(), y.numpy())
    second.reset()
    assert second._replays == ()


def test_capture_needs_registered_generators(sim0):
    other = vram.Generator("sim:0").manual_seed(52)
    g = vram.CUDAGraph()
    with pytest.raises(RuntimeError, match="not in capture mode"):
        with vram.graph(g):
            vram.rand(10, generator=other)
    registered = vram.CUDAGraph()
    registered.register_generator_state(other)
    with vram.graph(registered):
        x = vram.randint(0, 100, (50,), generator=other)
    registered.replay()
    first = x.numpy().copy()
    registered.replay()
    assert not np.array_equal(first, x.numpy())
    assert other.get_offset() == 8
    with pytest.raises(TypeError, match="generator"):
        registered.register_generator_state(5)


def test_generator_of_a_capture_stays_on_the_capturing_stream(sim0):
    g = vram.CUDAGraph()
    side, other = vram.empty(4), vram.Stream()
    with vram.graph(g):
        vram.rand(4)
        with pytest.raises(RuntimeError, match="outside graph capture"):
            with vram.stream(other):
                side.uniform_()
        with pytest.raises(RuntimeError, match="while a graph captures"):
            vram.manual_seed(1)
    vram.manual_seed(1)  # fine again once the capture is over
    assert vram.cuda.default_generators[0].initial_seed() == 1


def test_draws_in_deferred_mode_keep_their_offsets(sim0):
    vram.manual_seed(53)
    with vram.sim.deferred():
        a = vram.rand(100)
        b = vram.rand(100)
    vram.manual_seed(53)
    assert np.array_equal(vram.rand(100).numpy(), a.numpy())
    assert np.array_equal(vram.rand(100).numpy(), b.numpy())


# ---- the kernels compile (NVRTC needs no GPU) --------------------------------------------
def test_random_kernels_compile():
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    from vram.ops._random._source import source

    rng = "vram::rng::"
    names = (
        f"{rng}draw<{rng}UniformFloat, __half, {rng}UniformTo<__half, float>>",
        f"{rng}draw<{rng}UniformDouble, double, {rng}UniformTo<double, double>>",
        f"{rng}draw<{rng}NormalFloat, float, {rng}Normal<float, float>>",
        f"{rng}draw<{rng}NormalDouble, double, {rng}Normal<double, double>>",
        f"{rng}draw<{rng}Bits32, long long, {rng}FromTo<long long>>",
        f"{rng}draw<{rng}Bits64, bool, {rng}FromTo<bool>>",
        f"{rng}draw<{rng}UniformFloat, __nv_bfloat16, {rng}BernoulliTensor<__nv_bfloat16, float>>",
        f"{rng}draw<{rng}UniformFloat, float, {rng}Dropout<float, float>>",
        f"{rng}randperm<long long>",
        f"{rng}set_state",
    )
    program = compile_program(source(), "sm_90", names)
    assert program.kind == "cubin"
    assert all(program.lowered_names[name].startswith("_Z") for name in names)


def test_warm_lists_every_instance_the_plans_launch():
    from vram.ops import warm
    from vram.ops._plans import PLANS
    from vram.ops._random._draw import DrawPlan

    listed = set(warm.INSTANCES["random"]())
    for dt in (vram.float16, vram.float64, vram.int8, vram.bool):
        t = vram.empty(10, dtype=dt)
        t.random_()
        t.random_(-(2**63) if dt is vram.float64 else 0, None)
        t.bernoulli_(0.5).bernoulli_(vram.full((10,), 0.5))
        if dt.is_floating_point:
            t.uniform_().normal_()
            F.dropout(t, 0.5)
        if dt is not vram.bool:
            vram.randperm(10, dtype=dt)
    launched = {
        (launch.work.source, launch.entry)
        for plan in PLANS.values()
        if isinstance(plan, DrawPlan)
        for launch in plan.launches
    }
    assert len(launched) >= 20
    assert launched <= listed


def test_kernel_and_reference_share_their_constants():
    from vram.ops._kernels import KERNEL_DIR

    text = (KERNEL_DIR / "random.cu").read_text()
    assert f"constexpr int kPermuteRounds = {_philox.PERMUTE_ROUNDS};" in text
    assert f"constexpr int kBlock = {_philox.BLOCK};" in text


def test_math_constants_are_curands():
    assert np.float32(2.3283064e-10) == np.float32(2.0**-32)
    assert _philox._INV_2PI_32 == np.float32(np.float32(2**-32) * np.float32(6.2831855))
    assert math.isclose(float(_philox._INV_2PI_32), 2 * math.pi / 2**32, rel_tol=1e-7)

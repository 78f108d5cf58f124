"""Random numbers on the GPU: for one seed the GPU draws what the simulated GPU's NumPy
reference draws (bitwise for uniform, integer, Bernoulli, dropout and randperm draws;
normal floats within the fast sine's error, doubles within rounding), distributions'
moments at large sizes, graph replays draw new numbers, and PyTorch's CUDA generator gives
the same numbers for the same seed where vram follows its kernels (rand, randn, randint,
random_, uniform_, normal_, scalar bernoulli_). Each test prints what it compared (-s)."""

from __future__ import annotations

import numpy as np
import pytest

import vram
import vram.nn.functional as F
from vram.driver import cuda_usable
from vram.ops._random import _draw
from vram.ops.warm import warm

try:
    import torch
except ImportError:  # the comparisons with PyTorch skip; the rest runs
    torch = None

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

GPU, SIM = "cuda:0", "sim:0"
SIZES = [1, 1000, 3_000_001]  # the last makes each thread draw several blocks


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    """Every random kernel instance compiled first, on every core, into the kernel cache."""
    warm(_draw.instances())


def both(make, seed: int = 2024) -> tuple[np.ndarray, np.ndarray]:
    """``make(device)`` after ``manual_seed(seed)`` on the GPU and on sim, as arrays."""
    found = []
    for device in (GPU, SIM):
        vram.manual_seed(seed)
        found.append(make(device).numpy())
    return found[0], found[1]


def bitwise(name: str, gpu: np.ndarray, sim: np.ndarray) -> None:
    same = gpu.view(np.uint8) == sim.view(np.uint8)
    print(name, gpu.shape, gpu.dtype, "bitwise equal:", bool(same.all()))
    assert gpu.shape == sim.shape and same.all(), f"{name}: GPU and sim differ"


CASES = {
    "rand float32": lambda d, n: vram.rand(n, device=d),
    "rand float64": lambda d, n: vram.rand(n, device=d, dtype=vram.float64),
    "rand float16": lambda d, n: vram.rand(n, device=d, dtype=vram.float16),
    "rand bfloat16": lambda d, n: vram.rand(n, device=d, dtype=vram.bfloat16),
    "uniform_ float32": lambda d, n: vram.empty(n, device=d).uniform_(-2.5, 7.25),
    "uniform_ float64": lambda d, n: vram.empty(n, device=d, dtype=vram.float64).uniform_(-1, 3),
    "randint int64": lambda d, n: vram.randint(-7, 1000, (n,), device=d),
    "randint 64-bit range": lambda d, n: vram.randint(0, 2**40, (n,), device=d),
    "randint uint8": lambda d, n: vram.randint(0, 256, (n,), device=d, dtype=vram.uint8),
    "randint float32": lambda d, n: vram.randint(-50, 50, (n,), device=d, dtype=vram.float32),
    "random_ int32": lambda d, n: vram.empty(n, device=d, dtype=vram.int32).random_(),
    "random_ int64": lambda d, n: vram.empty(n, device=d, dtype=vram.int64).random_(),
    "bernoulli_ p": lambda d, n: vram.empty(n, device=d).bernoulli_(0.3),
    "bernoulli_ p float64": lambda d, n: vram.empty(n, device=d, dtype=vram.float64).bernoulli_(
        0.7
    ),
    "bernoulli tensor": lambda d, n: vram.bernoulli(
        vram.arange(n, device=d, dtype=vram.float32) % 11 / 10
    ),
    "dropout float32": lambda d, n: F.dropout(vram.ones(n, device=d), 0.4),
    "dropout float16": lambda d, n: F.dropout(vram.ones(n, device=d, dtype=vram.float16), 0.1),
    "dropout float64": lambda d, n: F.dropout(vram.ones(n, device=d, dtype=vram.float64), 0.5),
    "randperm": lambda d, n: vram.randperm(min(n, 100_003), device=d),
    "randperm float32": lambda d, n: vram.randperm(min(n, 3001), device=d, dtype=vram.float32),
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_draws_what_sim_draws_bitwise(case, n):
    gpu, sim = both(lambda d: CASES[case](d, n))
    bitwise(f"{case} n={n}", gpu, sim)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize(
    ("dt", "rtol", "atol"),
    [(vram.float32, 0, 1e-5), (vram.bfloat16, 2**-7, 1e-5), (vram.float64, 0, 1e-12)],
)
def test_gpu_normals_match_sim_within_rounding(dt, rtol, atol, n):
    # float32: the GPU's __sincosf (curand's) against NumPy's accurate sin and cos; bfloat16
    # may round that difference to one unit of its last place
    gpu, sim = both(lambda d: vram.randn(n, device=d, dtype=dt))
    gpu, sim = gpu.astype(np.float64), sim.astype(np.float64)
    err = np.abs(gpu - sim).max()
    print(f"randn {dt} n={n}: max |gpu - sim| {err:.3g}, equal {np.mean(gpu == sim):.4f}")
    np.testing.assert_allclose(gpu, sim, rtol=rtol, atol=atol)
    shifted, shifted_sim = both(lambda d: vram.empty(n, device=d, dtype=dt).normal_(3.0, 0.25))
    np.testing.assert_allclose(
        shifted.astype(np.float64), shifted_sim.astype(np.float64), rtol=rtol, atol=atol
    )


def test_capture_replays_on_the_gpu_match_sim():
    def step():
        return vram.rand(100_000), vram.randint(0, 10, (1000,)), F.dropout(vram.ones(5000), 0.5)

    found = {}
    for device in (GPU, SIM):
        with vram.device(device):
            step()  # warm up: plans built and kernels loaded before the capture
            generator = vram.manual_seed(77)  # the current device's default generator
            g = vram.CUDAGraph()
            with vram.graph(g):
                outputs = step()
            rows = []
            for _ in range(3):
                g.replay()
                rows.append([t.numpy().copy() for t in outputs])
            found[device] = rows
            assert generator.get_offset() == 3 * (4 + 4 + 4)
    for i, (gpu_row, sim_row) in enumerate(zip(found[GPU], found[SIM], strict=True)):
        for name, a, b in zip(("rand", "randint", "dropout"), gpu_row, sim_row, strict=True):
            bitwise(f"replay {i} {name}", a, b)
    assert not np.array_equal(found[GPU][0][0], found[GPU][1][0])


def test_capture_replays_equal_eager_draws_at_their_offsets():
    with vram.device(GPU):
        other = vram.Generator(GPU)

        def step():
            return vram.randn(4096), vram.randperm(777, generator=other)

        step()  # warm up
        vram.manual_seed(78)
        other.manual_seed(5)
        g = vram.CUDAGraph()
        g.register_generator_state(other)
        with vram.graph(g):
            n, p = step()
        replays = []
        for _ in range(2):
            g.replay()
            replays.append((n.numpy().copy(), p.numpy().copy()))
        vram.manual_seed(78)
        other.manual_seed(5)
        for normal, perm in replays:
            eager_normal, eager_perm = step()
            assert np.array_equal(eager_normal.numpy(), normal)
            assert np.array_equal(eager_perm.numpy(), perm)
        assert not np.array_equal(replays[0][0], replays[1][0])


def test_moments_on_the_gpu():
    with vram.device(GPU):
        vram.manual_seed(79)
        u = vram.rand(20_000_000).numpy().astype(np.float64)
        assert abs(u.mean() - 0.5) < 1e-3 and abs(u.var() - 1 / 12) < 1e-3
        x = vram.randn(20_000_000).numpy().astype(np.float64)
        assert abs(x.mean()) < 2e-3 and abs(x.std() - 1) < 2e-3
        assert abs(((x - x.mean()) ** 4).mean() / x.var() ** 2 - 3) < 0.02
        k = vram.randint(0, 10, (10_000_000,)).numpy()
        assert np.all(np.abs(np.bincount(k) - 1_000_000) < 5000)
        b = vram.empty(10_000_000).bernoulli_(0.2).numpy()
        assert abs(b.mean() - 0.2) < 1e-3
        perm = vram.randperm(10_000_000).numpy()
        assert np.array_equal(np.sort(perm), np.arange(10_000_000))


# ---- the same numbers as PyTorch's CUDA generator -----------------------------------------
def _torch_grid_is_vrams() -> bool:
    """vram's draws use PyTorch's grid on a 132-SM GPU with 2048 threads per SM (H100,
    H200): elsewhere PyTorch's numbers for large tensors depend on the SM count."""
    props = torch.cuda.get_device_properties(0)
    return props.multi_processor_count == 132 and props.max_threads_per_multi_processor == 2048


TORCH_CASES = {
    "rand float32": (lambda n: torch.rand(n, device="cuda"), lambda n: vram.rand(n)),
    "rand float64": (
        lambda n: torch.rand(n, device="cuda", dtype=torch.float64),
        lambda n: vram.rand(n, dtype=vram.float64),
    ),
    "rand float16": (
        lambda n: torch.rand(n, device="cuda", dtype=torch.float16),
        lambda n: vram.rand(n, dtype=vram.float16),
    ),
    "rand bfloat16": (
        lambda n: torch.rand(n, device="cuda", dtype=torch.bfloat16),
        lambda n: vram.rand(n, dtype=vram.bfloat16),
    ),
    "uniform_ float32": (
        lambda n: torch.empty(n, device="cuda").uniform_(-2.5, 7.25),
        lambda n: vram.empty(n).uniform_(-2.5, 7.25),
    ),
    "randint": (
        lambda n: torch.randint(-7, 1000, (n,), device="cuda"),
        lambda n: vram.randint(-7, 1000, (n,)),
    ),
    "randint 64-bit range": (
        lambda n: torch.randint(0, 2**40, (n,), device="cuda"),
        lambda n: vram.randint(0, 2**40, (n,)),
    ),
    "random_ int32": (
        lambda n: torch.empty(n, device="cuda", dtype=torch.int32).random_(),
        lambda n: vram.empty(n, dtype=vram.int32).random_(),
    ),
    "bernoulli_ p": (
        lambda n: torch.empty(n, device="cuda").bernoulli_(0.3),
        lambda n: vram.empty(n).bernoulli_(0.3),
    ),
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", sorted(TORCH_CASES))
def test_same_numbers_as_pytorch_for_a_seed(case, n):
    if torch is None:
        pytest.skip("PyTorch is not installed")
    if n > 270_336 and not _torch_grid_is_vrams():
        pytest.skip("PyTorch's grid on this GPU is not vram's fixed one")
    make_torch, make_vram = TORCH_CASES[case]
    torch.manual_seed(31)
    expected = make_torch(n)
    if expected.dtype == torch.bfloat16:  # NumPy has no bfloat16: compare the bits
        expected = expected.view(torch.int16)
    expected = expected.cpu().numpy()
    with vram.device(GPU):
        vram.manual_seed(31)
        got = make_vram(n).numpy()
    bitwise(f"torch {case} n={n}", got.view(expected.dtype), expected)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_same_normals_as_pytorch_for_a_seed(dtype, n):
    if torch is None:
        pytest.skip("PyTorch is not installed")
    if n > 270_336 and not _torch_grid_is_vrams():
        pytest.skip("PyTorch's grid on this GPU is not vram's fixed one")
    torch.manual_seed(32)
    expected = torch.randn(n, device="cuda", dtype=getattr(torch, dtype)).cpu().numpy()
    with vram.device(GPU):
        vram.manual_seed(32)
        got = vram.randn(n, dtype=getattr(vram, dtype)).numpy()
    err = np.abs(got.astype(np.float64) - expected).max()
    print(f"torch randn {dtype} n={n}: max diff {err:.3g}, bitwise {np.mean(got == expected):.4f}")
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)

"""Matrix products on a real GPU (cuBLAS / cuBLASLt through nvmath), against NumPy in fp64
and against PyTorch where it is installed; threads, workspaces and TunableOp."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import vram
from vram.driver import _cublas, cuda_usable

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU"),
    pytest.mark.skipif(not _cublas.available(), reason="nvmath-python is not installed"),
]

CUDA = "cuda:0"
DTYPES = [vram.float16, vram.bfloat16, vram.float32, vram.float64]
# relative to the largest magnitude of the exact result; fp32 without TF32
RTOL = {"float16": 4e-3, "bfloat16": 2e-2, "float32": 2e-5, "float64": 1e-12}
SHAPES = {  # (batch shape of input, M, K, N, batch shape of mat2)
    "square": ((), 128, 128, 128, ()),
    "tall": ((), 513, 64, 7, ()),
    "wide": ((), 3, 96, 1031, ()),
    "K=0": ((), 17, 0, 9, ()),
    "batched-broadcast": ((3, 1), 33, 40, 21, (4,)),
}
LIBRARIES = ["cublaslt", "cublas"]


@pytest.fixture(autouse=True)
def _settings():
    matmul = vram.backends.cuda.matmul
    saved = (matmul.allow_tf32, vram.backends.cuda.preferred_blas_library())
    yield
    matmul.allow_tf32 = saved[0]
    vram.backends.cuda.preferred_blas_library(saved[1])


def rand(shape, dt, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dt.np)


def check(got, want, dt, rtol=None):
    got = got.numpy() if isinstance(got, vram.Tensor) else got
    assert got.dtype == dt.np and got.shape == want.shape
    want = np.asarray(want, dtype=np.float64)
    rtol = RTOL[dt.name] if rtol is None else rtol
    scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-30)
    err = float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0))
    assert err <= rtol * scale, f"error {err:.3g} > {rtol:.1g} * {scale:.3g}"


def gpu(array):
    return vram.tensor(array, device=CUDA)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_matmul_matches_numpy(library, dt, shape):
    vram.backends.cuda.preferred_blas_library(library)
    left, m, k, n, right = SHAPES[shape]
    a, b = rand((*left, m, k), dt, 1), rand((*right, k, n), dt, 2)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    check(vram.matmul(gpu(a), gpu(b)), want, dt)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_transposed_and_non_contiguous_operands(library, dt):
    vram.backends.cuda.preferred_blas_library(library)
    x, y = rand((70, 50), dt, 3), rand((90, 70), dt, 4)
    ex, ey = x.astype(np.float64), y.astype(np.float64)
    check(gpu(x).t() @ gpu(y).t(), ex.T @ ey.T, dt)  # both read as transposes
    wide = rand((50, 160), dt, 5)
    check(gpu(wide)[:, 1:141:2] @ gpu(y).t(), wide.astype(np.float64)[:, 1:141:2] @ ey.T, dt)
    col = vram.empty((90, 50), dtype=dt, device=CUDA).t()  # a column-major out
    vram.mm(gpu(x).t(), gpu(y).t(), out=col)
    check(col, ex.T @ ey.T, dt)
    strided_out = vram.zeros((100, 180), dtype=dt, device=CUDA)[::2, ::2]
    vram.mm(gpu(x).t(), gpu(y).t(), out=strided_out)
    check(strided_out, ex.T @ ey.T, dt)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_addmm_epilogues(library, dt, activation):
    vram.backends.cuda.preferred_blas_library(library)
    a, b = rand((64, 96), dt, 6), rand((96, 48), dt, 7)
    ea, eb = a.astype(np.float64), b.astype(np.float64)
    for bias, beta in ((rand((48,), dt, 8), 1.0), (rand((64, 48), dt, 9), 0.5)):
        ref = beta * bias.astype(np.float64) + 1.5 * (ea @ eb)
        if activation == "relu":
            ref = np.maximum(ref, 0)
        elif activation == "gelu":
            ref = 0.5 * ref * (1 + np.tanh(np.sqrt(2 / np.pi) * (ref + 0.044715 * ref**3)))
        got = vram.addmm(gpu(bias), gpu(a), gpu(b), beta=beta, alpha=1.5, activation=activation)
        # cuBLASLt's fp64 GELU epilogue is good to about 5e-12 (its tanh), not 1e-12
        check(got, ref, dt, 1e-11 if activation == "gelu" and dt == vram.float64 else None)


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_addmm_bias_with_a_residual(library, dt, activation):
    """``addmm(x, a, b, bias=r)``: a residual of the result's layout and a row are one
    cuBLASLt call (C read where it is, the row the BIAS epilogue's); a transposed residual
    takes the product, then the row. Against NumPy, and against PyTorch's
    ``x + F.linear(...)`` where it is installed."""
    vram.backends.cuda.preferred_blas_library(library)
    a, w = rand((64, 96), dt, 20), rand((48, 96), dt, 21)
    x, r = rand((64, 48), dt, 22), rand((48,), dt, 23)
    ex, ea, ew, er = (v.astype(np.float64) for v in (x, a, w, r))
    for residual, exact_residual, beta in (
        (gpu(x), ex, 1),
        (gpu(x), ex, 0.5),
        (gpu(np.ascontiguousarray(x.T)).t(), ex, 1),  # (not out's layout: not fused)
    ):
        ref = beta * exact_residual + ea @ ew.T + er
        if activation == "relu":
            ref = np.maximum(ref, 0)
        elif activation == "gelu":
            ref = 0.5 * ref * (1 + np.tanh(np.sqrt(2 / np.pi) * (ref + 0.044715 * ref**3)))
        for _ in range(2):  # the checked call, then the remembered plan's
            got = vram.addmm(residual, gpu(a), gpu(w).t(), beta=beta, activation=activation,
                             bias=gpu(r))  # fmt: skip
            check(got, ref, dt, 1e-11 if activation == "gelu" and dt == vram.float64 else None)
    torch = pytest.importorskip("torch")
    if dt is vram.float64 or activation is not None:
        return
    tdt = getattr(torch, dt.name)
    tx, ta, tw, tr = (torch.from_numpy(v.astype(np.float32)).cuda().to(tdt) for v in (x, a, w, r))
    want = (tx + torch.nn.functional.linear(ta, tw, tr)).float().cpu().numpy()
    got = vram.addmm(gpu(x), gpu(a), gpu(w).t(), bias=gpu(r)).numpy().astype(np.float32)
    check(got.astype(dt.np), want.astype(np.float64), dt)


def test_linear_and_baddbmm():
    dt = vram.bfloat16
    x, w, bias = rand((4, 16, 256), dt, 10), rand((512, 256), dt, 11), rand((512,), dt, 12)
    want = x.astype(np.float64) @ w.astype(np.float64).T + bias.astype(np.float64)
    check(vram.nn.functional.linear(gpu(x), gpu(w), gpu(bias)), want, dt)
    p, q, c = rand((5, 8, 16), dt, 13), rand((5, 16, 4), dt, 14), rand((8, 4), dt, 15)
    want = 2.0 * c.astype(np.float64) - p.astype(np.float64) @ q.astype(np.float64)
    check(vram.baddbmm(gpu(c), gpu(p), gpu(q), beta=2.0, alpha=-1.0), want, dt)


def test_zero_sizes_make_no_library_call():
    empty = vram.mm(vram.empty((0, 5), device=CUDA), vram.ones((5, 3), device=CUDA))
    assert empty.shape == (0, 3)
    zeros = vram.mm(vram.empty((4, 0), device=CUDA), vram.empty((0, 3), device=CUDA))
    assert np.all(zeros.numpy() == 0)
    bias = gpu(rand((3,), vram.float32, 16))
    got = vram.addmm(bias, vram.empty((4, 0), device=CUDA), vram.empty((0, 3), device=CUDA),
                     beta=2.0, activation="relu")  # fmt: skip
    check(got, np.broadcast_to(np.maximum(2.0 * bias.numpy().astype(np.float64), 0), (4, 3)),
          vram.float32)  # fmt: skip


def test_fp32_is_not_rounded_to_tf32_unless_allowed():
    # 1 + 2**-12 needs 12 mantissa bits: TF32 (10) reads it as 1.0 and gives 256; fp32 keeps
    # it, and the sum 256 + 2**-4 is exact in fp32 at every step
    a = np.full((256, 256), 1 + 2.0**-12, dtype=np.float32)
    b = np.ones((256, 256), dtype=np.float32)
    vram.backends.cuda.matmul.allow_tf32 = False
    for library in LIBRARIES:
        vram.backends.cuda.preferred_blas_library(library)
        got = vram.mm(gpu(a), gpu(b)).numpy()
        assert np.all(got == 256 + 2.0**-4), library


def test_matches_pytorch():
    torch = pytest.importorskip("torch")
    for dt, tdt in ((vram.bfloat16, torch.bfloat16), (vram.float16, torch.float16)):
        a, b = rand((256, 512), dt, 17), rand((512, 128), dt, 18)
        theirs = (torch.from_numpy(a.astype(np.float32)).to("cuda", tdt)
                  @ torch.from_numpy(b.astype(np.float32)).to("cuda", tdt))  # fmt: skip
        ours = (gpu(a) @ gpu(b)).numpy().astype(np.float32)
        np.testing.assert_allclose(ours, theirs.float().cpu().numpy(), rtol=2e-2, atol=2e-2)


def test_one_cublas_handle_per_thread_and_device():
    mine = (_cublas.handle(0), _cublas.lt_handle(0))
    assert (_cublas.handle(0), _cublas.lt_handle(0)) == mine  # created once per thread
    seen = []
    thread = threading.Thread(target=lambda: seen.append((_cublas.handle(0), _cublas.lt_handle(0))))
    thread.start()
    thread.join()
    assert seen[0][0] != mine[0]
    # cublasLtCreate may give every thread the same (thread-safe) context: only nonzero here
    assert seen[0][1] != 0


def test_eight_threads_each_a_thousand_gemms_on_their_own_streams():
    """Each thread accumulates out += a @ b a thousand times on its own stream (exact small
    integers in fp32): the final value proves every GEMM ran once, in order, on its data."""
    errors: list[BaseException] = []
    results: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def worker(index: int) -> None:
        try:
            rng = np.random.default_rng(index)
            n = 32 + 8 * index
            a = rng.integers(-2, 3, (n, n)).astype(np.float32)
            b = rng.integers(-2, 3, (n, n)).astype(np.float32)
            with vram.device(CUDA), vram.stream(vram.Stream(CUDA)):
                ga, gb = gpu(a), gpu(b)
                out = vram.zeros((n, n), device=CUDA)
                for _ in range(1000):
                    vram.addmm(out, ga, gb, out=out)
                results[index] = (out.numpy(), 1000 * (a.astype(np.float64) @ b))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    for got, want in results.values():
        np.testing.assert_array_equal(got, want)
    assert len(results) == 8


@pytest.mark.parametrize("library", LIBRARIES)
def test_workspaces_take_o1_device_mallocs(library):
    vram.backends.cuda.preferred_blas_library(library)
    a, b = vram.ones((256, 256), device=CUDA), vram.ones((256, 256), device=CUDA)
    out = vram.empty((256, 256), device=CUDA)
    vram.mm(a, b, out=out)  # the first call may allocate the workspace
    with vram.memory.count_device_calls(CUDA) as calls:
        for _ in range(1000):
            vram.mm(a, b, out=out)
    vram.synchronize(CUDA)
    assert calls.device_malloc == 0
    assert np.all(out.numpy() == 256)
    stats = vram.memory.memory_stats(CUDA)
    if library == "cublas" and hasattr(vram.memory, "get_workspace"):
        assert any(key.startswith("workspace_bytes") and value > 0 for key, value in stats.items())


def test_tunableop_file_is_reused_by_a_second_process(tmp_path):
    script = textwrap.dedent(
        """
        import numpy as np, vram
        from vram.blas import _tunable
        with vram.device("cuda:0"):
            a = vram.tensor(np.ones((96, 1024), np.float16))
            b = vram.tensor(np.ones((1024, 80), np.float16))
            c = a @ b
            assert float(c.numpy()[0, 0]) == 1024.0
        print(_tunable.state.tunings, len(vram.cuda.tunable.get_results()))
        """
    )
    env = {
        **os.environ,
        "VRAM_TUNABLEOP_ENABLED": "1",
        "VRAM_TUNABLEOP_FILENAME": str(tmp_path / "tuned.csv"),
        "VRAM_TUNABLEOP_MAX_TUNING_DURATION_MS": "5",
    }
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["1", "1"]
    lines = (tmp_path / "tuned0.csv").read_text().splitlines()
    assert [line.split(",")[1] for line in lines[:3]] == [
        "VRAM_VERSION", "CUBLAS_VERSION", "CUBLASLT_VERSION",
    ]  # fmt: skip
    assert lines[3].startswith("GemmTunableOp_Half_NN,nn_80_96_1024_ld_80_1024_80,")
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["0", "1"]

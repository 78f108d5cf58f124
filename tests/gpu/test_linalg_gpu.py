"""vram.linalg on a real GPU: values, pivots and info against PyTorch's on the same GPU for
every dtype, batch shape and way of running a batch (cuBLAS batched, cuSOLVER looped, the
side-stream spread, the 64-bit API); singular inputs; O(1) device mallocs in the batch
(pytorch#181997) measured on the GPU with VRAM_NO_CACHING=1 in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import vram
from vram.driver import cuda_usable
from vram.linalg import LinAlgError, _blocked, _dispatch, _lu, _replay, _solve

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - a GPU vram sees but PyTorch does not
    pytest.skip("PyTorch has no CUDA", allow_module_level=True)

CUDA = "cuda:0"
DTYPES = [vram.float32, vram.float64, vram.complex64, vram.complex128]
IDS = [d.name for d in DTYPES]
TOL = {"float32": 1e-4, "complex64": 1e-4, "float64": 1e-10, "complex128": 1e-10}
ROOT = Path(__file__).resolve().parents[2]


def random(shape: tuple[int, ...], dt: vram.dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if dt.is_complex:
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dt.np)


def close(got: vram.Tensor, want, dt: vram.dtype, scale: float = 1.0) -> None:
    want = want.resolve_conj().cpu().numpy() if hasattr(want, "resolve_conj") else want
    tol = TOL[dt.name] * scale
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


def on_both(a: np.ndarray) -> tuple[vram.Tensor, object]:
    return vram.tensor(a, device=CUDA), torch.from_numpy(a).cuda()


def torch_factors(a: np.ndarray, library: str):
    """PyTorch's (LU, pivots, info) of ``a`` through the library vram's path uses: complex
    pivots differ between them (cuSOLVER's getrf compares |re| + |im|, as LAPACK; cuBLAS's
    getrfBatched the modulus |z|). PyTorch takes cuBLAS for a batch of small matrices and
    cuSOLVER for one matrix, so: the batch at once (two copies of a single matrix), or each
    matrix alone."""
    n = a.shape[-1]
    T = torch.from_numpy(a.reshape(-1, n, n)).cuda()
    if library == "cublas":
        count = T.shape[0]
        LU, pivots, info = torch.linalg.lu_factor_ex(T.repeat(2, 1, 1) if count == 1 else T)
        LU, pivots, info = LU[:count], pivots[:count], info[:count]
    else:
        parts = [torch.linalg.lu_factor_ex(matrix) for matrix in T]
        LU = torch.stack([p.LU for p in parts])
        pivots = torch.stack([p.pivots for p in parts])
        info = torch.stack([p.info for p in parts])
    batch = a.shape[:-2]
    return LU.reshape(*batch, n, n), pivots.reshape(*batch, n), info.reshape(batch)


@pytest.fixture(params=_dispatch.PATHS)
def path(request):
    with _dispatch.forced(request.param, streams=4):
        yield request.param


@pytest.fixture(autouse=True)
def _default_library():
    yield
    vram.backends.cuda.preferred_linalg_library("default")


@pytest.mark.parametrize("batch", [(), (5,), (2, 3)], ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_lu_factor_matches_pytorch(path, dt, batch):
    a = random((*batch, 12, 12), dt, seed=len(batch))
    A, T = on_both(a)
    LU, pivots, info = vram.linalg.lu_factor_ex(A)
    layout = torch.linalg.lu_factor_ex(T).LU
    assert LU.stride() == tuple(layout.stride()) and LU.shape == tuple(layout.shape)
    want_lu, want_pivots, want_info = torch_factors(a, "cublas" if path == "cublas" else "cusolver")
    np.testing.assert_array_equal(pivots.numpy(), want_pivots.cpu().numpy())
    np.testing.assert_array_equal(info.numpy(), want_info.cpu().numpy())
    close(LU, want_lu, dt)


@pytest.mark.parametrize("n", [33, 130, 300])
def test_larger_matrices_match_pytorch(path, n):
    a = random((6, n, n), vram.float64, seed=n)
    A, T = on_both(a)
    LU, pivots = vram.linalg.lu_factor(A)
    want = torch.linalg.lu_factor(T)
    np.testing.assert_array_equal(pivots.numpy(), want.pivots.cpu().numpy())
    close(LU, want.LU, vram.float64, scale=100)


def test_rectangular_and_unpivoted(path):
    for shape in ((3, 9, 5), (3, 5, 9)):
        a = random(shape, vram.float64, seed=1)
        A, T = on_both(a)
        LU, pivots, _ = vram.linalg.lu_factor_ex(A)
        want = torch.linalg.lu_factor_ex(T)
        np.testing.assert_array_equal(pivots.numpy(), want.pivots.cpu().numpy())
        close(LU, want.LU, vram.float64)
    a = random((4, 8, 8), vram.float64, seed=2) + 10 * np.eye(8)
    A, T = on_both(a)
    LU, pivots = vram.linalg.lu_factor(A, pivot=False)
    want = torch.linalg.lu_factor(T, pivot=False)
    np.testing.assert_array_equal(pivots.numpy(), want.pivots.cpu().numpy())
    close(LU, want.LU, vram.float64)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_solves_match_pytorch(path, dt):
    a = random((4, 10, 10), dt, seed=3) + 4 * np.eye(10, dtype=dt.np)  # well conditioned
    b = random((4, 10, 3), dt, seed=4)
    (A, TA), (B, TB) = on_both(a), on_both(b)
    close(vram.linalg.solve(A, B), torch.linalg.solve(TA, TB), dt, scale=10)
    bt = np.ascontiguousarray(np.swapaxes(b, -1, -2))
    (BT, TBT) = on_both(bt)
    close(vram.linalg.solve(A, BT, left=False), torch.linalg.solve(TA, TBT, left=False), dt, 10)
    v = random((10,), dt, seed=5)
    V, TV = on_both(v)
    close(vram.linalg.solve(A, V), torch.linalg.solve(TA, TV), dt, scale=10)
    LU, pivots = vram.linalg.lu_factor(A)
    tLU, tpiv = torch.linalg.lu_factor(TA)
    for left in (True, False):
        for adjoint in (False, True):
            rhs, trhs = (B, TB) if left else (BT, TBT)
            got = vram.linalg.lu_solve(LU, pivots, rhs, left=left, adjoint=adjoint)
            want = torch.linalg.lu_solve(tLU, tpiv, trhs, left=left, adjoint=adjoint)
            close(got, want, dt, scale=10)


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_inv_det_slogdet_match_pytorch(path, dt):
    a = random((2, 3, 9, 9), dt, seed=6) + 4 * np.eye(9, dtype=dt.np)
    A, T = on_both(a)
    inverse = vram.linalg.inv(A)
    want = torch.linalg.inv(T)
    assert inverse.stride() == tuple(want.stride())
    close(inverse, want, dt, scale=10)
    close(vram.linalg.det(A), torch.linalg.det(T), dt, scale=10)
    sign, logabs = vram.linalg.slogdet(A)
    want_sign, want_log = torch.linalg.slogdet(T)
    close(sign, want_sign, dt, scale=10)
    close(logabs, want_log, dt, scale=10)


def test_singular_inputs_match_pytorch(path):
    a = random((3, 6, 6), vram.float32, seed=7)
    a[1, :, 3] = 0
    a[2] = 0
    A, T = on_both(a)
    _, pivots, info = vram.linalg.lu_factor_ex(A)
    want = torch.linalg.lu_factor_ex(T)
    np.testing.assert_array_equal(info.numpy(), want.info.cpu().numpy())
    np.testing.assert_array_equal(info.numpy()[1:], [4, 1])
    with pytest.raises(LinAlgError, match=r"\(Batch element 1\): U\[4,4\] is zero"):
        vram.linalg.lu_factor(A)
    with pytest.raises(LinAlgError, match=r"\(Batch element 1\): The solver failed"):
        vram.linalg.solve(A, vram.ones((3, 6, 1), device=CUDA))
    with pytest.raises(LinAlgError, match=r"\(Batch element 1\): The diagonal element 4"):
        vram.linalg.inv(A)
    close(vram.linalg.det(A), torch.linalg.det(T), vram.float32, scale=10)


@pytest.mark.parametrize(
    "shape, column", [((4096, 32, 32), 5), ((16, 200, 200), 150), ((2, 600, 600), 300)], ids=str
)
def test_the_zero_pivot_flag_on_the_gpu(shape, column):
    """The blocked LU's panels raise the thread's zero-pivot flag in pinned memory (one
    panel; several; the look-ahead, whose second call replays its graph): check_errors
    searches info only then, and names the matrix and its pivot."""
    from vram.linalg import _checks

    a = random(shape, vram.float32, seed=8)
    A = vram.tensor(a, device=CUDA)
    for _ in range(2):
        vram.linalg.lu_factor(A)
        flag = _checks.ZeroPivotFlag.of_thread(vram.device(CUDA))
        assert flag.watched and flag.value[0] == 0
    a[1, :, column] = 0  # U[column + 1, column + 1] of matrix 1 is zero
    B = vram.tensor(a, device=CUDA)
    for _ in range(2):
        with pytest.raises(LinAlgError, match=rf"\(Batch element 1\): U\[{column + 1},"):
            vram.linalg.lu_factor(B)
        assert flag.watched and flag.value[0] == 1
    _, _, info = vram.linalg.lu_factor_ex(B)
    assert np.flatnonzero(info.numpy()).tolist() == [1]


@pytest.mark.parametrize("algo", [None, 0, 1])
def test_the_64_bit_api_matches_pytorch(monkeypatch, algo):
    """Xgetrf / Xgetrs (int64 pivots, a kernel turns them into PyTorch's int32), taken here
    for small matrices by lowering where the legacy API stops; ALG_0 and ALG_1 alike."""
    monkeypatch.setattr(_lu, "X_API_ELEMENTS", 1)
    monkeypatch.setattr(_solve, "X_API_ELEMENTS", 1)
    a, b = random((5, 40, 40), vram.complex64, seed=8), random((5, 40, 2), vram.complex64, 9)
    (A, T), (B, TB) = on_both(a), on_both(b)
    for path in ("cusolver", "streams"):
        with _dispatch.forced(path, streams=3, algo=algo):
            LU, pivots = vram.linalg.lu_factor(A)
            X = vram.linalg.lu_solve(LU, pivots, B, adjoint=True)
        want_lu, want_pivots, _ = torch_factors(a, "cusolver")
        np.testing.assert_array_equal(pivots.numpy(), want_pivots.cpu().numpy())
        close(LU, want_lu, vram.complex64, scale=10)
        close(X, torch.linalg.solve(T.mH, TB), vram.complex64, scale=10)


@pytest.mark.parametrize("panels", ["clusters", "blocks"])
@pytest.mark.parametrize("n", [20, 33, 700])
@pytest.mark.parametrize("dt", [vram.float32, vram.float64], ids=["float32", "float64"])
def test_blocked_lu_and_solve_match_pytorch(monkeypatch, dt, n, panels):
    """vram's own kernels (kernels/lu.cu) over several panels: pivots as PyTorch's, X for
    1 and 11 right-hand sides (two blocks of 8; at n = 20 a thread each), left and right,
    B read where it lies. The
    tall panels of this batch of 3 go to clusters of blocks (``CLUSTER_FROM``), or to a
    block a matrix where the cluster and tall tables are emptied."""
    if panels == "blocks":
        monkeypatch.setattr(_blocked, "CLUSTER_FROM", ())
        monkeypatch.setattr(_blocked, "TALL_FROM", ())
    shift = 4 * np.sqrt(n) * np.eye(n)
    a = (random((3, n, n), dt, seed=n) + shift).astype(dt.np)  # float32 stays float32
    A, T = on_both(a)
    with _dispatch.forced("blocked"):
        LU, pivots, info = vram.linalg.lu_factor_ex(A)
        want = torch.linalg.lu_factor_ex(T)
        np.testing.assert_array_equal(pivots.numpy(), want.pivots.cpu().numpy())
        np.testing.assert_array_equal(info.numpy(), 0)
        close(LU, want.LU, dt, scale=10 * np.sqrt(n))
        for k in (1, 11):
            (B, TB) = on_both(random((3, n, k), dt, seed=k))
            close(vram.linalg.solve(A, B), torch.linalg.solve(T, TB), dt, scale=100)
            (BT, TBT) = on_both(random((3, k, n), dt, seed=k + 1))
            got = vram.linalg.solve(A, BT, left=False)
            close(got, torch.linalg.solve(T, TBT, left=False), dt, scale=100)
            got = vram.linalg.lu_solve(LU, pivots, B, adjoint=True)
            close(got, torch.linalg.lu_solve(want.LU, want.pivots, TB, adjoint=True), dt, 100)


def reconstructs(LU: vram.Tensor, pivots: vram.Tensor, a: np.ndarray, atol: float) -> None:
    """P L U == A for each matrix of ``a`` (m x n; pivots may differ from another library's
    on near ties, the product may not)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    lu, piv = LU.numpy().reshape(-1, m, n), pivots.numpy().reshape(-1, k)
    for i, matrix in enumerate(a.reshape(-1, m, n)):
        lower = np.tril(lu[i][:, :k], -1) + np.eye(m, k)
        product = lower.astype(np.float64) @ np.triu(lu[i][:k]).astype(np.float64)
        for j in range(k - 1, -1, -1):
            p = piv[i, j] - 1
            product[[j, p]] = product[[p, j]]
        np.testing.assert_allclose(product, matrix, atol=atol)


@pytest.mark.parametrize("panels", ["tall", "clusters"])
@pytest.mark.parametrize("n", [300, 1000, 2049, 4096])
@pytest.mark.parametrize("dt", [vram.float32, vram.float64], ids=["float32", "float64"])
def test_one_matrix_panels_match_pytorch(monkeypatch, dt, n, panels):
    """One matrix over tall panels (one block, a sub-panel in registers at a time; cluster
    panels only above their 2048 rows) or over cluster panels (8 blocks a panel,
    distributed shared memory); every row of their tables is reached (4096 starts in the
    last, 2049 in the one before): pivots and info as PyTorch's (cuSOLVER's) where no two
    candidates tie closely; P L U = A for a random matrix; a solve."""
    assert vram.get_device_properties(CUDA).major >= 9, "cluster panels need sm_90"
    if panels == "tall":
        monkeypatch.setattr(_blocked, "CLUSTER_FROM", ((16, 2049),))
    shift = 4 * np.sqrt(n) * np.eye(n)
    a = (random((n, n), dt, seed=n) + shift).astype(dt.np)
    A, T = on_both(a)
    with _dispatch.forced("blocked"):
        LU, pivots, info = vram.linalg.lu_factor_ex(A)
        want = torch.linalg.lu_factor_ex(T)
        np.testing.assert_array_equal(pivots.numpy(), want.pivots.cpu().numpy())
        assert int(info.item()) == 0
        close(LU, want.LU, dt, scale=10 * np.sqrt(n))
        b = random((n, 3), dt, seed=1)
        (B, TB) = on_both(b)
        close(vram.linalg.solve(A, B), torch.linalg.solve(T, TB), dt, scale=100)
        raw = random((n, n), dt, seed=n + 1)
        LU, pivots, info = vram.linalg.lu_factor_ex(vram.tensor(raw, device=CUDA))
        assert int(info.item()) == 0
        reconstructs(LU, pivots, raw, atol=(2e-3 if dt == vram.float32 else 1e-9) * np.sqrt(n))


@pytest.mark.parametrize("panels", ["tall", "clusters", "blocks"])
@pytest.mark.parametrize("shape", [(700, 700), (3, 300, 300), (520, 200), (200, 520)], ids=str)
@pytest.mark.parametrize("dt", [vram.float32, vram.float64], ids=["float32", "float64"])
def test_look_ahead_and_its_replays_match_pytorch(monkeypatch, dt, shape, panels):
    """The look-ahead (``_blocked.factor``'s ``ahead``: each next panel on a stream of its
    own, updated by the panel kernel itself where it can) for every shape it may take, over
    cluster, tall and block panels; the same call three times: queued directly, captured
    into a graph and launched, the graph launched again (``_replay``), each the same bits,
    P L U = A."""
    monkeypatch.setattr(_blocked, "AHEAD_FROM", ((4, 1),))
    if panels != "clusters":
        monkeypatch.setattr(_blocked, "CLUSTER_FROM", ())
    if panels == "blocks":
        monkeypatch.setattr(_blocked, "TALL_FROM", ())
    a = random(shape, dt, seed=sum(shape))
    A, T = on_both(a)

    def factors() -> tuple[np.ndarray, ...]:
        # (the tensors are dropped on return: the next call's take their memory, the same key)
        return tuple(t.numpy() for t in vram.linalg.lu_factor_ex(A))

    before = _replay.replay_stats()
    with _dispatch.forced("blocked"):
        runs = [factors() for _ in range(3)]
    after = _replay.replay_stats()
    grown = {name: after[name] - before[name] for name in ("captured", "replayed")}
    assert grown == {"captured": 1, "replayed": 2}
    for lu, piv, info in runs[1:]:
        np.testing.assert_array_equal(lu, runs[0][0])
        np.testing.assert_array_equal(piv, runs[0][1])
        np.testing.assert_array_equal(info, runs[0][2])
    want = torch.linalg.lu_factor_ex(T)
    lu, piv, info = runs[0]
    np.testing.assert_array_equal(info, want.info.cpu().numpy())
    tol = (2e-3 if dt == vram.float32 else 1e-9) * np.sqrt(max(shape))
    reconstructs(vram.tensor(lu, device=CUDA), vram.tensor(piv, device=CUDA), a, atol=tol)


@pytest.mark.parametrize("panels", ["tall", "clusters"])
@pytest.mark.parametrize("pivot", [True, False])
def test_one_matrix_panels_report_zero_pivots_as_pytorch(monkeypatch, pivot, panels):
    """A zero column in the third panel: info is the first zero pivot, as cuSOLVER's;
    without pivoting, the trivial permutation. Tall panels, or cluster panels."""
    if panels == "tall":
        monkeypatch.setattr(_blocked, "CLUSTER_FROM", ())
    n = 1500
    a = random((n, n), vram.float64, seed=3) + 4 * np.sqrt(n) * np.eye(n)
    a[:, 70] = 0
    A, T = on_both(a)
    with _dispatch.forced("blocked"):
        LU, pivots, info = vram.linalg.lu_factor_ex(A, pivot=pivot)
    want = torch.linalg.lu_factor_ex(T, pivot=pivot)
    assert int(info.item()) == int(want.info.item()) == 71
    np.testing.assert_array_equal(pivots.numpy(), want.pivots.cpu().numpy())
    close(LU, want.LU, vram.float64, scale=1e3)


def test_default_dispatch_at_the_crossovers_matches_pytorch():
    """Every size the crossover table separates, as the default dispatch runs it."""
    for n, batch in ((32, 64), (128, 16), (256, 8), (511, 4), (512, 4), (1024, 2), (2048, 1)):
        a = random((batch, n, n), vram.float32, seed=n)
        A, T = on_both(a)
        LU, pivots, info = vram.linalg.lu_factor_ex(A)
        want = torch.linalg.lu_factor_ex(T)
        np.testing.assert_array_equal(info.numpy(), want.info.cpu().numpy())
        reconstructs(LU, pivots, a, atol=2e-3 * np.sqrt(n))


MALLOC_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import vram
    device = vram.device("cuda:0")
    out = {}
    for n in (511, 512, 513):
        for batch in (16, 64):
            A = vram.tensor(np.random.default_rng(n).standard_normal((batch, n, n)),
                            dtype=vram.float32, device=device)
            vram.memory.empty_cache(device)  # every workspace cold again
            vram.synchronize(device)
            with vram.memory.count_device_calls(device) as cold:
                vram.linalg.lu_factor_ex(A)
                vram.synchronize(device)
            with vram.memory.count_device_calls(device) as warm:
                vram.linalg.lu_factor_ex(A)
                vram.synchronize(device)
            plan = vram.linalg.plan_lu(n, n, batch, "float32")
            out[f"{batch}x{n}"] = [cold.device_malloc, warm.device_malloc, plan.path]
    print(json.dumps(out))
    """
)


def test_device_mallocs_are_constant_in_the_batch_on_the_gpu():
    """The issue's proof on the GPU: with VRAM_NO_CACHING=1 every allocation is a cudaMalloc;
    lu_factor_ex of (16, n, n) and (64, n, n) make the same number, at 511, 512 and 513.
    (PyTorch: 20 at (16, 512, 512) before pytorch#181998, 5 after.)"""
    paths = [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, VRAM_NO_CACHING="1", PYTHONPATH=os.pathsep.join(filter(None, paths)))
    run = subprocess.run(
        [sys.executable, "-c", MALLOC_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    counts = json.loads(run.stdout.strip().splitlines()[-1])
    print(counts)
    for n in (511, 512, 513):
        small, large = counts[f"16x{n}"], counts[f"64x{n}"]
        assert small[:2] == large[:2], counts
        # warm: LU, and pivots with info (and cuBLAS's pointer array); workspaces are kept
        assert small[1] == (3 if small[2] == "cublas" else 2), counts


@pytest.mark.parametrize(
    "values, expected",
    [([0, 0, 0], None), ([0, 0, 3, 0, 5], (2, 3)), ([-4, 7], (0, -4)),
     ([0] * 7777 + [9] + [0] * 100 + [2] * 2000, (7777, 9))],
)  # fmt: skip
def test_first_nonzero_on_the_gpu(values, expected):
    """check_errors's kernel: one block finds the first nonzero info, written to pinned
    memory; the same answers as the sim's (tests/linalg/test_linalg_sim.py)."""
    from vram.linalg import _libs

    info = vram.tensor(np.array(values, np.int32), device=CUDA)
    stream = vram.current_stream(vram.device(CUDA))
    assert _libs.LIBS.first_nonzero(stream, info.data_ptr(), info.numel()) == expected

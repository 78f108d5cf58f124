"""Which library runs a batch: the crossover tables, preferred_linalg_library, pinned plans,
vram's blocked LU (real dtypes only), and cuSOLVER's 64-bit API (taken where the legacy one
stops)."""

from __future__ import annotations

import numpy as np
import pytest
from linalg_helpers import close, random

import vram
from vram.linalg import _blocked, _dispatch, _lu, _solve
from vram.linalg._dispatch import LU_CROSSOVERS, SOLVE_CROSSOVERS, Plan, plan_lu, plan_solve

TABLE = LU_CROSSOVERS["float32"]
COMPLEX = LU_CROSSOVERS["complex64"]


def test_every_dtype_has_crossovers():
    for table in (LU_CROSSOVERS, SOLVE_CROSSOVERS):
        assert set(table) == {"float32", "float64", "complex64", "complex128"}


def test_default_plans_follow_the_table():
    # complex: cuBLAS's batched LU for small matrices, cuSOLVER above (over side streams)
    small, large = COMPLEX.cublas_max_n, COMPLEX.cublas_max_n + 1
    assert plan_lu(small, small, 64, "complex64").path == "cublas"
    assert plan_lu(large, large, 1, "complex64").path == "cusolver"  # one matrix: cuSOLVER
    big_batch = max(COMPLEX.streams_min_batch, 2)
    spread = plan_lu(large, large, big_batch, "complex64")
    assert spread == Plan("streams", min(COMPLEX.streams, big_batch), COMPLEX.getrf_algo)
    assert plan_lu(small, small + 1, 64, "complex64").path != "cublas"  # cuBLAS: square only
    # real: vram's blocked LU where the table takes it and it can run
    most = min(TABLE.blocked_max_n, _blocked.MAX_ROWS["float32"])
    batch = max(TABLE.blocked_min_batch, 2)
    assert plan_lu(most, most, batch, "float32").path == "blocked"
    assert plan_lu(most, most - 5, batch, "float32").path == "blocked"  # rectangular too
    beyond = plan_lu(most + 1, most + 1, batch, "float32")
    assert beyond.path != "blocked"
    solve_most = min(SOLVE_CROSSOVERS["float32"].blocked_max_n, _blocked.SOLVE_MAX_N)
    assert plan_solve(solve_most, 4, 64, "float32").path == "blocked"
    assert plan_solve(solve_most + 1, 4, 64, "float32").path != "blocked"
    assert plan_solve(8, 4, 64, "complex128").path == "cublas"


def test_a_pinned_path_that_cannot_run_gives_way_to_cusolver():
    with _dispatch.forced("blocked"):
        assert plan_lu(8, 8, 4, "float64") == Plan("blocked")
        assert plan_lu(8, 8, 4, "complex64").path == "cusolver"  # vram's kernels: real only
        too_tall = _blocked.MAX_ROWS["float64"] + 1
        assert plan_lu(too_tall, 8, 4, "float64").path == "cusolver"
        assert plan_solve(_blocked.SOLVE_MAX_N + 1, 1, 4, "float32").path == "cusolver"


def test_preferred_linalg_library_overrides_the_table():
    n = TABLE.cublas_max_n
    vram.backends.cuda.preferred_linalg_library("cublas")
    assert plan_lu(4 * n, 4 * n, 8, "float32").path == "cublas"
    assert plan_lu(8, 8, 8, "float32").path == "cublas"  # a library, not vram's kernels
    assert plan_lu(4 * n, 2 * n, 8, "float32").path != "cublas"  # it cannot: not square
    vram.backends.cuda.preferred_linalg_library("cusolver")
    assert plan_lu(8, 8, 4096, "float32").path in ("cusolver", "streams")
    assert plan_solve(8, 1, 4096, "float64").path in ("cusolver", "streams")


def test_preferred_library_is_read_at_each_call(sim0, monkeypatch):
    ran = []
    real = _lu.factor

    def spy(*args, **kwargs):
        plan = real(*args, **kwargs)
        ran.append(plan.path)
        return plan

    monkeypatch.setattr(_lu, "factor", spy)
    A = vram.tensor(random((8, 4, 4), vram.float32), device=sim0)
    vram.linalg.lu_factor(A)
    vram.backends.cuda.preferred_linalg_library("cusolver")
    vram.linalg.lu_factor(A)
    vram.backends.cuda.preferred_linalg_library("default")
    vram.linalg.lu_factor(A)
    assert ran[0] == ran[2] == plan_lu(4, 4, 8, "float32").path
    assert ran[1] in ("cusolver", "streams")


def test_forced_plans_nest_and_reject_unknown_paths():
    with _dispatch.forced("streams", streams=5):
        assert plan_lu(2, 2, 100, "float64") == Plan("streams", 5)
        with _dispatch.forced("cublas"):
            assert plan_lu(3, 2, 100, "float64").path == "cusolver"  # not square
        assert plan_lu(2, 2, 100, "float64").path == "streams"
    with pytest.raises(ValueError, match="path"):
        with _dispatch.forced("magma"):
            pass


@pytest.mark.parametrize("path", ["cusolver", "streams"])
@pytest.mark.parametrize("algo", [None, 1])
def test_the_64_bit_api_gives_the_same_factors(sim0, monkeypatch, path, algo):
    """Xgetrf (int64 pivots turned into int32 by a kernel) and Xgetrs, taken here for small
    matrices by lowering the size where the legacy API stops, or by naming an algorithm."""
    monkeypatch.setattr(_lu, "X_API_ELEMENTS", 1 if algo is None else 1 << 31)
    monkeypatch.setattr(_solve, "X_API_ELEMENTS", 1)
    a = random((5, 6, 6), vram.complex128, seed=3)
    b = random((5, 6, 2), vram.complex128, seed=4)
    A = vram.tensor(a, device=sim0)
    with _dispatch.forced(path, streams=2, algo=algo):
        LU, pivots = vram.linalg.lu_factor(A)
        X = vram.linalg.lu_solve(LU, pivots, vram.tensor(b, device=sim0), adjoint=True)
    monkeypatch.setattr(_lu, "X_API_ELEMENTS", 1 << 31)
    with _dispatch.forced("cusolver"):  # the legacy API (cuBLAS picks complex pivots otherwise)
        want_lu, want_pivots = vram.linalg.lu_factor(A)
    np.testing.assert_array_equal(pivots.numpy(), want_pivots.numpy())
    close(LU.numpy(), want_lu.numpy(), vram.complex128)
    close(np.swapaxes(a, 1, 2).conj() @ X.numpy(), b, vram.complex128)

"""Which library runs a batch: the crossover tables, preferred_linalg_library, pinned plans,
and cuSOLVER's 64-bit API (taken where the legacy one stops)."""

from __future__ import annotations

import numpy as np
import pytest
from linalg_helpers import close, random

import vram
from vram.linalg import _dispatch, _lu, _solve
from vram.linalg._dispatch import LU_CROSSOVERS, SOLVE_CROSSOVERS, Plan, plan_lu, plan_solve

TABLE = LU_CROSSOVERS["float32"]


def test_every_dtype_has_crossovers():
    for table in (LU_CROSSOVERS, SOLVE_CROSSOVERS):
        assert set(table) == {"float32", "float64", "complex64", "complex128"}


def test_default_plans_follow_the_table():
    small, large = TABLE.cublas_max_n, TABLE.cublas_max_n + 1
    assert plan_lu(small, small, 64, "float32").path == "cublas"
    assert plan_lu(large, large, 1, "float32").path == "cusolver"  # one matrix: cuSOLVER
    big_batch = max(TABLE.streams_min_batch, 2)
    spread = plan_lu(large, large, big_batch, "float32")
    assert spread == Plan("streams", min(TABLE.streams, big_batch), TABLE.getrf_algo)
    assert plan_lu(small, small + 1, 64, "float32").path != "cublas"  # cuBLAS: square only
    assert plan_solve(SOLVE_CROSSOVERS["float32"].cublas_max_n, 4, 64, "float32").path == "cublas"


def test_preferred_linalg_library_overrides_the_table():
    n = TABLE.cublas_max_n
    vram.backends.cuda.preferred_linalg_library("cublas")
    assert plan_lu(4 * n, 4 * n, 8, "float32").path == "cublas"
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
    assert ran[0] == ran[2] == "cublas" and ran[1] in ("cusolver", "streams")


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

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
        for crossover in table.values():
            limits = [most for most, _ in crossover.bands]
            assert limits == sorted(limits) and limits[-1] == _dispatch.EVERY_N
            assert {way for _, way in crossover.bands} <= set(_dispatch.PATHS)
        for dtype in ("complex64", "complex128"):  # vram's blocked LU is for real dtypes
            assert "blocked" not in {way for _, way in table[dtype].bands}


def test_default_plans_follow_the_bands():
    """Note [LU crossovers]: blocked to 2048, side streams above; one matrix: cuSOLVER, but
    real ones of 512 to 4096 rows (blocked, looking ahead)."""
    assert TABLE.way(32, 4096) == "blocked" and TABLE.way(128, 1024) == "blocked"
    assert TABLE.way(256, 256) == "blocked"
    assert TABLE.way(511, 64) == TABLE.way(512, 64) == "blocked"  # no cliff at 512
    assert TABLE.way(1023, 16) == TABLE.way(1024, 16) == "blocked"
    assert TABLE.way(2047, 16) == TABLE.way(2048, 16) == "blocked"
    assert TABLE.way(2049, 16) == "streams"
    for n in (32, 511, 4097):  # one matrix: cuSOLVER, but 512 to 4096 rows
        assert TABLE.way(n, 1) == LU_CROSSOVERS["float64"].way(n, 1) == "cusolver"
    for n in (512, 1024, 2048, 4096):
        assert TABLE.way(n, 1) == LU_CROSSOVERS["float64"].way(n, 1) == "blocked"
    assert plan_lu(32, 32, 4096, "float32") == Plan("blocked")
    assert plan_lu(256, 256, 256, "float32") == Plan("blocked")
    assert plan_lu(256, 200, 256, "float32") == Plan("blocked")
    assert plan_lu(1024, 1024, 16, "float32") == Plan("blocked")
    assert plan_lu(2048, 2048, 16, "float32") == Plan("blocked")
    assert plan_lu(4096, 4096, 4, "float32") == Plan("streams", 4, TABLE.getrf_algo)
    assert plan_lu(4096, 4096, 1, "float32") == Plan("blocked")  # cluster panels (sm_90)
    assert plan_lu(8192, 8192, 1, "float32").path == "cusolver"
    # float64's panels of a block a matrix stop at 1024 rows: past it, cluster panels
    # (batches of up to 32; the simulated GPU is an H100) or the side streams
    assert plan_lu(2048, 2048, 32, "float64") == Plan("blocked")
    assert plan_lu(2048, 2048, 33, "float64") == Plan("streams", 8, TABLE.getrf_algo)
    # complex: cuBLAS to 512, side streams above
    assert plan_lu(512, 512, 64, "complex64") == Plan("cublas")
    assert plan_lu(513, 513, 64, "complex64").path == "streams"
    # solves: blocked to 1024 for real dtypes, then side streams; cuBLAS for complex
    assert plan_solve(1024, 4, 16, "float32") == Plan("blocked")
    assert plan_solve(1025, 4, 16, "float64").path == "streams"
    assert plan_solve(8, 4, 64, "complex128") == Plan("cublas")


def test_without_clusters_tall_batches_go_to_the_side_streams(monkeypatch):
    """On a device before sm_90 there are no cluster panels: past 2048 rows (tall panels'
    last) a batch is factored by cuSOLVER over side streams, and so is float64 past 1024
    rows in batches of more than 16 (which tall panels do not take)."""
    monkeypatch.setattr(_blocked, "clusters_on", lambda device: False)
    assert plan_lu(2048, 2048, 4, "float64") == Plan("blocked")  # tall panels
    assert plan_lu(2048, 2048, 17, "float64") == Plan("streams", 8, TABLE.getrf_algo)
    assert plan_lu(2048, 2048, 17, "float32") == Plan("blocked")
    with _dispatch.forced("blocked"):
        assert plan_lu(4096, 4096, 4, "float32").path == "cusolver"
    monkeypatch.undo()
    with _dispatch.forced("blocked"):
        assert plan_lu(4096, 4096, 4, "float32").path == "blocked"  # cluster panels


@pytest.fixture
def clusters_setting(monkeypatch):
    """``set(text)``: VRAM_LINALG_CLUSTERS for the rest of the test, read afresh
    (clusters_on keeps its answer per device)."""

    def set_to(text: str) -> None:
        monkeypatch.setenv(_blocked.CLUSTERS_VARIABLE, text)
        _blocked.clusters_on.cache_clear()

    yield set_to
    _blocked.clusters_on.cache_clear()  # the next test reads the restored environment


def test_vram_linalg_clusters_0_runs_no_cluster_panels(sim0, clusters_setting):
    """The switch for tools that cannot follow a cluster's bulk copies: panels as on a
    device before sm_90 (tall panels, side streams past them), the same factors."""
    a = random((3, 300, 300), vram.float32, seed=3)
    factors = {}
    for text in ("1", "0"):
        clusters_setting(text)
        with _dispatch.forced("blocked"):
            LU, pivots = vram.linalg.lu_factor(vram.tensor(a, device=sim0))
        factors[text] = (LU.numpy(), pivots.numpy())
        first = _blocked.panel_config("float32", 300, 3, _blocked.clusters_on(sim0))
        assert first.blocks == (_blocked.CLUSTER if text == "1" else 1)
    assert plan_lu(2048, 2048, 17, "float64") == Plan("streams", 8, TABLE.getrf_algo)
    with _dispatch.forced("blocked"):
        assert plan_lu(4096, 4096, 4, "float32").path == "cusolver"
    np.testing.assert_array_equal(factors["0"][0], factors["1"][0])
    np.testing.assert_array_equal(factors["0"][1], factors["1"][1])
    for text, on in ((" off ", False), ("False", False), ("no", False), ("on", True)):
        clusters_setting(text)
        assert _blocked.clusters_on(sim0) is on
    clusters_setting("sometimes")
    with pytest.raises(ValueError, match=r"^VRAM_LINALG_CLUSTERS: expected 1 or 0 .*'sometimes'"):
        vram.linalg.lu_factor(vram.tensor(a, device=sim0))


def test_tall_and_cluster_panels_take_tall_panels_of_small_batches():
    """``CLUSTER_FROM``: on devices that have clusters, batches of up to 32, panels of 257
    rows and more go to cluster panels; ``TALL_FROM``: elsewhere, batches of up to 16,
    panels of 257 to 2048 rows go to tall panels (one block, a sub-panel in registers at a
    time); the rest, a block a matrix."""
    for rows, batch in ((2048, 16), (2048, 1), (257, 16), (1024, 3)):
        tall = _blocked.panel_config("float32", rows, batch, clusters=False)
        assert tall.blocks == 1 and tall.sub > 0 and tall.threads * tall.rows >= rows
    for rows, batch in ((2048, 32), (2048, 1), (257, 16), (1024, 3), (4096, 16)):
        cluster = _blocked.panel_config("float32", rows, batch, clusters=True)
        assert cluster.blocks == _blocked.CLUSTER and cluster.sub == 0
        assert cluster.threads * cluster.blocks >= rows
    assert _blocked.panel_config("float32", 4096, 16, clusters=True).threads * 8 == 4096
    assert _blocked.panel_config("float32", 8192, 1, clusters=True).blocks == _blocked.CLUSTER
    for rows, batch, clusters in ((2048, 33, True), (256, 16, True), (2048, 17, False)):
        config = _blocked.panel_config("float32", rows, batch, clusters)
        assert config.blocks == 1 and config.sub == 0
    assert _blocked.supports("float64", 8192, 8192, 16, clusters=True)
    assert not _blocked.supports("float64", 8193, 8193, 16, clusters=True)
    assert _blocked.supports("float64", 2048, 2048, 16, clusters=False)
    assert not _blocked.supports("float64", 2049, 2049, 16, clusters=False)
    # a matrix of at most 32 columns is read in place by one launch, except by a tall panel
    assert _blocked.one_panel("float32", 256, 32, 16)
    assert not _blocked.one_panel("float32", 2048, 32, 16)
    for table in _blocked.TALL_PANELS.values():
        for _, config in table:  # 32 columns, whole sub-panels, a thread a later column
            assert config.width == 32 and 32 % config.sub == 0 and config.threads >= 32
    for dtype, table in _blocked.CLUSTER_PANELS.items():
        for most, config in table:  # each covers its rows exactly: 8 blocks of whole warps
            assert config.blocks * config.threads * config.rows == most, (dtype, config)
            assert config.threads % 32 == 0 and config.width <= _blocked.SWAP_WIDTH


def test_a_way_that_cannot_run_gives_way_to_cusolver(monkeypatch):
    monkeypatch.setitem(_blocked.MAX_ROWS, "float32", 64)  # too tall for blocked past 64
    assert plan_lu(100, 100, 64, "float32").path == "streams"
    assert plan_lu(64, 64, 64, "float32") == Plan("blocked")
    with _dispatch.forced("blocked"):
        assert plan_lu(8, 8, 4, "float64") == Plan("blocked")
        assert plan_lu(8, 8, 4, "complex64").path == "cusolver"  # vram's kernels: real only
        assert plan_lu(65, 8, 4, "float32").path == "cusolver"
        assert plan_solve(_blocked.SOLVE_MAX_N + 1, 1, 4, "float32").path == "cusolver"


def test_a_blocked_solve_factors_blocked(sim0, monkeypatch):
    """linalg.solve and inv at 256 x 256: the LU table factors blocked where the solve
    table solves blocked (the pair that was measured); with cuSOLVER preferred, both
    leave vram's kernels."""
    ran = []
    real = _lu.factor

    def spy(*args, **kwargs):
        plan = real(*args, **kwargs)
        ran.append(plan.path)
        return plan

    monkeypatch.setattr(_solve, "factor", spy)
    for dtype in ("float32", "float64"):
        for n in (32, 256, 1024):
            assert plan_solve(n, 1, 4, dtype).path == plan_lu(n, n, 4, dtype).path == "blocked"
    rng = np.random.default_rng(0)
    A = vram.tensor(rng.standard_normal((2, 256, 256)) + 16 * np.eye(256), device=sim0)
    vram.linalg.solve(A, vram.tensor(rng.standard_normal((2, 256, 1)), device=sim0))
    assert ran == ["blocked"]
    vram.backends.cuda.preferred_linalg_library("cusolver")
    ran.clear()
    vram.linalg.inv(A)
    assert ran == ["streams"]


def test_preferred_linalg_library_overrides_the_table():
    n = 512
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

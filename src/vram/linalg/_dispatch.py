"""Which library runs an LU factorization or an LU solve: the crossover table and the choice.

Four ways to run a batch (the same on a GPU and on the simulated GPU):
- ``"blocked"``: vram's own blocked LU and solve (``_blocked``, kernels/lu.cu): a panel
  kernel, a swap + triangular-solve kernel and one cuBLAS strided-batched GEMM per step of
  32 (or 16) columns, for the whole batch at once; one launch for a matrix of at most 32
  columns. Real dtypes, at most ``_blocked.MAX_ROWS`` rows (more with tall panels for
  batches of up to 16, and with cluster panels on sm_90). Wins for batches of matrices to
  2048, and every batched solve it can run.
- ``"cublas"``: cuBLAS's batched routine (getrfBatched / getrsBatched), one launch for the
  whole batch; square matrices only. Wins for the complex types (which have no blocked LU)
  to 512.
- ``"cusolver"``: cuSOLVER's routine (getrf / getrs) for each matrix in turn on the current
  stream, with ONE workspace (queried once) for the whole batch. Wins for one matrix (but
  real ones from 512 to 4096 rows, which blocked takes).
- ``"streams"``: the same cuSOLVER calls spread round robin over side streams, each with
  its own workspace, joined to the current stream by events. Wins for batches of large
  matrices (from 2049; complex from 513), where one matrix leaves most of the GPU idle.

The choice reads ``vram.backends.cuda.preferred_linalg_library()`` at each call: "default"
follows the crossover tables below; "cublas" takes cuBLAS wherever it applies (batches of
square matrices); "cusolver" takes neither cuBLAS nor vram's kernels (cuSOLVER on one
stream, or over side streams for a batch). Tests and the benchmark pin a plan with ``forced(...)``;
a pinned way that cannot run a call (cuBLAS: not square; blocked: complex or too tall)
gives way to cuSOLVER.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from .._device import as_device
from ..backends import cuda as _backend
from . import _blocked

__all__ = [
    "Crossover",
    "EVERY_N",
    "LU_CROSSOVERS",
    "SOLVE_CROSSOVERS",
    "Plan",
    "plan_lu",
    "plan_lu_for",
    "plan_solve",
    "forced",
    "PATHS",
]

PATHS = ("cublas", "cusolver", "streams", "blocked")


EVERY_N = 1 << 62  # the last band's bound: every size


@dataclass(frozen=True, slots=True, eq=False)  # hashed by identity: the plan cache keys on it
class Crossover:
    """Which way runs a call, for one dtype: for a batch of two or more, the first of
    ``bands`` (largest n, way) whose n is at least max(m, n) of the matrices; for one
    matrix, the first such of ``single``. A way that cannot run the
    call (cuBLAS: not square; blocked: a complex dtype, or more rows than its panels take on
    this device) gives way to cuSOLVER: over ``streams`` side streams for batches of
    ``streams_min_batch`` or more, else on the current stream."""

    bands: tuple[tuple[int, str], ...]
    single: tuple[tuple[int, str], ...] = ((EVERY_N, "cusolver"),)
    streams: int = 8  # side streams for the spread (fewer when the batch is smaller)
    streams_min_batch: int = 2
    getrf_algo: int | None = None  # cuSOLVER getrf: None the legacy API, 0/1 Xgetrf's ALG_0/1

    def way(self, size: int, batch: int) -> str:
        """The table's way for matrices of ``size`` = max(m, n) in a batch of ``batch``."""
        bands = self.bands if batch >= 2 else self.single
        for most, way in bands:
            if size <= most:
                return way
        return bands[-1][1]


# Note [LU crossovers]: fp32 lu_factor on an H100, ms per call (lower wins), from the run
# that set these bands (commit 5104545; the later run in bench/results/linalg-cuda0-*.json,
# with the tiled copy and the faster getrs, finds the same fastest ways; ``python
# bench/linalg.py --suggest`` prints such a table from a result). Random normal matrices, the call
# synchronizing (info is checked):
#
#   n x batch    blocked  cublas  cusolver  streams 8  streams 16   torch best (setting)
#     32 x 4096    0.145   0.246      -          -          -        0.107 (cusolver)
#    128 x 1024    0.958   1.829      -          -          -        1.593 (cusolver)
#    256 x 256     1.228   2.671      -        16.88        -        2.433 (cusolver)
#    511 x 64      2.340  11.93     62.53      24.87        -        6.040 (default)
#    512 x 64      2.366  10.99     61.83      24.37      24.14      5.656 (default)
#   1023 x 16      5.186     -      34.01      12.30      12.26     17.45  (default)
#   1024 x 16      5.073     -      33.52      12.08      12.06     19.40  (default)
#   2047 x 16     26.19      -      80.76      25.93      25.74     67.90  (default)
#   2048 x 16     25.10      -      79.78      25.26      25.09     66.14  (default)
#    512 x 1       1.551     -       1.109       -          -        1.003 (default)
#   2048 x 1       8.980     -       5.128       -          -        4.984 (cusolver)
#   4096 x 1         -       -      12.99        -          -       12.67  (default)
#
# So, for batches: vram's blocked LU to n = 1024 (2.2x faster than cuBLAS at 256, 4.7x at
# 512, 2.4x faster than the side streams at 1024), and above it the spread over 8 side
# streams (at 2047 and 2048 blocked and 8 or 16 side streams are within 3% of each other;
# float64's blocked LU stops at 1024 rows). One matrix: cuSOLVER (it beats blocked at 512
# and 2048 by 1.4-1.8x: one matrix's panels leave all but one multiprocessor idle). The
# bands were measured at the batches above (16 to 4096); other batches take the same
# bands, and float64 takes float32's (not measured). The complex types (no blocked LU)
# take the first run's library crossovers: cuBLAS to 512 (10.9-12.3 ms at 511/512 x 64
# vs 24-25 over side streams), side streams above (11.5 vs 69 at 1024 x 16).
#
# (Before swap_trsm took a warp per column, blocked lost to cuBLAS at 256 x 256 and to the
# side streams from 1023: the interchanges cost one memory latency each.)
#
# With cluster panels (``_blocked.CLUSTER_FROM``: batches of up to 32, on sm_90) blocked
# also wins to 2048 (ms, blocked / streams 8, the H100 run of 2026-11-23 in _blocked):
# 2048 x 2 5.64 / 6.94, 2048 x 4 6.76 / 8.97, 2048 x 16 15.2 / 25.4, 2048 x 32 26.4 / 47.7;
# at 4096 the side streams win again (4096 x 4 28.0 / 26.2). Without clusters, tall panels
# (``_blocked.TALL_FROM``) take the panels of batches of up to 16 to 2048 rows. Doubles
# past 1024 rows in batches of more than 32 (16 without clusters), and past 2048 rows on a
# device without clusters, blocked cannot run: the side streams take them.
#
# One matrix: cuSOLVER to 511 rows, vram's blocked LU from 512 to 4096 (cluster panels with
# the look-ahead, replayed as a graph: ``_blocked.AHEAD_FROM``, ``_replay``), cuSOLVER
# above. From an H100 (bench/results/linalg_ahead-cuda0-2026-11-23.json, ms of
# lu_factor_ex; blocked looking ahead / in turn / cuSOLVER):
#
#   float32   512 x 1  0.769 / 0.990 / 0.954    float64   512 x 1  0.925 / 0.919 / 1.045
#            1024 x 1  1.65  / 1.75  / 2.04              1024 x 1  1.96  / 1.97  / 2.39
#            2048 x 1  3.72  / 4.04  / 4.88              2048 x 1  4.51  / 4.84  / 5.83
#            4096 x 1  9.29  / 12.26 / 12.49             4096 x 1  12.58 / 17.22 / 14.29
#
# ("In turn" is queued from Python, and bound by the host below 4096: the first run of this
# table, on a slower host, had it at 1.34 ms at 512 and 2.50 at 1024, the look-ahead at
# 0.777 and 1.66.)
#
# (Before the look-ahead, blocked lost to cuSOLVER at 512 (1.55 / 1.11) and only matched it
# at 4096, and doubles lost at 4096 (19.5 / 14.6).)
_REAL_BANDS = ((2048, "blocked"), (EVERY_N, "streams"))
_REAL_SINGLE = ((511, "cusolver"), (4096, "blocked"), (EVERY_N, "cusolver"))
_COMPLEX = Crossover(bands=((512, "cublas"), (EVERY_N, "streams")))
LU_CROSSOVERS: dict[str, Crossover] = {
    "float32": Crossover(bands=_REAL_BANDS, single=_REAL_SINGLE),
    "float64": Crossover(bands=_REAL_BANDS, single=_REAL_SINGLE),
    "complex64": _COMPLEX,
    "complex128": _COMPLEX,
}

# Note [Solve crossovers]: fp32 linalg.solve (factorization and solve) on an H100, ms per
# call, 1 / 64 right-hand sides, the same result file; well-conditioned systems (A + sqrt(n) I):
#
#   n x batch    blocked        cublas         streams 8      cusolver       torch best
#     32 x 4096  0.260 / 0.558  0.415 / 0.811       -              -        0.183 / 0.502
#    256 x 256   1.625 / 2.003  2.535 / 2.579       -              -        2.181 / 2.293
#    512 x 64    2.882 / 2.955  10.31 / 10.29  25.84 / 27.02       -        6.771 / 6.797
#   1024 x 16    6.145 / 6.291       -         12.54 / 13.00  37.59 / 42.39 20.09 / 20.07
#   4096 x 1          -              -              -         13.63 / 15.00 13.16 / 14.60
#
# vram's blocked solve (its factorization, then its one-kernel solve) wins every batched
# row it can run (to 1024); the LU table factors those same batches blocked, so a solve
# runs the measured pair. Above 1024 the spread over side streams (the
# libraries' best batched way at 1024 x 16); one matrix: cuSOLVER. Complex: as for LU.
_REAL_SOLVE = Crossover(bands=((1024, "blocked"), (EVERY_N, "streams")))
SOLVE_CROSSOVERS: dict[str, Crossover] = {
    "float32": _REAL_SOLVE,
    "float64": _REAL_SOLVE,
    "complex64": _COMPLEX,
    "complex128": _COMPLEX,
}


@dataclass(frozen=True, slots=True)
class Plan:
    """How one call runs: ``path`` (one of PATHS), side ``streams`` (for "streams"), and
    cuSOLVER's getrf API (``algo`` None: the legacy one; 0 or 1: Xgetrf's algorithm)."""

    path: str
    streams: int = 1
    algo: int | None = None


class _Forced(threading.local):
    plan: Plan | None = None


_forced = _Forced()


@contextmanager
def forced(path: str, streams: int = 8, algo: int | None = None) -> Iterator[Plan]:
    """Run every LU factorization and solve of this thread with ``path`` (where it applies:
    cuBLAS only takes square matrices) while the block runs; for tests and benchmarks."""
    if path not in PATHS:
        raise ValueError(f"path: expected one of {PATHS}, got {path!r}")
    if streams < 1:
        raise ValueError(f"streams: expected at least 1, got {streams}")
    previous = _forced.plan
    _forced.plan = Plan(path, streams if path == "streams" else 1, algo)
    try:
        yield _forced.plan
    finally:
        _forced.plan = previous


def _plan(
    table: dict[str, Crossover], m: int, n: int, batch: int, dtype: str, blocked: bool
) -> Plan:
    """``blocked``: whether vram's blocked LU (or solve) can run this call."""
    square = m == n
    pinned = _forced.plan
    if pinned is not None:
        if (pinned.path == "cublas" and not square) or (pinned.path == "blocked" and not blocked):
            return Plan("cusolver", 1, pinned.algo)
        return pinned
    preferred = _backend.preferred_linalg_library()
    return _chosen(table[dtype], square, max(m, n), batch, blocked, preferred)


@lru_cache(maxsize=4096)
def _chosen(
    crossover: Crossover, square: bool, size: int, batch: int, blocked: bool, preferred: str
) -> Plan:
    """The plan ``crossover`` gives matrices of ``size`` = max(m, n) under the ``preferred``
    library setting: a function of its arguments alone, so cached (a call looks it up
    instead of walking the table and making a Plan)."""
    if preferred == "default":
        way = crossover.way(size, batch)
    elif preferred == "cublas" and batch >= 2:
        way = "cublas"
    else:  # cuSOLVER, on one stream or over side streams
        way = "streams"
    if (way == "cublas" and not square) or (way == "blocked" and not blocked):
        way = "streams"
    if way == "blocked" or way == "cublas":
        return Plan(way)
    if way == "streams" and batch >= crossover.streams_min_batch and crossover.streams > 1:
        return Plan("streams", min(crossover.streams, batch), crossover.getrf_algo)
    return Plan("cusolver", 1, crossover.getrf_algo)


def plan_lu(m: int, n: int, batch: int, dtype: str, device: object = None) -> Plan:
    """How an LU factorization of ``batch`` m x n matrices of ``dtype`` runs now on
    ``device`` (None: the current device)."""
    clusters = _blocked.clusters_on(as_device(device))
    return plan_lu_for(m, n, batch, dtype, _blocked.supports(dtype, m, n, batch, clusters))


def plan_lu_for(m: int, n: int, batch: int, dtype: str, blocked: bool) -> Plan:
    """``plan_lu``'s plan, for a caller that knows whether vram's blocked LU takes the call
    (``blocked``: ``_blocked.supports`` on the device)."""
    return _plan(LU_CROSSOVERS, m, n, batch, dtype, blocked)


def plan_solve(n: int, nrhs: int, batch: int, dtype: str) -> Plan:
    """How an LU solve of ``batch`` n x n systems with ``nrhs`` right-hand sides runs now."""
    blocked = _blocked.solve_supports(dtype, n)
    if blocked and nrhs:  # the solve's blocks fill one grid dimension
        blocked = batch * -(-nrhs // _blocked.solve_tile(n, nrhs)) < 2**31
    return _plan(SOLVE_CROSSOVERS, n, n, batch, dtype, blocked)

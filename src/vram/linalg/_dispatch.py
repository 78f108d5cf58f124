"""Which library runs an LU factorization or an LU solve: the crossover table and the choice.

Four ways to run a batch (the same on a GPU and on the simulated GPU):
- ``"blocked"``: vram's own blocked LU and solve (``_blocked``, kernels/lu.cu): a panel
  kernel, a swap + triangular-solve kernel and one cuBLAS strided-batched GEMM per step of
  32 (or 16) columns, for the whole batch at once; one launch for a matrix of at most 32
  columns. Real dtypes, at most ``_blocked.MAX_ROWS`` rows.
- ``"cublas"``: cuBLAS's batched routine (getrfBatched / getrsBatched), one launch for the
  whole batch; square matrices only. Wins for small matrices in large batches.
- ``"cusolver"``: cuSOLVER's routine (getrf / getrs) for each matrix in turn on the current
  stream, with ONE workspace (queried once) for the whole batch. Wins for large matrices.
- ``"streams"``: the same cuSOLVER calls spread round robin over side streams, each with
  its own workspace, joined to the current stream by events. In between, where one matrix
  leaves most of the GPU idle, the matrices run side by side.

The choice reads ``vram.backends.cuda.preferred_linalg_library()`` at each call: "default"
follows the crossover tables below; "cublas" takes cuBLAS wherever it applies (square
matrices); "cusolver" takes neither cuBLAS nor vram's kernels (cuSOLVER on one stream or
over side streams, by the table). Tests and the benchmark pin a plan with ``forced(...)``;
a pinned way that cannot run a call (cuBLAS: not square; blocked: complex or too tall)
gives way to cuSOLVER.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..backends import cuda as _backend
from . import _blocked

__all__ = [
    "Crossover",
    "LU_CROSSOVERS",
    "SOLVE_CROSSOVERS",
    "Plan",
    "plan_lu",
    "plan_solve",
    "forced",
    "PATHS",
]

PATHS = ("cublas", "cusolver", "streams", "blocked")


@dataclass(frozen=True, slots=True)
class Crossover:
    """Where each way wins, for one dtype. In order: vram's blocked LU up to
    ``blocked_max_n`` (where it can run); else, for batch >= 2, cuBLAS's batched routine up
    to ``cublas_max_n``; else cuSOLVER, over side streams from ``streams_min_batch``."""

    cublas_max_n: int  # square n x n up to this: cuBLAS's batched routine
    streams_min_batch: int  # larger n, batches this large: spread over side streams
    streams: int  # side streams for the spread (fewer when the batch is smaller)
    getrf_algo: int | None = None  # cuSOLVER getrf: None the legacy API, 0/1 Xgetrf's ALG_0/1
    blocked_max_n: int = 0  # max(m, n) up to this: vram's blocked LU (0: never)
    blocked_min_batch: int = 1  # ... for batches at least this large


# Note [LU crossovers]: fp32 lu_factor on an H100 (bench/linalg.py, ms per call, lower wins;
# ``python bench/linalg.py --suggest RESULT.json`` prints this table from a result).
#
# First run (bench/results/linalg-cuda0-2026-11-22.json, before vram's blocked LU):
#   n x batch     cublas  cusolver  streams 8  streams 16   torch default / cusolver
#     32 x 4096    0.426    247.0     130.1     128.1        0.130 / 0.108
#    128 x 1024    1.967    207.4      32.0      33.5        1.81 / 1.73
#    256 x 256     2.699    108.1      17.2      17.2        3.23 / 2.49
#    511 x 64     12.27      62.8      25.1      25.1        5.89 / 11.57
#    512 x 64     10.91      61.5      24.3      24.3        5.59 / 61.18
#   1024 x 16     69.40      33.3      11.5      11.5       17.84 / 32.95
#   2048 x 16       -        79.6      25.6      25.3       65.92 / 78.83
#   4096 x 1        -        13.0        -         -        12.67 / 12.67
# cuBLAS's batched LU wins to n = 512, the spread over 8 side streams from 1024; one
# matrix takes cuSOLVER. vram's blocked LU is measured by the next run (this table is then
# rewritten from it); until then it is taken wherever it can run, real dtypes to 2048 rows.
# float64 and the complex types take float32's crossovers (they are not measured).
LU_CROSSOVERS: dict[str, Crossover] = {
    "float32": Crossover(cublas_max_n=512, streams_min_batch=2, streams=8, blocked_max_n=2048),
    "float64": Crossover(cublas_max_n=512, streams_min_batch=2, streams=8, blocked_max_n=2048),
    "complex64": Crossover(cublas_max_n=512, streams_min_batch=2, streams=8),
    "complex128": Crossover(cublas_max_n=512, streams_min_batch=2, streams=8),
}

# Note [Solve crossovers]: fp32 solve (lu_factor + lu_solve) on an H100, 1 and 64 right-hand
# sides; the first run: getrsBatched wins to n = 512 (2.6 ms at 256 x 256, 10.4 at 512 x 64;
# cuSOLVER over 8 streams 20.5 and 25.8), the streams at 1024 x 16 (12.0 vs 63.3). vram's
# blocked solve (one kernel) is taken wherever it can run until the next run measures it.
SOLVE_CROSSOVERS: dict[str, Crossover] = {
    "float32": Crossover(cublas_max_n=512, streams_min_batch=2, streams=8, blocked_max_n=1024),
    "float64": Crossover(cublas_max_n=512, streams_min_batch=2, streams=8, blocked_max_n=1024),
    "complex64": Crossover(cublas_max_n=512, streams_min_batch=2, streams=8),
    "complex128": Crossover(cublas_max_n=512, streams_min_batch=2, streams=8),
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
    crossover = table[dtype]
    pinned = _forced.plan
    if pinned is not None:
        if (pinned.path == "cublas" and m != n) or (pinned.path == "blocked" and not blocked):
            return Plan("cusolver", 1, pinned.algo)
        return pinned
    preferred = _backend.preferred_linalg_library()
    if (
        preferred == "default"
        and blocked
        and max(m, n) <= crossover.blocked_max_n
        and batch >= crossover.blocked_min_batch
    ):
        return Plan("blocked")
    square = m == n
    if square and batch >= 2 and preferred != "cusolver":
        if preferred == "cublas" or n <= crossover.cublas_max_n:
            return Plan("cublas")
    if batch >= crossover.streams_min_batch and crossover.streams > 1:
        return Plan("streams", min(crossover.streams, batch), crossover.getrf_algo)
    return Plan("cusolver", 1, crossover.getrf_algo)


def plan_lu(m: int, n: int, batch: int, dtype: str) -> Plan:
    """How an LU factorization of ``batch`` m x n matrices of ``dtype`` runs now."""
    return _plan(LU_CROSSOVERS, m, n, batch, dtype, _blocked.supports(dtype, m, n))


def plan_solve(n: int, nrhs: int, batch: int, dtype: str) -> Plan:
    """How an LU solve of ``batch`` n x n systems with ``nrhs`` right-hand sides runs now."""
    blocked = _blocked.solve_supports(dtype, n) and -(-nrhs // _blocked.SOLVE_RHS) <= 65535
    return _plan(SOLVE_CROSSOVERS, n, n, batch, dtype, blocked)

"""Which library runs an LU factorization or an LU solve: the crossover table and the choice.

Three ways to run a batch (the same on a GPU and on the simulated GPU):
- ``"cublas"``: cuBLAS's batched routine (getrfBatched / getrsBatched), one launch for the
  whole batch; square matrices only. Wins for small matrices in large batches.
- ``"cusolver"``: cuSOLVER's routine (getrf / getrs) for each matrix in turn on the current
  stream, with ONE workspace (queried once) for the whole batch. Wins for large matrices.
- ``"streams"``: the same cuSOLVER calls spread round robin over side streams, each with
  its own workspace, joined to the current stream by events. In between, where one matrix
  leaves most of the GPU idle, the matrices run side by side.

The choice reads ``vram.backends.cuda.preferred_linalg_library()`` at each call: "default"
follows the crossover tables below; "cublas" takes cuBLAS wherever it applies (square
matrices); "cusolver" never takes cuBLAS (cuSOLVER on one stream or over side streams, by
the table). Tests and the benchmark pin a plan with ``forced(...)``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..backends import cuda as _backend

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

PATHS = ("cublas", "cusolver", "streams")


@dataclass(frozen=True, slots=True)
class Crossover:
    """Where each way wins, for one dtype (batch >= 2; a single matrix takes cuSOLVER)."""

    cublas_max_n: int  # square n x n up to this: cuBLAS's batched routine
    streams_min_batch: int  # larger n, batches this large: spread over side streams
    streams: int  # side streams for the spread (fewer when the batch is smaller)
    getrf_algo: int | None = None  # cuSOLVER getrf: None the legacy API, 0/1 Xgetrf's ALG_0/1


# Note [LU crossovers]: fp32 lu_factor on an H100 (bench/linalg.py, ms per call, lower wins;
# ``python bench/linalg.py --suggest RESULT.json`` prints this table and the values below).
#
#   n x batch     cublas  cusolver  streams
#   (not measured yet: the H100 run of bench/linalg.py fills this in)
#
# Until then the values are estimates from the PyTorch timings that vram's issue 13 quotes:
# cuBLAS's batched LU takes 2.4 ms at 256x256 and 11.6 ms at 511x64, looped cuSOLVER
# 61.2 ms at 512x64 (~1 ms per 512 x 512 matrix, most of the GPU idle), so 8 side streams
# should overtake cuBLAS between n = 256 and 512. float64 and the complex types take
# float32's crossovers until they are measured.
LU_CROSSOVERS: dict[str, Crossover] = {
    "float32": Crossover(cublas_max_n=256, streams_min_batch=4, streams=8),
    "float64": Crossover(cublas_max_n=256, streams_min_batch=4, streams=8),
    "complex64": Crossover(cublas_max_n=256, streams_min_batch=4, streams=8),
    "complex128": Crossover(cublas_max_n=256, streams_min_batch=4, streams=8),
}

# Note [Solve crossovers]: fp32 lu_solve on an H100 (bench/linalg.py), 1 and 64 right-hand
# sides; getrsBatched for small n, cuSOLVER getrs above.
SOLVE_CROSSOVERS: dict[str, Crossover] = {
    "float32": Crossover(cublas_max_n=128, streams_min_batch=4, streams=8),
    "float64": Crossover(cublas_max_n=128, streams_min_batch=4, streams=8),
    "complex64": Crossover(cublas_max_n=128, streams_min_batch=4, streams=8),
    "complex128": Crossover(cublas_max_n=128, streams_min_batch=4, streams=8),
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


def _plan(table: dict[str, Crossover], m: int, n: int, batch: int, dtype: str) -> Plan:
    crossover = table[dtype]
    pinned = _forced.plan
    if pinned is not None:
        if pinned.path == "cublas" and m != n:
            return Plan("cusolver", 1, pinned.algo)
        return pinned
    preferred = _backend.preferred_linalg_library()
    square = m == n
    if square and batch >= 2 and preferred != "cusolver":
        if preferred == "cublas" or n <= crossover.cublas_max_n:
            return Plan("cublas")
    if batch >= crossover.streams_min_batch and crossover.streams > 1:
        return Plan("streams", min(crossover.streams, batch), crossover.getrf_algo)
    return Plan("cusolver", 1, crossover.getrf_algo)


def plan_lu(m: int, n: int, batch: int, dtype: str) -> Plan:
    """How an LU factorization of ``batch`` m x n matrices of ``dtype`` runs now."""
    return _plan(LU_CROSSOVERS, m, n, batch, dtype)


def plan_solve(n: int, nrhs: int, batch: int, dtype: str) -> Plan:
    """How an LU solve of ``batch`` n x n systems with ``nrhs`` right-hand sides runs now."""
    del nrhs  # the measured crossovers do not depend on it (see Note [Solve crossovers])
    return _plan(SOLVE_CROSSOVERS, n, n, batch, dtype)

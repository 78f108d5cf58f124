"""vram.linalg's cuSOLVER and cuBLAS calls (the cuda halves of ``_calls``'s declarations),
checked without a GPU: the simulated GPU's driver is made to answer the library calls and
queries with their cuda halves, whose libraries (``vram.driver._cusolver`` and ``_cublas``)
record what they are given. The kernels of linalg.cu and lu.cu still run their references on
the sim (so the pointer arrays the libraries are given hold what a GPU's would). What the
libraries compute, tests/gpu/test_linalg_gpu.py checks on a GPU."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from linalg_helpers import random

import vram
from vram._tensor import ndarray_view
from vram.driver import _cublas, _cusolver
from vram.driver._work import LibraryCall, Query
from vram.linalg import _calls, _dispatch, _libs

LWORK = 4096  # bytes the fake cuSOLVER asks for


class Recorder:
    """The library functions linalg's cuda halves call: each call recorded as (name, args)."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[str, tuple]] = []
        answers = {"getrf_buffer_size": LWORK, "xgetrf_buffer_size": (LWORK, 64), "handle": 77}
        for module, names in (
            (_cusolver, ("getrf_buffer_size", "xgetrf_buffer_size", "getrf", "getrs", "xgetrf",
                         "xgetrs")),
            (_cublas, ("handle", "use_device", "set_stream", "set_workspace", "set_math_mode",
                       "getrf_batched", "getrs_batched", "gemm_strided_batched_ex")),
        ):  # fmt: skip
            for name in names:
                monkeypatch.setattr(module, name, self._record(name, answers.get(name)))

    def _record(self, name: str, answer: object):
        def call(*args):
            self.calls.append((name, args))
            return answer

        return call

    def named(self, name: str) -> list[tuple]:
        return [args for called, args in self.calls if called == name]


@pytest.fixture
def libraries(monkeypatch, sim0):
    """linalg's library calls and queries on sim:0 through their cuda halves (recorded)."""
    recorder = Recorder(monkeypatch)
    sim = vram.sim.driver()
    prepare, ask = sim.prepare, sim.ask
    calls = {id(v) for v in vars(_calls).values() if isinstance(v, (LibraryCall, Query))}

    def cuda_prepare(device, launch):
        work = launch.work
        if id(work) in calls:
            values = launch.values
            return lambda stream, *args: work.cuda(sim, device, stream, *args, *values)
        return prepare(device, launch)

    def cuda_ask(device, query, *args):
        if id(query) in calls:
            return query.cuda(sim, device, *args)
        return ask(device, query, *args)

    monkeypatch.setattr(sim, "prepare", cuda_prepare)
    monkeypatch.setattr(sim, "ask", cuda_ask)
    _libs.PREPARED.clear()  # (launchers prepared before answer with the references)
    yield recorder
    _libs.PREPARED.clear()


def matrices(sim0, batch: int, n: int, dt=vram.float64) -> vram.Tensor:
    return vram.tensor(random((batch, n, n), dt, seed=n), device=sim0)


def test_cusolver_getrf_per_matrix_with_one_queried_workspace(libraries, sim0):
    A = matrices(sim0, 3, 5)
    with _dispatch.forced("cusolver"):
        LU, pivots, info = vram.linalg.lu_factor_ex(A)
    stream = vram.current_stream(sim0).cuda_stream
    base = LU.data_ptr()
    ((size_args),) = libraries.named("getrf_buffer_size")
    assert size_args == (0, stream, "float64", 5, 5, base, 5)
    calls = libraries.named("getrf")
    workspace = calls[0][7]
    assert calls == [
        (0, stream, "float64", 5, 5, base + 200 * i, 5, workspace, pivots.data_ptr() + 20 * i,
         info.data_ptr() + 4 * i)
        for i in range(3)
    ]  # fmt: skip
    assert workspace != 0


def test_side_streams_take_a_workspace_each(libraries, sim0):
    A = matrices(sim0, 4, 5)
    with _dispatch.forced("streams", streams=2):
        vram.linalg.lu_factor_ex(A)
    calls = libraries.named("getrf")
    by_stream = {}
    for args in calls:
        by_stream.setdefault(args[1], set()).add(args[7])
    assert len(by_stream) == 2 and all(len(spaces) == 1 for spaces in by_stream.values())
    assert len({next(iter(s)) for s in by_stream.values()}) == 2


def test_xgetrf_turns_its_int64_pivots_into_pytorchs(libraries, sim0):
    A = matrices(sim0, 2, 6)
    with _dispatch.forced("cusolver", algo=1):
        LU, pivots, info = vram.linalg.lu_factor_ex(A)
    ((size_args),) = libraries.named("xgetrf_buffer_size")
    assert size_args[2:] == ("float64", 6, 6, LU.data_ptr(), 6, 1)
    calls = libraries.named("xgetrf")
    assert [args[5] for args in calls] == [LU.data_ptr() + 288 * i for i in range(2)]
    pivots64 = calls[0][7]
    assert [args[7] for args in calls] == [pivots64 + 48 * i for i in range(2)]
    assert [args[9] for args in calls] == [LWORK] * 2  # the workspace's bytes
    assert [args[11] for args in calls] == [64] * 2  # the host workspace's
    assert [args[12] for args in calls] == [info.data_ptr() + 4 * i for i in range(2)]
    assert [args[13] for args in calls] == [1, 1]


def test_cublas_getrf_batched_reads_a_pointer_array_the_device_made(libraries, sim0):
    A = matrices(sim0, 3, 4, vram.complex64)
    with _dispatch.forced("cublas"):
        LU, pivots, info = vram.linalg.lu_factor_ex(A)
    ((handle, dtype, n, arrays, lda, piv, infos, batch),) = libraries.named("getrf_batched")
    assert (handle, dtype, n, lda, piv, infos, batch) == (
        77, "complex64", 4, 4, pivots.data_ptr(), info.data_ptr(), 3,
    )  # fmt: skip
    vram.synchronize(sim0)
    view = ndarray_view(vram.sim.driver().view, arrays, (3,), (8,), np.dtype(np.uint64))
    assert view.tolist() == [LU.data_ptr() + 128 * i for i in range(3)]
    (set_stream,) = libraries.named("set_stream")
    (set_workspace,) = libraries.named("set_workspace")
    assert set_stream == (77, vram.current_stream(sim0).cuda_stream)
    assert set_workspace[0] == 77 and set_workspace[1] != 0 and set_workspace[2] > 0


def test_solves_call_getrs_per_matrix_and_getrs_batched(libraries, sim0):
    LU = vram.tensor(np.tile(np.eye(4), (2, 1, 1)), device=sim0).transpose(-2, -1).contiguous()
    LU = LU.transpose(-2, -1)  # packed column-major factors
    pivots = vram.tensor(np.tile(np.arange(1, 5, dtype=np.int32), (2, 1)), device=sim0)
    B = vram.tensor(random((2, 4, 3), vram.float64, seed=1), device=sim0)
    with _dispatch.forced("cusolver"):
        X = vram.linalg.lu_solve(LU, pivots, B, adjoint=True)
    calls = libraries.named("getrs")
    assert [args[2:8] for args in calls] == [("float64", 1, 4, 3, LU.data_ptr() + 128 * i, 4)
                                             for i in range(2)]  # fmt: skip
    assert [args[8] for args in calls] == [pivots.data_ptr() + 16 * i for i in range(2)]
    assert [args[9:11] for args in calls] == [(X.data_ptr() + 96 * i, 4) for i in range(2)]
    with _dispatch.forced("cublas"):
        X = vram.linalg.lu_solve(LU, pivots, B)
    ((handle, dtype, trans, n, nrhs, a, lda, piv, b, ldb, batch),) = libraries.named(
        "getrs_batched"
    )
    assert (handle, dtype, trans, n, nrhs, lda, piv, ldb, batch) == (
        77, "float64", 0, 4, 3, 4, pivots.data_ptr(), 4, 2,
    )  # fmt: skip
    vram.synchronize(sim0)
    view = vram.sim.driver().view
    ptrs = ndarray_view(view, a, (2,), (8,), np.dtype(np.uint64)).tolist()
    assert ptrs == [LU.data_ptr() + 128 * i for i in range(2)]
    ptrs = ndarray_view(view, b, (2,), (8,), np.dtype(np.uint64)).tolist()
    assert ptrs == [X.data_ptr() + 96 * i for i in range(2)]


def test_the_blocked_lus_update_is_one_full_precision_gemm_a_step(libraries, sim0):
    A = vram.tensor(random((2, 70, 70), vram.float32, seed=4), device=sim0)
    with _dispatch.forced("blocked"):
        LU, _, _ = vram.linalg.lu_factor_ex(A)
    gemms = libraries.named("gemm_strided_batched_ex")
    assert gemms, "no update GEMM"
    args = gemms[0]
    handle, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch = args[:18]
    assert (handle, ta, tb, lda, ldb, ldc, sa, sb, sc, batch) == (
        77, _cublas.OP_N, _cublas.OP_N, 70, 70, 70, 4900, 4900, 4900, 2,
    )  # fmt: skip
    jb = k
    base = LU.data_ptr()
    assert (m, n) == (70 - jb, 70 - jb)
    assert (a, b, c) == (base + 4 * jb, base + 4 * (jb * 70), base + 4 * (jb + jb * 70))
    assert np.frombuffer(ctypes.string_at(alpha, 8), np.float32).tolist() == [-1.0, 1.0]
    assert beta == alpha + 4
    assert args[18:] == (_cublas.DATA_TYPES["float32"], _cublas.COMPUTE_TYPES["32F"])
    assert ("set_math_mode", (77, _cublas.DEFAULT_MATH)) in libraries.calls

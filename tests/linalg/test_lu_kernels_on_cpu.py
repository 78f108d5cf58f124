"""The blocked LU's CUDA kernels (kernels/lu.cu) run on the CPU, driven by ``_blocked``'s own
loop, against LAPACK's semantics (``_reference``): where there is no GPU, this checks the
kernels' indexing, pivot search, barriers and argument structs (``_calls``'s packing).

tests/linalg/emulation/ builds them with a C++20 compiler and a small CUDA shim (each CUDA
thread a std::thread, __syncthreads a barrier); the test is skipped without a compiler.
The panel configurations here are small ones (one and two warps, 1 to 4 rows per thread,
panels 8 to 32 wide) so that matrices of 40 to 120 rows take many panels."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from vram.linalg import _blocked, _reference
from vram.linalg._blocked import PanelConfig
from vram.linalg._calls import PANEL_FIELDS as _PANEL_ARGS
from vram.linalg._calls import SOLVE_FIELDS as _SOLVE_ARGS
from vram.linalg._calls import SWAP_FIELDS as _SWAP_ARGS

SOURCE = Path(__file__).parent / "emulation" / "lu_kernels.cpp"
CODES = {"float32": 0, "float64": 1}
NP = {"float32": np.float32, "float64": np.float64}
TOL = {"float32": 2e-4, "float64": 1e-11}

TABLES = {  # (most rows, config): the panels get wider as the matrix shrinks
    "narrow": ((128, PanelConfig(32, 4, 8)),),
    "mixed": (
        (32, PanelConfig(32, 1, 32)),
        (64, PanelConfig(64, 1, 32)),
        (128, PanelConfig(64, 2, 16)),
    ),  # fmt: skip
    "two warps": ((64, PanelConfig(64, 1, 32)), (128, PanelConfig(64, 2, 8))),
    # tall panels: 32 columns, 8, 4 or 2 of them in registers at a time
    "tall": (
        (32, PanelConfig(32, 1, 32)),
        (64, PanelConfig(64, 1, 32, 1, 2)),
        (128, PanelConfig(32, 4, 32, 1, 4)),
    ),
    "tall wide": ((128, PanelConfig(64, 2, 32, 1, 8)),),
}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    built = tmp_path_factory.mktemp("lu_kernels") / "lu_kernels.so"
    command = [compiler, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(built),
               str(SOURCE)]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        if "c++20" in run.stderr or "barrier" in run.stderr:
            pytest.skip(f"the compiler has no C++20 <barrier>: {run.stderr[:200]}")
        raise AssertionError(run.stderr)
    return ctypes.CDLL(str(built))


class CpuLibs:
    """``_blocked``'s steps on host memory: the kernels through the emulation, the GEMM in
    NumPy (cuBLAS's part on a GPU). ``lu`` is the one array the factors live in."""

    def __init__(self, kernels, lu: np.ndarray | None = None, multiprocessors: int = 132) -> None:
        self.kernels = kernels
        self.lu = lu
        self.multiprocessors = multiprocessors  # (an H100's): picks swap_trsm's tiles

    def lu_panel(self, s, dtype, config, lu, stride, m, batch, source, k0, jb, pivots, k, info,
                 pivot, update=0, failed=0):  # fmt: skip
        src, src_batch, src_row, src_col = source
        args = _PANEL_ARGS.pack(lu, stride, src, src_batch, src_row, src_col, pivots, k,
                                info, m, k0, jb, int(pivot), update, failed)  # fmt: skip
        threads, rows, width, blocks, sub = config
        assert blocks == 1, "the emulation runs one block at a time: no clusters"
        done = self.kernels.emu_panel(CODES[dtype], threads, rows, width, sub,
                                      ctypes.c_longlong(batch),
                                      ctypes.c_char_p(args))  # fmt: skip
        assert done == 0, f"no emulated panel {config}"

    def lu_swap_trsm(self, s, dtype, lu, stride, m, n, batch, k0, jb, pivots, k, pivot,
                     spans=None):  # fmt: skip
        (c0, c1), (d0, d1) = spans or _blocked.outside(k0, jb, n)
        args = _SWAP_ARGS.pack(lu, stride, pivots, k, m, k0, jb, int(pivot), c0, c1, d0, d1)
        count = c1 - c0 + d1 - d0
        warps, columns = _blocked.swap_tile(batch, count, self.multiprocessors)
        tiles = -(-count // columns)
        done = self.kernels.emu_swap_trsm(
            CODES[dtype], _blocked.SWAP_WIDTH, warps, columns,
            ctypes.c_longlong(batch), ctypes.c_longlong(tiles), ctypes.c_char_p(args),
        )  # fmt: skip
        assert done == 0

    def lu_update_context(self, s, dtype):
        return None

    def lu_update(self, context, dtype, lu, stride, m, n, batch, k0, jb, columns=None):
        assert lu == self.lu.ctypes.data
        a = np.swapaxes(self.lu, 1, 2)  # (batch, m, n) views of the column-major factors
        rest = k0 + jb
        start, stop = columns or (rest, n)
        a[:, rest:, start:stop] -= a[:, rest:, k0:rest] @ a[:, k0:rest, start:stop]

    def lu_solve(self, s, dtype, transposed, n, nrhs, batch, lu, pivots, source, x):
        b, b_batch, b_row, b_col = source
        rhs = _blocked.solve_tile(n, nrhs)
        args = _SOLVE_ARGS.pack(lu, n * n, pivots, n, b, b_batch, b_row, b_col, x, n * nrhs,
                                n, nrhs, int(transposed))  # fmt: skip
        tiles = ctypes.c_longlong(-(-nrhs // rhs))
        pointer = ctypes.c_char_p(args)
        if _blocked.solve_warp(n, nrhs):  # a warp per matrix
            done = self.kernels.emu_getrs_warp(CODES[dtype], rhs, ctypes.c_longlong(batch),
                                               tiles, pointer)  # fmt: skip
        elif _blocked.solve_columns(n, nrhs):  # a thread per right-hand side
            done = self.kernels.emu_getrs_columns(CODES[dtype], rhs, ctypes.c_longlong(batch),
                                                  tiles, pointer)  # fmt: skip
        else:
            threads = -(-n // 32) * 32
            done = self.kernels.emu_getrs(CODES[dtype], rhs, threads, ctypes.c_longlong(batch),
                                          tiles, pointer)  # fmt: skip
        assert done == 0


class HostStream:
    """The emulation runs each kernel when it is called: a stream's order is the host's, so
    waiting for an event has nothing to wait for."""

    def wait_event(self, event) -> None:
        assert event.recorded, "a wait for an event never recorded"


class HostEvent:
    recorded = False

    def record(self, stream) -> None:
        self.recorded = True


def factor_on_cpu(
    kernels,
    a: np.ndarray,
    pivot: bool = True,
    in_place_read: bool = False,
    ahead: bool = False,
    failed: int = 0,
):
    """(LU (batch, m, n), pivots, info) of ``a`` by the kernels, as _blocked runs them;
    ``ahead``: with the look-ahead's order of steps; ``failed``: the zero-pivot flag's
    address."""
    batch, m, n = a.shape
    dtype = a.dtype.name
    k = min(m, n)
    lu = np.zeros((batch, n, m), a.dtype)  # column-major matrices
    pivots = np.zeros((batch, k), np.int32)
    info = np.full(batch, -7, np.int32)
    libs = CpuLibs(kernels, lu)
    source = None
    if in_place_read:
        item = a.itemsize
        source = (a.ctypes.data, *(step // item for step in a.strides))
    else:
        lu[...] = np.swapaxes(a, 1, 2)
    events = _blocked.Ahead(HostStream(), *(HostEvent() for _ in range(3))) if ahead else None
    _blocked.factor(libs, HostStream(), dtype, m, n, batch, lu.ctypes.data, pivots.ctypes.data,
                    info.ctypes.data, pivot, source, ahead=events, failed=failed)  # fmt: skip
    return np.swapaxes(lu, 1, 2), pivots, info


def use(monkeypatch, table_name: str) -> None:
    table = TABLES[table_name]
    for dtype in CODES:
        monkeypatch.setitem(_blocked.PANELS, dtype, table)
        monkeypatch.setitem(_blocked.MAX_ROWS, dtype, table[-1][0])


def expected(a: np.ndarray, pivot: bool = True):
    work = a.astype(np.float64)
    ipiv, info = _reference.getrf(work, pivot=pivot)
    return work, ipiv, info


@pytest.mark.parametrize(
    "table, ahead",
    [*((table, False) for table in TABLES), ("mixed", True)],
    ids=[*TABLES, "mixed, looking ahead"],
)
@pytest.mark.parametrize("shape", [(2, 100, 100), (2, 120, 40), (1, 40, 90)], ids=str)
def test_factors_match_lapack(kernels, monkeypatch, table, shape, ahead):
    """``ahead``: the steps in the look-ahead's order (the next panel's columns first),
    with panels of 32 then 16 columns."""
    use(monkeypatch, table)
    a = np.random.default_rng(sum(shape)).standard_normal(shape)
    lu, pivots, info = factor_on_cpu(kernels, a, ahead=ahead)
    want_lu, want_pivots, want_info = expected(a)
    np.testing.assert_array_equal(pivots, want_pivots)
    np.testing.assert_array_equal(info, want_info)
    np.testing.assert_allclose(lu, want_lu, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("table", list(TABLES))
def test_a_zero_pivot_raises_the_flag(kernels, monkeypatch, table):
    """record_info's flag: 1 after a panel that meets a zero pivot (here in a later panel's
    columns), untouched without one (check_errors then searches nothing)."""
    use(monkeypatch, table)
    a = np.random.default_rng(3).standard_normal((3, 48, 48))
    flag = np.zeros(1, np.int32)
    factor_on_cpu(kernels, a, failed=flag.ctypes.data)
    assert flag[0] == 0
    a[1, :, 40] = 0  # U[41, 41] of matrix 1 is zero
    _, _, info = factor_on_cpu(kernels, a, failed=flag.ctypes.data)
    assert info.tolist() == [0, 41, 0] and flag[0] == 1


@pytest.mark.parametrize("split", [False, True], ids=["whole", "in two launches"])
@pytest.mark.parametrize("multiprocessors", [1, 132], ids=["wide tiles", "narrow tiles"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_swap_trsm_composes_repeated_interchanges(kernels, dtype, multiprocessors, split):
    """One swap_trsm step alone (panel rows 20..51 of 80 x 110 matrices, columns left and
    right of it, three wide tiles or ten narrow ones) with interchanges LAPACK allows but
    random matrices rarely make: one row below the panel taken again and again, and a mix of
    rows inside the panel, rows below it and no interchange: the same as applying them one
    by one, then L11^-1. ``split``: as the look-ahead runs it, the 8 columns right of the
    panel by one launch, the other columns (left and right of them) by another."""
    batch, m, n, k0, jb = 3, 80, 110, 20, 32
    k = min(m, n)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((batch, m, n))
    a[:, k0 : k0 + jb, k0 : k0 + jb] *= 0.1  # L11: well conditioned
    ipiv = np.tile(np.arange(1, k + 1, dtype=np.int32), (batch, 1))
    panel = np.arange(k0, k0 + jb)
    ipiv[0, k0 : k0 + jb] = 61  # row 60 again and again
    ipiv[1, k0 : k0 + jb] = rng.integers(panel, m) + 1  # anywhere at or below
    ipiv[2, k0 : k0 + jb] = np.where(panel % 3 == 0, panel + 1, rng.integers(panel, k0 + jb) + 1)
    lu = np.ascontiguousarray(np.swapaxes(a, 1, 2)).astype(dtype)  # column-major
    libs = CpuLibs(kernels, lu, multiprocessors)
    assert (
        _blocked.swap_tile(batch, n - jb, multiprocessors)
        == _blocked.SWAP_TILES[0 if multiprocessors == 1 else 1]
    )
    after = k0 + jb
    parts = [((0, k0), (after + 8, n)), ((after, after + 8), (n, n))] if split else [None]
    for spans in parts:
        libs.lu_swap_trsm(None, dtype, lu.ctypes.data, m * n, m, n, batch, k0, jb,
                          ipiv.ctypes.data, k, True, spans)  # fmt: skip

    want = a.astype(dtype).astype(np.float64)
    others = np.r_[0:k0, k0 + jb : n]
    block = np.array(want[:, k0:, others])
    for i in range(jb):  # LAPACK's interchanges, one by one
        target = ipiv[:, k0 + i] - 1 - k0
        kept = block[:, i].copy()
        block[:, i] = block[np.arange(batch), target]
        block[np.arange(batch), target] = kept
    lower = np.tril(want[:, k0 : k0 + jb, k0 : k0 + jb], -1) + np.eye(jb)
    right = others >= k0 + jb
    block[:, :jb, right] = np.linalg.solve(lower, block[:, :jb, right])
    want[:, k0:, others] = block
    np.testing.assert_allclose(np.swapaxes(lu, 1, 2), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("layout", ["row-major", "column-major", "strided"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_panel_reads_the_input_in_place(kernels, monkeypatch, dtype, layout):
    """A batch of 30 x 30 matrices (one 32-wide panel), read where they lie: row-major
    (``panel_warp`` reads rows through shared memory), column-major, or neither (every
    second column of a wider array)."""
    use(monkeypatch, "mixed")
    a = np.random.default_rng(1).standard_normal((3, 30, 30)).astype(dtype)
    if layout == "column-major":
        a = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, 1, 2)), 1, 2)
    elif layout == "strided":
        wide = np.zeros((3, 30, 60), dtype)
        wide[:, :, ::2] = a
        a = wide[:, :, ::2]
    kept = a.copy()
    lu, pivots, info = factor_on_cpu(kernels, a, in_place_read=True)
    np.testing.assert_array_equal(a, kept)
    want_lu, want_pivots, want_info = expected(a)
    np.testing.assert_array_equal(pivots, want_pivots)
    np.testing.assert_array_equal(info, 0)
    np.testing.assert_allclose(lu, want_lu, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize(
    "table, ahead",
    [("narrow", False), ("mixed", False), ("tall", False), ("narrow", True)],
    ids=["narrow", "mixed", "tall", "narrow, looking ahead"],
)
def test_singular_matrices_and_ties(kernels, monkeypatch, table, ahead):
    """Zero pivots in a later panel and in the first column: info is the first, the
    factorization runs to the end; equal magnitudes pick the first row (LAPACK's i?amax).
    ``ahead``: also every interchange of a step composed in the next panel's kernel."""
    use(monkeypatch, table)
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 50, 50))
    a[0, :, 20] = 0  # stays 0 through every update: U[20, 20] = 0, in the third panel
    a[1, :, 0] = 0
    a[2] = 0
    a[3] = np.round(rng.standard_normal((50, 50)))  # many ties among small integers
    lu, pivots, info = factor_on_cpu(kernels, a, ahead=ahead)
    want_lu, want_pivots, want_info = expected(a)
    np.testing.assert_array_equal(info, [21, 1, 1, 0])
    np.testing.assert_array_equal(info, want_info)
    np.testing.assert_array_equal(pivots, want_pivots)
    np.testing.assert_allclose(lu, want_lu, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "table, ahead",
    [("two warps", False), ("mixed", False), ("tall wide", False), ("mixed", True)],
    ids=["two warps", "mixed", "tall wide", "mixed, looking ahead"],
)
def test_without_pivoting(kernels, monkeypatch, table, ahead):
    use(monkeypatch, table)
    a = np.random.default_rng(3).standard_normal((2, 70, 70)) + 30 * np.eye(70)
    lu, pivots, info = factor_on_cpu(kernels, a, pivot=False, ahead=ahead)
    want_lu, _, want_info = expected(a, pivot=False)
    np.testing.assert_array_equal(pivots, 0)  # untouched: vram writes 1..k after
    np.testing.assert_array_equal(info, want_info)
    np.testing.assert_allclose(lu, want_lu, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("nrhs", [1, 5, 11, 40])  # one; 8 a block: one tile, two, five
@pytest.mark.parametrize("n", [45, 70, 32, 20])  # a thread a row; a warp; a thread a column
def test_solve_matches_lapack(kernels, monkeypatch, transposed, nrhs, n):
    """X from the factors, B read row-major where it lies (or X itself: in place); over 32
    rows a thread a row, in chunks of 16 (one right-hand side) or 8 rows, a partial one
    last (45 and 70 rows: two and three warps); to 32 rows, up to 8 right-hand sides take
    a warp a matrix (``getrs_warp``), more a thread each (``getrs_columns``)."""
    use(monkeypatch, "mixed")
    rng = np.random.default_rng(nrhs)
    batch = 2
    a = rng.standard_normal((batch, n, n))
    lu, pivots, _ = factor_on_cpu(kernels, a)
    factors = np.ascontiguousarray(np.swapaxes(lu, 1, 2))  # column-major, packed
    b = rng.standard_normal((batch, n, nrhs))
    x = np.zeros((batch, nrhs, n))  # column-major n x nrhs
    libs = CpuLibs(kernels)
    source = (b.ctypes.data, n * nrhs, nrhs, 1)
    _blocked.solve(libs, None, "float64", transposed, n, nrhs, batch, factors.ctypes.data,
                   pivots.ctypes.data, source, x.ctypes.data)  # fmt: skip
    op = np.swapaxes(a, 1, 2) if transposed else a
    np.testing.assert_allclose(op @ np.swapaxes(x, 1, 2), b, rtol=1e-9, atol=1e-9)
    x[...] = np.swapaxes(b, 1, 2)  # in place: B is X
    _blocked.solve(libs, None, "float64", transposed, n, nrhs, batch, factors.ctypes.data,
                   pivots.ctypes.data, (x.ctypes.data, n * nrhs, 1, n), x.ctypes.data)  # fmt: skip
    np.testing.assert_allclose(op @ np.swapaxes(x, 1, 2), b, rtol=1e-9, atol=1e-9)

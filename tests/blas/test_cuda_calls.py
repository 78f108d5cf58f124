"""The GEMM's cuBLAS and cuBLASLt calls (the cuda halves of ``_ops``'s declarations),
checked without a GPU.

``vram.driver._cublas`` is replaced by a column-major reference BLAS over the simulated
GPU's memory (``ReferenceBlas``): it reads the matrices where the descriptors and leading
dimensions say they are, applies the epilogue and writes D. The simulated GPU's driver is
made to answer the GEMM's declarations with their cuda halves (``cuda_halves``), so the
same plans run on sim tensors, and every argument the cuda halves build (the operand swap,
operations, leading dimensions, batch strides, epilogue, bias pointer, alpha and beta, the
staging of odd layouts, TunableOp's candidates) is checked by the product it must produce.
What this cannot check, the library itself, tests/gpu/test_blas_gpu.py checks on a GPU.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

import numpy as np
import pytest

import vram
from vram._tensor import ndarray_view
from vram.blas import _functions, _ops, _tunable
from vram.driver import _cublas
from vram.driver._work import LibraryCall

_DTYPES = {code: name for name, code in _cublas.DATA_TYPES.items()}
_EPILOGUES = {code: name for name, code in _cublas.EPILOGUES.items()}


class _PointerAttribute:
    """The reference's _cublas.PointerAttribute: ``set`` records the value in the desc."""

    def __init__(self, desc: dict, name: str) -> None:
        self.desc, self.name = desc, name

    def set(self, pointer: int) -> None:
        self.desc[self.name] = pointer


class ReferenceBlas:
    """The subset of ``_cublas`` that ``_cuda`` uses, computed with NumPy in fp64."""

    def __init__(self, algorithms: int = 3) -> None:
        self.ids = itertools.count(1)
        self.descs: dict[int, dict] = {}
        self.layouts: dict[int, tuple] = {}
        self.algorithms = algorithms
        self.calls: list[tuple[str, dict]] = []  # (function, what it was given)
        self.streams: dict[int, int] = {}
        self.math: dict[int, int] = {}
        self.workspace_requests: list[tuple[int, str]] = []

    def install(self, monkeypatch) -> None:
        for name in (
            "use_device", "handle", "lt_handle", "set_stream", "set_workspace", "set_math_mode",
            "gemm_ex", "gemm_strided_batched_ex", "matmul_desc", "set_matmul_desc",
            "PointerAttribute", "matrix_layout", "matmul_preference", "heuristics", "lt_matmul",
            "destroy_matmul_desc", "destroy_matrix_layout", "versions",
        ):  # fmt: skip
            monkeypatch.setattr(_cublas, name, getattr(self, name))
        monkeypatch.setattr(vram.memory, "get_workspace", self.get_workspace, raising=False)
        monkeypatch.setattr(
            _ops,  # (the name a product's plan calls)
            "current_workspace",
            lambda nbytes, library, device, handle: self.get_workspace(
                nbytes, library=library, device=device
            ),
        )
        cuda_halves(monkeypatch)

    # ---- handles and settings
    def use_device(self, device: int) -> None:
        pass

    def handle(self, device: int) -> int:
        return 1000 + device

    def lt_handle(self, device: int) -> int:
        return 2000 + device

    def set_stream(self, handle: int, stream: int) -> None:
        self.streams[handle] = stream

    def set_workspace(self, handle: int, ptr: int, nbytes: int) -> None:
        assert ptr and nbytes > 0

    def set_math_mode(self, handle: int, mode: int) -> None:
        self.math[handle] = mode

    def get_workspace(self, nbytes, *, library, device=None, stream=None) -> int:
        self.workspace_requests.append((nbytes, library))
        buffer = vram.empty(
            nbytes, dtype=vram.uint8, device=stream.device if device is None else device
        )
        self._keep = buffer
        return buffer.data_ptr()

    def versions(self) -> dict[str, str]:
        return {"CUBLAS_VERSION": "ref", "CUBLASLT_VERSION": "ref"}

    # ---- cuBLASLt objects
    def matmul_desc(self, compute: int, scale: int, transa: int, transb: int) -> int:
        desc = next(self.ids)
        self.descs[desc] = {"compute": compute, "scale": scale, "TRANSA": transa, "TRANSB": transb}
        return desc

    def set_matmul_desc(self, desc: int, name: str, value: int) -> None:
        self.descs[desc][name] = value

    def PointerAttribute(self, desc: int, name: str) -> Any:  # noqa: N802 (_cublas's class)
        return _PointerAttribute(self.descs[desc], name)

    def matrix_layout(self, data, rows, cols, ld, batch=1, stride=0) -> int:
        assert ld >= max(rows, 1), "cuBLASLt requires ld >= rows"
        layout = next(self.ids)
        self.layouts[layout] = (data, rows, cols, ld, batch, stride)
        return layout

    def matmul_preference(self, max_workspace, alignments, reduced_precision) -> int:
        self.preference = (max_workspace, alignments, reduced_precision)
        return next(self.ids)

    def heuristics(self, lt, desc, a, b, c, d, pref, count):
        found = []
        for i in range(min(count, self.algorithms)):
            algo = np.zeros(1, dtype=np.uint64)
            algo[0] = 100 + i
            found.append((algo, 4096 if i == 1 else 0))
        return found

    def destroy_matmul_desc(self, desc: int) -> None:
        pass

    def destroy_matrix_layout(self, layout: int) -> None:
        pass

    # ---- the products
    def _matrix(self, ptr: int, layout: tuple) -> np.ndarray:
        data, rows, cols, ld, batch, stride = layout
        dt = np.dtype(getattr(vram, _DTYPES[data]).np)
        item = dt.itemsize
        sim = vram.sim.driver()
        return ndarray_view(
            sim.view, ptr, (batch, rows, cols), (stride * item, item, ld * item), dt
        )

    @staticmethod
    def _scalars(ptr: int, scale: int) -> tuple[float, float]:
        dt = np.float64 if _DTYPES[scale] == "float64" else np.float32
        raw = (ctypes.c_char * (2 * np.dtype(dt).itemsize)).from_address(ptr)
        alpha, beta = np.frombuffer(raw, dtype=dt)
        return float(alpha), float(beta)

    def lt_matmul(self, lt, desc, alpha, a, la, b, lb, beta, c, lc, d, ld, algo, ws, wsb, stream):
        info = self.descs[desc]
        assert lc == ld  # (C is D, or a residual of D's layout)
        assert (ws != 0) == (wsb > 0)
        al, be = self._scalars(alpha, info["scale"])
        A = self._matrix(a, self.layouts[la]).astype(np.float64)
        B = self._matrix(b, self.layouts[lb]).astype(np.float64)
        if info["TRANSA"]:
            A = A.transpose(0, 2, 1)
        if info["TRANSB"]:
            B = B.transpose(0, 2, 1)
        D = self._matrix(d, self.layouts[ld])
        result = al * np.matmul(A, B)
        if be != 0:
            result += be * self._matrix(c, self.layouts[lc]).astype(np.float64)
        epilogue = _EPILOGUES[info.get("EPILOGUE", _cublas.EPILOGUES["DEFAULT"])]
        if "BIAS" in epilogue:
            rows = D.shape[1]
            dt = np.dtype(getattr(vram, _DTYPES[info["BIAS_DATA_TYPE"]]).np)
            vector = ndarray_view(
                vram.sim.driver().view, info["BIAS_POINTER"], (rows,), (dt.itemsize,), dt
            )
            result += vector.astype(np.float64)[None, :, None]
        result = _act(result, 1 if "RELU" in epilogue else 2 if "GELU" in epilogue else 0)
        D[...] = result.astype(D.dtype)
        algo = int(np.frombuffer(ctypes.string_at(algo, 8), np.uint64)[0])
        residual = {} if c == d else {"C": c}  # (a residual's C: the input where it is)
        self.calls.append(("lt", {**info, "algo": algo, "workspace_bytes": wsb, **residual}))

    def _gemm(
        self,
        handle,
        ta,
        tb,
        m,
        n,
        k,
        alpha,
        a,
        lda,
        sa,
        b,
        ldb,
        sb,
        beta,
        c,
        ldc,
        sc,
        batch,
        data,
        compute,
    ):
        scale = _cublas.DATA_TYPES["float64" if _DTYPES[data] == "float64" else "float32"]
        al, be = self._scalars(alpha, scale)
        la = (data, *((m, k) if ta == 0 else (k, m)), lda, batch, sa)
        lb = (data, *((k, n) if tb == 0 else (n, k)), ldb, batch, sb)
        A = self._matrix(a, la).astype(np.float64)
        B = self._matrix(b, lb).astype(np.float64)
        A = A.transpose(0, 2, 1) if ta else A
        B = B.transpose(0, 2, 1) if tb else B
        C = self._matrix(c, (data, m, n, ldc, batch, sc))
        result = al * np.matmul(A, B) + (be * C.astype(np.float64) if be != 0 else 0)
        C[...] = result.astype(C.dtype)
        self.calls.append(
            ("cublas", {"compute": compute, "math": self.math.get(handle), "batch": batch})
        )

    def gemm_ex(self, handle, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, data, compute):
        self._gemm(
            handle, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1, data, compute
        )

    def gemm_strided_batched_ex(
        self,
        handle,
        ta,
        tb,
        m,
        n,
        k,
        alpha,
        a,
        lda,
        sa,
        b,
        ldb,
        sb,
        beta,
        c,
        ldc,
        sc,
        batch,
        data,
        compute,
    ):
        self._gemm(
            handle,
            ta,
            tb,
            m,
            n,
            k,
            alpha,
            a,
            lda,
            sa,
            b,
            ldb,
            sb,
            beta,
            c,
            ldc,
            sc,
            batch,
            data,
            compute,
        )


def cuda_halves(monkeypatch) -> None:
    """The simulated GPU's driver answers the GEMM's declarations with their cuda halves
    (over its own memory); every other kernel runs its reference, as on sim."""
    sim = vram.sim.driver()
    prepare, ask = sim.prepare, sim.ask
    queries = (_ops.GEMM_PLAN, _ops.GEMM_CANDIDATES, _ops.GEMM_TIME, _ops.BLAS_LIBRARY)

    def cuda_prepare(device, launch):
        work = launch.work
        if isinstance(work, LibraryCall) and work is _ops.GEMM:
            values = launch.values
            return lambda stream, *args: work.cuda(sim, device, stream, *args, *values)
        return prepare(device, launch)

    def cuda_ask(device, query, *args):
        if query in queries:
            return query.cuda(sim, device, *args)
        return ask(device, query, *args)

    monkeypatch.setattr(sim, "prepare", cuda_prepare)
    monkeypatch.setattr(sim, "ask", cuda_ask)


def _act(x: np.ndarray, activation: int) -> np.ndarray:
    if activation == 1:
        return np.maximum(x, 0)
    if activation == 2:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return x


# ---- the tests -------------------------------------------------------------------------------


@pytest.fixture
def ref(monkeypatch, sim0, tmp_path):
    blas = ReferenceBlas()
    blas.install(monkeypatch)
    _ops.clear_plans()
    _functions.clear_plans()
    _tunable._reset()
    vram.cuda.tunable.write_file_on_exit(False)
    vram.cuda.tunable.set_filename(str(tmp_path / "tuned.csv"))
    matmul = vram.backends.cuda.matmul
    saved = {name: getattr(matmul, name) for name in type(matmul).__slots__}
    library = vram.backends.cuda.preferred_blas_library()
    yield blas
    for name, value in saved.items():
        setattr(matmul, name, value)
    vram.backends.cuda.preferred_blas_library(library)
    _ops.clear_plans()
    _functions.clear_plans()
    _tunable._reset()


def rand(shape, seed, dt=vram.float32):
    return vram.tensor(
        np.random.default_rng(seed).standard_normal(shape).astype(dt.np), device="sim:0"
    )


def run(out, a, b, bias=None, beta=0.0, alpha=1.0, activation=0, algo=-1):
    _ops.gemm(out, a, b, out if bias is None else bias, beta, alpha, activation, algo)
    return out


def expect(out, want, rtol=1e-6):
    got = out.numpy().astype(np.float64)
    scale = max(float(np.max(np.abs(want), initial=0)), 1e-30)
    assert float(np.max(np.abs(got - want), initial=0)) <= rtol * scale


def host(t):
    return t.numpy().astype(np.float64)


LAYOUTS = {
    "row-major": lambda: (rand((6, 5), 1), rand((5, 7), 2)),
    "a transposed": lambda: (rand((5, 6), 1).t(), rand((5, 7), 2)),
    "b transposed": lambda: (rand((6, 5), 1), rand((7, 5), 2).t()),
    "both transposed": lambda: (rand((5, 6), 1).t(), rand((7, 5), 2).t()),
    "a sliced": lambda: (rand((6, 12), 1)[:, ::2][:, :5], rand((5, 7), 2)),
    "b expanded": lambda: (rand((6, 5), 1), rand((1, 7), 2).expand(5, 7)),
    "vectors": lambda: (rand((1, 5), 1), rand((5, 1), 2)),
}
OUTS = {
    "contiguous": lambda m, n: vram.empty((m, n), device="sim:0"),
    "column-major": lambda m, n: vram.empty((n, m), device="sim:0").t(),
    "strided": lambda m, n: vram.zeros((2 * m, 2 * n), device="sim:0")[::2, ::2],
}


@pytest.mark.parametrize("library", ["cublaslt", "cublas"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("out_kind", list(OUTS))
def test_every_layout_computes_the_product(ref, library, layout, out_kind):
    vram.backends.cuda.preferred_blas_library(library)
    a, b = LAYOUTS[layout]()
    out = OUTS[out_kind](a.shape[0], b.shape[1])
    expect(run(out, a, b, alpha=0.5), 0.5 * host(a) @ host(b))
    kinds = {kind for kind, _ in ref.calls}
    assert kinds == {"lt" if library == "cublaslt" else "cublas"}


@pytest.mark.parametrize("library", ["cublaslt", "cublas"])
def test_batches_with_a_broadcast_operand_and_a_bias(ref, library):
    vram.backends.cuda.preferred_blas_library(library)
    a = rand((1, 4, 3), 3).expand(5, 4, 3)  # one matrix for every batch: stride 0
    b, bias = rand((5, 3, 2), 4), rand((4, 1), 5)
    out = vram.empty((5, 4, 2), device="sim:0")
    expect(run(out, a, b, bias, beta=2.0), 2 * host(bias) + host(a) @ host(b))
    assert ref.calls[-1][1].get("batch", 5) == 5


@pytest.mark.parametrize("library", ["cublaslt", "cublas"])
@pytest.mark.parametrize("activation", [0, 1, 2])
def test_a_bias_row_is_fused_into_cublaslts_epilogue(ref, library, activation):
    vram.backends.cuda.preferred_blas_library(library)
    a, b, bias = rand((6, 5), 6), rand((5, 7), 7), rand((7,), 8)
    out = vram.empty((6, 7), device="sim:0")
    expect(
        run(out, a, b, bias, beta=1.0, activation=activation),
        _act(host(bias) + host(a) @ host(b), activation),
    )
    kind, info = ref.calls[-1]
    assert kind == "lt"
    assert _EPILOGUES[info["EPILOGUE"]] == ("BIAS", "RELU_BIAS", "GELU_BIAS")[activation]
    assert info["BIAS_POINTER"] == bias.data_ptr()


def test_one_plan_follows_each_calls_bias_row(ref):
    vram.backends.cuda.preferred_blas_library("cublaslt")
    a, b = rand((6, 5), 12), rand((5, 7), 13)
    first, second = rand((7,), 14), rand((7,), 15)
    out = vram.empty((6, 7), device="sim:0")
    run(out, a, b, first, beta=1.0)
    descriptors = len(ref.descs)
    for bias in (second, first, first, second):  # the epilogue reads the pointer each call sets
        expect(run(out, a, b, bias, beta=1.0), host(bias) + host(a) @ host(b))
        assert ref.calls[-1][1]["BIAS_POINTER"] == bias.data_ptr()
    assert len(ref.descs) == descriptors  # (one plan: its descriptor updated, none made)


def test_a_full_bias_is_copied_into_out_and_activation_follows_cublas(ref):
    vram.backends.cuda.preferred_blas_library("cublas")
    a, b, bias = rand((6, 5), 9), rand((5, 7), 10), rand((6, 7), 11)
    out = vram.empty((6, 7), device="sim:0")
    expect(
        run(out, a, b, bias, beta=0.5, activation=1), _act(0.5 * host(bias) + host(a) @ host(b), 1)
    )
    assert [kind for kind, _ in ref.calls] == ["cublas"]  # (the activation: the pointwise op)
    vram.backends.cuda.preferred_blas_library("cublaslt")
    expect(
        run(out, a, b, bias, beta=0.5, activation=2), _act(0.5 * host(bias) + host(a) @ host(b), 2)
    )
    assert ref.calls[-1][0] == "lt" and _EPILOGUES[ref.calls[-1][1]["EPILOGUE"]] == "GELU"


@pytest.mark.parametrize("library", ["cublaslt", "cublas"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("beta", [1, 0.5])
def test_a_residual_and_a_bias_row_are_one_cublaslt_call(ref, library, activation, beta):
    vram.backends.cuda.preferred_blas_library(library)
    a, b, x, row = rand((6, 5), 17), rand((5, 7), 18), rand((6, 7), 19), rand((7,), 20)
    code = (None, "relu", "gelu").index(activation)
    want = _act(beta * host(x) + host(a) @ host(b) + host(row), code)
    for _ in range(3):  # the checked call, then the remembered plan's
        out = vram.addmm(x, a, b, beta=beta, activation=activation, bias=row)
        expect(out, want)
    assert [kind for kind, _ in ref.calls] == ["lt"] * 3  # (nothing else: no copy of x)
    info = ref.calls[-1][1]
    assert (info["C"], info["BIAS_POINTER"]) == (x.data_ptr(), row.data_ptr())
    assert _EPILOGUES[info["EPILOGUE"]] == ("BIAS", "RELU_BIAS", "GELU_BIAS")[code]


@pytest.mark.parametrize("activation", [None, "relu"])
def test_a_residual_of_another_layout_is_copied_and_its_row_added(ref, activation):
    a, b, x, row = rand((6, 5), 25), rand((5, 7), 26), rand((7, 6), 27).t(), rand((7,), 28)
    code = (None, "relu").index(activation)
    for _ in range(2):
        out = vram.addmm(x, a, b, activation=activation, bias=row)
        expect(out, _act(host(x) + host(a) @ host(b) + host(row), code))
    assert [kind for kind, _ in ref.calls] == ["lt"] * 2
    assert "C" not in ref.calls[-1][1]  # (x copied into out: C is out)


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_a_residual_without_a_fused_algorithm_is_copied_and_its_row_added(ref, activation):
    ref.algorithms = 0  # (cuBLASLt's heuristic finds nothing: cuBLAS, then the pointwise ops)
    a, b, x, row = rand((6, 5), 21), rand((5, 7), 22), rand((6, 7), 23), rand((7,), 24)
    code = (None, "relu", "gelu").index(activation)
    out = vram.addmm(x, a, b, beta=2.0, activation=activation, bias=row)
    expect(out, _act(2 * host(x) + host(a) @ host(b) + host(row), code))
    assert [kind for kind, _ in ref.calls] == ["cublas"]


def test_in_place_accumulation_reads_out(ref):
    a, b, c = rand((3, 4), 12), rand((4, 2), 13), rand((3, 2), 14)
    want = 3 * host(c) + host(a) @ host(b)
    expect(run(c, a, b, c, beta=3.0), want)


def test_plans_are_cached(ref):
    a, b = rand((6, 5), 15), rand((5, 7), 16)
    out = vram.empty((6, 7), device="sim:0")
    run(out, a, b)
    made = len(ref.descs)
    for _ in range(5):
        run(out, a, b)
    assert len(ref.descs) == made and len(ref.calls) == 6


def test_tf32_and_reduced_precision_follow_the_flags(ref):
    a, b = rand((6, 5), 17), rand((5, 7), 18)
    out = vram.empty((6, 7), device="sim:0")
    run(out, a, b)
    assert ref.calls[-1][1]["compute"] == _cublas.COMPUTE_TYPES["32F"]
    vram.backends.cuda.matmul.allow_tf32 = True
    run(out, a, b)
    assert ref.calls[-1][1]["compute"] == _cublas.COMPUTE_TYPES["32F_FAST_TF32"]
    vram.backends.cuda.preferred_blas_library("cublas")
    run(out, a, b)
    assert ref.calls[-1][1]["compute"] == _cublas.COMPUTE_TYPES["32F_FAST_TF32"]
    half_a, half_b = rand((6, 5), 19, vram.bfloat16), rand((5, 7), 20, vram.bfloat16)
    half_out = vram.empty((6, 7), dtype=vram.bfloat16, device="sim:0")
    vram.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    run(half_out, half_a, half_b)
    assert ref.calls[-1][1]["math"] == _cublas.DISALLOW_REDUCED_PRECISION_REDUCTION
    assert ref.calls[-1][1]["compute"] == _cublas.COMPUTE_TYPES["32F"]
    vram.backends.cuda.preferred_blas_library("cublaslt")
    run(half_out, half_a, half_b)
    assert ref.preference[2] is False  # no split-K reduction in bf16


def test_k_zero_makes_no_library_call(ref):
    bias = rand((3,), 21)
    out = vram.empty((2, 3), device="sim:0")
    run(out, vram.empty((2, 0), device="sim:0"), vram.empty((0, 3), device="sim:0"), bias, beta=2.0)
    expect(out, np.broadcast_to(2 * host(bias), (2, 3)))
    assert ref.calls == []


def test_workspace_only_for_algorithms_that_need_one(ref, monkeypatch):
    a, b = rand((6, 5), 22), rand((5, 7), 23)
    out = vram.empty((6, 7), device="sim:0")
    run(out, a, b)  # the heuristic's first algorithm needs none
    assert ref.workspace_requests == []
    run(out, a, b, algo=2)  # the second needs 4096 bytes: the stream's cuBLAS workspace
    size = vram.blas.cublas_workspace_size(9, 0)
    assert ref.workspace_requests == [(size, "cublas")]
    assert ref.calls[-1][1]["workspace_bytes"] == 4096
    expect(out, host(a) @ host(b))
    vram.backends.cuda.preferred_blas_library("cublas")
    run(out, a, b)
    assert ref.workspace_requests[-1] == (size, "cublas")
    monkeypatch.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0")
    vram.backends.cuda.preferred_blas_library("cublaslt")  # a new plan reads the variable
    run(out, a, b, algo=2)
    assert ref.workspace_requests[-1] == (vram.blas.cublaslt_workspace_size(9, 0), "cublaslt")
    assert ref.preference[0] == 1024 * 1024


def test_tunableop_on_the_gpu_path_rejects_a_wrong_candidate(ref, monkeypatch):
    original = ref.lt_matmul

    def wrong_second_algorithm(*args):
        original(*args)
        if ref.calls[-1][1]["algo"] == 101:  # candidate 2: the heuristic's second
            d, ld = args[10], args[11]
            ref._matrix(d, ref.layouts[ld])[...] += 1.0

    monkeypatch.setattr(_cublas, "lt_matmul", wrong_second_algorithm)
    vram.cuda.tunable.enable()
    a, b = rand((8, 16), 24), rand((16, 4), 25)
    out = vram.empty((8, 4), device="sim:0")
    expect(run(out, a, b), host(a) @ host(b))
    ((op, params, solution, ms),) = vram.cuda.tunable.get_results()
    assert (op, params) == ("GemmTunableOp_float_NN", "nn_4_8_16_ld_4_16_4")
    assert solution in ("Default", "Gemm_Cublaslt_NN_0", "Gemm_Cublaslt_NN_2")
    assert ms > 0
    used = {info.get("algo") for kind, info in ref.calls if kind == "lt"}
    assert 101 in used  # the wrong candidate was tried...
    ref.calls.clear()
    expect(run(out, a, b), host(a) @ host(b))  # ...and never chosen
    assert ref.calls[-1][1].get("algo") != 101


def test_an_epilogue_cublaslt_cannot_run_falls_back_to_the_unfused_product(ref, monkeypatch):
    original = ref.heuristics

    def no_bias_epilogues(lt, desc, *rest):
        if "BIAS" in _EPILOGUES[ref.descs[desc].get("EPILOGUE", 1)]:
            raise vram.CudaError("cublasLtMatmulAlgoGetHeuristic", "CUBLAS_STATUS_NOT_SUPPORTED")
        return original(lt, desc, *rest)

    monkeypatch.setattr(_cublas, "heuristics", no_bias_epilogues)
    a, b, bias = rand((6, 5), 26), rand((5, 7), 27), rand((7,), 28)
    out = vram.empty((6, 7), device="sim:0")
    want = _act(host(bias) + host(a) @ host(b), 1)
    expect(run(out, a, b, bias, beta=1.0, activation=1), want)
    kind, info = ref.calls[-1]
    assert kind == "lt" and _EPILOGUES[info["EPILOGUE"]] == "RELU"  # bias copied into out first


# ---- Note [mm's plans]: vram.mm keeps each problem's plan -----------------------------------


@pytest.fixture
def mm_on_ref(ref):
    """vram.mm on sim tensors through the cuda halves' plans (and the reference BLAS)."""
    _functions.clear_plans()
    yield ref
    _functions.clear_plans()


def test_mm_makes_a_plan_once_per_problem(mm_on_ref):
    ref = mm_on_ref
    a, b = rand((6, 5), 31), rand((5, 7), 32)
    out = vram.empty((6, 7), device="sim:0")
    expect(vram.mm(a, b), host(a) @ host(b))
    made = len(ref.descs)
    for seed in range(3):  # new tensors of the same problem: the same plan
        c, d = rand((6, 5), 40 + seed), rand((5, 7), 50 + seed)
        expect(vram.mm(c, d), host(c) @ host(d))
        expect(vram.mm(c, d, out=out), host(c) @ host(d))
    assert len(ref.descs) == made == 1  # out= is the same GEMM: one descriptor for both
    assert [kind for kind, _ in ref.calls] == ["lt"] * 7
    expect(vram.mm(a.t().contiguous().t(), b), host(a) @ host(b))  # other strides: new plan
    assert len(ref.descs) == 2 and ref.descs[max(ref.descs)]["TRANSB"] == _cublas.OP_T
    expanded = rand((1, 7), 33).expand(5, 7)  # cuBLAS cannot read it: copied at each call
    for _ in range(2):
        expect(vram.mm(a, expanded), host(a) @ host(expanded))
    assert len(ref.descs) == 2  # its copy is the first problem again


def test_mm_plans_follow_settings_and_alignment(mm_on_ref):
    ref = mm_on_ref
    a, b = rand((6, 5), 33), rand((5, 7), 34)
    vram.mm(a, b)
    assert ref.calls[-1][1]["compute"] == _cublas.COMPUTE_TYPES["32F"]
    vram.backends.cuda.matmul.allow_tf32 = True
    vram.mm(a, b)
    assert ref.calls[-1][1]["compute"] == _cublas.COMPUTE_TYPES["32F_FAST_TF32"]
    vram.backends.cuda.preferred_blas_library("cublas")
    expect(vram.mm(a, b), host(a) @ host(b))
    assert ref.calls[-1][0] == "cublas"
    vram.backends.cuda.preferred_blas_library("cublaslt")
    vram.mm(a, b)
    assert ref.preference[1] == (256, 256, 256, 256)
    wide = rand((6, 6), 35)
    shifted = wide[:, 1:]  # 4 bytes past an aligned pointer
    expect(vram.mm(shifted, b), host(shifted) @ host(b))
    assert ref.preference[1] == (4, 4, 4, 4)
    expect(vram.mm(a, b), host(a) @ host(b))
    assert ref.preference[1] == (4, 4, 4, 4)  # the aligned problem's plan was kept


def test_mm_checks_what_its_plans_do_not_decide(mm_on_ref):
    a, b = rand((6, 6), 36), rand((6, 6), 37)
    out = vram.empty((6, 6), device="sim:0")
    vram.mm(a, b, out=out)
    with pytest.raises(RuntimeError, match="'out' and 'input' share memory"):
        vram.mm(a, b, out=a)  # the same problem as above but for out's storage
    with pytest.raises(RuntimeError, match="one dtype"):
        vram.mm(a, rand((6, 6), 38, vram.float64))
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        vram.mm(a, rand((5, 6), 39))
    with pytest.raises(TypeError, match="'mat2' is None"):
        vram.mm(a, None)
    expect(vram.mm(a, b, out=out), host(a) @ host(b))


def test_tunableop_state_changes_replace_mm_plans(mm_on_ref):
    ref = mm_on_ref
    a, b = rand((8, 16), 41), rand((16, 4), 42)
    vram.mm(a, b)
    assert ref.calls[-1][1]["algo"] == 100  # the heuristic's first
    vram.cuda.tunable.enable()
    expect(vram.mm(a, b), host(a) @ host(b))
    ((_, params, solution, _),) = vram.cuda.tunable.get_results()
    assert params == "nn_4_8_16_ld_4_16_4"
    ref.calls.clear()
    vram.mm(a, b)
    vram.mm(a, b)
    tuned = ref.calls[-1]
    assert len(ref.calls) == 2 and tuned == ref.calls[0]
    assert (tuned[0] == "cublas") == (solution == "Default")


# ---- addmm's and linear's plans (Note [mm's plans]) -----------------------------------------

BIASES = {  # name -> (bias of the [6, 7] result, its host value broadcast)
    "row": lambda: rand((7,), 60),
    "row 2-D": lambda: rand((1, 7), 61),
    "full": lambda: rand((6, 7), 62),
    "column": lambda: rand((6, 1), 63),
    "scalar": lambda: rand((), 64),
    "strided row": lambda: rand((14,), 65)[::2],
}


@pytest.mark.parametrize("layout", [n for n in LAYOUTS if n == "row-major" or "transposed" in n])
@pytest.mark.parametrize("bias", list(BIASES))
@pytest.mark.parametrize(
    "beta, alpha, activation", [(1, 1, None), (0.5, 2.0, None), (0, 1, None), (1, 1, "relu")]
)
def test_a_planned_addmm_is_the_checked_one(mm_on_ref, layout, bias, beta, alpha, activation):
    """The second call of a problem runs the plan the first (checked) call kept: the same
    library calls, bit for bit the same result, for new tensors of the same problem."""
    ref = mm_on_ref
    a, b = LAYOUTS[layout]()
    c = BIASES[bias]()
    want = beta * host(c) + alpha * (host(a) @ host(b)) if beta else alpha * (host(a) @ host(b))
    want = np.maximum(want, 0) if activation else want
    first = vram.addmm(c, a, b, beta=beta, alpha=alpha, activation=activation)
    calls = list(ref.calls)
    assert len(vram.blas._functions._plans.add) == 1
    second = vram.addmm(c, a, b, beta=beta, alpha=alpha, activation=activation)
    expect(first, want)
    assert np.array_equal(second.numpy(), first.numpy())
    assert ref.calls[len(calls) :] == calls  # the same library calls again
    moved = vram.empty_like(c).copy_(c)  # another bias of the same problem
    expect(vram.addmm(moved, a, b, beta=beta, alpha=alpha, activation=activation), want)


def test_linear_plans_fold_leading_dimensions(mm_on_ref):
    ref = mm_on_ref
    x, w, bias = rand((2, 3, 5), 70), rand((7, 5), 71), rand((7,), 72)
    want = host(x) @ host(w).T + host(bias)
    for _ in range(3):
        got = vram.nn.functional.linear(x, w, bias)
        assert got.shape == (2, 3, 7) and got.stride() == (21, 7, 1)
        expect(got, want)
    assert len(ref.descs) == 1 and len(vram.blas._functions._plans.linear) == 1
    assert not vram.blas._functions._plans.add  # (addmm's keys are not linear's)
    sliced = rand((2, 3, 10), 73)[..., ::2]  # its rows are a copy: not remembered
    for _ in range(2):
        expect(vram.nn.functional.linear(sliced, w, bias), host(sliced) @ host(w).T + host(bias))
    assert len(vram.blas._functions._plans.linear) == 1
    expect(vram.nn.functional.linear(x, w), host(x) @ host(w).T)  # no bias: matmul's route
    with pytest.raises(RuntimeError, match="expects 5"):
        vram.nn.functional.linear(rand((2, 4), 74), w, bias)


@pytest.mark.parametrize("bias", ["row", "strided row"])
@pytest.mark.parametrize("rows", [(6,), (2, 3)])
def test_a_planned_linear_is_the_checked_one(mm_on_ref, rows, bias):
    """linear's second call runs the plan its first (checked) call kept: the same library
    calls and bit for bit the same result, for new tensors of the same problem."""
    ref = mm_on_ref
    x, w, c = rand((*rows, 5), 75), rand((7, 5), 76), BIASES[bias]()
    first = vram.nn.functional.linear(x, w, c)
    calls = list(ref.calls)
    assert len(vram.blas._functions._plans.linear) == 1
    second = vram.nn.functional.linear(x, w, c)
    expect(first, host(x) @ host(w).T + host(c))
    assert second.shape == first.shape == (*rows, 7) and second.stride() == first.stride()
    assert np.array_equal(second.numpy(), first.numpy())
    assert ref.calls[len(calls) :] == calls  # the same library calls again
    y = vram.empty_like(x).copy_(x) * 2  # another input of the same problem
    expect(vram.nn.functional.linear(y, w, c), 2 * host(x) @ host(w).T + host(c))
    assert len(vram.blas._functions._plans.linear) == 1


def test_addmm_plans_follow_settings_and_arguments(mm_on_ref):
    ref = mm_on_ref
    a, b, c = rand((6, 5), 80), rand((5, 7), 81), rand((7,), 82)
    vram.addmm(c, a, b)
    assert ref.calls[-1][1]["compute"] == _cublas.COMPUTE_TYPES["32F"]
    vram.backends.cuda.matmul.allow_tf32 = True
    vram.addmm(c, a, b)
    assert ref.calls[-1][1]["compute"] == _cublas.COMPUTE_TYPES["32F_FAST_TF32"]
    with pytest.raises(RuntimeError, match="one dtype"):
        vram.addmm(c.to(vram.float64), a, b)
    with pytest.raises(TypeError):
        vram.addmm(c, a, b, beta="1")
    expect(vram.addmm(c, a, b, beta=True), host(c) + host(a) @ host(b), rtol=1e-3)


def test_addmm_arguments_never_reach_a_linear_plan(mm_on_ref):
    x, w, bias = rand((6, 5), 90), rand((7, 5), 91), rand((7,), 92)
    vram.nn.functional.linear(x, w, bias)  # remembered
    with pytest.raises(RuntimeError, match="cannot be multiplied"):  # linear's operands
        vram.addmm(bias, x, w, activation="linear")
    for activation in ("linear", ["relu"]):  # no activation: refused, not run
        with pytest.raises((RuntimeError, TypeError, ValueError), match="activation"):
            vram.addmm(bias, x, w.t(), activation=activation)

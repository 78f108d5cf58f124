"""cuBLAS and cuBLASLt through nvmath-python's bindings: the only module that imports them.

- nvmath is imported on first use, so vram imports (and runs on the simulated GPU) without
  it; ``available()`` says whether it can be loaded.
- Handles: one cuBLAS handle and one cuBLASLt handle per (device, thread), created the first
  time a thread asks, with the device's primary context current (a handle belongs to the
  context current at its creation). A handle is never used by two threads at once, so
  ``cublasSetStream`` and the call after it cannot race with another thread's (the race of
  one handle per device shared by all threads). When a thread ends, its handles go back to
  a pool that the next new thread takes from (PyTorch's DeviceThreadHandlePool).
- Every status goes through one checker per library: ``_cublas_error`` / ``_lt_error`` turn
  nvmath's exceptions into ``CudaError(call, "CUBLAS_STATUS_...")``.
- Pointers, handles, descriptors and streams are plain ints. Calls that launch work (the
  GEMMs) are asynchronous on the stream they are given.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._errors import CudaError
from . import get_driver

__all__ = [
    "available",
    "handle",
    "lt_handle",
    "use_device",
    "set_stream",
    "set_workspace",
    "set_math_mode",
    "gemm_ex",
    "gemm_strided_batched_ex",
    "matmul_desc",
    "set_matmul_desc",
    "PointerAttribute",
    "matrix_layout",
    "matmul_preference",
    "heuristics",
    "algo_check",
    "lt_matmul",
    "destroy_matmul_desc",
    "destroy_matrix_layout",
    "versions",
    "getrf_batched",
    "getrs_batched",
    "DATA_TYPES",
    "COMPUTE_TYPES",
    "EPILOGUES",
    "OP_N",
    "OP_T",
    "DEFAULT_MATH",
    "TF32_TENSOR_OP_MATH",
    "DISALLOW_REDUCED_PRECISION_REDUCTION",
    "GEMM_DEFAULT_TENSOR_OP",
]

# cudaDataType_t by vram dtype name (library_types.h; the ABI fixes these values)
DATA_TYPES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 14}
# cublasComputeType_t (cublas_api.h)
COMPUTE_TYPES = {"32F": 68, "32F_FAST_TF32": 77, "64F": 70}
# cublasLtEpilogue_t (cublasLt.h)
EPILOGUES = {"DEFAULT": 1, "RELU": 2, "BIAS": 4, "RELU_BIAS": 6, "GELU": 32, "GELU_BIAS": 36}
OP_N, OP_T = 0, 1  # cublasOperation_t
DEFAULT_MATH, TF32_TENSOR_OP_MATH = 0, 3  # cublasMath_t
DISALLOW_REDUCED_PRECISION_REDUCTION = 16  # a cublasMath_t flag
GEMM_DEFAULT_TENSOR_OP = 99  # cublasGemmAlgo_t
_REDUCTION_ALL, _REDUCTION_OUTPUT_TYPE = 7, 4  # cublasLtReductionScheme_t: MASK, OUTPUT_TYPE
_STATUS_NAMES = {
    0: "CUBLAS_STATUS_SUCCESS",
    1: "CUBLAS_STATUS_NOT_INITIALIZED",
    3: "CUBLAS_STATUS_ALLOC_FAILED",
    7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH",
    11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR",
    15: "CUBLAS_STATUS_NOT_SUPPORTED",
    16: "CUBLAS_STATUS_LICENSE_ERROR",
}

_libs: dict[str, Any] = {}
_import_lock = threading.Lock()


def _load() -> tuple[Any, Any]:
    """nvmath's cublas and cublasLt modules (imported once)."""
    if not _libs:
        with _import_lock:
            if not _libs:
                try:
                    from nvmath.bindings import cublas, cublasLt
                except ImportError as exc:
                    raise CudaError(
                        "import nvmath.bindings.cublas",
                        "CUBLAS_STATUS_NOT_INITIALIZED",
                        "cuBLAS needs nvmath-python: pip install nvmath-python (or vram[cu13])",
                    ) from exc
                _libs["lt"] = cublasLt
                _libs["blas"] = cublas
    return _libs["blas"], _libs["lt"]


def available() -> bool:
    """True when nvmath-python's cuBLAS bindings can be imported (never raises)."""
    try:
        _load()
    except CudaError:
        return False
    return True


# ---- the checkers ------------------------------------------------------------------------


def _status_error(call: str, exc: Exception) -> CudaError:
    status = getattr(exc, "status", None)
    name = _STATUS_NAMES.get(status, f"CUBLAS_STATUS_{status}")  # type: ignore[arg-type]
    return CudaError(call, name, str(exc))


def _call(call: str, fn: Any, *args: Any) -> Any:
    """The checker for every cuBLAS and cuBLASLt call: the result, or CudaError."""
    blas, lt = _load()
    try:
        return fn(*args)
    except (blas.cuBLASError, lt.cuBLASLtError) as exc:
        raise _status_error(call, exc) from None


# ---- handles -----------------------------------------------------------------------------

_pool_lock = threading.Lock()  # guards _free
_free: dict[tuple[str, int], list[int]] = {}  # (kind, device) -> handles no thread holds


class _ThreadHandles:
    """The handles one thread holds; they go back to the pool when the thread ends."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], int] = {}

    def __del__(self) -> None:
        try:
            with _pool_lock:
                for key, value in self.held.items():
                    _free.setdefault(key, []).append(value)
        except Exception:  # finalizers never raise
            pass


class _Local(threading.local):
    def __init__(self) -> None:
        self.handles = _ThreadHandles()


_local = _Local()


_cuda_driver: list[Any] = []  # the CudaDriver, once asked for


def use_device(device: int) -> None:
    """Make ``device``'s primary context current on this thread (skipped if it is)."""
    if not _cuda_driver:
        _cuda_driver.append(get_driver("cuda"))
    _cuda_driver[0]._use(device)


def _handle(kind: str, device: int) -> int:
    held = _local.handles.held
    key = (kind, device)
    found = held.get(key)
    if found is not None:
        return found
    with _pool_lock:
        pooled = _free.get(key)
        found = pooled.pop() if pooled else None
    if found is None:
        blas, lt = _load()
        use_device(device)
        if kind == "cublas":
            found = _call("cublasCreate", blas.create)
        else:
            found = _call("cublasLtCreate", lt.create)
    held[key] = found
    return found


def handle(device: int) -> int:
    """The calling thread's cuBLAS handle for ``device`` (created once per thread)."""
    return _handle("cublas", device)


def lt_handle(device: int) -> int:
    """The calling thread's cuBLASLt handle for ``device`` (created once per thread)."""
    return _handle("cublaslt", device)


# ---- cuBLAS --------------------------------------------------------------------------------


def set_stream(handle: int, stream: int) -> None:
    """cublasSetStream: later calls on ``handle`` run on ``stream``."""
    _call("cublasSetStream", _load()[0].set_stream, handle, stream)


def set_workspace(handle: int, ptr: int, nbytes: int) -> None:
    """cublasSetWorkspace: the scratch memory calls on ``handle`` may use."""
    _call("cublasSetWorkspace", _load()[0].set_workspace, handle, ptr, nbytes)


def set_math_mode(handle: int, mode: int) -> None:
    """cublasSetMathMode (DEFAULT_MATH, TF32_TENSOR_OP_MATH, | DISALLOW_REDUCED_...)."""
    _call("cublasSetMathMode", _load()[0].set_math_mode, handle, mode)


def gemm_ex(
    handle: int,
    transa: int,
    transb: int,
    m: int,
    n: int,
    k: int,
    alpha: int,
    a: int,
    lda: int,
    b: int,
    ldb: int,
    beta: int,
    c: int,
    ldc: int,
    data_type: int,
    compute_type: int,
) -> None:
    """cublasGemmEx, column-major: C = alpha op(A) op(B) + beta C (alpha/beta: host pointers)."""
    _call(
        "cublasGemmEx",
        _load()[0].gemm_ex,
        handle, transa, transb, m, n, k,
        alpha, a, data_type, lda, b, data_type, ldb,
        beta, c, data_type, ldc, compute_type, GEMM_DEFAULT_TENSOR_OP,
    )  # fmt: skip


def gemm_strided_batched_ex(
    handle: int,
    transa: int,
    transb: int,
    m: int,
    n: int,
    k: int,
    alpha: int,
    a: int,
    lda: int,
    stride_a: int,
    b: int,
    ldb: int,
    stride_b: int,
    beta: int,
    c: int,
    ldc: int,
    stride_c: int,
    batch: int,
    data_type: int,
    compute_type: int,
) -> None:
    """cublasGemmStridedBatchedEx: ``batch`` GEMMs whose matrices lie ``stride_*`` apart."""
    _call(
        "cublasGemmStridedBatchedEx",
        _load()[0].gemm_strided_batched_ex,
        handle, transa, transb, m, n, k,
        alpha, a, data_type, lda, stride_a, b, data_type, ldb, stride_b,
        beta, c, data_type, ldc, stride_c, batch, compute_type, GEMM_DEFAULT_TENSOR_OP,
    )  # fmt: skip


# ---- batched LU (vram.linalg) ---------------------------------------------------------------

_LU_PREFIX = {"float32": "S", "float64": "D", "complex64": "C", "complex128": "Z"}


def getrf_batched(
    handle: int, dtype: str, n: int, a_array: int, lda: int, pivots: int, info: int, batch: int
) -> None:
    """cublas<t>getrfBatched: P A = L U in place for ``batch`` n x n column-major matrices.

    ``a_array`` is a device array of ``batch`` device pointers; ``pivots`` gets n int32 1-based
    pivots per matrix, one after the other (0: no pivoting); ``info`` one int32 per matrix
    (device memory). ``dtype``: "float32", "float64", "complex64" or "complex128".
    """
    prefix = _LU_PREFIX[dtype]
    fn = getattr(_load()[0], f"{prefix.lower()}getrf_batched")
    _call(f"cublas{prefix}getrfBatched", fn, handle, n, a_array, lda, pivots, info, batch)


def getrs_batched(
    handle: int,
    dtype: str,
    trans: int,
    n: int,
    nrhs: int,
    a_array: int,
    lda: int,
    pivots: int,
    b_array: int,
    ldb: int,
    batch: int,
) -> None:
    """cublas<t>getrsBatched: solve op(A) X = B in place of each B from getrfBatched's LU.

    ``a_array`` / ``b_array`` are device arrays of device pointers, ``pivots`` n int32 per
    matrix. cuBLAS checks the arguments into a host int; a bad one raises CudaError here.
    """
    prefix = _LU_PREFIX[dtype]
    fn = getattr(_load()[0], f"{prefix.lower()}getrs_batched")
    info = np.zeros(1, dtype=np.int32)
    call = f"cublas{prefix}getrsBatched"
    _call(call, fn, handle, trans, n, nrhs, a_array, lda, pivots, b_array, ldb,
          info.ctypes.data, batch)  # fmt: skip
    if info[0] != 0:
        raise CudaError(call, "CUBLAS_STATUS_INVALID_VALUE", f"argument {-int(info[0])} is wrong")


# ---- cuBLASLt ------------------------------------------------------------------------------


def _set_attribute(call: str, setter: Any, obj: int, attr: Any, dtype: Any, value: Any) -> None:
    buffer = np.array(value, dtype=dtype)
    _call(call, setter, obj, int(attr), buffer.ctypes.data, buffer.itemsize)


def matmul_desc(compute_type: int, scale_type: int, transa: int, transb: int) -> int:
    """cublasLtMatmulDescCreate with the operations on A and B set; destroy it when done."""
    _, lt = _load()
    desc = _call("cublasLtMatmulDescCreate", lt.matmul_desc_create, compute_type, scale_type)
    set_matmul_desc(desc, "TRANSA", transa)
    set_matmul_desc(desc, "TRANSB", transb)
    return desc


def set_matmul_desc(desc: int, name: str, value: int) -> None:
    """cublasLtMatmulDescSetAttribute by attribute name: "EPILOGUE", "BIAS_POINTER", ..."""
    _, lt = _load()
    attr = lt.MatmulDescAttribute[name]
    dtype = lt.get_matmul_desc_attribute_dtype(attr)
    _set_attribute(
        "cublasLtMatmulDescSetAttribute", lt.matmul_desc_set_attribute, desc, attr, dtype, value
    )


class PointerAttribute:
    """One pointer-valued attribute of a matmul descriptor ("BIAS_POINTER"), set by one
    library call per change: the attribute's number is looked up once, and the value goes
    through a buffer this object holds (cuBLASLt copies it during the call)."""

    __slots__ = ("desc", "attr", "buffer", "address", "setter")

    def __init__(self, desc: int, name: str) -> None:
        _, lt = _load()
        self.desc = desc
        self.attr = int(lt.MatmulDescAttribute[name])
        self.buffer = np.zeros(1, dtype=np.uint64)
        self.address = self.buffer.ctypes.data
        self.setter = lt.matmul_desc_set_attribute

    def set(self, pointer: int) -> None:
        self.buffer[0] = pointer
        _call("cublasLtMatmulDescSetAttribute", self.setter, self.desc, self.attr, self.address, 8)


def matrix_layout(
    data_type: int, rows: int, cols: int, ld: int, batch: int = 1, stride: int = 0
) -> int:
    """cublasLtMatrixLayoutCreate (column-major), with a strided batch when ``batch > 1``."""
    _, lt = _load()
    layout = _call("cublasLtMatrixLayoutCreate", lt.matrix_layout_create, data_type, rows, cols, ld)
    if batch > 1:
        setter = lt.matrix_layout_set_attribute
        for name, value in (("BATCH_COUNT", batch), ("STRIDED_BATCH_OFFSET", stride)):
            attr = lt.MatrixLayoutAttribute[name]
            dtype = lt.get_matrix_layout_attribute_dtype(attr)
            _set_attribute("cublasLtMatrixLayoutSetAttribute", setter, layout, attr, dtype, value)
    return layout


def matmul_preference(
    max_workspace: int, alignments: tuple[int, int, int, int], reduced_precision: bool
) -> int:
    """cublasLtMatmulPreferenceCreate: at most ``max_workspace`` bytes of workspace, the
    pointers' alignments (A, B, C, D in bytes), and, when ``reduced_precision`` is False,
    no split-K reduction in the output type (cuBLAS's DISALLOW_REDUCED_PRECISION_REDUCTION)."""
    _, lt = _load()
    pref = _call("cublasLtMatmulPreferenceCreate", lt.matmul_preference_create)
    values = [("MAX_WORKSPACE_BYTES", max_workspace)]
    for name, align in zip("ABCD", alignments, strict=True):
        values.append((f"MIN_ALIGNMENT_{name}_BYTES", align))
    if not reduced_precision:
        values.append(("REDUCTION_SCHEME_MASK", _REDUCTION_ALL & ~_REDUCTION_OUTPUT_TYPE))
    for name, value in values:
        attr = lt.MatmulPreferenceAttribute[name]
        dtype = lt.get_matmul_preference_attribute_dtype(attr)
        setter = lt.matmul_preference_set_attribute
        _set_attribute("cublasLtMatmulPreferenceSetAttribute", setter, pref, attr, dtype, value)
    return pref


def heuristics(
    lt_handle: int, desc: int, a: int, b: int, c: int, d: int, pref: int, count: int
) -> list[tuple[np.ndarray, int]]:
    """cublasLtMatmulAlgoGetHeuristic: up to ``count`` algorithms, best first, each as
    (a one-element ``cublasLtMatmulAlgo_t`` array, whose ``ctypes.data`` is what
    ``lt_matmul`` takes; the workspace bytes it needs). The preference is destroyed here."""
    _, lt = _load()
    results = np.zeros(count, dtype=lt.matmul_heuristic_result_dtype)
    returned = np.zeros(1, dtype=np.int32)
    try:
        _call(
            "cublasLtMatmulAlgoGetHeuristic",
            lt.matmul_algo_get_heuristic,
            lt_handle, desc, a, b, c, d, pref, count, results.ctypes.data, returned.ctypes.data,
        )  # fmt: skip
    finally:
        _call("cublasLtMatmulPreferenceDestroy", lt.matmul_preference_destroy, pref)
    found = []
    for i in range(int(returned[0])):
        algo = np.zeros(1, dtype=lt.matmul_algo_dtype)
        algo[0] = results[i]["algo"]
        found.append((algo, int(results[i]["workspace_size"])))
    return found


def algo_check(lt_handle: int, desc: int, a: int, b: int, c: int, d: int, algo: np.ndarray) -> int:
    """cublasLtMatmulAlgoCheck: the workspace bytes ``algo`` (from ``heuristics``) needs;
    CudaError if it cannot run this problem."""
    _, lt = _load()
    result = np.zeros(1, dtype=lt.matmul_heuristic_result_dtype)
    _call(
        "cublasLtMatmulAlgoCheck", lt.matmul_algo_check, lt_handle, desc, a, b, c, d,
        algo.ctypes.data, result.ctypes.data,
    )  # fmt: skip
    return int(result[0]["workspace_size"])


def lt_matmul(
    lt_handle: int,
    desc: int,
    alpha: int,
    a: int,
    a_layout: int,
    b: int,
    b_layout: int,
    beta: int,
    c: int,
    c_layout: int,
    d: int,
    d_layout: int,
    algo: int,
    workspace: int,
    workspace_bytes: int,
    stream: int,
) -> None:
    """cublasLtMatmul: D = epilogue(alpha op(A) op(B) + beta C) on ``stream``; ``algo`` is a
    ``cublasLtMatmulAlgo_t*`` (0: let cuBLASLt choose)."""
    lt = _libs.get("lt") or _load()[1]
    try:
        lt.matmul(
            lt_handle, desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d, d_layout,
            algo, workspace, workspace_bytes, stream,
        )  # fmt: skip
    except lt.cuBLASLtError as exc:
        raise _status_error("cublasLtMatmul", exc) from None


def destroy_matmul_desc(desc: int) -> None:
    _call("cublasLtMatmulDescDestroy", _load()[1].matmul_desc_destroy, desc)


def destroy_matrix_layout(layout: int) -> None:
    _call("cublasLtMatrixLayoutDestroy", _load()[1].matrix_layout_destroy, layout)


def versions() -> dict[str, str]:
    """{"CUBLAS_VERSION": "13.1.0", "CUBLASLT_VERSION": "130100"} of the loaded libraries."""
    blas, lt = _load()
    parts = [str(_call("cublasGetProperty", blas.get_property, p)) for p in range(3)]
    return {
        "CUBLAS_VERSION": ".".join(parts),
        "CUBLASLT_VERSION": str(_call("cublasLtGetVersion", lt.get_version)),
    }

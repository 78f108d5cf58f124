"""cuSOLVER dense (cusolverDn) through nvmath-python's bindings: the only module that imports it.

- nvmath is imported on first use, so vram imports (and runs on the simulated GPU) without
  it; ``available()`` says whether it can be loaded.
- Handles: one cusolverDn handle per (device, thread), created with the device's primary
  context current; when a thread ends its handles go back to a pool the next new thread
  takes from (as cuBLAS's in ``_cublas``). Every call sets the handle's stream first
  (``cusolverDnSetStream``), so a handle follows the caller's current stream.
- One checker, ``_call``: nvmath's cuSOLVERError becomes ``CudaError(call,
  "CUSOLVER_STATUS_...")``.
- Two APIs: the legacy typed one (``cusolverDn<t>getrf``: int32 sizes and pivots, which are
  PyTorch's pivots as they are) and the 64-bit generic one (``cusolverDnXgetrf`` /
  ``Xgetrs`` with a ``cusolverDnParams_t``: 64-bit sizes and int64 pivots, and a choice of
  algorithm). The caller picks; ``X_API_ELEMENTS`` says where the legacy one stops.
- Workspaces are the caller's: ``getrf_buffer_size`` says how many bytes, the caller passes
  one buffer to every ``getrf`` of a batch. Nothing here allocates device memory.
- Pointers, handles and streams are plain ints; every call is asynchronous on its stream.
"""

from __future__ import annotations

import threading
from typing import Any

from .._errors import CudaError
from . import get_driver

__all__ = [
    "available",
    "handle",
    "params",
    "getrf_buffer_size",
    "getrf",
    "getrs",
    "xgetrf_buffer_size",
    "xgetrf",
    "xgetrs",
    "version",
    "DATA_TYPES",
    "ITEMSIZE",
    "X_API_ELEMENTS",
    "OP_N",
    "OP_T",
    "OP_C",
]

# cudaDataType_t by vram dtype name (library_types.h; the ABI fixes these values)
DATA_TYPES = {"float32": 0, "float64": 1, "complex64": 4, "complex128": 5}
ITEMSIZE = {"float32": 4, "float64": 8, "complex64": 8, "complex128": 16}
_PREFIX = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}
OP_N, OP_T, OP_C = 0, 1, 2  # cublasOperation_t, which cuSOLVER takes for ``trans``
# A matrix with this many elements (lda * n) or more goes to the 64-bit API: the legacy one
# takes int sizes, and its internal offsets are not promised beyond them.
X_API_ELEMENTS = 1 << 31

_lib: dict[str, Any] = {}
_import_lock = threading.Lock()


def _load() -> Any:
    """nvmath's cusolverDn module (imported once)."""
    if not _lib:
        with _import_lock:
            if not _lib:
                try:
                    from nvmath.bindings import cusolver, cusolverDn
                except ImportError as exc:
                    raise CudaError(
                        "import nvmath.bindings.cusolverDn",
                        "CUSOLVER_STATUS_NOT_INITIALIZED",
                        "cuSOLVER needs nvmath-python: pip install nvmath-python (or vram[cu13])",
                    ) from exc
                _lib["status"] = cusolver
                _lib["dn"] = cusolverDn
    return _lib["dn"]


def available() -> bool:
    """True when nvmath-python's cuSOLVER bindings can be imported (never raises)."""
    try:
        _load()
    except CudaError:
        return False
    return True


# ---- the checker ---------------------------------------------------------------------------


def _status_name(status: Any) -> str:
    try:
        return "CUSOLVER_STATUS_" + _lib["status"].Status(status).name
    except (ValueError, KeyError):
        return f"CUSOLVER_STATUS_{status}"


def _call(call: str, fn: Any, *args: Any) -> Any:
    """The checker for every cuSOLVER call: the result, or CudaError naming the status."""
    _load()
    try:
        return fn(*args)
    except _lib["status"].cuSOLVERError as exc:
        raise CudaError(call, _status_name(getattr(exc, "status", None)), str(exc)) from None


# ---- handles -------------------------------------------------------------------------------

_pool_lock = threading.Lock()  # guards _free
_free: dict[int, list[tuple[int, dict[int, int]]]] = {}  # device -> (handle, its params)


class _ThreadHandles:
    """The handles (and their params objects) one thread holds; pooled when it ends."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: dict[int, tuple[int, dict[int, int]]] = {}  # device -> (handle, params)

    def __del__(self) -> None:
        try:
            with _pool_lock:
                for device, value in self.held.items():
                    _free.setdefault(device, []).append(value)
        except Exception:  # finalizers never raise
            pass


class _Local(threading.local):
    def __init__(self) -> None:
        self.handles = _ThreadHandles()


_local = _Local()


def _use_device(device: int) -> None:
    get_driver("cuda")._use(device)  # type: ignore[attr-defined]


def _entry(device: int) -> tuple[int, dict[int, int]]:
    held = _local.handles.held
    found = held.get(device)
    if found is not None:
        return found
    with _pool_lock:
        pooled = _free.get(device)
        found = pooled.pop() if pooled else None
    if found is None:
        dn = _load()
        _use_device(device)
        found = (_call("cusolverDnCreate", dn.create), {})
    held[device] = found
    return found


def handle(device: int, stream: int) -> int:
    """The calling thread's cusolverDn handle for ``device``, set to run on ``stream``."""
    found = _entry(device)[0]
    _use_device(device)
    _call("cusolverDnSetStream", _lib["dn"].set_stream, found, stream)
    return found


def params(device: int, algo: int = 0) -> int:
    """The thread's ``cusolverDnParams_t`` for ``device`` with GETRF's algorithm ``algo``
    (CUSOLVER_ALG_0, the default, or CUSOLVER_ALG_1)."""
    objects = _entry(device)[1]
    found = objects.get(algo)
    if found is None:
        dn = _load()
        found = _call("cusolverDnCreateParams", dn.create_params)
        if algo:
            getrf = int(dn.Function.GETRF)
            _call("cusolverDnSetAdvOptions", dn.set_adv_options, found, getrf, algo)
        objects[algo] = found
    return found


# ---- the legacy API: int32 sizes and pivots --------------------------------------------------


def _typed(dtype: str, name: str) -> Any:
    dn = _load()
    return getattr(dn, _PREFIX[dtype] + name)


def getrf_buffer_size(
    device: int, stream: int, dtype: str, m: int, n: int, a: int, lda: int
) -> int:
    """cusolverDn<t>getrf_bufferSize: the workspace ``getrf`` needs, in bytes.

    It depends only on (dtype, m, n, lda): one query serves every matrix of a batch.
    """
    h = handle(device, stream)
    lwork = _call(f"cusolverDn{_PREFIX[dtype].upper()}getrf_bufferSize",
                  _typed(dtype, "getrf_buffer_size"), h, m, n, a, lda)  # fmt: skip
    return int(lwork) * ITEMSIZE[dtype]


def getrf(
    device: int,
    stream: int,
    dtype: str,
    m: int,
    n: int,
    a: int,
    lda: int,
    workspace: int,
    ipiv: int,
    info: int,
) -> None:
    """cusolverDn<t>getrf on ``stream``: P A = L U in place (column-major, ``lda``); ``ipiv``
    gets min(m, n) int32 1-based pivots (0: no pivoting), ``info`` one int32."""
    h = handle(device, stream)
    fn = _typed(dtype, "getrf")
    _call(f"cusolverDn{_PREFIX[dtype].upper()}getrf", fn, h, m, n, a, lda, workspace, ipiv, info)


def getrs(
    device: int,
    stream: int,
    dtype: str,
    trans: int,
    n: int,
    nrhs: int,
    a: int,
    lda: int,
    ipiv: int,
    b: int,
    ldb: int,
    info: int,
) -> None:
    """cusolverDn<t>getrs on ``stream``: solve op(A) X = B in place of B from getrf's LU."""
    h = handle(device, stream)
    fn = _typed(dtype, "getrs")
    name = f"cusolverDn{_PREFIX[dtype].upper()}getrs"
    _call(name, fn, h, trans, n, nrhs, a, lda, ipiv, b, ldb, info)


# ---- the 64-bit API: int64 sizes and pivots, a choice of algorithm -------------------------


def xgetrf_buffer_size(
    device: int, stream: int, dtype: str, m: int, n: int, a: int, lda: int, algo: int = 0
) -> tuple[int, int]:
    """cusolverDnXgetrf_bufferSize: (device bytes, host bytes) that ``xgetrf`` needs."""
    h = handle(device, stream)
    dt = DATA_TYPES[dtype]
    dn = _lib["dn"]
    found = _call("cusolverDnXgetrf_bufferSize", dn.xgetrf_buffer_size,
                  h, params(device, algo), m, n, dt, a, lda, dt)  # fmt: skip
    return int(found[0]), int(found[1])


def xgetrf(
    device: int,
    stream: int,
    dtype: str,
    m: int,
    n: int,
    a: int,
    lda: int,
    ipiv: int,
    workspace: int,
    workspace_bytes: int,
    host_workspace: int,
    host_bytes: int,
    info: int,
    algo: int = 0,
) -> None:
    """cusolverDnXgetrf on ``stream``: as ``getrf``, with int64 pivots in ``ipiv``."""
    h = handle(device, stream)
    dt = DATA_TYPES[dtype]
    _call("cusolverDnXgetrf", _lib["dn"].xgetrf,
          h, params(device, algo), m, n, dt, a, lda, ipiv, dt,
          workspace, workspace_bytes, host_workspace, host_bytes, info)  # fmt: skip


def xgetrs(
    device: int,
    stream: int,
    dtype: str,
    trans: int,
    n: int,
    nrhs: int,
    a: int,
    lda: int,
    ipiv: int,
    b: int,
    ldb: int,
    info: int,
) -> None:
    """cusolverDnXgetrs on ``stream``: as ``getrs``, with int64 pivots in ``ipiv``."""
    h = handle(device, stream)
    dt = DATA_TYPES[dtype]
    _call("cusolverDnXgetrs", _lib["dn"].xgetrs,
          h, params(device), trans, n, nrhs, dt, a, lda, ipiv, dt, b, ldb, info)  # fmt: skip


def version() -> str:
    """cuSOLVER's version, "12.0.4" (of the library nvmath loaded)."""
    _load()
    lib = _lib["status"]
    return ".".join(str(_call("cusolverGetProperty", lib.get_property, p)) for p in range(3))

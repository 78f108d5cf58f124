"""Settings of the CUDA libraries, named as torch.backends.cuda names them.

    vram.backends.cuda.matmul.allow_tf32 = True            # fp32 GEMMs may use TF32
    vram.backends.cuda.preferred_linalg_library("cusolver")

They are process-wide, read by the BLAS and linear-algebra ops at each call, and mean on
the simulated GPU what they mean on a GPU.
"""

from __future__ import annotations

import threading

__all__ = ["matmul", "preferred_linalg_library", "preferred_blas_library"]

# Bumped whenever a setting changes: caches of what a setting decides (vram.blas's plans)
# key on it instead of reading every setting at each call.
generation = 0


class _MatmulSettings:
    """torch.backends.cuda.matmul: what cuBLAS may do to go faster in a matrix product.

    - ``allow_tf32`` (False, as in PyTorch): fp32 products may round their inputs to TF32.
    - ``allow_fp16_reduced_precision_reduction`` (True): fp16 products may reduce in fp16.
    - ``allow_bf16_reduced_precision_reduction`` (True): bf16 products may reduce in bf16.
    """

    __slots__ = (
        "allow_tf32",
        "allow_fp16_reduced_precision_reduction",
        "allow_bf16_reduced_precision_reduction",
    )

    def __init__(self) -> None:
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    def __setattr__(self, name: str, value: object) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"matmul.{name} must be a bool, got {value!r}")
        global generation
        object.__setattr__(self, name, value)
        generation += 1

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)}" for name in self.__slots__)
        return f"<vram.backends.cuda.matmul {fields}>"


matmul = _MatmulSettings()

_LINALG = ("default", "cusolver", "cublas")
_BLAS = ("cublas", "cublaslt")
_lock = threading.Lock()
_preferred = {"linalg": "default", "blas": "cublaslt"}  # blas: see preferred_blas_library


def _prefer(kind: str, choices: tuple[str, ...], backend: str | None) -> str:
    if backend is None:
        return _preferred[kind]
    if not isinstance(backend, str) or backend.lower() not in choices:
        raise ValueError(f"backend: expected one of {', '.join(choices)} or None, got {backend!r}")
    global generation
    with _lock:
        _preferred[kind] = backend.lower()
        generation += 1
    return _preferred[kind]


def preferred_linalg_library(backend: str | None = None) -> str:
    """The library linear algebra prefers, set when ``backend`` is given; returns it.

    "default" lets each op choose by size and batch (see vram.linalg); "cusolver" and
    "cublas" force one library wherever it implements the op.
    """
    return _prefer("linalg", _LINALG, backend)


def preferred_blas_library(backend: str | None = None) -> str:
    """The library matrix products use, set when ``backend`` is given; returns it.

    "cublaslt" (vram's default; PyTorch's is "cublas"): cuBLASLt, with each problem's
    descriptors and algorithm cached, which from Python costs less host time per call than
    ``cublasGemmEx``. "cublas": PyTorch's route, ``cublasGemmEx`` and
    ``cublasGemmStridedBatchedEx``. Either way a fused bias epilogue runs on cuBLASLt, as
    in PyTorch.
    """
    return _prefer("blas", _BLAS, backend)

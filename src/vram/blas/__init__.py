"""Matrix products on cuBLAS and cuBLASLt (PyTorch's aten/native/cuda/Blas.cpp): mm, matmul,
bmm, addmm (with relu/gelu epilogues), baddbmm; on the simulated GPU with NumPy.

The GEMM is declared once (``_ops``: cuBLAS and cuBLASLt on a GPU, NumPy on the simulated
GPU and the cpu). Importing this package fills the tensor layer's dispatch table (``@``,
``Tensor.matmul``, ``Tensor.mm``).
"""

from ._functions import addmm, baddbmm, bmm, matmul, mm
from ._ops import GEMM_DTYPES
from ._workspace import (
    cublas_workspace_size,
    cublaslt_workspace_library,
    cublaslt_workspace_size,
)

__all__ = [
    "GEMM_DTYPES",
    "addmm",
    "baddbmm",
    "bmm",
    "cublas_workspace_size",
    "cublaslt_workspace_library",
    "cublaslt_workspace_size",
    "matmul",
    "mm",
]

"""Linear algebra on cuSOLVER and cuBLAS: torch.linalg's LU family, with its names and meanings.

    LU, pivots = vram.linalg.lu_factor(A)          # (*, n, n) float32/64, complex64/128
    X = vram.linalg.lu_solve(LU, pivots, B)
    X = vram.linalg.solve(A, B)                     # LinAlgError where A is singular

Each call picks one of four ways by crossover tables measured on an H100 (``_dispatch``):
vram's own blocked LU and solve (kernels/lu.cu with cuBLAS's GEMM, real dtypes: batches of
small and middling matrices, and batched solves), cuBLAS's batched routines, cuSOLVER's
per matrix with ONE workspace for the batch (one matrix), or cuSOLVER's spread over side
streams (batches of large matrices); ``vram.backends.cuda.preferred_linalg_library``
overrides them. Each kernel and library call is declared once with its NumPy reference
(``_calls``, LAPACK's semantics): on the simulated GPU the same dispatch runs, the
references queued in place of the libraries and kernels.

Pivots are PyTorch's: LAPACK's, 1-based, int32. For complex matrices they depend on the
library, as PyTorch's do: cuSOLVER picks the entry of largest |re| + |im| (LAPACK's rule),
cuBLAS's batched LU the largest modulus |z| (measured against PyTorch on an H100).
"""

from ..ops._reductions import vector_norm
from ._checks import LinAlgError
from ._dispatch import plan_lu, plan_solve
from ._lu import LUFactor, LUFactorEx, lu_factor, lu_factor_ex
from ._solve import InvEx, Slogdet, SolveEx, det, inv, inv_ex, lu_solve, slogdet, solve, solve_ex

__all__ = [
    "LinAlgError",
    "LUFactor",
    "LUFactorEx",
    "SolveEx",
    "InvEx",
    "Slogdet",
    "lu_factor",
    "lu_factor_ex",
    "lu_solve",
    "solve",
    "solve_ex",
    "inv",
    "inv_ex",
    "det",
    "slogdet",
    "plan_lu",
    "plan_solve",
    "vector_norm",
]

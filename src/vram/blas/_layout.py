"""Row-major tensors on column-major cuBLAS: which call computes ``out = self @ mat2``.

cuBLAS reads a matrix stored with strides (1, ld) as it is (op N) and one stored with
strides (ld, 1) as its transpose (op T). A row-major product is computed by the
operand-swap identity ``outᵀ = mat2ᵀ · selfᵀ``: a row-major ``out`` is a column-major
``outᵀ``, so the call is X = P·Q with P = mat2ᵀ, Q = selfᵀ, X = outᵀ. An ``out`` stored
column-major needs no swap (P = self, Q = mat2, X = out).

- An operand whose strides fit neither N nor T (an expanded or sliced-in-both-dims view) is
  copied once to a contiguous tensor, as PyTorch does; so is an ``out`` that cuBLAS cannot
  write as it is (the result is computed into a contiguous tensor and copied back).
- A size-1 dimension's stride is never read, so it does not decide the layout.
- Batches are strided: any non-negative stride for the inputs (0 broadcasts one matrix to
  every batch), and for ``out`` a stride that keeps the matrices apart.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GemmCall", "plan_call", "matrix_op"]

OP_N, OP_T = 0, 1  # cublasOperation_t


@dataclass(frozen=True, slots=True)
class GemmCall:
    """One column-major call: X[m, n] = op(P)[m, k] @ op(Q)[k, n], ``batch`` times."""

    swap: bool  # True: P = mat2ᵀ, Q = selfᵀ, X = outᵀ; False: P = self, Q = mat2, X = out
    transa: int
    transb: int
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    batch: int
    stride_a: int  # elements between P's matrices (0: one matrix for every batch)
    stride_b: int
    stride_c: int


def matrix_op(rows: int, cols: int, s0: int, s1: int) -> tuple[int, int] | None:
    """(op, ld) with which cuBLAS reads a ``rows x cols`` matrix of strides (s0, s1),
    or None when it must be copied first (PyTorch's prepare_matrix_for_cublas)."""
    if cols == 1:
        s1 = max(rows, 1)  # one column: its stride is never used
    if rows == 1:
        s0 = max(cols, 1)
    if s0 == 1 and s1 >= max(1, rows):
        return OP_N, s1
    if s1 == 1 and s0 >= max(1, cols):
        return OP_T, s0
    return None


def _writable(rows: int, cols: int, s0: int, s1: int) -> int | None:
    """ld when cuBLAS can write a ``rows x cols`` matrix of strides (s0, s1) in place."""
    found = matrix_op(rows, cols, s0, s1)
    return found[1] if found is not None and found[0] == OP_N else None


def plan_call(
    batch: int,
    m: int,
    k: int,
    n: int,
    a: tuple[int, int, int],
    b: tuple[int, int, int],
    out: tuple[int, int, int],
) -> tuple[GemmCall | None, bool, bool, bool]:
    """The call for ``out[batch, m, n] = a[batch, m, k] @ b[batch, k, n]`` given each
    tensor's (batch, row, column) strides in elements; returns
    (call, copy a, copy b, compute into a temporary out). The call is None when anything
    must be copied first: copy, then plan again with the new strides."""
    ob, o0, o1 = out
    if _writable(n, m, o1, o0) is not None:  # out row-major: the operand swap
        swap = True
        p_shape, p_strides, q_shape, q_strides = (n, k), (b[2], b[1]), (k, m), (a[2], a[1])
        x_rows, x_cols, x_strides = n, m, (o1, o0)
        p_batch, q_batch = b[0], a[0]
    elif _writable(m, n, o0, o1) is not None:  # out column-major: as it is
        swap = False
        p_shape, p_strides, q_shape, q_strides = (m, k), (a[1], a[2]), (k, n), (b[1], b[2])
        x_rows, x_cols, x_strides = m, n, (o0, o1)
        p_batch, q_batch = a[0], b[0]
    else:
        return None, False, False, True
    ldc = _writable(x_rows, x_cols, *x_strides)
    assert ldc is not None
    if batch > 1 and ob < ldc * (x_cols - 1) + x_rows:
        return None, False, False, True  # out's matrices would overlap
    p_op = matrix_op(*p_shape, *p_strides)
    q_op = matrix_op(*q_shape, *q_strides)
    if p_op is None or q_op is None:
        copy_p, copy_q = p_op is None, q_op is None
        copy_a, copy_b = (copy_q, copy_p) if swap else (copy_p, copy_q)
        return None, copy_a, copy_b, False
    if batch == 1:
        p_batch = q_batch = ob = 0
    call = GemmCall(
        swap=swap,
        transa=p_op[0],
        transb=q_op[0],
        m=x_rows,
        n=x_cols,
        k=k,
        lda=p_op[1],
        ldb=q_op[1],
        ldc=ldc,
        batch=batch,
        stride_a=p_batch,
        stride_b=q_batch,
        stride_c=ob,
    )
    return call, False, False, False

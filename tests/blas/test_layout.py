"""The operand-swap identity and cuBLAS's leading dimensions, as pure decisions (exact)."""

from __future__ import annotations

import pytest

from vram.blas._layout import OP_N, OP_T, matrix_op, plan_call


@pytest.mark.parametrize(
    ("rows", "cols", "strides", "expected"),
    [
        (4, 3, (1, 4), (OP_N, 4)),  # column-major
        (4, 3, (3, 1), (OP_T, 3)),  # row-major: read as its transpose
        (4, 3, (1, 8), (OP_N, 8)),  # column-major with padding
        (4, 3, (8, 1), (OP_T, 8)),  # row-major slice of a wider matrix
        (4, 3, (2, 8), None),  # strided in both dimensions: copied first
        (4, 3, (0, 1), None),  # rows expanded from one: copied first
        (4, 1, (1, 99), (OP_N, 4)),  # one column: its stride is never read
        (1, 4, (99, 1), (OP_T, 4)),  # one row
        (1, 1, (7, 9), (OP_N, 1)),
        (4, 3, (3, 0), None),
    ],
)
def test_matrix_op(rows, cols, strides, expected):
    assert matrix_op(rows, cols, *strides) == expected


def test_row_major_product_is_computed_transposed_without_copies():
    # out[2,5] = a[2,3] @ b[3,5], all row-major: outᵀ = bᵀ aᵀ, both read as they are (N, N)
    call, copy_a, copy_b, temp = plan_call(1, 2, 3, 5, (0, 3, 1), (0, 5, 1), (0, 5, 1))
    assert (copy_a, copy_b, temp) == (False, False, False)
    assert call.swap
    assert (call.m, call.n, call.k) == (5, 2, 3)
    assert (call.transa, call.transb) == (OP_N, OP_N)
    assert (call.lda, call.ldb, call.ldc) == (5, 3, 5)


def test_transposed_views_are_passed_as_transposes():
    # a = x.t() for x [3, 2] row-major: a [2, 3] has strides (1, 2); b = y.t() for y [5, 3]
    call, *_ = plan_call(1, 2, 3, 5, (0, 1, 2), (0, 1, 3), (0, 5, 1))
    assert call.swap
    assert (call.transa, call.transb) == (OP_T, OP_T)
    assert (call.lda, call.ldb, call.ldc) == (3, 2, 5)


def test_a_column_major_out_needs_no_swap():
    call, *_ = plan_call(1, 2, 3, 5, (0, 3, 1), (0, 5, 1), (0, 1, 2))
    assert not call.swap
    assert (call.m, call.n, call.k) == (2, 5, 3)
    assert (call.transa, call.transb) == (OP_T, OP_T)
    assert (call.lda, call.ldb, call.ldc) == (3, 5, 2)


def test_operands_cublas_cannot_read_are_copied_and_an_odd_out_is_staged():
    assert plan_call(1, 2, 3, 5, (0, 6, 2), (0, 5, 1), (0, 5, 1))[1:] == (True, False, False)
    assert plan_call(1, 2, 3, 5, (0, 3, 1), (0, 10, 2), (0, 5, 1))[1:] == (False, True, False)
    assert plan_call(1, 2, 3, 5, (0, 3, 1), (0, 5, 1), (0, 10, 2)) == (None, False, False, True)


def test_batches_keep_their_strides_and_a_broadcast_input_has_stride_zero():
    call, *_ = plan_call(4, 2, 3, 5, (6, 3, 1), (0, 5, 1), (10, 5, 1))
    assert call.batch == 4
    assert (call.stride_a, call.stride_b, call.stride_c) == (0, 6, 10)  # P = bᵀ, Q = aᵀ


def test_an_out_whose_matrices_overlap_is_staged():
    assert plan_call(4, 2, 3, 5, (6, 3, 1), (15, 5, 1), (5, 5, 1))[3] is True

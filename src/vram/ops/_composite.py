"""Tensor ops built from vram's other ops, with torch's names, arguments and errors:
diagonal (a view), diag, diag_embed, trace, outer, flip, roll, einsum and tensordot.

- diagonal is a view (shape and strides only); diag and diag_embed write a diagonal view of
  a zeroed result.
- flip gathers along each flipped dimension (index_select); roll joins two narrowed views
  per dimension (cat).
- einsum names the dimensions an ellipsis covers with labels of their own, takes
  diagonals for labels repeated within an operand, sums labels no one else needs, then
  contracts operands left to right, each pair as one batched matrix product (permute +
  reshape + matmul), as PyTorch's einsum does without opt_einsum. Tensor methods reach
  matmul through the dispatch table (vram.blas sits above this layer).
"""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np

from .._factories import arange, zeros
from .._tensor import Tensor, dispatch
from .._views import wrap_dim
from ._args import require_tensor
from ._indexing import index_select
from ._math import mul
from ._reductions import sum as _sum
from ._shapes import cat

__all__ = [
    "diagonal",
    "diag",
    "diag_embed",
    "trace",
    "outer",
    "ger",
    "flip",
    "fliplr",
    "flipud",
    "roll",
    "einsum",
    "tensordot",
]


def _int(name: str, argument: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}(): argument '{argument}' must be int, not {type(value).__name__}")
    return int(value)


# ---- diagonals ------------------------------------------------------------------------------


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # noqa: A002
    """The diagonal of the (``dim1``, ``dim2``) matrices as the last dimension (a view):
    ``offset`` > 0 above the main diagonal, < 0 below."""
    require_tensor("diagonal", "input", input)
    return _diagonal(input, _int("diagonal", "offset", offset), dim1, dim2)


def _diagonal(input: Tensor, offset: int, dim1: Any, dim2: Any) -> Tensor:  # noqa: A002
    a, b = wrap_dim(dim1, input.ndim), wrap_dim(dim2, input.ndim)
    if a == b:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rows, cols = input._shape[a], input._shape[b]
    size = max(min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols), 0)
    start = input._offset
    if size > 0:
        start += offset * input._stride[b] if offset >= 0 else -offset * input._stride[a]
    rest = [k for k in range(input.ndim) if k not in (a, b)]
    shape = [input._shape[k] for k in rest] + [size]
    stride = [input._stride[k] for k in rest] + [input._stride[a] + input._stride[b]]
    return input._view(shape, stride, start)


def diag(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002
    """1-D ``input``: a square matrix with ``input`` on diagonal ``diagonal``; 2-D: that
    diagonal of ``input`` as a new 1-D tensor."""
    require_tensor("diag", "input", input)
    k = _int("diag", "diagonal", diagonal)
    if input.ndim == 1:
        n = input._shape[0] + abs(k)
        out = zeros((n, n), dtype=input.dtype, device=input.device)
        _diagonal(out, k, 0, 1).copy_(input)
        return out
    if input.ndim == 2:
        return _diagonal(input, k, 0, 1).clone()
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: A002
    """Each vector along ``input``'s last dimension as diagonal ``offset`` of the (``dim1``,
    ``dim2``) matrices of a new zeroed tensor with one more dimension."""
    require_tensor("diag_embed", "input", input)
    offset = _int("diag_embed", "offset", offset)
    ndim = input.ndim + 1
    a, b = wrap_dim(dim1, ndim), wrap_dim(dim2, ndim)
    if a == b:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = (input._shape[-1] if input.ndim else 1) + abs(offset)
    batch = iter(input._shape[:-1])
    shape = tuple(n if k in (a, b) else next(batch) for k in range(ndim))
    out = zeros(shape, dtype=input.dtype, device=input.device)
    _diagonal(out, offset, a, b).copy_(input)
    return out


def trace(input: Tensor) -> Tensor:  # noqa: A002
    """The sum of a matrix's main diagonal (integers sum to int64, as torch.sum)."""
    require_tensor("trace", "input", input)
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return _sum(_diagonal(input, 0, 0, 1))


def outer(input: Tensor, vec2: Tensor) -> Tensor:  # noqa: A002
    """``input[i] * vec2[j]`` for 1-D ``input`` and ``vec2`` (dtype: their promotion)."""
    require_tensor("outer", "input", input)
    require_tensor("outer", "vec2", vec2)
    for argument, t in (("self", input), ("vec2", vec2)):
        if t.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {argument}, but got {t.ndim}-D")
    return mul(input.unsqueeze(1), vec2)


ger = outer


# ---- flip and roll --------------------------------------------------------------------------


def _dim_list(name: str, dims: Any, ndim: int) -> list[int]:
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
        dims = (dims,)
    if not isinstance(dims, (tuple, list)):
        raise TypeError(
            f"{name}(): argument 'dims' must be tuple of ints, not {type(dims).__name__}"
        )
    wrapped = [wrap_dim(_int(name, "dims", d), ndim) for d in dims]
    for d in wrapped:
        if wrapped.count(d) > 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return wrapped


def flip(input: Tensor, dims: Any) -> Tensor:  # noqa: A002
    """A copy of ``input`` with the order of the elements along ``dims`` reversed."""
    require_tensor("flip", "input", input)
    wrapped = _dim_list("flip", dims, input.ndim)
    if input.ndim == 0:
        return input.clone()
    out = input
    for d in wrapped:
        n = input._shape[d]
        if n > 1:
            out = index_select(out, d, arange(n - 1, -1, -1, device=input.device))
    return input.clone() if out is input else out


def fliplr(input: Tensor) -> Tensor:  # noqa: A002
    """``flip(input, (1,))`` for a tensor of at least 2 dimensions."""
    require_tensor("fliplr", "input", input)
    if input.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(input, (1,))


def flipud(input: Tensor) -> Tensor:  # noqa: A002
    """``flip(input, (0,))`` for a tensor of at least 1 dimension."""
    require_tensor("flipud", "input", input)
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(input, (0,))


def _int_list(name: str, argument: str, values: Any) -> list[int]:
    if isinstance(values, (tuple, list)):
        return [_int(name, argument, v) for v in values]
    return [_int(name, argument, values)]


def roll(input: Tensor, shifts: Any, dims: Any = None) -> Tensor:  # noqa: A002
    """A copy of ``input`` with the elements along each of ``dims`` shifted by ``shifts``
    (wrapping around); with ``dims`` None the flattened tensor is rolled."""
    require_tensor("roll", "input", input)
    steps = _int_list("roll", "shifts", shifts)
    if not steps:
        raise RuntimeError("`shifts` required")
    if dims is None or (isinstance(dims, (tuple, list)) and len(dims) == 0):
        if len(steps) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(steps)}, dims:0")
        return roll(input.flatten(), steps, 0).view(input._shape)
    axes = [wrap_dim(d, input.ndim) for d in _int_list("roll", "dims", dims)]
    if len(steps) != len(axes):
        raise RuntimeError(
            f"shifts and dimensions must align. shifts: {len(steps)}, dims:{len(axes)}"
        )
    out = input
    for step, d in zip(steps, axes, strict=True):
        n = input._shape[d]
        if n == 0 or step % n == 0:
            continue
        s = step % n
        out = cat([out.narrow(d, n - s, s), out.narrow(d, 0, n - s)], d)
    return input.clone() if out is input else out


# ---- einsum and tensordot -------------------------------------------------------------------

_LETTERS = set(string.ascii_letters)


def _check_dots(term: str, where: str) -> None:
    """PyTorch's errors for a '.' that is not part of exactly one ``...``."""
    rest = term.replace("...", "", 1)
    if "." in rest:
        problem = (
            "for which an ellipsis was already found"
            if "..." in term
            else ("that is not part of any ellipsis")
        )
        raise RuntimeError(f"einsum(): found '.' for {where} {problem}")


def _parse(equation: str, count: int) -> tuple[list[str], str | None]:
    """The subscripts of each operand (``...`` kept) and of the output (None: implicit)."""
    for i, c in enumerate(equation):
        if c not in _LETTERS and c not in " ,->.":
            raise RuntimeError(
                f"einsum(): invalid subscript given at index {i} in the equation string, "
                "subscripts must be in [a-zA-Z]"
            )
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) > count:
        raise RuntimeError("einsum(): fewer operands were provided than specified in the equation")
    if len(terms) < count:
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    for i, term in enumerate(terms):
        if "-" in term or ">" in term:
            raise RuntimeError(f"einsum(): invalid equation {equation!r} ('->' expected)")
        _check_dots(term, f"operand {i}")
    if not arrow:
        return terms, None
    if "," in rhs or "-" in rhs or ">" in rhs:
        raise RuntimeError(f"einsum(): invalid output subscripts {rhs!r} in {equation!r}")
    _check_dots(rhs, "output")
    letters = rhs.replace("...", "")
    for c in letters:
        if letters.count(c) > 1:
            raise RuntimeError(
                f"einsum(): output subscript {c} appears more than once in the output"
            )
        if c not in lhs:
            raise RuntimeError(
                f"einsum(): output subscript {c} does not appear in the equation for any input "
                "operand"
            )
    return terms, rhs


def _expand_ellipses(
    terms: list[str], output: str | None, tensors: list[Tensor]
) -> tuple[list[str], str]:
    """Each ``...`` replaced by labels of its own (characters outside [a-zA-Z]) for the
    dimensions it covers, aligned to the right across operands as PyTorch broadcasts them;
    the implicit output: those dimensions, then the labels seen once in alphabetical order
    (upper case first)."""
    covered = []
    for i, (term, t) in enumerate(zip(terms, tensors, strict=True)):
        named = len(term.replace("...", ""))
        if "..." not in term:
            if named != t.ndim:
                raise RuntimeError(
                    f"einsum(): the number of subscripts in the equation ({named}) does not "
                    f"match the number of dimensions ({t.ndim}) for operand {i} and no "
                    "ellipsis was given"
                )
            covered.append(0)
        elif named > t.ndim:
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation ({named}) is more than the "
                f"number of dimensions ({t.ndim}) for operand {i}"
            )
        else:
            covered.append(t.ndim - named)
    width = max(covered)
    ellipsis = "".join(chr(0x100 + k) for k in range(width))
    expanded = [
        term.replace("...", ellipsis[width - n :]) for term, n in zip(terms, covered, strict=True)
    ]
    if output is not None:
        return expanded, output.replace("...", ellipsis)
    letters = "".join(term.replace("...", "") for term in terms)
    once = sorted(c for c in set(letters) if letters.count(c) == 1)
    return expanded, ellipsis + "".join(once)


def _take_diagonals(x: Tensor, labels: str, index: int) -> tuple[Tensor, str]:
    """``x`` with each label repeated within it taken once (its diagonal)."""
    while True:
        repeated = next((c for c in labels if labels.count(c) > 1), None)
        if repeated is None:
            return x, labels
        a = labels.index(repeated)
        b = labels.index(repeated, a + 1)
        if x._shape[a] != x._shape[b]:
            raise RuntimeError(
                f"einsum(): subscript {repeated} is repeated for operand {index} but the sizes "
                f"don't match, {x._shape[b]} != {x._shape[a]}"
            )
        x = _diagonal(x, 0, a, b)
        labels = "".join(c for k, c in enumerate(labels) if k not in (a, b)) + repeated


def _contract(x: Tensor, xl: str, y: Tensor, yl: str, keep: set[str]) -> tuple[Tensor, str]:
    """Two operands contracted over their shared labels not in ``keep``, as one batched
    matrix product [batch, left, summed] @ [batch, summed, right]."""
    batch = [c for c in xl if c in yl and c in keep]
    summed = [c for c in xl if c in yl and c not in keep]
    left = [c for c in xl if c not in yl]
    right = [c for c in yl if c not in xl]
    size = {c: n for c, n in zip(xl, x._shape, strict=True)}
    size.update(zip(yl, y._shape, strict=True))

    def grouped(t: Tensor, labels: str, groups: tuple[list[str], ...]) -> Tensor:
        order = [labels.index(c) for g in groups for c in g]
        shape = [math.prod(size[c] for c in g) for g in groups]
        return t.permute(order).reshape(shape)

    a = grouped(x, xl, (batch, left, summed))
    b = grouped(y, yl, (batch, summed, right))
    product = a.matmul(b)
    labels = "".join(batch + left + right)
    return product.reshape([size[c] for c in labels]), labels


def _broadcast_labels(operands: list[Tensor], terms: list[str]) -> list[Tensor]:
    """Size-1 dimensions expanded to their label's size elsewhere (PyTorch broadcasts them)."""
    size: dict[str, int] = {}
    for i, (t, labels) in enumerate(zip(operands, terms, strict=True)):
        for c, n in zip(labels, t._shape, strict=True):
            seen = size.setdefault(c, n)
            if n != seen and 1 not in (n, seen):
                name = f"subscript {c}" if c in _LETTERS else "a dimension covered by ellipsis"
                raise RuntimeError(
                    f"einsum(): {name} has size {n} for operand {i} which does not broadcast "
                    f"with previously seen size {seen}"
                )
            size[c] = max(seen, n) if 1 in (seen, n) else n
    return [
        t.expand([size[c] for c in labels]) if t.ndim else t
        for t, labels in zip(operands, terms, strict=True)
    ]


def einsum(equation: str, *operands: Any) -> Tensor:
    """torch.einsum: explicit (``"ij,jk->ik"``) or implicit (``"ij,jk"``) outputs, ``...``
    for broadcast dimensions, repeated labels within an operand (diagonals), size-1
    dimensions broadcast, sums and batched contractions of any number of operands."""
    if not isinstance(equation, str):
        raise TypeError(f"einsum(): argument 'equation' must be str, not {type(equation).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise RuntimeError("einsum(): must provide at least one operand")
    for i, t in enumerate(operands):
        require_tensor("einsum", f"operands[{i}]", t)
    parsed, explicit = _parse(equation, len(operands))
    tensors = list(operands)
    terms, output = _expand_ellipses(parsed, explicit, tensors)
    for i, (t, labels) in enumerate(zip(tensors, terms, strict=True)):
        tensors[i], terms[i] = _take_diagonals(t, labels, i)
    tensors = _broadcast_labels(tensors, terms)
    for i, labels in enumerate(terms):  # labels no other operand nor the output needs
        others = set(output).union(*(terms[k] for k in range(len(terms)) if k != i))
        alone = [k for k, c in enumerate(labels) if c not in others]
        if alone:
            tensors[i] = _sum(tensors[i], alone)
            terms[i] = "".join(c for c in labels if c in others)
    x, labels = tensors[0], terms[0]
    for k in range(1, len(tensors)):
        keep = set(output).union(*terms[k + 1 :])
        x, labels = _contract(x, labels, tensors[k], terms[k], keep)
    return x.permute([labels.index(c) for c in output]) if x.ndim else x


def tensordot(a: Tensor, b: Tensor, dims: Any = 2) -> Tensor:
    """``a`` and ``b`` contracted over ``dims``: an int n (``a``'s last n with ``b``'s first
    n) or two lists of dimensions, as one matrix product."""
    require_tensor("tensordot", "a", a)
    require_tensor("tensordot", "b", b)
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
        n = int(dims)
        if n < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={n}")
        if n > min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={n}")
        da, db = list(range(a.ndim - n, a.ndim)), list(range(n))
    elif isinstance(dims, (tuple, list)) and len(dims) == 2:
        da = [wrap_dim(d, a.ndim) for d in _int_list("tensordot", "dims", dims[0])]
        db = [wrap_dim(d, b.ndim) for d in _int_list("tensordot", "dims", dims[1])]
    else:
        raise RuntimeError(
            f"tensordot expects dims to be an int or a pair of lists of dimensions, got {dims!r}"
        )
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    for x, y in zip(da, db, strict=True):
        if a._shape[x] != b._shape[y]:
            raise RuntimeError(
                f"contracted dimensions need to match, but first has size {a._shape[x]} in dim "
                f"{x} and second has size {b._shape[y]} in dim {y}"
            )
    free_a = [k for k in range(a.ndim) if k not in da]
    free_b = [k for k in range(b.ndim) if k not in db]
    inner = math.prod(a._shape[k] for k in da)
    left = a.permute(free_a + da).reshape(math.prod(a._shape[k] for k in free_a), inner)
    right = b.permute(db + free_b).reshape(inner, math.prod(b._shape[k] for k in free_b))
    shape = [a._shape[k] for k in free_a] + [b._shape[k] for k in free_b]
    return left.matmul(right).reshape(shape)


dispatch.update(
    diagonal=diagonal,
    diag=diag,
    diag_embed=diag_embed,
    trace=trace,
    outer=outer,
    ger=ger,
    flip=flip,
    fliplr=fliplr,
    flipud=flipud,
    roll=roll,
)

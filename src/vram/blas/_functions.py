"""Matrix products with PyTorch's names and meanings: mm, matmul, bmm, addmm, baddbmm.

Each checks PyTorch's contract first (``_checks``: errors name the argument), then queues
one GEMM on the current stream of the tensors' device (``_ops.gemm``). Nothing here
synchronizes. Zero-size problems make no library call: M or N = 0 gives an empty result,
K = 0 gives ``beta * input`` (zeros for mm, bmm and matmul).

Note [mm's plans]: ``mm`` is the call whose host time matters most (small products, a
GEMM per layer). What its checks and the GEMM's plan depend on is the operands' (and
``out``'s) shapes, strides, dtypes, devices and pointer alignment, and the generations of
the settings and of TunableOp; with those as the key (the first four as the tensors'
signature ids, which the pointwise ops key on too), a per-thread dict keeps the plan and
the result's layout of each problem that passed the checks once. A repeated call is then
this key, one dict lookup, the allocation the pointwise ops make (``ops._plans.new_tensor``)
and the plan's call: nothing is checked again, no setting is read, no object is made but
the key (and the result). An ``out`` that shares an operand's storage always takes the
full checks.

``addmm`` and ``linear`` keep their problems the same way (with the bias's shape, strides,
dtype and device, beta, alpha and the activation in addmm's key; linear, whose beta, alpha
and activation are fixed, keeps its own dict without them): a layer's product with its bias
is then as cheap to queue as ``mm``, the key made and looked up in the op's own frame.
``linear`` keeps only plans that read the operands by their pointers, so that a repeated
call makes neither the rows view nor ``weight.t()``.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from .._streams import this_thread
from .._tensor import Tensor, broadcast_shapes, contiguous_strides, dispatch
from ..backends import cuda as _backends
from ..ops._plans import new_tensor, stream_handle
from ..ops._pointwise import signature_id
from . import _checks, _tunable
from ._ops import GEMM_DTYPES, fuses_residual, gemm, plan_for, product_plan

__all__ = ["mm", "matmul", "bmm", "addmm", "baddbmm"]

_DTYPES = frozenset(d.name for d in GEMM_DTYPES)
_MAX_PLANS = 512  # mm problems remembered per thread; the oldest is dropped beyond
_ALIGN_MASK = 255  # pointer bits below the largest alignment a plan asks about (256 bytes)
_PLAIN_SCALARS = (int, float)  # beta and alpha of these exact types may be in a key


class _Plans(threading.local):
    def __init__(self) -> None:
        self.mm: dict[tuple, tuple[Any, tuple[int, int], tuple[int, int], int, int]] = {}
        # addmm's and linear's: key -> mm's entry and the checked beta and alpha
        self.add: dict[tuple, tuple] = {}
        self.linear: dict[tuple, tuple] = {}


_plans = _Plans()


def clear_plans() -> None:
    """Forget this thread's mm, addmm and linear problems (see Note [mm's plans])."""
    _plans.mm.clear()
    _plans.add.clear()
    _plans.linear.clear()


def _remember(plans: dict, key: tuple, value: tuple) -> None:
    if len(plans) >= _MAX_PLANS:
        del plans[next(iter(plans))]
    plans[key] = value


def _result(
    op: str,
    out: Tensor | None,
    shape: tuple[int, ...],
    ref: Tensor,
    inputs: list[tuple[str, Tensor]],
) -> tuple[Tensor, Tensor]:
    """(the tensor to write, the tensor to return): ``out`` itself, or a new tensor (and
    ``out`` filled from it afterwards when their memory might interleave)."""
    if out is None:
        return Tensor._empty(shape, ref.dtype, ref.device), None  # type: ignore[return-value]
    out = _checks.tensor_arg(op, "out", out)
    _checks.same_dtype_and_device(op, [*inputs, ("out", out)])
    if _checks.check_out(op, out, shape, inputs):
        return Tensor._empty(shape, ref.dtype, ref.device), out
    return out, None  # type: ignore[return-value]


def _plain_out(out: object, shape: tuple[int, ...], a: Tensor, b: Tensor) -> bool:
    """The common ``out=``: a contiguous tensor of the result's shape, dtype and device,
    over memory of its own (so that ``_result``'s full checks have nothing to find)."""
    return (
        type(out) is Tensor
        and out.shape == shape
        and out.dtype is a.dtype
        and out.device == a.device
        and out.stride() == contiguous_strides(shape)
        and out._storage is not a._storage
        and out._storage is not b._storage
    )


def _finish(target: Tensor, out: Tensor | None) -> Tensor:
    if out is None:
        return target
    out.copy_(target)
    return out


def _check_pair(op: str, names: tuple[str, str], a: Any, b: Any, ndim: int) -> None:
    a = _checks.tensor_arg(op, names[0], a)
    b = _checks.tensor_arg(op, names[1], b)
    _checks.rank(op, names[0], a, ndim)
    _checks.rank(op, names[1], b, ndim)
    _checks.same_dtype_and_device(op, [(names[0], a), (names[1], b)])
    _checks.inner_dims(op, names, a, b)
    if ndim == 3 and a.shape[0] != b.shape[0]:
        raise RuntimeError(
            f"{op}: '{names[0]}' and '{names[1]}' must have the same number of batches, "
            f"got {a.shape[0]} and {b.shape[0]}"
        )


def mm(input: Tensor, mat2: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input`` [M, K] @ ``mat2`` [K, N] -> [M, N] (torch.mm), into ``out`` if given."""
    try:  # the key of Note [mm's plans]; anything but tensors takes the checks below
        dt = input.dtype
        size = dt.itemsize
        pa = input._storage.ptr + input._offset * size
        pb = mat2._storage.ptr + mat2._offset * size
        if out is None:
            key: tuple | None = (
                input._sig or signature_id(input), mat2._sig or signature_id(mat2),
                (pa | pb) & _ALIGN_MASK, _backends.generation, _tunable.state.generation,
            )  # fmt: skip
        else:
            so = out._storage
            po = so.ptr + out._offset * size
            key = (
                input._sig or signature_id(input), mat2._sig or signature_id(mat2),
                (pa | pb | po) & _ALIGN_MASK, _backends.generation,
                _tunable.state.generation, out._sig or signature_id(out),
            )  # fmt: skip
            if so is input._storage or so is mat2._storage:  # shares an operand's: checked
                key = None
    except AttributeError:
        key = None
    found = _plans.mm.get(key)  # type: ignore[arg-type]
    if found is not None:
        plan, shape, stride, nbytes, sig = found
        device = input._storage.device  # (the stream asked once: the result, the product)
        stream = this_thread.handles[device]
        if out is None:
            out = new_tensor(shape, stride, dt, device, nbytes, stream, sig)
            po = out._storage.ptr
            if po & _ALIGN_MASK:  # less aligned than the plan may assume
                gemm(out, input, mat2, None, 0.0, 1.0, 0)
                return out
        plan.product(out, input, mat2, pa, pb, po, stream)
        return out
    return _checked_mm(input, mat2, out, key)


def _checked_mm(input: Any, mat2: Any, out: Any, key: tuple | None) -> Tensor:  # noqa: A002
    """mm with every check; keeps the problem's plan when ``key`` names it."""
    if (
        type(input) is not Tensor
        or type(mat2) is not Tensor
        or len(input.shape) != 2
        or len(mat2.shape) != 2
        or input.dtype is not mat2.dtype
        or input.device != mat2.device
        or input.shape[1] != mat2.shape[0]
        or input.dtype.name not in _DTYPES
    ):
        _check_pair("mm", ("input", "mat2"), input, mat2, 2)
    shape = (input.shape[0], mat2.shape[1])
    if out is None:
        target, final = Tensor._empty(shape, input.dtype, input.device), None
    elif _plain_out(out, shape, input, mat2):
        target, final = out, None
    else:
        target, final = _result("mm", out, shape, input, [("input", input), ("mat2", mat2)])
    if shape[0] and shape[1]:
        if key is None or final is not None or not input.shape[1]:
            gemm(target, input, mat2, None, 0.0, 1.0, 0)
        else:
            pa, pb, po = input.data_ptr(), mat2.data_ptr(), target.data_ptr()
            plan = product_plan(target, input, mat2, pa | pb | po)
            nbytes = math.prod(shape) * target.dtype.itemsize
            _remember(_plans.mm, key, (plan, shape, target._stride, nbytes, signature_id(target)))
            plan.product(target, input, mat2, pa, pb, po, stream_handle(target.device))
    return _finish(target, final)


def bmm(input: Tensor, mat2: Tensor, *, out: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input`` [B, M, K] @ ``mat2`` [B, K, N] -> [B, M, N] (torch.bmm)."""
    _check_pair("bmm", ("input", "mat2"), input, mat2, 3)
    shape = (input.shape[0], input.shape[1], mat2.shape[2])
    target, final = _result("bmm", out, shape, input, [("input", input), ("mat2", mat2)])
    if math.prod(shape):
        gemm(target, input, mat2, None, 0.0, 1.0, 0)
    return _finish(target, final)


def addmm(
    input: Tensor,  # noqa: A002
    mat1: Tensor,
    mat2: Tensor,
    *,
    beta: float = 1,
    alpha: float = 1,
    out: Tensor | None = None,
    activation: str | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """``act(beta * input + alpha * (mat1 @ mat2) + bias)`` (torch.addmm; ``activation``
    "relu" or "gelu" is PyTorch's ``_addmm_activation``, fused into cuBLASLt's epilogue
    where it can be). ``input`` broadcasts to [M, N]; with ``beta == 0`` it is not read.

    ``bias`` (vram's, None by default) broadcasts to [M, N] too. With ``input`` a residual
    of the result's shape and ``bias`` a row of N, the three are one cuBLASLt call (C read
    where it is, the row its BIAS epilogue's): ``x + F.linear(h, w, b)`` is
    ``addmm(x, h, w.t(), bias=b)`` with one result, one kernel."""
    key = None
    if (
        out is None
        and type(beta) in _PLAIN_SCALARS
        and type(alpha) in _PLAIN_SCALARS
        and (activation is None or type(activation) is str)
    ):
        try:  # the key of Note [mm's plans]; anything but tensors takes the checks below
            pa = mat1._storage.ptr + mat1._offset * mat1.dtype.itemsize
            pb = mat2._storage.ptr + mat2._offset * mat2.dtype.itemsize
            pc = input._storage.ptr + input._offset * input.dtype.itemsize
            pr = 0 if bias is None else bias._storage.ptr + bias._offset * bias.dtype.itemsize
            key = (
                mat1._sig or signature_id(mat1), mat2._sig or signature_id(mat2),
                input._sig or signature_id(input), (pa | pb | pc | pr) & _ALIGN_MASK, beta,
                alpha, activation, _backends.generation, _tunable.state.generation,
                None if bias is None else bias._sig or signature_id(bias),
            )  # fmt: skip
        except AttributeError:
            key = None
        found = _plans.add.get(key)  # type: ignore[arg-type]
        if found is not None:
            plan, shape, stride, nbytes, sig, checked_beta, checked_alpha = found
            device = input._storage.device  # (the stream asked for once: result, product)
            stream = this_thread.handles[device]
            result = new_tensor(shape, stride, input.dtype, device, nbytes, stream, sig)
            po = result._storage.ptr
            if not po & _ALIGN_MASK:  # (else less aligned than the plan may assume: checked)
                plan.run(result, mat1, mat2, input, checked_beta, checked_alpha, pa, pb, pc, po,
                         stream, bias, pr)  # fmt: skip
                return result
    names = ("input", "mat1", "mat2")
    return _add_product(
        "addmm", names, input, mat1, mat2, beta, alpha, out, 2, activation, key, row=bias
    )


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input @ weight.T + bias`` (torch.nn.functional.linear): ``input`` [*, in_features],
    ``weight`` [out_features, in_features], ``bias`` [out_features] or None.

    With a bias the product and the bias are one GEMM (addmm, cuBLASLt's BIAS epilogue where
    it applies): leading dimensions of ``input`` are folded into the rows, as PyTorch does."""
    key = None
    if bias is not None:
        try:  # addmm's key of Note [mm's plans], less what linear fixes (beta, alpha, act)
            pa = input._storage.ptr + input._offset * input.dtype.itemsize
            pb = weight._storage.ptr + weight._offset * weight.dtype.itemsize
            pc = bias._storage.ptr + bias._offset * bias.dtype.itemsize
            key = (
                input._sig or signature_id(input), weight._sig or signature_id(weight),
                bias._sig or signature_id(bias), (pa | pb | pc) & _ALIGN_MASK,
                _backends.generation, _tunable.state.generation,
            )  # fmt: skip
        except AttributeError:
            key = None
        found = _plans.linear.get(key)  # type: ignore[arg-type]
        if found is not None:
            plan, shape, stride, nbytes, sig, beta, alpha = found
            device = bias._storage.device  # (the stream asked for once: result, product)
            stream = this_thread.handles[device]
            out = new_tensor(shape, stride, bias.dtype, device, nbytes, stream, sig)
            po = out._storage.ptr
            if not po & _ALIGN_MASK:  # (else less aligned than the plan may assume: checked)
                plan.run(out, None, None, bias, beta, alpha, pa, pb, pc, po, stream)
                return out
    x = _checks.tensor_arg("linear", "input", input)
    w = _checks.tensor_arg("linear", "weight", weight)
    _checks.rank("linear", "weight", w, 2)
    if x.ndim == 0:
        raise RuntimeError("linear: 'input' must have at least 1 dimension, got a 0-D tensor")
    if x.shape[-1] != w.shape[1]:
        raise RuntimeError(
            f"linear: 'input' has {x.shape[-1]} features in its last dimension, but 'weight' "
            f"of shape {tuple(w.shape)} expects {w.shape[1]}"
        )
    if bias is None:
        return matmul(x, w.t())
    b = _checks.tensor_arg("linear", "bias", bias)
    rows = x.reshape(-1, x.shape[-1])
    if rows._storage is not x._storage or rows._offset != x._offset:
        key = None  # (the rows are a copy: the next call's pointers are not input's)
    names = ("input", "mat1", "mat2")
    shape = (*x.shape[:-1], w.shape[0])
    product = _add_product("addmm", names, b, rows, w.t(), 1, 1, None, 2, None, key, shape)
    return product.view(shape)


def baddbmm(
    input: Tensor,  # noqa: A002
    batch1: Tensor,
    batch2: Tensor,
    *,
    beta: float = 1,
    alpha: float = 1,
    out: Tensor | None = None,
) -> Tensor:
    """``beta * input + alpha * (batch1 @ batch2)`` (torch.baddbmm); ``input`` broadcasts
    to [B, M, N]."""
    names = ("input", "batch1", "batch2")
    return _add_product("baddbmm", names, input, batch1, batch2, beta, alpha, out, 3, None)


def _add_product(
    op: str,
    names: tuple[str, str, str],
    bias: Any,
    a: Any,
    b: Any,
    beta: Any,
    alpha: Any,
    out: Tensor | None,
    ndim: int,
    activation: str | None,
    key: tuple | None = None,
    linear_shape: tuple[int, ...] | None = None,
    row: Any = None,
) -> Tensor:
    """The checked product; with ``key`` (no ``out``), its plan remembered under it for
    ``addmm`` (or for ``linear``, whose results have ``linear_shape``); ``row``: addmm's
    ``bias``."""
    bias = _checks.tensor_arg(op, names[0], bias)
    _check_pair(op, names[1:], a, b, ndim)
    _checks.same_dtype_and_device(op, [(names[1], a), (names[0], bias)])
    beta = _checks.scalar(op, "beta", beta)
    alpha = _checks.scalar(op, "alpha", alpha)
    act = _checks.activation_code(op, activation)
    shape = (*a.shape[:-1], b.shape[-1])
    _checks.bias_broadcasts(op, names[0], bias, shape)
    read = [bias]
    if row is not None:
        row = _checks.tensor_arg(op, "bias", row)
        _checks.same_dtype_and_device(op, [(names[1], a), ("bias", row)])
        _checks.bias_broadcasts(op, "bias", row, shape)
        read.append(row)
    inputs = [(names[1], a), (names[2], b)]
    target, final = _result(op, out, shape, a, inputs)
    if final is None and out is not None and _checks.needs_temp(target, read):
        # input overlaps out without being out: read it before out is written
        target, final = Tensor._empty(shape, a.dtype, a.device), out
    if not math.prod(shape):
        return _finish(target, final)
    if (
        key is None
        or out is not None
        or not a.shape[-1]
        or row is not None
        and (beta == 0 or not fuses_residual(target, bias, row))
    ):
        gemm(target, a, b, bias, beta, alpha, act, -1, row)
        return _finish(target, final)
    pa, pb, po = a.data_ptr(), b.data_ptr(), target.data_ptr()
    plan = plan_for(target, a, b, bias, beta, act, -1, pa | pb | po, row)
    if not po & _ALIGN_MASK and (linear_shape is None or plan.reads_pointers_only):
        # (a plan for a less aligned result is not what the key's next calls may assume)
        final_shape = linear_shape or shape
        stride = contiguous_strides(final_shape)
        nbytes = math.prod(final_shape) * target.dtype.itemsize
        sig = signature_id(target if linear_shape is None else target.view(final_shape))
        plans = _plans.add if linear_shape is None else _plans.linear
        _remember(plans, key, (plan, final_shape, stride, nbytes, sig, beta, alpha))
    pc, pr = bias.data_ptr(), 0 if row is None else row.data_ptr()
    plan.run(target, a, b, bias, beta, alpha, pa, pb, pc, po, stream_handle(target.device), row,
             pr)  # fmt: skip
    return target


# ---- matmul -----------------------------------------------------------------------------------


def _batch_view(t: Tensor, batch: tuple[int, ...]) -> Tensor:
    """``t`` [*batch, r, c] as [prod(batch), r, c]: a view when the batch dimensions walk
    memory with one stride (or none), else a contiguous copy (as PyTorch's reshape)."""
    count = math.prod(batch)
    rows, cols = t.shape[-2], t.shape[-1]
    dims = [(n, s) for n, s in zip(t.shape[:-2], t.stride()[:-2], strict=True) if n > 1]
    stride = dims[-1][1] if dims else 0
    pairs = zip(dims, dims[1:], strict=False)
    mergeable = all(outer == inner * n for (_, outer), (n, inner) in pairs)
    if not mergeable:
        return t.contiguous().view(count, rows, cols)
    s = t.stride()
    return t._view((count, rows, cols), (stride, s[-2], s[-1]), t.storage_offset())


def matmul(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """torch.matmul: 1-D @ 1-D is a dot product (0-D), a 1-D operand is a row (left) or a
    column (right) that the result drops, and N-D operands broadcast their batch
    dimensions: [*b1, M, K] @ [*b2, K, N] -> [*broadcast(b1, b2), M, N]."""
    if (
        type(input) is Tensor
        and type(other) is Tensor
        and len(input._shape) == len(other._shape) == 2
    ):
        return mm(input, other)
    a = _checks.tensor_arg("matmul", "input", input)
    b = _checks.tensor_arg("matmul", "other", other)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(
            f"matmul: both arguments need at least 1 dimension, got 'input' {a.ndim}-D and "
            f"'other' {b.ndim}-D"
        )
    _checks.same_dtype_and_device("matmul", [("input", a), ("other", b)])
    a2 = a.view(1, a.shape[0]) if a.ndim == 1 else a
    b2 = b.view(b.shape[0], 1) if b.ndim == 1 else b
    _checks.inner_dims("matmul", ("input", "other"), a2, b2)
    m, n = a2.shape[-2], b2.shape[-1]
    drop = (() if a.ndim > 1 else (-2,)) + (() if b.ndim > 1 else (-1,))
    if b2.ndim == 2:  # fold input's batch dimensions into M (PyTorch's folding)
        flat = a2.reshape(-1, a2.shape[-1])
        result = mm(flat, b2).view(*a2.shape[:-1], n)
    else:
        try:
            batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        except ValueError:
            raise RuntimeError(
                f"matmul: the batch dimensions of 'input' {tuple(a.shape)} and 'other' "
                f"{tuple(b.shape)} cannot be broadcast together"
            ) from None
        k = a2.shape[-1]
        a3 = _batch_view(a2.expand(*batch, m, k), batch)
        b3 = _batch_view(b2.expand(*batch, k, n), batch)
        out = Tensor._empty((a3.shape[0], m, n), a.dtype, a.device)
        if out.numel():
            gemm(out, a3, b3, None, 0.0, 1.0, 0)
        result = out.view(*batch, m, n)
    if drop:
        shape = list(result.shape)
        for d in sorted(drop):
            del shape[d]
        result = result.view(*shape) if shape else result.view(())
    return result


# Tensor methods (``@``, ``.matmul``, ``.mm``) reach these through the dispatch table.
dispatch.update(matmul=matmul, mm=mm)

"""The pointwise engine: every elementwise op as one functor (kernels/pointwise.cu) run by
the loops of kernels/loops.cuh, planned by the TensorIterator, called through the plan cache.

An op is a ``PointwiseOp``: its functor, how many tensor inputs it takes, its scalar fields
(``alpha``, ``value``), its dtype rule and a NumPy function that computes the same as the
functor (the reference the simulated GPU and the cpu device run). Python numbers may stand
for tensor operands: they become fields of a wrapper functor (``ScalarB<Add<float>>`` for
``a + 2``), so a number costs no tensor and no launch.

Dtype rules (``Rule``): ``promote`` (the result type of the operands), ``float`` (integers
and bool promote to the default float dtype), ``compare`` and ``logical`` (bool results),
``integral`` (bool and integers only), ``same`` (the output's dtype: fill), ``source`` (the
input's dtype: copy). Arithmetic runs in the opmath type (float32 for float16 and bfloat16).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from .._device import Device
from .._dtypes import (
    bfloat16,
    bool_,
    complex64,
    complex128,
    dtype,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from .._streams import this_thread
from .._tensor import Tensor, layout_id, signature_id
from ..driver._work import Arg, Kernel, Launch, View
from . import _kernels
from ._iterator import (
    broadcast_shape,
    check_overlap,
    has_internal_overlap,
    operand_strides,
    output_strides,
    pack_strided,
    plan_layout,
)
from ._plans import PLANS, launcher, new_tensor
from ._promotion import ZeroDim, can_cast, get_default_dtype, kind, opmath, result_type
from ._tiled import tiled_launch

__all__ = [
    "PointwiseOp",
    "PointwisePlan",
    "run",
    "plan_for",
    "source",
    "signature_id",
    "binary_operator",
    "inplace_operator",
    "unary_operator",
    "ternary_operator",
    "VecLoop",
    "VEC_LOOP",
]

_BLOCK = 256  # threads per block (the loops' __launch_bounds__)
_WAVES = 16  # blocks per multiprocessor a grid-stride launch takes at most


@dataclass(frozen=True, slots=True)
class VecLoop:
    """How ``pointwise_vec`` is launched: ``unroll`` 16-byte packs of each operand a thread
    loads before it computes, ``block`` threads per block (at most ``_BLOCK``), ``waves``
    blocks per multiprocessor at most (0: a block per ``block * unroll`` packs, no
    grid-stride)."""

    unroll: int
    block: int
    waves: int


# The launch every plan takes, as PyTorch's vectorized loop: blocks of 128 threads, a 16-byte
# pack of each operand a thread, no grid-stride; the best of bench/kernel_sweep.py's choices
# (a grid bounded at 16 blocks of 256 a multiprocessor kept too few loads in flight).
VEC_LOOP = VecLoop(unroll=1, block=128, waves=0)

# the struct format of a functor field of each compute dtype, and how a number becomes it
_FORMATS = {
    float16: "e",
    bfloat16: "H",
    float32: "f",
    float64: "d",
    int8: "b",
    int16: "h",
    int32: "i",
    int64: "q",
    uint8: "B",
    bool_: "?",
    complex64: "ff",
    complex128: "dd",
}
_F32_MAX = 3.4028234663852886e38


def _to_float32(v: Any) -> float:
    """A number as struct's "f" takes it: beyond float32's range it is +-inf (or NaN)."""
    v = float(v.real) if isinstance(v, complex) else float(v)
    return v if -_F32_MAX <= v <= _F32_MAX else float(np.float32(v))


def _wrap(bits: int, signed: bool) -> Callable[[Any], int]:
    mask, half = (1 << bits) - 1, 1 << (bits - 1)
    if signed:
        return lambda v: ((int(v.real if isinstance(v, complex) else v) + half) & mask) - half
    return lambda v: int(v.real if isinstance(v, complex) else v) & mask


def _bf16_bits(v: Any) -> int:
    return int(np.array(float(v), dtype=bfloat16.np).view(np.uint16))


def _to_half(v: Any) -> float:
    return float(np.float16(float(v)))


_CONVERT: dict[dtype, Callable[[Any], Any]] = {
    float16: _to_half,
    bfloat16: _bf16_bits,
    float32: _to_float32,
    float64: lambda v: float(v.real) if isinstance(v, complex) else float(v),
    int8: _wrap(8, True),
    int16: _wrap(16, True),
    int32: _wrap(32, True),
    int64: _wrap(64, True),
    uint8: _wrap(8, False),
    bool_: lambda v: bool(v),
    complex64: complex,
    complex128: complex,
}


@cache
def source() -> str:
    """The pointwise kernels' source: the shared header, the loops and the functors."""
    folder = _kernels.KERNEL_DIR
    return "".join(
        (folder / name).read_text() for name in ("common.cuh", "loops.cuh", "pointwise.cu")
    )


@dataclass(frozen=True, eq=False)
class PointwiseOp:
    """An elementwise op: ``functor`` (kernels/pointwise.cu) over ``arity`` inputs with
    ``fields`` (scalars of the compute type), ``numpy(*inputs, *fields)`` computing the same
    in the compute dtype, ``rule`` its dtypes, ``kinds`` the input kinds it takes (0 bool,
    1 integer, 2 floating point, 3 complex)."""

    name: str
    functor: str
    arity: int
    numpy: Callable[..., Any]
    rule: str = "promote"
    fields: tuple[str, ...] = ()
    kinds: frozenset[int] = frozenset((0, 1, 2, 3))
    unsupported: str = ""  # PyTorch's message for bool inputs where it has one

    def check_kind(self, dt: dtype) -> None:
        if kind(dt) in self.kinds:
            return
        if kind(dt) == 0 and self.unsupported:
            raise RuntimeError(self.unsupported)
        raise NotImplementedError(f"{self.name}: not implemented for {dt} tensors")


# How numbers standing for tensor operands are held: by the positions of the numbers ("S")
# among the operands ("T" a tensor), the wrapper functor around the op's own.
_WRAPPERS = {
    "TS": "ScalarB",
    "ST": "ScalarA",
    "TST": "BindMiddle",
    "TTS": "BindLast",
    "TSS": "BindLastTwo",
}


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, Tensor)


class PointwisePlan:
    """One signature of one op: what ``run`` needs for every call of it."""

    __slots__ = (
        "op",
        "device",
        "shape",
        "out_dtype",
        "out_stride",
        "nbytes",
        "numel",
        "items",
        "positions",
        "converts",
        "flatten",
        "run",
        "vec",
        "writes_temp",
        "checks",
        "out_sig",
        "fields",
        "values",
        "launches",
    )

    def __init__(
        self, op: PointwiseOp, operands: tuple, out: Tensor | None, loop: VecLoop = VEC_LOOP
    ) -> None:
        self.op = op
        form = "".join("S" if _scalar_like(v) else "T" for v in operands)
        if "T" not in form and out is None:
            raise TypeError(f"{op.name}: expected at least one tensor operand")
        tensors = [v for v in operands if not _scalar_like(v)]
        device = _device_of(op, tensors, out)
        self.device = device
        shape = broadcast_shape([t._shape for t in tensors]) if tensors else out._shape
        common, compute, result = _dtypes(op, operands, out)
        if out is not None:
            _check_out(op, out, shape, result)
            if has_internal_overlap(out):
                raise RuntimeError(
                    "unsupported operation: more than one element of the written-to tensor "
                    "refers to a single memory location. Please clone() the tensor before "
                    "performing the operation."
                )
        # with an output of another dtype than the result's (out=, in place), the result is
        # rounded to its own dtype first, as PyTorch does, through a temporary
        self.writes_temp = out is not None and out.dtype is not result and op.rule != "same"
        target = None if self.writes_temp else out
        self.shape = shape
        self.out_dtype = result
        strides = [operand_strides(t, shape) for t in tensors]
        if target is not None:
            self.out_stride = target._stride
        else:
            self.out_stride = output_strides(
                shape, list(zip((t._shape for t in tensors), strides, strict=True))
            )
        self.numel = math.prod(shape)
        self.nbytes = _extent(shape, self.out_stride) * result.itemsize
        self.items = tuple(t.dtype.itemsize for t in tensors)
        self.positions = form
        self.checks = out is not None and not self.writes_temp and bool(tensors)
        self.out_sig = layout_id(result, shape, self.out_stride, device)  # of the outputs it makes
        self.fields: Any = None  # the last fields converted, by identity (operators reuse one)
        self.values: tuple = ()
        # the functor and its fields
        functor = f"vram::{op.functor}<{_kernels.c_type(compute)}>"
        wrapper = _WRAPPERS.get(form) if "S" in form and "T" in form else None
        if "S" in form and wrapper is None:
            raise TypeError(f"{op.name}: a number cannot stand for operand(s) {form}")
        if wrapper is not None:
            functor = f"vram::{wrapper}<{functor}>"
        nfields = form.count("S") + len(op.fields)
        fmt = _FORMATS[compute]
        convert = _CONVERT[compute]
        self.converts = convert
        self.flatten = compute.is_complex
        layout = plan_layout(shape, [self.out_stride, *strides])
        nin = len(tensors)
        types = [_kernels.c_type(result)] + [_kernels.c_type(t.dtype) for t in tensors]
        types += ["char"] * (3 - nin)
        functor_param: Any = Arg(fmt * nfields) if nfields else b"\0"
        unused = (0,) * (3 - nin)
        params = (functor_param, np.int64(layout.numel), Arg("P"), *(Arg("P"),) * nin, *unused)
        views = [None] * (len(fmt) * nfields) if nfields else []
        views.append(View(shape, _bytes(self.out_stride, result), result.np))
        views += [
            View(shape, _bytes(st, t.dtype), t.dtype.np)
            for t, st in zip(tensors, strides, strict=True)
        ]
        kernel = _reference_kernel(op, form, compute, result, len(fmt) * nfields)
        grid = _grid(device, layout.numel, 1)
        if layout.kind == "flat":
            entry = f"vram::pointwise_flat<{nin}, {functor}, {', '.join(types)}>"
        else:
            index = "int" if layout.index32 else "long long"
            entry = f"vram::pointwise_strided<{nin}, {index}, {functor}, {', '.join(types)}>"
            params = (*params, pack_strided(layout))
        main = Launch(kernel, entry, grid, (_BLOCK, 1, 1), params, tuple(views))
        self.run = launcher(device, main)
        self.launches = (main,)  # what it launches (``vram.ops.warm`` compiles them ahead)
        self.vec = None
        if op is COPY and compute is result:  # a batch of transposes: tiles (kernels/copy_tiled)
            tiled = tiled_launch(layout, result, (views[0], views[1]))
            if tiled is not None:
                self.run = launcher(device, tiled)
                return
        vec = _vector_width([result, *(t.dtype for t in tensors)])
        if layout.kind == "flat" and vec > 1 and layout.numel >= vec and device.type != "cpu":
            entry = f"vram::pointwise_vec<{vec}, {loop.unroll}, {nin}, {functor}, "
            entry += f"{', '.join(types)}>"
            grid = _grid(device, layout.numel, vec * loop.unroll, loop.block, loop.waves)
            vector = Launch(kernel, entry, grid, (loop.block, 1, 1), params, tuple(views))
            self.vec = launcher(device, vector)
            self.launches = (main, vector)

    def __call__(self, tensors: tuple, numbers: tuple, out: Tensor | None) -> Tensor:
        """Run the op: ``tensors`` its tensor operands, ``numbers`` the numbers that stand for
        operands, then the op's fields (in order); into ``out`` or a new tensor."""
        device = self.device
        stream = this_thread.handles[device]
        final = out
        if out is None or self.writes_temp:
            out = new_tensor(
                self.shape,
                self.out_stride,
                self.out_dtype,
                device,
                self.nbytes,
                stream,
                self.out_sig,
            )
        elif self.checks:
            check_overlap(out, tensors)
        if self.numel:
            convert = self.converts
            values = [convert(v) for v in numbers]
            if self.flatten:
                values = [part for v in values for part in (v.real, v.imag)]
            po = out._storage.ptr + out._offset * out.dtype.itemsize
            ptrs = [
                t._storage.ptr + t._offset * i for t, i in zip(tensors, self.items, strict=True)
            ]
            vec = self.vec
            if vec is not None and not (po | _or(ptrs)) & 15:
                vec(stream, *values, po, *ptrs)
            else:
                self.run(stream, *values, po, *ptrs)
        if final is not None and final is not out:
            copy_into(final, out)
            return final
        return out

    def _convert(self, numbers: tuple) -> tuple:
        """The numbers as the functor's fields take them (cached for a repeated tuple)."""
        if numbers is self.fields:
            return self.values
        convert = self.converts
        values = tuple(convert(v) for v in numbers)
        if self.flatten:
            values = tuple(part for v in values for part in (v.real, v.imag))
        self.fields, self.values = numbers, values
        return values

    def _output(self, stream: int) -> Tensor:
        return new_tensor(
            self.shape,
            self.out_stride,
            self.out_dtype,
            self.device,
            self.nbytes,
            stream,
            self.out_sig,
        )

    def unary(self, a: Tensor, fields: tuple) -> Tensor:
        """``op(a, *fields)`` into a new tensor (the plan of one tensor operand)."""
        device = self.device
        stream = this_thread.handles[device]
        out = self._output(stream)
        if self.numel:
            po = out._storage.ptr
            pa = a._storage.ptr + a._offset * self.items[0]
            vec = self.vec
            if vec is not None and not (po | pa) & 15:
                vec(stream, *self._convert(fields), po, pa)
            else:
                self.run(stream, *self._convert(fields), po, pa)
        return out

    def binary(self, a: Tensor, b: Tensor, fields: tuple) -> Tensor:
        """``op(a, b, *fields)`` into a new tensor (the plan of two tensor operands).

        (``_output`` and the repeated fields' ``_convert`` inline: the operators' commonest
        call, one frame above the allocator's.)"""
        device = self.device
        stream = this_thread.handles[device]
        out = new_tensor(
            self.shape, self.out_stride, self.out_dtype, device, self.nbytes, stream, self.out_sig
        )
        if self.numel:
            items = self.items
            po = out._storage.ptr
            pa = a._storage.ptr + a._offset * items[0]
            pb = b._storage.ptr + b._offset * items[1]
            values = self.values if fields is self.fields else self._convert(fields)
            vec = self.vec
            if vec is not None and not (po | pa | pb) & 15:
                vec(stream, *values, po, pa, pb)
            else:
                self.run(stream, *values, po, pa, pb)
        return out

    def ternary(self, a: Tensor, b: Tensor, c: Tensor, fields: tuple) -> Tensor:
        """``op(a, b, c, *fields)`` into a new tensor (the plan of three tensor operands)."""
        device = self.device
        stream = this_thread.handles[device]
        out = self._output(stream)
        if self.numel:
            items = self.items
            po = out._storage.ptr
            pa = a._storage.ptr + a._offset * items[0]
            pb = b._storage.ptr + b._offset * items[1]
            pc = c._storage.ptr + c._offset * items[2]
            vec = self.vec
            if vec is not None and not (po | pa | pb | pc) & 15:
                vec(stream, *self._convert(fields), po, pa, pb, pc)
            else:
                self.run(stream, *self._convert(fields), po, pa, pb, pc)
        return out

    def inplace(self, a: Tensor, b: Tensor, fields: tuple) -> Tensor:
        """``a = op(a, b, *fields)`` (a plan made with ``a`` as its output)."""
        if self.numel:
            if b._storage is a._storage:
                check_overlap(a, (b,))
            device = self.device
            stream = this_thread.handles[device]
            items = self.items
            pa = a._storage.ptr + a._offset * items[0]
            pb = b._storage.ptr + b._offset * items[1]
            vec = self.vec
            if vec is not None and not (pa | pb) & 15:
                vec(stream, *self._convert(fields), pa, pa, pb)
            else:
                self.run(stream, *self._convert(fields), pa, pa, pb)
        return a

    def inplace_scalar(self, a: Tensor, numbers: tuple) -> Tensor:
        """``a = op(a, *numbers)`` (a plan made with ``a`` as its output)."""
        if self.numel:
            device = self.device
            stream = this_thread.handles[device]
            convert = self.converts
            values = tuple(convert(v) for v in numbers)
            if self.flatten:
                values = tuple(part for v in values for part in (v.real, v.imag))
            pa = a._storage.ptr + a._offset * self.items[0]
            vec = self.vec
            if vec is not None and not pa & 15:
                vec(stream, *values, pa, pa)
            else:
                self.run(stream, *values, pa, pa)
        return a

    def scalar(self, a: Tensor, numbers: tuple) -> Tensor:
        """``op`` of one tensor with numbers standing for the other operands (a + 2)."""
        device = self.device
        stream = this_thread.handles[device]
        out = self._output(stream)
        if self.numel:
            convert = self.converts
            values = tuple(convert(v) for v in numbers)
            if self.flatten:
                values = tuple(part for v in values for part in (v.real, v.imag))
            po = out._storage.ptr
            pa = a._storage.ptr + a._offset * self.items[0]
            vec = self.vec
            if vec is not None and not (po | pa) & 15:
                vec(stream, *values, po, pa)
            else:
                self.run(stream, *values, po, pa)
        return out


def binary_operator(op: PointwiseOp, fields: tuple = ()) -> Callable[[Tensor, Any], Tensor]:
    """``a <op> b`` for Python's operators: one dict lookup by the operands' signature ids
    to a plan (built by ``run`` the first time), then the plan's allocation and launch."""
    plans: dict[tuple, PointwisePlan] = {}
    number_types = (int, float, bool)

    def call(a: Tensor, b: Any) -> Tensor:
        sa = a._sig or signature_id(a)
        tb = type(b)
        if tb is Tensor:
            key = (sa, b._sig or signature_id(b))
        elif tb in number_types:
            key = (sa, tb)
        else:
            return run(op, (a, b), fields)
        plan = plans.get(key)
        if plan is None:
            operands = _operands(op, (a, b), None)
            if any(isinstance(v, ZeroDim) for v in operands):
                return run(op, (a, b), fields)
            plan = plan_for(op, operands, None)
            if len(plans) >= 1024:
                plans.clear()
            plans[key] = plan
        if tb is Tensor:
            return plan.binary(a, b, fields)
        return plan.scalar(a, (b, *fields))

    call.__name__ = f"__{op.name}__"
    return call


def inplace_operator(op: PointwiseOp, fields: tuple = ()) -> Callable[[Tensor, Any], Tensor]:
    """``a <op>= b`` (``a`` written in place) by the operands' signature ids, as
    ``binary_operator``; the per-call overlap check stays (it depends on addresses)."""
    plans: dict[tuple, PointwisePlan] = {}
    number_types = (int, float, bool)

    def call(a: Tensor, b: Any) -> Tensor:
        sa = a._sig or signature_id(a)
        tb = type(b)
        if tb is Tensor:
            key = (sa, b._sig or signature_id(b))
        elif tb in number_types:
            key = (sa, tb)
        else:
            return run(op, (a, b), fields, a)
        plan = plans.get(key)
        if plan is None:
            operands = _operands(op, (a, b), a)
            if any(isinstance(v, ZeroDim) for v in operands):
                return run(op, (a, b), fields, a)
            plan = plan_for(op, operands, a)
            if plan.writes_temp:
                return run(op, (a, b), fields, a)
            if len(plans) >= 1024:
                plans.clear()
            plans[key] = plan
        if tb is Tensor:
            return plan.inplace(a, b, fields)
        return plan.inplace_scalar(a, (b, *fields))

    call.__name__ = f"__i{op.name}__"
    return call


def unary_operator(op: PointwiseOp) -> Callable[[Tensor], Tensor]:
    """``op(a)`` of one tensor by its signature id (as ``binary_operator``)."""
    plans: dict[int, PointwisePlan] = {}

    def call(a: Tensor) -> Tensor:
        sa = a._sig or signature_id(a)
        plan = plans.get(sa)
        if plan is None:
            plan = plan_for(op, (a,), None)
            if len(plans) >= 1024:
                plans.clear()
            plans[sa] = plan
        return plan.unary(a, ())

    call.__name__ = op.name
    return call


def ternary_operator(op: PointwiseOp, fields: tuple = ()) -> Callable[[Tensor, Any, Any], Tensor]:
    """``op(a, b, c)`` of a tensor ``a`` and tensors or numbers ``b`` and ``c`` (where,
    clamp) by the operands' signature ids, as ``binary_operator``; anything else, and the
    calls ``run`` must see whole (a zero-dimensional cpu tensor among device tensors), go
    to ``run``."""
    plans: dict[tuple, PointwisePlan] = {}
    number_types = (int, float, bool)

    def call(a: Tensor, b: Any, c: Any) -> Tensor:
        tb, tc = type(b), type(c)
        if tb is Tensor:
            kb: Any = b._sig or signature_id(b)
        elif tb in number_types:
            kb = tb
        else:
            return run(op, (a, b, c), fields)
        if tc is Tensor:
            kc: Any = c._sig or signature_id(c)
        elif tc in number_types:
            kc = tc
        else:
            return run(op, (a, b, c), fields)
        key = (a._sig or signature_id(a), kb, kc)
        plan = plans.get(key)
        if plan is None:
            operands = _operands(op, (a, b, c), None)
            if any(isinstance(v, ZeroDim) for v in operands):
                return run(op, (a, b, c), fields)
            plan = plan_for(op, operands, None)
            if len(plans) >= 1024:
                plans.clear()
            plans[key] = plan
        if tb is Tensor and tc is Tensor:
            return plan.ternary(a, b, c, fields)
        tensors = tuple(v for v in (a, b, c) if type(v) is Tensor)
        numbers = tuple(v for v in (b, c) if type(v) is not Tensor)
        return plan(tensors, numbers + fields, None)

    call.__name__ = op.name
    return call


def _or(values: list[int]) -> int:
    result = 0
    for v in values:
        result |= v
    return result


def _scalar_like(value: Any) -> bool:
    return not isinstance(value, Tensor)  # a number, or a ZeroDim


def _device_of(op: PointwiseOp, tensors: list[Tensor], out: Tensor | None) -> Device:
    found = [t for t in ([out] if out is not None else []) + tensors]
    device = found[0].device
    for t in found[1:]:
        if t.device != device:
            raise RuntimeError(
                f"{op.name}: expected all tensors to be on the same device, but found at least "
                f"two devices, {device} and {t.device}!"
            )
    return device


def _dtypes(op: PointwiseOp, operands: tuple, out: Tensor | None) -> tuple[dtype, dtype, dtype]:
    """(common dtype, compute dtype, result dtype) of a call."""
    rule = op.rule
    if rule == "same":
        assert out is not None
        return out.dtype, out.dtype, out.dtype
    if rule == "source":
        src = operands[0]
        return src.dtype, src.dtype, out.dtype if out is not None else src.dtype
    common = result_type(*(operands[1:] if rule == "where" else operands))
    for value in operands:
        if isinstance(value, Tensor):
            op.check_kind(value.dtype)
    op.check_kind(common)
    if rule == "float" and kind(common) < 2:
        common = get_default_dtype()
    if rule == "integral" and kind(common) > 1:
        raise RuntimeError(f"{op.name}: only integral and bool tensors are supported, got {common}")
    compute = opmath(common)
    result = bool_ if rule in ("compare", "logical") else common
    return common, compute, result


def _check_out(op: PointwiseOp, out: Tensor, shape: tuple[int, ...], result: dtype) -> None:
    if out._shape != shape:
        raise RuntimeError(
            f"{op.name}: output with shape {list(out._shape)} doesn't match the broadcast "
            f"shape {list(shape)}"
        )
    if op.rule in ("same", "source"):
        return
    if not can_cast(result, out.dtype):
        raise RuntimeError(
            f"{op.name}: result type {result} can't be cast to the desired output type {out.dtype}"
        )


def _extent(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Elements a tensor of this layout spans (0 when it has none)."""
    if 0 in shape:
        return 0
    return sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) + 1


def _bytes(strides: tuple[int, ...], dt: dtype) -> tuple[int, ...]:
    return tuple(s * dt.itemsize for s in strides)


def _vector_width(dtypes: list[dtype]) -> int:
    """Elements per 16-byte load when every operand is 16-byte aligned."""
    return max(1, 16 // max(dt.itemsize for dt in dtypes))


def _grid(
    device: Device, numel: int, per_thread: int, block: int = _BLOCK, waves: int = _WAVES
) -> tuple[int, int, int]:
    """Blocks of ``block`` threads for ``per_thread`` elements a thread, at most ``waves``
    per multiprocessor (0: no bound; the loops' grid-stride covers the rest)."""
    blocks = -(-numel // (block * per_thread)) if numel else 1
    if device.type != "cpu" and waves:
        sms = device.driver.properties(device.index).multi_processor_count
        blocks = min(blocks, sms * waves)
    return (max(blocks, 1), 1, 1)


@cache
def _reference_kernel(
    op: PointwiseOp, form: str, compute: dtype, result: dtype, nvalues: int
) -> Kernel:
    """The Kernel of one op and form: the shared source, and a NumPy reference that takes
    (packed field values, the output array, the input arrays)."""
    math_np = compute.np
    nscalars = form.count("S")

    def reference(*args: Any) -> None:
        values, out, inputs = args[:nvalues], args[nvalues], args[nvalues + 1 :]
        if compute.is_complex:
            values = tuple(complex(r, i) for r, i in zip(values[::2], values[1::2], strict=True))
        if compute is bfloat16:
            values = tuple(np.array(v, np.uint16).view(bfloat16.np) for v in values)
        numbers_, fields = values[:nscalars], values[nscalars:]
        ins = iter(inputs)
        scal = iter(numbers_)
        operands = [
            np.asarray(next(ins)).astype(math_np, copy=False)
            if c == "T"
            else math_np.type(next(scal))
            for c in form
        ]
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = op.numpy(*operands, *(math_np.type(f) for f in fields))
            store(out, value)

    return Kernel(op.name, source(), reference)


def store(out: np.ndarray, value: Any) -> None:
    """Write ``value`` to ``out`` with the kernels' conversions (complex to real keeps the
    real part; anything to bool is "not zero")."""
    value = np.asarray(value)
    if value.dtype.kind == "c" and out.dtype.kind != "c":
        value = value != 0 if out.dtype == np.bool_ else value.real
    out[...] = value.astype(out.dtype, copy=False)


def plan_for(op: PointwiseOp, operands: tuple, out: Tensor | None) -> PointwisePlan:
    """The plan of a call of ``op`` (built and kept on first sight of its signature)."""
    key = (op, _signature(out), *map(_signature, operands))
    plan = PLANS.get(key)
    if plan is None:
        plan = PLANS.add(key, PointwisePlan(op, operands, out))
    return plan


def _signature(value: Any) -> Any:
    if isinstance(value, Tensor):
        return (value.dtype, value._shape, value._stride, value._storage.device)
    if isinstance(value, ZeroDim):
        return (ZeroDim, value.dtype)
    return type(value)


def run(op: PointwiseOp, operands: tuple, fields: tuple = (), out: Tensor | None = None) -> Tensor:
    """``op`` over ``operands`` (tensors, numbers standing for tensors) and ``fields``."""
    operands = _operands(op, operands, out)
    plan = plan_for(op, operands, out)
    tensors = tuple(v for v in operands if isinstance(v, Tensor))
    values = tuple(
        v.value if isinstance(v, ZeroDim) else v for v in operands if not isinstance(v, Tensor)
    )
    return plan(tensors, values + tuple(fields), out)


def _operands(op: PointwiseOp, operands: tuple, out: Tensor | None) -> tuple:
    """Numbers as Python numbers; a zero-dimensional cpu tensor among device tensors as a
    ZeroDim (its value goes to the kernel as a number, as PyTorch passes it)."""
    found = []
    for value in operands:
        if isinstance(value, np.generic):
            value = value.item()
        elif not isinstance(value, (Tensor, numbers.Number)):
            raise TypeError(
                f"{op.name}: expected a vram.Tensor or a number, got {type(value).__name__}"
            )
        found.append(value)
    devices = {v.device.type for v in found if isinstance(v, Tensor)}
    if out is not None:
        devices.add(out.device.type)
    if "cpu" in devices and len(devices) > 1:
        found = [
            ZeroDim(v.dtype, v.item())
            if isinstance(v, Tensor) and v.device.type == "cpu" and not v._shape
            else v
            for v in found
        ]
    return tuple(found)


COPY = PointwiseOp("copy", "Copy", 1, lambda x: x, rule="source")
FILL = PointwiseOp("fill", "Fill", 0, lambda value: value, rule="same", fields=("value",))


def copy_into(dst: Tensor, src: Tensor) -> None:
    """Copy ``src`` (of ``dst``'s shape) into ``dst``, converting its dtype."""
    run(COPY, (src,), out=dst)

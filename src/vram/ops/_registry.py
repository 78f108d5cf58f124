"""The operator registry: an op is declared once and given a kernel per backend.

    fill = declare("fill(Tensor(a!) self, Scalar value)")

    @fill.impl("cpu")                  # NumPy over host arrays
    def _(out, value): out[...] = value

    @fill.impl("cuda", dtypes=...)     # launches an NVRTC kernel on ``stream``
    def _(stream, out, value): ...

- A schema is PyTorch's: ``name(Type arg, ...)`` with types ``Tensor``, ``Scalar``,
  ``ScalarType``, ``bool``, ``int``, ``float``; ``Tensor(a!)`` marks a tensor the op writes.
- Backends: ``cpu`` kernels take NumPy arrays in place of tensors. ``sim`` runs the cpu kernel
  over NumPy views of simulated device memory, queued on the device's current stream (the
  queued work holds device pointers, never tensors, as a GPU kernel does). ``cuda`` kernels
  take the current stream and the tensors. ``composite`` kernels (written in terms of other
  ops) serve every device.
- Dispatch checks everything before anything is queued: argument types, that every tensor is
  on one device, dtypes (the kernel's supported set; one shared dtype unless the op mixes
  them), and for elementwise ops that inputs broadcast to the written tensor's shape. Errors
  name the op and the argument.
"""

from __future__ import annotations

import ast
import numbers
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._dtypes import all_dtypes, dtype
from .._streams import current_stream
from .._tensor import Tensor, broadcast_shapes, ndarray_view

__all__ = ["Param", "Schema", "Kernel", "Op", "declare", "get_op", "registered_ops", "BACKENDS"]

BACKENDS = ("cpu", "sim", "cuda", "composite")
_TYPES = ("Tensor", "Scalar", "ScalarType", "bool", "int", "float")
_PARAM = re.compile(r"^(Tensor\(a!\)|\w+)\s+(\w+)(?:\s*=\s*(.+))?$")
_NO_DEFAULT = object()


@dataclass(frozen=True, slots=True)
class Param:
    """One argument of a schema."""

    name: str
    type: str  # one of _TYPES
    written: bool = False  # Tensor(a!): the op writes it
    default: Any = _NO_DEFAULT


@dataclass(frozen=True, slots=True)
class Schema:
    """``name(params)`` parsed from PyTorch's schema syntax."""

    name: str
    params: tuple[Param, ...]

    @classmethod
    def parse(cls, text: str) -> Schema:
        match = re.fullmatch(r"\s*([\w.]+)\((.*)\)\s*", text)
        if not match:
            raise ValueError(f"schema {text!r}: expected 'name(Type arg, ...)'")
        name, body = match.groups()
        params = []
        for piece in filter(None, (p.strip() for p in body.split(","))):
            found = _PARAM.match(piece)
            if not found or found.group(1).split("(")[0] not in _TYPES:
                raise ValueError(f"schema {text!r}: cannot read parameter {piece!r}")
            kind, pname, default = found.groups()
            value = _NO_DEFAULT if default is None else ast.literal_eval(default)
            params.append(Param(pname, kind.split("(")[0], kind.endswith("(a!)"), value))
        return cls(name, tuple(params))

    def bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """Match call arguments to parameters, as Python would; TypeError naming the argument."""
        if len(args) > len(self.params):
            raise TypeError(f"{self.name}: takes {len(self.params)} arguments, got {len(args)}")
        bound = dict(zip((p.name for p in self.params), args, strict=False))
        for key, value in kwargs.items():
            if key in bound:
                raise TypeError(f"{self.name}: got argument '{key}' twice")
            if key not in {p.name for p in self.params}:
                raise TypeError(f"{self.name}: unexpected argument '{key}'")
            bound[key] = value
        for p in self.params:
            if p.name not in bound:
                if p.default is _NO_DEFAULT:
                    raise TypeError(f"{self.name}: missing argument '{p.name}'")
                bound[p.name] = p.default
        return {p.name: bound[p.name] for p in self.params}


@dataclass(frozen=True, slots=True)
class Kernel:
    """A backend's implementation of an op, and the dtypes it handles (None: all)."""

    fn: Callable[..., Any]
    dtypes: frozenset[dtype] | None = None


@dataclass(eq=False)
class Op:
    """A declared op: call it to dispatch to the kernel of its tensors' device."""

    schema: Schema
    elementwise: bool = True  # inputs broadcast to the (one) written tensor's shape
    mixed_dtypes: bool = False  # tensors may have different dtypes (copy, cast)
    kernels: dict[str, Kernel] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.schema.name

    def impl(
        self, backend: str, dtypes: Iterable[dtype] | None = None
    ) -> Callable[[Callable], Callable]:
        """Decorator: register ``fn`` as this op's kernel for ``backend``."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")

        def register(fn: Callable) -> Callable:
            self.kernels[backend] = Kernel(fn, None if dtypes is None else frozenset(dtypes))
            return fn

        return register

    def resolve(self, device_type: str) -> tuple[str, Kernel] | None:
        """(backend, kernel) that runs this op on a device type: its own kernel, the cpu
        kernel queued on sim streams, or the composite kernel; None when there is none."""
        if device_type in self.kernels:
            return device_type, self.kernels[device_type]
        if device_type == "sim" and "cpu" in self.kernels:
            return "sim", self.kernels["cpu"]
        if "composite" in self.kernels:
            return "composite", self.kernels["composite"]
        return None

    def supports(self, device_type: str, dt: dtype) -> bool:
        """True when a kernel runs this op on ``device_type`` for tensors of dtype ``dt``."""
        found = self.resolve(device_type)
        return found is not None and (found[1].dtypes is None or dt in found[1].dtypes)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self.schema.bind(args, kwargs)
        self._check_types(bound)
        tensors = [(p, bound[p.name]) for p in self.schema.params if p.type == "Tensor"]
        if not tensors:
            raise TypeError(f"{self.name}: needs at least one tensor argument")
        device = self._check_devices(tensors)
        found = self.resolve(device.type)
        if found is None:
            raise NotImplementedError(f"{self.name}: no kernel for {device.type} devices")
        backend, kernel = found
        self._check_dtypes(tensors, kernel, backend)
        if self.elementwise:
            self._broadcast_inputs(bound, tensors)
        if backend == "composite":
            return kernel.fn(**bound)
        if backend == "cpu":
            return kernel.fn(*(_host_value(v) for v in bound.values()))
        stream = current_stream(device)
        if backend == "cuda":
            return kernel.fn(stream, *bound.values())
        return _queue_on_sim(kernel.fn, list(bound.values()), stream)

    # ---- checks, in the order dispatch makes them --------------------------------------
    def _check_types(self, bound: dict[str, Any]) -> None:
        for p in self.schema.params:
            value = bound[p.name]
            if not _is_a(value, p.type):
                raise TypeError(
                    f"{self.name}: argument '{p.name}' must be {_ARTICLE[p.type]}, "
                    f"got {type(value).__name__}"
                )

    def _check_devices(self, tensors: list[tuple[Param, Tensor]]) -> Any:
        first, reference = tensors[0][0].name, tensors[0][1].device
        for p, t in tensors[1:]:
            if t.device != reference:
                raise ValueError(
                    f"{self.name}: argument '{p.name}' is on {t.device}, but '{first}' "
                    f"is on {reference}; all tensors must be on one device"
                )
        return reference

    def _check_dtypes(self, tensors: list[tuple[Param, Tensor]], kernel: Kernel, backend: str):
        first, reference = tensors[0][0].name, tensors[0][1].dtype
        for p, t in tensors:
            if not self.mixed_dtypes and t.dtype != reference:
                raise TypeError(
                    f"{self.name}: argument '{p.name}' has dtype {t.dtype}, but '{first}' "
                    f"has {reference}; cast them to one dtype first"
                )
            if kernel.dtypes is not None and t.dtype not in kernel.dtypes:
                names = ", ".join(d.name for d in all_dtypes if d in kernel.dtypes)
                raise TypeError(
                    f"{self.name}: argument '{p.name}' has dtype {t.dtype}, which the {backend} "
                    f"kernel does not support (supported: {names})"
                )

    def _broadcast_inputs(self, bound: dict[str, Any], tensors: list[tuple[Param, Tensor]]):
        written = [(p, t) for p, t in tensors if p.written]
        if len(written) != 1:
            raise TypeError(f"{self.name}: an elementwise op writes exactly one tensor")
        wp, out = written[0]
        if any(st == 0 and n > 1 for st, n in zip(out.stride(), out.shape, strict=True)):
            raise ValueError(
                f"{self.name}: argument '{wp.name}' has several elements at one memory "
                "location (an expanded tensor); it cannot be written"
            )
        for p, t in tensors:
            if p.written or t.shape == out.shape:
                continue
            try:
                if broadcast_shapes(t.shape, out.shape) != out.shape:
                    raise ValueError
            except ValueError:
                raise ValueError(
                    f"{self.name}: argument '{p.name}' of shape {tuple(t.shape)} cannot be "
                    f"broadcast to the shape {tuple(out.shape)} of '{wp.name}'"
                ) from None
            bound[p.name] = t.expand(out.shape)


_ARTICLE = {
    "Tensor": "a vram.Tensor",
    "Scalar": "a number (bool, int, float or complex)",
    "ScalarType": "a vram.dtype",
    "bool": "a bool",
    "int": "an int",
    "float": "a float",
}


def _is_a(value: Any, kind: str) -> bool:
    if kind == "Tensor":
        return isinstance(value, Tensor)
    if kind == "Scalar":
        return isinstance(value, (numbers.Number, np.bool_)) and not isinstance(value, Tensor)
    if kind == "ScalarType":
        return isinstance(value, dtype)
    if kind == "bool":
        return isinstance(value, (bool, np.bool_))
    if kind == "int":
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    return isinstance(value, numbers.Real)


def _host_value(value: Any) -> Any:
    return value.numpy() if isinstance(value, Tensor) else value


def _queue_on_sim(fn: Callable, values: list[Any], stream: Any) -> None:
    """Queue the cpu kernel ``fn`` on a sim stream, over views made when it runs.

    The queued work keeps pointers, shapes and strides, never the tensors themselves.
    """
    driver = stream.device.driver
    described = [_describe(v) if isinstance(v, Tensor) else None for v in values]
    plain = [None if isinstance(v, Tensor) else v for v in values]
    pairs = list(zip(plain, described, strict=True))

    def run() -> None:
        views = [v if d is None else ndarray_view(driver.view, *d) for v, d in pairs]
        fn(*views)

    touches = tuple(_extent(*d) for d in described if d is not None)
    driver.enqueue(stream.cuda_stream, run, touches)


def _extent(
    ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dt: np.dtype
) -> tuple[int, int]:
    """The (start, nbytes) range of device memory a strided tensor spans (what the queued
    kernel touches; the stream sanitizer checks it)."""
    if any(n == 0 for n in shape):
        return ptr, 0
    low = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s > 0)
    return ptr + low, high - low + np.dtype(dt).itemsize


def _describe(t: Tensor) -> tuple[int, tuple[int, ...], tuple[int, ...], np.dtype]:
    """What a queued kernel needs of a tensor: data pointer, shape, byte strides, dtype."""
    item = t.element_size()
    return t.data_ptr(), tuple(t.shape), tuple(s * item for s in t.stride()), t.dtype.np


_ops: dict[str, Op] = {}


def declare(schema: str, *, elementwise: bool = True, mixed_dtypes: bool = False) -> Op:
    """Declare an op from its schema; returns the Op to give kernels with ``impl``."""
    parsed = Schema.parse(schema)
    if parsed.name in _ops:
        raise ValueError(f"op {parsed.name!r} is already declared")
    op = Op(parsed, elementwise=elementwise, mixed_dtypes=mixed_dtypes)
    _ops[parsed.name] = op
    return op


def get_op(name: str) -> Op:
    """The declared op called ``name``; KeyError naming it otherwise."""
    try:
        return _ops[name]
    except KeyError:
        raise KeyError(f"no op named {name!r} is declared") from None


def registered_ops() -> dict[str, Op]:
    """Every declared op by name."""
    return dict(_ops)

"""layer_norm as a fused row kernel (kernels/layer_norm.cu), one plan per signature.

As PyTorch's: the input's last ``len(normalized_shape)`` dims are the rows (the input is
made contiguous, a copy only when it is not); each row is normalized by its mean and biased
variance, ``(x - mean) * rsqrt(var + eps) * weight + bias``, computed in float32 for
float16 and bfloat16. ``weight`` and ``bias`` are of the input's dtype, or float32 for a
float16 or bfloat16 input (PyTorch's mixed-type layer norm). A row that fits in registers
is read once (the mean, then the squared deviations from it); a longer one, or a wide 16-bit
row among many (``_rows.norm_layout``), twice (the moments merged vector by vector).
``eps`` is a per-call kernel argument: any eps reuses the plan.
"""

from __future__ import annotations

import math
import numbers
from functools import cache
from typing import Any

import numpy as np

from .._dtypes import bfloat16, dtype, float16, float32
from .._streams import this_thread
from .._tensor import Tensor, contiguous_strides, layout_id
from ..driver._work import Arg, Kernel, Launch, Launcher, View
from ._kernels import KERNEL_DIR, c_type
from ._math import _torch_name
from ._plans import PLANS, launcher, new_tensor
from ._pointwise import signature_id
from ._pointwise import store as _put
from ._promotion import kind, opmath
from ._reduce import multiprocessors, plan_for
from ._rows import RowLayout, norm_layout

__all__ = ["layer_norm", "LayerNormPlan"]

_INTS = frozenset((int,))  # the element types of a normalized shape the common call takes


@cache
def source() -> str:
    folder = KERNEL_DIR
    return "".join(
        (folder / name).read_text()
        for name in ("common.cuh", "group.cuh", "rows.cuh", "layer_norm.cu")
    )


def _reference(x: Any, out: Any, weight: Any, bias: Any, eps: float, compute: np.dtype) -> None:
    values = np.asarray(x).astype(compute)
    with np.errstate(all="ignore"):
        mean = values.mean(axis=1, keepdims=True, dtype=compute)
        centered = values - mean
        var = (centered * centered).mean(axis=1, keepdims=True, dtype=compute)
        result = centered * (compute.type(1) / np.sqrt(var + compute.type(eps)))
        if isinstance(weight, np.ndarray):
            result = result * weight.astype(compute)
        if isinstance(bias, np.ndarray):
            result = result + bias.astype(compute)
        _put(out, result)


@cache
def _kernel() -> Kernel:
    return Kernel("layer_norm", source(), _reference)


def _signature(t: Any) -> Any:
    if isinstance(t, Tensor):
        return t._sig or signature_id(t)
    return None if t is None else type(t)


class LayerNormPlan:
    """One signature of layer_norm: input, normalized shape, weight and bias."""

    __slots__ = (
        "device",
        "shape",
        "stride",
        "dtype",
        "nbytes",
        "numel",
        "copy",
        "out_sig",
        "run",
        "run_vec",
        "scalar_launch",
        "eps_format",
        "launches",
    )

    def __init__(
        self,
        x: Tensor,
        shape: tuple[int, ...],
        weight: Tensor | None,
        bias: Tensor | None,
        layout: RowLayout | None = None,
    ) -> None:
        """``layout``: of the rows, instead of ``norm_layout``'s."""
        device = x.device
        self.device = device
        self.shape = x._shape
        self.stride = contiguous_strides(x._shape)
        self.dtype = x.dtype
        self.numel = math.prod(x._shape)
        self.nbytes = self.numel * x.dtype.itemsize
        copy = (
            not x.is_contiguous(),
            weight is not None and not weight.is_contiguous(),
            bias is not None and not bias.is_contiguous(),
        )
        self.copy = copy if any(copy) else None  # what a call copies first; None: nothing
        self.out_sig = layout_id(x.dtype, self.shape, self.stride, device)  # of its results
        n = math.prod(shape)
        rows = self.numel // n if n else 0
        compute = opmath(x.dtype)
        w = weight.dtype if weight is not None else (bias.dtype if bias is not None else x.dtype)
        item = x.dtype.itemsize
        view = View((rows, n), (n * item, item), x.dtype.np)
        param_view = View((n,), (w.itemsize,), w.np)
        views = (
            view,
            view,
            param_view if weight is not None else None,
            param_view if bias is not None else None,
            None,
        )
        self.eps_format = "f" if compute is float32 else "d"
        types = f"{c_type(x.dtype)}, {c_type(w)}, {c_type(compute)}"
        if layout is None:
            layout = norm_layout(n, rows, item, compute.itemsize, multiprocessors(device))
        kernel = _kernel()

        def launch(vec: int) -> Launch:
            pointers = (Arg("P"), Arg("P"), Arg("P"), Arg("P"))
            eps = Arg(self.eps_format)
            if layout.online:
                shape = f"{layout.items}, {layout.bound}, {layout.blocks}"
                entry = f"vram::layer_norm_online<{types}, {vec}, {shape}>"
                params = (*pointers, np.int64(rows), np.int64(n), eps)
                block = (layout.threads, 1, 1)
            else:
                items = layout.items * layout.vec // vec
                entry = f"vram::layer_norm_rows<{types}, {vec}, {items}, {layout.bound}>"
                params = (*pointers, np.int64(rows), np.int32(n), eps)
                block = (layout.threads, layout.rows, 1)
            grid = (layout.grid, 1, 1)
            return Launch(kernel, entry, grid, block, params, views, (compute.np,))

        self.scalar_launch = launch(1)
        self.launches = (self.scalar_launch,)  # what it launches (the aligned case's)
        self.run_vec: Launcher | None = None
        self.run: Launcher | None = None
        if layout.vec > 1 and device.type != "cpu":
            self.launches = (launch(layout.vec),)
            self.run_vec = launcher(device, self.launches[0])
        else:
            self.run = launcher(device, self.scalar_launch)

    def __call__(self, x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
        device = self.device
        stream = this_thread.handles[device]
        result = new_tensor(
            self.shape, self.stride, self.dtype, device, self.nbytes, stream, self.out_sig
        )
        if not self.numel:
            return result
        if self.copy is not None:
            copy_x, copy_w, copy_b = self.copy
            if copy_x:
                x = x.contiguous()
            if copy_w:
                weight = weight.contiguous()
            if copy_b:
                bias = bias.contiguous()
        ptr = x._storage.ptr + x._offset * x.dtype.itemsize
        po = result._storage.ptr
        pw = (
            weight._storage.ptr + weight._offset * weight.dtype.itemsize
            if weight is not None
            else 0
        )
        pb = bias._storage.ptr + bias._offset * bias.dtype.itemsize if bias is not None else 0
        run = self.run_vec
        if run is None or (ptr | po | pw | pb) & 15:
            run = self.run
            if run is None:
                run = self.run = launcher(device, self.scalar_launch)
        run(stream, ptr, po, pw, pb, eps)
        return result


def _normalized_shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in value
    ):
        raise TypeError(
            "layer_norm(): argument 'normalized_shape' must be tuple of ints, not "
            f"{type(value).__name__}"
        )
    return tuple(int(n) for n in value)


def _build(x: Any, normalized: Any, weight: Any, bias: Any) -> LayerNormPlan:
    if not isinstance(x, Tensor):
        raise TypeError(f"layer_norm(): argument 'input' must be Tensor, not {type(x).__name__}")
    shape = _normalized_shape(normalized)
    if not shape:
        raise RuntimeError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least "
            "one element, but got normalized_shape = []"
        )
    if kind(x.dtype) != 2:
        raise NotImplementedError(
            f"\"LayerNormKernelImpl\" not implemented for '{_torch_name(x.dtype)}'"
        )
    if x._shape[len(x._shape) - len(shape) :] != shape or x.ndim < len(shape):
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape "
            f"[*, {', '.join(map(str, shape))}], but got input of size{list(x._shape)}"
        )
    found = None
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(
                f"layer_norm(): argument '{name}' must be Tensor, not {type(t).__name__}"
            )
        if t._shape != shape:
            raise RuntimeError(
                f"Expected {name} to be of same shape as normalized_shape, but got {name} of "
                f"shape {list(t._shape)} and normalized_shape = {list(shape)}"
            )
        if t.device != x.device:
            raise RuntimeError(
                f"layer_norm(): expected '{name}' on {x.device}, the input's device, got {t.device}"
            )
        allowed = (x.dtype, float32) if x.dtype in (float16, bfloat16) else (x.dtype,)
        if t.dtype not in allowed or (found is not None and t.dtype is not found):
            raise RuntimeError(
                f"layer_norm(): expected '{name}' of dtype {_allowed(x.dtype)}, got {t.dtype}"
            )
        found = t.dtype
    return LayerNormPlan(x, shape, weight, bias)


def _allowed(dt: dtype) -> str:
    if dt in (float16, bfloat16):
        return f"{dt} or float32 (the same for weight and bias)"
    return str(dt)


def layer_norm(
    input: Tensor,  # noqa: A002
    normalized_shape: Any,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """torch.nn.functional.layer_norm over the last ``len(normalized_shape)`` dims."""
    if (  # the common call (a tuple of ints, a weight and a bias, a float eps): one lookup
        type(normalized_shape) is tuple
        and type(eps) is float
        and {*map(type, normalized_shape)} <= _INTS
    ):
        try:  # only tensors have signature ids: anything else takes the checks below
            plan = PLANS.get(
                (
                    "layer_norm",
                    input._sig or signature_id(input),
                    normalized_shape,
                    weight._sig or signature_id(weight),
                    bias._sig or signature_id(bias),
                )
            )
        except AttributeError:
            plan = None
        if plan is not None:
            return plan(input, weight, bias, eps)
    if isinstance(input, Tensor):
        normalized_shape = _normalized_shape(normalized_shape)
        key = (
            "layer_norm",
            input._sig or signature_id(input),
            normalized_shape,
            _signature(weight),
            _signature(bias),
        )
        plan = plan_for(key, _build, input, normalized_shape, weight, bias)
    else:
        plan = _build(input, normalized_shape, weight, bias)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"layer_norm(): argument 'eps' must be float, not {type(eps).__name__}")
    return plan(input, weight, bias, float(eps))

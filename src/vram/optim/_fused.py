"""The fused optimizers' host side: launch plans kept while a group's tensors stay the same,
and the kernels of kernels/fused.cu, each declared once with the same arithmetic in NumPy
(its reference: what the simulated GPU queues and the cpu device runs).

A step of a fused group (one device and dtype) is, as in PyTorch's fused path:
``increment_steps`` (step += 1), the update kernel (one launch per few hundred tensors), and
when a ``found_inf`` is given ``unskip_steps`` (step -= found_inf). The update kernel reads
the step, the lr (when a tensor), the grad scale and found_inf on the device: nothing
synchronizes.

Plans are cached per (group, device, dtypes): while the parameters, gradients and state
tensors are the same objects as at the last step, the metadata is reused and a step costs a
few kernel launches from Python. The cache holds gradients weakly (a gradient the user drops
is freed at once).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .._device import Device
from .._dtypes import float32
from .._tensor import Tensor
from ..driver._work import Arg, Kernel, View
from ..ops._multi_tensor import (
    ElementListPlan,
    TensorListPlan,
    element_reference,
    kernel_source,
    list_reference,
)
from ..ops._plans import stream_handle

__all__ = ["FusedPlans", "fused_adam", "fused_sgd", "group_by_device_and_dtype"]

_SCALAR = View((1,), (4,), np.dtype(np.float32))  # a one-element float32 tensor (lr, scale)


def group_by_device_and_dtype(
    lists: list[list[Any]], key_lists: tuple[int, ...] = (0,)
) -> dict[tuple, list[int]]:
    """Indices of the tensors of ``lists[0]`` grouped by (device, dtypes of ``key_lists``)."""
    groups: dict[tuple, list[int]] = {}
    for i, p in enumerate(lists[0]):
        key = (p.device, *(lists[k][i].dtype for k in key_lists))
        groups.setdefault(key, []).append(i)
    return groups


class _Cached:
    """The plans of one device and dtype, the update's and the steps', and their prepared
    launches (``runs``) by (kernel, which optional scalars it is given)."""

    __slots__ = ("plan", "step_plan", "runs")

    def __init__(self, lists: list[list[Tensor]], steps: list[Tensor] | None) -> None:
        self.plan = TensorListPlan(lists, steps)
        self.step_plan = ElementListPlan(steps) if steps else None
        self.runs: dict[tuple, Callable[..., int]] = {}

    def keep(self, key: tuple, run: Callable[..., int]) -> Callable[..., int]:
        self.runs[key] = run
        return run


class _Group:
    """A group's lists as the plans were built from them (gradients, list 1, held weakly)
    and the plans per (device, dtypes)."""

    __slots__ = ("lists", "grads", "steps", "parts")

    def __init__(
        self, lists: list[list[Tensor]], steps: list[Tensor] | None, key_lists: tuple[int, ...]
    ) -> None:
        self.lists = [list(lst) for k, lst in enumerate(lists) if k != 1]
        self.grads = [weakref.ref(g) for g in lists[1]]
        self.steps = list(steps) if steps is not None else None
        self.parts: list[tuple[tuple, list[int], _Cached]] = []
        for key, index in group_by_device_and_dtype(lists, key_lists).items():
            sub = [[lst[i] for i in index] for lst in lists]
            sub_steps = None if steps is None else [steps[i] for i in index]
            self.parts.append((key, index, _Cached(sub, sub_steps)))

    def matches(self, lists: list[list[Tensor]], steps: list[Tensor] | None) -> bool:
        others = [lst for k, lst in enumerate(lists) if k != 1]
        if len(lists[1]) != len(self.grads) or len(others) != len(self.lists):
            return False
        is_ = operator.is_
        for a, b in zip(others, self.lists, strict=True):
            if len(a) != len(b) or not all(map(is_, a, b)):
                return False
        if not all(map(is_, lists[1], [ref() for ref in self.grads])):
            return False
        if (steps is None) != (self.steps is None):
            return False
        return steps is None or all(map(is_, steps, self.steps))  # type: ignore[arg-type]


class FusedPlans:
    """An optimizer's cached plans, by key (group index and the kernel's options). While a
    group's tensors are the same objects as when its plans were built, a step reuses its
    grouping by device and dtype and every launch's metadata."""

    def __init__(self) -> None:
        self._groups: dict[tuple, _Group] = {}

    def parts(
        self,
        key: tuple,
        lists: list[list[Tensor]],
        steps: list[Tensor] | None,
        key_lists: tuple[int, ...] = (0,),
    ) -> list[tuple[tuple, list[int], _Cached]]:
        """[(device and dtypes, indices, plans)] for ``lists`` (built or reused)."""
        group = self._groups.get(key)
        if group is None or not group.matches(lists, steps):
            group = _Group(lists, steps, key_lists)
            self._groups[key] = group
        return group.parts


# ---- device scalars ------------------------------------------------------------------------
def _on(device: Device, t: Tensor | None, name: str) -> Tensor | None:
    """``t`` (a one-element float32 tensor) on ``device``: itself, or a copy."""
    if t is None:
        return None
    if t.numel() != 1 or t.dtype != float32:
        raise TypeError(f"{name} must be a one-element float32 tensor, got {t.dtype} {t.shape}")
    return t if t.device == device else t.to(device)


def _pointer(t: Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


def _view(t: Tensor | None) -> View | None:
    """How the references see an optional one-element float32 tensor (None: absent, its
    pointer 0)."""
    return None if t is None else _SCALAR


def _value(scalar: Any) -> float | None:
    """An optional one-element array's value as the kernel reads it (None: absent)."""
    return None if isinstance(scalar, int) else float(scalar[0])


def _lr(device: Device, lr: Any) -> tuple[float, Tensor | None]:
    """(lr as a float, lr tensor on the device or None): a cpu tensor lr is read now."""
    if not isinstance(lr, Tensor):
        return float(lr), None
    if lr.device.type == "cpu" and device.type != "cpu":
        return float(lr.item()), None
    return 1.0, _on(device, lr, "lr")


def _opmath(dt: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


def _increment(step: np.ndarray) -> None:
    step[0] = step[0] + np.float32(1)


def _unskip(step: np.ndarray, found: np.ndarray) -> None:
    step[0] = step[0] - np.float32(1) * found[0]


_INCREMENT = Kernel(
    "increment_steps", kernel_source("optim/kernels/fused.cu"), element_reference(_increment)
)
_UNSKIP = Kernel("unskip_steps", _INCREMENT.source, element_reference(_unskip))
_INCREMENT_ENTRY = "vram::optim::increment_steps<{N}>"
_UNSKIP_ENTRY = "vram::optim::unskip_steps<{N}>"


# ---- Adam / AdamW ----------------------------------------------------------------------------
def fused_adam(
    plans: FusedPlans,
    group_key: Any,
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Tensor],
    state_steps: list[Tensor],
    *,
    amsgrad: bool,
    beta1: float,
    beta2: float,
    lr: float | Tensor,
    weight_decay: float,
    eps: float,
    maximize: bool,
    adamw: bool,
    grad_scale: Tensor | None,
    found_inf: Tensor | None,
) -> None:
    """PyTorch's _fused_adam_ / _fused_adamw_ over a group, per device and dtypes."""
    lists = [params, grads, exp_avgs, exp_avg_sqs] + ([max_exp_avg_sqs] if amsgrad else [])
    for key, _, cached in plans.parts((group_key, amsgrad), lists, state_steps, (0, 2)):
        device, p_dtype, s_dtype = key
        stream = stream_handle(device)
        lr_value, lr_tensor = _lr(device, lr)
        scale = _on(device, grad_scale, "grad_scale")
        found = _on(device, found_inf, "found_inf")
        step_plan = cached.step_plan
        assert step_plan is not None
        runs = cached.runs
        increment = runs.get(("increment",))
        if increment is None:
            increment = cached.keep(("increment",), step_plan.prepare(_INCREMENT, _INCREMENT_ENTRY))
        increment(stream)
        given = ("adam", lr_tensor is not None, scale is not None, found is not None)
        update = runs.get(given)
        if update is None:
            depth = len(lists)
            entry = f"vram::optim::fused_adam<{p_dtype.c_type}, {s_dtype.c_type}, {depth}, {{N}}>"
            views = (None,) * 5 + (_view(lr_tensor), _view(scale), _view(found), None, None)
            update = cached.keep(given, cached.plan.prepare(_ADAM, entry, _ADAM_PARAMS, views))
        update(
            stream, lr_value, beta1, beta2, weight_decay, eps, _pointer(lr_tensor),
            _pointer(scale), _pointer(found), int(maximize), int(adamw),
        )  # fmt: skip
        if found is not None:
            unskip = runs.get(("unskip",))
            if unskip is None:
                prepared = step_plan.prepare(_UNSKIP, _UNSKIP_ENTRY, (Arg("P"),), (_SCALAR,))
                unskip = cached.keep(("unskip",), prepared)
            unskip(stream, found.data_ptr())


def _vectorized(numel: int, aligned: bool) -> bool:
    """Whether PyTorch's kernel would take its vectorized path (kernels/fused.cu: TorchPath)."""
    return aligned and numel % 4 == 0


def _lanes(numel: int, aligned: bool) -> np.ndarray:
    """Each element's lane in PyTorch's walk (kernels/fused.cu: TorchPath)."""
    index = np.arange(numel, dtype=np.int64)
    return (index & 3) if _vectorized(numel, aligned) else ((index & 2047) >> 9)


def _fma(a: Any, b: Any, c: Any, math_t: np.dtype) -> Any:
    """fma(a, b, c) rounded once to float32 (through float64, where a float32 product is
    exact); for float64, a * b + c."""
    if math_t == np.float64:
        return a * b + c
    f64 = np.float64
    return (np.asarray(a, f64) * np.asarray(b, f64) + np.asarray(c, f64)).astype(math_t)


def _adam_step(
    arrays: list[np.ndarray],
    step_view: np.ndarray,
    aligned: bool,
    lr0: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    lr_scalar: Any,
    scale_scalar: Any,
    found_scalar: Any,
    maximize: int,
    adamw: int,
) -> None:
    """The fused Adam kernel's arithmetic in NumPy for one tensor (kernels/fused.cu:
    adam_math): the same roundings, each FMA rounded once. The optional scalars (lr, grad
    scale, found_inf) are one-element arrays, read when the work runs as the kernel reads
    them, or 0 where absent."""
    lr_read, scale, found = _value(lr_scalar), _value(scale_scalar), _value(found_scalar)
    if found == 1:
        return
    param, grad, exp_avg, exp_avg_sq = arrays[:4]
    m_t = _opmath(param.dtype)
    cast = m_t.type
    lr = cast(lr_read if lr_read is not None else lr0)
    b1, b2, wd, ep = cast(beta1), cast(beta2), cast(weight_decay), cast(eps)
    step = cast(step_view[0])
    with np.errstate(all="ignore"):
        bc1 = cast(1) - np.power(b1, step)
        bc2_sqrt = np.sqrt(cast(1) - np.power(b2, step))
        p = param.astype(m_t)
        g = grad.astype(m_t)
        if scale is not None:
            g = g / cast(scale)
            grad[...] = g.astype(grad.dtype)
        if maximize:
            g = -g
        if wd != 0:
            if adamw:
                p = _fma(-(lr * wd), p, p, m_t)
            elif len(arrays) == 5 or scale is not None:
                g = _fma(p, wd, g, m_t)
            elif maximize:
                g = g + p * wd
            else:  # lane 0 rounds p * wd first (see adam_math)
                lane = _lanes(p.size, aligned)
                g = np.where(lane == 0, g + p * wd, _fma(p, wd, g, m_t))
        m = _fma(b1, exp_avg.astype(m_t), _fma(-b1, g, g, m_t), m_t)
        gg = g * g
        v = _fma(b2, exp_avg_sq.astype(m_t), _fma(-b2, gg, gg, m_t), m_t)
        step_size = lr / bc1
        if len(arrays) == 5:
            largest = arrays[4].astype(m_t)
            largest = np.where(largest < v, v, largest)
            arrays[4][...] = largest.astype(arrays[4].dtype)
            root = np.sqrt(largest)
        else:
            root = np.sqrt(v)
        denom = root / bc2_sqrt + ep
        p = p - step_size * m / denom
    param[...] = p.astype(param.dtype)
    exp_avg[...] = m.astype(exp_avg.dtype)
    exp_avg_sq[...] = v.astype(exp_avg_sq.dtype)


# lr, beta1, beta2, weight_decay, eps, lr_ptr, grad_scale, found_inf, maximize, adamw
_ADAM_PARAMS = (*(Arg("d"),) * 5, *(Arg("P"),) * 3, Arg("i"), Arg("i"))
_ADAM = Kernel("fused_adam", _INCREMENT.source, list_reference(_adam_step))


# ---- SGD ----------------------------------------------------------------------------------------
def fused_sgd(
    plans: FusedPlans,
    group_key: Any,
    params: list[Tensor],
    grads: list[Tensor],
    momentum_buffers: list[Tensor] | None,
    *,
    weight_decay: float,
    momentum: float,
    lr: float | Tensor,
    dampening: float,
    nesterov: bool,
    maximize: bool,
    first_step: bool,
    grad_scale: Tensor | None,
    found_inf: Tensor | None,
) -> None:
    """PyTorch's _fused_sgd_ over a group, per device and dtype (``momentum_buffers`` None
    when momentum is 0)."""
    lists = [params, grads] + ([momentum_buffers] if momentum_buffers is not None else [])
    for key, _, cached in plans.parts((group_key, len(lists), first_step), lists, None):
        device, p_dtype = key
        lr_value, lr_tensor = _lr(device, lr)
        scale = _on(device, grad_scale, "grad_scale")
        found = _on(device, found_inf, "found_inf")
        given = ("sgd", lr_tensor is not None, scale is not None, found is not None)
        update = cached.runs.get(given)
        if update is None:
            entry = f"vram::optim::fused_sgd<{p_dtype.c_type}, {len(lists)}, {{N}}>"
            views = (None,) * 4 + (_view(lr_tensor), _view(scale), _view(found), None, None, None)
            update = cached.keep(given, cached.plan.prepare(_SGD, entry, _SGD_PARAMS, views))
        update(
            stream_handle(device), lr_value, weight_decay, momentum, dampening,
            _pointer(lr_tensor), _pointer(scale), _pointer(found), int(nesterov), int(maximize),
            int(first_step),
        )  # fmt: skip


def _sgd_step(
    arrays: list[np.ndarray],
    _: Any,
    aligned: bool,
    lr0: float,
    weight_decay: float,
    momentum: float,
    dampening: float,
    lr_scalar: Any,
    scale_scalar: Any,
    found_scalar: Any,
    nesterov: int,
    maximize: int,
    first_step: int,
) -> None:
    """The fused SGD kernel's arithmetic in NumPy for one tensor (kernels/fused.cu:
    sgd_math): the same roundings, each FMA rounded once; the optional scalars as
    ``_adam_step``'s."""
    lr_read, scale, found = _value(lr_scalar), _value(scale_scalar), _value(found_scalar)
    if found == 1:
        return
    param, grad = arrays[:2]
    m_t = _opmath(param.dtype)
    cast = m_t.type
    lr = cast(lr_read if lr_read is not None else lr0)
    wd, mu, damp = cast(weight_decay), cast(momentum), cast(dampening)
    with np.errstate(all="ignore"):
        p = param.astype(m_t)
        g = grad.astype(m_t)
        if scale is not None:
            g = g / cast(scale)
            grad[...] = g.astype(grad.dtype)
        if maximize:
            g = -g
        if wd != 0:
            g = _fma(wd, p, g, m_t)
        vectorized = _vectorized(p.size, aligned)
        scaled = scale is not None
        if len(arrays) == 3:
            buf = arrays[2]
            if first_step:
                mb = g
            elif vectorized and maximize and wd == 0 and not scaled:
                mb = _fma(mu, buf.astype(m_t), (cast(1) - damp) * g, m_t)
            else:
                mb = _fma(cast(1) - damp, g, mu * buf.astype(m_t), m_t)
            buf[...] = mb.astype(buf.dtype)
            g = _fma(mu, mb, g, m_t) if nesterov else mb
        if param.dtype == np.float32 and vectorized and scaled:  # lanes 0-2 round lr * g
            lane = _lanes(p.size, aligned)
            p = np.where(lane == 3, _fma(-lr, g, p, m_t), p - lr * g)
        else:
            p = _fma(-lr, g, p, m_t)
    param[...] = p.astype(param.dtype)


# lr, weight_decay, momentum, dampening, lr_ptr, grad_scale, found_inf, nesterov, maximize,
# first_step
_SGD_PARAMS = (*(Arg("d"),) * 4, *(Arg("P"),) * 3, *(Arg("i"),) * 3)
_SGD = Kernel("fused_sgd", _INCREMENT.source, list_reference(_sgd_step))

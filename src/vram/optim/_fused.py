"""The fused optimizers' host side: launch plans kept while a group's tensors stay the same,
the kernels of kernels/fused.cu, and the same arithmetic in NumPy for sim and cpu devices.

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
from .._streams import current_stream
from .._tensor import Tensor
from ..ops._multi_tensor import ElementListPlan, TensorListPlan, kernel_source

__all__ = ["FusedPlans", "fused_adam", "fused_sgd", "group_by_device_and_dtype"]


def _source() -> str:
    return kernel_source("optim/kernels/fused.cu")


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
    """The plans of one device and dtype: the update's and the steps'."""

    __slots__ = ("plan", "step_plan")

    def __init__(self, lists: list[list[Tensor]], steps: list[Tensor] | None) -> None:
        self.plan = TensorListPlan(lists, steps)
        self.step_plan = ElementListPlan(steps) if steps else None


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


def _reader(t: Tensor | None) -> Callable[[], float] | None:
    """For host runs: a function reading ``t``'s element when the queued work runs (the
    work keeps its address, as a kernel does)."""
    if t is None:
        return None
    if t.device.type == "cpu":
        array = t.numpy().reshape(-1)
        return lambda: float(array[0])
    view, address = t.device.driver.view, t.data_ptr()
    return lambda: float(view(address, 4).view(np.float32)[0])


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
        stream = None if device.type == "cpu" else current_stream(device)
        lr_value, lr_tensor = _lr(device, lr)
        scale = _on(device, grad_scale, "grad_scale")
        found = _on(device, found_inf, "found_inf")
        assert cached.step_plan is not None
        cached.step_plan.launch(
            _source, "vram::optim::increment_steps<{N}>", (), stream, _increment
        )
        depth = len(lists)
        kernel = f"vram::optim::fused_adam<{p_dtype.c_type}, {s_dtype.c_type}, {depth}, {{N}}>"
        args = (
            np.float64(lr_value),
            np.float64(beta1),
            np.float64(beta2),
            np.float64(weight_decay),
            np.float64(eps),
            _pointer(lr_tensor),
            _pointer(scale),
            _pointer(found),
            np.int32(maximize),
            np.int32(adamw),
        )
        host = None
        if device.type != "cuda":  # the same arithmetic in NumPy, reading device scalars late
            consts = (lr_value, beta1, beta2, weight_decay, eps, maximize, adamw)
            host = _adam_host(consts, _reader(lr_tensor), _reader(scale), _reader(found))
        cached.plan.launch(_source, kernel, args, stream, host=host, host_aligned=True)
        if found is not None:
            read = _reader(found) if device.type != "cuda" else None
            cached.step_plan.launch(
                _source,
                "vram::optim::unskip_steps<{N}>",
                (_pointer(found),),
                stream,
                lambda step, read=read: _unskip(step, read),
            )


def _unskip(step: np.ndarray, read: Callable[[], float] | None) -> None:
    assert read is not None
    step[0] = step[0] - np.float32(1) * np.float32(read())


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


def _adam_host(
    consts: tuple,
    lr_reader: Callable[[], float] | None,
    scale_reader: Callable[[], float] | None,
    found_reader: Callable[[], float] | None,
) -> Callable[[list[np.ndarray], np.ndarray], None]:
    """The fused Adam kernel's arithmetic in NumPy (kernels/fused.cu: adam_math): the same
    roundings, each FMA rounded once."""
    lr0, beta1, beta2, weight_decay, eps, maximize, adamw = consts

    def run(arrays: list[np.ndarray], step_view: np.ndarray, aligned: bool) -> None:
        if found_reader is not None and found_reader() == 1:
            return
        param, grad, exp_avg, exp_avg_sq = arrays[:4]
        m_t = _opmath(param.dtype)
        cast = m_t.type
        lr = cast(lr_reader() if lr_reader is not None else lr0)
        b1, b2, wd, ep = cast(beta1), cast(beta2), cast(weight_decay), cast(eps)
        step = cast(step_view[0])
        with np.errstate(all="ignore"):
            bc1 = cast(1) - np.power(b1, step)
            bc2_sqrt = np.sqrt(cast(1) - np.power(b2, step))
            p = param.astype(m_t)
            g = grad.astype(m_t)
            if scale_reader is not None:
                g = g / cast(scale_reader())
                grad[...] = g.astype(grad.dtype)
            if maximize:
                g = -g
            if wd != 0:
                if adamw:
                    p = _fma(-(lr * wd), p, p, m_t)
                elif len(arrays) == 5 or scale_reader is not None:
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

    return run


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
        stream = None if device.type == "cpu" else current_stream(device)
        lr_value, lr_tensor = _lr(device, lr)
        scale = _on(device, grad_scale, "grad_scale")
        found = _on(device, found_inf, "found_inf")
        kernel = f"vram::optim::fused_sgd<{p_dtype.c_type}, {len(lists)}, {{N}}>"
        args = (
            np.float64(lr_value),
            np.float64(weight_decay),
            np.float64(momentum),
            np.float64(dampening),
            _pointer(lr_tensor),
            _pointer(scale),
            _pointer(found),
            np.int32(nesterov),
            np.int32(maximize),
            np.int32(first_step),
        )
        host = None
        if device.type != "cuda":  # the same arithmetic in NumPy, reading device scalars late
            consts = (lr_value, weight_decay, momentum, dampening, nesterov, maximize, first_step)
            host = _sgd_host(consts, _reader(lr_tensor), _reader(scale), _reader(found))
        cached.plan.launch(_source, kernel, args, stream, host=host, host_aligned=True)


def _sgd_host(
    consts: tuple,
    lr_reader: Callable[[], float] | None,
    scale_reader: Callable[[], float] | None,
    found_reader: Callable[[], float] | None,
) -> Callable[[list[np.ndarray], Any], None]:
    """The fused SGD kernel's arithmetic in NumPy (kernels/fused.cu: sgd_math): the same
    roundings, each FMA rounded once."""
    lr0, weight_decay, momentum, dampening, nesterov, maximize, first_step = consts

    def run(arrays: list[np.ndarray], _: Any, aligned: bool) -> None:
        if found_reader is not None and found_reader() == 1:
            return
        param, grad = arrays[:2]
        m_t = _opmath(param.dtype)
        cast = m_t.type
        lr = cast(lr_reader() if lr_reader is not None else lr0)
        wd, mu, damp = cast(weight_decay), cast(momentum), cast(dampening)
        with np.errstate(all="ignore"):
            p = param.astype(m_t)
            g = grad.astype(m_t)
            if scale_reader is not None:
                g = g / cast(scale_reader())
                grad[...] = g.astype(grad.dtype)
            if maximize:
                g = -g
            if wd != 0:
                g = _fma(wd, p, g, m_t)
            vectorized = _vectorized(p.size, aligned)
            scaled = scale_reader is not None
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

    return run

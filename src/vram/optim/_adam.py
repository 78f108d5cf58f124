"""Adam and AdamW (torch.optim.Adam / AdamW): names, defaults and semantics of PyTorch's,
without autograd.

Three implementations, chosen per group as PyTorch chooses them:
- ``fused=True``: kernels/fused.cu, PyTorch's fused arithmetic; a few launches per step;
  honours ``grad_scale`` / ``found_inf`` (set as optimizer attributes by a grad scaler).
- ``foreach=True`` (the default on cuda and sim when neither is given): the ``_foreach_*``
  ops, PyTorch's _multi_tensor_adam sequence.
- for-loop (``foreach=False``): the same sequence one parameter at a time.

State per parameter: ``step`` (a float32 0-d tensor: on the parameter's device when fused or
capturable, else on the cpu), ``exp_avg``, ``exp_avg_sq`` and, with amsgrad,
``max_exp_avg_sq``, in the parameter's dtype (or ``state_dtype``, vram's own option: float32
moments for float16 / bfloat16 parameters, fused only).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .._dtypes import as_dtype, float32
from .._factories import tensor, zeros
from .._tensor import Tensor
from ..ops import _foreach as fe
from . import _fused
from ._optimizer import Optimizer, ParamsT, _to_scalar

__all__ = ["Adam", "AdamW"]

_FUSED_DEVICES = ("cuda", "sim", "cpu")  # where fused=True runs (cpu and sim: NumPy)
_FOREACH_DEVICES = ("cuda", "sim")  # where foreach is the default


class Adam(Optimizer):
    """Implements the Adam algorithm (torch.optim.Adam; ``decoupled_weight_decay=True`` is
    AdamW). ``lr`` is a float or a one-element tensor (a device tensor needs fused=True or
    capturable=True)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float | Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
        state_dtype: Any = None,
    ) -> None:
        if isinstance(lr, Tensor):
            if foreach and not capturable:
                raise ValueError(
                    "lr as a Tensor is not supported for capturable=False and foreach=True"
                )
            if lr.numel() != 1:
                raise ValueError("Tensor lr must be 1-element")
        elif not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if any(isinstance(b, Tensor) for b in betas):
            raise ValueError("betas must be floats (vram takes no Tensor betas)")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise ValueError("differentiable=True needs autograd, which vram does not have")
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
            "foreach": foreach,
            "capturable": capturable,
            "differentiable": differentiable,
            "fused": fused,
            "decoupled_weight_decay": decoupled_weight_decay,
        }
        self.state_dtype = None if state_dtype is None else as_dtype(state_dtype)
        super().__init__(params, defaults)
        if fused:
            self._step_supports_amp_scaling = True
            if foreach:
                raise RuntimeError("`fused` and `foreach` cannot be `True` together.")

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("state_dtype", None)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)
            group.setdefault("maximize", False)
            group.setdefault("foreach", None)
            group.setdefault("capturable", False)
            group.setdefault("differentiable", False)
            group.setdefault("decoupled_weight_decay", False)
            group.setdefault("fused", None)

    # ---- state --------------------------------------------------------------------------------
    def _state_dtype(self, param: Tensor, key: Any) -> Any:
        moment = key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
        if moment and self.state_dtype is not None and param.dtype.itemsize == 2:
            return self.state_dtype
        return param.dtype

    def _moment_dtype(self, p: Tensor, fused: bool) -> Any:
        wanted = self.state_dtype
        if wanted is None or wanted == p.dtype:
            return p.dtype
        if not (fused and wanted == float32 and p.dtype.itemsize == 2):
            raise ValueError(
                f"state_dtype={wanted.name}: only float32 moments for float16/bfloat16 "
                f"parameters, with fused=True (this parameter is {p.dtype.name})"
            )
        return wanted

    def _init_group(self, index: int, group: dict[str, Any]) -> tuple[list[Tensor], ...]:
        """The group's parameters with a gradient and their gradients, moments and steps;
        checks new gradients and makes missing state (PyTorch's lazy initialization)."""
        if group["foreach"] and isinstance(group["lr"], Tensor) and not group["capturable"]:
            raise RuntimeError(
                "lr as a Tensor is not supported for capturable=False and foreach=True"
            )
        all_params = group["params"]
        all_grads, checked = self._gradients(index, all_params)
        keys = ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
        if not group["amsgrad"]:
            keys.remove("max_exp_avg_sq")
        if checked:  # the same gradients as last step: their state exists
            params = [p for p, g in zip(all_params, all_grads, strict=True) if g is not None]
            states = [self.state[p] for p in params]
            try:
                found = {key: list(map(operator.itemgetter(key), states)) for key in keys}
            except KeyError:  # state changed by hand (or amsgrad turned on): the full path
                checked = False
        if not checked:
            params = []
            for j, (p, grad) in enumerate(zip(all_params, all_grads, strict=True)):
                if grad is not None:
                    _check_grad(index, j, p, grad)
                    self._init_state(p, group)
                    params.append(p)
            states = [self.state[p] for p in params]
            found = {key: [state[key] for state in states] for key in keys}
            self._checked_gradients(index, all_params, all_grads)
        grads = [g for g in all_grads if g is not None]
        max_sqs = found.get("max_exp_avg_sq", [])
        return params, grads, found["exp_avg"], found["exp_avg_sq"], max_sqs, found["step"]

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        if len(state) != 0:
            return
        fused = bool(group["fused"])
        if fused:
            _check_fused(p)
        state["step"] = (
            zeros((), dtype=float32, device=p.device)
            if fused or group["capturable"]
            else tensor(0.0, dtype=float32, device="cpu")
        )
        moments = self._moment_dtype(p, fused)
        state["exp_avg"] = zeros(p.shape, dtype=moments, device=p.device)
        state["exp_avg_sq"] = zeros(p.shape, dtype=moments, device=p.device)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = zeros(p.shape, dtype=moments, device=p.device)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adam step over every group (see the module docstring). Queued on each
        device's current stream; synchronizes only for a for-loop/foreach group whose steps
        live on the cpu (never for fused or capturable groups)."""
        loss = None if closure is None else closure()
        for index, group in enumerate(self.param_groups):
            params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps = self._init_group(index, group)
            if not params:
                continue
            beta1, beta2 = group["betas"]
            options = {
                "amsgrad": group["amsgrad"],
                "beta1": beta1,
                "beta2": beta2,
                "lr": group["lr"],
                "weight_decay": group["weight_decay"],
                "eps": group["eps"],
                "maximize": group["maximize"],
                "decoupled_weight_decay": group["decoupled_weight_decay"],
            }
            fused, foreach = _choose(group, params)
            if fused:
                _fused.fused_adam(
                    self._fused_plans,
                    index,
                    params,
                    grads,
                    exp_avgs,
                    exp_avg_sqs,
                    max_sqs,
                    steps,
                    amsgrad=options["amsgrad"],
                    beta1=beta1,
                    beta2=beta2,
                    lr=options["lr"],
                    weight_decay=options["weight_decay"],
                    eps=options["eps"],
                    maximize=options["maximize"],
                    adamw=options["decoupled_weight_decay"],
                    grad_scale=getattr(self, "grad_scale", None),
                    found_inf=getattr(self, "found_inf", None),
                )
                continue
            _check_not_scaled(self)
            if any(s.dtype != p.dtype for s, p in zip(exp_avgs, params, strict=True)):
                raise RuntimeError("state_dtype other than the parameters' needs fused=True")
            lists = (params, grads, exp_avgs, exp_avg_sqs, max_sqs, steps)
            if foreach:
                _multi_tensor_adam(*lists, capturable=group["capturable"], **options)
            else:
                for i in range(len(params)):
                    one = tuple([lst[i]] if lst else [] for lst in lists)
                    _multi_tensor_adam(*one, capturable=group["capturable"], **options)
        return loss


class AdamW(Adam):
    """Implements AdamW (torch.optim.AdamW): Adam with decoupled weight decay (default 1e-2)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float | Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        state_dtype: Any = None,
    ) -> None:
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
            state_dtype=state_dtype,
        )

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True


# ---- checks and choices ------------------------------------------------------------------------
def _check_grad(group: int, index: int, p: Tensor, grad: Any) -> None:
    """PyTorch refuses such a ``.grad`` when it is assigned; vram, at the step."""
    where = f"parameter {index} of group {group}"
    if not isinstance(grad, Tensor):
        raise TypeError(f"{where}: .grad must be a vram.Tensor or None, got {type(grad).__name__}")
    if grad.shape != p.shape:
        raise RuntimeError(
            f"{where}: assigned grad has data of a different size ({tuple(grad.shape)} for a "
            f"parameter of {tuple(p.shape)})"
        )
    if grad.dtype != p.dtype:
        raise RuntimeError(
            f"{where}: assigned grad has data of a different type ({grad.dtype.name} for a "
            f"{p.dtype.name} parameter)"
        )
    if grad.device != p.device:
        raise RuntimeError(
            f"{where}: assigned grad has data located on a different device ({grad.device} "
            f"for a parameter on {p.device})"
        )


def _check_not_scaled(optimizer: Optimizer) -> None:
    scaled = getattr(optimizer, "grad_scale", None), getattr(optimizer, "found_inf", None)
    if any(t is not None for t in scaled):
        raise RuntimeError("grad_scale and found_inf are only supported with fused=True")


def _check_fused(p: Tensor) -> None:
    if not (p.device.type in _FUSED_DEVICES and p.dtype.is_floating_point):
        raise RuntimeError(
            "`fused=True` requires all the params to be floating point Tensors of supported "
            f"devices: {list(_FUSED_DEVICES)} but {p.dtype.name} and {p.device.type}"
        )
    if not p.is_contiguous():
        raise RuntimeError(
            f"`fused=True` requires contiguous params; got one of shape {tuple(p.shape)} and "
            f"strides {p.stride()} (make it contiguous)"
        )


def _choose(group: dict[str, Any], params: list[Tensor]) -> tuple[bool, bool]:
    """(fused, foreach) for a group: as given, else foreach where every parameter is on a
    cuda or sim device and lr is not a tensor without capturable (PyTorch's defaults)."""
    fused, foreach = group["fused"], group["foreach"]
    if fused is None and foreach is None:
        foreach = all(p.device.type in _FOREACH_DEVICES for p in params)
        if foreach and isinstance(group["lr"], Tensor) and not group["capturable"]:
            foreach = False
    return bool(fused), bool(foreach)


def _step_values(steps: list[Tensor]) -> list[float]:
    """The values of cpu step tensors (PyTorch's _get_value), read from their host memory
    directly: ``Tensor.item`` builds a NumPy view per call, too slow for thousands."""
    values = []
    for s in steps:
        storage = s._storage
        if storage.host is None or s.dtype != float32:
            values.append(float(s.item()))
            continue
        at = s._offset * 4
        values.append(float(storage.host[at : at + 4].view(np.float32)[0]))
    return values


# ---- the foreach sequence (PyTorch's _multi_tensor_adam) -----------------------------------------
def _multi_tensor_adam(
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
    capturable: bool,
    decoupled_weight_decay: bool,
) -> None:
    if not params:
        return
    lr = _to_scalar(lr)
    if isinstance(lr, Tensor) and not capturable:
        lr = float(lr.item())  # the for-loop takes a tensor lr as a number (synchronizes)
    groups = _fused.group_by_device_and_dtype([params])
    for index in groups.values():
        p = [params[i] for i in index]
        g = [grads[i] for i in index]
        m = [exp_avgs[i] for i in index]
        v = [exp_avg_sqs[i] for i in index]
        steps = [state_steps[i] for i in index]
        if maximize:
            g = fe._foreach_neg(g)
        fe._foreach_add_(steps, 1)
        if weight_decay != 0:
            if decoupled_weight_decay:
                fe._foreach_mul_(p, 1 - lr * weight_decay)  # a 0-d tensor for a tensor lr
            elif maximize:
                fe._foreach_add_(g, p, alpha=weight_decay)
            else:
                g = fe._foreach_add(g, p, alpha=weight_decay)
        fe._foreach_lerp_(m, g, 1 - beta1)
        fe._foreach_mul_(v, beta2)
        fe._foreach_addcmul_(v, g, g, 1 - beta2)
        del g
        if amsgrad:
            largest = [max_exp_avg_sqs[i] for i in index]
            fe._foreach_maximum_(largest, v)
            root = fe._foreach_sqrt(largest)
        else:
            root = fe._foreach_sqrt(v)
        if capturable:
            bc1 = fe._foreach_pow(beta1, steps)
            bc2 = fe._foreach_pow(beta2, steps)
            fe._foreach_sub_(bc1, 1)
            fe._foreach_sub_(bc2, 1)
            fe._foreach_neg_(bc2)
            fe._foreach_div_(bc1, lr)
            fe._foreach_reciprocal_(bc1)
            fe._foreach_sqrt_(bc2)
            fe._foreach_div_(root, bc2)
            fe._foreach_add_(root, eps)
            fe._foreach_div_(root, bc1)
            fe._foreach_addcdiv_(p, m, root)
        else:
            values = _step_values(steps)
            step_size = [(lr / (1 - beta1**s)) * -1 for s in values]
            bc2_sqrt = [(1 - beta2**s) ** 0.5 for s in values]
            fe._foreach_div_(root, bc2_sqrt)
            fe._foreach_add_(root, eps)
            fe._foreach_addcdiv_(p, m, root, step_size)

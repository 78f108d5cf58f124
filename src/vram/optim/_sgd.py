"""SGD (torch.optim.SGD): momentum, dampening, Nesterov, weight decay, maximize; the same
three implementations as Adam (fused, foreach, for-loop), without autograd.

State per parameter (when momentum is not 0): ``momentum_buffer``, set to the gradient on a
parameter's first step (PyTorch's rule: dampening applies from the second step on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._factories import zeros
from .._tensor import Tensor
from ..ops import _foreach as fe
from . import _fused
from ._adam import _check_fused, _check_grad, _check_not_scaled, _choose
from ._optimizer import Optimizer, ParamsT, _to_scalar

__all__ = ["SGD"]


class SGD(Optimizer):
    """Implements stochastic gradient descent, optionally with momentum (torch.optim.SGD).
    ``lr`` is a float or a one-element tensor (read on the host unless fused)."""

    def __init__(
        self,
        params: ParamsT,
        lr: float | Tensor = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        if isinstance(lr, Tensor):
            if lr.numel() != 1:
                raise ValueError("Tensor lr must be 1-element")
        elif lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise ValueError("differentiable=True needs autograd, which vram does not have")
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
            "foreach": foreach,
            "differentiable": differentiable,
            "fused": fused,
        }
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)
        if fused:
            self._step_supports_amp_scaling = True
            if foreach:
                raise RuntimeError("`fused` and `foreach` cannot be `True` together.")

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        for group in self.param_groups:
            group.setdefault("nesterov", False)
            group.setdefault("maximize", False)
            group.setdefault("foreach", None)
            group.setdefault("differentiable", False)
            group.setdefault("fused", False)

    def _init_group(
        self, index: int, group: dict[str, Any]
    ) -> tuple[list[Tensor], list[Tensor], list[Tensor | None]]:
        """The group's parameters with a gradient, their gradients and momentum buffers
        (None before a parameter's first step); checks new gradients."""
        all_params = group["params"]
        all_grads, checked = self._gradients(index, all_params)
        params = [p for p, g in zip(all_params, all_grads, strict=True) if g is not None]
        grads = [g for g in all_grads if g is not None]
        if not checked:
            for j, (p, grad) in enumerate(zip(all_params, all_grads, strict=True)):
                if grad is not None:
                    _check_grad(index, j, p, grad)
                    if group["fused"]:
                        _check_fused(p)
            self._checked_gradients(index, all_params, all_grads)
        buffers: list[Tensor | None] = []
        if group["momentum"] != 0:
            buffers = [self.state[p].get("momentum_buffer") for p in params]
        return params, grads, buffers

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One SGD step over every group, queued on each device's current stream."""
        loss = None if closure is None else closure()
        for index, group in enumerate(self.param_groups):
            params, grads, buffers = self._init_group(index, group)
            if not params:
                continue
            options = {
                "weight_decay": group["weight_decay"],
                "momentum": group["momentum"],
                "lr": group["lr"],
                "dampening": group["dampening"],
                "nesterov": group["nesterov"],
                "maximize": group["maximize"],
            }
            fused, foreach = _choose(group, params)
            if fused:
                self._fused_step(index, params, grads, buffers, options)
            else:
                _check_not_scaled(self)
                if foreach:
                    _multi_tensor_sgd(params, grads, buffers, **options)
                else:
                    _single_tensor_sgd(params, grads, buffers, **options)
            if group["momentum"] != 0:
                for p, buf in zip(params, buffers, strict=True):
                    self.state[p]["momentum_buffer"] = buf
        return loss

    def _fused_step(
        self,
        index: int,
        params: list[Tensor],
        grads: list[Tensor],
        buffers: list[Tensor | None],
        options: dict[str, Any],
    ) -> None:
        """PyTorch's _fused_sgd. A parameter's first step (no buffer yet) sets its buffer to
        the gradient; parameters that already have buffers and new ones run as two calls."""
        scaling = {
            "grad_scale": getattr(self, "grad_scale", None),
            "found_inf": getattr(self, "found_inf", None),
        }
        if options["momentum"] == 0:
            _fused.fused_sgd(
                self._fused_plans,
                index,
                params,
                grads,
                None,
                first_step=False,
                **options,
                **scaling,
            )
            return
        new = [i for i, b in enumerate(buffers) if b is None]
        for i in new:
            buffers[i] = zeros(grads[i].shape, dtype=grads[i].dtype, device=grads[i].device)
        chosen = set(new)
        old = [i for i in range(len(params)) if i not in chosen]
        for first_step, part in ((True, new), (False, old)):
            if part:
                _fused.fused_sgd(
                    self._fused_plans,
                    index,
                    [params[i] for i in part],
                    [grads[i] for i in part],
                    [buffers[i] for i in part],  # type: ignore[misc]
                    first_step=first_step,
                    **options,
                    **scaling,
                )


def _lr_number(lr: Any) -> float:
    lr = _to_scalar(lr)
    return float(lr.item()) if isinstance(lr, Tensor) else float(lr)


def _multi_tensor_sgd(
    params: list[Tensor],
    grads: list[Tensor],
    buffers: list[Tensor | None],
    *,
    weight_decay: float,
    momentum: float,
    lr: Any,
    dampening: float,
    nesterov: bool,
    maximize: bool,
) -> None:
    """PyTorch's _multi_tensor_sgd (which, as PyTorch's, adds the Nesterov term into the
    gradients themselves when there is neither maximize nor weight decay)."""
    lr = _lr_number(lr)
    for index in _fused.group_by_device_and_dtype([params]).values():
        p = [params[i] for i in index]
        g = [grads[i] for i in index]
        if maximize:
            g = fe._foreach_neg(g)
        if weight_decay != 0:
            if maximize:
                fe._foreach_add_(g, p, alpha=weight_decay)
            else:
                g = fe._foreach_add(g, p, alpha=weight_decay)
        if momentum != 0:
            bufs = [buffers[i] for i in index]
            if all(b is not None for b in bufs):
                fe._foreach_mul_(bufs, momentum)
                fe._foreach_add_(bufs, g, alpha=1 - dampening)
            else:
                for k, buf in enumerate(bufs):
                    if buf is None:
                        bufs[k] = buffers[index[k]] = g[k].clone()
                    else:
                        fe._foreach_mul_([buf], momentum)
                        fe._foreach_add_([buf], [g[k]], alpha=1 - dampening)
            if nesterov:
                fe._foreach_add_(g, bufs, alpha=momentum)
            else:
                g = bufs  # type: ignore[assignment]
        fe._foreach_add_(p, g, alpha=-lr)


def _single_tensor_sgd(
    params: list[Tensor],
    grads: list[Tensor],
    buffers: list[Tensor | None],
    *,
    weight_decay: float,
    momentum: float,
    lr: Any,
    dampening: float,
    nesterov: bool,
    maximize: bool,
) -> None:
    """PyTorch's _single_tensor_sgd, one parameter at a time."""
    lr = _lr_number(lr)
    for i, param in enumerate(params):
        grad = fe._foreach_neg([grads[i]])[0] if maximize else grads[i]
        if weight_decay != 0:
            grad = fe._foreach_add([grad], [param], alpha=weight_decay)[0]
        if momentum != 0:
            buf = buffers[i]
            if buf is None:
                buf = buffers[i] = grad.clone()
            else:
                fe._foreach_mul_([buf], momentum)
                fe._foreach_add_([buf], [grad], alpha=1 - dampening)
            if nesterov:
                grad = fe._foreach_add([grad], [buf], alpha=momentum)[0]
            else:
                grad = buf
        fe._foreach_add_([param], [grad], alpha=-lr)

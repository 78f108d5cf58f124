"""Optimizer: the base of vram's optimizers, with torch.optim.Optimizer's names and layout.

- ``param_groups``: a list of dicts, each with ``"params"`` (a list of tensors) and the
  group's options (defaults filled in); ``state``: a dict tensor -> dict of that parameter's
  state tensors. vram has no autograd: a parameter's gradient is its ``.grad``, a tensor the
  user sets (None skips the parameter, as in PyTorch).
- ``state_dict()`` / ``load_state_dict()`` in PyTorch's layout: ``{"state": {index: {...}},
  "param_groups": [{..., "params": [index, ...]}]}``. A loaded state may hold vram tensors,
  or PyTorch / NumPy arrays (anything with ``__dlpack__``, or an ndarray), which are copied
  into vram memory; tensors are cast to the parameter's dtype and device as PyTorch does
  (``step`` stays as it is unless the group is fused or capturable: then float32 on the
  parameter's device).
- Gradient checks happen at ``step``: a gradient of another shape, dtype or device than its
  parameter is a RuntimeError naming the group and parameter (PyTorch refuses it when
  ``.grad`` is assigned).
"""

from __future__ import annotations

import copy
import operator
import warnings
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import numpy as np

from .._dtypes import dtype, float32
from .._tensor import Tensor
from ._fused import FusedPlans

__all__ = ["Optimizer", "ParamsT"]

ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]] | Iterable[tuple[str, Tensor]]


class Optimizer:
    """Base class for all optimizers (torch.optim.Optimizer).

    Args:
        params: an iterable of tensors, of ``(name, tensor)`` pairs, or of dicts (parameter
            groups with their own options).
        defaults: the options a group takes when it does not set them.
    """

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or "
                "dicts, but got vram.Tensor"
            )
        self.state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        self._fused_plans = FusedPlans()  # launch plans of the fused paths
        self._checked: dict[int, tuple[list[Tensor], list[Any]]] = {}  # see _gradients
        groups = list(params)
        if len(groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # ---- pickling and printing ------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._fused_plans = FusedPlans()
        self._checked = {}
        self.defaults.setdefault("differentiable", False)

    def __repr__(self) -> str:
        text = self.__class__.__name__ + " ("
        for i, group in enumerate(self.param_groups):
            text += f"\nParameter Group {i}\n"
            for key in sorted(group):
                if key != "params":
                    text += f"    {key}: {group[key]}\n"
        return text + ")"

    # ---- groups -----------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters, with options of its own, to ``param_groups``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but the "
                "ordering of tensors in sets will change between runs. Please use a list instead."
            )
        else:
            params = list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        tensors = [p[1] if isinstance(p, tuple) else p for p in params]
        if names and len(names) != len(tensors):
            raise ValueError(
                "all optimizer params should be with/without names. Some param names are missing"
            )
        param_group["params"] = tensors
        if names:
            param_group["param_names"] = names
        for p in tensors:
            if not isinstance(p, Tensor):
                raise TypeError(
                    "optimizer can only optimize Tensors, but one of the params is "
                    f"{type(p).__module__}.{type(p).__name__}"
                )
        for name, default in self.defaults.items():
            param_group.setdefault(name, default)
        if len(tensors) != len({id(p) for p in tensors}):
            warnings.warn(
                "optimizer contains a parameter group with duplicate parameters; in future, "
                "this will cause an error",
                stacklevel=3,
            )
        seen = {id(p) for group in self.param_groups for p in group["params"]}
        for group in self.param_groups:
            if ("param_names" in param_group) != ("param_names" in group):
                which = "with names" if "param_names" in param_group else "without names"
                raise ValueError(
                    "all optimizer param groups should be with/without names. "
                    f"cannot add param group {which} to the optimizer"
                )
        if any(id(p) in seen for p in tensors):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    # ---- gradients ------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (``set_to_none``, the default) or zero it in place
        (with foreach kernels when the optimizer is foreach or fused)."""
        from ..ops._foreach import _foreach_zero_

        batched = bool(self.defaults.get("foreach") or self.defaults.get("fused"))
        grads: list[Tensor] = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                elif batched and p.grad.dtype.is_floating_point:
                    grads.append(p.grad)
                else:
                    p.grad.zero_()
        if grads:
            _foreach_zero_(grads)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update the parameters from their gradients; returns ``closure()`` when given."""
        raise NotImplementedError

    def _gradients(self, index: int, params: list[Tensor]) -> tuple[list[Any], bool]:
        """The ``.grad`` of each parameter of group ``index``, and whether they are the very
        tensors that the group's last step checked (then a step need not check them again:
        tensors never change shape, dtype or device). Held weakly: a dropped gradient is
        freed at once."""
        grads = [p.grad for p in params]
        seen = self._checked.get(index)
        if seen is None or len(seen[0]) != len(params):
            return grads, False
        is_ = operator.is_
        same = all(map(is_, params, seen[0])) and all(
            map(is_, grads, [None if ref is None else ref() for ref in seen[1]])
        )
        return grads, same

    def _checked_gradients(self, index: int, params: list[Tensor], grads: list[Any]) -> None:
        """Remember that group ``index``'s gradients ``grads`` passed the checks."""
        refs = [None if g is None else weakref.ref(g) for g in grads]
        self._checked[index] = (list(params), refs)

    # ---- state dicts ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state in PyTorch's layout: parameters are replaced by their index
        (in group order); the state's tensors are the optimizer's own (not copies)."""
        mapping: dict[int, int] = {}
        start = 0

        def pack(group: dict[str, Any]) -> dict[str, Any]:
            nonlocal start
            packed = {k: v for k, v in group.items() if k != "params"}
            for i, p in enumerate(group["params"], start):
                mapping.setdefault(id(p), i)
            packed["params"] = [mapping[id(p)] for p in group["params"]]
            start += len(packed["params"])
            return packed

        groups = [pack(g) for g in self.param_groups]
        state = {(mapping[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state from ``state_dict()`` (of vram or PyTorch: see the module docstring)."""
        state_dict = state_dict.copy()
        groups = self.param_groups
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for g, s in zip(groups, saved_groups, strict=True):
            if len(g["params"]) != len(s["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that doesn't match the size "
                    "of optimizer's group"
                )
        id_map = dict(
            zip(
                chain.from_iterable(g["params"] for g in saved_groups),
                chain.from_iterable(g["params"] for g in groups),
                strict=True,
            )
        )
        saved_params = state_dict["param_groups"]

        def cast(param: Tensor, value: Any, param_id: Any, key: Any = None) -> Any:
            if _is_array(value):
                return self._cast_state(param, _as_vram(value), param_id, saved_params, key)
            if isinstance(value, dict):
                return {k: cast(param, v, param_id, k) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(cast(param, v, param_id) for v in value)
            return value

        state: defaultdict[Any, dict[str, Any]] = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                param = id_map[k]
                state[param] = cast(param, v, k)
            else:
                state[k] = v

        def update(group: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
            new["params"] = group["params"]
            if "param_names" in group and "param_names" not in new:
                new["param_names"] = group["param_names"]
            return new

        new_groups = [update(g, ng) for g, ng in zip(groups, saved_groups, strict=True)]
        self.__setstate__({"state": state, "param_groups": new_groups})

    def _cast_state(
        self, param: Tensor, value: Tensor, param_id: Any, groups: list[dict[str, Any]], key: Any
    ) -> Tensor:
        """PyTorch's _process_value_according_to_param_policy: ``step`` keeps its device and
        dtype unless the group is fused or capturable (then float32 on the parameter's
        device); other state takes the parameter's device, and its dtype when floating."""
        fused = capturable = False
        for group in groups:
            if param_id in group["params"]:
                fused = bool(group.get("fused", False))
                capturable = bool(group.get("capturable", False))
                break
        if key == "step":
            return value.to(param.device, float32) if fused or capturable else value
        if param.dtype.is_floating_point:
            return value.to(param.device, self._state_dtype(param, key))
        return value.to(param.device)

    def _state_dtype(self, param: Tensor, key: Any) -> dtype:
        """The dtype of a parameter's floating-point state ``key``: the parameter's."""
        return param.dtype


def _is_array(value: Any) -> bool:
    return isinstance(value, (Tensor, np.ndarray)) or hasattr(value, "__dlpack__")


def _as_vram(value: Any) -> Tensor:
    """A vram tensor holding ``value``: itself, or a copy in vram memory of a PyTorch tensor
    (through DLPack, on its device) or of a NumPy array (on the cpu)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        from .._factories import tensor

        return tensor(value, device="cpu")
    from .._interop import from_dlpack

    return from_dlpack(value).clone()


def _to_scalar(value: Any) -> Any:
    """A one-element tensor as a 0-d tensor; anything else unchanged (PyTorch's _to_scalar)."""
    if isinstance(value, Tensor) and value.ndim != 0:
        if value.numel() != 1:
            raise ValueError("a tensor hyperparameter must have one element")
        return value.reshape(())
    return value

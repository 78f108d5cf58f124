"""torch.cuda's random-number functions for the current device's kind (cuda or sim): the
default generator of each device, seeding, and states (vram.ops._random)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._device import as_device, current_device_obj, device_count
from .._tensor import Tensor
from ..ops._random import _generator
from ..ops._random._generator import default_generators

__all__ = [
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
    "default_generators",
]


def _devices() -> list[Any]:
    kind = current_device_obj().type
    return [as_device(f"{kind}:{i}") for i in range(device_count(kind))]


def manual_seed(seed: Any) -> None:
    """Seed the current device's default generator."""
    _generator.default_generator(current_device_obj()).manual_seed(seed)


def manual_seed_all(seed: Any) -> None:
    """Seed the default generator of every device of the current kind, present and future."""
    _generator.seed_device_kind((current_device_obj().type,), seed)


def seed() -> int:
    """Seed the current device's default generator from the OS's entropy; the seed."""
    return _generator.default_generator(current_device_obj()).seed()


def seed_all() -> int:
    """Seed every default generator of the current kind from the OS's entropy; the seed."""
    value = _generator.default_generator(current_device_obj()).seed()
    manual_seed_all(value)
    return value


def initial_seed() -> int:
    """The seed of the current device's default generator."""
    return _generator.default_generator(current_device_obj()).initial_seed()


def get_rng_state(device: Any = None) -> Tensor:
    """The state of ``device``'s default generator (the current device when None)."""
    return _generator.default_generator(as_device(device)).get_state()


def set_rng_state(new_state: Tensor, device: Any = None) -> None:
    """Restore ``device``'s default generator (the current device when None)."""
    _generator.default_generator(as_device(device)).set_state(new_state)


def get_rng_state_all() -> list[Tensor]:
    """The states of every device's default generator, of the current kind."""
    return [_generator.default_generator(d).get_state() for d in _devices()]


def set_rng_state_all(new_states: Sequence[Tensor]) -> None:
    """Restore every device's default generator of the current kind, in device order."""
    for device, state in zip(_devices(), new_states, strict=False):
        _generator.default_generator(device).set_state(state)

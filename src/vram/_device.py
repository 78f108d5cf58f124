"""Devices: ``cuda:N`` (a real GPU), ``sim:N`` (the simulated GPU) and ``cpu``.

The current device is per thread, like PyTorch's. ``vram.device(x)`` is both the device
value (PyTorch's torch.device) and, used in a ``with``, the context manager that makes it
current (torch.cuda.device).
"""

from __future__ import annotations

import os
import threading
from typing import NamedTuple

from .driver import DeviceProperties, Driver, cuda_usable, get_driver

__all__ = [
    "Device",
    "device",
    "default_device",
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "get_device_name",
    "get_device_properties",
    "mem_get_info",
    "synchronize",
    "as_device",
    "current_device_obj",
]

_TYPES = ("cuda", "sim", "cpu")


class Device(NamedTuple):
    """A device: ``type`` is "cuda", "sim" or "cpu"; ``index`` is None only for cpu.

    A named tuple, so that hashing and comparing one (on every allocation) is cheap.
    """

    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device(type={self.type!r}, index={self.index})"

    @property
    def driver(self) -> Driver:
        if self.type == "cpu":
            raise ValueError("device: the cpu device has no driver (no streams or memory)")
        return get_driver(self.type)

    def __enter__(self) -> Device:
        previous = current_device_obj()
        set_device(self)  # first: a device that cannot be made current leaves no stack entry
        _state.__dict__.setdefault("stack", []).append(previous)
        return self

    def __exit__(self, *exc: object) -> None:
        set_device(_state.stack.pop())


def device(spec: object = None, index: int | None = None) -> Device:
    """PyTorch's torch.device: ``device("sim:1")``, ``device("cuda", 0)``, ``device(0)``.

    An int means that index of the default device type. Used in a ``with`` block it makes
    the device current (torch.cuda.device).
    """
    if index is not None:
        if not isinstance(spec, str):
            raise TypeError(f"device: with index=, the type must be a string, got {spec!r}")
        if type(index) is not int:
            raise TypeError(f"index: expected an int, got {index!r}")
        if index < 0:
            raise ValueError(f"index: device index must be non-negative, got {index}")
        return as_device(f"{spec}:{index}")
    return as_device(spec)


class _State(threading.local):
    current: Device | None = None


_state = _State()
_default: Device | None = None


def default_device() -> Device:
    """``cuda:0`` where a GPU is usable, else ``sim:0``; ``VRAM_DEVICE`` overrides."""
    global _default
    if _default is None:
        forced = os.environ.get("VRAM_DEVICE", "").strip()
        if forced:
            found = _parse(forced, "VRAM_DEVICE")
            if found.type == "cpu":
                raise ValueError("VRAM_DEVICE must name a 'cuda' or 'sim' device, not 'cpu'")
            _default = as_device(Device(found.type, found.index or 0), "VRAM_DEVICE")
        else:
            _default = Device("cuda", 0) if cuda_usable() else Device("sim", 0)
    return _default


def _parse(text: str, argument: str) -> Device:
    kind, _, number = text.strip().partition(":")
    if kind not in _TYPES:
        raise ValueError(f"{argument}: unknown device {text!r} (expected cuda:N, sim:N or cpu)")
    if kind == "cpu":
        if number not in ("", "0"):
            raise ValueError(f"{argument}: the cpu device has no index, got {text!r}")
        return Device("cpu")
    if number == "":
        return Device(kind, None)
    if not (number.isascii() and number.isdigit()):
        raise ValueError(f"{argument}: bad device index in {text!r}")
    return Device(kind, int(number))


def as_device(spec: object, argument: str = "device") -> Device:
    """Turn None / int / str / Device / a stream into a Device with an index (cpu has none).

    None is the current device; ``"sim"`` alone is that type's current index (0 if the
    current device is of another type). Raises ValueError / TypeError naming ``argument``.
    """
    if spec is None:
        return current_device_obj()
    if type(spec) is Device and spec in _checked:  # seen to exist before: the common case
        return spec  # type: ignore[return-value]
    if type(spec) is str:
        found = _named.get(spec)  # "cuda:0", resolved once
        if found is not None:
            return found
    if isinstance(spec, Device):
        found = spec
        if found.type not in _TYPES:
            raise ValueError(f"{argument}: unknown device type {found.type!r}")
        if found.index is not None and (type(found.index) is not int or found.index < 0):
            raise ValueError(f"{argument}: bad device index {found.index!r}")
    elif isinstance(spec, bool):
        raise TypeError(f"{argument}: expected a device, got {spec!r}")
    elif isinstance(spec, int):
        if spec < 0:
            raise ValueError(f"{argument}: device index must be non-negative, got {spec}")
        found = Device(current_device_obj().type, spec)
    elif isinstance(spec, str):
        found = _parse(spec, argument)
    elif hasattr(spec, "device") and isinstance(spec.device, Device):
        found = spec.device
    else:
        raise TypeError(f"{argument}: expected a device (int, str or vram.device), got {spec!r}")
    if found.type == "cpu":
        return found
    if found.index is None:
        current = current_device_obj()
        found = Device(found.type, current.index if current.type == found.type else 0)
    count = found.driver.device_count() if found.type == "sim" or cuda_usable() else 0
    if found.index >= count:
        raise ValueError(f"{argument}: {found} does not exist ({count} {found.type} devices)")
    _checked.add(found)
    if type(spec) is str and ":" in spec:  # names its index: the same device every time
        _named[spec] = found
    return found


_checked: set[Device] = set()  # devices as_device has already seen to exist
_named: dict[str, Device] = {}  # device strings with an index -> their checked Device


def current_device_obj() -> Device:
    """The current thread's current device (a Device)."""
    current = _state.current
    if current is None:
        current = _state.current = default_device()
    return current


def current_device() -> int:
    """The index of the current device (PyTorch's torch.cuda.current_device)."""
    return current_device_obj().index  # type: ignore[return-value]


def set_device(spec: object) -> None:
    """Make a device current for this thread: an index of the current type, or a device."""
    if spec is None:
        raise TypeError("device: set_device needs a device or an index, got None")
    found = as_device(spec)
    if found.type == "cpu":
        raise ValueError("device: the cpu device cannot be made current")
    _state.current = found
    found.driver.set_device(found.index)  # type: ignore[arg-type]


def is_available() -> bool:
    """True when a real CUDA GPU is usable (the simulator does not count)."""
    return cuda_usable()


def device_count(type: str | None = None) -> int:  # noqa: A002 - PyTorch-like keyword
    """How many devices of ``type`` (default: the default device's type) there are."""
    kind = type or default_device().type
    if kind == "cuda":
        return get_driver("cuda").device_count() if cuda_usable() else 0
    if kind == "sim":
        return get_driver("sim").device_count()
    raise ValueError(f"type must be 'cuda' or 'sim', got {kind!r}")


def get_device_properties(spec: object = None) -> DeviceProperties:
    found = as_device(spec)
    return found.driver.properties(found.index)  # type: ignore[arg-type]


def get_device_name(spec: object = None) -> str:
    return get_device_properties(spec).name


def mem_get_info(spec: object = None) -> tuple[int, int]:
    """(free, total) bytes of the device, as the driver reports them."""
    found = as_device(spec)
    return found.driver.mem_get_info(found.index)  # type: ignore[arg-type]


def synchronize(spec: object = None) -> None:
    """Wait for all work on every stream of the device. Synchronizes."""
    found = as_device(spec)
    found.driver.device_synchronize(found.index)  # type: ignore[arg-type]

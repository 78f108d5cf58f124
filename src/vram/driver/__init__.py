"""The device layer: the only package that calls CUDA. ``get_driver(kind)`` picks one."""

from __future__ import annotations

import threading

from ._base import DeviceProperties, Driver
from ._comm import DTYPES as COLLECTIVE_DTYPES
from ._comm import Communicator, communicator_type
from ._runtime import load_cuda_runtime

__all__ = [
    "Driver",
    "DeviceProperties",
    "get_driver",
    "cuda_usable",
    "Communicator",
    "communicator_type",
    "COLLECTIVE_DTYPES",
    "load_cuda_runtime",
]

_drivers: dict[str, Driver] = {}
_lock = threading.Lock()
_cuda_usable: bool | None = None


def get_driver(kind: str) -> Driver:
    """The process-wide driver for ``kind`` ("cuda" or "sim"), created on first use."""
    driver = _drivers.get(kind)
    if driver is not None:
        return driver
    with _lock:
        driver = _drivers.get(kind)
        if driver is None:
            if kind == "sim":
                from ._sim import SimDriver

                driver = SimDriver()
            elif kind == "cuda":
                from ._cuda import CudaDriver

                driver = CudaDriver()
            else:
                raise ValueError(f"device type must be 'cuda' or 'sim', got {kind!r}")
            _drivers[kind] = driver
    return driver


def cuda_usable() -> bool:
    """True when the CUDA driver loads and sees at least one GPU (never raises)."""
    global _cuda_usable
    if _cuda_usable is None:
        try:
            _cuda_usable = get_driver("cuda").device_count() > 0
        except Exception:  # no driver library, no GPU, broken install: not usable
            _cuda_usable = False
    return _cuda_usable

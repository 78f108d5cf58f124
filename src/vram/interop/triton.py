"""Triton kernels on vram tensors, in a process that does not import torch.

What Triton asks of torch (its NVIDIA driver and launcher):
- before 3.9, ``CudaDriver.is_active()`` imports torch and asks
  ``torch.cuda.is_available()``: without torch no driver is active and the first launch
  fails ("0 active drivers"); ``GPUDriver.__init__`` takes the current device, the current
  stream and the device's capability from ``torch.cuda``;
- from 3.9, without torch, the driver finds the GPU itself but launches on the device's
  default stream (it cannot know another library's current stream);
- the benchmarking helpers (``get_benchmarker``, ``get_device_interface``, the autotuner's
  timing) use torch.

Nothing else does: a kernel's pointer argument is any object with ``data_ptr()`` and a
``dtype`` whose name Triton knows ("float32", ...), as vram tensors have; the launcher is a
C module over libcuda; the scratch memory some kernels need comes from the allocator given
to ``triton.set_allocator``. (Triton's native argument specializer also tries ``import
torch``, to recognise torch.Tensor, and carries on without it: where torch is installed
that import loads it into the process unless the process keeps it out; see the README.)

``use_vram()`` is the bridge, through Triton's own hook for a driver of one's own
(``triton.runtime.driver.set_active``): a subclass of Triton's CudaDriver whose answers are
vram's (the current device, the current vram stream, the capability), and
``triton.set_allocator`` served by vram's caching allocator on the launch's stream (an
allocator is per thread: Triton keeps it in a context variable). A launch then queues on
vram's current stream, so it orders with vram's work and is captured by ``vram.graph``.
The autotuner and ``triton.testing`` still need torch.
"""

from __future__ import annotations

import threading
from typing import Any

import triton
from triton.backends.driver import GPUDriver
from triton.backends.nvidia.driver import CudaDriver

from .._device import Device, current_device_obj, get_device_properties, set_device
from .._dtypes import int32, uint8
from .._factories import empty
from .._streams import current_stream
from .._tensor import Tensor
from ._streams import peer_stream

__all__ = ["use_vram", "VramCudaDriver", "allocate", "allocations"]

_CACHE_FLUSH_BYTES = 256 << 20  # what Triton's own driver clears between timed runs
_ALIGNMENT = 512  # bytes: every block of vram's allocator starts on this boundary

_lock = threading.Lock()
_driver: VramCudaDriver | None = None
_allocations = 0  # how many times Triton asked vram for scratch memory


def _device(index: int | None = None) -> Device:
    if index is None:
        current = current_device_obj()
        return current if current.type == "cuda" else Device("cuda", 0)
    return Device("cuda", index)


class _VramAnswers(GPUDriver):
    """What GPUDriver would ask torch for, answered by vram. It comes right before GPUDriver
    in VramCudaDriver's method order, so that CudaDriver's ``__init__`` runs in full and,
    where it calls ``super().__init__()`` (Triton before 3.9, or any Triton in a process
    with torch), arrives here instead of at GPUDriver's torch import."""

    def __init__(self) -> None:
        _answer_from_vram(self)


def _answer_from_vram(driver: GPUDriver) -> None:
    driver.get_current_device = lambda: _device().index
    driver.set_current_device = lambda index: set_device(_device(index))
    driver.get_current_stream = lambda index=None: current_stream(_device(index)).cuda_stream
    driver.get_device_capability = _capability


def _capability(index: int | None = None) -> tuple[int, int]:
    properties = get_device_properties(_device(index))
    return properties.major, properties.minor


class VramCudaDriver(CudaDriver, _VramAnswers):
    """Triton's CUDA driver with vram's device, stream and capability, and no torch.

    Triton 3.9's own driver runs without torch too, but launches on the device's default
    stream; this one launches on vram's current stream."""

    def __init__(self) -> None:
        super().__init__()
        _answer_from_vram(self)  # also where CudaDriver did not call super().__init__()

    @staticmethod
    def is_active() -> bool:
        from ..driver import cuda_usable

        return cuda_usable()

    def get_active_torch_device(self) -> Any:
        raise RuntimeError(
            "vram.interop.triton: this process runs Triton on vram, without torch; there is "
            "no torch device (the autotuner and triton.testing need torch)"
        )

    def get_device_interface(self) -> Any:
        return self.get_active_torch_device()

    def get_benchmarker(self) -> Any:
        return self.get_active_torch_device()

    def get_empty_cache_for_benchmark(self) -> Tensor:
        return empty(_CACHE_FLUSH_BYTES // 4, dtype=int32, device=_device())

    def clear_cache(self, cache: Tensor) -> None:
        cache.zero_()


def allocate(size: int, alignment: int, stream: int | None) -> Tensor:
    """Scratch memory for a launch (``triton.set_allocator``'s signature): ``size`` bytes of
    vram's caching allocator for ``stream``, freed when Triton drops it (reuse waits for the
    launch: it is ordered on the same stream)."""
    global _allocations
    if alignment > _ALIGNMENT or _ALIGNMENT % alignment:
        raise ValueError(f"alignment: vram's blocks are {_ALIGNMENT}-byte aligned, not {alignment}")
    device = _device()
    with _lock:
        _allocations += 1
    with peer_stream(stream or 0, device):
        return empty(size, dtype=uint8, device=device)


def allocations() -> int:
    """How many times Triton has asked vram for scratch memory (``allocate``) so far."""
    return _allocations


def use_vram() -> VramCudaDriver:
    """Make Triton launch on vram (its current device and stream) and take its scratch
    memory from vram; returns the driver (the same one on later calls)."""
    global _driver
    with _lock:
        if _driver is None:
            _driver = VramCudaDriver()
    triton.runtime.driver.set_active(_driver)
    set_allocator = getattr(triton, "set_allocator", None)  # Triton 3.2 on
    if set_allocator is not None:
        set_allocator(allocate)
    return _driver

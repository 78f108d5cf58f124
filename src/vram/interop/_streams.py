"""Peer streams as vram streams: what every plug-in uses to tell vram's allocator which
stream a peer library allocates and frees on.

- Handle 0 (the legacy default stream, which PyTorch, CuPy and Numba use by default) and,
  on CUDA, 1 (``cudaStreamLegacy``) are the device's default stream.
- Any other handle is a ``vram.ExternalStream`` over the peer's stream, made once per
  (device, handle) and kept: vram's allocator remembers blocks by stream handle, so the
  handle must keep meaning the same stream. A peer stream must outlive the memory allocated
  on it (as with CUDA's stream-ordered allocator).
- ``cudaStreamPerThread`` (2) is one handle for a different stream on each thread; vram
  treats it as one stream, so memory allocated on it must not be shared between threads
  without synchronization.
"""

from __future__ import annotations

import threading

from .._device import Device, as_device
from .._streams import Stream, default_stream

__all__ = ["peer_stream", "enter_device"]

_CUDA_STREAM_LEGACY = 1  # cudaStreamLegacy: the legacy default stream, named explicitly

_streams: dict[tuple[Device, int], Stream] = {}
_lock = threading.Lock()


def peer_stream(handle: object, device: object = None) -> Stream:
    """vram's stream for a peer library's raw stream ``handle`` (an int cudaStream_t, or
    None for the default stream) on ``device`` (the current device if None)."""
    found = as_device(device)
    if found.type == "cpu":
        raise ValueError("device: peer streams live on cuda or sim devices, not cpu")
    if handle is None:
        handle = 0
    if isinstance(handle, bool) or not isinstance(handle, int) or handle < 0:
        raise TypeError(f"handle: expected a stream handle (a non-negative int), got {handle!r}")
    key = (found, handle)
    stream = _streams.get(key)
    if stream is not None:
        return stream
    if handle == 0 or (found.type == "cuda" and handle == _CUDA_STREAM_LEGACY):
        stream = default_stream(found)
    else:
        from .. import ExternalStream  # vram's wrapper of a stream it did not create

        stream = ExternalStream(handle, device=found)
    with _lock:
        return _streams.setdefault(key, stream)


_several: dict[str, bool] = {}


def enter_device(device: Device) -> None:
    """Make ``device`` current in vram's driver, where the driver has several devices.

    A peer library calls vram with its own current device, which it may have changed
    without vram seeing it; the driver's notion of the current device (whose legacy stream
    handle 0 means) is brought in line first. With one device there is nothing to do.
    """
    several = _several.get(device.type)
    if several is None:
        several = _several[device.type] = device.driver.device_count() > 1
    if several:
        device.driver.set_device(device.index)  # type: ignore[arg-type]

"""cuda.core on vram's caching allocator: ``VramMemoryResource``.

A ``cuda.core.MemoryResource`` whose buffers come from vram, so that cuda.core programs,
and anything that takes a MemoryResource (nvmath-python among them), allocate through
vram's stream-aware cache::

    mr = VramMemoryResource(0)
    buffer = mr.allocate(1 << 20, stream=stream)   # a cuda.core Buffer
    buffer.close(stream)                            # back to vram, ordered on ``stream``

``allocate`` gives memory for ``stream`` (vram's current stream of the device when None).
``deallocate`` on another stream than the allocation's is stream-ordered there: vram records
the use on that stream (``record_use``), so the block's next owner waits for the work
queued on it by then, without a host synchronization.
"""

from __future__ import annotations

from typing import Any

from cuda.core import Buffer, MemoryResource
from cuda.core import Stream as CoreStream

from .._device import Device, current_device_obj
from .._streams import Stream, current_stream
from ..memory import allocator_for
from ._streams import enter_device, peer_stream

__all__ = ["VramMemoryResource"]


class VramMemoryResource(MemoryResource):
    """Device memory of ``device_id`` (the current CUDA device if None) from vram."""

    def __init__(self, device_id: int | None = None) -> None:
        super().__init__()
        if device_id is None:
            current = current_device_obj()
            device_id = current.index if current.type == "cuda" else 0
        if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
            raise TypeError(f"device_id: expected a device index, got {device_id!r}")
        self._device = Device("cuda", device_id)
        self._allocator = allocator_for(self._device)

    def _vram_stream(self, stream: Any, argument: str = "stream") -> Stream:
        """vram's stream for a cuda.core Stream, any object with ``__cuda_stream__``, or a
        vram Stream; None: vram's current stream of the device."""
        if stream is None:
            return current_stream(self._device)
        if isinstance(stream, Stream):
            if stream.device != self._device:
                raise ValueError(f"{argument}: {stream} is not on {self._device}")
            return stream
        if isinstance(stream, CoreStream):
            return peer_stream(int(stream.handle), self._device)
        protocol = getattr(stream, "__cuda_stream__", None)
        if protocol is not None:
            return peer_stream(int(protocol()[1]), self._device)
        raise TypeError(
            f"{argument}: expected a cuda.core Stream (vram allocates nothing inside a graph "
            f"being built), got {type(stream).__name__}"
        )

    def allocate(self, size: int, *, stream: Any = None) -> Buffer:
        """A Buffer of ``size`` bytes for ``stream``, from vram's caching allocator."""
        vstream = self._vram_stream(stream)
        enter_device(self._device)
        ptr = self._allocator.malloc(size, vstream.cuda_stream) if size else 0
        if stream is None and vstream.cuda_stream:
            stream = CoreStream.from_handle(vstream.cuda_stream)
        elif isinstance(stream, Stream):
            stream = CoreStream.from_handle(stream.cuda_stream) if stream.cuda_stream else None
        return Buffer.from_handle(ptr, size, mr=self, stream=stream)

    def deallocate(self, ptr: Any, size: int, *, stream: Any = None) -> None:
        """Give ``ptr`` back to vram; ordered after the work queued on ``stream`` by now."""
        address = int(ptr)
        if not address:
            return
        enter_device(self._device)
        if stream is not None:
            self._allocator.record_use(address, self._vram_stream(stream).cuda_stream)
        self._allocator.free(address)

    @property
    def device_id(self) -> int:
        return self._device.index  # type: ignore[return-value]

    @property
    def is_device_accessible(self) -> bool:
        return True

    @property
    def is_host_accessible(self) -> bool:
        return False

    @property
    def is_managed(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<vram.interop.cuda_core.VramMemoryResource on {self._device}>"

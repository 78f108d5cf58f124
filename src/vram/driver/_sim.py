"""The simulated GPU: a full device in host memory, so every allocator rule runs without a GPU.

Memory
- Each device has a capacity (``VRAM_SIM_MEMORY``, default 16 GiB) that counts what
  ``malloc`` and ``vmm_create`` hold, and its own range of virtual addresses. A malloc or a
  VMM reservation is backed by an anonymous mapping: address space, not RAM, until written.
  Unmapping a VMM range gives its pages back to the host (madvise DONTNEED).
- ``view(ptr, nbytes)`` is a NumPy uint8 view of device memory, used by the sim kernels.
  Touching memory that is not allocated or mapped raises CUDA_ERROR_ILLEGAL_ADDRESS.
- ``SimDriver(backed=False)``: memory is counted and given addresses, never backed, at no
  host cost whatever its size; ``view`` raises (a device for replaying what a program
  asked of an allocator, not for running kernels). ``addresses=`` places allocations by a
  policy of the caller's (an ``AddressSpace`` per device) instead of first fit.

Streams and events
- A stream is a FIFO of work items: a callable, an event record, or a wait on an event's
  record. Eagerly (the default) queued work runs at once; inside ``deferred()`` it is held
  until a stream or event is synchronized or ``run()`` drives every stream. A wait holds its
  stream until the record it waits for has run; synchronizing a stream runs exactly the work
  it depends on on other streams, nothing more.
- Queued work holds device pointers, never tensors: memory freed while work is still queued
  is reused by whatever the allocator decides, exactly as on a GPU.
- ``hold(stream)``: that stream alone is deferred, as a stream busy with long work: what is
  queued on it (and work of other streams waiting for it) runs when it is released or the
  host synchronizes with it (cudaFree synchronizes the device, so it does too).
- Observers (``watch``) learn of every kernel or copy as it is queued, with the memory it
  touches, and of every event record, stream wait and host synchronization: the view the
  stream sanitizer (``stream_sanitizer:True``) checks cross-stream reuse with.

Faults: ``inject_malloc_failure(nth=..., above_bytes=...)`` makes device mallocs (malloc and
vmm_create) fail with CUDA_ERROR_OUT_OF_MEMORY.
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import numbers
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .._errors import CudaError, DeferredCudaError
from .._units import parse_bytes
from ._base import DeviceProperties, Driver
from ._simgraph import SimGraphs
from ._simpool import SimMemPool
from ._work import Launch, Launcher, Query, fixed_touches, host_arguments, host_values

__all__ = ["SimDriver", "AddressSpace", "FirstFit", "check_capacity", "MAX_DEVICES", "MAX_CAPACITY"]

Touches = tuple[tuple[int, int], ...]  # (ptr, nbytes) ranges of device memory a work item uses

_GiB = 1 << 30
_MALLOC_ALIGNMENT = 512  # bytes; cudaMalloc gives at least 256-byte alignment
_VMM_GRANULARITY = 2 << 20  # bytes; the H100's minimum VMM page
_VA_BASE = 0x7F00_0000_0000  # first simulated device address of device 0
_VA_SPAN = 1 << 46  # bytes of virtual address space per simulated device (64 TiB)
MAX_CAPACITY = _VA_SPAN  # bytes: the most memory a sim device may have (its address space)
MAX_DEVICES = 64  # sim devices at most (VRAM_SIM_DEVICES)
_HOST_PAGE = mmap.PAGESIZE
# Linux: take no swap reservation, so a mapping larger than host RAM succeeds (Python < 3.12
# does not name the flag); pages are only committed when written
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


def check_capacity(capacity: object, argument: str = "capacity") -> int:
    """``capacity`` as an int number of bytes, from 1 to a device's address space (MAX_CAPACITY);
    TypeError or ValueError naming ``argument`` otherwise (NaN, a float, a string...)."""
    if isinstance(capacity, bool) or not isinstance(capacity, numbers.Integral):
        raise TypeError(f"{argument}: expected an int number of bytes, got {capacity!r}")
    if not 0 < capacity <= MAX_CAPACITY:
        raise ValueError(
            f"{argument}: expected 1 byte to {MAX_CAPACITY >> 40} TiB, got {int(capacity)} bytes"
        )
    return int(capacity)


# ---------------------------------------------------------------------------------------
# memory


class AddressSpace(Protocol):
    """Where a simulated device places its allocations (``SimDriver(addresses=...)``).

    ``take`` returns the start of ``size`` free bytes aligned to ``alignment`` for a
    ``kind`` of range ("malloc", "reserve" for a VMM reservation, "pool" for the stream-
    ordered pool), or raises CudaError CUDA_ERROR_OUT_OF_MEMORY; ``give`` takes a range back.
    """

    def take(self, size: int, alignment: int, kind: str) -> int: ...

    def give(self, start: int, size: int) -> None: ...


class FirstFit:
    """The default placement: first fit over the device's own range of addresses."""

    def __init__(self, base: int, span: int) -> None:
        self._free: list[tuple[int, int]] = [(base, span)]  # sorted, merged (start, length)

    def take(self, size: int, alignment: int, kind: str = "malloc") -> int:
        for i, (start, length) in enumerate(self._free):
            aligned = -(-start // alignment) * alignment
            if aligned + size <= start + length:
                pieces = []
                if aligned > start:
                    pieces.append((start, aligned - start))
                if aligned + size < start + length:
                    pieces.append((aligned + size, start + length - aligned - size))
                self._free[i : i + 1] = pieces
                return aligned
        raise CudaError("cuMemAddressReserve", "CUDA_ERROR_OUT_OF_MEMORY")

    def give(self, start: int, size: int) -> None:
        free = self._free
        i = bisect.bisect(free, (start, 0))
        free.insert(i, (start, size))
        if i + 1 < len(free) and start + size == free[i + 1][0]:
            free[i] = (start, size + free.pop(i + 1)[1])
        if i > 0 and free[i - 1][0] + free[i - 1][1] == start:
            prev = free[i - 1]
            free[i - 1] = (prev[0], prev[1] + free.pop(i)[1])


@dataclass(slots=True)
class _Range:
    """A live piece of device address space, with host memory behind it when backed."""

    start: int
    size: int
    buffer: np.ndarray | None  # uint8 over ``backing``; None on a device that backs nothing
    backing: mmap.mmap | None  # private anonymous mapping: host pages taken when first written
    kind: str  # "malloc", "reserve" or "pool"
    mapped: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, size, handle)
    # reserve: offset of a mapping -> the devices that may access it (vmm_map: the owner)
    access: dict[int, frozenset[int]] = field(default_factory=dict)


class _DeviceMemory:
    """Address space, capacity and backing store of one simulated device."""

    def __init__(self, index: int, capacity: int, space: AddressSpace | None, backed: bool) -> None:
        self.index = index
        self.capacity = capacity
        self.used = 0  # bytes held by malloc and vmm_create
        self.backed = backed
        self.space = space or FirstFit(_VA_BASE + index * _VA_SPAN, _VA_SPAN)
        self._starts: list[int] = []  # sorted starts of live ranges
        self._ranges: dict[int, _Range] = {}
        self.handles: dict[int, int] = {}  # vmm handle -> size

    def take_va(self, size: int, alignment: int, kind: str = "malloc") -> int:
        return self.space.take(size, alignment, kind)

    def give_va(self, start: int, size: int) -> None:
        self.space.give(start, size)

    def add_range(self, start: int, size: int, kind: str, call: str) -> None:
        backing = buffer = None
        if self.backed:
            try:
                backing = _anonymous(size)
            except OSError as exc:  # the host has no address space left
                raise CudaError(call, "CUDA_ERROR_OUT_OF_MEMORY", str(exc)) from None
            buffer = np.frombuffer(backing, dtype=np.uint8)[:size]
        bisect.insort(self._starts, start)
        self._ranges[start] = _Range(start, size, buffer, backing, kind)

    def drop_range(self, start: int) -> _Range:
        rng = self._ranges.pop(start)
        del self._starts[bisect.bisect_left(self._starts, start)]
        return rng

    def range_at(self, start: int, kind: str, call: str) -> _Range:
        rng = self._ranges.get(start)
        if rng is None or rng.kind != kind:
            raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"no {kind} at {start:#x}")
        return rng

    def find(self, ptr: int) -> _Range | None:
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        rng = self._ranges[self._starts[i]]
        return rng if ptr < rng.start + rng.size else None


# ---------------------------------------------------------------------------------------
# streams and events


@dataclass(slots=True, eq=False)
class _Mark:
    """One record of an event: completes when the stream reaches it."""

    stream: _Stream
    done: bool = False
    time: float = 0.0


@dataclass(slots=True, eq=False)
class _Stream:
    handle: int
    device: int
    priority: int
    queue: deque = field(default_factory=deque)  # items: ("run", fn) | ("mark", m) | ("wait", m)
    capture: Any = None  # the capture sequence its work is recorded into (_simgraph), or None


@dataclass(slots=True, eq=False)
class _Event:
    handle: int
    device: int
    timing: bool
    last: _Mark | None = None
    captured: Any = None  # (capture, nodes) when last recorded on a capturing stream


@dataclass(slots=True)
class _Faults:
    nth: int | None = None  # the nth device malloc from now fails (once)
    above_bytes: int | None = None  # every device malloc larger than this fails
    calls: int = 0


class SimDriver(SimGraphs, Driver):
    """The simulated GPU (see the module docstring for its semantics)."""

    kind = "sim"

    def __init__(
        self,
        device_count: int | None = None,
        capacity: int | None = None,
        *,
        backed: bool = True,
        addresses: Callable[[int], AddressSpace] | None = None,
    ) -> None:
        """``device_count`` devices of ``capacity`` bytes each (VRAM_SIM_DEVICES and
        VRAM_SIM_MEMORY when None). ``backed=False``: memory is counted, never backed (see
        the module docstring). ``addresses(device)``: the placement of that device's
        allocations (first fit over its own range when None)."""
        if device_count is None:
            text = os.environ.get("VRAM_SIM_DEVICES", "2")
            if not text.strip().isdecimal():
                raise ValueError(f"VRAM_SIM_DEVICES: expected a number of devices, got {text!r}")
            device_count = int(text)
        if not 1 <= device_count <= MAX_DEVICES:
            raise ValueError(
                f"VRAM_SIM_DEVICES: expected 1 to {MAX_DEVICES} devices, got {device_count}"
            )
        if capacity is None:
            text = os.environ.get("VRAM_SIM_MEMORY", "16GiB")
            capacity = check_capacity(parse_bytes(text, "VRAM_SIM_MEMORY"), "VRAM_SIM_MEMORY")
        self._lock = threading.RLock()
        self._memory = [
            _DeviceMemory(i, capacity, None if addresses is None else addresses(i), backed)
            for i in range(device_count)
        ]
        self._handles = itertools.count(1)
        self._streams: dict[int, _Stream] = {}
        self._held: set[int] = set()  # streams whose work runs only when released or synced
        self._events: dict[int, _Event] = {}
        self._default = [self._new_stream(i, 0) for i in range(device_count)]
        self._host: dict[int, np.ndarray] = {}
        self.faults = _Faults()
        self.deferred_depth = 0  # > 0 while inside vram.sim.deferred()
        self._errors: list[BaseException] = []  # failures of queued work, raised at sync
        self._peer_access: set[tuple[int, int]] = set()  # (device, peer): device reads peer
        self._pools: dict[int, SimMemPool] = {}  # device -> its default stream-ordered pool
        self._init_graphs()  # stream capture and graphs (_simgraph)
        self.observers: list[Callable[[str, int | None, object], None]] = []  # watch()
        self.launch_blocking = os.environ.get("CUDA_LAUNCH_BLOCKING", "0") == "1"

    # ---- devices -------------------------------------------------------------------
    def device_count(self) -> int:
        return len(self._memory)

    def _mem(self, device: int) -> _DeviceMemory:
        if not 0 <= device < len(self._memory):
            raise CudaError("cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE", f"sim device {device}")
        return self._memory[device]

    def properties(self, device: int) -> DeviceProperties:
        mem = self._mem(device)
        return DeviceProperties(
            name="vram simulated GPU",
            total_memory=mem.capacity,
            major=9,
            minor=0,
            multi_processor_count=132,
            l2_cache_size=50 << 20,
            warp_size=32,
            max_threads_per_block=1024,
            uuid=f"SIM-{device:08d}",
            driver="sim",
        )

    def set_capacity(self, device: int, capacity: int) -> None:
        """Change a device's capacity (bytes); what it holds now is kept."""
        self._mem(device).capacity = check_capacity(capacity, "capacity")

    def driver_version(self) -> int:
        return 13000  # the sim behaves as a CUDA 13.0 driver

    def mem_get_info(self, device: int) -> tuple[int, int]:
        mem = self._mem(device)
        return max(mem.capacity - mem.used, 0), mem.capacity

    def device_synchronize(self, device: int) -> None:
        with self._lock:
            if self._capturing:
                self._forbid_device(device, "cuCtxSynchronize")
            for stream in list(self._streams.values()):
                if stream.device == device:
                    self._drain(stream, None)
            if self.observers:
                self._tell("host_device", device, None)
            self._release_pools()
        self._raise_deferred()

    # ---- device memory -------------------------------------------------------------
    def _charge(self, mem: _DeviceMemory, size: int, call: str) -> None:
        faults = self.faults
        faults.calls += 1
        if faults.nth is not None and faults.calls == faults.nth:
            faults.nth = None
            raise CudaError(call, "CUDA_ERROR_OUT_OF_MEMORY", "injected failure (nth)")
        if faults.above_bytes is not None and size > faults.above_bytes:
            raise CudaError(call, "CUDA_ERROR_OUT_OF_MEMORY", "injected failure (above_bytes)")
        if mem.used + size > mem.capacity:
            raise CudaError(call, "CUDA_ERROR_OUT_OF_MEMORY")
        mem.used += size

    def malloc(self, device: int, size: int) -> int:
        if size <= 0:
            raise CudaError("cuMemAlloc", "CUDA_ERROR_INVALID_VALUE", f"size {size}")
        with self._lock:
            if self._capturing:
                self._forbid_unsafe("cuMemAlloc")
            mem = self._mem(device)
            self._charge(mem, size, "cuMemAlloc")
            ptr = None
            try:
                ptr = mem.take_va(size, _MALLOC_ALIGNMENT, "malloc")
                mem.add_range(ptr, size, "malloc", "cuMemAlloc")
            except CudaError:  # out of address space: nothing stays charged or taken
                mem.used -= size
                if ptr is not None:
                    mem.give_va(ptr, size)
                raise
            return ptr

    def free(self, device: int, ptr: int) -> None:
        with self._lock:
            if self._capturing:
                self._forbid_unsafe("cuMemFree")
            # cudaFree synchronizes the device before it returns
            for stream in list(self._streams.values()):
                if stream.device == device:
                    self._drain(stream, None)
            if self.observers:
                self._tell("host_device", device, None)
            mem = self._mem(device)
            rng = mem.range_at(ptr, "malloc", "cuMemFree")
            mem.drop_range(ptr)
            mem.give_va(ptr, rng.size)
            mem.used -= rng.size

    # ---- the stream-ordered pool (cudaMallocAsync; see _simpool) -------------------
    def _pool(self, device: int) -> SimMemPool:
        pool = self._pools.get(device)
        if pool is None:
            pool = self._pools[device] = SimMemPool(self._mem(device), self._charge)
        return pool

    def malloc_async(self, device: int, size: int, stream: int) -> int:
        if size <= 0:
            raise CudaError("cuMemAllocAsync", "CUDA_ERROR_INVALID_VALUE", f"size {size}")
        with self._lock:
            s = self._stream(stream, "cuMemAllocAsync")
            if s.device != device:
                raise CudaError("cuMemAllocAsync", "CUDA_ERROR_INVALID_VALUE", "another device")
            wait = lambda mark: self._enqueue(s, ("wait", mark))  # an internal dependency
            return self._pool(device).allocate(size, s, wait)

    def free_async(self, device: int, ptr: int, stream: int) -> None:
        with self._lock:
            s = self._stream(stream, "cuMemFreeAsync")
            pool = self._pool(device)
            mark = _Mark(s)
            pool.free(ptr, mark)
            self._enqueue(s, ("mark", mark))
            pool.settle()

    def mempool_attribute(self, device: int, name: str) -> int:
        with self._lock:
            return self._pool(device).get(name)

    def mempool_set_attribute(self, device: int, name: str, value: int) -> None:
        with self._lock:
            self._pool(device).set(name, value)

    def mempool_trim_to(self, device: int, keep: int) -> None:
        with self._lock:
            self._pool(device).trim_to(keep)

    def _release_pools(self) -> None:
        """After a synchronize: pools above their release threshold give memory back."""
        for pool in self._pools.values():
            if pool.reserved > pool.release_threshold:
                pool.trim_to(pool.release_threshold)

    # ---- VMM -----------------------------------------------------------------------
    def vmm_granularity(self, device: int) -> int:
        self._mem(device)
        return _VMM_GRANULARITY

    def _check_granular(self, size: int, call: str) -> None:
        if size <= 0 or size % _VMM_GRANULARITY:
            raise CudaError(call, "CUDA_ERROR_INVALID_VALUE", f"size {size} not granular")

    def vmm_reserve(self, device: int, size: int) -> int:
        self._check_granular(size, "cuMemAddressReserve")
        with self._lock:
            if self._capturing:
                self._forbid_unsafe("cuMemAddressReserve")
            mem = self._mem(device)
            va = mem.take_va(size, _VMM_GRANULARITY, "reserve")
            try:
                mem.add_range(va, size, "reserve", "cuMemAddressReserve")
            except CudaError:
                mem.give_va(va, size)
                raise
            return va

    def vmm_release(self, device: int, va: int, size: int) -> None:
        with self._lock:
            mem = self._mem(device)
            rng = mem.range_at(va, "reserve", "cuMemAddressFree")
            if rng.mapped or rng.size != size:
                raise CudaError("cuMemAddressFree", "CUDA_ERROR_INVALID_VALUE", "still mapped")
            mem.drop_range(va)
            mem.give_va(va, size)

    def vmm_create(self, device: int, size: int) -> int:
        self._check_granular(size, "cuMemCreate")
        with self._lock:
            if self._capturing:
                self._forbid_unsafe("cuMemCreate")
            mem = self._mem(device)
            self._charge(mem, size, "cuMemCreate")
            handle = next(self._handles)
            mem.handles[handle] = size
            return handle

    def vmm_release_handle(self, device: int, handle: int) -> None:
        with self._lock:
            mem = self._mem(device)
            size = mem.handles.pop(handle, None)
            if size is None:
                raise CudaError("cuMemRelease", "CUDA_ERROR_INVALID_VALUE", f"handle {handle}")
            mem.used -= size

    def vmm_map(self, device: int, va: int, size: int, handle: int) -> None:
        with self._lock:
            if self._capturing:
                self._forbid_unsafe("cuMemMap")
            mem = self._mem(device)
            rng = mem.find(va)
            if rng is None or rng.kind != "reserve" or va + size > rng.start + rng.size:
                raise CudaError("cuMemMap", "CUDA_ERROR_INVALID_VALUE", f"va {va:#x}")
            if (va - rng.start) % _VMM_GRANULARITY:
                raise CudaError("cuMemMap", "CUDA_ERROR_INVALID_VALUE", f"va {va:#x} not granular")
            if mem.handles.get(handle) != size:
                raise CudaError("cuMemMap", "CUDA_ERROR_INVALID_VALUE", f"handle {handle}")
            offset = va - rng.start
            for o, s, _ in rng.mapped:
                if o < offset + size and offset < o + s:
                    raise CudaError("cuMemMap", "CUDA_ERROR_ALREADY_MAPPED", f"va {va:#x}")
            rng.mapped.append((offset, size, handle))
            rng.mapped.sort()
            rng.access[offset] = frozenset((device,))

    def vmm_unmap(self, device: int, va: int, size: int) -> None:
        with self._lock:
            if self._capturing:
                self._forbid_unsafe("cuMemUnmap")
            mem = self._mem(device)
            rng = mem.find(va)
            if rng is None or rng.kind != "reserve":
                raise CudaError("cuMemUnmap", "CUDA_ERROR_INVALID_VALUE", f"va {va:#x}")
            offset, end = va - rng.start, va - rng.start + size
            kept = [m for m in rng.mapped if not (offset <= m[0] and m[0] + m[1] <= end)]
            if len(kept) == len(rng.mapped):
                raise CudaError("cuMemUnmap", "CUDA_ERROR_INVALID_VALUE", f"va {va:#x}")
            if any(o < end and offset < o + s for o, s, _ in kept):
                # as cuMemUnmap: a mapping is unmapped whole, never in part
                raise CudaError("cuMemUnmap", "CUDA_ERROR_INVALID_VALUE", "part of a mapping")
            rng.mapped = kept
            rng.access = {o: rng.access[o] for o, _, _ in kept}
            # the pages go back to the host; a later map sees zeros, like fresh memory
            if rng.backing is not None:
                rng.backing.madvise(mmap.MADV_DONTNEED, offset, size)

    def vmm_set_access(self, device: int, va: int, size: int, peers: tuple[int, ...]) -> None:
        """Let ``device`` and every device in ``peers`` read and write the mapped range."""
        with self._lock:
            mem = self._mem(device)
            devices = frozenset((device, *(self._mem(p).index for p in peers)))
            rng = mem.find(va)
            offset = va - rng.start if rng is not None else 0
            if rng is None or rng.kind != "reserve" or not _covered(rng.mapped, offset, size):
                raise CudaError("cuMemSetAccess", "CUDA_ERROR_INVALID_VALUE", f"va {va:#x}")
            for o, s, _ in rng.mapped:
                if o < offset + size and offset < o + s:
                    rng.access[o] = devices

    def vmm_access(self, device: int, va: int) -> frozenset[int]:
        """The devices that may access the mapping at ``va`` of ``device`` (sim only)."""
        with self._lock:
            rng = self._mem(device).find(va)
            if rng is not None and rng.kind == "reserve":
                for o, s, _ in rng.mapped:
                    if o <= va - rng.start < o + s:
                        return rng.access[o]
        raise CudaError("vmm_access", "CUDA_ERROR_INVALID_VALUE", f"va {va:#x} is not mapped")

    # ---- several devices -----------------------------------------------------------
    def can_access_peer(self, device: int, peer: int) -> bool:
        """Every sim device can reach every other one (as GPUs on one NVLink switch)."""
        self._mem(device)
        self._mem(peer)
        return device != peer

    def enable_peer_access(self, device: int, peer: int) -> None:
        self._mem(device)
        self._mem(peer)
        if device == peer:
            raise CudaError("cuCtxEnablePeerAccess", "CUDA_ERROR_INVALID_DEVICE", "same device")
        with self._lock:
            self._peer_access.add((device, peer))

    def memcpy_peer(
        self, dst: int, dst_device: int, src: int, src_device: int, nbytes: int, stream: int
    ) -> None:
        if nbytes == 0:
            return
        for ptr, device in ((dst, dst_device), (src, src_device)):
            if self._mem(device).find(ptr) is None:
                raise CudaError(
                    "cuMemcpyPeerAsync", "CUDA_ERROR_INVALID_VALUE", f"{ptr:#x} is not on {device}"
                )
        self.memcpy_dtod(dst, src, nbytes, stream)

    # ---- memory access for the sim kernels -------------------------------------------
    def view(self, ptr: int, nbytes: int) -> np.ndarray:
        """A writable uint8 view of ``nbytes`` of device memory at ``ptr``, or of page-locked
        host memory (``host_alloc``'s), which kernels reach at its own address as on a GPU
        (unified addressing)."""
        for mem in self._memory:
            rng = mem.find(ptr)
            if rng is None:
                continue
            offset = ptr - rng.start
            if offset + nbytes > rng.size:
                break
            if rng.kind == "reserve" and not _covered(rng.mapped, offset, nbytes):
                break
            if rng.buffer is None:
                raise CudaError(
                    "memory access", "CUDA_ERROR_ILLEGAL_ADDRESS", "the device backs no memory"
                )
            return rng.buffer[offset : offset + nbytes]
        with self._lock:
            for start, buffer in self._host.items():
                if start <= ptr and ptr + nbytes <= start + buffer.nbytes:
                    return buffer[ptr - start : ptr - start + nbytes]
        raise CudaError("memory access", "CUDA_ERROR_ILLEGAL_ADDRESS", f"{nbytes} B at {ptr:#x}")

    # ---- streams -------------------------------------------------------------------
    def _new_stream(self, device: int, priority: int) -> int:
        handle = next(self._handles)
        self._streams[handle] = _Stream(handle, device, priority)
        return handle

    def _stream(self, handle: int, call: str) -> _Stream:
        stream = self._streams.get(handle)
        if stream is None:
            raise CudaError(call, "CUDA_ERROR_INVALID_HANDLE", f"stream {handle}")
        return stream

    def default_stream(self, device: int) -> int:
        self._mem(device)
        return self._default[device]

    def stream_create(self, device: int, priority: int = 0) -> int:
        with self._lock:
            self._mem(device)
            return self._new_stream(device, max(-5, min(0, priority)))

    def stream_destroy(self, stream: int) -> None:
        with self._lock:
            s = self._streams.get(stream)
            if s is not None and stream not in self._default:
                self._drain(s, None)  # as CUDA: queued work still completes
                del self._streams[stream]
                self._held.discard(stream)

    def stream_device(self, stream: int) -> int | None:
        found = self._streams.get(stream) if type(stream) is int else None
        return None if found is None else found.device

    def register_stream(self, stream: int, device: int) -> None:
        """The sim has no streams but its own: only a live sim stream of ``device`` passes."""
        if self.stream_device(stream) != device:
            raise ValueError(f"stream: {stream!r} is not a stream of sim:{device}")

    def stream_priority_range(self, device: int) -> tuple[int, int]:
        self._mem(device)
        return 0, -5

    def stream_query(self, stream: int) -> bool:
        with self._lock:
            s = self._stream(stream, "cuStreamQuery")
            if self._capturing:
                self._forbid_stream(s, "cuStreamQuery")
            return not s.queue

    def hold(self, stream: int) -> None:
        """Defer ``stream`` alone: its work (and other streams' work that waits for it) runs
        only when it is released or the host synchronizes with it, as if it ran long."""
        with self._lock:
            self._stream(stream, "hold")
            self._held.add(stream)

    def release(self, stream: int) -> None:
        """Run what ``stream`` holds, then the work of other streams that waited for it."""
        with self._lock:
            s = self._stream(stream, "release")
            self._held.discard(stream)
            self._drain(s, None)
            if self.deferred_depth == 0:
                for other in list(self._streams.values()):
                    if other.queue:
                        self._drain(other, None, eager=True)
        self._raise_deferred()

    def stream_synchronize(self, stream: int) -> None:
        with self._lock:
            s = self._stream(stream, "cuStreamSynchronize")
            if self._capturing:
                self._forbid_stream(s, "cuStreamSynchronize")
            self._drain(s, None)
            if self.observers:
                self._tell("host_stream", stream, None)
            self._release_pools()
        self._raise_deferred()

    def stream_wait_event(self, stream: int, event: int) -> None:
        with self._lock:
            s = self._stream(stream, "cuStreamWaitEvent")
            e = self._event(event, "cuStreamWaitEvent")
            if s.capture is not None or e.captured is not None:
                self._capture_wait(s, e)
                return
            if self.observers and e.last is not None:
                self._tell("wait", stream, event)
            if e.last is not None and not e.last.done:
                self._enqueue(s, ("wait", e.last))

    def enqueue(self, stream: int, fn: Callable[[], None], touches: Touches = ()) -> None:
        """Queue a host function as a kernel on ``stream`` (the sim's kernel launch).
        ``touches``: the (ptr, nbytes) ranges of device memory it reads or writes, told to
        the observers as it is queued (``watch``)."""
        with self._lock:
            s = self._stream(stream, "cuLaunchKernel")
            if self.observers and s.capture is None:
                self._tell("queue", stream, touches)
            self._enqueue(s, ("run", fn))

    def prepare(self, device: int, launch: Launch) -> Launcher:
        """``launch`` ready to run (see Driver.prepare): a run queues the work's NumPy
        reference on the stream, over views of the simulated memory made when it runs."""
        self._mem(device)
        reference, views = launch.work.reference, launch.views
        extents = tuple(
            (i, *v.extent()) for i, v in enumerate(views) if v is not None and v.extent()[1]
        )
        fixed: list[tuple] = []  # the Fixed values' touches, found when first observed
        view = self.view

        def run(stream: int, *args: Any) -> None:
            def work() -> None:
                reference(*host_arguments(launch, args, view), *host_values(launch, view))

            touches: tuple = ()
            if self.observers:
                if not fixed:
                    fixed.append(fixed_touches(launch))
                touches = tuple((args[i] + low, nbytes) for i, low, nbytes in extents) + fixed[0]
            self.enqueue(stream, work, touches)  # (looked up a run: every launch goes there)
            if self.launch_blocking:
                self._wait_blocking(stream, launch)

        return run

    def ask(self, device: int, query: Query, *args: Any) -> Any:
        """The simulated library's answer: ``query.reference(*args)``."""
        self._mem(device)
        return query.reference(*args)

    def _wait_blocking(self, stream: int, launch: Launch) -> None:
        """CUDA_LAUNCH_BLOCKING: run the work just queued; a failure names it."""
        try:
            self.stream_synchronize(stream)
        except CudaError as exc:
            where = f"in {launch.work.name} ({launch.entry or 'library call'})"
            raise type(exc)(exc.call, exc.name, f"{where}: {exc.detail}") from exc

    # ---- observers: who may learn of every queued access and synchronization --------
    def watch(self, observer: Callable[[str, int | None, object], None]) -> None:
        """Call ``observer(kind, stream, what)`` under the driver's lock as work is queued
        and ordered (the stream sanitizer's view, vram.memory._sanitizer):
        ("queue", stream, touches) for a kernel or copy, ("record", stream, event),
        ("wait", stream, event), ("host_event", None, event) when the host sees an event
        complete, ("host_stream", stream, None) and ("host_device", device, None) when it
        synchronizes with a stream or the device (cudaFree does too)."""
        with self._lock:
            self.observers.append(observer)

    def unwatch(self, observer: Callable[[str, int | None, object], None]) -> None:
        with self._lock:
            if observer in self.observers:
                self.observers.remove(observer)

    def _tell(self, kind: str, stream: int | None, what: object) -> None:
        for observer in list(self.observers):
            observer(kind, stream, what)

    # ---- events --------------------------------------------------------------------
    def _event(self, handle: int, call: str) -> _Event:
        event = self._events.get(handle)
        if event is None:
            raise CudaError(call, "CUDA_ERROR_INVALID_HANDLE", f"event {handle}")
        return event

    def event_create(self, device: int, timing: bool = False) -> int:
        with self._lock:
            self._mem(device)
            handle = next(self._handles)
            self._events[handle] = _Event(handle, device, timing)
            return handle

    def event_destroy(self, event: int) -> None:
        with self._lock:
            self._events.pop(event, None)

    def event_record(self, event: int, stream: int) -> None:
        with self._lock:
            e = self._event(event, "cuEventRecord")
            s = self._stream(stream, "cuEventRecord")
            if s.capture is not None:
                self._capture_record(e, s)
                return
            e.captured = None
            e.last = _Mark(s)
            if self.observers:
                self._tell("record", stream, event)
            self._enqueue(s, ("mark", e.last))

    def event_query(self, event: int) -> bool:
        with self._lock:
            e = self._event(event, "cuEventQuery")
            if self._capturing or e.captured is not None:
                self._forbid_event(e, "cuEventQuery")
            last = e.last
            if self.observers and last is not None and last.done:
                self._tell("host_event", None, event)
            return last is None or last.done

    def event_synchronize(self, event: int) -> None:
        with self._lock:
            e = self._event(event, "cuEventSynchronize")
            if self._capturing or e.captured is not None:
                self._forbid_event(e, "cuEventSynchronize")
            last = e.last
            if last is not None and not last.done:
                self._drain(last.stream, last)
            if self.observers and last is not None:
                self._tell("host_event", None, event)
            self._release_pools()
        self._raise_deferred()

    def event_elapsed_ms(self, start: int, end: int) -> float:
        with self._lock:
            a = self._event(start, "cuEventElapsedTime")
            b = self._event(end, "cuEventElapsedTime")
            for e in (a, b):
                if e.captured is not None:
                    self._forbid_event(e, "cuEventElapsedTime")
            if not (a.timing and b.timing):
                raise CudaError("cuEventElapsedTime", "CUDA_ERROR_INVALID_HANDLE", "no timing")
            if a.last is None or b.last is None:
                raise CudaError("cuEventElapsedTime", "CUDA_ERROR_INVALID_HANDLE", "not recorded")
            if not (a.last.done and b.last.done):
                raise CudaError("cuEventElapsedTime", "CUDA_ERROR_NOT_READY")
            return (b.last.time - a.last.time) * 1000.0

    # ---- running queued work -------------------------------------------------------
    def _enqueue(self, stream: _Stream, item: tuple) -> None:
        if stream.capture is not None:
            self._capture_work(stream, item)
            return
        stream.queue.append(item)
        if self.deferred_depth == 0:
            self._drain(stream, None, eager=True)

    def _drain(self, stream: _Stream, until: _Mark | None, eager: bool = False) -> None:
        """Run ``stream``'s work in order until it is empty or ``until`` has completed.

        A wait whose record has not run yet first drives the stream that holds that
        record, up to it and no further. ``eager`` (work running as it is queued, not a
        host synchronization): a held stream does not run, and a wait for one stops here.
        """
        if eager and stream.handle in self._held:
            return
        queue = stream.queue
        while queue and not (until is not None and until.done):
            kind, payload = queue[0]
            if kind == "wait" and not payload.done:
                self._drain(payload.stream, payload, eager)
                if not payload.done:
                    return  # behind a held stream's work
                continue
            queue.popleft()
            if kind == "run":
                try:
                    payload()
                except Exception as exc:  # surfaces at the next synchronize, as on a GPU
                    self._errors.append(exc)
            elif kind == "mark":
                payload.done = True
                payload.time = time.perf_counter()

    def run(self) -> None:
        """Run everything queued on every stream (``vram.sim.run()``)."""
        with self._lock:
            for stream in list(self._streams.values()):
                self._drain(stream, None)
        self._raise_deferred()

    def pending(self, stream: int) -> int:
        """How many work items are queued on ``stream`` and not yet run."""
        with self._lock:
            return len(self._stream(stream, "pending").queue)

    def _raise_deferred(self) -> None:
        if self._errors:
            first, self._errors = self._errors[0], []
            if isinstance(first, CudaError):
                raise DeferredCudaError(first.call, first.name, first.detail) from first
            raise DeferredCudaError("queued kernel", "CUDA_ERROR_LAUNCH_FAILED", repr(first))

    # ---- copies --------------------------------------------------------------------
    def memcpy_htod(self, dst: int, src: np.ndarray, stream: int) -> None:
        data = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
        self.view(dst, data.nbytes)  # a bad address fails at the call, as CUDA's does
        self.enqueue(
            stream,
            lambda: self.view(dst, data.nbytes).__setitem__(..., data),
            ((dst, data.nbytes),),
        )

    def memcpy_dtoh(self, dst: np.ndarray, src: int, stream: int) -> None:
        if not dst.flags.c_contiguous:
            raise ValueError("memcpy_dtoh: dst must be C-contiguous")
        out = dst.reshape(-1).view(np.uint8)
        self.view(src, out.nbytes)
        self.enqueue(
            stream,
            lambda: out.__setitem__(..., self.view(src, out.nbytes)),
            ((src, out.nbytes),),
        )

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        if nbytes == 0:
            return
        self.view(dst, nbytes)
        self.view(src, nbytes)
        self.enqueue(
            stream,
            lambda: self.view(dst, nbytes).__setitem__(..., self.view(src, nbytes).copy()),
            ((dst, nbytes), (src, nbytes)),
        )

    def memset_d8(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        if nbytes == 0:
            return
        self.view(ptr, nbytes)
        self.enqueue(stream, lambda: self.view(ptr, nbytes).fill(value & 0xFF), ((ptr, nbytes),))

    # ---- pinned host memory ----------------------------------------------------------
    def host_alloc(self, nbytes: int) -> int:
        if nbytes <= 0:
            raise CudaError("cuMemHostAlloc", "CUDA_ERROR_INVALID_VALUE", f"size {nbytes}")
        if self._capturing:
            with self._lock:
                self._forbid_unsafe("cuMemHostAlloc")
        buffer = np.frombuffer(_anonymous(nbytes), dtype=np.uint8)[:nbytes]
        ptr = buffer.ctypes.data
        with self._lock:
            self._host[ptr] = buffer
        return ptr

    def host_free(self, ptr: int) -> None:
        with self._lock:
            if self._capturing:
                self._forbid_unsafe("cuMemFreeHost")
            if self._host.pop(ptr, None) is None:
                raise CudaError("cuMemFreeHost", "CUDA_ERROR_INVALID_VALUE", f"ptr {ptr:#x}")

    def host_view(self, ptr: int, nbytes: int) -> np.ndarray:
        with self._lock:
            for start, buffer in self._host.items():
                if start <= ptr and ptr + nbytes <= start + buffer.nbytes:
                    return buffer[ptr - start : ptr - start + nbytes]
        raise CudaError("host memory access", "CUDA_ERROR_INVALID_VALUE", f"ptr {ptr:#x}")


def _anonymous(size: int) -> mmap.mmap:
    """Private anonymous memory of at least ``size`` bytes, committed only when written."""
    length = max(-(-size // _HOST_PAGE) * _HOST_PAGE, _HOST_PAGE)
    return mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)


def _covered(mapped: list[tuple[int, int, int]], offset: int, nbytes: int) -> bool:
    """True when the mapped pieces (sorted by offset) cover [offset, offset + nbytes)."""
    end = offset + nbytes
    for o, s, _ in mapped:
        if o > offset:
            return False
        if o + s > offset:
            offset = o + s
            if offset >= end:
                return True
    return offset >= end

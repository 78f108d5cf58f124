"""The Driver interface: the only door from vram to a device.

Two implementations stand behind it: ``cuda`` (a real NVIDIA GPU through cuda-bindings)
and ``sim`` (a simulated GPU in host memory). Everything above this package talks to a
Driver, so the allocator, streams and tensors run unchanged on both.

Conventions every implementation keeps:
- Device pointers, stream handles, event handles, VMM handles and kernels are plain
  ints (or opaque objects for kernels). Stream handle 0 is never used for a created stream:
  ``default_stream(device)`` returns the device's default (legacy null) stream handle.
- Every call that touches a device takes the device index it acts on, or a handle made
  on that device.
- Every failure raises ``vram.CudaError(call, name)`` with the CUDA error name; device
  memory exhaustion is ``CUDA_ERROR_OUT_OF_MEMORY`` (``CudaError.is_out_of_memory``).
- Copies and memsets are asynchronous on the given stream. Host arrays passed to them
  must stay alive and unchanged until the stream has run the copy; the callers above
  (tensor code) synchronize for pageable memory, as CUDA does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ._work import Launch, Launcher, Query

__all__ = [
    "Driver",
    "DeviceProperties",
    "KernelArg",
    "CaptureInfo",
    "CAPTURE_MODES",
    "MEMPOOL_ATTRIBUTES",
]

# an int pointer, a NumPy scalar (np.int64(3), np.float32(1.0), a structured scalar), or a
# struct passed by value as its bytes
KernelArg = Any

# the memory pool attributes a Driver reads and sets: CUDA's CUmemPool_attribute names
# without the CU_MEMPOOL_ATTR_ prefix, in lower case (the reuse flags are 0 or 1, the
# others byte counts)
MEMPOOL_ATTRIBUTES = (
    "reuse_follow_event_dependencies",
    "reuse_allow_opportunistic",
    "reuse_allow_internal_dependencies",
    "release_threshold",
    "reserved_mem_current",
    "reserved_mem_high",
    "used_mem_current",
    "used_mem_high",
)


@dataclass(frozen=True, slots=True)
class DeviceProperties:
    """What ``vram.get_device_properties`` returns (PyTorch's field names)."""

    name: str
    total_memory: int
    major: int
    minor: int
    multi_processor_count: int
    l2_cache_size: int
    warp_size: int
    max_threads_per_block: int
    uuid: str
    driver: str  # "cuda" or "sim"

    @property
    def L2_cache_size(self) -> int:  # noqa: N802 - PyTorch's spelling
        return self.l2_cache_size


CAPTURE_MODES = ("global", "thread_local", "relaxed")  # cuStreamBeginCapture's modes


@dataclass(frozen=True, slots=True)
class CaptureInfo:
    """What ``stream_capture_info`` says of a stream (cuStreamGetCaptureInfo)."""

    status: str  # "none", "active" or "invalidated" (an illegal call ended its usefulness)
    id: int = 0  # the capture sequence's id, unique in the process; 0 when not capturing
    graph: int = 0  # the graph being captured into (a handle for graph_* calls)
    dependencies: tuple[int, ...] = ()  # graph nodes the next captured work will depend on


class Driver(ABC):
    """One kind of device ("cuda" or "sim") and every call vram makes on it."""

    kind: str

    # ---- devices -------------------------------------------------------------------
    @abstractmethod
    def device_count(self) -> int: ...

    @abstractmethod
    def properties(self, device: int) -> DeviceProperties: ...

    @abstractmethod
    def mem_get_info(self, device: int) -> tuple[int, int]:
        """(free bytes, total bytes) of the device, as cudaMemGetInfo."""

    def set_device(self, device: int) -> None:  # noqa: B027 - optional, a no-op by default
        """Make ``device`` the thread's current device (cudaSetDevice); the sim needs none."""

    @abstractmethod
    def device_synchronize(self, device: int) -> None:
        """Wait for all work on every stream of the device. Synchronizes."""

    def driver_version(self) -> int:
        """The CUDA driver's version as cuDriverGetVersion gives it (12010 for 12.1)."""
        raise NotImplementedError(f"the {self.kind} driver has no CUDA driver version")

    # ---- device memory -------------------------------------------------------------
    @abstractmethod
    def malloc(self, device: int, size: int) -> int:
        """cudaMalloc: a new device allocation of ``size`` bytes, 512-byte aligned at least."""

    @abstractmethod
    def free(self, device: int, ptr: int) -> None:
        """cudaFree. On CUDA this synchronizes the device; the allocator knows that."""

    # ---- the device's default stream-ordered pool (cudaMallocAsync) ----------------
    def malloc_async(self, device: int, size: int, stream: int) -> int:
        """cuMemAllocAsync: ``size`` bytes from ``device``'s default pool, ordered on
        ``stream`` (a stream of ``device``): usable by work queued there from now on."""
        raise NotImplementedError(f"the {self.kind} driver has no stream-ordered pool")

    def free_async(self, device: int, ptr: int, stream: int) -> None:
        """cuMemFreeAsync: give ``ptr`` (from ``malloc_async`` on ``device``) back to the
        pool when ``stream`` reaches this point; work queued before still may use it."""
        raise NotImplementedError(f"the {self.kind} driver has no stream-ordered pool")

    def mempool_attribute(self, device: int, name: str) -> int:
        """cuMemPoolGetAttribute of ``device``'s default pool (``name``: one of
        MEMPOOL_ATTRIBUTES)."""
        raise NotImplementedError(f"the {self.kind} driver has no stream-ordered pool")

    def mempool_set_attribute(self, device: int, name: str, value: int) -> None:
        """cuMemPoolSetAttribute of ``device``'s default pool (the two ``*_high`` take
        only 0, which resets them to the current value)."""
        raise NotImplementedError(f"the {self.kind} driver has no stream-ordered pool")

    def mempool_trim_to(self, device: int, keep: int) -> None:
        """cuMemPoolTrimTo: give unused pool memory back to the device while at least
        ``keep`` bytes stay reserved; frees whose stream has not run them yet may count as
        in use (synchronize first to give back everything)."""
        raise NotImplementedError(f"the {self.kind} driver has no stream-ordered pool")

    # ---- virtual memory management (expandable segments) ---------------------------
    @abstractmethod
    def vmm_granularity(self, device: int) -> int:
        """Minimum page size for ``vmm_create`` / ``vmm_map`` (2 MiB on H100)."""

    @abstractmethod
    def vmm_reserve(self, device: int, size: int) -> int:
        """Reserve ``size`` bytes of virtual address space (no memory behind it)."""

    @abstractmethod
    def vmm_release(self, device: int, va: int, size: int) -> None:
        """Give back a reservation; everything in it must be unmapped."""

    @abstractmethod
    def vmm_create(self, device: int, size: int) -> int:
        """Create ``size`` bytes of physical memory; returns a handle (counts as memory)."""

    @abstractmethod
    def vmm_release_handle(self, device: int, handle: int) -> None:
        """Release a physical handle (its memory goes back once it is also unmapped)."""

    @abstractmethod
    def vmm_map(self, device: int, va: int, size: int, handle: int) -> None:
        """Map a physical handle at ``va`` and make it readable and writable by ``device``."""

    @abstractmethod
    def vmm_unmap(self, device: int, va: int, size: int) -> None: ...

    @abstractmethod
    def vmm_set_access(self, device: int, va: int, size: int, peers: tuple[int, ...]) -> None:
        """cuMemSetAccess: make the mapped range ``[va, va + size)`` of ``device`` readable
        and writable by ``device`` and by every device in ``peers`` (expandable segments
        that peers use, after ``enable_peer_access``)."""

    # ---- several devices -----------------------------------------------------------
    @abstractmethod
    def can_access_peer(self, device: int, peer: int) -> bool:
        """cuDeviceCanAccessPeer: can kernels on ``device`` access ``peer``'s memory."""

    @abstractmethod
    def enable_peer_access(self, device: int, peer: int) -> None:
        """cuCtxEnablePeerAccess: let ``device`` access ``peer``'s memory (again: no-op)."""

    @abstractmethod
    def memcpy_peer(
        self, dst: int, dst_device: int, src: int, src_device: int, nbytes: int, stream: int
    ) -> None:
        """cuMemcpyPeerAsync: copy between two devices' memory without a host round trip,
        asynchronously on ``stream`` (a stream of either device)."""

    # ---- streams -------------------------------------------------------------------
    @abstractmethod
    def default_stream(self, device: int) -> int:
        """The handle of the device's default stream (what PyTorch calls stream 0)."""

    @abstractmethod
    def stream_create(self, device: int, priority: int = 0) -> int: ...

    @abstractmethod
    def stream_destroy(self, stream: int) -> None: ...

    @abstractmethod
    def stream_device(self, stream: int) -> int | None:
        """The device of a stream handle this driver knows (one it made, a default stream,
        or one registered with ``register_stream``); None for any other int."""

    @abstractmethod
    def register_stream(self, stream: int, device: int) -> None:
        """Adopt a stream another library made on ``device`` (PyTorch's ExternalStream), so
        that vram may queue work and record events on it. ValueError if it cannot be."""

    @abstractmethod
    def stream_priority_range(self, device: int) -> tuple[int, int]:
        """(least, greatest) priority, as cudaDeviceGetStreamPriorityRange (greatest < least)."""

    @abstractmethod
    def stream_query(self, stream: int) -> bool:
        """True when everything queued on the stream has run."""

    @abstractmethod
    def stream_synchronize(self, stream: int) -> None: ...

    @abstractmethod
    def stream_wait_event(self, stream: int, event: int) -> None:
        """Work queued on ``stream`` after this waits for the event's last record."""

    # ---- events --------------------------------------------------------------------
    @abstractmethod
    def event_create(self, device: int, timing: bool = False) -> int: ...

    @abstractmethod
    def event_destroy(self, event: int) -> None: ...

    @abstractmethod
    def event_record(self, event: int, stream: int) -> None: ...

    @abstractmethod
    def event_query(self, event: int) -> bool:
        """True when the last record has completed (or the event was never recorded)."""

    @abstractmethod
    def event_synchronize(self, event: int) -> None: ...

    @abstractmethod
    def event_elapsed_ms(self, start: int, end: int) -> float: ...

    # ---- copies and memset (asynchronous on ``stream``) ----------------------------
    @abstractmethod
    def memcpy_htod(self, dst: int, src: np.ndarray, stream: int) -> None:
        """Copy the bytes of the C-contiguous host array ``src`` to device address ``dst``."""

    @abstractmethod
    def memcpy_dtoh(self, dst: np.ndarray, src: int, stream: int) -> None:
        """Fill the C-contiguous host array ``dst`` from device address ``src``."""

    def download(self, dst: np.ndarray, src: int, stream: int) -> None:
        """``memcpy_dtoh`` after the work queued on ``stream``, then wait for it: ``dst``
        holds the bytes when this returns. Synchronizes."""
        self.memcpy_dtoh(dst, src, stream)
        self.stream_synchronize(stream)

    @abstractmethod
    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: int) -> None: ...

    @abstractmethod
    def memset_d8(self, ptr: int, value: int, nbytes: int, stream: int) -> None: ...

    # ---- pinned (page-locked) host memory ------------------------------------------
    @abstractmethod
    def host_alloc(self, nbytes: int) -> int:
        """cudaHostAlloc: page-locked host memory; returns its address."""

    @abstractmethod
    def host_free(self, ptr: int) -> None: ...

    @abstractmethod
    def host_view(self, ptr: int, nbytes: int) -> np.ndarray:
        """A writable uint8 NumPy view of ``nbytes`` of pinned host memory at ``ptr``."""

    # ---- kernels and library calls: the kernel seam (_work) ----------------------------
    @abstractmethod
    def prepare(self, device: int, launch: Launch) -> Launcher:
        """Make ``launch`` ready to run on ``device``: a function ``run(stream, *args)`` that
        queues it on ``stream`` with this call's ``Arg`` values. cuda compiles the kernel
        (once per device and instance) and packs the constant parameters; sim queues the
        kernel's NumPy reference. With ``CUDA_LAUNCH_BLOCKING=1`` set when the driver was
        made, every run waits for the work and a failure names the kernel. Synchronizes only
        then."""

    @abstractmethod
    def ask(self, device: int, query: Query, *args: Any) -> Any:
        """``query``'s answer for ``device`` (see ``_work.Query``): cuda asks the library
        (``query.cuda``), sim gives its simulated library's answer (``query.reference``)."""

    def compile(self, device: int, source: str, name: str) -> Any:
        """Compile CUDA C++ ``source`` and return the kernel ``name`` (cached by source)."""
        raise NotImplementedError(f"the {self.kind} driver does not compile CUDA kernels")

    def launch(
        self,
        kernel: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[KernelArg, ...],
        stream: int,
        shared_mem: int = 0,
        cluster: int = 1,
    ) -> None:
        """Launch a compiled kernel on ``stream``; ``cluster``: blocks per thread block
        cluster along x (compute capability 9.0 and later), 1 for none."""
        raise NotImplementedError(f"the {self.kind} driver does not launch CUDA kernels")

    # ---- graphs: stream capture and replay -----------------------------------------
    # Work queued on a capturing stream is recorded into a graph instead of running; an
    # instantiated graph (a "graph exec") is launched on any stream as one piece of work.
    # Calls that conflict with a capture fail with CUDA's capture errors (named in each
    # implementation's docstring) and invalidate the capture.
    def stream_begin_capture(self, stream: int, mode: str = "global") -> None:
        """cuStreamBeginCapture: record work queued on ``stream`` from now on. ``mode`` (one
        of CAPTURE_MODES) says which other calls the capture forbids while it lasts."""
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def stream_end_capture(self, stream: int) -> int:
        """cuStreamEndCapture: end the capture begun on ``stream``; the captured graph."""
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def stream_capture_info(self, stream: int) -> CaptureInfo:
        """cuStreamGetCaptureInfo: whether ``stream`` is capturing, into which capture."""
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def thread_exchange_capture_mode(self, mode: str) -> str:
        """cuThreadExchangeStreamCaptureMode: set this thread's capture interaction mode
        (which calls a capture forbids it to make); returns the previous one."""
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def graph_node_count(self, graph: int) -> int:
        """cuGraphGetNodes: how many nodes the graph holds."""
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def graph_node_dependencies(self, node: int) -> tuple[int, ...]:
        """cuGraphNodeGetDependencies: the nodes ``node`` depends on."""
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def graph_instantiate(self, graph: int) -> int:
        """cuGraphInstantiate: an executable graph, launched with ``graph_launch``."""
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def graph_launch(self, graph_exec: int, stream: int) -> None:
        """cuGraphLaunch: queue the whole graph on ``stream`` (any stream of its device)."""
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def graph_launcher(self, graph_exec: int) -> Callable[[int], None]:
        """``graph_launch`` bound to ``graph_exec``: a function of the stream handle, as
        cheap to call as the driver can make it (a replay is one call of it)."""
        return partial(self.graph_launch, graph_exec)

    def graph_exec_destroy(self, graph_exec: int) -> None:
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def graph_destroy(self, graph: int) -> None:
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

    def graph_debug_dot_print(self, graph: int, path: str) -> None:
        """cuGraphDebugDotPrint: write the graph to ``path`` in Graphviz's DOT language."""
        raise NotImplementedError(f"the {self.kind} driver does not capture graphs")

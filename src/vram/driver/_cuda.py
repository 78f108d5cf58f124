"""The real GPU: the Driver interface on NVIDIA's CUDA driver API (cuda.bindings).

Contexts:
- Each device is driven through its *primary context* (the one the CUDA runtime, PyTorch and
  CuPy share), retained the first time the device is used and never released.
- Before a call that acts on a device, ``_use(device)`` makes that device's primary context
  current on the calling thread. Each thread remembers whose context it holds, so the hot
  paths (malloc, free, event record) skip ``cuCtxSetCurrent`` when nothing changed. Code
  outside vram that changes the current context on a thread vram also uses (another
  library, a cuCtxSetCurrent of its own) should call ``set_device`` afterwards.
- Streams and events are ints (``int(CUstream)``); the driver remembers the device of each
  one it made, so calls on a handle need no device argument.

Stream 0 (``default_stream(device)``) is the legacy default stream of a *context*, and a
handle of 0 cannot say which device it means. The rule here:
- where another argument names the device (``launch``: the kernel's device; ``event_record``:
  the event's device), stream 0 is that device's legacy stream;
- everywhere else (copies, memset, ``stream_query``, ``stream_synchronize``,
  ``stream_wait_event``) it is the legacy stream of the thread's *current device*: the one
  last given to ``set_device`` on this thread, device 0 before that. Calls on other devices'
  handles do not change it (as with ``cudaSetDevice`` in the CUDA runtime), so the layer
  above calls ``set_device`` when the user's current device changes.

Every call result ``(err, *values)`` goes through ``_check``, which returns the values or
raises ``CudaError(call, "CUDA_ERROR_...")``.
"""

from __future__ import annotations

import ctypes
import os
import threading
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from cuda.bindings import driver as cu

from .._errors import CudaError
from ._base import MEMPOOL_ATTRIBUTES, CaptureInfo, DeviceProperties, Driver, KernelArg
from ._nvrtc import arch_for, compile_program
from ._work import Launch, Launcher, LibraryCall, PackedParams, Query

__all__ = ["CudaDriver", "CudaKernel"]

_SUCCESS = cu.CUresult.CUDA_SUCCESS
_NOT_READY = cu.CUresult.CUDA_ERROR_NOT_READY
_DEINITIALIZED = cu.CUresult.CUDA_ERROR_DEINITIALIZED  # the driver is gone (interpreter exit)
_NAME_LENGTH = 256  # bytes for cuDeviceGetName
_LEGACY_STREAM = 0  # the context's legacy default stream (cudaStreamLegacy behaviour)
_CAPTURE_MODES = {  # vram's names of cuStreamBeginCapture's modes
    "global": cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL,
    "thread_local": cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    "relaxed": cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED,
}
_CAPTURE_STATUS = {
    int(cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE): "none",
    int(cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE): "active",
    int(cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_INVALIDATED): "invalidated",
}
# PyTorch's instantiation flags (CUDAGraph::instantiate)
_INSTANTIATE_FLAGS = int(
    cu.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
) | int(cu.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)


def _describe(err: cu.CUresult) -> str:
    """CUDA's one-line description of ``err`` ("" when even that fails)."""
    try:
        described, text = cu.cuGetErrorString(err)
    except Exception:  # a description must never hide the error it describes
        return ""
    return text.decode(errors="replace") if described == _SUCCESS and text else ""


def _check(call: str, result: tuple) -> Any:
    """The checker for every driver call: ``(err, *values)`` -> None, the value, or a tuple."""
    err = result[0]
    if err != _SUCCESS:
        raise CudaError(call, cu.CUresult(err).name, _describe(err))
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def _check_teardown(call: str, result: tuple) -> None:
    """``_check`` for calls that give something back; a deinitialized driver (at interpreter
    exit) has already given everything back, so that is not an error here."""
    if result[0] != _DEINITIALIZED:
        _check(call, result)


def _query(call: str, result: tuple) -> bool:
    """True for CUDA_SUCCESS, False for CUDA_ERROR_NOT_READY; any other error raises."""
    if result[0] == _NOT_READY:
        return False
    _check(call, result)
    return True


class _Handle(NamedTuple):
    """A stream or event this driver made: the binding object and its device."""

    obj: Any  # cu.CUstream or cu.CUevent
    device: int


@dataclass(frozen=True, slots=True, eq=False)
class CudaKernel:
    """A compiled kernel, loaded on one device; what ``compile`` returns and ``launch`` takes."""

    name: str
    device: int
    function: cu.CUfunction
    module: cu.CUmodule  # held so that the module outlives every use of ``function``


class _ThreadState(threading.local):
    device: int = 0  # the thread's current device: whose legacy stream stream 0 is
    context_device: int = -1  # whose primary context is current on the thread; -1: none

    def __init__(self) -> None:
        self.params = _LaunchParams()  # the thread's kernel arguments (``launch``)
        self.staging: _Staging | None = None  # made by the thread's first small download


def _host_pointer(array: np.ndarray, call: str, writable: bool = False) -> int:
    """The address of a host array's bytes, after checking that a copy can use them."""
    flags = array.flags
    if not flags.c_contiguous:
        raise ValueError(f"{call}: the host array must be C-contiguous")
    if not flags.writeable:
        if writable:
            raise ValueError(f"{call}: the destination host array is read-only")
    elif array.nbytes:
        try:  # a ctypes view of the buffer: 0.4 us, where ``array.ctypes.data`` takes 1.6
            return ctypes.addressof(ctypes.c_char.from_buffer(array))
        except (TypeError, ValueError):  # a dtype the buffer protocol lacks (bfloat16, ...)
            pass
    return array.ctypes.data


def _kernel_arg(arg: KernelArg) -> bytes:
    """One kernel argument's bytes, as the kernel's parameter expects them.

    Python ints are 64-bit device pointers (or sizes); NumPy scalars keep their own type
    (np.int32, np.float32, ml_dtypes.bfloat16, a structured scalar, ...); ctypes scalars are
    used as they are; bytes are a struct passed by value, laid out as the kernel's.
    """
    if isinstance(arg, int) and not isinstance(arg, bool) and 0 <= arg < 1 << 64:
        return arg.to_bytes(8, "little")
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, np.generic):
        return arg.tobytes()
    if isinstance(arg, ctypes._SimpleCData):
        return bytes(arg)
    raise TypeError(
        f"kernel argument {arg!r}: pass a non-negative int (a device pointer), a NumPy "
        "scalar of the parameter's type, e.g. np.int64(-1), np.float32(1.0), np.bool_(True), "
        "or a struct's bytes"
    )


class _LaunchParams:
    """One thread's kernel arguments for cuLaunchKernel: each argument's bytes in its own
    16-byte-aligned slot of ``values``, and the array of pointers to them (kernelParams).
    The driver copies the arguments before the launch returns, so a thread reuses one
    buffer for every launch. Its size is the most a launch may pass (32764 bytes of
    parameters on sm_70 and later, 4 KiB before), with room for the slots' padding."""

    NBYTES = 64 * 1024
    COUNT = 1024

    def __init__(self) -> None:
        self.values = (ctypes.c_ubyte * self.NBYTES)()
        self.bytes = memoryview(self.values).cast("B")
        self.base = ctypes.addressof(self.values)
        self.pointers = (ctypes.c_uint64 * self.COUNT)()
        self.address = ctypes.addressof(self.pointers)

    def fill(self, args: tuple[KernelArg, ...]) -> int:
        """Lay out ``args``; the address to pass as kernelParams (0 for none)."""
        if not args:
            return 0
        if len(args) > self.COUNT:
            raise ValueError(f"args: at most {self.COUNT} kernel arguments, got {len(args)}")
        view, pointers, base = self.bytes, self.pointers, self.base
        start = 0
        for i, arg in enumerate(args):
            kind = type(arg)  # (a struct's bytes, a pointer: the common cases, without a call)
            if kind is bytes:
                value = arg
            elif kind is int and 0 <= arg < 1 << 64:
                value = arg.to_bytes(8, "little")
            else:
                value = _kernel_arg(arg)
            end = start + len(value)
            if end > self.NBYTES:
                raise ValueError(f"args: more than {self.NBYTES} bytes of kernel arguments")
            view[start:end] = value
            pointers[i] = base + start
            start = (end + 15) & ~15
        return self.address


STAGING_BYTES = 64 * 1024  # downloads of at most this many bytes go through pinned staging


class _Staging:
    """One thread's page-locked buffer for small downloads (``CudaDriver.download``), given
    back when the thread's state goes (or at exit)."""

    def __init__(self, nbytes: int) -> None:
        flags = cu.CU_MEMHOSTALLOC_PORTABLE
        self.ptr = int(_check("cuMemHostAlloc", cu.cuMemHostAlloc(nbytes, flags)))
        weakref.finalize(self, _free_staging, self.ptr)


def _free_staging(ptr: int) -> None:
    _check_teardown("cuMemFreeHost", cu.cuMemFreeHost(ptr))


def _pool_attribute(name: str) -> tuple[Any, bool]:
    """The CUmemPool_attribute for a Driver attribute name, and whether its value is a
    cuuint64_t (the byte counts) rather than an int (the reuse flags)."""
    if name not in MEMPOOL_ATTRIBUTES:
        raise ValueError(f"name: expected one of {', '.join(MEMPOOL_ATTRIBUTES)}, got {name!r}")
    attribute = getattr(cu.CUmemPool_attribute, f"CU_MEMPOOL_ATTR_{name.upper()}")
    return attribute, not name.startswith("reuse_")


def _dim3(dims: tuple[int, ...]) -> tuple[int, int, int]:
    """A grid or block as three ints; missing trailing dimensions are 1."""
    if type(dims) is tuple and len(dims) == 3:  # the common case: three ints, as they are
        x, y, z = dims
        if type(x) is int and type(y) is int and type(z) is int:
            return dims  # type: ignore[return-value]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"grid and block take 1 to 3 dimensions, got {tuple(dims)}")
    x, y, z = (*dims, 1, 1)[:3]
    return int(x), int(y), int(z)


def _cluster_launch(
    grid: tuple[int, ...], block: tuple[int, ...], shared_mem: int, hstream: Any, cluster: int
) -> Any:
    """cuLaunchKernelEx's configuration for clusters of ``cluster`` blocks along x."""
    grid_x, grid_y, grid_z = _dim3(grid)
    if cluster < 1 or grid_x % cluster:
        raise ValueError(f"cluster: expected a divisor of the grid's x ({grid_x}), got {cluster}")
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid_x, grid_y, grid_z
    config.blockDimX, config.blockDimY, config.blockDimZ = _dim3(block)
    config.sharedMemBytes = shared_mem
    config.hStream = hstream
    attribute = cu.CUlaunchAttribute()
    attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attribute.value.clusterDim.x = cluster
    attribute.value.clusterDim.y = 1
    attribute.value.clusterDim.z = 1
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


class CudaDriver(Driver):
    """Every call vram makes on a real NVIDIA GPU, through cuda.bindings' driver API."""

    kind = "cuda"

    def __init__(self) -> None:
        try:
            result = cu.cuInit(0)
        except Exception as exc:  # no libcuda.so: no NVIDIA driver on this machine
            raise CudaError("cuInit", "CUDA_ERROR_NO_DEVICE", f"no NVIDIA driver: {exc}") from exc
        _check("cuInit", result)
        self._tls = _ThreadState()
        self._lock = threading.Lock()  # guards first use of a device (_devices, _contexts)
        self._devices: dict[int, cu.CUdevice] = {}
        self._contexts: dict[int, cu.CUcontext] = {}
        self._properties: dict[int, DeviceProperties] = {}
        self._vmm_props: dict[int, cu.CUmemAllocationProp] = {}
        self._streams: dict[int, _Handle] = {}
        self._events: dict[int, _Handle] = {}
        self._kernels: dict[tuple[int, str, str], CudaKernel] = {}
        self._batch_modules: dict[tuple[int, str], Any] = {}  # (device, batch image) -> module
        self._graphs: dict[int, _Handle] = {}  # captured CUgraphs
        self._graph_execs: dict[int, _Handle] = {}  # instantiated CUgraphExecs
        self._mempools: dict[int, Any] = {}  # device -> its default CUmemoryPool
        self.launch_blocking = os.environ.get("CUDA_LAUNCH_BLOCKING", "0") == "1"

    # ---- contexts ------------------------------------------------------------------
    def _device(self, device: int) -> cu.CUdevice:
        handle = self._devices.get(device)
        if handle is None:
            handle = _check("cuDeviceGet", cu.cuDeviceGet(device))
            self._devices[device] = handle
        return handle

    def _context(self, device: int) -> cu.CUcontext:
        """The device's primary context, retained on first use."""
        context = self._contexts.get(device)
        if context is None:
            with self._lock:
                context = self._contexts.get(device)
                if context is None:
                    retain = cu.cuDevicePrimaryCtxRetain(self._device(device))
                    context = _check("cuDevicePrimaryCtxRetain", retain)
                    self._contexts[device] = context
        return context

    def _use(self, device: int) -> None:
        """Make ``device``'s primary context current on this thread (skipped if it is)."""
        if self._tls.context_device == device:
            return
        _check("cuCtxSetCurrent", cu.cuCtxSetCurrent(self._context(device)))
        self._tls.context_device = device

    def set_device(self, device: int) -> None:
        """Make ``device`` this thread's current device (``cudaSetDevice``): stream 0's device."""
        self._tls.context_device = -1  # set it even if other code changed it behind our back
        self._use(device)
        self._tls.device = device

    def _stream(self, stream: int, device: int | None = None) -> Any:
        """Make current the context of ``stream``; return what to pass as ``hStream``.

        Stream 0 belongs to ``device`` when given, else to this thread's current device.
        """
        if stream == _LEGACY_STREAM:
            self._use(self._tls.device if device is None else device)
            return _LEGACY_STREAM
        handle = self._streams.get(stream)
        if handle is None:
            raise ValueError(f"stream {stream:#x} was not made by this driver or was destroyed")
        self._use(handle.device)
        return handle.obj

    def _event(self, event: int) -> _Handle:
        """The handle of an event this driver made (no context is made current)."""
        handle = self._events.get(event)
        if handle is None:
            raise ValueError(f"event {event:#x} was not made by this driver or was destroyed")
        return handle

    def _use_event(self, event: int) -> Any:
        """Make current the context of ``event``; return the binding object."""
        handle = self._event(event)
        self._use(handle.device)
        return handle.obj

    # ---- devices -------------------------------------------------------------------
    def device_count(self) -> int:
        return _check("cuDeviceGetCount", cu.cuDeviceGetCount())

    def _attribute(self, device: int, name: str) -> int:
        attribute = getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return _check(
            "cuDeviceGetAttribute", cu.cuDeviceGetAttribute(attribute, self._device(device))
        )

    def properties(self, device: int) -> DeviceProperties:
        props = self._properties.get(device)
        if props is None:
            props = self._read_properties(device)
            self._properties[device] = props
        return props

    def _read_properties(self, device: int) -> DeviceProperties:
        handle = self._device(device)
        name = _check("cuDeviceGetName", cu.cuDeviceGetName(_NAME_LENGTH, handle))
        raw_uuid = _check("cuDeviceGetUuid", cu.cuDeviceGetUuid(handle)).bytes
        if isinstance(raw_uuid, str):
            raw_uuid = raw_uuid.encode("latin-1")
        return DeviceProperties(
            name=name.split(b"\0", 1)[0].decode(errors="replace"),
            total_memory=_check("cuDeviceTotalMem", cu.cuDeviceTotalMem(handle)),
            major=self._attribute(device, "COMPUTE_CAPABILITY_MAJOR"),
            minor=self._attribute(device, "COMPUTE_CAPABILITY_MINOR"),
            multi_processor_count=self._attribute(device, "MULTIPROCESSOR_COUNT"),
            l2_cache_size=self._attribute(device, "L2_CACHE_SIZE"),
            warp_size=self._attribute(device, "WARP_SIZE"),
            max_threads_per_block=self._attribute(device, "MAX_THREADS_PER_BLOCK"),
            uuid=str(uuid.UUID(bytes=bytes(raw_uuid[:16]))),
            driver="cuda",
        )

    def driver_version(self) -> int:
        return _check("cuDriverGetVersion", cu.cuDriverGetVersion())

    def mem_get_info(self, device: int) -> tuple[int, int]:
        self._use(device)
        free, total = _check("cuMemGetInfo", cu.cuMemGetInfo())
        return int(free), int(total)

    def device_synchronize(self, device: int) -> None:
        """Wait for all work on the device. Synchronizes."""
        self._use(device)
        _check("cuCtxSynchronize", cu.cuCtxSynchronize())

    # ---- device memory -------------------------------------------------------------
    def malloc(self, device: int, size: int) -> int:
        self._use(device)
        return int(_check("cuMemAlloc", cu.cuMemAlloc(size)))

    def free(self, device: int, ptr: int) -> None:
        self._use(device)
        _check_teardown("cuMemFree", cu.cuMemFree(ptr))

    # ---- the default stream-ordered pool (cudaMallocAsync) -------------------------
    def _mempool(self, device: int) -> Any:
        pool = self._mempools.get(device)
        if pool is None:
            self._use(device)
            result = cu.cuDeviceGetDefaultMemPool(self._device(device))
            pool = self._mempools[device] = _check("cuDeviceGetDefaultMemPool", result)
        return pool

    def malloc_async(self, device: int, size: int, stream: int) -> int:
        hstream = self._stream(stream, device)
        return int(_check("cuMemAllocAsync", cu.cuMemAllocAsync(size, hstream)))

    def free_async(self, device: int, ptr: int, stream: int) -> None:
        hstream = self._stream(stream, device)
        _check_teardown("cuMemFreeAsync", cu.cuMemFreeAsync(ptr, hstream))

    def mempool_attribute(self, device: int, name: str) -> int:
        attribute, _ = _pool_attribute(name)
        result = cu.cuMemPoolGetAttribute(self._mempool(device), attribute)
        return int(_check("cuMemPoolGetAttribute", result))

    def mempool_set_attribute(self, device: int, name: str, value: int) -> None:
        attribute, wide = _pool_attribute(name)
        raw = cu.cuuint64_t(value) if wide else int(value)
        result = cu.cuMemPoolSetAttribute(self._mempool(device), attribute, raw)
        _check("cuMemPoolSetAttribute", result)

    def mempool_trim_to(self, device: int, keep: int) -> None:
        _check("cuMemPoolTrimTo", cu.cuMemPoolTrimTo(self._mempool(device), keep))

    # ---- virtual memory management -------------------------------------------------
    def _vmm_prop(self, device: int) -> cu.CUmemAllocationProp:
        """Pinned device memory on ``device``: what every ``cuMemCreate`` here asks for."""
        prop = self._vmm_props.get(device)
        if prop is None:
            prop = cu.CUmemAllocationProp()
            prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
            prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            prop.location.id = device
            self._vmm_props[device] = prop
        return prop

    def vmm_granularity(self, device: int) -> int:
        minimum = cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
        result = cu.cuMemGetAllocationGranularity(self._vmm_prop(device), minimum)
        return int(_check("cuMemGetAllocationGranularity", result))

    def vmm_reserve(self, device: int, size: int) -> int:
        self._use(device)
        return int(_check("cuMemAddressReserve", cu.cuMemAddressReserve(size, 0, 0, 0)))

    def vmm_release(self, device: int, va: int, size: int) -> None:
        self._use(device)
        _check_teardown("cuMemAddressFree", cu.cuMemAddressFree(va, size))

    def vmm_create(self, device: int, size: int) -> int:
        self._use(device)
        return int(_check("cuMemCreate", cu.cuMemCreate(size, self._vmm_prop(device), 0)))

    def vmm_release_handle(self, device: int, handle: int) -> None:
        self._use(device)
        _check_teardown("cuMemRelease", cu.cuMemRelease(handle))

    def vmm_map(self, device: int, va: int, size: int, handle: int) -> None:
        """Map ``handle`` at ``va`` and make it readable and writable by ``device``."""
        self._use(device)
        _check("cuMemMap", cu.cuMemMap(va, size, 0, handle, 0))
        access = cu.CUmemAccessDesc()
        access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = device
        access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        _check("cuMemSetAccess", cu.cuMemSetAccess(va, size, [access], 1))

    def vmm_unmap(self, device: int, va: int, size: int) -> None:
        self._use(device)
        _check_teardown("cuMemUnmap", cu.cuMemUnmap(va, size))

    def vmm_set_access(self, device: int, va: int, size: int, peers: tuple[int, ...]) -> None:
        """Let ``device`` and every device in ``peers`` read and write the mapped range."""
        descs = []
        for index in (device, *peers):
            access = cu.CUmemAccessDesc()
            access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = index
            access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            descs.append(access)
        self._use(device)
        _check("cuMemSetAccess", cu.cuMemSetAccess(va, size, descs, len(descs)))

    # ---- several devices -----------------------------------------------------------
    def can_access_peer(self, device: int, peer: int) -> bool:
        result = cu.cuDeviceCanAccessPeer(self._device(device), self._device(peer))
        return bool(_check("cuDeviceCanAccessPeer", result))

    def enable_peer_access(self, device: int, peer: int) -> None:
        """Let kernels on ``device`` access ``peer``'s memory; enabling it again is a no-op."""
        peer_context = self._context(peer)
        self._use(device)
        result = cu.cuCtxEnablePeerAccess(peer_context, 0)
        if result[0] != cu.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
            _check("cuCtxEnablePeerAccess", result)

    def memcpy_peer(
        self, dst: int, dst_device: int, src: int, src_device: int, nbytes: int, stream: int
    ) -> None:
        if nbytes:
            dst_context, src_context = self._context(dst_device), self._context(src_device)
            hstream = self._stream(stream)
            result = cu.cuMemcpyPeerAsync(dst, dst_context, src, src_context, nbytes, hstream)
            _check("cuMemcpyPeerAsync", result)

    # ---- streams -------------------------------------------------------------------
    def default_stream(self, device: int) -> int:
        """0: the legacy default stream (see the module docstring for which device's)."""
        return _LEGACY_STREAM

    def stream_create(self, device: int, priority: int = 0) -> int:
        self._use(device)
        flags = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        stream = _check(
            "cuStreamCreateWithPriority", cu.cuStreamCreateWithPriority(flags, priority)
        )
        self._streams[int(stream)] = _Handle(stream, device)
        return int(stream)

    def stream_destroy(self, stream: int) -> None:
        hstream = self._stream(stream)
        del self._streams[stream]
        _check_teardown("cuStreamDestroy", cu.cuStreamDestroy(hstream))

    def stream_device(self, stream: int) -> int | None:
        if stream == _LEGACY_STREAM:
            return self._tls.device
        found = self._streams.get(stream)
        return None if found is None else found.device

    def register_stream(self, stream: int, device: int) -> None:
        """Adopt a CUstream made elsewhere (a PyTorch or CuPy stream) on ``device``.

        The handle must be a live stream of that device's primary context: its context is
        checked with cuStreamGetCtx, which rejects what is not a stream of this process.
        """
        if stream == _LEGACY_STREAM:
            return
        known = self._streams.get(stream)
        if known is not None:
            if known.device != device:
                raise ValueError(f"stream: {stream:#x} belongs to cuda:{known.device}")
            return
        if type(stream) is not int or stream < 0:
            raise ValueError(f"stream: expected a CUstream handle (an int), got {stream!r}")
        handle = cu.CUstream(stream)
        context = _check("cuStreamGetCtx", cu.cuStreamGetCtx(handle))
        if int(context) != int(self._context(device)):
            raise ValueError(f"stream: {stream:#x} is not a stream of cuda:{device}")
        self._streams[stream] = _Handle(handle, device)

    def stream_priority_range(self, device: int) -> tuple[int, int]:
        self._use(device)
        least, greatest = _check("cuCtxGetStreamPriorityRange", cu.cuCtxGetStreamPriorityRange())
        return int(least), int(greatest)

    def stream_query(self, stream: int) -> bool:
        return _query("cuStreamQuery", cu.cuStreamQuery(self._stream(stream)))

    def stream_synchronize(self, stream: int) -> None:
        """Wait for everything queued on ``stream``. Synchronizes."""
        _check("cuStreamSynchronize", cu.cuStreamSynchronize(self._stream(stream)))

    def stream_wait_event(self, stream: int, event: int) -> None:
        hevent = self._event(event).obj  # may be another device's: cross-device waits work
        hstream = self._stream(stream)
        _check("cuStreamWaitEvent", cu.cuStreamWaitEvent(hstream, hevent, 0))

    # ---- events --------------------------------------------------------------------
    def event_create(self, device: int, timing: bool = False) -> int:
        self._use(device)
        flags = 0 if timing else cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
        event = _check("cuEventCreate", cu.cuEventCreate(flags))
        self._events[int(event)] = _Handle(event, device)
        return int(event)

    def event_destroy(self, event: int) -> None:
        hevent = self._use_event(event)
        del self._events[event]
        _check_teardown("cuEventDestroy", cu.cuEventDestroy(hevent))

    def event_record(self, event: int, stream: int) -> None:
        handle = self._event(event)
        hstream = self._stream(stream, handle.device)
        _check("cuEventRecord", cu.cuEventRecord(handle.obj, hstream))

    def event_query(self, event: int) -> bool:
        """True when the last record has run; True for a never-recorded event (as CUDA)."""
        return _query("cuEventQuery", cu.cuEventQuery(self._use_event(event)))

    def event_synchronize(self, event: int) -> None:
        """Wait for the event's last record. Synchronizes."""
        _check("cuEventSynchronize", cu.cuEventSynchronize(self._use_event(event)))

    def event_elapsed_ms(self, start: int, end: int) -> float:
        hend = self._event(end).obj
        hstart = self._use_event(start)
        return float(_check("cuEventElapsedTime", cu.cuEventElapsedTime(hstart, hend)))

    # ---- copies and memset ---------------------------------------------------------
    def memcpy_htod(self, dst: int, src: np.ndarray, stream: int) -> None:
        host = _host_pointer(src, "memcpy_htod")
        if src.nbytes:
            result = cu.cuMemcpyHtoDAsync(dst, host, src.nbytes, self._stream(stream))
            _check("cuMemcpyHtoDAsync", result)

    def memcpy_dtoh(self, dst: np.ndarray, src: int, stream: int) -> None:
        host = _host_pointer(dst, "memcpy_dtoh", writable=True)
        if dst.nbytes:
            result = cu.cuMemcpyDtoHAsync(host, src, dst.nbytes, self._stream(stream))
            _check("cuMemcpyDtoHAsync", result)

    def download(self, dst: np.ndarray, src: int, stream: int) -> None:
        """As the base's; a copy of at most STAGING_BYTES goes through this thread's pinned
        staging buffer (a copy to pageable memory costs the driver a staging of its own:
        16.6 against 9.8 us for 16 KiB on an H100)."""
        nbytes = dst.nbytes
        if not 0 < nbytes <= STAGING_BYTES:
            super().download(dst, src, stream)
            return
        host = _host_pointer(dst, "download", writable=True)
        hstream = self._stream(stream)
        staging = self._tls.staging
        if staging is None:
            staging = self._tls.staging = _Staging(STAGING_BYTES)
        _check("cuMemcpyDtoHAsync", cu.cuMemcpyDtoHAsync(staging.ptr, src, nbytes, hstream))
        _check("cuStreamSynchronize", cu.cuStreamSynchronize(hstream))
        ctypes.memmove(host, staging.ptr, nbytes)

    def memcpy_dtod(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        if nbytes:
            result = cu.cuMemcpyDtoDAsync(dst, src, nbytes, self._stream(stream))
            _check("cuMemcpyDtoDAsync", result)

    def memset_d8(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        if not 0 <= value <= 0xFF:
            raise ValueError(f"memset_d8: value must be a byte (0..255), got {value}")
        if nbytes:
            result = cu.cuMemsetD8Async(ptr, value, nbytes, self._stream(stream))
            _check("cuMemsetD8Async", result)

    # ---- pinned host memory --------------------------------------------------------
    def host_alloc(self, nbytes: int) -> int:
        """Page-locked host memory, portable: every device's context sees it as pinned."""
        self._use(self._tls.device)
        result = cu.cuMemHostAlloc(nbytes, cu.CU_MEMHOSTALLOC_PORTABLE)
        return int(_check("cuMemHostAlloc", result))

    def host_free(self, ptr: int) -> None:
        self._use(self._tls.device)
        _check_teardown("cuMemFreeHost", cu.cuMemFreeHost(ptr))

    def host_view(self, ptr: int, nbytes: int) -> np.ndarray:
        buffer = (ctypes.c_uint8 * nbytes).from_address(ptr)
        return np.ctypeslib.as_array(buffer)

    # ---- kernels -------------------------------------------------------------------
    def compile(self, device: int, source: str, name: str) -> CudaKernel:
        """Compile ``source`` with NVRTC for the device and load kernel ``name`` (cached).

        ``name`` is the kernel as C++ spells it: ``"axpy"`` for an ``extern "C"`` kernel,
        ``"scale<float>"`` for a template instance.
        """
        # keyed by the source itself: a str caches its hash, so a launch pays a dict lookup,
        # not a hash of the whole source (callers pass the same module-level string)
        key = (device, source, name)
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._load(device, source, name)
            self._kernels[key] = kernel
        return kernel

    def _load(self, device: int, source: str, name: str) -> CudaKernel:
        props = self.properties(device)
        program = compile_program(source, arch_for(props.major, props.minor), (name,))
        self._use(device)
        shared = (device, program.image_file) if program.image_file else None
        module = self._batch_modules.get(shared) if shared else None  # type: ignore[arg-type]
        if module is None:
            module = _check("cuModuleLoadData", cu.cuModuleLoadData(program.image))
            if shared:
                module = self._batch_modules.setdefault(shared, module)
        symbol = program.lowered_names[name].encode()
        function = _check("cuModuleGetFunction", cu.cuModuleGetFunction(module, symbol))
        return CudaKernel(name=name, device=device, function=function, module=module)

    def launch(
        self,
        kernel: CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: tuple[KernelArg, ...],
        stream: int,
        shared_mem: int = 0,
        cluster: int = 1,
    ) -> None:
        """Launch ``kernel`` on ``stream`` (stream 0: the kernel's device's legacy stream).

        ``args`` follow the kernel's parameters: ints for pointers, NumPy scalars for values.
        ``cluster`` > 1: thread block clusters of that many blocks along x (cuLaunchKernelEx;
        the grid's x a multiple of it).
        """
        hstream = self._stream(stream, kernel.device)
        params = self._tls.params.fill(args)
        if cluster == 1:
            if type(grid) is not tuple or len(grid) != 3:  # (a 3-tuple goes as it is)
                grid = _dim3(grid)
            if type(block) is not tuple or len(block) != 3:
                block = _dim3(block)
            function = kernel.function
            result = cu.cuLaunchKernel(function, *grid, *block, shared_mem, hstream, params, 0)
            if result[0] != _SUCCESS:
                _check("cuLaunchKernel", result)
            return
        config = _cluster_launch(grid, block, shared_mem, hstream, cluster)
        _check("cuLaunchKernelEx", cu.cuLaunchKernelEx(config, kernel.function, params, 0))

    def prepare(self, device: int, launch: Launch) -> Launcher:
        """``launch`` ready to run (see Driver.prepare): the kernel compiled and loaded, its
        parameters packed once; a run packs its ``Arg`` values (one ``struct.pack_into``)
        and calls cuLaunchKernel. The packed parameters belong to the thread that prepared
        them; another thread gets a copy of its own on its first run."""
        work = launch.work
        if isinstance(work, LibraryCall):
            call, tls = work.prepared(self, device, launch.values), self._tls

            def run_call(stream: int, *args: Any) -> None:
                if tls.context_device != device:
                    self._use(device)
                call(stream, *args)
                if self.launch_blocking:
                    self._wait_blocking(stream, work.name, launch.entry)

            return run_call
        kernel = self.compile(device, work.source, launch.entry)
        if launch.cluster != 1:
            return self._prepare_cluster(device, kernel, launch)
        function = kernel.function
        gx, gy, gz = launch.grid
        bx, by, bz = launch.block
        smem = launch.shared_mem
        owner = threading.get_ident()
        mine = PackedParams(launch.params)
        pack, buffer, address = mine.format.pack_into, mine.buffer, mine.address
        others: dict[int, PackedParams] = {}
        streams, tls, launch_kernel, ident = (
            self._streams,
            self._tls,
            cu.cuLaunchKernel,
            threading.get_ident,
        )

        # ``mine`` is a default value of ``run``'s: the array of pointers at ``address`` lives
        # as long as the launcher (kept by address alone, it was freed when this returned,
        # and the driver read freed memory for the kernel's parameters)
        def run(stream: int, *args: Any, _params: PackedParams = mine) -> None:
            if ident() == owner:
                pack(buffer, 0, *args)
                params = address
            else:  # another thread: parameters of its own
                packed = others.get(ident())
                if packed is None:
                    packed = others.setdefault(ident(), PackedParams(launch.params))
                params = packed.fill(args)
            if tls.context_device != device:
                self._use(device)
            if stream:
                handle = streams.get(stream)
                if handle is None or handle.device != device:
                    hstream = self._stream(stream, device)  # (raises naming the stream)
                else:
                    hstream = handle.obj
            else:
                hstream = 0  # the kernel's device's legacy stream
            result = launch_kernel(function, gx, gy, gz, bx, by, bz, smem, hstream, params, 0)
            if result[0] != _SUCCESS:
                where = (
                    f"cuLaunchKernel ({launch.entry}: grid {launch.grid}, block {launch.block}, "
                    f"{smem} B shared, stream {stream:#x}, device {device})"
                )
                _check(where, result)
            if self.launch_blocking:
                self._wait_blocking(stream, work.name, launch.entry)

        return run

    def ask(self, device: int, query: Query, *args: Any) -> Any:
        """The library's answer: ``query.cuda(self, device, *args)``."""
        return query.cuda(self, device, *args)

    def _prepare_cluster(self, device: int, kernel: CudaKernel, launch: Launch) -> Launcher:
        """A launch in thread block clusters (cuLaunchKernelEx), packed as ``run``'s."""
        packed = PackedParams(launch.params)
        lock = threading.Lock()  # one buffer: the cluster kernels are few and slow anyway
        grid, block, smem, cluster = launch.grid, launch.block, launch.shared_mem, launch.cluster

        def run(stream: int, *args: Any) -> None:
            with lock:
                params = packed.fill(args)
                config = _cluster_launch(grid, block, smem, self._stream(stream, device), cluster)
                _check("cuLaunchKernelEx", cu.cuLaunchKernelEx(config, kernel.function, params, 0))
            if self.launch_blocking:
                self._wait_blocking(stream, launch.work.name, launch.entry)

        return run

    def _wait_blocking(self, stream: int, name: str, entry: str) -> None:
        """CUDA_LAUNCH_BLOCKING: wait for the work just queued; a failure names it."""
        try:
            self.stream_synchronize(stream)
        except CudaError as exc:
            raise CudaError(exc.call, exc.name, f"in {name} ({entry or 'library call'})") from exc

    # ---- graphs: stream capture and replay -----------------------------------------
    def stream_begin_capture(self, stream: int, mode: str = "global") -> None:
        flag = _capture_mode(mode)
        hstream = self._stream(stream)
        _check("cuStreamBeginCapture", cu.cuStreamBeginCapture(hstream, flag))

    def stream_end_capture(self, stream: int) -> int:
        device = self.stream_device(stream)
        graph = _check("cuStreamEndCapture", cu.cuStreamEndCapture(self._stream(stream)))
        self._graphs[int(graph)] = _Handle(graph, device)
        return int(graph)

    def stream_capture_info(self, stream: int) -> CaptureInfo:
        """The capture ``stream`` takes part in (only its status unless it is active)."""
        values = _check("cuStreamGetCaptureInfo", cu.cuStreamGetCaptureInfo(self._stream(stream)))
        status = _CAPTURE_STATUS[int(values[0])]
        if status != "active":
            return CaptureInfo(status)
        count = int(values[-1])
        deps = tuple(int(node) for node in list(values[3])[:count])
        return CaptureInfo(status, int(values[1]), int(values[2]), deps)

    def thread_exchange_capture_mode(self, mode: str) -> str:
        result = cu.cuThreadExchangeStreamCaptureMode(_capture_mode(mode))
        previous = int(_check("cuThreadExchangeStreamCaptureMode", result))
        return next(name for name, value in _CAPTURE_MODES.items() if int(value) == previous)

    def _graph(self, graph: int) -> Any:
        handle = self._graphs.get(graph)
        if handle is None:
            raise ValueError(f"graph {graph:#x} was not captured by this driver or was destroyed")
        self._use(handle.device)
        return handle.obj

    def graph_node_count(self, graph: int) -> int:
        return int(_check("cuGraphGetNodes", cu.cuGraphGetNodes(self._graph(graph), 0))[-1])

    def graph_node_dependencies(self, node: int) -> tuple[int, ...]:
        hnode = cu.CUgraphNode(node)
        call = "cuGraphNodeGetDependencies"
        count = int(_check(call, cu.cuGraphNodeGetDependencies(hnode, 0))[-1])
        if count == 0:
            return ()
        values = _check(call, cu.cuGraphNodeGetDependencies(hnode, count))
        return tuple(int(dep) for dep in list(values[0])[:count])

    def graph_instantiate(self, graph: int) -> int:
        hgraph = self._graph(graph)
        result = cu.cuGraphInstantiate(hgraph, _INSTANTIATE_FLAGS)
        graph_exec = _check("cuGraphInstantiate", result)
        self._graph_execs[int(graph_exec)] = _Handle(graph_exec, self._graphs[graph].device)
        return int(graph_exec)

    def graph_launch(self, graph_exec: int, stream: int) -> None:
        """Queue the executable graph on ``stream``: one cuGraphLaunch."""
        handle = self._graph_execs.get(graph_exec)
        if handle is None:
            raise ValueError(f"graph exec {graph_exec:#x} was not made by this driver")
        result = cu.cuGraphLaunch(handle.obj, self._stream(stream, handle.device))
        if result[0] != _SUCCESS:
            _check("cuGraphLaunch", result)

    def graph_launcher(self, graph_exec: int) -> Callable[[int], None]:
        """``graph_launch`` for one graph exec, with its handle looked up once: per call a
        dict lookup of the stream, the context check and cuGraphLaunch."""
        handle = self._graph_execs.get(graph_exec)
        if handle is None:
            raise ValueError(f"graph exec {graph_exec:#x} was not made by this driver")
        exec_obj, device = handle.obj, handle.device
        streams, tls, launch = self._streams, self._tls, cu.cuGraphLaunch

        def launch_on(stream: int) -> None:
            found = streams.get(stream)
            if found is not None and tls.context_device == found.device:
                hstream = found.obj
            else:
                hstream = self._stream(stream, device)
            result = launch(exec_obj, hstream)
            if result[0] != _SUCCESS:
                _check("cuGraphLaunch", result)

        return launch_on

    def graph_exec_destroy(self, graph_exec: int) -> None:
        handle = self._graph_execs.pop(graph_exec)
        self._use(handle.device)
        _check_teardown("cuGraphExecDestroy", cu.cuGraphExecDestroy(handle.obj))

    def graph_destroy(self, graph: int) -> None:
        hgraph = self._graph(graph)
        del self._graphs[graph]
        _check_teardown("cuGraphDestroy", cu.cuGraphDestroy(hgraph))

    def graph_debug_dot_print(self, graph: int, path: str) -> None:
        flags = int(cu.CUgraphDebugDot_flags.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE)
        result = cu.cuGraphDebugDotPrint(self._graph(graph), str(path).encode(), flags)
        _check("cuGraphDebugDotPrint", result)


def _capture_mode(mode: str) -> Any:
    flag = _CAPTURE_MODES.get(mode)
    if flag is None:
        raise ValueError(f"mode: expected one of {', '.join(_CAPTURE_MODES)}, got {mode!r}")
    return flag

"""The kernel seam: device work declared once, run by whichever driver the device has.

A ``Kernel`` is CUDA C++ source (compiled by NVRTC) together with a NumPy ``reference`` that
computes the same thing. A ``LibraryCall`` is a call into a CUDA library (cuBLAS, cuSOLVER)
together with its NumPy reference. Above the driver nobody asks which kind of device runs
them: a caller describes one launch (``Launch``), asks the device's driver to ``prepare`` it
once, and calls the prepared launcher for every run:

    launch = Launch(kernel, "vram::add<float>", grid, block,
                    params=(Arg("P"), Arg("P"), Arg("P"), np.int64(n)),
                    views=(View((n,), (4,), f32),) * 3)
    run = driver.prepare(device_index, launch)   # compiles, packs what never changes
    run(stream, out_ptr, a_ptr, b_ptr)           # per call: the stream and the ``Arg``s

- cuda launches the compiled kernel with ``params`` (``Arg`` slots filled per call, the rest
  packed once), or calls the library function.
- sim queues ``reference`` on the stream: each per-call pointer that has a ``View`` becomes
  a NumPy view of simulated memory when the work runs (the queued work holds pointers, never
  tensors, as a kernel does), other per-call values pass as they are, then ``values``.
- cpu devices have no driver: ``run_on_host`` calls the reference at once over host memory.

Two more things a library needs declare the same way:
- ``Fixed(pointers, counts, dtypes)`` in ``values``: arrays fixed when the launch is planned
  that the reference reads or writes (a kernel's pointers that sit in a constant struct, as
  multi_tensor_apply's metadata): the reference gets the list of arrays, and the sim counts
  them among the memory the work touches.
- ``Query(name, cuda, reference)``: a question the device's library answers on the host at
  once (a workspace's size, the algorithms a heuristic proposes, its version):
  ``driver.ask(device_index, query, *args)`` calls ``cuda(driver, device, *args)`` on a GPU
  and ``reference(*args)`` on the sim.

So deferred mode, injected faults, graph capture and the stream sanitizer mean on sim what
they mean on a GPU, and every kernel is tested on sim against the same reference.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Kernel",
    "LibraryCall",
    "Query",
    "Arg",
    "View",
    "Fixed",
    "Launch",
    "Launcher",
    "run_on_host",
]

Launcher = Callable[..., None]  # (stream handle, *per-call arguments) -> None
_SLACK = 64  # bytes of zeros after a launch's packed parameters


@dataclass(frozen=True, eq=False)
class Kernel:
    """A device kernel: CUDA C++ ``source`` for NVRTC and the NumPy ``reference`` that does
    the same on host arrays. ``name`` is what errors call it ("add", "softmax")."""

    name: str
    source: str
    reference: Callable[..., None]

    def __repr__(self) -> str:
        return f"<vram Kernel {self.name}>"


@dataclass(frozen=True, eq=False)
class LibraryCall:
    """A CUDA library call: ``cuda(driver, device, stream, *args)`` queues it through the
    driver's library handles, called with ``device``'s context current (as a kernel is
    launched); ``reference`` does the same on host arrays (views for the per-call pointers
    that have a ``View``).

    ``bind`` (optional) is ``cuda`` split in two for a hot call: ``bind(driver, device,
    *values)``, asked once when a launch is prepared, gives the callable that ``cuda(driver,
    device, stream, *args, *values)`` would run, taking ``(stream, *args)`` (a library
    plan's own method: no frame between the launcher and the library)."""

    name: str
    cuda: Callable[..., None]
    reference: Callable[..., None]
    bind: Callable[..., Callable[..., None]] | None = None

    def prepared(self, driver: Any, device: int, values: tuple) -> Callable[..., None]:
        """What a launcher of this call runs per call, ``(stream, *args)``: ``bind``'s answer,
        or ``cuda`` with the driver, the device and ``values`` around the call's arguments."""
        if self.bind is not None:
            return self.bind(driver, device, *values)
        cuda = self.cuda
        return lambda stream, *args: cuda(driver, device, stream, *args, *values)

    def __repr__(self) -> str:
        return f"<vram LibraryCall {self.name}>"


@dataclass(frozen=True, eq=False)
class Query:
    """A question to a CUDA library, answered on the host at once: ``cuda(driver, device,
    *args)`` asks the library through the driver; ``reference(*args)`` is the simulated
    device's answer (see ``Driver.ask``)."""

    name: str
    cuda: Callable[..., Any]
    reference: Callable[..., Any]

    def __repr__(self) -> str:
        return f"<vram Query {self.name}>"


@dataclass(frozen=True, slots=True)
class Arg:
    """A kernel parameter given per call, as a ``struct`` format: "P" a pointer, "q" int64,
    "i" int32, "f" float, "d" double, "?" bool, "ff"/"dd" a complex value (two arguments)."""

    format: str


@dataclass(frozen=True, slots=True)
class View:
    """How the reference sees a per-call pointer: the array at it (``strides`` in bytes)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype

    def extent(self) -> tuple[int, int]:
        """(offset from the pointer, bytes) of the memory the array spans."""
        if any(n == 0 for n in self.shape):
            return 0, 0
        low = sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True) if s < 0)
        high = sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True) if s > 0)
        return low, high - low + self.dtype.itemsize


@dataclass(frozen=True, slots=True, eq=False)
class Fixed:
    """Arrays fixed when a launch is planned, for ``Launch.values``: the reference gets the
    list of 1-D contiguous arrays of ``counts[i]`` elements of ``dtypes[i]`` at
    ``pointers[i]`` (made when the work runs); the cuda kernel has the pointers in its
    constant parameters. Sequences of any kind (NumPy arrays too: a plan of many tensors
    makes them without a Python object per pointer)."""

    pointers: Sequence[int]
    counts: Sequence[int]
    dtypes: Sequence[np.dtype]

    def arrays(self, view: Callable[[int, int], Any]) -> list[np.ndarray]:
        """The arrays, over memory ``view(start, nbytes)`` gives."""
        return [
            strided_array(view, int(p), View((int(n),), (dt.itemsize,), dt))
            for p, n, dt in zip(self.pointers, self.counts, self.dtypes, strict=True)
        ]

    def touches(self) -> tuple[tuple[int, int], ...]:
        """The (start, nbytes) ranges of memory the arrays span."""
        return tuple(
            (int(p), int(n) * dt.itemsize)
            for p, n, dt in zip(self.pointers, self.counts, self.dtypes, strict=True)
            if n
        )


@dataclass(frozen=True, eq=False)
class Launch:
    """One launch of ``work`` as a plan keeps it.

    ``params``: the kernel's parameters in order; an ``Arg`` is given per call (in order),
    anything else is constant (an int is a 64-bit pointer or size, a NumPy scalar its own
    type, bytes a struct by value). ``views``: one per per-call argument that is a pointer the
    reference reads or writes as an array (None: passed to it as an int, or not a pointer).
    ``values``: constants the reference takes after the per-call arguments (a ``Fixed``
    among them becomes its list of arrays). For a ``LibraryCall`` only ``views`` and
    ``values`` count: the cuda function takes the per-call arguments and then ``values`` (as
    they are) too.
    """

    work: Kernel | LibraryCall
    entry: str = ""  # the kernel as C++ names it ("vram::add<float>"); "" for a library call
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    params: tuple[Any, ...] = ()
    views: tuple[View | None, ...] = ()
    values: tuple[Any, ...] = ()
    shared_mem: int = 0
    cluster: int = 1  # blocks per thread block cluster along x (1: none)
    per_call: int = field(init=False)  # how many arguments a call gives after the stream

    def __post_init__(self) -> None:
        if isinstance(self.work, Kernel):
            count = sum(len(p.format) for p in self.params if isinstance(p, Arg))
        else:
            count = len(self.views)
        object.__setattr__(self, "per_call", count)
        if len(self.views) > count:
            raise ValueError(f"{self.work.name}: more views ({len(self.views)}) than arguments")


class PackedParams:
    """A kernel's parameters as cuLaunchKernel takes them (an array of pointers to each
    value), laid out once: the per-call ``Arg`` values side by side at the front (one
    ``struct.pack_into`` per call), the constants after them."""

    __slots__ = ("format", "buffer", "pointers", "address")

    def __init__(self, params: tuple[Any, ...]) -> None:
        per_call: list[tuple[int, str]] = []  # (parameter index, format)
        constants: list[tuple[int, bytes, int]] = []  # (index, bytes, alignment)
        for i, p in enumerate(params):
            if isinstance(p, Arg):  # a pointer packs as an unsigned 64-bit integer ("P" exists
                per_call.append((i, p.format.replace("P", "Q")))  # in native mode only)
            else:
                constants.append((i, *_constant_bytes(p)))
        offsets: dict[int, int] = {}
        fmt = "<"
        at = 0
        for i, f in per_call:
            align = struct.calcsize("<" + f[0])
            pad = -at % align
            fmt += "x" * pad
            at += pad
            offsets[i] = at
            fmt += f
            at += struct.calcsize("<" + f)
        self.format = struct.Struct(fmt)
        values: list[tuple[int, bytes]] = []
        for i, data, align in constants:
            at += -at % align
            offsets[i] = at
            values.append((at, data))
            at += len(data)
        # room after the last value: a struct parameter may be larger than the fields packed
        # for it (an empty op's byte and padding after a wrapper's numbers), and the driver
        # reads its whole size
        self.buffer = (ctypes.c_ubyte * (at + _SLACK))()
        for offset, data in values:
            ctypes.memmove(ctypes.addressof(self.buffer) + offset, data, len(data))
        base = ctypes.addressof(self.buffer)
        self.pointers = (ctypes.c_uint64 * max(len(params), 1))(
            *(base + offsets[i] for i in range(len(params)))
        )
        self.address = ctypes.addressof(self.pointers) if params else 0

    def fill(self, args: tuple[Any, ...]) -> int:
        """Write one call's per-call arguments; the kernelParams address."""
        self.format.pack_into(self.buffer, 0, *args)
        return self.address


def _constant_bytes(value: Any) -> tuple[bytes, int]:
    """A constant parameter's bytes and alignment."""
    if isinstance(value, bool):
        raise TypeError("a constant kernel parameter cannot be a Python bool: use np.bool_")
    if isinstance(value, int):
        return value.to_bytes(8, "little", signed=value < 0), 8
    if isinstance(value, np.void):  # a structured scalar: a struct by value
        return value.tobytes(), max(8 if value.dtype.alignment >= 8 else 4, value.dtype.alignment)
    if isinstance(value, np.generic):
        return value.tobytes(), value.dtype.alignment
    if isinstance(value, bytes):
        return value, 8
    raise TypeError(f"kernel parameter {value!r}: expected an int, a NumPy scalar or bytes")


def run_on_host(launch: Launch, args: tuple[Any, ...], view: Callable[[int, int], Any]) -> None:
    """Run ``launch``'s reference now over host memory (the cpu device): ``view(ptr,
    nbytes)`` gives the uint8 array at a host address."""
    launch.work.reference(*host_arguments(launch, args, view), *host_values(launch, view))


def host_values(launch: Launch, view: Callable[[int, int], Any]) -> tuple[Any, ...]:
    """The reference's constant arguments: ``launch.values``, each ``Fixed`` its arrays."""
    values = launch.values
    if not any(type(v) is Fixed for v in values):
        return values
    return tuple(v.arrays(view) if type(v) is Fixed else v for v in values)


def fixed_touches(launch: Launch) -> tuple[tuple[int, int], ...]:
    """The memory the ``Fixed`` values of ``launch`` span."""
    return tuple(t for v in launch.values if type(v) is Fixed for t in v.touches())


def host_arguments(launch: Launch, args: tuple[Any, ...], view: Callable[[int, int], Any]):
    """The reference's per-call arguments: arrays for pointers with a view."""
    views = launch.views
    out = []
    for i, arg in enumerate(args):
        v = views[i] if i < len(views) else None
        out.append(arg if v is None else strided_array(view, arg, v))
    return out


def strided_array(view: Callable[[int, int], Any], ptr: int, v: View) -> np.ndarray:
    """The NumPy array ``v`` describes at ``ptr``, over memory ``view(start, nbytes)`` gives."""
    if any(n == 0 for n in v.shape):
        return np.empty(v.shape, v.dtype)
    low, nbytes = v.extent()
    base = view(ptr + low, nbytes)
    return np.lib.stride_tricks.as_strided(
        base[-low:].view(v.dtype) if low else base.view(v.dtype),
        shape=v.shape,
        strides=v.strides,
    )

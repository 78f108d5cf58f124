"""multi_tensor_apply: one kernel over lists of tensors, in a few launches (PyTorch's
MultiTensorApply.cuh).

- Lists: ``depth`` lists of one length; tensor i of every list has the same number of
  elements, is contiguous and lives on the plan's device; all tensors of one list share a
  dtype. Each tensor may carry an *extra*: a number (a per-tensor scalar) or a tensor (its
  address, e.g. an optimizer's step).
- Launch metadata lives in the kernel parameters (kernels/multi_tensor.cuh): per tensor its
  addresses, element count, extra and first tile. A launch takes as many tensors as fit in
  the device's kernel parameter space: 32,764 bytes on Volta and newer with CUDA 12.1+ (so
  Adam's 4 lists take 677 tensors a launch), else 4,096. Empty tensors are skipped; a tensor
  of more than ``MAX_ENTRY`` elements takes several entries.
- Blocks: a block works one tile of ``TILE`` elements. PyTorch's 65,536-element chunks in
  blocks of 512 threads leave a long last wave on 132 SMs; quarter-size tiles keep it short.
- A ``TensorListPlan`` is built once and launched any number of times (the optimizers keep
  theirs while their tensors stay the same). ``launch`` queues the CUDA kernel on a stream;
  on ``sim`` devices it queues a NumPy function per launch over views of device memory
  (pointers, never tensors, as a kernel holds); on ``cpu`` it runs that function at once.

Kernels are compiled by NVRTC once per device and instance (the driver caches them); the
plan's capacity is part of each instance's name (``{N}`` in the name given to ``launch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._device import Device
from .._streams import Stream, current_stream
from .._tensor import Tensor, ndarray_view
from . import _launch

__all__ = [
    "TILE",
    "BLOCK",
    "MAX_ENTRY",
    "TensorListPlan",
    "ElementListPlan",
    "meta_dtype",
    "capacity",
    "params_limit",
    "kernel_source",
]

TILE = 16384  # elements per block
BLOCK = 512  # threads per block (the kernels' __launch_bounds__ allow up to 512)
MAX_ENTRY = 1 << 30  # elements per metadata entry (a multiple of TILE; counts are int32)
LARGE_PARAMS = 32764  # bytes of kernel parameters: Volta+ with a CUDA 12.1+ driver
SMALL_PARAMS = 4096  # bytes of kernel parameters otherwise
RESERVED = 256  # bytes of kernel parameters kept for a kernel's own arguments
_STEP_THREADS = 256  # threads per block of the one-element-per-tensor kernels

Extra = float | int | Tensor  # a per-tensor scalar, or a tensor whose address is passed


def meta_dtype(depth: int, n: int, extra: bool) -> np.dtype:
    """The NumPy layout of ``mt::TensorListMeta<depth, n, extra>`` (C struct alignment)."""
    return np.dtype(
        [
            ("addresses", np.uint64, (depth, n)),
            ("extra", np.uint64, (n if extra else 1,)),
            ("numel", np.int32, (n,)),
            ("first_tile", np.int32, (n,)),
            ("ntensors", np.int32),
        ],
        align=True,
    )


def capacity(depth: int, extra: bool, params: int = LARGE_PARAMS) -> int:
    """Tensors per launch for ``depth`` lists within ``params`` bytes of kernel parameters."""
    per_tensor = 8 * depth + (8 if extra else 0) + 8
    fixed = (0 if extra else 8) + 8
    return (params - RESERVED - fixed) // per_tensor


def params_limit(device: Device) -> int:
    """Bytes of kernel parameters a launch on ``device`` may take (the sim acts as an H100)."""
    if device.type != "cuda":
        return LARGE_PARAMS
    driver = device.driver
    props = driver.properties(device.index)
    large = props.major >= 7 and driver.driver_version() >= 12010
    return LARGE_PARAMS if large else SMALL_PARAMS


def kernel_source(*paths: str) -> str:
    """multi_tensor.cuh followed by the given kernel files (paths relative to the package
    directory of vram, e.g. "optim/kernels/fused.cu"), as one NVRTC source."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    parts = [(_launch.KERNEL_DIR / "multi_tensor.cuh").read_text()]
    parts += [(root / path).read_text() for path in paths]
    return "\n".join(parts)


@dataclass(slots=True)
class _Launch:
    meta: np.void  # the TensorListMeta value, passed by value
    blocks: int
    entries: tuple[np.ndarray, np.ndarray, np.ndarray | None]  # addresses, numels, extras


class TensorListPlan:
    """Lists of tensors cut into launches; built once, launched any number of times.

    ``lists`` are ``depth`` sequences of one length (see the module docstring); ``extras``,
    when given, has one number or tensor per position (for tensors, host runs view one
    element of ``extra_dtype``). ``check=False`` skips checking the lists (for callers that
    did). The plan keeps no tensor alive: the caller keeps them alive while it launches it.
    """

    __slots__ = (
        "device",
        "depth",
        "extra",
        "extra_dtype",
        "n",
        "tile",
        "launches",
        "dtypes",
        "_kernels",
        "_float_extras",
    )

    def __init__(
        self,
        lists: Sequence[Sequence[Tensor]],
        extras: Sequence[Extra] | None = None,
        *,
        extra_dtype: Any = np.float32,
        tile: int | None = None,
        check: bool = True,
    ) -> None:
        if not lists or not lists[0]:
            raise ValueError("multi_tensor_apply needs at least one list of at least one tensor")
        first = lists[0][0]
        self.device: Device = first.device
        self.depth = len(lists)
        self.extra = extras is not None
        self.extra_dtype = np.dtype(extra_dtype)  # of the element an extra tensor holds
        self.tile = TILE if tile is None else tile  # read at build time: benchmarks tune it
        self.dtypes = tuple(lst[0].dtype for lst in lists)
        self.n = capacity(self.depth, self.extra, params_limit(self.device))
        self.launches: list[_Launch] = []
        self._kernels: dict[str, Any] = {}
        self._build(lists, extras, check)

    # ---- building ----------------------------------------------------------------------
    def _build(
        self, lists: Sequence[Sequence[Tensor]], extras: Sequence[Extra] | None, check: bool
    ) -> None:
        if check:
            self._check(lists)
        numels = np.array([t.numel() for t in lists[0]], dtype=np.int64)
        addresses = np.array([[t.data_ptr() for t in lst] for lst in lists], dtype=np.uint64)
        self._float_extras = extras is not None and not isinstance(extras[0], Tensor)
        values = None if extras is None else self._extra_values(extras)
        keep = numels > 0
        if (numels > MAX_ENTRY).any():  # rare: cut large tensors into entries
            addresses, numels, values = self._split(addresses, numels, values)
        elif not keep.all():
            addresses, numels = addresses[:, keep], numels[keep]
            values = None if values is None else values[keep]
        for first in range(0, numels.size, self.n):
            part = slice(first, first + self.n)
            extra = None if values is None else values[part]
            self.launches.append(self._pack(addresses[:, part], numels[part], extra))

    def _check(self, lists: Sequence[Sequence[Tensor]]) -> None:
        for i, t in enumerate(lists[0]):
            numel = t.numel()
            for k, lst in enumerate(lists):
                other = lst[i]
                if other.dtype != self.dtypes[k] or other.numel() != numel:
                    raise ValueError(
                        f"multi_tensor_apply: tensor {i} of list {k} has dtype {other.dtype} "
                        f"and {other.numel()} elements; expected {self.dtypes[k]} and {numel}"
                    )
                if other.device != self.device or not other.is_contiguous():
                    raise ValueError(
                        f"multi_tensor_apply: tensor {i} of list {k} must be contiguous and "
                        f"on {self.device}"
                    )

    def _extra_values(self, extras: Sequence[Extra]) -> np.ndarray:
        """The extras as the metadata's 8-byte words: addresses, or doubles' bits."""
        if isinstance(extras[0], Tensor):
            return np.array([t.data_ptr() for t in extras], dtype=np.uint64)
        return np.array([float(v) for v in extras], dtype=np.float64).view(np.uint64)

    def _split(
        self, addresses: np.ndarray, numels: np.ndarray, values: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Entries of at most MAX_ENTRY elements (empty tensors dropped)."""
        sizes = np.array([dt.itemsize for dt in self.dtypes], dtype=np.uint64)
        cols, counts, index = [], [], []
        for i, numel in enumerate(numels.tolist()):
            for start in range(0, numel, MAX_ENTRY):
                cols.append(addresses[:, i] + np.uint64(start) * sizes)
                counts.append(min(MAX_ENTRY, numel - start))
                index.append(i)
        split = np.array(cols, dtype=np.uint64).reshape(-1, self.depth).T
        kept = None if values is None else values[np.array(index, dtype=np.int64)]
        return split, np.array(counts, dtype=np.int64), kept

    def _pack(
        self, addresses: np.ndarray, numels: np.ndarray, values: np.ndarray | None
    ) -> _Launch:
        meta = np.zeros((), dtype=meta_dtype(self.depth, self.n, self.extra))
        count = numels.size
        tiles = -(-numels // self.tile)
        first = np.zeros(count, dtype=np.int64)
        np.cumsum(tiles[:-1], out=first[1:])
        meta["addresses"][:, :count] = addresses
        meta["numel"][:count] = numels
        meta["first_tile"][:count] = first
        meta["ntensors"] = count
        if values is not None:
            meta["extra"][:count] = values
        blocks = int(tiles.sum())
        if blocks >= 2**31:
            raise ValueError("multi_tensor_apply: more than 2**31 tiles in one launch")
        return _Launch(meta[()], blocks, (addresses, numels, values))

    # ---- running -----------------------------------------------------------------------
    def launch(
        self,
        source: Callable[[], str],
        kernel: str,
        args: tuple,
        stream: Stream | None = None,
        host: Callable[..., None] | None = None,
        *,
        host_aligned: bool = False,
    ) -> int:
        """Run every launch of the plan on ``stream`` (None: the device's current stream).

        cuda: kernel ``kernel.format(N=capacity)`` from ``source()`` with arguments
        (metadata, tile, *args). sim and cpu: ``host(arrays, extra)`` once per tensor entry,
        ``arrays`` being 1-D NumPy views of its elements in each list and ``extra`` its
        extra (a number, a 1-element view of the extra tensor, or None); with
        ``host_aligned``, ``host(arrays, extra, aligned)``, ``aligned`` telling whether the
        entry's addresses in every list are 16-byte aligned (kernels that follow PyTorch's
        vectorized path need it). Returns the number of launches.
        """
        if stream is None and self.device.type != "cpu":
            stream = current_stream(self.device)
        if self.device.type == "cuda":
            compiled = self._kernel(source, kernel.format(N=self.n))
            driver = self.device.driver
            tile, block = np.int32(self.tile), BLOCK
            for item in self.launches:
                driver.launch(
                    compiled,
                    (item.blocks, 1, 1),
                    (block, 1, 1),
                    (item.meta, tile, *args),
                    stream.cuda_stream,
                )
            return len(self.launches)
        if host is None:
            raise NotImplementedError(f"{kernel}: no host implementation for {self.device}")
        for item in self.launches:
            self._run_host(host, item.entries, stream, host_aligned)
        return len(self.launches)

    def _kernel(self, source: Callable[[], str], name: str) -> Any:
        compiled = self._kernels.get(name)
        if compiled is None:
            compiled = _compile(self.device, source, name)
            self._kernels[name] = compiled
        return compiled

    def _run_host(
        self, host: Callable[..., None], entries: tuple, stream: Stream | None, aligned: bool
    ) -> None:
        dtypes = [dt.np for dt in self.dtypes]
        addresses, numels, values = entries
        columns = addresses.T.tolist()
        counts = numels.tolist()
        if values is None:
            extras: list[Any] = [None] * len(counts)
        elif self._float_extras:
            extras = values.view(np.float64).tolist()
        else:
            extras = values.tolist()
        pointer = values is not None and not self._float_extras
        view = _host_view if self.device.type == "cpu" else self.device.driver.view
        extra_dtype = self.extra_dtype

        def run() -> None:
            for column, numel, extra in zip(columns, counts, extras, strict=True):
                arrays = [
                    _array(view, address, numel, dt)
                    for address, dt in zip(column, dtypes, strict=True)
                ]
                if pointer:
                    extra = _array(view, extra, 1, extra_dtype)
                if aligned:
                    host(arrays, extra, all(address % 16 == 0 for address in column))
                else:
                    host(arrays, extra)

        if stream is None:
            run()
        else:
            touches = tuple(
                (address, numel * dt.itemsize)
                for column, numel in zip(columns, counts, strict=True)
                for address, dt in zip(column, dtypes, strict=True)
            )
            self.device.driver.enqueue(stream.cuda_stream, run, touches)


def _array(view: Callable[[int, int], np.ndarray], address: int, numel: int, dt: np.dtype):
    return ndarray_view(view, address, (numel,), (dt.itemsize,), dt)


def _host_view(address: int, nbytes: int) -> np.ndarray:
    import ctypes

    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))


_compiled: dict[tuple[int, str], Any] = {}


def _compile(device: Device, source: Callable[[], str], name: str) -> Any:
    """The kernel ``name`` of ``source()`` on ``device``, compiled once per process."""
    key = (device.index, name)
    kernel = _compiled.get(key)
    if kernel is None:
        kernel = device.driver.compile(device.index, source(), name)
        _compiled[key] = kernel
    return kernel


class ElementListPlan:
    """One-element tensors (one device, float32), e.g. optimizer steps, for kernels that take
    ``StepList<N>`` (addresses and a count; one thread per tensor); built once, launched any
    number of times. On sim and cpu, ``host(element)`` runs per tensor over a 1-element view."""

    __slots__ = ("device", "n", "parts")

    def __init__(self, tensors: Sequence[Tensor]) -> None:
        self.device: Device = tensors[0].device
        self.n = (params_limit(self.device) - RESERVED - 8) // 8
        layout = np.dtype([("steps", np.uint64, (self.n,)), ("n", np.int32)], align=True)
        self.parts: list[tuple[np.void, list[int]]] = []
        for first in range(0, len(tensors), self.n):
            pointers = [t.data_ptr() for t in tensors[first : first + self.n]]
            packed = np.zeros((), dtype=layout)
            packed["steps"][: len(pointers)] = pointers
            packed["n"] = len(pointers)
            self.parts.append((packed[()], pointers))

    def launch(
        self,
        source: Callable[[], str],
        kernel: str,
        args: tuple,
        stream: Stream | None,
        host: Callable[[np.ndarray], None],
    ) -> int:
        """Run ``kernel.format(N=...)`` (arguments: the list, then ``args``) over every part;
        returns the number of launches."""
        device = self.device
        if device.type == "cuda":
            compiled = _compile(device, source, kernel.format(N=self.n))
            for packed, pointers in self.parts:
                blocks = math.ceil(len(pointers) / _STEP_THREADS)
                device.driver.launch(
                    compiled,
                    (blocks, 1, 1),
                    (_STEP_THREADS, 1, 1),
                    (packed, *args),
                    stream.cuda_stream,
                )
        else:
            for _, pointers in self.parts:
                _run_per_element(device, pointers, host, stream)
        return len(self.parts)


def _run_per_element(
    device: Device, pointers: list[int], host: Callable[[np.ndarray], None], stream: Stream | None
) -> None:
    view = _host_view if device.type == "cpu" else device.driver.view

    def run() -> None:
        for address in pointers:
            host(_array(view, address, 1, np.dtype(np.float32)))

    if stream is None:
        run()
    else:
        touches = tuple((address, 4) for address in pointers)
        device.driver.enqueue(stream.cuda_stream, run, touches)

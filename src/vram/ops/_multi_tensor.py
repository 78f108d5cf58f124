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
  theirs while their tensors stay the same). A kernel is declared once, as every kernel is
  (``driver._work.Kernel``): its CUDA source and a NumPy reference made by
  ``list_reference(step)`` from the per-tensor arithmetic ``step``. Each launch of the plan
  is prepared once per kernel (``ops._plans.launcher``): on a GPU the metadata is packed
  once and a run packs the kernel's own arguments; on sim the reference is queued over
  views of every tensor the launch names (pointers, never tensors, as a kernel holds); on
  cpu it runs at once.

Kernels are compiled by NVRTC once per device and instance (the driver caches them); the
plan's capacity is part of each instance's name (``{N}`` in the entry given to ``launch``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .._device import Device
from .._tensor import Tensor
from ..driver._work import Fixed, Kernel, Launch, Query
from ._plans import ask, launcher, stream_handle

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
    "list_reference",
    "element_reference",
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


def _params_limit(driver: Any, device: int) -> int:
    props = driver.properties(device)
    large = props.major >= 7 and driver.driver_version() >= 12010
    return LARGE_PARAMS if large else SMALL_PARAMS


_PARAMS = Query("kernel parameter space", _params_limit, lambda: LARGE_PARAMS)


def params_limit(device: Device) -> int:
    """Bytes of kernel parameters a launch on ``device`` may take (the sim acts as an H100;
    the cpu runs no kernel, and takes the large space)."""
    return ask(device, _PARAMS) or LARGE_PARAMS


@cache
def kernel_source(*paths: str) -> str:
    """multi_tensor.cuh followed by the given kernel files (paths relative to the package
    directory of vram, e.g. "optim/kernels/fused.cu"), as one NVRTC source."""
    root = Path(__file__).resolve().parent.parent
    parts = [(root / "ops" / "kernels" / "multi_tensor.cuh").read_text()]
    parts += [(root / path).read_text() for path in paths]
    return "\n".join(parts)


@dataclass(frozen=True, slots=True, eq=False)
class _Entries:
    """What a launch's reference needs besides the arrays (worked out when it runs, so that
    a GPU's launch pays nothing for it): the entries' ``addresses`` (lists x entries), their
    extras' 8-byte words (``values``: doubles' bits, or the extra tensors' addresses, or
    None), and ``width``: arrays per entry (the lists, and the extra tensor's element)."""

    addresses: np.ndarray
    values: np.ndarray | None
    width: int
    extra_tensor: bool

    def extras(self) -> list[Any]:
        """Each entry's extra number (None where there are none or they are tensors)."""
        if self.values is None or self.extra_tensor:
            return [None] * self.addresses.shape[1]
        return self.values.view(np.float64).tolist()

    def aligned(self) -> list[bool]:
        """Whether each entry's addresses in every list are 16-byte aligned."""
        return (self.addresses % 16 == 0).all(axis=0).tolist()


def list_reference(step: Callable[..., None]) -> Callable[..., None]:
    """The NumPy reference of a multi_tensor_apply kernel: ``step(arrays, extra, aligned,
    *args)`` once per tensor entry, ``arrays`` being 1-D arrays of its elements in each
    list, ``extra`` its extra (a number, a 1-element array of the extra tensor, or None),
    ``aligned`` whether its addresses in every list are 16-byte aligned (kernels that
    follow PyTorch's vectorized path need it), ``args`` the kernel's own arguments (arrays
    where they have a ``View``)."""

    def reference(*args: Any) -> None:
        *own, arrays, entries = args
        width = entries.width
        depth = width - 1 if entries.extra_tensor else width
        for i, (extra, aligned) in enumerate(zip(entries.extras(), entries.aligned(), strict=True)):
            found = arrays[i * width : (i + 1) * width]
            if entries.extra_tensor:
                extra = found[depth]
            step(found[:depth], extra, aligned, *own)

    return reference


def element_reference(step: Callable[..., None]) -> Callable[..., None]:
    """The NumPy reference of a ``StepList`` kernel: ``step(element, *args)`` once per
    tensor, ``element`` a 1-element float32 array."""

    def reference(*args: Any) -> None:
        *own, elements = args
        for element in elements:
            step(element, *own)

    return reference


@dataclass(slots=True)
class _Launch:
    meta: np.void  # the TensorListMeta value, passed by value
    blocks: int
    entries: tuple[np.ndarray, np.ndarray, np.ndarray | None]  # addresses, numels, extras


class _Plan:
    """What both plans share: ``launch``, ``prepare`` and a run at once."""

    __slots__ = ()

    def prepare(
        self, kernel: Kernel, entry: str, params: tuple = (), views: tuple = ()
    ) -> Callable[..., int]:
        raise NotImplementedError

    def launch(
        self,
        kernel: Kernel,
        entry: str,
        params: tuple = (),
        views: tuple = (),
        args: tuple = (),
        stream: int | None = None,
    ) -> int:
        """``prepare`` and run once on ``stream``; the number of launches."""
        return self.prepare(kernel, entry, params, views)(stream, *args)


class TensorListPlan(_Plan):
    """Lists of tensors cut into launches; built once, launched any number of times.

    ``lists`` are ``depth`` sequences of one length (see the module docstring); ``extras``,
    when given, has one number or tensor per position (for tensors, the reference sees one
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
    def prepare(
        self, kernel: Kernel, entry: str, params: tuple = (), views: tuple = ()
    ) -> Callable[..., int]:
        """Every launch of the plan, prepared (``ops._plans.launcher``): ``kernel``'s instance
        ``entry.format(N=capacity)`` with parameters (metadata, tile, *params); ``params``
        are the kernel's own (``Arg``s are given at each run, ``views`` say how the
        reference sees them). Returns ``run(stream, *args)``: every launch on ``stream`` (a
        stream handle; None: the device's current stream), the number of launches. A caller
        that runs it again keeps it (the optimizers do)."""
        return _runner(
            self.device,
            [self._launch(kernel, entry, params, views, item) for item in self.launches],
        )

    def _launch(
        self, kernel: Kernel, entry: str, params: tuple, views: tuple, item: _Launch
    ) -> Launch:
        """One launch as the seam takes it: the metadata and tile first, and for the
        reference every entry's arrays (``Fixed``, entry by entry: one array per list, then
        the extra tensor's element) and what else it needs (``_Entries``)."""
        addresses, numels, values = item.entries
        count, depth = numels.size, self.depth
        extra_tensor = values is not None and not self._float_extras
        dtypes = tuple(dt.np for dt in self.dtypes)
        if extra_tensor:
            pointers = np.empty((count, depth + 1), np.uint64)
            pointers[:, :depth] = addresses.T
            pointers[:, depth] = values
            counts = np.ones((count, depth + 1), np.int64)
            counts[:, :depth] = numels[:, None]
            dtypes += (self.extra_dtype,)
        else:
            pointers = addresses.T
            counts = np.repeat(numels, depth)
        fixed = Fixed(pointers.reshape(-1), counts.reshape(-1), dtypes * count)
        return Launch(
            kernel,
            entry.format(N=self.n),
            (item.blocks, 1, 1),
            (BLOCK, 1, 1),
            (item.meta, np.int32(self.tile), *params),
            views,
            (fixed, _Entries(addresses, values, len(dtypes), extra_tensor)),
        )


class ElementListPlan(_Plan):
    """One-element tensors (one device, float32), e.g. optimizer steps, for kernels that take
    ``StepList<N>`` (addresses and a count; one thread per tensor); built once, launched any
    number of times. The reference (``element_reference``) sees each as a 1-element array."""

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

    def prepare(
        self, kernel: Kernel, entry: str, params: tuple = (), views: tuple = ()
    ) -> Callable[..., int]:
        """``kernel``'s ``entry.format(N=...)`` (parameters: the list, then ``params``) over
        every part, prepared: ``run(stream, *args)`` as ``TensorListPlan.prepare``'s."""
        one = np.dtype(np.float32)
        launches = [
            Launch(
                kernel,
                entry.format(N=self.n),
                (math.ceil(len(pointers) / _STEP_THREADS), 1, 1),
                (_STEP_THREADS, 1, 1),
                (packed, *params),
                views,
                (Fixed(pointers, (1,) * len(pointers), (one,) * len(pointers)),),
            )
            for packed, pointers in self.parts
        ]
        return _runner(self.device, launches)


def _runner(device: Device, launches: list[Launch]) -> Callable[..., int]:
    """``launches`` prepared on ``device``: ``run(stream, *args)`` runs them all on
    ``stream`` (a handle; None: the device's current stream) and says how many."""
    runs = [launcher(device, launch) for launch in launches]

    def run(stream: int | None, *args: Any) -> int:
        if stream is None:
            stream = stream_handle(device)
        for one in runs:
            one(stream, *args)
        return len(runs)

    return run

"""Generators: the state of a Philox stream, PyTorch's CUDA generator (CUDAGeneratorImpl).

- A Generator is (seed, offset) for one device. A draw reads both and advances the offset by
  what its launch consumes (a multiple of 4: PyTorch's Note [Why enforce RNG offset % 4 ==
  0?]), so one seed gives the same numbers on every device kind: cuda, sim and cpu run the
  same Philox arithmetic (the cpu device too, where PyTorch's CPU generator is a Mersenne
  twister).
- Each device has a default generator, made on first use: cpu's starts at PyTorch's default
  seed, cuda's and sim's at a nondeterministic one, as PyTorch's CUDA generators, unless
  ``manual_seed`` came first. ``manual_seed`` seeds every default generator, present and
  future; ``vram.cuda.manual_seed_all`` those of the current device's kind.
- Graph capture (Note [Graph-safe generators]).

Note [Graph-safe generators]
A captured kernel is replayed with the arguments it was captured with, so a (seed, offset)
passed by value would draw the same numbers at every replay. As PyTorch's graph-safe
generator, a generator registered with a CUDAGraph (the default generator of the capture's
device always is) draws from a 16-byte device state {seed, offset} while the graph
captures: the kernel gets a pointer to it and its offset within the graph, which it adds to
the state's offset. ``replay`` writes the state (one small kernel on the replay stream)
before it launches the graph, then advances the generator's offset by everything the graph
draws. So replays draw new numbers, and an eager draw after a replay does not repeat them.
Unlike PyTorch's one state per generator, each graph has its own: allocated by the first
captured draw, in the graph's private pool (a stable address that lives as long as the
graph), so graphs that draw nothing take no memory, and two graphs replayed on two streams
at once do not share one. A draw while a capture is under way must come from the capturing
stream and a registered generator (RuntimeError otherwise, as PyTorch's).
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._device import Device, as_device, current_device_obj, device_count
from ..._dtypes import uint8
from ..._tensor import Storage, Tensor, device_storage
from ...driver._work import Arg, Kernel, Launch, View
from .._plans import launcher
from . import _source

__all__ = [
    "DEFAULT_SEED",
    "Generator",
    "default_generator",
    "manual_seed",
    "seed",
    "initial_seed",
    "seed_device_kind",
    "default_generators",
    "capturing",
    "get_rng_state",
    "set_rng_state",
]

DEFAULT_SEED = 67280421310721  # PyTorch's default_rng_seed_val
_MASK64 = (1 << 64) - 1
_STATE = struct.Struct("<QQ")  # get_state's bytes: seed, offset (PyTorch's CUDA layout)

# How many generators are in capture mode (all devices): the draws look at their stream's
# capture status only while some are, so an eager draw asks the driver nothing.
_captures = [0]  # guarded by _captures_lock
_captures_lock = threading.Lock()


def capturing() -> bool:
    """True while some graph capture has registered generators in capture mode."""
    return _captures[0] > 0


def _check_seed(value: Any) -> int:
    """A seed as PyTorch takes it: an int in [-2**63, 2**64), negative ones wrapping."""
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int):
        raise RuntimeError(f"manual_seed expected a long, but got {type(value).__name__}")
    if not -(1 << 63) <= value <= _MASK64:
        raise ValueError(f"seed: {value} is out of range [-2**63, 2**64)")
    return value & _MASK64


def _nondeterministic() -> int:
    """A seed from the OS's entropy, 53 bits as PyTorch's (exact in a double)."""
    return int.from_bytes(os.urandom(8), "little") & ((1 << 53) - 1)


def _write_state_reference(state: np.ndarray, seed: int, offset: int) -> None:
    state[0] = seed
    state[1] = offset


_WRITE_STATE = Kernel("generator state", _source.source(), _write_state_reference)


class Generator:
    """A Philox4x32-10 generator for ``device`` (torch.Generator): ``manual_seed``,
    ``seed``, ``initial_seed``, ``get_state`` / ``set_state`` (16 bytes as PyTorch's CUDA
    generator: seed and offset, little-endian), ``get_offset`` / ``set_offset``.

    ``device`` is "cpu" when not given, as torch.Generator's; a draw takes a generator of
    its tensor's device kind (RuntimeError otherwise, as PyTorch's)."""

    __slots__ = (
        "_device",
        "_seed",
        "_offset",
        "_lock",
        "_capturing",
        "_intragraph",
        "_capture_state",
        "_write_state",
        "__weakref__",
    )

    def __init__(self, device: Any = "cpu") -> None:
        self._device = as_device(device)
        self._seed = DEFAULT_SEED
        self._offset = 0
        self._lock = threading.Lock()  # guards seed, offset and the capture fields
        self._capturing = 0  # graphs capturing with this generator registered
        self._intragraph = 0  # offset within the graph being captured
        self._capture_state: Storage | None = None  # that graph's state {seed, offset}
        self._write_state: Any = None  # the launcher that writes a state (replay's prologue)

    @property
    def device(self) -> Device:
        return self._device

    def _not_capturing(self, what: str) -> None:
        if self._capturing:
            raise RuntimeError(f"Cannot call Generator.{what} while a graph captures with it")

    def manual_seed(self, seed: Any) -> Generator:
        """Seed the generator (its offset goes back to 0); returns the generator."""
        value = _check_seed(seed)
        with self._lock:
            self._not_capturing("manual_seed")
            self._seed, self._offset = value, 0
        return self

    def seed(self) -> int:
        """Seed the generator from the OS's entropy; returns that seed."""
        value = _nondeterministic()
        self.manual_seed(value)
        return value

    def initial_seed(self) -> int:
        """The seed the generator was last seeded with."""
        return self._seed

    def get_offset(self) -> int:
        """The Philox offset the next draw starts at."""
        return self._offset

    def set_offset(self, offset: int) -> Generator:
        """Move the generator to ``offset`` (a multiple of 4)."""
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise TypeError(f"offset: expected an int, got {offset!r}")
        if not 0 <= int(offset) <= _MASK64:
            raise ValueError(f"offset: {offset} is out of range [0, 2**64)")
        if int(offset) % 4:
            raise RuntimeError("offset must be a multiple of 4")
        with self._lock:
            self._not_capturing("set_offset")
            self._offset = int(offset)
        return self

    def get_state(self) -> Tensor:
        """The state as a 16-byte uint8 cpu tensor: seed then offset, little-endian."""
        with self._lock:
            self._not_capturing("get_state")
            data = _STATE.pack(self._seed, self._offset)
        out = Tensor._empty((16,), uint8, Device("cpu"))
        out.numpy()[:] = np.frombuffer(data, np.uint8)
        return out

    def set_state(self, new_state: Tensor) -> Generator:
        """Restore a state from ``get_state`` (8 bytes: a seed, offset 0)."""
        if not isinstance(new_state, Tensor):
            raise TypeError(
                f"new_state: expected a uint8 cpu vram.Tensor, got {type(new_state).__name__}"
            )
        if new_state.dtype is not uint8 or new_state.device.type != "cpu":
            raise TypeError(
                f"RNG state must be a uint8 cpu tensor, got {new_state.dtype} on {new_state.device}"
            )
        data = new_state.contiguous().numpy().reshape(-1).tobytes()
        if len(data) == 8:
            value, offset = int.from_bytes(data, "little"), 0
        elif len(data) == 16:
            value, offset = _STATE.unpack(data)
        else:
            raise RuntimeError("RNG state is wrong size")
        if offset % 4:
            raise RuntimeError("offset must be a multiple of 4")
        with self._lock:
            self._not_capturing("set_state")
            self._seed, self._offset = value, offset
        return self

    def __repr__(self) -> str:
        return f"<vram.Generator device={self._device} seed={self._seed} offset={self._offset}>"

    # ---- draws (ops/_random/_draw.py) ------------------------------------------------
    def _advance(self, increment: int) -> tuple[int, int]:
        """(seed, offset) for an eager draw that consumes ``increment``."""
        with self._lock:
            if self._capturing:
                raise RuntimeError(
                    "Offset increment outside graph capture encountered unexpectedly: a "
                    f"graph is capturing with the generator of {self._device}; draw from "
                    "the capturing stream (or from another generator)"
                )
            offset = self._offset
            self._offset = (offset + increment) & _MASK64
            return self._seed, offset

    def _advance_captured(self, increment: int, device: Device) -> tuple[int, int]:
        """(offset within the graph, address of its device state) for a captured draw; the
        first one allocates the state, on the capturing stream: in the graph's pool."""
        with self._lock:
            if not self._capturing:
                raise RuntimeError(
                    "Attempt to increase offset for a CUDA generator not in capture mode: "
                    "register it with the graph before capture_begin "
                    "(graph.register_generator_state(generator))"
                )
            if device != self._device:
                raise RuntimeError(
                    f"generator: a generator of {self._device} cannot draw into a graph "
                    f"captured on {device}"
                )
            if self._capture_state is None:
                self._capture_state = device_storage(_STATE.size, device)
            offset = self._intragraph
            self._intragraph = offset + increment
            return offset, self._capture_state.ptr

    # ---- the graph-safe protocol vram.CUDAGraph calls (PyTorch's CUDAGeneratorState) --------
    def capture_prologue(self) -> None:
        """A graph that registered this generator is about to capture: draws on its stream
        read a device state from now on."""
        if self._device.type == "cpu":
            raise RuntimeError("generator: a cpu generator cannot take part in graph capture")
        with self._lock:
            if not self._capturing:
                self._intragraph = 0
                self._capture_state = None
            self._capturing += 1
        with _captures_lock:
            _captures[0] += 1

    def capture_epilogue(self) -> tuple[int, Storage | None]:
        """The capture ended (or failed): (how far one replay advances the offset, the
        graph's device state, None when it drew nothing), for the graph to keep."""
        with _captures_lock:
            _captures[0] -= 1
        with self._lock:
            self._capturing -= 1
            found = self._intragraph, self._capture_state
            if not self._capturing:
                self._capture_state = None
            return found

    def replay_prologue(self, state: Storage, increment: int, stream: int) -> None:
        """Before a replay on ``stream`` (a driver handle): write the graph's ``state``
        from the generator's, then advance the offset by ``increment``, what it draws."""
        with self._lock:
            self._not_capturing("replay")
            if self._write_state is None:
                launch = Launch(
                    _WRITE_STATE,
                    "vram::rng::set_state",
                    params=(Arg("P"), Arg("Q"), Arg("Q")),
                    views=(View((2,), (8,), np.dtype(np.uint64)), None, None),
                )
                self._write_state = launcher(self._device, launch)
            offset = self._offset
            self._offset = (offset + increment) & _MASK64
            self._write_state(stream, state.ptr, self._seed, offset)


# ---- the default generators ------------------------------------------------------------
_defaults: dict[Device, Generator] = {}
_seeds: dict[str, int] = {}  # device kind -> the seed manual_seed gave all its generators
_defaults_lock = threading.Lock()


def default_generator(device: Device) -> Generator:
    """The default generator of ``device`` (a Device), made on first use."""
    found = _defaults.get(device)
    if found is None:
        with _defaults_lock:
            found = _defaults.get(device)
            if found is None:
                found = Generator(device)
                kind_seed = _seeds.get(device.type)
                if kind_seed is None:
                    kind_seed = DEFAULT_SEED if device.type == "cpu" else _nondeterministic()
                found._seed = kind_seed
                _defaults[device] = found
    return found


def seed_device_kind(kinds: Sequence[str], value: Any) -> None:
    """Seed the default generators of the device ``kinds``, present and future."""
    value = _check_seed(value)
    with _defaults_lock:
        for kind in kinds:
            _seeds[kind] = value
        found = [g for d, g in _defaults.items() if d.type in kinds]
    for generator in found:
        generator.manual_seed(value)


def manual_seed(seed: Any) -> Generator:
    """Seed every default generator, of every device, present and future (torch.
    manual_seed); returns the current device's (torch returns its CPU generator)."""
    seed_device_kind(("cpu", "cuda", "sim"), seed)
    return default_generator(current_device_obj())


def seed() -> int:
    """Seed every default generator from the OS's entropy (torch.seed); returns the seed."""
    value = _nondeterministic()
    manual_seed(value)
    return value


def initial_seed() -> int:
    """The seed of the current device's default generator (torch.initial_seed)."""
    return default_generator(current_device_obj()).initial_seed()


class _DefaultGenerators(Sequence):
    """The default generators of the current device's kind, one per device (torch.cuda.
    default_generators), made as they are looked at."""

    def __len__(self) -> int:
        return device_count(current_device_obj().type)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        kind = current_device_obj().type
        return default_generator(as_device(Device(kind, range(len(self))[index]), "index"))


default_generators = _DefaultGenerators()


def get_rng_state(device: Any = "cpu") -> Tensor:
    """The state of ``device``'s default generator (torch.get_rng_state: the cpu one)."""
    return default_generator(as_device(device)).get_state()


def set_rng_state(new_state: Tensor, device: Any = "cpu") -> None:
    """Restore ``device``'s default generator from ``get_rng_state``."""
    default_generator(as_device(device)).set_state(new_state)

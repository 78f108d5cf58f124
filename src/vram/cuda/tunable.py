"""TunableOp (torch.cuda.tunable): GEMMs that measure their candidate algorithms once per
problem and remember the fastest, in PyTorch's results file format.

    vram.cuda.tunable.enable()                 # or VRAM_TUNABLEOP_ENABLED=1
    y = x @ w                                  # first sight of this problem: tuned, then run
    vram.cuda.tunable.write_file()             # also written at exit when something was tuned

Enabling TunableOp routes every GEMM (mm, bmm, addmm, matmul, linear) through it; tuning,
on by default once enabled, is what measures a problem not seen before. Without tuning a
new problem runs the default algorithm. See ``vram.blas._tunable`` for the candidates, the
file format and how the simulated GPU chooses deterministically.

Environment variables (read once, and they win over these functions, as in PyTorch):
``VRAM_TUNABLEOP_ENABLED``, ``VRAM_TUNABLEOP_TUNING``, ``VRAM_TUNABLEOP_FILENAME``,
``VRAM_TUNABLEOP_MAX_TUNING_DURATION_MS``, ``VRAM_TUNABLEOP_MAX_TUNING_ITERATIONS``; each
``PYTORCH_TUNABLEOP_*`` name is read when the ``VRAM_`` one is unset.
"""

from __future__ import annotations

from .._device import current_device_obj
from ..blas import _ops, _tunable
from ..ops._plans import ask

__all__ = [
    "enable",
    "is_enabled",
    "tuning_enable",
    "tuning_is_enabled",
    "set_max_tuning_duration",
    "get_max_tuning_duration",
    "set_max_tuning_iterations",
    "get_max_tuning_iterations",
    "set_filename",
    "get_filename",
    "get_results",
    "get_validators",
    "write_file_on_exit",
    "write_file",
    "read_file",
]


def _library() -> _tunable.Library:
    """The current device's BLAS library, as a results file knows it."""
    device = current_device_obj()
    return ask(device, _ops.BLAS_LIBRARY, device.index) or _tunable.Library((), "")


def enable(val: bool = True) -> None:
    """The big on/off switch: route GEMMs through TunableOp."""
    state = _tunable.state
    with state.lock:
        if state.enabled != bool(val):
            state.enabled = bool(val)
            state.changed()


def is_enabled() -> bool:
    """Whether GEMMs go through TunableOp."""
    return _tunable.state.is_enabled()


def tuning_enable(val: bool = True) -> None:
    """Whether a problem with no remembered result is tuned (True) or runs the default."""
    state = _tunable.state
    with state.lock:
        if state.tuning != bool(val):
            state.tuning = bool(val)
            state.changed()


def tuning_is_enabled() -> bool:
    return _tunable.state.is_tuning()


def set_max_tuning_duration(duration: int) -> None:
    """Milliseconds to spend timing each candidate (default 30; at least one run)."""
    _tunable.state.max_duration_ms = max(int(duration), 0)


def get_max_tuning_duration() -> int:
    return _tunable.state.duration()


def set_max_tuning_iterations(iterations: int) -> None:
    """Most timed runs per candidate (default 100; at least one run)."""
    _tunable.state.max_iterations = max(int(iterations), 0)


def get_max_tuning_iterations() -> int:
    return _tunable.state.iterations()


def set_filename(filename: str, insert_device_ordinal: bool = False) -> None:
    """The results file; with ``insert_device_ordinal`` the current device's index goes in
    place of ``%d`` or before the last '.' (one file per device in one-process-per-GPU runs)."""
    if not isinstance(filename, str):
        raise TypeError(f"filename: expected a str, got {type(filename).__name__}")
    if insert_device_ordinal:
        filename = _tunable.insert_ordinal(filename, _library().ordinal)
    state = _tunable.state
    with state.lock:
        state.filename = filename
        state.loaded = False  # the next tunable GEMM reads the new file...
        state.changed()  # ...and no cached plan skips that


def get_filename() -> str:
    """The results file (the default ``tunableop_results<device>.csv`` until one is set)."""
    return _tunable.resolved_filename(_library())


def get_results() -> tuple[tuple[str, str, str, float], ...]:
    """Every remembered result: (op, params, solution, average ms)."""
    state = _tunable.state
    with state.lock:
        return tuple(
            (op, params, solution, ms)
            for op, entries in state.results.items()
            for params, (solution, ms) in entries.items()
        )


def get_validators() -> tuple[tuple[str, str], ...]:
    """What a results file must match to be used: (key, value) pairs."""
    return tuple(_tunable.validators(_library()).items())


def write_file_on_exit(val: bool) -> None:
    """Whether the results file is written at exit when tuning found something new."""
    _tunable.state.write_on_exit = bool(val)


def write_file(filename: str | None = None) -> bool:
    """Write the results (PyTorch's CSV) to ``filename`` (default ``get_filename()``)."""
    return _tunable.write_file(filename if filename is not None else get_filename(), _library())


def read_file(filename: str | None = None) -> bool:
    """Merge the results of ``filename`` (default ``get_filename()``); False, with a warning,
    when it cannot be read or was tuned with other library versions."""
    return _tunable.read_file(filename if filename is not None else get_filename(), _library())

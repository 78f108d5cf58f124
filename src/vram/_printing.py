"""How tensors print: torch's format (torch/_tensor_str.py), written for vram.

``tensor([1.5000, 2.0000], device='sim:0', dtype=vram.bfloat16)``: four decimals, or whole
numbers with a point when every value is whole, or scientific notation when the values span
more than 1000x or leave [1e-4, 1e8); one width for every element; more than 1000 elements
are summarized to the first and last three along each dimension; lines wrap at 80 columns.
The device is shown unless it is the cpu, the dtype unless it is the default float dtype,
int64 or bool. Only the elements shown are copied to the host (a large device tensor is
summarized on the device, by views).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["tensor_repr", "PRINT_OPTIONS"]

PRINT_OPTIONS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80}


class _Formatter:
    """One width and notation for every element of a (real) array."""

    def __init__(self, values: np.ndarray) -> None:
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        precision = PRINT_OPTIONS["precision"]
        flat = values.reshape(-1)
        if not self.floating:
            for value in flat.tolist():
                self.max_width = max(self.max_width, len(str(value)))
            return
        finite = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if finite.size == 0:
            return
        magnitude = np.abs(finite)
        low, high = float(magnitude.min()), float(magnitude.max())
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        self.sci_mode = high / low > 1000.0 or high > 1.0e8 or low < 1.0e-4
        for value in finite.tolist():
            if self.sci_mode:
                text = f"{value:.{precision}e}"
            elif self.int_mode:
                text = f"{value:.0f}" + "."
            else:
                text = f"{value:.{precision}f}"
            self.max_width = max(self.max_width, len(text))

    def width(self) -> int:
        return self.max_width

    def format(self, value: Any) -> str:
        precision = PRINT_OPTIONS["precision"]
        if self.floating:
            value = float(value)
            if self.sci_mode:
                text = f"{value:{self.max_width}.{precision}e}"
            elif self.int_mode:
                text = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    text += "."
            else:
                text = f"{value:.{precision}f}"
        else:
            text = str(value)
        return (self.max_width - len(text)) * " " + text


def _element(value: Any, real: _Formatter, imag: _Formatter | None) -> str:
    if imag is None:
        return real.format(value)
    real_text = real.format(value.real)
    imag_text = (imag.format(value.imag) + "j").lstrip()
    if imag_text[0] in "+-":
        return real_text + imag_text
    return real_text + "+" + imag_text


def _vector(
    values: np.ndarray, cut: bool, indent: int, real: _Formatter, imag: _Formatter | None
) -> str:
    length = real.width() + 2 + (imag.width() + 1 if imag is not None else 0)
    per_line = max(1, math.floor((PRINT_OPTIONS["linewidth"] - indent) / length))
    items = [_element(v, real, imag) for v in values.tolist()]
    if cut:
        edge = PRINT_OPTIONS["edgeitems"]
        items = items[:edge] + [" ..."] + items[edge:]
    lines = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(
    values: np.ndarray,
    cuts: tuple[bool, ...],
    indent: int,
    real: _Formatter,
    imag: _Formatter | None,
) -> str:
    if values.ndim == 0:
        return _element(values.item(), real, imag)
    if values.ndim == 1:
        return _vector(values, cuts[0], indent, real, imag)
    parts = [_nested(values[i], cuts[1:], indent + 1, real, imag) for i in range(len(values))]
    if cuts[0]:
        edge = PRINT_OPTIONS["edgeitems"]
        parts = parts[:edge] + ["..."] + parts[edge:]
    return "[" + ("," + "\n" * (values.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _summarized(t: Any, summarize: bool) -> tuple[np.ndarray, tuple[bool, ...]]:
    """The elements to show, on the host, and which dimensions were cut in the middle."""
    edge = PRINT_OPTIONS["edgeitems"]
    cuts = tuple(summarize and n > 2 * edge for n in t.shape)
    if not any(cuts):
        return _host(t), cuts

    def gather(view: Any, dim: int) -> np.ndarray:
        if dim == view.ndim:
            return _host(view)
        index = (slice(None),) * dim
        if cuts[dim]:
            n = view.shape[dim]
            pieces = [view[(*index, slice(0, edge))], view[(*index, slice(n - edge, n))]]
        else:
            pieces = [view]
        return np.concatenate([gather(p, dim + 1) for p in pieces], axis=dim)

    return gather(t, 0), cuts


def _host(t: Any) -> np.ndarray:
    values = t.numpy()
    if values.dtype.kind == "V" or values.dtype.name == "bfloat16":
        values = values.astype(np.float32)
    elif values.dtype == np.float16:
        values = values.astype(np.float32)
    return values


def tensor_repr(t: Any, default_float: Any, defaults: tuple[Any, ...]) -> str:
    """``repr(t)`` as torch prints a tensor (``defaults``: the dtypes left unsaid)."""
    prefix = "tensor("
    indent = len(prefix)
    suffixes = []
    if t.device.type != "cpu":
        suffixes.append(f"device='{t.device}'")
    if t.numel() == 0:
        if t.ndim != 1:
            suffixes.append(f"size={tuple(t.shape)}")
        if t.dtype is not default_float:
            suffixes.append(f"dtype={t.dtype!r}")
        body = "[]"
    else:
        if t.dtype not in defaults:
            suffixes.append(f"dtype={t.dtype!r}")
        summarize = t.numel() > PRINT_OPTIONS["threshold"]
        values, cuts = _summarized(t, summarize)
        if values.dtype.kind == "c":
            real, imag = _Formatter(values.real.copy()), _Formatter(values.imag.copy())
        else:
            real, imag = _Formatter(values), None
        body = _nested(values, cuts, indent, real, imag)
    return _with_suffixes(prefix + body, suffixes, indent)


def _with_suffixes(text: str, suffixes: list[str], indent: int) -> str:
    parts = [text]
    last = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last + len(suffix) + 2 > PRINT_OPTIONS["linewidth"]:
            parts.append(",\n" + " " * indent + suffix)
            last = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last += len(suffix) + 2
    parts.append(")")
    return "".join(parts)

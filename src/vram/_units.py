"""Sizes in bytes, read and written the one way vram's messages and tools use.

- ``parse_bytes("16GiB")``: a size a user typed (an option, an environment variable).
- ``format_size(n)``: PyTorch's wording in its messages ("512 bytes", "1.50 KiB"), used where
  vram repeats a PyTorch message (the OutOfMemoryError).
- ``format_bytes(n)``: vram's compact form for reports and tables ("512 B", "1.50 GiB").
- ``summary_size(n, reference)``: memory_summary()'s column, PyTorch's ``_format_size``.
"""

from __future__ import annotations

import re

__all__ = ["parse_bytes", "format_size", "format_bytes", "summary_size", "KiB", "MiB", "GiB"]

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
_SCALES = {"": 1, "K": KiB, "M": MiB, "G": GiB, "T": 1 << 40}
_PATTERN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:([KMGT])I?)?B?\s*", re.IGNORECASE)


def parse_bytes(text: str, argument: str) -> int:
    """'16GiB', '512MB', '1.5g', '1073741824' -> bytes (K, M, G and T are powers of 1024);
    ValueError naming ``argument`` for anything else, or a size that is not positive."""
    if not isinstance(text, str):
        raise TypeError(f"{argument}: expected a size such as '16GiB', got {text!r}")
    match = _PATTERN.fullmatch(text)
    if not match:
        raise ValueError(f"{argument}: cannot read {text!r} as a size in bytes (e.g. 16GiB)")
    number, unit = match.groups()
    size = int(float(number) * _SCALES[(unit or "").upper()])
    if size <= 0:
        raise ValueError(f"{argument}: size must be positive, got {text!r}")
    return size


def format_size(size: int) -> str:
    """PyTorch's format_size: '512 bytes', '1.50 KiB', '20.00 MiB', '2.00 GiB'."""
    if size <= KiB:
        return f"{size} bytes"
    if size <= MiB:
        return f"{size / KiB:.2f} KiB"
    if size <= GiB:
        return f"{size / MiB:.2f} MiB"
    return f"{size / GiB:.2f} GiB"


def format_bytes(size: float | None, digits: int = 2) -> str:
    """'512 B', '1.50 KiB', '20.00 MiB', '2.00 GiB' (``digits`` after the point; negative
    sizes keep their sign); '-' for None (a value that is not known)."""
    if size is None:
        return "-"
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(size) >= scale:
            return f"{size / scale:.{digits}f} {unit}"
    return f"{size:.0f} B"


def summary_size(size: int, reference: int) -> str:
    """memory_summary()'s size column (PyTorch's _format_size): whole units of the largest
    prefix that keeps ``reference`` at 768 of it or more, six wide."""
    prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
    prefix = prefixes[0]
    for new_prefix in prefixes[1:]:
        if reference < 768 * 1024:
            break
        prefix = new_prefix
        size //= 1024
        reference /= 1024
    return f"{size:6d} {prefix}"

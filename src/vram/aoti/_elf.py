"""The dynamic symbols of an ELF shared library, read from the file (``nm -D`` without nm).

vram.aoti reads a model's undefined symbols before it loads the model, to name every
``aoti_torch_*`` shim the model needs and the shim library lacks (a failed dlopen names only
the first), and to know whether the model calls the CUDA runtime. Only 64-bit
little-endian files are read (x86-64, aarch64); anything else, or a file whose tables point
outside it, is a ValueError naming the file. Nothing in the file is executed.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Symbols", "dynamic_symbols"]

_SHT_DYNSYM = 11
_SHN_UNDEF = 0
_BINDINGS = (1, 2)  # STB_GLOBAL, STB_WEAK
_HIDDEN = (1, 2)  # STV_INTERNAL, STV_HIDDEN: defined but not exported
_SECTION = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr
_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym


@dataclass(frozen=True)
class Symbols:
    """A library's exported (defined, visible) and undefined dynamic symbols, by name."""

    defined: frozenset[str]
    undefined: frozenset[str]


def dynamic_symbols(path: str | os.PathLike) -> Symbols:
    """The dynamic symbols of the ELF shared library at ``path``."""
    path = Path(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header = f.read(64)
        if len(header) < 64 or header[:4] != b"\x7fELF":
            raise ValueError(f"{path}: not an ELF file")
        if header[4] != 2 or header[5] != 1:
            raise ValueError(f"{path}: only 64-bit little-endian ELF files are read")
        (shoff,) = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
        if shentsize != _SECTION.size or shoff + shnum * shentsize > size:
            raise ValueError(f"{path}: its section headers lie outside the file")
        f.seek(shoff)
        table = f.read(shnum * shentsize)
        sections = [_SECTION.unpack_from(table, i * shentsize) for i in range(shnum)]
        dynsym = next((s for s in sections if s[1] == _SHT_DYNSYM), None)
        if dynsym is None:
            return Symbols(frozenset(), frozenset())
        link = dynsym[6]
        if link >= shnum:
            raise ValueError(f"{path}: its symbol table names no string table")
        symbols = _read(f, size, dynsym[4], dynsym[5], path)
        strings = _read(f, size, sections[link][4], sections[link][5], path)
    defined, undefined = set(), set()
    for offset in range(0, len(symbols) - _SYMBOL.size + 1, _SYMBOL.size):
        name_at, info, other, shndx, _, _ = _SYMBOL.unpack_from(symbols, offset)
        end = strings.find(b"\0", name_at)
        name = strings[name_at : end if end >= 0 else len(strings)].decode("utf-8", "replace")
        if not name or info >> 4 not in _BINDINGS:
            continue
        if shndx == _SHN_UNDEF:
            undefined.add(name)
        elif other & 3 not in _HIDDEN:
            defined.add(name)
    return Symbols(frozenset(defined), frozenset(undefined))


def _read(f, size: int, offset: int, length: int, path: Path) -> bytes:
    if offset + length > size:
        raise ValueError(f"{path}: a symbol table lies outside the file")
    f.seek(offset)
    return f.read(length)

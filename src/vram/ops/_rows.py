"""How the fused row kernels (softmax, log_softmax, layer_norm) lay threads over rows.

A row of ``n`` elements is held in registers when it fits: each of the row's ``threads``
keeps ``items`` vectors of ``vec`` elements, so the row is read once and written once.
- A row of up to 32 threads' worth (``_WARP_ELEMENTS`` per thread) is one warp or part of
  one: no shared memory, no barrier; small blocks (``_SMALL_BLOCK`` threads) of several rows.
  A 16-bit row past 32 threads of ``_SHORT_VECTORS`` vectors takes two warps instead, so that
  a thread keeps half as many values and more rows are in flight.
- A longer row takes several warps (up to 1024 threads, ``_BLOCK_ELEMENTS`` each, fewer per
  thread so that a 1024-thread block fits the register file).
- A row longer than that goes ``online``: a block per row reads it twice (one pass for the
  row's statistics, one to write). layer_norm takes that route for wide 16-bit rows too
  (``norm_layout``).
``vec`` is 16 bytes of the wider of the input and output types when the row length allows
it; a call whose pointers are not 16-byte aligned takes the same layout with ``vec`` 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._reduce import next_pow2

__all__ = ["RowLayout", "row_layout", "norm_layout", "register_layout", "online_layout"]

_WARP_ELEMENTS = 32  # float elements a thread of a warp-wide row keeps in registers
_BLOCK_ELEMENTS = 16  # and of a block-wide row
_SMALL_BLOCK = 128  # threads of a block of warp-wide rows (the kernels' THREADS)
_SHORT_VECTORS = 2  # vectors a thread keeps of a 16-bit row of up to 64 threads' worth
_BLOCK = 1024  # threads of a block of block-wide rows
_ONLINE_THREADS = 1024  # threads of an online row's block
# layer_norm's wide 16-bit rows: online, a block of 128 threads a row, 2 vectors a thread
# loaded at once, registers bounded for 8 blocks a multiprocessor
_NORM_ONLINE = (128, 2, 8)
_NORM_WIDE = 256  # threads a row in registers would take from which such rows go online


@dataclass(frozen=True, slots=True)
class RowLayout:
    """The launch of a row kernel: ``online`` or in registers (``items`` vectors of ``vec``
    elements a thread; online: vectors a thread loads at once), ``threads`` per row, ``rows``
    per block, ``bound`` the kernel's __launch_bounds__ (with ``blocks`` a multiprocessor),
    ``grid`` blocks."""

    online: bool
    vec: int
    items: int
    threads: int
    rows: int
    bound: int
    grid: int
    blocks: int = 1


def row_layout(n: int, rows: int, itemsize: int, compute_size: int, sms: int) -> RowLayout:
    """The layout for ``rows`` rows of ``n`` elements (``itemsize``: the wider of the input
    and output element sizes; ``compute_size``: of the compute type)."""
    vec = _vec(n, itemsize)
    per_warp = _WARP_ELEMENTS * 4 // compute_size  # half as many doubles
    per_block = _BLOCK_ELEMENTS * 4 // compute_size
    vectors = max(1, -(-n // vec))
    if n <= 32 * per_warp:
        threads = min(32, next_pow2(vectors))
        if itemsize == 2 and vectors > 32 * _SHORT_VECTORS:  # two warps share the row
            threads = 64
        return _in_registers(n, rows, vec, sms, threads, _SMALL_BLOCK // threads, _SMALL_BLOCK)
    if n <= _BLOCK * per_block:
        threads = min(_BLOCK, max(64, next_pow2(-(-vectors // max(1, per_block // vec)))))
        return _in_registers(n, rows, vec, sms, threads, max(1, 256 // threads), _BLOCK)
    blocks = max(1, min(rows, sms * 2))
    return RowLayout(True, vec, 1, _ONLINE_THREADS, 1, _ONLINE_THREADS, blocks)


def norm_layout(n: int, rows: int, itemsize: int, compute_size: int, sms: int) -> RowLayout:
    """layer_norm's layout: ``row_layout``'s, except that a 16-bit row that would take
    ``_NORM_WIDE`` or more threads in registers goes online in small blocks when there are
    rows enough to give every multiprocessor a full set of them.

    Q: why read such a row twice? A: held in registers, a row of 256+ threads leaves room for
    only a few rows a multiprocessor, and each row's time is mostly its two block-wide
    reductions and the latency between its phases, not its bytes; online, eight 128-thread
    rows share a multiprocessor and the second read comes from the cache. A 32-bit row moves
    twice the bytes for the same per-row cost and stays in registers.
    """
    layout = row_layout(n, rows, itemsize, compute_size, sms)
    threads, unroll, blocks = _NORM_ONLINE
    wide = not layout.online and layout.threads >= _NORM_WIDE
    if itemsize == 2 and wide and rows >= sms * blocks:
        return online_layout(n, rows, itemsize, sms, threads, unroll, blocks)
    return layout


def register_layout(
    n: int, rows: int, itemsize: int, sms: int, threads: int, rows_per_block: int, bound: int
) -> RowLayout:
    """A layout of rows in registers with ``threads`` (a power of two) per row, at most
    ``rows_per_block`` rows a block, ``bound`` the kernel's __launch_bounds__ (at least
    ``threads * rows_per_block``): what ``row_layout`` picks among, for benchmarks that
    compare the choices."""
    if threads & (threads - 1) or threads * rows_per_block > bound or bound > _BLOCK:
        raise ValueError(f"no row layout of {threads} threads x {rows_per_block} rows in {bound}")
    return _in_registers(n, rows, _vec(n, itemsize), sms, threads, rows_per_block, bound)


def online_layout(
    n: int, rows: int, itemsize: int, sms: int, threads: int, unroll: int, blocks: int
) -> RowLayout:
    """An online layout (a block of ``threads`` a row, read twice) loading ``unroll`` vectors
    a thread at once, with registers bounded so that ``blocks`` blocks fit a multiprocessor
    (layer_norm's online kernel takes all three; softmax's only the threads)."""
    if threads & (threads - 1) or not 32 <= threads <= _ONLINE_THREADS or threads * blocks > 2048:
        raise ValueError(f"no online layout of {threads} threads x {blocks} blocks")
    grid = max(1, min(rows, sms * blocks * 2))
    return RowLayout(True, _vec(n, itemsize), unroll, threads, 1, threads, grid, blocks)


def _vec(n: int, itemsize: int) -> int:
    return 16 // itemsize if n % (16 // itemsize) == 0 else 1


def _in_registers(
    n: int, rows: int, vec: int, sms: int, threads: int, per_block_rows: int, bound: int
) -> RowLayout:
    vectors = max(1, -(-n // vec))
    items = next_pow2(-(-vectors // threads))
    # rows per block: fewer for few rows, so that more blocks share them
    by = max(1, min(per_block_rows, next_pow2(-(-rows // sms))))
    by = max(by, 32 // threads)
    resident = sms * max(1, 2048 // (threads * by))
    grid = max(1, min(-(-rows // by), resident * 8))
    return RowLayout(False, vec, items, threads, by, bound, grid)

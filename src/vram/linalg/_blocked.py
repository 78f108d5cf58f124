"""vram's own LU for batches of real matrices (kernels/lu.cu): the blocked factorization and
the solve from its factors, one driver for every device (``_libs`` runs each step).

The factorization is LAPACK's right-looking getrf run for the whole batch at once, column
panel by column panel [k0, k0 + jb):

1. ``lu_panel``: rows k0..m of the panel factored with partial pivoting, one block per
   matrix holding the panel in registers (pivots and info as getrf's);
2. ``lu_swap_trsm``: the panel's row interchanges applied to every other column, and the
   block right of it solved with the panel's unit lower triangle (U12);
3. ``lu_update``: A22 -= L21 U12, one strided-batched GEMM (cuBLAS's, in full precision).

For one matrix or a few (``AHEAD_FROM``), ``factor`` looks ahead: the next panel's columns
are brought up to date first and the panel factored on a stream of its own, beside the rest
of the step's update (see ``factor``); ``_lu`` replays such a call as a CUDA graph.

A block holds ``threads * rows`` rows of ``width`` columns (``panel_config``, by the rows
left), so the panels of one matrix get wider as it shrinks. The tall panels of small
batches go, on sm_90 and later, to a cluster of ``CLUSTER`` blocks (``CLUSTER_FROM``, to
``CLUSTER_MAX_ROWS`` rows); on other devices to one block that holds a few of their
columns at a time (``TALL_FROM``, ``TALL_PANELS``, to ``TALL_MAX_ROWS`` rows). A matrix
one panel covers (n <= m and n <= width) is factored by one launch, which reads the input
where it lies (any strides) instead of a copy of it. No workspace, no pointer arrays: the
factors, pivots and info are all the memory a call needs.

The solve is one launch: a block per (matrix, up to ``solve_tile`` right-hand sides), a
thread per row (a thread per right-hand side for small matrices with many of them:
``solve_columns``), P, L and U applied in turn (for A^T: U^T, L^T and P^T), reading B
where it lies and writing X column-major; B may be X.

Real dtypes only: complex ones go to cuBLAS and cuSOLVER (whose complex pivot rules differ:
see ``vram.linalg``), as do matrices of more than ``MAX_ROWS`` rows.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any, NamedTuple

__all__ = [
    "PanelConfig",
    "WARP_PANEL",
    "updates_first",
    "PANELS",
    "MAX_ROWS",
    "CLUSTER",
    "CLUSTER_PANELS",
    "CLUSTER_MAX_ROWS",
    "CLUSTER_FROM",
    "TALL_PANELS",
    "TALL_MAX_ROWS",
    "TALL_FROM",
    "SWAP_WIDTH",
    "SWAP_TILES",
    "swap_tile",
    "SOLVE_MAX_N",
    "SOLVE_RHS",
    "solve_tile",
    "solve_columns",
    "SOLVE_COLUMNS_MAX_N",
    "SOLVE_COLUMNS_THREADS",
    "clusters_on",
    "CLUSTERS_VARIABLE",
    "supports",
    "panel_config",
    "one_panel",
    "covers",
    "factor",
    "Ahead",
    "AHEAD_FROM",
    "look_ahead",
    "tables",
    "Spans",
    "outside",
    "solve_supports",
    "solve",
]


class PanelConfig(NamedTuple):
    """A panel kernel's shape: ``threads`` per block, ``rows`` per thread, ``width`` columns,
    and ``blocks`` per matrix (more than one: a thread block cluster, sm_90); ``sub`` > 0:
    the tall panel (one block, ``sub`` columns in registers at a time, the rest in memory)."""

    threads: int
    rows: int
    width: int
    blocks: int = 1
    sub: int = 0


WARP_PANEL = PanelConfig(32, 1, 32)  # the one-warp kernel's shape (``panel_warp``)


def updates_first(config: PanelConfig) -> bool:
    """Whether the panel kernel of ``config`` can apply the previous step to its own columns
    itself, interchanges, U12 and update (``panel``'s ``update_first``; not ``panel_warp``
    nor ``panel_tall``)."""
    return config.sub == 0 and config != WARP_PANEL


# (most rows, the config): registers per thread are rows * width elements, kept under what
# a block of that many threads may use (255 registers at 256 threads, 128 at 512), so that
# nothing spills (ptxas -v on sm_90: 58 to 188 registers, no spill; a double panel of 512
# threads x 2 rows x 16 columns spilled, so doubles take 256 x 4 x 16 there).
PANELS: dict[str, tuple[tuple[int, PanelConfig], ...]] = {
    "float32": (
        (32, PanelConfig(32, 1, 32)),
        (64, PanelConfig(64, 1, 32)),
        (128, PanelConfig(128, 1, 32)),
        (256, PanelConfig(256, 1, 32)),
        (512, PanelConfig(256, 2, 32)),
        (1024, PanelConfig(512, 2, 32)),
        (2048, PanelConfig(512, 4, 16)),
    ),
    "float64": (
        (32, PanelConfig(32, 1, 32)),
        (64, PanelConfig(64, 1, 32)),
        (128, PanelConfig(128, 1, 32)),
        (256, PanelConfig(256, 1, 32)),
        (512, PanelConfig(256, 2, 32)),
        (1024, PanelConfig(256, 4, 16)),
    ),
}
MAX_ROWS = {dtype: table[-1][0] for dtype, table in PANELS.items()}

# Panels held by a cluster of CLUSTER blocks (one matrix's panel over 8 multiprocessors, on
# devices of compute capability 9.0 and later): once a column each block sends its best
# row to every block's shared memory (one bulk copy each, counted on the receiver's
# mbarrier) and picks the best of what it got. For batches of a few tall matrices, where a
# block per matrix would leave most of the GPU idle and take thousands of rows alone.
# ``CLUSTER_FROM`` (largest batch, fewest rows), from an H100 (fp32 lu_factor, ms; a
# cluster a matrix / tall panels / a block a matrix / 8 side streams; "-": cannot run):
#
#   1024 x 1    2.43 / 2.54 / 3.98 /   -        2048 x 1    5.18 /  5.42 /  -   /   -
#   1024 x 4    2.61 / 2.71 / 3.95 /  4.12      2048 x 2    5.64 /  5.82 /  -   /  6.94
#   1024 x 16   3.55 / 3.66 / 4.85 / 12.1       2048 x 4    6.76 /  7.05 /  -   /  8.97
#   1024 x 32   5.29 / 6.47 / 6.40 / 22.8       2048 x 16  15.2  / 14.7  /  -   / 25.4
#                                               2048 x 32  26.4  / 39.9  /  -   / 47.7
#
# (float64: 2048 x 4 9.11 / 9.71 / - / 11.8, 2048 x 16 21.0 / 20.5 / - / 33.0, 2048 x 32
# 36.9 / - / - / 61.7.) At 4096 rows the side streams win for batches (4096 x 4: 28.0
# against 26.2). One 4096 x 4096 matrix took 14.3 ms over cluster panels (their kernels
# 8.1 ms; 10.6 when the blocks met at a cluster barrier and read each other's offers),
# then 13.0 (kernels 7.7 ms) with warp reductions for the pivot searches and swap_trsm's
# narrow tiles, as long as cuSOLVER's getrf (see _dispatch's Note [LU crossovers]); 9.8
# with the look-ahead (``AHEAD_FROM``).
# ptxas -v on sm_90: no spills (the double panel of 1024 threads spilled 36 bytes before
# the warp reductions).
CLUSTER = 8
CLUSTER_PANELS: dict[str, tuple[tuple[int, PanelConfig], ...]] = {
    "float32": (
        (1024, PanelConfig(128, 1, 32, CLUSTER)),
        (2048, PanelConfig(256, 1, 32, CLUSTER)),
        (4096, PanelConfig(512, 1, 32, CLUSTER)),
        (8192, PanelConfig(1024, 1, 32, CLUSTER)),
    ),
    "float64": (
        (1024, PanelConfig(128, 1, 32, CLUSTER)),
        (2048, PanelConfig(256, 1, 32, CLUSTER)),
        (4096, PanelConfig(512, 1, 32, CLUSTER)),
        (8192, PanelConfig(1024, 1, 16, CLUSTER)),
    ),
}
CLUSTER_MAX_ROWS = {dtype: table[-1][0] for dtype, table in CLUSTER_PANELS.items()}

# Tall panels (``panel_tall``): one block holds ``sub`` columns of a 32-column panel in
# registers at a time (a recursive getrf inside the panel, the rest of it in L2), at one
# barrier a column. For batches of up to 16 matrices of 257 to 2048 rows (``TALL_FROM``)
# on devices without clusters; on sm_90 cluster panels take them (see above: the table
# below is from before their exchange of offers by bulk copies). From an H100, fp32
# lu_factor, ms (cluster panels / tall panels of the configurations below):
#
#   1024 x 2    3.41 / 3.02      2048 x 2    6.62 /  6.05      2048 x 1   6.03 / 4.82
#   1024 x 4    3.22 / 2.70      2048 x 4    7.64 /  6.83      4096 x 1  16.5  / 15.4
#                                2048 x 16  15.8  / 14.6
#
# (one matrix: 2048 and 4096 with 1024 threads x 2 / 4 rows x 8 / 4 columns; 1024, 2048 and
# 4096 with 256 / 512 threads x 4 rows x 8 columns took 2.77, 5.05 and 20.0 ms, and 256
# threads x 4 rows x 4 columns 2.59 ms at 1024: more threads for taller panels). At 4096
# rows cluster panels take over; and cuSOLVER's getrf is faster for one matrix anyway
# (2.28 ms at 1024, 5.19 at 2048, 12.8 at 4096). ptxas -v on sm_90: 64 to 107 registers,
# 8 bytes of spill for floats at 1024 threads, none elsewhere.
TALL_PANELS: dict[str, tuple[tuple[int, PanelConfig], ...]] = {
    "float32": (
        (1024, PanelConfig(256, 4, 32, 1, 4)),
        (2048, PanelConfig(1024, 2, 32, 1, 8)),
    ),
    "float64": (
        (1024, PanelConfig(256, 4, 32, 1, 4)),
        (2048, PanelConfig(512, 4, 32, 1, 4)),
    ),
}
TALL_MAX_ROWS = {dtype: table[-1][0] for dtype, table in TALL_PANELS.items()}
# (largest batch, fewest rows a tall panel takes)
TALL_FROM: tuple[tuple[int, int], ...] = ((16, 257),)
# (largest batch, fewest rows a cluster panel takes)
CLUSTER_FROM: tuple[tuple[int, int], ...] = ((32, 257),)
# (largest batch, fewest of min(m, n)) that ``factor`` looks ahead for, on devices with
# clusters (where it was measured). From an H100 (bench/results/linalg_ahead-*.json), fp32
# lu_factor_ex, ms, looking ahead (replayed as a graph, see ``_lu``) / in turn: one matrix
# 512 0.769 / 0.990, 1024 1.65 / 1.75, 2048 3.72 / 4.04, 4096 9.29 / 12.26; batches 1024 x
# 4 1.79 / 1.94, 2048 x 2 3.85 / 4.53, 2048 x 4 4.83 / 6.04, 4096 x 2 13.5 / 18.5 (float64
# 4096: 12.58 / 17.22). Queued from Python each call, without the graph, looking ahead was
# slower than in turn in a probe (4096: 10.9 against 12.3, but 2048: 7.18 against 4.18):
# twice the launches, and the host's time a step exceeded the GPU's. The panel kernel
# applying the previous step's update of its own columns (``updates_first``), instead of a
# cuBLAS GEMM of 32 columns before it: 4096 x 1 10.45 -> 9.72 ms in that probe; its
# interchanges and U12 too, instead of a swap_trsm launch of 32 columns before it (9.5 to
# 13 us each on the panels' stream, its critical path): graph 9.75 -> 9.32 ms at 4096, the
# same within 2% at 512 to 2048 (the panel kernel's own start took 3 to 7 us longer).
AHEAD_FROM: tuple[tuple[int, int], ...] = ((4, 512),)
SWAP_WIDTH = 32  # swap_trsm's widest panel
# swap_trsm's blocks, (warps, columns a block), a warp taking one column at a time: wide
# tiles where the launch fills the GPU (a block composes the panel's interchanges once, so
# fewer blocks do less of that), narrow ones where wide tiles would leave multiprocessors
# idle (a few matrices). From an H100, fp32 lu_factor, ms of swap_trsm a call, 4 x 32 /
# 8 x 8 (4 x 16 / 8 x 16 fell between them):
#
#   4096 x 1    2.03 / 1.29       1024 x 16   0.648 / 0.828     256 x 256   0.243 / 0.594
#   2048 x 1    0.886 / 0.417     2048 x 16   3.50 / 3.61       128 x 1024  0.171 / 0.459
#
# (4096 x 1: lu_factor 13.5 ms with wide tiles, 12.7 with narrow ones.)
SWAP_TILES = ((4, 32), (8, 8))  # wide, narrow


def swap_tile(batch: int, columns: int, multiprocessors: int) -> tuple[int, int]:
    """(warps, columns) of swap_trsm's blocks for ``columns`` columns outside the panel in
    each of ``batch`` matrices: narrow where wide tiles would make fewer blocks than two a
    multiprocessor."""
    wide, narrow = SWAP_TILES
    return narrow if batch * -(-columns // wide[1]) < 2 * multiprocessors else wide


SOLVE_MAX_N = 1024  # the solve's one thread per row
# right-hand sides per block: 1 when there is one, else 8 (kernels/lu.cu: a block may have
# 1024 threads, so 64 registers; sixteen doubles would spill). A wide tile of 32 (floats)
# or 16 (doubles) for matrices of at most 128 rows lost to 8 once getrs took its rows in
# chunks: 0.769 against 0.633 ms at 1024 128 x 128 with 64 right-hand sides on an H100.
SOLVE_RHS = 8
# Matrices of at most 32 rows with more right-hand sides than SOLVE_RHS: a thread per
# right-hand side (``getrs_columns``, up to 64 a block), the factors in shared memory.
# At 4096 x 32 x 32 with 64 right-hand sides on an H100, 0.065 ms against getrs's 0.35
# (a thread a row, in chunks), which shares the solved rows through shared memory.
SOLVE_COLUMNS_MAX_N = 32
SOLVE_COLUMNS_THREADS = 64  # kernels/lu.cu: its block, and its staging of X
# Matrices of at most 32 rows with at most SOLVE_RHS right-hand sides: a warp per matrix,
# a row a lane, the solved values shared by shuffles (``getrs_warp``): at 4096 x 32 x 32,
# 12.1 us against getrs's 20.3 with one right-hand side (floats; 26 against 32 for
# doubles); with 8, within 4% of it for floats (doubles: 91 against 84).
SOLVE_WARP_MAX_N = 32


def solve_columns(n: int, nrhs: int) -> bool:
    """Whether the solve runs a thread per right-hand side (``getrs_columns``)."""
    return n <= SOLVE_COLUMNS_MAX_N and nrhs > SOLVE_RHS


def solve_warp(n: int, nrhs: int) -> bool:
    """Whether the solve runs a warp per matrix (``getrs_warp``)."""
    return n <= SOLVE_WARP_MAX_N and nrhs <= SOLVE_RHS


def solve_tile(n: int, nrhs: int) -> int:
    """Right-hand sides per block of the solve kernel (for ``getrs_columns``: its threads)."""
    if nrhs == 1:
        return 1
    if solve_columns(n, nrhs):
        return min(SOLVE_COLUMNS_THREADS, -(-nrhs // 32) * 32)
    return SOLVE_RHS


CLUSTERS_VARIABLE = "VRAM_LINALG_CLUSTERS"


@cache
def clusters_on(device: Any) -> bool:
    """Whether ``device`` runs thread block clusters (compute capability 9.0 and later; the
    simulated GPU is an H100), unless VRAM_LINALG_CLUSTERS=0 says not to. Asked once a
    device and process: every LU call asks.

    VRAM_LINALG_CLUSTERS=0 (or false, no, off) gives the panels that clusters would take to
    one block each, as on a device before sm_90: for tools that cannot follow a cluster's
    bulk copies, so that they check everything else (compute-sanitizer's memcheck:
    bench/sanitize/cluster_probe.py shows what it reports and why).
    """
    if device.type not in ("cuda", "sim"):
        return False
    raw = os.environ.get(CLUSTERS_VARIABLE, "1")
    text = raw.strip().lower()
    if text not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(
            f"{CLUSTERS_VARIABLE}: expected 1 or 0 (true/false, yes/no, on/off), got {raw!r}"
        )
    if text in ("0", "false", "no", "off"):
        return False
    return device.driver.properties(device.index).major >= 9


def _takes(bounds: tuple[tuple[int, int], ...], rows: int, batch: int) -> bool:
    """Whether a (largest batch, fewest rows) table takes panels of ``rows`` rows."""
    for most_batch, fewest_rows in bounds:
        if batch <= most_batch:
            return rows >= fewest_rows
    return False


def _table(
    dtype: str, rows: int, batch: int, clusters: bool
) -> tuple[tuple[tuple[int, PanelConfig], ...], int]:
    """(the panel table, the most rows it takes) for panels of ``rows`` rows of ``batch``
    matrices: cluster panels, where the device has them and ``CLUSTER_FROM`` takes them;
    else tall panels, where ``TALL_FROM`` takes them (to ``TALL_MAX_ROWS``); else a block
    a matrix."""
    if clusters and _takes(CLUSTER_FROM, rows, batch):
        return CLUSTER_PANELS[dtype], CLUSTER_MAX_ROWS[dtype]
    if _takes(TALL_FROM, rows, batch) and rows <= TALL_MAX_ROWS[dtype]:
        return TALL_PANELS[dtype], TALL_MAX_ROWS[dtype]
    return PANELS[dtype], MAX_ROWS[dtype]


def _config(dtype: str, rows: int, batch: int, clusters: bool) -> PanelConfig | None:
    """The panel kernel for a panel of ``rows`` rows of ``batch`` matrices, None where no
    panel takes it (a complex dtype, no rows, or more than the table's most)."""
    if dtype not in PANELS or rows <= 0:
        return None
    table, most_rows = _table(dtype, rows, batch, clusters)
    if rows > most_rows:
        return None
    for most, config in table:
        if rows <= most:
            return config
    return None  # (unreachable: the table's last row takes most_rows)


def supports(dtype: str, m: int, n: int, batch: int = 2, clusters: bool = False) -> bool:
    """Whether ``batch`` m x n matrices of ``dtype`` can be factored here; ``clusters``:
    whether the device runs cluster panels."""
    return n > 0 and _config(dtype, m, batch, clusters) is not None


def first_panel(dtype: str, m: int, batch: int, clusters: bool) -> PanelConfig | None:
    """The first panel's config for ``batch`` m x n matrices (n > 0), None where the blocked
    LU does not take them (``supports``): one lookup for both questions."""
    return _config(dtype, m, batch, clusters)


def panel_config(dtype: str, rows: int, batch: int = 2, clusters: bool = False) -> PanelConfig:
    """The panel kernel for a panel of ``rows`` rows of ``batch`` matrices (at most
    MAX_ROWS[dtype], or more where tall or cluster panels take it)."""
    config = _config(dtype, rows, batch, clusters)
    if config is None:
        most_rows = _table(dtype, rows, batch, clusters)[1] if dtype in PANELS else 0
        raise ValueError(f"rows: at most {most_rows} for {dtype}, got {rows}")
    return config


def one_panel(dtype: str, m: int, n: int, batch: int = 2, clusters: bool = False) -> bool:
    """Whether one panel covers every column (n <= m, and n <= its width): one launch,
    reading the input in place."""
    config = _config(dtype, m, batch, clusters)
    return n > 0 and config is not None and covers(config, m, n)


def covers(config: PanelConfig, m: int, n: int) -> bool:
    """Whether the first panel, of ``config``, covers an m x n matrix in one launch."""
    return config.sub == 0 and n <= min(m, config.width)


Source = tuple[int, int, int, int]  # (pointer, batch stride, row stride, column stride)
Spans = tuple[tuple[int, int], tuple[int, int]]  # swap_trsm's columns: two (start, stop)


def outside(k0: int, jb: int, n: int) -> Spans:
    """Every column outside the panel [k0, k0 + jb) of n: what swap_trsm takes by default."""
    return (0, k0), (k0 + jb, n)


class Ahead(NamedTuple):
    """What the look-ahead needs (see ``factor``): ``side``, the stream where each step's
    update of the columns beyond the next panel runs, and three events, reused every step."""

    side: Any
    start: Any
    panel: Any
    done: Any


def tables(dtype: str) -> tuple:
    """Every table that chooses the steps ``factor`` queues for ``dtype``: the key of a
    replayed factorization names them (tests change them)."""
    return (PANELS.get(dtype), CLUSTER_PANELS.get(dtype), TALL_PANELS.get(dtype), CLUSTER_FROM,
            TALL_FROM, AHEAD_FROM, SWAP_TILES)  # fmt: skip


def look_ahead(m: int, n: int, batch: int, clusters: bool) -> bool:
    """Whether ``factor`` should run each next panel while the rest of a step's update runs,
    for ``batch`` m x n matrices it supports."""
    return clusters and _takes(AHEAD_FROM, min(m, n), batch)


def factor(
    libs: Any,
    stream: Any,
    dtype: str,
    m: int,
    n: int,
    batch: int,
    lu: int,
    pivots: int,
    info: int,
    pivot: bool,
    source: Source | None = None,
    clusters: bool = False,
    ahead: Ahead | None = None,
    first: PanelConfig | None = None,
    failed: int = 0,
) -> None:
    """P A = L U for ``batch`` m x n column-major matrices at ``lu`` (m * n apart): pivots
    (min(m, n) int32 per matrix) and info (one int32 each) as getrf's. ``source``: read the
    input there instead (one panel only: see ``one_panel``). ``clusters``: whether the
    device runs cluster panels. ``first``: the first panel's config, where the caller has it
    (``panel_config(dtype, m, batch, clusters)``). ``failed``: an int32 in page-locked host
    memory that the panels set to 1 for a zero pivot (``_checks.ZeroPivotFlag``), or 0.
    Queued on ``stream``.

    ``ahead``: look ahead (LAPACK's getrf does not; MAGMA's does). Step k's interchanges,
    U12 and update go first to the next panel's columns, on ``stream``, which then factors
    that panel (one launch where the panel kernel applies them itself: ``updates_first``)
    while ``ahead.side`` applies step k to every other column: the panels, which
    leave most of the GPU idle, run beside the large GEMMs instead of between them. The
    panels' stream should be of a higher priority than the side's. ``ahead.side`` waits for
    ``stream`` at the start, and ``stream`` for each of its steps."""
    k = min(m, n)
    stride = m * n
    own = (lu, stride, 1, m)
    config = first or panel_config(dtype, m, batch, clusters)
    if covers(config, m, n):  # one launch factors it all (nothing is left of the panel)
        libs.lu_panel(stream, dtype, config, lu, stride, m, batch, source or own, 0, k, pivots,
                      k, info, pivot, 0, failed)  # fmt: skip
        return
    if source is not None:
        raise ValueError("source: only a matrix that one panel covers is read in place")
    contexts: dict[int, Any] = {}

    def panel(s: Any, config: PanelConfig, k0: int, jb: int, read: Source, update: int = 0) -> None:
        libs.lu_panel(s, dtype, config, lu, stride, m, batch, read, k0, jb, pivots, k, info,
                      pivot, update, failed)  # fmt: skip

    def config_at(k0: int) -> PanelConfig:
        return panel_config(dtype, m - k0, batch, clusters)

    def swap(s: Any, k0: int, jb: int, spans: Spans) -> None:
        libs.lu_swap_trsm(s, dtype, lu, stride, m, n, batch, k0, jb, pivots, k, pivot, spans)

    def update(s: Any, k0: int, jb: int, columns: tuple[int, int]) -> None:
        key = id(s)
        if key not in contexts:
            contexts[key] = libs.lu_update_context(s, dtype)
        libs.lu_update(contexts[key], dtype, lu, stride, m, n, batch, k0, jb, columns)

    def whole_step(s: Any, k0: int, jb: int) -> None:
        """Step k0's interchanges, U12 and update on every column outside the panel."""
        right = n - k0 - jb
        if right > 0 or (pivot and k0 > 0):
            swap(s, k0, jb, outside(k0, jb, n))
        if right > 0 and m > k0 + jb:
            update(s, k0, jb, (k0 + jb, n))

    k0 = 0
    jb = min(config.width, k)
    if ahead is None or jb >= k:
        while True:
            panel(stream, config, k0, jb, own)
            whole_step(stream, k0, jb)
            k0 += jb
            if k0 >= k:
                return
            config = config_at(k0)
            jb = min(config.width, k - k0)
    side = ahead.side
    ahead.start.record(stream)
    side.wait_event(ahead.start)
    panel(stream, config, k0, jb, own)
    while k0 + jb < k:
        after = k0 + jb  # the next panel: [after, after + jb2)
        config = config_at(after)
        jb2 = min(config.width, k - after)
        ahead.panel.record(stream)
        side.wait_event(ahead.panel)
        left = (0, k0 if pivot else 0)
        rest = (after + jb2, n)
        if left[1] > left[0] or rest[1] > rest[0]:
            swap(side, k0, jb, (left, rest))
        if rest[1] > rest[0]:
            update(side, k0, jb, rest)
        ahead.done.record(side)
        if updates_first(config):  # the panel kernel applies step k0 to its columns itself
            panel(stream, config, after, jb2, own, jb)
        else:
            swap(stream, k0, jb, ((after, after + jb2), (n, n)))
            update(stream, k0, jb, (after, after + jb2))
            panel(stream, config, after, jb2, own)
        stream.wait_event(ahead.done)  # (the next panel's columns: step k0's update is done)
        k0, jb = after, jb2
    whole_step(stream, k0, jb)


def solve_supports(dtype: str, n: int) -> bool:
    """Whether n x n systems of ``dtype`` can be solved here."""
    return dtype in PANELS and 0 < n <= SOLVE_MAX_N


def solve(
    libs: Any,
    stream: Any,
    dtype: str,
    transposed: bool,
    n: int,
    nrhs: int,
    batch: int,
    lu: int,
    pivots: int,
    source: Source,
    x: int,
) -> None:
    """X with A X = B (A^T X = B when ``transposed``) from getrf's factors at ``lu`` (n x n
    column-major, n * n apart) and ``pivots`` (n per matrix): B read at ``source``, X
    written column-major at ``x`` (n * nrhs apart; it may be B). Queued on ``stream``."""
    libs.lu_solve(stream, dtype, transposed, n, nrhs, batch, lu, pivots, source, x)

"""memory_stats: PyTorch's counters, with the hot path reduced to one list append.

Every stat is kept for the aggregate ("all") and for the pool kind of the block
("small_pool" / "large_pool"), with four fields: current, peak, allocated (sum of
increases) and freed (sum of decreases).

Q: Why a log? A: malloc and free change seven stats in two pool kinds each; updating
current, peak and the running sums for all of them took a third of the cached path's time.
So malloc and free append one tuple to ``log`` instead (a free one, an alloc freed at once
one for both), and ``flush()`` applies a batch with NumPy: cumulative sums give every
intermediate value, so peaks stay exact. Readers
flush first; the log is flushed by itself every ``_FLUSH_AT`` entries. Segment stats change
only on the slow path and are applied at once.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

__all__ = [
    "Stats",
    "STAT_NAMES",
    "POOL_NAMES",
    "OP_ALLOC",
    "OP_FREE_REQUESTED",
    "OP_FREE_COMPLETED",
    "OP_FREE",
    "OP_PAIR",
    "ALLOCATION",
    "SEGMENT",
    "ACTIVE",
    "INACTIVE_SPLIT",
    "ALLOCATED_BYTES",
    "RESERVED_BYTES",
    "ACTIVE_BYTES",
    "INACTIVE_SPLIT_BYTES",
    "REQUESTED_BYTES",
    "SMALL",
    "LARGE",
]

STAT_NAMES = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)
POOL_NAMES = ("all", "small_pool", "large_pool")
_FIELDS = ("current", "peak", "allocated", "freed")

(
    ALLOCATION,
    SEGMENT,
    ACTIVE,
    INACTIVE_SPLIT,
    ALLOCATED_BYTES,
    RESERVED_BYTES,
    ACTIVE_BYTES,
    INACTIVE_SPLIT_BYTES,
    REQUESTED_BYTES,
) = (i * 12 for i in range(9))  # offset of a stat's "all" entry; + 4 * pool kind; + field
SMALL = 4  # offset of the small-pool copy from the "all" copy
LARGE = 8  # offset of the large-pool copy

# Log entries: (op code, size, requested, inactive_split delta, inactive_split_bytes delta),
# where the op code is ``op << 4 | kind`` (kind: SMALL or LARGE).
OP_ALLOC = 0  # a block of ``size`` handed out for ``requested`` bytes
OP_FREE_REQUESTED = 1  # the user freed it: allocation and allocated_bytes go down
OP_FREE_COMPLETED = 2  # it is back in its pool: active, active_bytes, requested go down
OP_FREE = 3  # both at once (a free with no record_stream events to wait for)
OP_PAIR = 4  # an alloc and, right after it, the free of the same block (Note [Claims])
_FLUSH_AT = 16384  # log entries kept before they are applied
# the stats the log feeds; per op, which of (1, size, requested) each changes by, and the sign
_LOGGED = (ALLOCATION, ALLOCATED_BYTES, ACTIVE, ACTIVE_BYTES, REQUESTED_BYTES)
_COEF = np.array(
    [
        [(0, 1), (1, 1), (0, 1), (1, 1), (2, 1)],  # alloc
        [(0, -1), (1, -1), (0, 0), (1, 0), (2, 0)],  # free requested
        [(0, 0), (1, 0), (0, -1), (1, -1), (2, -1)],  # free completed
        [(0, -1), (1, -1), (0, -1), (1, -1), (2, -1)],  # free
    ]
)


class Stats:
    """The counters of one device allocator. ``v`` is indexed by stat + pool + field."""

    __slots__ = (
        "v",
        "log",
        "oversize_allocations",
        "oversize_segments",
        "num_alloc_retries",
        "num_ooms",
        "num_sync_all_streams",
        "num_device_alloc",
        "num_device_free",
    )

    def __init__(self) -> None:
        self.v = [0] * (len(STAT_NAMES) * 12)
        self.log: list[tuple[int, int, int, int, int]] = []
        self.oversize_allocations = [0, 0, 0, 0]  # current, peak, allocated, freed
        self.oversize_segments = [0, 0, 0, 0]
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

    # ---- the slow path: applied at once -----------------------------------------------
    def increase(self, stat: int, pool: int, amount: int) -> None:
        """Add ``amount`` to a stat for the aggregate and for ``pool`` (SMALL or LARGE)."""
        v = self.v
        for i in (stat, stat + pool):
            cur = v[i] + amount
            v[i] = cur
            v[i + 2] += amount
            if cur > v[i + 1]:
                v[i + 1] = cur

    def decrease(self, stat: int, pool: int, amount: int) -> None:
        v = self.v
        v[stat] -= amount
        v[stat + 3] += amount
        v[stat + pool] -= amount
        v[stat + pool + 3] += amount

    @staticmethod
    def bump(counter: list[int], delta: int) -> None:
        """Change a single (current, peak, allocated, freed) counter."""
        if delta > 0:
            counter[0] += delta
            counter[2] += delta
            counter[1] = max(counter[1], counter[0])
        else:
            counter[0] += delta
            counter[3] -= delta

    # ---- the log ----------------------------------------------------------------------
    def flush(self) -> None:
        """Apply every logged malloc/free to the counters (exact peaks included)."""
        log = self.log
        if not log:
            return
        self.log = []
        n = len(log)
        entries = np.fromiter(chain.from_iterable(log), np.int64, 5 * n).reshape(n, 5)
        ops, kinds = entries[:, 0] >> 4, entries[:, 0] & 15
        pairs = ops == OP_PAIR
        if pairs.any():  # a pair is an alloc row, then a free row undoing its split deltas
            reps = np.where(pairs, 2, 1)
            entries, ops, kinds = (np.repeat(a, reps, axis=0) for a in (entries, ops, kinds))
            second = np.zeros(len(ops), bool)
            second[(np.cumsum(reps) - 1)[pairs]] = True
            ops[second] = OP_FREE
            ops[ops == OP_PAIR] = OP_ALLOC
            entries[second, 3:] *= -1
        values = np.stack([np.ones(len(ops), np.int64), entries[:, 1], entries[:, 2]], 1)
        columns = [self._deltas(values, ops, k) for k in range(len(_LOGGED))]
        columns += [entries[:, 3], entries[:, 4]]
        stats = (*_LOGGED, INACTIVE_SPLIT, INACTIVE_SPLIT_BYTES)
        small = kinds == SMALL
        for stat, deltas in zip(stats, columns, strict=True):
            self._apply(stat, deltas)
            self._apply(stat + SMALL, np.where(small, deltas, 0))
            self._apply(stat + LARGE, np.where(small, 0, deltas))

    @staticmethod
    def _deltas(values: np.ndarray, ops: np.ndarray, k: int) -> np.ndarray:
        which = _COEF[ops, k, 0]
        sign = _COEF[ops, k, 1]
        return values[np.arange(len(ops)), which] * sign

    def _apply(self, i: int, deltas: np.ndarray) -> None:
        v = self.v
        running = np.cumsum(deltas) + v[i]
        v[i + 1] = max(v[i + 1], int(running.max()))
        v[i] = int(running[-1])
        v[i + 2] += int(deltas[deltas > 0].sum())
        v[i + 3] -= int(deltas[deltas < 0].sum())

    # ---- readers ----------------------------------------------------------------------
    def current(self, stat: int, pool: int = 0) -> int:
        self.flush()
        return self.v[stat + pool]

    def peak(self, stat: int, pool: int = 0) -> int:
        self.flush()
        return self.v[stat + pool + 1]

    def reset_peak(self) -> None:
        self.flush()
        v = self.v
        for i in range(0, len(v), 4):
            v[i + 1] = v[i]
        for counter in (self.oversize_allocations, self.oversize_segments):
            counter[1] = counter[0]

    def reset_accumulated(self) -> None:
        self.flush()
        v = self.v
        for i in range(0, len(v), 4):
            v[i + 2] = v[i + 3] = 0
        for counter in (self.oversize_allocations, self.oversize_segments):
            counter[2] = counter[3] = 0
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

    def as_dict(self, max_split_size: int) -> dict[str, int]:
        """PyTorch's flat memory_stats dict, keys sorted as torch.cuda.memory_stats sorts them."""
        self.flush()
        out: dict[str, int] = {}
        v = self.v
        for s, name in enumerate(STAT_NAMES):
            for p, pool in enumerate(POOL_NAMES):
                base = s * 12 + p * 4
                for f, field in enumerate(_FIELDS):
                    out[f"{name}.{pool}.{field}"] = v[base + f]
        for name in ("oversize_allocations", "oversize_segments"):
            counter = getattr(self, name)
            for f, field in enumerate(_FIELDS):
                out[f"{name}.{field}"] = counter[f]
        out["num_alloc_retries"] = self.num_alloc_retries
        out["num_ooms"] = self.num_ooms
        out["num_sync_all_streams"] = self.num_sync_all_streams
        out["num_device_alloc"] = self.num_device_alloc
        out["num_device_free"] = self.num_device_free
        out["max_split_size"] = max_split_size
        return dict(sorted(out.items()))

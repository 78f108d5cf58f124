"""memory_stats: PyTorch's counters, kept in one flat list so the hot path stays cheap.

Every stat is kept three times, for the aggregate ("all") and for the pool kind of the
block ("small_pool" / "large_pool"), and each has four fields: current, peak, allocated
(sum of increases) and freed (sum of decreases).
"""

from __future__ import annotations

__all__ = [
    "Stats",
    "STAT_NAMES",
    "POOL_NAMES",
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


class Stats:
    """The counters of one device allocator. ``v`` is indexed by stat + pool + field."""

    __slots__ = (
        "v",
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
        self.oversize_allocations = [0, 0, 0, 0]  # current, peak, allocated, freed
        self.oversize_segments = [0, 0, 0, 0]
        self.num_alloc_retries = 0
        self.num_ooms = 0
        self.num_sync_all_streams = 0
        self.num_device_alloc = 0
        self.num_device_free = 0

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

    def change(self, stat: int, pool: int, delta: int) -> None:
        """Increase for a positive ``delta``, decrease for a negative one."""
        if delta > 0:
            self.increase(stat, pool, delta)
        elif delta < 0:
            self.decrease(stat, pool, -delta)

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

    def current(self, stat: int, pool: int = 0) -> int:
        return self.v[stat + pool]

    def peak(self, stat: int, pool: int = 0) -> int:
        return self.v[stat + pool + 1]

    def reset_peak(self) -> None:
        v = self.v
        for i in range(0, len(v), 4):
            v[i + 1] = v[i]
        for counter in (self.oversize_allocations, self.oversize_segments):
            counter[1] = counter[0]

    def reset_accumulated(self) -> None:
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

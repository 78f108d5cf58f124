"""DeviceStats (Note [Usage counters]: sums, rooms, derived decreases) against PyTorch's way
of counting: one Stat per stat and pool group, each updated on every call. Random valid
call sequences; after every call the two memory_stats dicts are equal, peaks included."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

import vram
from vram.memory._stats import FIELDS, POOL_NAMES, STAT_NAMES, DeviceStats, Stat


class Reference:
    """PyTorch's accounting: every stat of the call's groups (all, and its pool kind) is
    increased or decreased at once; inactive_split by the call's net change."""

    def __init__(self) -> None:
        self.stats = {(name, group): Stat() for name in STAT_NAMES for group in range(3)}

    def _each(self, small: bool, name: str, delta: int) -> None:
        for group in (0, 1 if small else 2):
            self.stats[name, group].update(delta)

    def alloc(self, small, size, requested, split, split_bytes) -> None:
        changes = {
            "allocation": 1,
            "allocated_bytes": size,
            "active": 1,
            "active_bytes": size,
            "requested_bytes": requested,
            "inactive_split": split,
            "inactive_split_bytes": split_bytes,
        }
        for name, delta in changes.items():
            self._each(small, name, delta)

    def free(self, small, size, requested, split, split_bytes) -> None:
        self.free_requested(small, size, requested)
        self.free_completed(small, size, requested, split, split_bytes)

    def free_requested(self, small, size, requested) -> None:
        self._each(small, "allocation", -1)
        self._each(small, "allocated_bytes", -size)

    def free_completed(self, small, size, requested, split, split_bytes) -> None:
        changes = {
            "active": -1,
            "active_bytes": -size,
            "requested_bytes": -requested,
            "inactive_split": split,
            "inactive_split_bytes": split_bytes,
        }
        for name, delta in changes.items():
            self._each(small, name, delta)

    def segment_added(self, small, nbytes, new_segment) -> None:
        self._each(small, "segment", int(new_segment))
        self._each(small, "reserved_bytes", nbytes)

    def segment_removed(self, small, nbytes, whole_segment) -> None:
        self._each(small, "segment", -int(whole_segment))
        self._each(small, "reserved_bytes", -nbytes)

    def reset_peak(self) -> None:
        for stat in self.stats.values():
            stat.reset_peak()

    def reset_accumulated(self) -> None:
        for stat in self.stats.values():
            stat.reset_accumulated()

    def as_dict(self) -> dict[str, int]:
        return {
            f"{name}.{POOL_NAMES[group]}.{field}": getattr(stat, field)
            for (name, group), stat in self.stats.items()
            for field in ("current", "peak", "allocated", "freed")
        }


ACTIONS = ("alloc", "alloc", "alloc", "free", "free", "pending", "complete", "segment",
           "reuse", "reset_peak", "reset_accumulated")  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_device_stats_count_as_pytorch_counts(data):
    mine, reference = DeviceStats(), Reference()
    live: list[tuple[bool, int, int]] = []  # (small, size, requested)
    pending: list[tuple[bool, int, int]] = []
    split = {True: [0, 0], False: [0, 0]}  # inactive_split (blocks, bytes) per kind, now
    segments = {True: [], False: []}

    def split_change(small: bool) -> tuple[int, int]:
        blocks, nbytes = split[small]
        db = data.draw(st.integers(-min(blocks, 2), 2))
        dbytes = data.draw(st.integers(-nbytes, 1 << 22)) if db or nbytes else 0
        if blocks + db == 0:
            dbytes = -nbytes  # no split blocks left: no bytes either
        split[small] = [blocks + db, nbytes + dbytes]
        return db, dbytes

    for _ in range(data.draw(st.integers(1, 80))):
        action = data.draw(st.sampled_from(ACTIONS))
        small = data.draw(st.booleans())
        if action == "alloc":
            size = data.draw(st.integers(1, 1 << 12)) * 512
            requested = data.draw(st.integers(1, size))
            call = ("alloc", small, size, requested, *split_change(small))
            live.append((small, size, requested))
        elif action in ("free", "pending") and live:
            small, size, requested = live.pop(data.draw(st.integers(0, len(live) - 1)))
            if action == "free":
                call = ("free", small, size, requested, *split_change(small))
            else:
                call = ("free_requested", small, size, requested)
                pending.append((small, size, requested))
        elif action == "reuse" and live:  # the allocator's take-back: a free, then the alloc
            i = data.draw(st.integers(0, len(live) - 1))
            small, size, freed = live[i]
            requested = data.draw(st.sampled_from([freed, data.draw(st.integers(1, size))]))
            live[i] = (small, size, requested)
            blocks, nbytes = split[small]
            # split off a free rest (merged back at the free), with it a whole segment or
            # not; or alone (handed out whole), in a split segment or a whole one
            kind = data.draw(st.sampled_from(["rest, whole", "rest", "alone", "alone, whole"]))
            if kind == "rest, whole" and blocks > 0 and nbytes > 0:
                rest, whole = data.draw(st.integers(1, nbytes)), True
                steps = (-1, -rest, 1, rest)
            elif kind == "rest":
                rest, whole = data.draw(st.integers(1, 1 << 22)) * 512, False
                steps = (0, size, 0, -size)
            elif kind == "alone":
                rest, whole = 0, False
                steps = (1, size, -1, -size)
            else:
                rest, whole = 0, True
                steps = (0, 0, 0, 0)
            mine.reuse(small, size, freed, requested, rest, whole)
            reference.free(small, size, freed, *steps[:2])
            reference.alloc(small, size, requested, *steps[2:])
            got = mine.as_dict(-1)
            assert {key: got[key] for key in reference.as_dict()} == reference.as_dict(), action
            continue
        elif action == "complete" and pending:
            small, size, requested = pending.pop(0)
            call = ("free_completed", small, size, requested, *split_change(small))
        elif action == "segment":
            if segments[small] and data.draw(st.booleans()):
                call = ("segment_removed", small, segments[small].pop(), True)
            else:
                segments[small].append(data.draw(st.integers(1, 64)) << 21)
                call = ("segment_added", small, segments[small][-1], True)
        elif action.startswith("reset"):
            call = (action,)
        else:
            continue
        getattr(mine, call[0])(*call[1:])
        getattr(reference, call[0])(*call[1:])
        got = mine.as_dict(-1)
        assert {key: got[key] for key in reference.as_dict()} == reference.as_dict(), call


def test_memory_stats_keys_are_sorted_with_the_workspaces_last(sim0):
    vram.memory.get_workspace(1 << 20, library="cublas", device=sim0)
    stats = vram.memory.memory_stats(sim0)
    assert list(stats) == sorted(stats)
    assert list(stats)[-4:] == [f"workspace_bytes.all.{f}" for f in sorted(FIELDS)]
    assert stats["workspace_bytes.all.current"] >= 1 << 20

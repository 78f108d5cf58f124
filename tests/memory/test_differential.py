"""The allocator against a reference that stays simple, on every bundled trace, under every
allocator configuration the README lists (Note [The cached path] in _caching).

The reference makes PyTorch's decisions written plainly over the pool's primitives: best fit
by sorting a stream's free blocks (no index), the split and merge rules by hand, the
ladder (cross-stream reuse, garbage collection, grow, release an oversize block, release
everything) step by step, over device mallocs (or the real ``Expandable`` source for
expandable segments), and every memory_stats counter as PyTorch keeps it: one Stat per
stat and pool group, updated by each call, with inactive_split recounted from the blocks of
the segment the call changed.

Each trace's requests (allocs, and frees of what it allocated) run through the allocator
(``DeviceCachingAllocator``, ``UncachedAllocator``), freed at once or dropped as a finalizer
drops them (so that the take-back of Note [Taking a dropped block back] runs), and through
the reference, each on a fresh simulated GPU of the same capacity and injected faults (the
same device mallocs give the same addresses). Every request must get the same pointer, or
fail in both; memory_stats must be equal at checkpoints and at the end. The
cudaMallocAsync backend is checked against the driver's pool itself.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import vram
from vram.driver._sim import SimDriver
from vram.memory._async import AsyncAllocator
from vram.memory._caching import DeviceCachingAllocator
from vram.memory._config import SIZE_MAX, parse_config
from vram.memory._pool import FREE, SMALL_BUFFER, UNMAPPED, Block, Pool, Segment
from vram.memory._sources import Expandable
from vram.memory._stats import FIELDS, POOL_NAMES, STAT_NAMES, Stat
from vram.memory._uncached import UncachedAllocator
from vram.tools import load_snapshot

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
WORKLOADS = ("gpt_train", "cnn_train", "bert_infer", "two_stream")
# the bundled traces whose requests differ (the others repeat one of these: checked below)
REPLAYED = (*(f"{w}-default" for w in WORKLOADS), "gpt_train-expandable", "gpt_train-max_split",
            "gpt_train-rp2")  # fmt: skip
CHECK_EVERY = 250  # requests between memory_stats comparisons

# name -> (settings, no caching, capacity as a multiple of the trace's peak, above_bytes)
CONFIGS = {
    "default": ("", False, 4.0, None),
    "expandable segments": ("expandable_segments:True", False, 4.0, None),
    "no caching": ("", True, 4.0, None),
    "cross-stream reuse": ("cross_stream_reuse:True", False, 4.0, None),
    "gc threshold, max_split": (
        "garbage_collection_threshold:0.6,max_split_size_mb:40,per_process_memory_fraction:0.9",
        False,
        1.3,
        None,
    ),
    "max_split, rounding": ("max_split_size_mb:40,max_non_split_rounding_mb:30", False, 4.0, None),
    "roundup_power2_divisions": ("roundup_power2_divisions:[1:2,64:8,>:4]", False, 4.0, None),
    "injected malloc faults": ("max_split_size_mb:40", False, 1.1, 48 * MiB),
}

Request = tuple[bool, int, int, int]  # (alloc?, recorded address, size, stream id)


# ================================================================================ traces
_sequences: dict[str, list[Request]] = {}


def requests(path: Path) -> list[Request]:
    """A trace's allocs (size, stream numbered by first use) and frees of what it allocated."""
    key = str(path)
    if key not in _sequences:
        snapshot = load_snapshot(path)
        entries = next((t for t in snapshot.get("device_traces") or [] if t), [])
        out: list[Request] = []
        live: set[int] = set()
        streams: dict[int, int] = {}
        for entry in entries:
            action, addr = entry["action"], entry["addr"]
            if action == "alloc":
                stream = streams.setdefault(entry.get("stream", 0), len(streams))
                out.append((True, addr, max(entry["size"], 1), stream))
                live.add(addr)
            elif action == "free_requested" and addr in live:
                out.append((False, addr, 0, 0))
                live.discard(addr)
        _sequences[key] = out
    return _sequences[key]


def peak(ops: list[Request]) -> int:
    live: dict[int, int] = {}
    now = top = 0
    for is_alloc, addr, size, _ in ops:
        if is_alloc:
            live[addr] = size
            now += size
            top = max(top, now)
        else:
            now -= live.pop(addr)
    return top


# ============================================================================= reference
class Reference:
    """PyTorch's caching allocator, plainly (see the module docstring)."""

    def __init__(self, text: str, no_caching: bool, driver: SimDriver) -> None:
        config = parse_config(text)
        self.config = config
        self.no_caching = no_caching
        self.driver = driver
        fraction = config.per_process_memory_fraction
        self.limit = int(fraction * driver.mem_get_info(0)[1]) if fraction < 1.0 else None
        self.gc = self.limit is not None and config.garbage_collection_threshold > 0
        self.pools = {True: Pool(is_small=True), False: Pool(is_small=False)}
        self.mallocs = _Mallocs()  # the source of its device allocations
        self.live: dict[int, Block] = {}
        self.oversize: set[int] = set()  # id() of live blocks counted as oversize
        self.reserved = 0
        self.stats = {(n, g): Stat() for n in STAT_NAMES for g in POOL_NAMES}
        self.oversize_allocations, self.oversize_segments = Stat(), Stat()
        self.counts = dict.fromkeys(
            ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
             "num_device_free"), 0)  # fmt: skip
        self.vmm: Expandable | None = None
        if config.expandable_segments and not no_caching:
            self.vmm = Expandable(driver, 0, self._reserved)

    # ---- requests -----------------------------------------------------------------------
    def malloc(self, size: int, stream: int) -> Block | None:
        rounded = self.round(size)
        pool = self.pools[rounded <= MiB]
        block = self.find(pool, rounded, stream)
        if block is None:
            block = self.grow(pool, rounded, stream)
        if block is None:
            self.counts["num_ooms"] += 1
            return None
        before = self.split_free(block)
        pool.remove(block)
        rest = block.size - rounded
        if pool.is_small or self.config.expandable_segments:
            cut = rest >= 512
        else:
            cut = rest > MiB and rounded < self.config.max_split_size
        if cut:
            pool.split(block, rounded)
        block.state, block.requested_size = 0, size
        self.live[block.ptr] = block
        self.count(pool, block.size, size, +1)
        self.change_split(pool, block, before)
        if block.size >= self.config.max_split_size:
            self.oversize.add(id(block))
            self.oversize_allocations.update(1)
        return block

    def free(self, block: Block) -> None:
        pool = block.segment.pool
        del self.live[block.ptr]
        if id(block) in self.oversize:
            self.oversize.discard(id(block))
            self.oversize_allocations.update(-1)
        self.count(pool, block.size, block.requested_size, -1)
        before = self.split_free(block)
        pool.merge(block)
        block.state = FREE
        pool.insert(block)
        self.change_split(pool, block, before)
        if self.no_caching:
            self.give_back(block)

    # ---- the steps ----------------------------------------------------------------------
    def round(self, size: int) -> int:
        if size <= 512:
            return 512
        table = self.config.roundup_power2_divisions
        divisions = table[min(max(size.bit_length() - 21, 0), len(table) - 1)]
        if divisions > 1 and size > 512 * divisions and size & (size - 1):
            floor = 1 << (size.bit_length() - 1)
            step = floor >> (divisions.bit_length() - 1)
            if step == 0:
                return floor << 1
            return -(-size // step) * step
        return -(-size // 512) * 512

    def find(self, pool: Pool, size: int, stream: int) -> Block | None:
        if self.gc:
            pool.get_free_blocks_call_count += 1  # (PyTorch's clock of free blocks' ages)
        candidates = pool.blocks_from(stream, size)  # (size, address) order: best fit first
        if not candidates:
            return None
        block = candidates[0]
        if block.segment.source.expandable:  # the one that can grow least (PyTorch's rule)

            def growable(b: Block) -> int:
                after = b.next
                return b.size + (after.size if after and after.state == UNMAPPED else 0)

            i = 0
            while (
                candidates[i].segment.source.expandable
                and i + 1 < len(candidates)
                and growable(candidates[i + 1]) < growable(candidates[i])
            ):
                i += 1
            block = candidates[i]
        max_split = self.config.max_split_size
        if size < max_split and block.size >= max_split:
            return None
        if size >= max_split and block.size >= size + self.config.max_non_split_rounding_size:
            return None
        return block

    def grow(self, pool: Pool, size: int, stream: int) -> Block | None:
        if self.config.cross_stream_reuse:
            block = self.from_other_stream(pool, size, stream)
            if block is not None:
                return block
        if self.gc:
            self.collect()
        if self.no_caching:
            alloc_size = size
        elif size <= MiB:
            alloc_size = SMALL_BUFFER
        elif size < 10 * MiB:
            alloc_size = 20 * MiB
        else:
            alloc_size = -(-size // (2 * MiB)) * 2 * MiB
        block = self.new_memory(pool, size, alloc_size, stream)
        if block is None and self.release_oversize(pool, size, stream):
            block = self.new_memory(pool, size, alloc_size, stream)
        if block is None:
            self.counts["num_sync_all_streams"] += 1
            for p in (self.pools[False], self.pools[True]):
                for b in p.free_blocks():
                    if b.segment.source.expandable or (b.prev is None and b.next is None):
                        self.give_back(b)
            self.counts["num_alloc_retries"] += 1
            block = self.new_memory(pool, size, alloc_size, stream)
        return block

    def from_other_stream(self, pool: Pool, size: int, stream: int) -> Block | None:
        best = None
        for other in pool.streams():
            if other == stream:
                continue
            for b in pool.blocks_from(other, size):
                if not b.segment.source.expandable and b.prev is None and b.next is None:
                    if not (size < self.config.max_split_size <= b.size) and (
                        best is None or (b.size, b.ptr) < (best.size, best.ptr)
                    ):
                        best = b
                    break
        if best is not None:
            pool.remove(best)
            best.segment.stream = stream
            pool.insert(best)
        return best

    def collect(self) -> None:
        threshold = int(self.config.garbage_collection_threshold * self.limit)
        if self.reserved <= threshold:
            return
        target, pool = self.reserved - threshold, self.pools[False]
        calls = pool.get_free_blocks_call_count

        def whole(b: Block) -> bool:
            return not b.segment.source.expandable and b.prev is None and b.next is None

        ages = [calls - b.gc_age for b in pool.free_blocks() if whole(b)]
        total, count, reclaimed, freed_one = sum(ages), len(ages), 0, True
        while reclaimed < target and freed_one and count > 0:
            mean = total / count
            freed_one = False
            for b in pool.free_blocks():
                age = calls - b.gc_age
                if whole(b) and age >= mean:
                    freed_one = True
                    reclaimed += b.size
                    total -= age
                    count -= 1
                    self.give_back(b)

    def release_oversize(self, pool: Pool, size: int, stream: int) -> bool:
        max_split = self.config.max_split_size
        if max_split == SIZE_MAX:
            return False
        want = max(size, max_split)
        blocks = pool.blocks_from(stream)

        def whole(b: Block) -> bool:
            return not b.segment.source.expandable and b.prev is None and b.next is None

        for b in blocks:
            if b.size >= want and whole(b):
                self.give_back(b)
                return True
        released = 0
        for b in reversed([b for b in blocks if b.size < want]):
            if released >= want or b.size < max_split:
                break
            if whole(b):
                released += b.size
                self.give_back(b)
        return released >= want

    def new_memory(self, pool: Pool, size: int, alloc_size: int, stream: int) -> Block | None:
        if self.vmm is not None:
            page = SMALL_BUFFER if pool.is_small else self.config.expandable_page_size
            budget = None if self.limit is None else self.limit - self.reserved
            return self.vmm.grow(pool, stream, size, page, budget)
        if self.limit is not None and self.reserved + alloc_size > self.limit:
            return None
        try:
            ptr = self.driver.malloc(0, alloc_size)
        except vram.CudaError as error:
            assert error.is_out_of_memory
            return None
        segment = Segment(ptr, alloc_size, stream, pool, self.mallocs)
        block = Block(ptr, alloc_size, segment, FREE)
        pool.insert(block)
        self._reserved(pool, segment, segment.ptr, alloc_size, "segment_alloc")
        return block

    def give_back(self, block: Block) -> None:
        pool, segment = block.segment.pool, block.segment
        pool.remove(block)
        if segment.source.expandable:
            self.vmm.release(block)
            return
        self.driver.free(0, segment.ptr)
        self._reserved(pool, segment, segment.ptr, -segment.size, "segment_free")

    # ---- the counters -------------------------------------------------------------------
    def _reserved(self, pool: Pool, segment: Segment, start: int, nbytes: int, action: str):
        whole = action in ("segment_alloc", "segment_free")
        self.reserved += nbytes
        self.counts["num_device_alloc" if nbytes > 0 else "num_device_free"] += 1
        if whole:
            self.each(pool, "segment", 1 if nbytes > 0 else -1)
        self.each(pool, "reserved_bytes", nbytes)
        if whole and nbytes > 0 and nbytes >= self.config.max_split_size:
            segment.oversize = True
            self.oversize_segments.update(1)
        elif whole and nbytes < 0 and segment.oversize:
            self.oversize_segments.update(-1)

    def each(self, pool: Pool, name: str, delta: int) -> None:
        for group in ("all", "small_pool" if pool.is_small else "large_pool"):
            self.stats[name, group].update(delta)

    def count(self, pool: Pool, size: int, requested: int, sign: int) -> None:
        for name, delta in (("allocation", 1), ("allocated_bytes", size), ("active", 1),
                            ("active_bytes", size), ("requested_bytes", requested)):  # fmt: skip
            self.each(pool, name, sign * delta)

    @staticmethod
    def split_free(block: Block) -> tuple[int, int]:
        """(count, bytes) of the FREE blocks of ``block``'s segment when it is split (not
        expandable): what inactive_split counts there."""
        if block.segment.source.expandable:
            return 0, 0
        head = block
        while head.prev is not None:
            head = head.prev
        if head.next is None:
            return 0, 0
        count = nbytes = 0
        while head is not None:
            if head.state == FREE:
                count, nbytes = count + 1, nbytes + head.size
            head = head.next
        return count, nbytes

    def change_split(self, pool: Pool, block: Block, before: tuple[int, int]) -> None:
        after = self.split_free(block)
        if after[0] != before[0] or after[1] != before[1]:  # one net change a call
            self.each(pool, "inactive_split", after[0] - before[0])
            self.each(pool, "inactive_split_bytes", after[1] - before[1])

    def memory_stats(self) -> dict[str, int]:
        out = {
            f"{n}.{g}.{f}": getattr(self.stats[n, g], f)
            for n in STAT_NAMES
            for g in POOL_NAMES
            for f in FIELDS
        }
        for name in ("oversize_allocations", "oversize_segments"):
            out.update({f"{name}.{f}": getattr(getattr(self, name), f) for f in FIELDS})
        out.update(self.counts)
        split = self.config.max_split_size
        out["max_split_size"] = -1 if split == SIZE_MAX else split
        return out


class _Mallocs:
    """The source of the reference's device allocations (not expandable)."""

    expandable = False


# ============================================================================ the runs
def fresh_sim(capacity: int, above: int | None) -> SimDriver:
    """A simulated GPU of its own (its addresses start where every fresh one's do)."""
    driver = SimDriver(device_count=1, capacity=capacity)
    driver.faults.above_bytes = above  # (what vram.sim.inject_malloc_failure sets)
    return driver


def streams_of(driver: SimDriver) -> list[int]:
    return [driver.default_stream(0)] + [driver.stream_create(0) for _ in range(3)]


def run_allocator(kind: type, text: str, ops: list[Request], capacity: int, above, dropped):
    """The allocator's pointers (None for an OOM) and its stats at each checkpoint."""
    driver = fresh_sim(capacity, above)
    allocator = kind(vram.Device("sim", 0), parse_config(text), driver=driver)
    handles = streams_of(driver)
    answers, stats, live = [], [], {}
    for i, (is_alloc, addr, size, stream) in enumerate(ops):
        if is_alloc:
            try:
                ptr = allocator.malloc(size, handles[stream])
            except vram.OutOfMemoryError:
                answers.append(None)
                continue
            live[addr] = ptr
            answers.append(ptr)
        elif addr in live:
            ptr = live.pop(addr)
            allocator.free_later(ptr) if dropped else allocator.free(ptr)
        if i % CHECK_EVERY == CHECK_EVERY - 1:
            stats.append(allocator.memory_stats())
    stats.append(allocator.memory_stats())
    return answers, stats


def run_reference(text: str, no_caching: bool, ops: list[Request], capacity: int, above):
    driver = fresh_sim(capacity, above)
    reference = Reference(text, no_caching, driver)
    handles = streams_of(driver)
    answers, stats, live = [], [], {}
    for i, (is_alloc, addr, size, stream) in enumerate(ops):
        if is_alloc:
            block = reference.malloc(size, handles[stream])
            if block is None:
                answers.append(None)
                continue
            live[addr] = block
            answers.append(block.ptr)
        elif addr in live:
            reference.free(live.pop(addr))
        if i % CHECK_EVERY == CHECK_EVERY - 1:
            stats.append(reference.memory_stats())
    stats.append(reference.memory_stats())
    return answers, stats


def _compare(mine: list, theirs: list, what: str) -> None:
    for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
        if a != b:
            if isinstance(a, dict):
                diff = {k: (a[k], b.get(k)) for k in a if k in b and a[k] != b[k]}
                pytest.fail(f"{what}: memory_stats differ at checkpoint {i}: {diff}")
            pytest.fail(f"{what}: request {i} got {a}, the reference {b}")


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("trace", REPLAYED)
def test_every_request_gets_the_references_pointer_and_stats(trace, config):
    text, no_caching, room, above = CONFIGS[config]
    ops = requests(TRACES / f"{trace}.pickle.xz")
    capacity = int(peak(ops) * room)
    kind = UncachedAllocator if no_caching else DeviceCachingAllocator
    theirs, their_stats = run_reference(text, no_caching, ops, capacity, above)
    for dropped in (False, True):
        how = f"{trace} under {config}" + (", freed by finalizers" if dropped else "")
        mine, my_stats = run_allocator(kind, text, ops, capacity, above, dropped)
        _compare(mine, theirs, how)
        _compare(my_stats, their_stats, how)
    if config == "injected malloc faults":
        assert None in theirs  # the ladder ran to the end: out of memory, for some requests


def repeated_requests(seed: int = 0) -> list[Request]:
    """What eager code asks for: a size allocated and dropped again and again (from a fresh
    segment, so the take-back meets whole segments too, and from a hole of just its size),
    mixed with other sizes and streams held across the repeats."""
    rng = random.Random(seed)
    ops: list[Request] = []
    held: list[int] = []
    addr = 0
    for _ in range(600):
        size = rng.choice([1024, 1024, 4096, 700 * KiB, 3 * MiB, 12 * MiB, 48 * MiB])
        stream = rng.choice([0, 0, 0, 1])
        for _ in range(rng.randint(1, 4)):  # the same request, freed at once, again
            addr += 1
            ops += [(True, addr, size, stream), (False, addr, 0, 0)]
        if rng.random() < 0.2:  # a hole of just this size between held blocks, then the
            addr += 1  # size again and again: handed out whole and taken back whole
            hole = addr
            ops.append((True, hole, size, stream))
            addr += 1
            ops.append((True, addr, size, stream))
            held.append(addr)
            ops.append((False, hole, 0, 0))
            for _ in range(rng.randint(1, 3)):
                addr += 1
                ops += [(True, addr, size, stream), (False, addr, 0, 0)]
        if rng.random() < 0.3:  # something that stays a while
            addr += 1
            ops.append((True, addr, size, stream))
            held.append(addr)
        if held and rng.random() < 0.25:
            ops.append((False, held.pop(rng.randrange(len(held))), 0, 0))
    return ops


def chained_requests(seed: int = 0) -> list[Request]:
    """What a chain of eager ops asks for, ``y = relu(addmm(b, y, w))``: each step's
    temporary and the old y die together and are dropped as a pair (the temporary first, or
    the other way round), next to each other or apart, with sizes that change between
    chains, held blocks between them and another stream."""
    rng = random.Random(seed)
    ops: list[Request] = []
    held: list[int] = []
    addr = 0
    for _ in range(200):
        size = rng.choice([512, 1024, 4096, 64 * KiB, 700 * KiB, 2 * MiB, 3 * MiB, 12 * MiB])
        stream = rng.choice([0, 0, 0, 1])
        addr += 1
        y = addr
        ops.append((True, y, size, stream))
        for _ in range(rng.randint(2, 8)):
            addr += 1
            temporary = addr
            ops.append((True, temporary, size, stream))
            if rng.random() < 0.15:  # something held between them
                addr += 1
                ops.append((True, addr, rng.choice([512, size]), stream))
                held.append(addr)
            addr += 1
            ops.append((True, addr, size if rng.random() < 0.8 else 2 * size, stream))
            pair = [temporary, y] if rng.random() < 0.8 else [y, temporary]
            ops += [(False, pair[0], 0, 0), (False, pair[1], 0, 0)]
            y = addr
        if rng.random() < 0.3:
            held.append(y)
        else:
            ops.append((False, y, 0, 0))
        while held and rng.random() < 0.4:
            ops.append((False, held.pop(rng.randrange(len(held))), 0, 0))
    return ops


EAGER_WORKLOADS = {"repeats": repeated_requests, "chains": chained_requests}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("workload", list(EAGER_WORKLOADS))
def test_eager_requests_get_the_references_pointers_and_stats(workload, config):
    """Note [Taking a dropped block back], freed and dropped: a size asked for again and
    again (the take-back of the last dropped block), and chains whose blocks are dropped in
    pairs (of two, one is taken back: the first as a hole, its pair freed before it, or the
    lower of two next to each other, cut off their merged block) only where the frees and
    the malloc give the same."""
    text, no_caching, room, above = CONFIGS[config]
    ops = EAGER_WORKLOADS[workload]()
    capacity = int(peak(ops) * room)
    kind = UncachedAllocator if no_caching else DeviceCachingAllocator
    theirs, their_stats = run_reference(text, no_caching, ops, capacity, above)
    for dropped in (False, True):
        mine, my_stats = run_allocator(kind, text, ops, capacity, above, dropped)
        _compare(mine, theirs, f"{workload} under {config}, dropped={dropped}")
        _compare(my_stats, their_stats, f"{workload} under {config}, dropped={dropped}")


@pytest.mark.parametrize("size", [1024, 12 * MiB])  # a hole in a split segment; a segment
def test_a_block_taken_back_whole_passes_the_peak_its_free_would(size):
    """A block handed out whole (a hole of just its size between live blocks, or a whole
    segment) and taken back after a peak reset: its free's rise of inactive_split is a new
    peak, as when the free and the malloc run one after the other."""
    stats, pointers = [], []
    for dropped in (False, True):
        allocator = DeviceCachingAllocator(
            vram.Device("sim", 0), parse_config(""), driver=fresh_sim(1 << 30, None)
        )
        stream = streams_of(allocator.driver)[0]
        first = allocator.malloc(size, stream)
        allocator.malloc(size, stream)  # (held: the hole's right side)
        allocator.free(first)
        again = allocator.malloc(size, stream)  # the hole (or segment), whole
        allocator.reset_peak()
        allocator.free_later(again) if dropped else allocator.free(again)
        pointers.append(allocator.malloc(size, stream))
        stats.append(allocator.memory_stats())
    assert pointers[0] == pointers[1]
    assert stats[0] == stats[1]
    if size == 1024:
        assert stats[1]["inactive_split.all.peak"] == stats[1]["inactive_split.all.current"] + 1


@pytest.mark.parametrize("lower_hole", [False, True])
@pytest.mark.parametrize("also_dropped", ["", "c", "d", "cd"])
def test_a_hole_taken_back_after_the_index_changed_is_what_its_free_and_malloc_give(
    lower_hole, also_dropped
):
    """A block with no free neighbour, dropped after other requests changed the free-block
    index, maybe with others dropped before it (freed first: the one next to it, or one
    apart), then its size asked again: the same pointers and stats as freeing it and asking,
    also when a free block of its size lies below it (best fit's answer is that one)."""
    stats, pointers = [], []
    for dropped in (False, True):
        allocator = DeviceCachingAllocator(
            vram.Device("sim", 0), parse_config(""), driver=fresh_sim(1 << 30, None)
        )
        stream = streams_of(allocator.driver)[0]
        a, x, b, c, d = (allocator.malloc(1024, stream) for _ in range(5))  # tiled in order
        allocator.free(b)
        b = allocator.malloc(1024, stream)  # the hole, handed out whole
        allocator.malloc(4096, stream)  # the index changes (from the rest of the segment)
        if lower_hole:
            allocator.free(a)  # a free block of its size below it, not next to it
        others = [{"c": c, "d": d}[name] for name in also_dropped]  # (c is next to b)
        for ptr in [*others, b]:
            allocator.free_later(ptr) if dropped else allocator.free(ptr)
        pointers.append(allocator.malloc(1024, stream))
        stats.append(allocator.memory_stats())
    assert pointers[0] == pointers[1]
    assert stats[0] == stats[1]
    assert pointers[0] == (a if lower_hole else b)


@pytest.mark.parametrize("neighbour", ["before", "after"])
def test_a_dropped_hole_whose_neighbour_was_freed_goes_where_its_free_and_malloc_go(neighbour):
    """A block taken whole whose neighbour is freed before it is dropped alone: its free
    merges with that neighbour, and best fit cuts the merged block at its start, so the
    malloc's answer is the neighbour's address when that comes first (the take-back must
    not answer the dropped block)."""
    pointers, stats = [], []
    for dropped in (False, True):
        allocator = DeviceCachingAllocator(
            vram.Device("sim", 0), parse_config(""), driver=fresh_sim(1 << 30, None)
        )
        stream = streams_of(allocator.driver)[0]
        # tiled in order; x of another size, so that no free block of b's size is below b
        x, b, y, z = (allocator.malloc(size, stream) for size in (2048, 1024, 1024, 1024))
        allocator.free(b)
        b = allocator.malloc(1024, stream)  # the hole, handed out whole
        allocator.free(x if neighbour == "before" else y)
        allocator.free_later(b) if dropped else allocator.free(b)
        pointers.append(allocator.malloc(1024, stream))
        stats.append(allocator.memory_stats())
    assert pointers[0] == pointers[1]
    assert stats[0] == stats[1]
    assert pointers[0] == (x if neighbour == "before" else b)


@pytest.mark.parametrize("pair", ["apart", "next to each other"])
def test_a_dropped_pair_whose_lower_neighbour_is_free_goes_where_the_frees_and_malloc_go(pair):
    """Two blocks dropped together, the first (the lower) with a free neighbour below it,
    larger than the two together: their frees merge it with that neighbour, and best fit
    cuts the merged block at the neighbour's address (the take-back of a pair must not
    answer the first)."""
    pointers, stats = [], []
    for dropped in (False, True):
        allocator = DeviceCachingAllocator(
            vram.Device("sim", 0), parse_config(""), driver=fresh_sim(1 << 30, None)
        )
        stream = streams_of(allocator.driver)[0]
        # tiled in order from a fresh segment, the last one held (the rest free after it)
        x, first, *more = (allocator.malloc(size, stream) for size in (4096, 1024, 1024, 1024))
        if pair == "apart":
            allocator.free(first)
            first = allocator.malloc(1024, stream)  # a hole, handed out whole
            last = more[1]  # (more[0] held between them; the free rest after the last)
        else:
            last = more[0]  # (more[1] held after it)
        allocator.free(x)  # the free neighbour below the first
        for ptr in (first, last):
            allocator.free_later(ptr) if dropped else allocator.free(ptr)
        pointers.append(allocator.malloc(1024, stream))
        stats.append(allocator.memory_stats())
    assert pointers[0] == pointers[1] == x
    assert stats[0] == stats[1]


@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_cudamallocasync_backend_gets_the_driver_pools_pointers(workload):
    """backend:cudaMallocAsync against the driver's own pool, asked directly: the same
    pointers in order, and memory_stats' allocated and reserved bytes (current and peak)
    from the pool's attributes."""
    ops = requests(TRACES / f"{workload}-default.pickle.xz")
    capacity = int(peak(ops) * 4)
    mine_driver, their_driver = fresh_sim(capacity, None), fresh_sim(capacity, None)
    allocator = AsyncAllocator(
        vram.Device("sim", 0), parse_config("backend:cudaMallocAsync"), driver=mine_driver
    )
    mine_streams, their_streams = streams_of(mine_driver), streams_of(their_driver)
    their_driver.mempool_set_attribute(0, "release_threshold", (1 << 64) - 1)  # (PyTorch's)
    live: dict[int, tuple[int, int, int]] = {}  # recorded address -> (mine, theirs, stream)
    for i, (is_alloc, addr, size, stream) in enumerate(ops):
        if is_alloc:
            mine = allocator.malloc(size, mine_streams[stream])
            theirs = their_driver.malloc_async(0, size, their_streams[stream])
            assert mine == theirs, f"{workload}: request {i}"
            live[addr] = (mine, theirs, stream)
        elif addr in live:
            mine, theirs, stream = live.pop(addr)
            allocator.free(mine)
            their_driver.free_async(0, theirs, their_streams[stream])
        if i % CHECK_EVERY == CHECK_EVERY - 1 or i == len(ops) - 1:
            stats = allocator.memory_stats()
            read = their_driver.mempool_attribute
            assert (
                stats["allocated_bytes.all.current"],
                stats["allocated_bytes.all.peak"],
                stats["reserved_bytes.all.current"],
                stats["reserved_bytes.all.peak"],
            ) == (
                read(0, "used_mem_current"),
                read(0, "used_mem_high"),
                read(0, "reserved_mem_current"),
                read(0, "reserved_mem_high"),
            ), f"{workload}: request {i}"


def _normalized(ops: list[Request]) -> list[tuple]:
    """The requests without the recorded addresses: each free names the alloc it frees."""
    index: dict[int, int] = {}
    out: list[tuple] = []
    for n, (is_alloc, addr, size, stream) in enumerate(ops):
        if is_alloc:
            index[addr] = n
            out.append((size, stream))
        else:
            out.append((index.pop(addr),))
    return out


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.pickle.xz")), ids=lambda p: p.name)
def test_every_bundled_trace_is_one_of_the_replayed_sequences(path):
    """A workload recorded under another setting mostly asks for the same requests; those
    that differ are replayed themselves (REPLAYED): so every bundled trace's requests are."""
    mine = _normalized(requests(path))
    replayed = [
        name for name in REPLAYED if _normalized(requests(TRACES / f"{name}.pickle.xz")) == mine
    ]
    assert replayed, f"{path.name}: its requests are none of REPLAYED's; add it there"

"""The allocator is thread-safe, and a finalizer that frees memory inside it is deferred, not
deadlocked (issue 3: "thread-safe; a finalizer that frees a tensor inside the allocator must
not deadlock or corrupt it")."""

from __future__ import annotations

import gc
import random
import sys
import threading

import pytest

import vram
from vram.driver._sim import SimDriver
from vram.memory import _registry
from vram.memory._caching import DeviceCachingAllocator

THREADS = 4
OPS = 2000
SIZES = [512, 1000, 4096, 65536, 1 << 20, (1 << 20) + 1, 3 << 20, 12 << 20]


@pytest.fixture
def fine_switching():
    """Switch threads every 10 µs, so that they interleave inside allocator calls."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def run_threads(target, count: int = THREADS) -> None:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # reported on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive(), "a thread hung (deadlock?)"
    if errors:
        raise errors[0]


def test_threads_allocate_and_free_raw_blocks_and_tensors(sim0, fine_switching):
    sim = vram.sim.driver()
    free_before = sim.mem_get_info(0)[0]
    live: list[dict[int, tuple[int, int]]] = [{} for _ in range(THREADS)]  # ptr -> (size, tag)
    tensors: list[list[vram.Tensor]] = [[] for _ in range(THREADS)]
    counts = [[0, 0] for _ in range(THREADS)]  # allocations, frees

    def worker(i: int) -> None:
        rng = random.Random(i)
        mine, kept = live[i], tensors[i]
        for step in range(OPS):
            tag = (i * OPS + step) % 251 + 1
            roll = rng.random()
            if roll < 0.35 or not (mine or kept):
                size = rng.choice(SIZES)
                ptr = vram.memory.caching_allocator_alloc(size, sim0)
                sim.view(ptr, size)[[0, -1]] = tag  # mark both ends
                mine[ptr] = (size, tag)
                counts[i][0] += 1
            elif roll < 0.55:
                t = vram.empty(rng.choice(SIZES[:5]), dtype=vram.uint8, device=sim0)
                sim.view(t.data_ptr(), t.nbytes)[[0, -1]] = tag
                kept.append(t)
                counts[i][0] += 1
            elif roll < 0.8 and mine:
                ptr = rng.choice(list(mine))
                size, tag = mine.pop(ptr)
                # nobody else was handed this memory while it was ours
                assert sim.view(ptr, size)[[0, -1]].tolist() == [tag, tag]
                vram.memory.caching_allocator_delete(ptr)
                counts[i][1] += 1
            elif kept:
                kept.pop(rng.randrange(len(kept)))
                counts[i][1] += 1

    run_threads(worker)

    blocks = [(ptr, size) for mine in live for ptr, (size, _) in mine.items()]
    blocks += [(t.data_ptr(), t.nbytes) for kept in tensors for t in kept]
    blocks.sort()
    for (a, size), (b, _) in zip(blocks, blocks[1:], strict=False):
        assert a + size <= b, f"live blocks overlap at {a:#x} and {b:#x}"
    stats = vram.memory_stats(sim0)
    allocated = sum(c[0] for c in counts)
    assert stats["allocation.all.current"] == len(blocks)
    assert stats["allocation.all.allocated"] == allocated
    assert stats["allocation.all.freed"] == allocated - len(blocks)
    assert stats["requested_bytes.all.current"] == sum(size for _, size in blocks)
    allocator = _registry.allocator_for(sim0)
    assert sorted(allocator._allocated) == [ptr for ptr, _ in blocks]
    assert stats["allocated_bytes.all.current"] == sum(
        block.size for block in allocator._allocated.values()
    )

    for mine in live:
        for ptr in mine:
            vram.memory.caching_allocator_delete(ptr)
    for kept in tensors:
        kept.clear()
    stats = vram.memory_stats(sim0)
    assert stats["allocation.all.current"] == 0
    assert stats["allocated_bytes.all.current"] == 0
    assert stats["active_bytes.all.current"] == 0
    vram.empty_cache(sim0)
    assert vram.memory_stats(sim0)["reserved_bytes.all.current"] == 0
    assert sim.mem_get_info(0)[0] == free_before


def test_threads_drop_tensors_in_reference_cycles(sim0, fine_switching):
    """The garbage collector runs inside allocator calls on every thread; its frees are done."""
    old = gc.get_threshold()
    gc.set_threshold(20)  # collect often: inside malloc and free, on any thread

    def worker(i: int) -> None:
        rng = random.Random(i)
        for _ in range(OPS // 2):
            t = vram.empty(rng.choice(SIZES[:6]), dtype=vram.uint8, device=sim0)
            cycle: list[object] = [t]
            cycle.append(cycle)

    try:
        run_threads(worker)
    finally:
        gc.set_threshold(*old)
    gc.collect()
    stats = vram.memory_stats(sim0)
    assert stats["allocation.all.allocated"] == THREADS * (OPS // 2)
    assert stats["allocation.all.current"] == 0
    assert stats["allocated_bytes.all.current"] == 0
    assert not _registry.allocator_for(sim0)._dropped


# ---- a finalizer that frees inside the allocator ---------------------------------------


class Holder:
    """Frees its allocation when collected; kept alive only by a reference cycle."""

    freed: list[int] = []

    def __init__(self, allocator: DeviceCachingAllocator, ptr: int) -> None:
        self.allocator = allocator
        self.ptr = ptr
        self.me = self  # a cycle: only the garbage collector frees it

    def __del__(self) -> None:
        self.allocator.free(self.ptr)
        Holder.freed.append(self.ptr)


class CollectingDriver:
    """The sim driver, but every device malloc first runs the garbage collector: with the
    allocator's lock held, in the middle of its malloc."""

    def __init__(self, sim: SimDriver) -> None:
        self._sim = sim
        self.collections = 0

    def malloc(self, device: int, size: int) -> int:
        self.collections += 1
        gc.collect()
        return self._sim.malloc(device, size)

    def __getattr__(self, name: str):
        return getattr(self._sim, name)


@pytest.fixture
def no_auto_gc():
    """Only explicit collections run, so the test decides where a finalizer runs."""
    Holder.freed.clear()
    was = gc.isenabled()
    gc.disable()
    yield
    if was:
        gc.enable()


def test_finalizer_free_inside_malloc_is_left_for_the_next_call(no_auto_gc):
    sim = SimDriver(device_count=1, capacity=1 << 30)
    driver = CollectingDriver(sim)
    allocator = DeviceCachingAllocator(vram.Device("sim", 0), driver=driver)
    stream = sim.default_stream(0)
    a = allocator.malloc(4096, stream)
    b = allocator.malloc(4096, stream)
    Holder(allocator, a)  # unreachable at once, except through its cycle
    assert Holder.freed == []

    big = allocator.malloc(4 << 20, stream)  # a new segment: the collector runs inside
    assert driver.collections == 2
    assert Holder.freed == [a]  # the finalizer ran inside malloc: its free was left ...
    stats = allocator.memory_stats()  # ... for the next call, which does it first
    assert stats["allocation.all.current"] == 2  # b and big
    assert stats["allocation.all.freed"] == 1
    assert stats["allocated_bytes.all.current"] == 4096 + (4 << 20)
    assert allocator.malloc(4096, stream) == a  # the block is back in its pool
    for ptr in (a, b, big):
        allocator.free(ptr)
    assert allocator.memory_stats()["allocated_bytes.all.current"] == 0
    allocator.empty_cache()
    assert sim.mem_get_info(0) == (1 << 30, 1 << 30)


def test_finalizer_free_inside_free_and_empty_cache(no_auto_gc):
    sim = SimDriver(device_count=1, capacity=1 << 30)
    allocator = DeviceCachingAllocator(vram.Device("sim", 0), driver=sim)
    stream = sim.default_stream(0)
    a, b, c = (allocator.malloc(size, stream) for size in (512, 512, 30 << 20))
    Holder(allocator, a)
    Holder(allocator, b)
    original_free = sim.free

    def collecting_free(device: int, ptr: int) -> None:  # cudaFree, from empty_cache
        gc.collect()
        original_free(device, ptr)

    sim.free = collecting_free
    allocator.free(c)
    allocator.empty_cache()  # releases c's segment: the collector runs with the lock held
    assert sorted(Holder.freed) == sorted([a, b])
    stats = allocator.memory_stats()
    assert stats["allocation.all.current"] == 0
    assert stats["allocated_bytes.all.current"] == 0
    allocator.empty_cache()
    assert allocator.memory_stats()["reserved_bytes.all.current"] == 0
    assert sim.mem_get_info(0) == (1 << 30, 1 << 30)


def test_free_memory_callback_collects_garbage_and_the_malloc_reuses_it(no_auto_gc):
    sim = SimDriver(device_count=1, capacity=2 << 20)  # one small segment, no more
    allocator = DeviceCachingAllocator(vram.Device("sim", 0), driver=sim)
    stream = sim.default_stream(0)
    a = allocator.malloc(1 << 20, stream)
    b = allocator.malloc(1 << 20, stream)
    Holder(allocator, b)

    def collect() -> bool:
        return gc.collect() > 0

    allocator.free_memory_callbacks.append(collect)
    assert allocator.malloc(1 << 20, stream) == b  # found after the callback freed b
    assert Holder.freed == [b]
    stats = allocator.memory_stats()
    assert stats["num_device_alloc"] == 1
    assert stats["num_alloc_retries"] == 0
    assert stats["allocation.all.current"] == 2
    assert stats["allocation.all.freed"] == 1
    for ptr in (a, b):
        allocator.free(ptr)


def test_finalizer_on_another_thread_does_not_wait_for_the_lock(no_auto_gc):
    """A free on thread B while thread A holds the lock does not block: it is left for the
    allocator's next call, which does it before anything else."""
    sim = SimDriver(device_count=1, capacity=1 << 30)
    allocator = DeviceCachingAllocator(vram.Device("sim", 0), driver=sim)
    stream = sim.default_stream(0)
    a = allocator.malloc(512, stream)
    Holder(allocator, a)
    collected = threading.Event()
    with allocator.locked():
        thread = threading.Thread(target=lambda: (gc.collect(), collected.set()))
        thread.start()
        assert collected.wait(10)  # B went through its finalizer without waiting
        assert allocator._allocated  # ... and the block is still allocated
    thread.join(timeout=10)
    assert Holder.freed == [a]
    assert allocator.memory_stats()["allocation.all.current"] == 0

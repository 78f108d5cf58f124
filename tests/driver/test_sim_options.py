"""The simulator's public options: a device that counts memory and backs none, a placement
of one's own, and a held stream (its work in flight until released)."""

from __future__ import annotations

import pytest

import vram
from vram.sim import SimDriver

GiB = 1 << 30
MiB = 1 << 20


def test_an_unbacked_device_counts_memory_and_backs_none():
    sim = SimDriver(device_count=1, capacity=1 << 45, backed=False)
    ptr = sim.malloc(0, 1 << 44)  # 16 TiB: address space and a count, no host memory
    assert sim.mem_get_info(0) == ((1 << 45) - (1 << 44), 1 << 45)
    with pytest.raises(vram.CudaError, match="backs no memory"):
        sim.view(ptr, 8)
    va = sim.vmm_reserve(0, 4 * MiB)
    handle = sim.vmm_create(0, 2 * MiB)
    sim.vmm_map(0, va, 2 * MiB, handle)
    sim.vmm_unmap(0, va, 2 * MiB)
    sim.vmm_release_handle(0, handle)
    sim.vmm_release(0, va, 4 * MiB)
    sim.free(0, ptr)
    assert sim.mem_get_info(0) == (1 << 45, 1 << 45)
    with pytest.raises(vram.CudaError, match="OUT_OF_MEMORY"):
        sim.malloc(0, (1 << 45) + 1)


class _Downward:
    """Each allocation below the last, as a placement of the caller's own."""

    def __init__(self) -> None:
        self.next = 1 << 40
        self.kinds: list[str] = []
        self.given: list[int] = []

    def take(self, size: int, alignment: int, kind: str) -> int:
        self.kinds.append(kind)
        self.next -= -(-size // alignment) * alignment
        return self.next

    def give(self, start: int, size: int) -> None:
        self.given.append(start)


def test_a_placement_of_ones_own_places_every_range():
    space = _Downward()
    sim = SimDriver(device_count=1, capacity=GiB, addresses=lambda device: space)
    a = sim.malloc(0, 3 * MiB)
    b = sim.malloc(0, MiB)
    va = sim.vmm_reserve(0, 2 * MiB)
    assert a > b > va and space.kinds == ["malloc", "malloc", "reserve"]
    sim.view(b, MiB)[:] = 5  # backed, at the placed address
    assert sim.view(b, 4).tolist() == [5] * 4
    sim.free(0, a)
    assert space.given == [a]


def test_a_held_streams_work_waits_until_it_is_released():
    sim = SimDriver(device_count=1, capacity=GiB)
    held, other = sim.stream_create(0), sim.stream_create(0)
    ran: list[str] = []
    sim.hold(held)
    sim.enqueue(held, lambda: ran.append("held"))
    event = sim.event_create(0)
    sim.event_record(event, held)
    sim.stream_wait_event(other, event)
    sim.enqueue(other, lambda: ran.append("after"))  # waits for the held stream's work
    sim.enqueue(sim.default_stream(0), lambda: ran.append("free"))  # other streams run
    assert ran == ["free"] and not sim.event_query(event)
    sim.release(held)
    assert ran == ["free", "held", "after"] and sim.event_query(event)


def test_a_host_synchronization_completes_held_work():
    sim = SimDriver(device_count=1, capacity=GiB)
    held = sim.stream_create(0)
    sim.hold(held)
    event = sim.event_create(0)
    sim.event_record(event, held)
    assert not sim.event_query(event)
    sim.event_synchronize(event)
    assert sim.event_query(event)
    sim.event_record(event, held)  # still held: the next record waits again
    assert not sim.event_query(event)
    ptr = sim.malloc(0, MiB)
    sim.free(0, ptr)  # cudaFree synchronizes the device
    assert sim.event_query(event)


def test_vram_sim_hold_keeps_a_streams_work_in_flight(sim0):
    side = vram.Stream(sim0)
    with vram.sim.hold(side):
        x = vram.zeros(4, device=sim0)
        with vram.stream(side):
            x.fill_(3)
            done = side.record_event()
        assert not done.query()
    assert done.query() and x.numpy().tolist() == [3.0] * 4

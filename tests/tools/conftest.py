"""Fixtures for the tools' tests: the bundled real traces and a synthetic trace of any length.

The real traces are PyTorch snapshots recorded on an H100 by bench/record_traces.py and kept
in tests/data/traces/ as ``<workload>-<setting>.pickle.xz`` (its README.md says what each
is).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
WORKLOADS = ("gpt_train", "cnn_train", "bert_infer", "two_stream")

_SLOT = 2 << 20  # bytes: each synthetic allocation gets a 2 MiB slot of a segment
_SLOTS_PER_SEGMENT = 32
_SEGMENTS = 40
_PRE_TRACE_SEGMENTS = 8  # segments that exist before the trace's first event
_BASE = 0x7F00_0000_0000


def trace_path(name: str) -> Path:
    """The bundled trace ``name`` ("cnn_train-default", ...). Until the traces are committed
    (an empty tests/data/traces/) the test skips; once they are, a missing one fails it."""
    path = TRACES / f"{name}.pickle.xz"
    if not path.exists():
        if not any(TRACES.glob("*.pickle.xz")):
            pytest.skip("tests/data/traces/ has no traces yet (bench/record_traces.py)")
        pytest.fail(f"{path} is missing; bench/record_traces.py records it")
    return path


@pytest.fixture
def trace():
    """``trace(name)``: the path of the bundled trace ``name`` ("cnn_train-default", ...)."""
    return trace_path


@pytest.fixture(params=[f"{workload}-default" for workload in WORKLOADS])
def real_trace(request) -> Path:
    """Each workload's trace recorded under PyTorch's default settings."""
    return trace_path(request.param)


@pytest.fixture
def synthetic_snapshot():
    return make_synthetic_snapshot


def make_synthetic_snapshot(events: int, seed: int = 0) -> dict:
    """A snapshot in PyTorch's format with ``events`` trace entries: a training-like rise and
    fall of live allocations on two streams (stream 1 frees are pending for a few events),
    stacks, allocations and segments that predate the trace, an expandable segment mapped and
    unmapped, and one OOM."""
    rng = random.Random(seed)
    stacks = [
        [
            {"filename": f"model_{k}.py", "line": 10 * k + j, "name": f"layer{k}_fn{j}"}
            for j in range(4)
        ]
        for k in range(6)
    ]
    trace: list[dict] = []
    clock = [1_700_000_000_000_000]

    def record(action: str, addr: int, size: int, stream: int = 0, frames=()) -> None:
        clock[0] += rng.randint(1, 40)
        trace.append(
            {
                "action": action,
                "addr": addr,
                "size": size,
                "stream": stream,
                "time_us": clock[0],
                "frames": list(frames),
            }
        )

    seg_addr = [_BASE + s * _SLOTS_PER_SEGMENT * _SLOT for s in range(_SEGMENTS)]
    free_slots = [a + k * _SLOT for a in seg_addr for k in range(_SLOTS_PER_SEGMENT)]
    free_slots.reverse()
    live: dict[int, tuple[int, int, list]] = {}  # slot -> (size, stream, frames)
    pending: list[int] = []  # slots whose free was requested, not yet completed
    # Live before the trace: the first five stay live, the next five are freed in the trace.
    pre_trace = [free_slots.pop() for _ in range(10)]
    held = set(pre_trace)  # slots the trace must not free now: pre-trace or pending
    for slot in pre_trace:
        live[slot] = (3 << 19, 0, stacks[0])
    for s in range(_PRE_TRACE_SEGMENTS, _SEGMENTS):
        record("segment_alloc", seg_addr[s], _SLOTS_PER_SEGMENT * _SLOT)
    for slot in pre_trace[5:]:
        held.discard(slot)
        record("free_requested", slot, live[slot][0])
        record("free_completed", slot, live.pop(slot)[0])
    expandable = _BASE + (_SEGMENTS + 4) * _SLOTS_PER_SEGMENT * _SLOT
    record("segment_map", expandable, 8 * _SLOT)

    target = 60
    oom_recorded = False
    while len(trace) < events:
        if len(trace) % 4000 < 2:
            target = rng.choice([60, 300, 900])
        if pending and (rng.random() < 0.3 or len(trace) >= events - 2):
            slot = pending.pop(0)
            held.discard(slot)
            record("free_completed", slot, live.pop(slot)[0], 1)
            free_slots.append(slot)
        elif len(live) - len(pending) < target and free_slots and rng.random() < 0.55:
            slot = free_slots.pop()
            size = int(2 ** rng.uniform(12, 21))
            stream = 1 if rng.random() < 0.2 else 0
            frames = rng.choice(stacks)
            live[slot] = (size, stream, frames)
            record("alloc", slot, size, stream, frames)
        else:
            order = list(live)
            if rng.random() < 0.3:
                rng.shuffle(order)
            slot = next((s for s in reversed(order) if s not in held), None)
            if slot is None:
                continue
            size, stream, frames = live[slot]
            record("free_requested", slot, size, stream, frames)
            if stream == 1:
                pending.append(slot)
                held.add(slot)
            else:
                record("free_completed", slot, live.pop(slot)[0])
                free_slots.append(slot)
        if not oom_recorded and len(trace) >= events // 2:
            oom_recorded = True
            record("oom", 0, 1 << 40)
            record("segment_unmap", expandable + 4 * _SLOT, 4 * _SLOT)

    return {
        "segments": [_final_segment(a, live, pending, stacks[1]) for a in seg_addr]
        + [
            {
                "device": 0,
                "address": expandable,
                "total_size": 4 * _SLOT,
                "allocated_size": 0,
                "active_size": 0,
                "requested_size": 0,
                "stream": 0,
                "segment_type": "large",
                "segment_pool_id": (0, 0),
                "is_expandable": True,
                "frames": [],
                "blocks": [
                    {
                        "address": expandable,
                        "size": 4 * _SLOT,
                        "requested_size": 0,
                        "state": "inactive",
                    }
                ],
            }
        ],
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
    }


def _final_segment(addr: int, live: dict, pending: list, frames: list) -> dict:
    blocks = []
    for k in range(_SLOTS_PER_SEGMENT):
        slot = addr + k * _SLOT
        if slot in live:
            size = live[slot][0]
            state = "active_pending_free" if slot in pending else "active_allocated"
            block = -(-size // 512) * 512
            blocks.append({"address": slot, "size": block, "requested_size": size, "state": state})
            if block < _SLOT:
                blocks.append(
                    {
                        "address": slot + block,
                        "size": _SLOT - block,
                        "requested_size": 0,
                        "state": "inactive",
                    }
                )
        else:
            blocks.append(
                {"address": slot, "size": _SLOT, "requested_size": 0, "state": "inactive"}
            )
    used = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {
        "device": 0,
        "address": addr,
        "total_size": _SLOTS_PER_SEGMENT * _SLOT,
        "allocated_size": used,
        "active_size": used,
        "requested_size": used,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": frames,
        "blocks": blocks,
    }

"""The index kernels compile with NVRTC for sm_90 (no GPU needed): the instances that a
representative set of calls launches, in one program."""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram.ops._index_kernels import source

SIM = vram.device("sim:0")


@pytest.fixture
def compile_program():
    try:
        from vram.driver._nvrtc import compile_program, nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")
    return compile_program


@pytest.fixture
def entries(monkeypatch):
    """The kernel instances the calls in the test prepare on sim."""
    found: list[str] = []
    driver = vram.sim.driver()
    prepare = driver.prepare

    def recording(device, launch):
        if launch.work.source == source():
            found.append(launch.entry)
        return prepare(device, launch)

    monkeypatch.setattr(driver, "prepare", recording)
    vram.ops._plans.PLANS.clear()
    return found


def representative_calls() -> None:
    """One call per kernel template and per code path inside it that differs by type
    (sub-word and complex atomics, 16-byte cat units, two int32 indices, complex steps)."""
    f32 = vram.tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device=SIM)
    idx = vram.tensor([3, 0, 1], device=SIM)
    f32.index_select(1, idx)
    pair = vram.tensor([0, 1, 2], dtype=vram.int32, device=SIM)
    f32.to(vram.bfloat16)[pair, pair]
    for dt in (vram.int8, vram.float16, vram.complex64):
        target = vram.zeros(4, 6, dtype=dt, device=SIM)
        target.scatter_add_(0, vram.zeros(2, 6, dtype=vram.int64, device=SIM), target[:2].clone())
    f32.clone().scatter_(0, vram.zeros(1, 6, dtype=vram.int64, device=SIM), 2.0, reduce="multiply")
    f32.clone()[idx] = 1.0
    vram.cat([f32, f32])
    vram.cat([f32[i : i + 1, :2] for i in range(4)] * 10)
    vram.zeros(2, 3, 4, dtype=vram.int64, device=SIM).tril_()
    wide = f32.to(vram.complex128)  # 16-byte elements, moved as vram::Bits16
    wide.nonzero()
    wide.index_select(1, idx)
    wide.clone()[idx] = 1.0
    wide.tril()
    f32[f32 > 3]
    vram.linspace(0, 1j, 5, device=SIM)
    vram.logspace(0, 1, 5, dtype=vram.float16, device=SIM)


_WIDE = (
    "vram::index::gather<unsigned int, long long, 1, long long, false>",
    "vram::index::triangle<unsigned char, long long, false>",
)


def test_the_index_kernels_compile(compile_program, entries):
    representative_calls()
    names = tuple(sorted(set(entries)))
    assert len(names) >= 15
    names += _WIDE  # 64-bit offsets (iteration spaces past 2**31 elements)
    assert any("uint4" in n for n in names)  # the 16-byte cat
    assert any("Bits16" in n for n in names)  # complex128's elements
    program = compile_program(source(), "sm_90", names)
    assert set(program.lowered_names) == set(names)

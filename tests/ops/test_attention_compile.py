"""The fused attention kernel compiles with NVRTC for sm_90 (NVRTC needs no GPU): two
instances that between them take every branch of the source (bfloat16 and float16; no mask
and causal with two MMA row tiles a warp and Q kept in registers; a float32 mask with head
dim 128 and Q reloaded from shared memory). The rest are compiled by ``vram.ops.warm``."""

from __future__ import annotations

import pytest

import vram
from vram.ops import _attention


def test_fused_attention_instances_compile():
    nvrtc = pytest.importorskip("vram.driver._nvrtc")
    try:
        nvrtc.nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")

    names = (
        _attention.entry(vram.bfloat16, None, True, 64, 2),
        _attention.entry(vram.float16, vram.float32, False, 128, 1),
    )
    listed = {name for _, name in _attention.instances()}
    assert set(names) <= listed and len(listed) == 30
    program = nvrtc.compile_program(_attention.source(), "sm_90", names)
    assert program.kind == "cubin" and program.image[:4] == b"\x7fELF"
    for name in names:
        assert program.lowered_names[name].startswith("_ZN4vram9attention7forward"), name

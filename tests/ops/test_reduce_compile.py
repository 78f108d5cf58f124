"""The kernels that reductions, softmax, layer_norm and scans launch compile with NVRTC for
sm_90: a representative set of instances, taken from the plans themselves (NVRTC needs no
GPU, so a kernel that does not compile fails here in CI)."""

from __future__ import annotations

import numpy as np
import pytest

import vram
import vram.nn.functional as F
from vram.ops import _layer_norm, _reduce, _scan, _softmax

SIM = vram.device("sim:0")
ELF_MAGIC = b"\x7fELF"


@pytest.fixture(scope="module", autouse=True)
def _nvrtc_loads():
    try:
        from vram.driver._nvrtc import nvrtc_version

        nvrtc_version()
    except Exception as exc:  # the NVRTC library itself is missing on this machine
        pytest.skip(f"NVRTC cannot be loaded: {exc}")


@pytest.fixture
def entries(monkeypatch):
    """The kernel instances the plans made during the test prepare (module -> entries)."""
    found: dict[str, set[str]] = {}
    for module in (_reduce, _softmax, _layer_norm, _scan):
        real = module.launcher

        def record(device, launch, real=real, name=module.__name__):
            found.setdefault(name, set()).add(launch.entry)
            return real(device, launch)

        monkeypatch.setattr(module, "launcher", record)
    return found


def t(shape, dt, seed=0):
    array = np.random.default_rng(seed).standard_normal(shape).astype(dt.np)
    return vram.tensor(array, device=SIM)


def _compile(source: str, names: set[str]) -> None:
    from vram.driver._nvrtc import compile_program

    program = compile_program(source, "sm_90", tuple(sorted(names)))
    assert program.kind == "cubin" and program.image[:4] == ELF_MAGIC
    for name in names:
        assert program.lowered_names[name].startswith("_Z"), name


def test_reduction_instances_compile(entries):
    x = t((64, 4096), vram.float32)
    vram.sum(x)  # split across blocks: reduce_inner and reduce_partials
    vram.sum(t((8, 1024), vram.bfloat16), -1)
    vram.sum(vram.tensor(np.ones((300, 7), np.int32), device=SIM), 0)  # reduce_outer
    vram.argmax(t((16, 33), vram.float16), 1)
    vram.max(x[:, 1:], 0)  # values and indices
    vram.sum(x[:, 1:], 1)  # misaligned: the element-wise reduce_inner
    vram.var_mean(x, 1)
    vram.linalg.vector_norm(t((5, 6), vram.complex64), 2, 1)
    vram.logsumexp(x, 0)
    vram.all(vram.tensor(np.ones(9, np.bool_), device=SIM))
    vram.mean(t((3, 5), vram.float64), dtype=vram.float64)
    names = entries["vram.ops._reduce"]
    assert any("reduce_partials" in n for n in names)
    assert any("reduce_outer" in n for n in names)
    _compile(_reduce.source(), names)


def test_row_and_scan_instances_compile(entries):
    F.softmax(t((4, 1024), vram.float32), -1)
    F.log_softmax(t((4, 4096), vram.bfloat16), -1, dtype=vram.float32)
    F.softmax(t((2, 20000), vram.float16), -1)  # online
    F.softmax(t((3, 5, 7), vram.float32), 1)  # columns
    _compile(_softmax.source(), entries["vram.ops._softmax"])
    F.layer_norm(t((4, 768), vram.bfloat16), (768,), t((768,), vram.float32))
    F.layer_norm(t((2, 20000), vram.float32), (20000,))  # online
    _compile(_layer_norm.source(), entries["vram.ops._layer_norm"])
    vram.cumsum(t((3, 100), vram.float16), 1)
    vram.cumprod(vram.tensor(np.ones((4, 3, 5), np.int32), device=SIM), 1)
    vram.cumsum(t((2, 40_000), vram.bfloat16), 1)  # tiles of long rows: three kernels
    _compile(_scan.source(), entries["vram.ops._scan"])

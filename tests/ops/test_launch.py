"""The Layout struct that strided CUDA kernels take, checked by replaying the kernels'
index arithmetic (kernels/elementwise.cu: ``offsets<N>``) in Python."""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram.ops._launch import LAYOUT_DTYPE, layout

SIM = vram.device("sim:0")


def offsets(packed: np.void, operand: int) -> list[int]:
    """Element offsets of every flat index, as the kernel computes them."""
    ndim, numel = int(packed["ndim"]), int(packed["numel"])
    shape, stride = packed["shape"], packed["stride"][operand]
    result = []
    for i in range(numel):
        off = 0
        for d in range(ndim - 1, -1, -1):
            off += (i % shape[d]) * stride[d]
            i //= shape[d]
        result.append(int(off))
    return result


def gather(t: vram.Tensor, packed: np.void, operand: int) -> list[int]:
    storage = vram.from_numpy(t._storage.host.view(t.dtype.np))
    flat = storage.numpy()
    return [int(flat[t.storage_offset() + o]) for o in offsets(packed, operand)]


def test_the_struct_matches_the_kernels():
    assert LAYOUT_DTYPE.itemsize == 8 + 8 + 8 * 8 + 3 * 8 * 8  # struct Layout in the .cu


def test_contiguous_operands_run_as_one_flat_loop():
    a, b = vram.zeros(4, 5, 6, device=SIM), vram.zeros(4, 5, 6, device=SIM)
    packed = layout([a, b])
    assert packed["ndim"] == 1 and packed["numel"] == 120
    assert packed["shape"][0] == 120 and list(packed["stride"][:2, 0]) == [1, 1]


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.t(),
        lambda t: t[1:, ::2],
        lambda t: t[:, 3:4].expand(6, 5),
        lambda t: t.view(2, 3, 8)[:, ::2, 1::3].permute(2, 0, 1),
    ],
)
def test_layouts_reproduce_numpy_indexing(make):
    values = np.arange(48, dtype=np.int64).reshape(6, 8)
    t = make(vram.from_numpy(values.copy()))
    out = vram.empty(*t.shape, dtype=vram.int64, device="cpu")
    packed = layout([out, t])
    assert gather(t, packed, 1) == t.numpy().reshape(-1).tolist()
    assert offsets(packed, 0) == list(range(out.numel()))


def test_too_many_dimensions_are_refused():
    t = vram.zeros(*(2,) * 9, device=SIM)
    assert layout([t])["ndim"] == 1  # contiguous: merged
    strided = vram.zeros(*(3,) * 9, device=SIM)[(slice(0, 2),) * 9]
    with pytest.raises(ValueError, match="at most 8"):
        layout([strided])

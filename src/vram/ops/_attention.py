"""Fused attention (kernels/attention.cu): one launch per call of scaled dot product attention
for float16 and bfloat16 with head dim 64 or 128, one plan per signature.

The problem arrives described (``Problem``): the output's batch dims padded to two on the
left, (B, H) (H: the heads; for grouped-query attention key and value have H / group_k and
H / group_v heads), L queries, S keys, head dim D, and every operand's strides in elements
over that shape (0 along a broadcast dimension). The kernel reads q, k, v and the mask
through those strides, so heads split from one projection ([B, T, 3, H, D] viewed as three
[B, H, T, D]) and broadcast masks are read where they lie, with no copy.

The output is laid out as PyTorch's flash attention lays it: memory [B, L, H, D] (seen as
[B, H, L, D]), so that ``out.transpose(1, 2).reshape(B, L, H * D)`` is a view.

The reference (the simulated GPU and the cpu device run it) is the composite's math in
float32: ``softmax((q * scale) @ k^T + mask) @ v``, a row with no key taking part giving
zeros, rounded once to the output dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from .._dtypes import bfloat16, bool_, dtype, float16, float32
from .._streams import this_thread
from .._tensor import Tensor, layout_id
from ..driver._work import Arg, Kernel, Launch, View
from ._kernels import KERNEL_DIR, c_type
from ._plans import launcher, new_tensor
from ._pointwise import store as _put
from ._reduce import multiprocessors

__all__ = [
    "Problem",
    "AttentionPlan",
    "fusable",
    "entry",
    "instances",
    "SHAPE_DTYPE",
    "HEAD_DIMS",
    "reference",
]

HEAD_DIMS = (64, 128)  # the head dims the kernel is built for
_DTYPES = (float16, bfloat16)
_ROWS_PER_WARP_TILE = 16  # query rows of one MMA tile
_WARPS = 4  # kWarps in the .cu
_ALIGN = 8  # elements of 16 bytes: pointers and strides of q, k, v and o are multiples
_MAX_ROW_BLOCKS = 65535  # gridDim.y

# struct Shape in kernels/attention.cu
SHAPE_DTYPE = np.dtype(
    [
        ("q", np.int64, (3,)),
        ("k", np.int64, (3,)),
        ("v", np.int64, (3,)),
        ("o", np.int64, (3,)),
        ("m", np.int64, (4,)),
        ("heads", np.int32),
        ("group_k", np.int32),
        ("group_v", np.int32),
        ("rows", np.int32),
        ("keys", np.int32),
    ],
    align=True,
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One signature of attention, as the kernel sees it: (B, H) batch, ``rows`` L,
    ``keys`` S, ``dim`` D (of q, k and v), strides in elements (batch, head, row) of q, k
    and v, the mask's (batch, head, row, column) or None, and the query heads per key and
    per value head."""

    batch: tuple[int, ...]  # the output's batch dims as the caller has them (0 to 2)
    heads: tuple[int, int]  # (B, H)
    rows: int
    keys: int
    dim: int
    q: tuple[int, int, int]
    k: tuple[int, int, int]
    v: tuple[int, int, int]
    mask: tuple[int, int, int, int] | None
    group_k: int
    group_v: int


def fusable(problem: Problem, dt: dtype) -> bool:
    """Whether the fused kernel takes ``problem`` (pointer alignment aside, checked per
    call): float16/bfloat16, head dim 64 or 128, at most two batch dims, no empty dim,
    16-byte strides of q, k and v, sizes in the grid's and the kernel's int range."""
    b, h = problem.heads
    if dt not in _DTYPES or problem.dim not in HEAD_DIMS or len(problem.batch) > 2:
        return False
    if not (b and h and problem.rows and problem.keys):
        return False
    if b * h >= 2**31 or problem.rows >= 2**31 or problem.keys >= 2**31:
        return False
    if -(-problem.rows // (_ROWS_PER_WARP_TILE * _WARPS)) > _MAX_ROW_BLOCKS:
        return False
    return all(s % _ALIGN == 0 for s in (*problem.q, *problem.k, *problem.v))


@cache
def source() -> str:
    folder = KERNEL_DIR
    return "".join((folder / name).read_text() for name in ("common.cuh", "attention.cu"))


def reference(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    o: np.ndarray,
    mask: Any,
    scale: float,
    causal: bool,
    group_k: int,
    group_v: int,
) -> None:
    """The kernel in NumPy: q [B, H, L, D], k [B, H / group_k, S, D], v [B, H / group_v, S,
    D], mask [B, H, L, S] (bool: true takes part; float: added) or not an array, o [B, H,
    L, D]; float32 throughout, rounded once into ``o``."""
    f32 = np.float32
    with np.errstate(all="ignore"):
        keys = np.repeat(k.astype(f32), group_k, axis=1) if group_k > 1 else k.astype(f32)
        values = np.repeat(v.astype(f32), group_v, axis=1) if group_v > 1 else v.astype(f32)
        scores = np.matmul(q.astype(f32) * f32(scale), np.swapaxes(keys, -1, -2))
        if isinstance(mask, np.ndarray):
            if mask.dtype == np.bool_:
                scores = scores + np.where(mask, f32(0), f32(-np.inf))
            else:
                scores = scores + mask.astype(f32)
        if causal:
            rows, keys_n = scores.shape[-2:]
            above = np.arange(keys_n)[None, :] > np.arange(rows)[:, None]
            scores = np.where(above, f32(-np.inf), scores)
        top = scores.max(axis=-1, keepdims=True)
        dead = top == -np.inf  # no key takes part: zeros (PyTorch's safe softmax)
        weights = np.exp(scores - np.where(dead, f32(0), top))
        total = weights.sum(axis=-1, keepdims=True, dtype=f32)
        weights = weights / np.where(dead, f32(1), total)
        _put(o, np.matmul(weights, values))


@cache
def _kernel() -> Kernel:
    return Kernel("scaled_dot_product_attention", source(), reference)


def _rows_per_warp(problem: Problem, sms: int) -> int:
    """MMA row tiles per warp: two (128-row blocks, K and V tiles read once for twice the
    rows) for head dim 64 when that still gives every SM two blocks, else one."""
    if problem.dim != 64:
        return 1
    b, h = problem.heads
    blocks = b * h * -(-problem.rows // (2 * _ROWS_PER_WARP_TILE * _WARPS))
    return 2 if blocks >= 2 * sms else 1


def entry(dt: dtype, mask_dtype: dtype | None, causal: bool, dim: int, rows_per_warp: int) -> str:
    """The kernel instance: element type, mask (none, bool, additive of its type), causal,
    head dim and MMA row tiles per warp."""
    mask_kind = 0 if mask_dtype is None else (1 if mask_dtype is bool_ else 2)
    m_type = c_type(mask_dtype if mask_dtype is not None else dt)
    flag = "true" if causal else "false"
    return (
        f"vram::attention::forward<{c_type(dt)}, {m_type}, {mask_kind}, {flag}, "
        f"{dim}, {rows_per_warp}>"
    )


def instances() -> list[tuple[str, str]]:
    """Every instance a plan may launch, as (source, name expression): for ``warm``."""
    found = []
    for dt in _DTYPES:
        for mask_dtype, causal in (
            (None, False),
            (None, True),
            (bool_, False),
            (dt, False),
            (float32, False),
        ):
            for dim, tiles in ((64, 1), (64, 2), (128, 1)):
                found.append((source(), entry(dt, mask_dtype, causal, dim, tiles)))
    return found


class AttentionPlan:
    """One signature of fused attention: the output's shape and strides, the launcher."""

    __slots__ = ("device", "shape", "stride", "dtype", "nbytes", "out_sig", "run")

    def __init__(
        self,
        problem: Problem,
        dt: dtype,
        mask_dtype: dtype | None,
        causal: bool,
        device: Any,
    ) -> None:
        b, h = problem.heads
        lq, s, d = problem.rows, problem.keys, problem.dim
        self.device = device
        self.dtype = dt
        self.shape = (*problem.batch, lq, d)
        self.nbytes = b * h * lq * d * dt.itemsize
        if len(problem.batch) == 2:  # memory [B, L, H, D], as PyTorch's flash attention's
            self.stride: tuple[int, ...] = (lq * h * d, d, h * d, 1)
            o_strides = (lq * h * d, d, h * d)
        else:  # contiguous (B is 1)
            self.stride = ((lq * d, d, 1), (d, 1))[1 - len(problem.batch)]
            o_strides = (0, lq * d, d)
        self.out_sig = layout_id(dt, self.shape, self.stride, device)  # of its outputs
        mt = _rows_per_warp(problem, multiprocessors(device))
        rows_per_block = _ROWS_PER_WARP_TILE * _WARPS * mt
        packed = np.zeros((), SHAPE_DTYPE)
        packed["q"], packed["k"], packed["v"], packed["o"] = (
            problem.q,
            problem.k,
            problem.v,
            o_strides,
        )
        packed["m"] = problem.mask if problem.mask is not None else (0, 0, 0, 0)
        packed["heads"], packed["group_k"], packed["group_v"] = h, problem.group_k, problem.group_v
        packed["rows"], packed["keys"] = lq, s
        name = entry(dt, mask_dtype, causal, d, mt)
        item = dt.itemsize

        def view(strides: tuple[int, ...], heads: int, n: int) -> View:
            return View((b, heads, n, d), (*(x * item for x in strides), item), dt.np)

        views = (
            view(problem.q, h, lq),
            view(problem.k, h // problem.group_k, s),
            view(problem.v, h // problem.group_v, s),
            view(o_strides, h, lq),
            None
            if problem.mask is None
            else View(
                (b, h, lq, s),
                tuple(x * mask_dtype.itemsize for x in problem.mask),  # type: ignore[union-attr]
                mask_dtype.np,  # type: ignore[union-attr]
            ),
        )
        params = (Arg("P"), Arg("P"), Arg("P"), Arg("P"), Arg("P"), Arg("f"), packed[()])
        grid = (b * h, -(-lq // rows_per_block), 1)
        values = (causal, problem.group_k, problem.group_v)
        launch = Launch(_kernel(), name, grid, (32 * _WARPS, 1, 1), params, views, values)
        self.run = launcher(device, launch)

    def __call__(self, pq: int, pk: int, pv: int, pm: int, scale: float) -> Tensor:
        """The output of one call: ``pq``, ``pk``, ``pv`` the operands' data pointers (16-byte
        aligned: the caller checks), ``pm`` the mask's (0 for none)."""
        device = self.device
        stream = this_thread.handles[device]
        out = new_tensor(
            self.shape, self.stride, self.dtype, device, self.nbytes, stream, self.out_sig
        )
        self.run(stream, pq, pk, pv, out._storage.ptr, pm, scale)
        return out

"""Compile vram's op kernels ahead of use, in parallel, into the on-disk kernel cache.

A kernel instance is compiled by NVRTC the first time a plan needs it (a few tenths of a
second each), then loaded from the cache (vram.driver._nvrtc, Note [The kernel cache]). A
program that will use many dtypes and layouts, a container being built, or a test run on a
new GPU machine can compile them all first, on every core:

    python -m vram.ops.warm                   # every pointwise instance, for sm_90
    python -m vram.ops.warm --arch sm_80 -j 8 --dtypes float32,bfloat16

Instances of one source are compiled together, up to ``BATCH`` in one NVRTC program (its
headers parsed once: about 3.5x less time per instance than one program each), into one
image that each instance's cache entry names (``driver._nvrtc.compile_batch``).

The instances are the ones plans make: each op is planned on the simulated GPU for the
layouts a plan can take (contiguous and 16-byte vectorized, strided with 32-bit offsets,
numbers standing for operands), and what the plans would launch is compiled.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor

from .. import _dtypes
from .._device import Device
from .._factories import empty
from .._tensor import Tensor
from . import _attention
from ._activations import ACTIVATIONS
from ._math import (
    ADDCDIV,
    ADDCMUL,
    BINARY,
    CLAMP,
    ISCLOSE,
    LERP,
    LOGIT,
    NAN_TO_NUM,
    UNARY,
    WHERE,
)
from ._pointwise import COPY, FILL, PointwiseOp, plan_for
from ._promotion import kind
from ._random import _draw as _random_draw

__all__ = ["pointwise_instances", "warm", "main", "INSTANCES"]

Instance = tuple[str, str]  # (source, name expression)
_SIM = Device("sim", 0)


def _tensors(dt: _dtypes.dtype) -> tuple[Tensor, Tensor]:
    """A contiguous [64, 32] tensor and a transposed view of one (with the first, a strided
    launch; alone, a flat one in memory order)."""
    return empty(64, 32, dtype=dt, device=_SIM), empty(32, 64, dtype=dt, device=_SIM).t()


def _entries(op: PointwiseOp, operands: tuple, out: Tensor | None = None) -> set[Instance]:
    try:
        plan = plan_for(op, operands, out)
    except (RuntimeError, TypeError, NotImplementedError):  # a combination the op refuses
        return set()
    return {(launch.work.source, launch.entry) for launch in plan.launches}


def pointwise_instances(
    ops: Iterable[str] | None = None, dtypes: Iterable[str] | None = None
) -> list[Instance]:
    """The kernel instances the pointwise ops' plans launch, for ops (all by default) and
    dtypes (all by default) taken one dtype at a time, and copies between dtypes."""
    wanted_ops = set(ops) if ops is not None else None
    found_dtypes = [_dtypes.as_dtype(d) for d in dtypes] if dtypes else list(_dtypes.all_dtypes)
    found: set[Instance] = set()

    def wants(op: PointwiseOp) -> bool:
        return wanted_ops is None or op.name in wanted_ops

    for dt in found_dtypes:
        a, at = _tensors(dt)
        number = True if dt is _dtypes.bool_ else (2 if kind(dt) == 1 else 2.5)
        for op in UNARY.values():
            if wants(op) and kind(dt) in op.kinds:
                found |= _entries(op, (a,)) | _entries(op, (a[:, ::2],))
        for op in ACTIVATIONS.values():
            if wants(op) and kind(dt) in op.kinds:
                found |= _entries(op, (a,)) | _entries(op, (a[:, ::2],))
        for op in BINARY.values():
            if wants(op) and kind(dt) in op.kinds:
                for operands in ((a, a), (a, at), (a, number), (number, a)):
                    found |= _entries(op, operands)
        for op, operands in (
            (WHERE, (empty(64, 32, dtype=_dtypes.bool_, device=_SIM), a, a)),
            (CLAMP, (a, a, a)),
            (CLAMP, (a, number, number)),
            (ADDCMUL, (a, a, a)),
            (ADDCDIV, (a, a, a)),
            (LERP, (a, a, a)),
            (LERP, (a, a, number)),
            (NAN_TO_NUM, (a,)),
            (LOGIT, (a,)),
            (ISCLOSE, (a, a)),
            (ISCLOSE, (a, at)),
        ):
            if wants(op) and kind(dt) in op.kinds:
                found |= _entries(op, operands)
        if wants(FILL):
            found |= _entries(FILL, (), a) | _entries(FILL, (), at)
        if wants(COPY):
            for target in found_dtypes:
                out, out_t = _tensors(target)
                found |= _entries(COPY, (a,), out) | _entries(COPY, (at,), out)
    return sorted(found)


INSTANCES: dict[str, Callable[..., list[Instance]]] = {
    "pointwise": pointwise_instances,
    "attention": _attention.instances,
    "random": _random_draw.instances,
}

_sources: dict[int, str] = {}
BATCH = 32  # instances compiled in one NVRTC program at most (driver._nvrtc.compile_batch)


def _init(sources: list[str]) -> None:
    _sources.update(enumerate(sources))


def _compile(job: tuple[int, tuple[str, ...], str]) -> list[str]:
    """Compile a batch of one source's instances into the cache; what NVRTC said of each
    that did not compile (a batch that fails is compiled one by one, to tell which)."""
    from ..driver._nvrtc import cache_dir, compile_batch, compile_program

    index, names, arch = job
    source = _sources[index]
    if cache_dir() is not None and len(names) > 1:
        try:
            compile_batch(source, arch, names)
            return []
        except Exception:  # some instance is wrong: find which below
            pass
    errors = []
    for name in names:
        try:
            compile_program(source, arch, (name,))
        except Exception as exc:  # reported by ``warm``, the others still compiled
            errors.append(f"{name}: {exc}")
    return errors


def warm(
    instances: list[Instance],
    arch: str = "sm_90",
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Compile ``instances`` for ``arch`` on ``jobs`` processes (every core by default)
    into the kernel cache; returns how many were compiled or found there."""
    sources = sorted({source for source, _ in instances})
    numbers = {source: i for i, source in enumerate(sources)}
    entries: dict[str, list[str]] = {}
    for source, entry in dict.fromkeys(instances):
        entries.setdefault(source, []).append(entry)
    workers = jobs or os.cpu_count() or 1
    # batches of one source's entries (compile_batch), enough to keep every worker busy
    size = max(1, min(BATCH, -(-len(instances) // (4 * workers))))
    work = []
    for source, names in entries.items():
        for start in range(0, len(names), size):
            work.append((numbers[source], tuple(names[start : start + size]), arch))
    done = 0
    failed: list[str] = []
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),  # a forked CUDA process is unsafe
        initializer=_init,
        initargs=(sources,),
    ) as pool:
        for (_, names, _), errors in zip(work, pool.map(_compile, work), strict=True):
            done += len(names)
            failed += errors
            if progress is not None:
                progress(done, len(instances))
    if failed:
        raise RuntimeError(
            f"{len(failed)} of {len(instances)} kernel instances did not compile; the first:\n"
            + failed[0]
        )
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vram.ops.warm", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--arch", default="sm_90", help="the GPU architecture (sm_90 for H100)")
    parser.add_argument("-j", "--jobs", type=int, default=None, help="processes (every core)")
    parser.add_argument("--ops", default=None, help="comma-separated op names (all)")
    parser.add_argument("--dtypes", default=None, help="comma-separated dtype names (all)")
    parser.add_argument(
        "--families", default=None, help=f"comma-separated: {', '.join(INSTANCES)} (all)"
    )
    options = parser.parse_args(argv)
    try:
        families = options.families.split(",") if options.families else list(INSTANCES)
        unknown = [f for f in families if f not in INSTANCES]
        if unknown:
            raise ValueError(
                f"--families: unknown {', '.join(unknown)} (of {', '.join(INSTANCES)})"
            )
        instances = []
        for family in families:
            if family == "pointwise":
                instances += pointwise_instances(
                    options.ops.split(",") if options.ops else None,
                    options.dtypes.split(",") if options.dtypes else None,
                )
            else:
                instances += INSTANCES[family]()
        count = warm(sorted(set(instances)), options.arch, options.jobs)
    except (TypeError, ValueError, RuntimeError) as exc:
        print(f"vram.ops.warm: {exc}", file=sys.stderr)
        return 2
    print(f"{count} kernel instances compiled for {options.arch} (or found in the cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

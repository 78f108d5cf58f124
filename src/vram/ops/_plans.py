"""Plans: what an op call needs, worked out once per signature and looked up after that.

A call's signature is (op, and per operand its dtype, shape, strides and device, or the type
of a number). The first call of a signature builds a plan (the iterator's shape, dtypes and
layout, the output's strides, the kernel instance, the constant kernel parameters, the
launchers the device's driver prepared); every later call is a dict lookup, the output's
allocation, the pointers and numbers of this call packed into the prepared parameters, and
one launch. ``PLANS`` holds them (bounded: the oldest half goes when it is full).

``launcher(device, launch)`` is the one place that tells the cpu device (the reference runs
at once over host memory) from devices with a driver (``Driver.prepare``, the kernel seam);
``ask(device, query, ...)`` (a library's answer: None on the cpu, which has no libraries)
follows it; ``stream_handle(device)`` is 0 on the cpu, which has no streams.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from .._device import Device
from .._streams import this_thread
from .._tensor import new_tensor
from ..driver._work import Launch, Launcher, Query, run_on_host

__all__ = [
    "PLANS",
    "PlanCache",
    "launcher",
    "ask",
    "stream_handle",
    "new_tensor",
    "host_view",
    "MAX_PLANS",
]

MAX_PLANS = 4096  # signatures kept; past this the oldest half is dropped


class PlanCache(dict):
    """Signature -> plan, dropping the oldest half when full (plans are rebuilt on demand)."""

    def add(self, key: Any, plan: Any) -> Any:
        if len(self) >= MAX_PLANS:
            for old in list(self)[: MAX_PLANS // 2]:
                del self[old]
        self[key] = plan
        return plan


PLANS = PlanCache()


def host_view(address: int, nbytes: int) -> np.ndarray:
    """The uint8 array over ``nbytes`` of host memory at ``address`` (cpu tensors)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))


def launcher(device: Device, launch: Launch) -> Launcher:
    """``launch`` ready to run on ``device``: ``run(stream, *args)``. On cpu the reference
    runs at once (the stream is ignored); elsewhere the device's driver prepares it."""
    if device.type == "cpu":

        def run_now(stream: Any, *args: Any) -> None:
            run_on_host(launch, args, host_view)

        return run_now
    return device.driver.prepare(device.index, launch)


def ask(device: Device, query: Query, *args: Any) -> Any:
    """``query``'s answer on ``device`` (``Driver.ask``); None on cpu: no library runs there,
    and the references need no answer."""
    if device.type == "cpu":
        return None
    return device.driver.ask(device.index, query, *args)


def stream_handle(device: Device) -> int:
    """The handle of this thread's current stream on ``device`` (what a launcher takes); 0
    on cpu, whose launchers run at once (``this_thread.handles``, Note [The current handle,
    kept] in vram._streams)."""
    return this_thread.handles[device]


def cached(key: Any, build: Callable[[], Any]) -> Any:
    """The plan under ``key``, built by ``build()`` the first time."""
    plan = PLANS.get(key)
    if plan is None:
        plan = PLANS.add(key, build())
    return plan

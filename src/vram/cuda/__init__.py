"""torch.cuda's names, for code written against PyTorch: ``vram.cuda.synchronize()``,
``vram.cuda.memory_allocated()``, ``vram.cuda.Stream``, ``vram.cuda.tunable``,
``vram.cuda.manual_seed()`` (``vram.cuda.random``)...

``is_available()`` and ``device_count()`` speak of real CUDA GPUs only, as torch's do (so
``"cuda" if vram.cuda.is_available() else "cpu"`` picks the cpu on a machine without one).
Everything that takes ``device=None`` means vram's current device, which is ``cuda:N`` where
a GPU is usable and the simulated ``sim:N`` otherwise (``VRAM_DEVICE=sim`` forces it), so a
script runs unchanged on a GPU and in CI.
"""

from .._device import (
    current_device,
    get_device_name,
    get_device_properties,
    mem_get_info,
    set_device,
    synchronize,
)
from .._device import device as device
from .._device import device_count as _device_count
from .._device import is_available as is_available
from .._streams import (
    Event,
    ExternalStream,
    Stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from ..graphs import CUDAGraph, graph, graph_pool_handle, make_graphed_callables
from ..memory import (
    MemPool,
    caching_allocator_alloc,
    caching_allocator_delete,
    empty_cache,
    get_allocator_backend,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
)
from . import random, tunable
from .random import (
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)

__all__ = [
    "CUDAGraph",
    "Event",
    "ExternalStream",
    "MemPool",
    "Stream",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_allocator_backend",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "graph",
    "graph_pool_handle",
    "initial_seed",
    "is_available",
    "make_graphed_callables",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "random",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "tunable",
    "use_mem_pool",
]


def device_count() -> int:
    """How many CUDA GPUs are usable (0 without one), as torch.cuda.device_count()."""
    return _device_count("cuda")

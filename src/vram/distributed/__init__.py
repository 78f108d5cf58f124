"""torch.distributed's names and semantics on vram: collectives over NCCL between GPUs
(one process per GPU), and over a local transport between simulated GPUs.

Start N processes with ``python -m vram.distributed.run --nproc N script.py ARGS``
(torchrun's environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT); in the
script, ``init_process_group()`` joins the group on device ``cuda:LOCAL_RANK`` (or
``sim:LOCAL_RANK``).
"""

from ._collectives import (
    ReduceOp,
    Work,
    all_gather_into_tensor,
    all_reduce,
    barrier,
    broadcast,
    reduce_scatter_tensor,
)
from ._group import (
    ProcessGroup,
    default_group,
    destroy_process_group,
    get_backend,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
)

__all__ = [
    "ProcessGroup",
    "ReduceOp",
    "Work",
    "all_gather_into_tensor",
    "all_reduce",
    "barrier",
    "broadcast",
    "default_group",
    "destroy_process_group",
    "get_backend",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_initialized",
    "reduce_scatter_tensor",
]

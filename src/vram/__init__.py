"""vram: PyTorch's CUDA backend rebuilt in Python: streams, events, tensors and a
stream-aware caching allocator, on real NVIDIA GPUs (``cuda:N``) and a simulated GPU
(``sim:N``) that runs everywhere."""

# the subpackages: importing them fills the dispatch table
from . import aoti, backends, blas, cuda, graphs, linalg, memory, nn, ops, optim, sim
from ._device import (
    Device,
    current_device,
    default_device,
    device,
    device_count,
    get_device_name,
    get_device_properties,
    is_available,
    mem_get_info,
    set_device,
    synchronize,
)
from ._dtypes import (
    bfloat16,
    bool_,
    complex64,
    complex128,
    double,
    dtype,
    float16,
    float32,
    float64,
    half,
    int8,
    int16,
    int32,
    int64,
    long,
    short,
    uint8,
)
from ._dtypes import bool_ as bool  # noqa: A004 - torch.bool
from ._errors import CudaError, OutOfMemoryError
from ._factories import *  # noqa: F403
from ._interop import from_dlpack
from ._streams import (
    Event,
    ExternalStream,
    Stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
from ._tensor import Tensor
from .blas import addmm, baddbmm, bmm, matmul, mm
from .graphs import (
    CUDAGraph,
    graph,
    graph_pool_handle,
    is_current_stream_capturing,
    make_graphed_callables,
)
from .memory import (
    MemPool,
    caching_allocator_alloc,
    caching_allocator_delete,
    empty_cache,
    get_allocator_backend,
    get_allocator_settings,
    get_per_process_memory_fraction,
    host_empty_cache,
    host_memory_stats,
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
    set_allocator_settings,
    set_per_process_memory_fraction,
    use_mem_pool,
)
from .ops import return_types
from .ops._advanced import index_put
from .ops._composite import (
    diag,
    diag_embed,
    diagonal,
    einsum,
    flip,
    fliplr,
    flipud,
    ger,
    outer,
    roll,
    tensordot,
    trace,
)
from .ops._creation import empty_like, eye, full_like, linspace, logspace, ones_like, zeros_like
from .ops._foreach import *  # noqa: F403 - PyTorch's vram._foreach_* ops
from .ops._indexing import gather, index_select, masked_fill, scatter, scatter_add
from .ops._math import (  # noqa: A004 - torch's names (abs, pow, round) shadow builtins
    abs,
    add,
    addcdiv,
    addcmul,
    atan2,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    ceil,
    clamp,
    clip,
    cos,
    div,
    eq,
    erf,
    exp,
    exp2,
    expm1,
    floor,
    floor_divide,
    fmod,
    ge,
    gt,
    isfinite,
    isinf,
    isnan,
    le,
    lerp,
    log,
    log1p,
    log2,
    log10,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    lt,
    maximum,
    minimum,
    mul,
    nan_to_num,
    ne,
    neg,
    pow,
    reciprocal,
    relu,
    remainder,
    round,
    rsqrt,
    rsub,
    sigmoid,
    sign,
    sin,
    sqrt,
    sub,
    tan,
    tanh,
    true_divide,
    trunc,
    where,
)
from .ops._nonzero import argwhere, masked_select, nonzero
from .ops._promotion import (
    can_cast,
    get_default_dtype,
    promote_types,
    result_type,
    set_default_dtype,
)
from .ops._random import (  # random numbers: Philox generators as PyTorch's CUDA one
    Generator,
    bernoulli,
    get_rng_state,
    initial_seed,
    manual_seed,
    normal,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    seed,
    set_rng_state,
)
from .ops._reductions import (  # noqa: A004 - torch's names (sum, max, all) shadow builtins
    all,
    amax,
    amin,
    aminmax,
    any,
    argmax,
    argmin,
    logsumexp,
    max,
    mean,
    min,
    norm,
    prod,
    std,
    std_mean,
    sum,
    var,
    var_mean,
)
from .ops._scan import cumprod, cumsum
from .ops._shapes import (
    cat,
    chunk,
    concat,
    concatenate,
    flatten,
    moveaxis,
    movedim,
    narrow,
    permute,
    reshape,
    select,
    split,
    squeeze,
    stack,
    swapaxes,
    swapdims,
    t,
    tile,
    transpose,
    tril,
    triu,
    unbind,
    unflatten,
    unsqueeze,
)
from .ops._softmax import log_softmax, softmax

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """``vram.tools`` (the memory doctor, the viewer, replay) is imported on first use, not
    with vram: running GPU work does not need it."""
    if name == "tools":
        import importlib

        return importlib.import_module(".tools", __name__)
    raise AttributeError(f"module 'vram' has no attribute {name!r}")

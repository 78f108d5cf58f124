"""vram: PyTorch's CUDA backend rebuilt in Python: streams, events, tensors and a
stream-aware caching allocator, on real NVIDIA GPUs (``cuda:N``) and a simulated GPU
(``sim:N``) that runs everywhere."""

from . import memory, sim
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
from ._errors import CudaError, OutOfMemoryError
from ._streams import Event, Stream, current_stream, default_stream, set_stream, stream
from ._tensor import *  # noqa: F403
from . import ops  # noqa: E402  (ops sit above tensors)

__version__ = "0.1.0"

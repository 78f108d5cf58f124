"""The library calls vram.linalg makes, for each kind of device: one interface, two devices.

- ``CudaLibs`` (``_cuda_libs``): cuSOLVER, cuBLAS's batched LU and vram's helper kernels.
- ``SimLibs`` (``_sim_libs``): the same calls on the simulated GPU, in NumPy, queued.

So the dispatch above (``_lu``, ``_solve``) is one piece of code for both devices: its
workspaces, streams, events and pointer arrays are exercised in CI exactly as on a GPU.
"""

from __future__ import annotations

from ._sim_libs import SimLibs

__all__ = ["libs_for"]

_cuda_libs = None
_sim_libs = SimLibs()


def libs_for(device_type: str):
    """The libraries of a device type ("cuda" or "sim")."""
    global _cuda_libs
    if device_type == "sim":
        return _sim_libs
    if _cuda_libs is None:
        from ._cuda_libs import CudaLibs

        _cuda_libs = CudaLibs()
    return _cuda_libs

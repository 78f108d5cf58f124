"""Exceptions that vram raises, named and typed like PyTorch's where PyTorch has one."""

from __future__ import annotations

__all__ = ["CudaError", "OutOfMemoryError", "DeferredCudaError"]


class CudaError(RuntimeError):
    """A call into CUDA (or the simulated GPU) failed.

    ``call`` names the function that failed, ``name`` the CUDA error name
    (``CUDA_ERROR_OUT_OF_MEMORY``, ``NVRTC_ERROR_COMPILATION``, ...).
    """

    def __init__(self, call: str, name: str, detail: str = "") -> None:
        self.call = call
        self.name = name
        self.detail = detail
        message = f"{call} failed: {name}"
        if detail:
            message += f"\n{detail}"
        super().__init__(message)

    @property
    def is_out_of_memory(self) -> bool:
        return self.name in ("CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation")

    def __reduce__(self) -> tuple:
        return type(self), (self.call, self.name, self.detail)


class OutOfMemoryError(RuntimeError):
    """The caching allocator could not satisfy a request (PyTorch's torch.OutOfMemoryError).

    ``report``: why, as a ``vram.memory.MemoryReport`` built when the error was raised
    (``print(error.report)``); None when the error did not come from a caching allocator.
    """

    report = None


class DeferredCudaError(CudaError):
    """Work queued on a simulated stream failed when it ran; raised at the next synchronize."""

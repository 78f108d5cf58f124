"""What the vram.aoti tests share: ctypes helpers that call the shim library's C entry
points as a model does, and the values of the stand-in model (fake_model.c)."""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_int32, c_int64, c_void_p

import numpy as np

import vram
from vram.aoti import shim
from vram.aoti._tensors import TensorDesc

F16, BF16, F32, F64, I32, I64 = 5, 15, 6, 7, 3, 4  # c10::ScalarType codes
CPU, CUDA = 0, 1  # c10::DeviceType codes
K, N, P = 8, 6, 4  # fake_model.c's sizes


class Shims:
    """The library's entry points with their C types, and helpers over handles."""

    def __init__(self) -> None:
        self.shim = shim("sim")
        self.lib = self.shim.lib
        h, hp, i64p = c_void_p, POINTER(c_void_p), POINTER(c_int64)
        self.types = {
            "aoti_torch_get_dim": [h, i64p],
            "aoti_torch_get_numel": [h, i64p],
            "aoti_torch_get_sizes": [h, POINTER(i64p)],
            "aoti_torch_get_strides": [h, POINTER(i64p)],
            "aoti_torch_get_size": [h, c_int64, i64p],
            "aoti_torch_get_stride": [h, c_int64, i64p],
            "aoti_torch_get_dtype": [h, POINTER(c_int32)],
            "aoti_torch_get_device_type": [h, POINTER(c_int32)],
            "aoti_torch_get_device_index": [h, POINTER(c_int32)],
            "aoti_torch_get_storage_offset": [h, i64p],
            "aoti_torch_get_storage_size": [h, i64p],
            "aoti_torch_get_data_ptr": [h, hp],
            "aoti_torch_is_contiguous": [h, POINTER(ctypes.c_bool)],
            "aoti_torch_is_defined": [h, POINTER(ctypes.c_bool)],
            "aoti_torch__reinterpret_tensor": [h, c_int64, i64p, i64p, c_int64, hp],
            "aoti_torch__alloc_from_pool": [h, c_int64, c_int32, c_int64, i64p, i64p, hp],
            "aoti_torch_as_strided": [h, i64p, i64p, hp],
            "aoti_torch_new_tensor_handle": [h, hp],
            "aoti_torch_new_uninitialized_tensor": [hp],
            "aoti_torch_assign_tensors": [h, h],
            "aoti_torch_assign_tensors_out": [h, hp],
            "aoti_torch_copy_": [h, h, c_int32],
            "aoti_torch_zero_": [h],
            "aoti_torch_clone": [h, hp],
            "aoti_torch_clone_preserve_strides": [h, hp],
            "aoti_torch_item_float32": [h, POINTER(ctypes.c_float)],
            "aoti_torch_scalar_to_tensor_float64": [ctypes.c_double, hp],
            "aoti_torch_cuda_mm_out": [h, h, h],
            "aoti_torch_cuda_bmm_out": [h, h, h],
            "aoti_torch_cuda_addmm_out": [h, h, h, h, ctypes.c_double, ctypes.c_double],
            "aoti_torch_cuda_baddbmm_out": [h, h, h, h, ctypes.c_double, ctypes.c_double],
            "aoti_torch_cpu_mm_out": [h, h, h],
            "aoti_torch_create_cuda_guard": [c_int32, hp],
            "aoti_torch_delete_cuda_guard": [h],
            "aoti_torch_create_cuda_stream_guard": [h, c_int32, hp],
            "aoti_torch_delete_cuda_stream_guard": [h],
            "aoti_torch_get_current_cuda_stream": [c_int32, hp],
            "aoti_torch_get_current_device_index": [POINTER(c_int32)],
            "aoti_torch_check": [ctypes.c_bool, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32]
            + [ctypes.c_char_p],
        }
        for name, argtypes in self.types.items():
            function = getattr(self.lib, name)
            function.argtypes = argtypes
            function.restype = None if name == "aoti_torch_check" else c_int32

    def __getattr__(self, name: str):
        return getattr(self.lib, name)

    def error(self) -> str:
        return self.shim.error()

    def empty(self, shape, dtype=F32, device_type=CUDA, strides=None) -> int:
        n = len(shape)
        if strides is None:
            strides = [int(s) for s in np.cumprod((list(shape[1:]) + [1])[::-1])[::-1]]
        out = c_void_p()
        result = self.lib.aoti_torch_empty_strided(
            n, (c_int64 * n)(*shape), (c_int64 * n)(*strides), dtype, device_type, 0, byref(out)
        )
        assert result == 0, self.error()
        return out.value

    def view(self, handle: int, shape, strides, offset_increment: int = 0) -> int:
        n = len(shape)
        out = c_void_p()
        result = self.lib.aoti_torch__reinterpret_tensor(
            handle, n, (c_int64 * n)(*shape), (c_int64 * n)(*strides), offset_increment,
            byref(out),
        )  # fmt: skip
        assert result == 0, self.error()
        return out.value

    def tensor(self, handle: int) -> vram.Tensor:
        """A borrowed vram tensor over a handle's memory."""
        desc = TensorDesc()
        assert self.lib.vram_aoti_describe(handle, byref(desc)) == 0, self.error()
        return self.shim.tensors([desc])[0]

    def fill(self, handle: int, values: np.ndarray) -> None:
        t = self.tensor(handle)
        t.copy_(vram.tensor(values, dtype=t.dtype, device=t.device))

    def read(self, handle: int) -> np.ndarray:
        return self.tensor(handle).numpy()

    def delete(self, *handles: int) -> None:
        for handle in handles:
            assert self.lib.aoti_torch_delete_tensor_object(handle) == 0, self.error()

    def live(self) -> int:
        return self.shim.live_tensors()


def fake_weights() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """fake_model.c's constants W [N, K], b [N], W2 [N, P]."""
    i = np.arange(N * K)
    w = (((i // K) * 7 + (i % K) * 3) % 11 - 5) / 8
    b = (np.arange(N) % 5 - 2) / 4
    j = np.arange(N * P)
    w2 = ((j // P + 2 * (j % P)) % 7 - 3) / 4
    return (
        w.reshape(N, K).astype(np.float32),
        b.astype(np.float32),
        w2.reshape(N, P).astype(np.float32),
    )


def fake_reference(x: np.ndarray) -> np.ndarray:
    w, b, w2 = fake_weights()
    return (x @ w.T + b) @ w2

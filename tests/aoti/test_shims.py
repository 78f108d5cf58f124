"""The shim library's C entry points, called through ctypes as a model calls them, on the
simulated GPU: tensors made, viewed, queried and freed; the GEMM fallbacks against NumPy;
guards and streams; and bad input, which is an error code and a message, never a crash."""

from __future__ import annotations

import ctypes
from ctypes import byref, c_int32, c_int64, c_void_p

import ml_dtypes
import numpy as np
import pytest
from aoti_helpers import BF16, CPU, CUDA, F16, F32, I32

import vram

MEMORY = vram.Device("sim", 0)


class Complex64(ctypes.Structure):  # c10::complex<float>
    _fields_ = [("re", ctypes.c_float), ("im", ctypes.c_float)]


def allocated() -> int:
    return vram.memory.memory_allocated(MEMORY)


# ---------------------------------------------------------------- making and querying tensors
def test_empty_strided_is_vram_memory_and_its_attributes_read_back(shims):
    base = allocated()
    h = shims.empty((2, 3), strides=(1, 2))  # a column-major [2, 3]
    assert allocated() - base == 512  # 24 bytes from vram's caching allocator (rounded)
    dim, numel, offset, nbytes = c_int64(), c_int64(), c_int64(), c_int64()
    dtype, device_type, index = c_int32(), c_int32(), c_int32()
    sizes, strides = ctypes.POINTER(c_int64)(), ctypes.POINTER(c_int64)()
    contiguous, defined = ctypes.c_bool(), ctypes.c_bool()
    for name, out in [
        ("get_dim", dim), ("get_numel", numel), ("get_storage_offset", offset),
        ("get_storage_size", nbytes), ("get_dtype", dtype), ("get_device_type", device_type),
        ("get_device_index", index), ("get_sizes", sizes), ("get_strides", strides),
        ("is_contiguous", contiguous), ("is_defined", defined),
    ]:  # fmt: skip
        assert getattr(shims, f"aoti_torch_{name}")(h, byref(out)) == 0, shims.error()
    assert (dim.value, numel.value, offset.value, nbytes.value) == (2, 6, 0, 24)
    assert (dtype.value, device_type.value, index.value) == (F32, CUDA, 0)
    assert (sizes[0], sizes[1], strides[0], strides[1]) == (2, 3, 1, 2)
    assert (contiguous.value, defined.value) == (False, True)
    size = c_int64()
    assert shims.aoti_torch_get_size(h, -1, byref(size)) == 0 and size.value == 3
    shims.delete(h)
    assert allocated() == base


def test_views_share_their_storage_until_the_last_goes(shims):
    base = allocated()
    pool = shims.empty((16,))
    shims.fill(pool, np.arange(16, dtype=np.float32))
    middle = shims.view(pool, (2, 2), (4, 1), offset_increment=5)  # elements 5, 6, 9, 10
    inner = shims.view(middle, (2,), (1,), offset_increment=4)  # adds to middle's offset: 9, 10
    carved, strided = c_void_p(), c_void_p()
    one, two = (c_int64 * 1)(3), (c_int64 * 1)(1)
    assert shims.aoti_torch__alloc_from_pool(pool, 32, F32, 1, one, two, byref(carved)) == 0
    assert shims.aoti_torch_as_strided(middle, (c_int64 * 2)(2, 2), (c_int64 * 2)(1, 4),
                                       byref(strided)) == 0  # fmt: skip
    shims.delete(pool)  # the views keep the memory
    assert allocated() - base == 512
    np.testing.assert_array_equal(shims.read(middle), [[5, 6], [9, 10]])
    np.testing.assert_array_equal(shims.read(inner), [9, 10])
    np.testing.assert_array_equal(shims.read(carved.value), [8, 9, 10])
    np.testing.assert_array_equal(shims.read(strided.value), [[5, 9], [6, 10]])
    pointers = []
    for h in (middle, inner):
        ptr = c_void_p()
        assert shims.aoti_torch_get_data_ptr(h, byref(ptr)) == 0
        pointers.append(ptr.value)
    assert pointers[1] - pointers[0] == 4 * 4
    shims.delete(middle, inner, carved.value, strided.value)
    assert allocated() == base


def test_handles_alias_and_assign(shims):
    a, b = shims.empty((3,)), shims.empty((2, 2))
    shims.fill(a, np.array([1, 2, 3], np.float32))
    alias, out = c_void_p(), c_void_p()
    assert shims.aoti_torch_new_tensor_handle(a, byref(alias)) == 0
    assert shims.aoti_torch_assign_tensors_out(a, byref(out)) == 0
    assert shims.aoti_torch_assign_tensors(a, b) == 0  # b now views what a views
    for h in (alias.value, out.value, b):
        np.testing.assert_array_equal(shims.read(h), [1, 2, 3])
    undefined = c_void_p()
    assert shims.aoti_torch_new_uninitialized_tensor(byref(undefined)) == 0
    defined = ctypes.c_bool(True)
    assert shims.aoti_torch_is_defined(undefined, byref(defined)) == 0 and not defined.value
    shims.delete(a, b, alias.value, out.value, undefined.value)


def test_from_blob_borrows_memory_it_never_frees(shims):
    owner = vram.tensor(np.arange(6, dtype=np.float32), device=MEMORY)
    base = allocated()
    h = shims.shim.handle(owner[2:].view(2, 2))
    np.testing.assert_array_equal(shims.read(h), [[2, 3], [4, 5]])
    shims.delete(h)
    assert allocated() == base
    np.testing.assert_array_equal(owner.numpy(), np.arange(6))


def test_copy_zero_clone_item_and_scalars(shims):
    src = shims.empty((2, 3))
    shims.fill(src, np.arange(6, dtype=np.float32).reshape(2, 3))
    column = shims.view(src, (2, 1), (3, 1), offset_increment=1)  # [[1], [4]]
    dst = shims.empty((2, 1), dtype=F16)
    assert shims.aoti_torch_copy_(dst, column, 0) == 0, shims.error()  # casts
    np.testing.assert_array_equal(shims.read(dst), [[1], [4]])
    clone, kept = c_void_p(), c_void_p()
    assert shims.aoti_torch_clone(column, byref(clone)) == 0, shims.error()
    assert shims.aoti_torch_clone_preserve_strides(column, byref(kept)) == 0, shims.error()
    strides = ctypes.POINTER(c_int64)()
    assert shims.aoti_torch_get_strides(kept, byref(strides)) == 0 and strides[0] == 3
    assert shims.aoti_torch_zero_(column) == 0, shims.error()
    np.testing.assert_array_equal(shims.read(src), [[0, 0, 2], [3, 0, 5]])
    np.testing.assert_array_equal(shims.read(clone.value), [[1], [4]])
    np.testing.assert_array_equal(shims.read(kept.value), [[1], [4]])
    value = ctypes.c_float()
    one = shims.view(src, (), (), offset_increment=5)
    assert shims.aoti_torch_item_float32(one, byref(value)) == 0 and value.value == 5.0
    scalar = c_void_p()
    assert shims.aoti_torch_scalar_to_tensor_float64(2.5, byref(scalar)) == 0
    device_type = c_int32()
    assert shims.aoti_torch_get_device_type(scalar, byref(device_type)) == 0
    assert device_type.value == CPU and shims.read(scalar.value) == 2.5
    complex_value, back = Complex64(1.5, -2.0), Complex64()
    make, read = (
        shims.lib.aoti_torch_scalar_to_tensor_complex64,
        shims.lib.aoti_torch_item_complex64,
    )
    make.argtypes, read.argtypes = (
        [Complex64, ctypes.POINTER(c_void_p)],
        [c_void_p, ctypes.c_void_p],
    )
    complex_scalar = c_void_p()
    assert make(complex_value, byref(complex_scalar)) == 0, shims.error()
    assert read(complex_scalar, ctypes.addressof(back)) == 0, shims.error()
    assert (back.re, back.im) == (1.5, -2.0)
    shims.delete(src, column, dst, clone.value, kept.value, one, scalar.value, complex_scalar.value)


# ----------------------------------------------------------------------- GEMMs against NumPy
TOLERANCE = {F32: 1e-5, F16: 2e-3, BF16: 1.6e-2}
NUMPY = {F32: np.float32, F16: np.float16, BF16: ml_dtypes.bfloat16}


def _operands(shims, rng, dtype, *shapes):
    handles, arrays = [], []
    for shape in shapes:
        a = rng.standard_normal(shape).astype(NUMPY[dtype])
        h = shims.empty(shape, dtype=dtype)
        shims.fill(h, a)
        handles.append(h)
        arrays.append(a.astype(np.float32))
    return handles, arrays


def _check(shims, out, expected, dtype):
    got = shims.read(out).astype(np.float32)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, atol=TOLERANCE[dtype] * scale, rtol=0)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_mm_addmm_bmm_baddbmm_out_match_numpy(shims, dtype):
    rng = np.random.default_rng(dtype)
    (a, w, bias, x3, y3, c3), (an, wn, biasn, x3n, y3n, c3n) = _operands(
        shims, rng, dtype, (5, 7), (4, 7), (4,), (3, 5, 7), (3, 7, 2), (3, 1, 2)
    )
    w_t = shims.view(w, (7, 4), (1, 7))  # a transposed view, as a Linear's weight is passed
    out, out3 = shims.empty((5, 4), dtype=dtype), shims.empty((3, 5, 2), dtype=dtype)
    assert shims.aoti_torch_cuda_mm_out(out, a, w_t) == 0, shims.error()
    _check(shims, out, an @ wn.T, dtype)
    assert shims.aoti_torch_cuda_addmm_out(out, bias, a, w_t, 0.5, 2.0) == 0, shims.error()
    _check(shims, out, 0.5 * biasn + 2.0 * (an @ wn.T), dtype)
    assert shims.aoti_torch_cuda_bmm_out(out3, x3, y3) == 0, shims.error()
    _check(shims, out3, x3n @ y3n, dtype)
    assert shims.aoti_torch_cuda_baddbmm_out(out3, c3, x3, y3, 1.0, 1.0) == 0, shims.error()
    _check(shims, out3, c3n + x3n @ y3n, dtype)
    shims.delete(a, w, bias, x3, y3, c3, w_t, out, out3)


def test_addmm_out_in_place_over_its_bias(shims):
    rng = np.random.default_rng(1)
    (acc, a, b), (accn, an, bn) = _operands(shims, rng, F32, (3, 3), (3, 4), (4, 3))
    assert shims.aoti_torch_cuda_addmm_out(acc, acc, a, b, 1.0, 1.0) == 0, shims.error()
    _check(shims, acc, accn + an @ bn, F32)
    shims.delete(acc, a, b)


def test_mm_plus_mm_out_matches_numpy(shims):
    rng = np.random.default_rng(2)
    handles, (an, bn, cn, dn) = _operands(shims, rng, F32, (3, 4), (4, 5), (3, 2), (2, 5))
    out = shims.empty((3, 5))
    mm_plus_mm = shims.lib.aoti_torch__mm_plus_mm_out
    mm_plus_mm.argtypes = [c_void_p] * 5
    assert mm_plus_mm(out, *handles) == 0, shims.error()
    _check(shims, out, an @ bn + cn @ dn, F32)
    shims.delete(out, *handles)


def test_cpu_mm_out_runs_on_host_memory(shims):
    a, b, out = (shims.empty(s, device_type=CPU) for s in ((2, 3), (3, 2), (2, 2)))
    shims.fill(a, np.arange(6, dtype=np.float32).reshape(2, 3))
    shims.fill(b, np.ones((3, 2), np.float32))
    assert shims.aoti_torch_cpu_mm_out(out, a, b) == 0, shims.error()
    np.testing.assert_array_equal(shims.read(out), [[3, 3], [12, 12]])
    shims.delete(a, b, out)


# ------------------------------------------------------------------------- guards and streams
def test_the_current_stream_is_vrams_unless_a_guard_says_otherwise(shims):
    stream = c_void_p()
    assert shims.aoti_torch_get_current_cuda_stream(0, byref(stream)) == 0
    assert (stream.value or 0) == vram.current_stream(MEMORY).cuda_stream
    side = vram.Stream(MEMORY)
    with vram.stream(side):
        assert shims.aoti_torch_get_current_cuda_stream(0, byref(stream)) == 0
        assert stream.value == side.cuda_stream
    first, second = vram.Stream(MEMORY).cuda_stream, vram.Stream(MEMORY).cuda_stream
    outer, inner = c_void_p(), c_void_p()
    assert shims.aoti_torch_create_cuda_stream_guard(first, 0, byref(outer)) == 0
    assert shims.aoti_torch_create_cuda_stream_guard(second, 0, byref(inner)) == 0
    assert shims.aoti_torch_get_current_cuda_stream(0, byref(stream)) == 0
    assert stream.value == second
    h = shims.empty((4,))  # allocated on the guard's stream
    assert shims.aoti_torch_delete_cuda_stream_guard(inner) == 0
    assert shims.aoti_torch_get_current_cuda_stream(0, byref(stream)) == 0
    assert stream.value == first
    assert shims.aoti_torch_delete_cuda_stream_guard(outer) == 0
    assert shims.aoti_torch_get_current_cuda_stream(0, byref(stream)) == 0
    assert (stream.value or 0) == vram.current_stream(MEMORY).cuda_stream
    allocator = vram.memory.allocator_for(MEMORY)
    block = allocator._live_block(shims.tensor(h).data_ptr(), "test")
    assert block.segment.stream == second
    shims.delete(h)


def test_a_device_guard_switches_vrams_device_and_back(shims):
    guard, index = c_void_p(), c_int32()
    assert shims.aoti_torch_create_cuda_guard(1, byref(guard)) == 0, shims.error()
    assert vram.current_device() == 1 and vram._device.current_device_obj().type == "sim"
    assert shims.aoti_torch_get_current_device_index(byref(index)) == 0 and index.value == 1
    assert shims.aoti_torch_delete_cuda_guard(guard) == 0
    assert vram.current_device() == 0


# ------------------------------------------------------------ bad input: a code and a message
def _fresh(shims):
    return {"a": shims.empty((2, 3)), "b": shims.empty((3, 4)), "out": shims.empty((2, 4))}


BAD_CALLS = [
    ("NULL handle", lambda s, t: s.aoti_torch_cuda_mm_out(t["out"], None, t["b"]),
     "'self'): the tensor handle is NULL"),
    ("freed handle", lambda s, t: s.aoti_torch_cuda_mm_out(t["out"], t["freed"], t["b"]),
     "not a live tensor handle"),
    ("foreign pointer", lambda s, t: s.aoti_torch_cuda_mm_out(t["out"], t["bytes"], t["b"]),
     "not a live tensor handle"),
    ("a guard as a tensor", lambda s, t: s.aoti_torch_get_dim(t["guard"], byref(c_int64())),
     "not a live tensor handle"),
    ("wrong dtype", lambda s, t: s.aoti_torch_cuda_mm_out(t["iout"], t["ia"], t["ib"]),
     "dtype code 3; matrix products support"),
    ("mixed dtypes", lambda s, t: s.aoti_torch_cuda_mm_out(t["out"], t["a"], t["hb"]),
     "expected one dtype, but 'mat2' is float16"),
    ("inner mismatch", lambda s, t: s.aoti_torch_cuda_mm_out(t["out"], t["a"], t["a"]),
     "shapes cannot be multiplied (inner dimensions 3 and 2)"),
    ("out shape", lambda s, t: s.aoti_torch_cuda_mm_out(t["a"], t["a"], t["b"]),
     "'out' must have shape [2, 4]"),
    ("rank", lambda s, t: s.aoti_torch_cuda_bmm_out(t["out"], t["a"], t["b"]),
     "'self' must be 3-D, got 2-D"),
    ("bias", lambda s, t: s.aoti_torch_cuda_addmm_out(t["out"], t["a"], t["a"], t["b"], 1, 1),
     "'self' cannot be broadcast to the result"),
    ("host tensor", lambda s, t: s.aoti_torch_cuda_mm_out(t["out"], t["host"], t["b"]),
     "is on device type 0, not cuda"),
    ("out over an input", lambda s, t: s.aoti_torch_cuda_mm_out(t["overlap"], t["sq"], t["sq"]),
     "share memory"),
    ("undefined", lambda s, t: s.aoti_torch_get_data_ptr(t["undefined"], byref(c_void_p())),
     "the tensor is undefined"),
    ("view past its storage", lambda s, t: s.aoti_torch__reinterpret_tensor(
        t["a"], 1, (c_int64 * 1)(7), (c_int64 * 1)(1), 0, byref(c_void_p())),
     "reaches byte 28 of a storage of 24 bytes"),
    ("pool offset", lambda s, t: s.aoti_torch__alloc_from_pool(
        t["a"], 2, F32, 1, (c_int64 * 1)(1), (c_int64 * 1)(1), byref(c_void_p())),
     "not a multiple of the dtype's 4 bytes"),
    ("negative size", lambda s, t: s.aoti_torch_empty_strided(
        1, (c_int64 * 1)(-1), (c_int64 * 1)(1), F32, CUDA, 0, byref(c_void_p())),
     "has size -1"),
    ("unknown dtype", lambda s, t: s.aoti_torch_empty_strided(
        1, (c_int64 * 1)(1), (c_int64 * 1)(1), 99, CUDA, 0, byref(c_void_p())),
     "99 is not a dtype code"),
    ("device type", lambda s, t: s.aoti_torch_empty_strided(
        1, (c_int64 * 1)(1), (c_int64 * 1)(1), F32, 13, 0, byref(c_void_p())),
     "device type 13 is not supported"),
    ("guard as guard twice", lambda s, t: s.aoti_torch_delete_cuda_guard(t["freed"]),
     "is not a live guard"),
]  # fmt: skip


@pytest.mark.parametrize("case", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_calls_return_an_error_and_a_message(shims, case):
    _, call, expected = case
    t = _fresh(shims)
    t["ia"], t["ib"], t["iout"] = (shims.empty(s, dtype=I32) for s in ((2, 3), (3, 4), (2, 4)))
    t["hb"] = shims.empty((3, 4), dtype=F16)
    t["host"] = shims.empty((2, 3), device_type=CPU)
    t["sq"] = shims.empty((2, 2))
    t["overlap"] = shims.view(t["sq"], (2, 2), (2, 1))
    undefined, guard = c_void_p(), c_void_p()
    assert shims.aoti_torch_new_uninitialized_tensor(byref(undefined)) == 0
    t["undefined"] = undefined.value
    assert shims.aoti_torch_create_cuda_guard(0, byref(guard)) == 0
    t["guard"] = guard.value
    scratch = ctypes.create_string_buffer(256)  # plausible memory that is no handle
    t["bytes"] = ctypes.addressof(scratch)
    t["freed"] = shims.empty((1,))  # freed last: no later handle can take its address
    shims.delete(t["freed"])
    live = shims.live()
    assert call(shims, t) == 1
    assert expected in shims.error()
    assert shims.live() == live  # a failed call makes no handle
    assert shims.aoti_torch_delete_cuda_guard(guard) == 0
    shims.delete(*(v for k, v in t.items() if k not in ("freed", "guard", "bytes")))


def test_out_of_memory_is_an_error(shims):
    vram.sim.inject_malloc_failure(above_bytes=0)
    out = c_void_p()
    with pytest.warns(RuntimeWarning, match="alloc of 4096 bytes failed: OutOfMemoryError"):
        result = shims.aoti_torch_empty_strided(
            1, (c_int64 * 1)(1024), (c_int64 * 1)(1), F32, CUDA, 0, byref(out)
        )
    assert result == 1
    assert "could not allocate 4096 bytes on device 0 (a RuntimeWarning says why)" in shims.error()


def test_a_failed_check_outside_a_model_records_its_message(shims):
    shims.aoti_torch_check(False, b"fn", b"file.cpp", 7, b"x must be positive")
    assert shims.error() == "check failed in fn (file.cpp:7): x must be positive"
    shims.aoti_torch_check(True, b"fn", b"file.cpp", 8, b"fine")
    assert "file.cpp:7" in shims.error()  # a passing check changes nothing

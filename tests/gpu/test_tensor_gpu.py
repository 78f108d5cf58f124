"""Tensors and elementwise NVRTC kernels on a real GPU, and zero-copy interop with PyTorch
and CuPy (each skipped where it is not installed)."""

from __future__ import annotations

import numpy as np
import pytest

import vram
from vram._dtypes import all_dtypes
from vram.driver import cuda_usable

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_usable(), reason="no CUDA GPU")]

CUDA = "cuda:0"
UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}
OPERATORS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}
SUPPORTED = {  # op -> the dtypes whose result keeps them (div makes integers float)
    "add": set(all_dtypes),
    "sub": set(all_dtypes) - {vram.bool_},
    "mul": set(all_dtypes),
    "div": {dt for dt in all_dtypes if dt.is_floating_point or dt.is_complex},
}
CASES = [(op, dt) for op in UFUNCS for dt in all_dtypes if dt in SUPPORTED[op]]
IDS = [f"{op}-{dt.name}" for op, dt in CASES]


def random(dt: vram.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Fresh random data each run (the seed is printed on failure through the values)."""
    rng = np.random.default_rng()
    if dt == vram.bool_:
        return rng.random(shape) > 0.5
    if dt.is_complex:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt.np)
    if dt.is_floating_point:
        return (rng.random(shape) * 4 + 0.5).astype(dt.np)
    info = np.iinfo(dt.np)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt.np)


def opmath(dt: vram.dtype) -> np.dtype:
    return np.dtype(np.float32) if dt in (vram.float16, vram.bfloat16) else dt.np


def expected(op: str, a: np.ndarray, b: np.ndarray, dt: vram.dtype) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(UFUNCS[op](a.astype(opmath(dt)), b.astype(opmath(dt)))).astype(dt.np)


def check(got: np.ndarray, want: np.ndarray, dt: vram.dtype) -> None:
    assert got.dtype == want.dtype
    if dt.np.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:  # complex division may differ from NumPy's by a few ulps
        rtol = 1e-5 if dt.is_complex and dt.itemsize == 8 else 1e-12 if dt.is_complex else 0
        np.testing.assert_allclose(got.astype(np.complex128), want.astype(np.complex128), rtol=rtol)


# ---- elementwise kernels -----------------------------------------------------------------


@pytest.mark.parametrize(("op", "dt"), CASES, ids=IDS)
def test_tensor_op_tensor_matches_numpy(op, dt):
    a, b = random(dt, (257, 33)), random(dt, (257, 33))
    result = OPERATORS[op](vram.tensor(a, device=CUDA), vram.tensor(b, device=CUDA))
    assert result.device == vram.device(CUDA) and result.dtype == dt
    check(result.numpy(), expected(op, a, b, dt), dt)


@pytest.mark.parametrize(("op", "dt"), CASES, ids=IDS)
def test_tensor_op_scalar_both_ways_matches_numpy(op, dt):
    a = random(dt, (1000,))
    scalar = True if dt == vram.bool_ else (2 - 1j if dt.is_complex else 3)
    s = np.array(scalar).astype(dt.np if dt.np.kind in "iub" else opmath(dt))
    t = vram.tensor(a, device=CUDA)
    check(OPERATORS[op](t, scalar).numpy(), expected(op, a, s, dt), dt)
    check(OPERATORS[op](scalar, t).numpy(), expected(op, np.broadcast_to(s, a.shape), a, dt), dt)


@pytest.mark.parametrize(("op", "dt"), CASES, ids=IDS)
def test_strided_broadcast_and_in_place(op, dt):
    a, row64, row48 = random(dt, (64, 48)), random(dt, (64,)), random(dt, (48,))
    t = vram.tensor(a, device=CUDA)
    view = t.t()[::2]  # (24, 64), strided both ways
    getattr(view, f"{op}_")(vram.tensor(row64, device=CUDA))  # broadcast into a view
    want = a.copy()
    want.T[::2] = expected(op, a.T[::2], np.broadcast_to(row64, (24, 64)), dt)
    check(t.numpy(), want, dt)
    result = OPERATORS[op](t, vram.tensor(row48, device=CUDA))
    check(result.numpy(), expected(op, want, np.broadcast_to(row48, a.shape), dt), dt)


@pytest.mark.parametrize("dt", all_dtypes, ids=lambda d: d.name)
def test_fill_every_dtype(dt):
    value = True if dt == vram.bool_ else (1.5 - 2j if dt.is_complex else 3)
    t = vram.empty(100, 7, dtype=dt, device=CUDA)
    t.fill_(value)
    t[:, 3].zero_()
    want = np.full((100, 7), value, dtype=dt.np)
    want[:, 3] = 0
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
@pytest.mark.parametrize("source", all_dtypes, ids=lambda d: d.name)
def test_strided_copies_cast_between_every_pair_of_dtypes(source):
    values = random(source, (40, 30))
    src = vram.tensor(values, device=CUDA)
    for target in all_dtypes:
        dst = vram.zeros(30, 80, dtype=target, device=CUDA)
        dst[:, ::2].copy_(src.t())
        want = np.zeros((30, 80), target.np)
        with np.errstate(all="ignore"):
            if source.is_complex and target == vram.bool_:
                want[:, ::2] = values.T != 0
            elif (source.is_floating_point or source.is_complex) and target.np.kind in "iub":
                continue  # out-of-range float to int conversions differ (undefined in C++)
            else:
                want[:, ::2] = values.T.astype(target.np)
        got = dst.numpy()
        if target.np.kind in "iub":
            np.testing.assert_array_equal(got, want, err_msg=f"{source} -> {target}")
        else:  # integers to 16-bit floats may round twice on the GPU (through float32)
            rtol = 1e-2 if target.itemsize == 2 else 0
            np.testing.assert_allclose(
                got.astype(np.complex128), want.astype(np.complex128), rtol=rtol
            )


def test_copies_between_host_and_device_keep_strides():
    values = np.arange(144, dtype=np.float32).reshape(12, 12)
    host = vram.from_numpy(values)[1::3, ::2]  # (4, 6), strided
    dev = vram.zeros(6, 4, device=CUDA)
    dev.t().copy_(host)  # into a transposed device view
    np.testing.assert_array_equal(dev.numpy(), values[1::3, ::2].T)
    back = vram.zeros(12, 4, device="cpu")
    back[::2].copy_(dev)
    np.testing.assert_array_equal(back.numpy()[::2], values[1::3, ::2].T)


def test_high_dimensional_strided_copy():
    values = np.arange(2**8, dtype=np.int32).reshape((2,) * 8)
    t = vram.tensor(values, device=CUDA).permute(7, 6, 5, 4, 3, 2, 1, 0)
    np.testing.assert_array_equal(t.contiguous().numpy(), values.transpose(7, 6, 5, 4, 3, 2, 1, 0))


@pytest.mark.parametrize("dt", all_dtypes, ids=lambda d: d.name)
def test_transposing_copies_run_tiled_and_match_numpy(dt):
    """Copies whose two sides are contiguous along different dimensions take copy_tiled
    (32 x 32 tiles through shared memory): sizes off the tile, a batch, a sliced batch, a
    permutation of four dimensions, and a transposed destination."""
    from vram.ops import _tiled

    a = random(dt, (3, 50, 70))
    t = vram.tensor(a, device=CUDA)
    cases = [
        (t.transpose(-2, -1), a.transpose(0, 2, 1)),
        (t[::2, 5:, :].transpose(-2, -1), a[::2, 5:, :].transpose(0, 2, 1)),
        (t.permute(2, 0, 1), a.transpose(2, 0, 1)),
    ]
    b = random(dt, (2, 9, 40, 33))
    u = vram.tensor(b, device=CUDA)
    cases.append((u.permute(3, 0, 2, 1), b.transpose(3, 0, 2, 1)))
    for view, want in cases:
        out = vram.empty(tuple(view.shape), dtype=dt, device=CUDA)
        assert _tiled.dims_of(out, view) is not None
        out.copy_(view)
        np.testing.assert_array_equal(out.numpy(), want)
    target = vram.empty((3, 70, 50), dtype=dt, device=CUDA)
    assert _tiled.dims_of(target.transpose(-2, -1), t) is not None
    target.transpose(-2, -1).copy_(t)  # into a transposed view: the same tiles
    np.testing.assert_array_equal(target.numpy(), a.transpose(0, 2, 1))


def test_cuda_array_interface_fields():
    t = vram.zeros(4, 6, dtype=vram.float16, device=CUDA)
    cai = t.__cuda_array_interface__
    assert cai["version"] == 3 and cai["typestr"] == "<f2" and cai["shape"] == (4, 6)
    assert cai["strides"] is None and cai["data"] == (t.data_ptr(), False)
    assert cai["stream"] == (vram.current_stream().cuda_stream or 1)
    assert t.t().__cuda_array_interface__["strides"] == (2, 12)
    assert t.__dlpack_device__() == (2, 0)


# ---- PyTorch ---------------------------------------------------------------------------


def test_pytorch_to_vram_shares_memory():
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    for t in (vram.asarray(x), vram.from_dlpack(x)):
        assert t.device.type == "cuda" and t.data_ptr() == x.data_ptr()
        x[0, 0] = 42
        torch.cuda.synchronize()
        assert t.numpy()[0, 0] == 42
        t[2, 3] = -1
        vram.synchronize()
        assert x[2, 3].item() == -1


def test_vram_to_pytorch_shares_memory():
    torch = pytest.importorskip("torch")
    t = vram.arange(12, dtype=vram.float32, device=CUDA).view(3, 4)
    for x in (torch.from_dlpack(t), torch.as_tensor(t, device="cuda")):
        assert x.data_ptr() == t.data_ptr() and x.is_cuda
        x[1, 1] = 7
        torch.cuda.synchronize()
        assert t.numpy()[1, 1] == 7
        t.fill_(5)
        vram.synchronize()
        assert x.sum().item() == 60


def test_bfloat16_and_strided_views_through_dlpack_with_pytorch():
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 6, device="cuda").to(torch.bfloat16)
    t = vram.from_dlpack(x.t())
    assert t.dtype == vram.bfloat16 and t.stride() == (1, 6)
    np.testing.assert_array_equal(t.numpy(), x.t().float().cpu().numpy().astype(t.dtype.np))
    back = torch.from_dlpack(t)
    assert back.dtype == torch.bfloat16 and back.stride() == (1, 6)


# ---- CuPy ------------------------------------------------------------------------------


def test_cupy_to_vram_shares_memory():
    cp = pytest.importorskip("cupy")
    a = cp.arange(10, dtype=cp.int32)
    for t in (vram.asarray(a), vram.from_dlpack(a)):
        assert t.data_ptr() == a.data.ptr and t.dtype == vram.int32
        a[3] = 99
        cp.cuda.Device().synchronize()
        assert t.numpy()[3] == 99
        t[4] = -4
        vram.synchronize()
        assert int(a[4]) == -4


def test_vram_to_cupy_shares_memory():
    cp = pytest.importorskip("cupy")
    t = vram.zeros(4, 5, dtype=vram.float64, device=CUDA)
    for a in (cp.asarray(t), cp.from_dlpack(t)):
        assert a.data.ptr == t.data_ptr()
        a[2, 2] = 3.5
        cp.cuda.Device().synchronize()
        assert t.numpy()[2, 2] == 3.5
        t.fill_(1)
        vram.synchronize()
        assert float(a.sum()) == 20
    view = cp.asarray(t.t())
    assert view.strides == (8, 40)

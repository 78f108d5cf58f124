"""vram's dtypes: a small named wrapper over a NumPy dtype, spelled like PyTorch's."""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

__all__ = [
    "dtype",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool_",
    "complex64",
    "complex128",
    "half",
    "float",
    "double",
    "int",
    "long",
    "short",
    "all_dtypes",
    "as_dtype",
    "get_default_dtype",
    "set_default_dtype",
]


@dataclass(frozen=True, slots=True, eq=False)
class dtype:  # noqa: N801 - PyTorch's spelling
    """An element type. ``np`` is the NumPy dtype that holds it on the host.

    There is one object per dtype (the module's constants): they compare and hash by
    identity, which is what every plan key and dtype test wants, and unpickle to themselves.
    """

    name: str
    np: np.dtype
    c_type: str  # the CUDA C type NVRTC kernels use for it
    itemsize: int = field(init=False, repr=False, compare=False)  # bytes of one element

    def __post_init__(self) -> None:
        object.__setattr__(self, "itemsize", self.np.itemsize)  # (a field: read on every call)

    @property
    def is_floating_point(self) -> bool:
        return self.name in ("float16", "bfloat16", "float32", "float64")

    @property
    def is_complex(self) -> bool:
        return self.name.startswith("complex")

    def __repr__(self) -> str:
        return f"vram.{self.name}"

    def __reduce__(self) -> tuple:
        return as_dtype, (self.name,)


float16 = dtype("float16", np.dtype(np.float16), "__half")
bfloat16 = dtype("bfloat16", np.dtype(ml_dtypes.bfloat16), "__nv_bfloat16")
float32 = dtype("float32", np.dtype(np.float32), "float")
float64 = dtype("float64", np.dtype(np.float64), "double")
int8 = dtype("int8", np.dtype(np.int8), "signed char")
int16 = dtype("int16", np.dtype(np.int16), "short")
int32 = dtype("int32", np.dtype(np.int32), "int")
int64 = dtype("int64", np.dtype(np.int64), "long long")
uint8 = dtype("uint8", np.dtype(np.uint8), "unsigned char")
bool_ = dtype("bool", np.dtype(np.bool_), "bool")
complex64 = dtype("complex64", np.dtype(np.complex64), "cuFloatComplex")
complex128 = dtype("complex128", np.dtype(np.complex128), "cuDoubleComplex")

half = float16
float = float32  # noqa: A001 - PyTorch's alias
double = float64
int = int32  # noqa: A001 - PyTorch's alias
long = int64
short = int16

all_dtypes: tuple[dtype, ...] = (
    float16,
    bfloat16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    bool_,
    complex64,
    complex128,
)

_by_name = {d.name: d for d in all_dtypes}
_by_np = {d.np: d for d in all_dtypes}
_aliases = {
    "half": float16,
    "float": float32,
    "double": float64,
    "int": int32,
    "long": int64,
    "short": int16,
    "bool_": bool_,
}


def as_dtype(value: object, argument: str = "dtype") -> dtype:
    """Turn a vram dtype, a NumPy dtype or a name into a vram dtype; TypeError otherwise."""
    if isinstance(value, dtype):
        return value
    if isinstance(value, str):
        found = _by_name.get(value) or _aliases.get(value)
        if found is None:
            raise TypeError(f"{argument}: unknown dtype {value!r}")
        return found
    try:
        npd = np.dtype(value)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{argument}: unknown dtype {value!r}") from None
    found = _by_np.get(npd)
    if found is None:
        raise TypeError(f"{argument}: dtype {npd} has no vram equivalent")
    return found


_default_float = [float32]  # torch.get_default_dtype: float32 or float64


def get_default_dtype() -> dtype:
    """The dtype of floats made from Python numbers (torch.get_default_dtype)."""
    return _default_float[0]


def set_default_dtype(d: dtype) -> None:
    """Set the default floating point dtype: float32 or float64, as PyTorch allows."""
    found = as_dtype(d, "d")
    if found not in (float32, float64):
        raise TypeError(f"d: only float32 and float64 can be the default dtype, got {found}")
    _default_float[0] = found

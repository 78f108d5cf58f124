"""torch.nn.functional: ``linear`` (with cuBLASLt's fused epilogues), the activations
(relu, gelu and silu here, the others from vram.ops._activations), ``softmax``,
``log_softmax``, ``layer_norm``, ``scaled_dot_product_attention``, ``dropout``; and,
composed of vram's other ops: ``embedding``, ``one_hot``, ``pad``, ``normalize``,
``rms_norm`` and the losses (``mse_loss``, ``l1_loss``, ``nll_loss``, ``cross_entropy``,
``binary_cross_entropy_with_logits``)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .. import _dtypes, _factories
from .._tensor import Tensor
from ..blas._functions import linear
from ..ops import _indexing, _math, _random, _reductions, _softmax
from ..ops._activations import (
    celu,
    elu,
    glu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    logsigmoid,
    mish,
    relu6,
    selu,
    softplus,
    softsign,
    threshold,
)
from ..ops._layer_norm import layer_norm
from ._attention import scaled_dot_product_attention

__all__ = [
    "linear",
    "relu",
    "gelu",
    "silu",
    "relu6",
    "leaky_relu",
    "elu",
    "selu",
    "celu",
    "softplus",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "mish",
    "logsigmoid",
    "softsign",
    "threshold",
    "glu",
    "sigmoid",
    "tanh",
    "softmax",
    "log_softmax",
    "layer_norm",
    "scaled_dot_product_attention",
    "dropout",
    "embedding",
    "one_hot",
    "pad",
    "normalize",
    "rms_norm",
    "mse_loss",
    "l1_loss",
    "nll_loss",
    "cross_entropy",
    "binary_cross_entropy_with_logits",
]


def _activation(name: str, input: Any, inplace: bool) -> Tensor:  # noqa: A002
    if type(input) is Tensor and not inplace:  # the ops' cached path (as vram.exp's)
        return _math.unary_fast(name)(input)
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' must be Tensor, not {type(input).__name__}")
    return _math.unary(name, input, out=input if inplace else None)


def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """max(input, 0), NaN kept (torch.nn.functional.relu)."""
    return _activation("relu", input, inplace)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    """``x * Φ(x)`` with the erf form (``approximate="none"``) or the tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return _activation("gelu" if approximate == "none" else "gelu_tanh", input, False)


def silu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002
    """``x * sigmoid(x)`` (torch.nn.functional.silu)."""
    return _activation("silu", input, inplace)


def sigmoid(input: Tensor) -> Tensor:  # noqa: A002
    return _activation("sigmoid", input, False)


def tanh(input: Tensor) -> Tensor:  # noqa: A002
    return _activation("tanh", input, False)


def _softmax_dim(name: str, ndim: int, stacklevel: int) -> int:
    """PyTorch's implicit softmax dim (deprecated, with its warning): 0 for 0, 1 and 3 dims."""
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include "
        "dim=X as an argument.",
        UserWarning,
        stacklevel=stacklevel,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(
    input: Tensor,  # noqa: A002
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: Any = None,
) -> Tensor:
    """torch.nn.functional.softmax: one fused kernel per call (a row is read once where it
    fits in registers); float16 and bfloat16 compute in float32."""
    if dim is None and isinstance(input, Tensor):
        dim = _softmax_dim("softmax", input.ndim, _stacklevel)
    return _softmax.softmax(input, dim, dtype)


def log_softmax(
    input: Tensor,  # noqa: A002
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: Any = None,
) -> Tensor:
    """torch.nn.functional.log_softmax: one fused kernel per call."""
    if dim is None and isinstance(input, Tensor):
        dim = _softmax_dim("log_softmax", input.ndim, _stacklevel)
    return _softmax.log_softmax(input, dim, dtype)


def dropout(
    input: Tensor,  # noqa: A002 - torch's name
    p: float = 0.5,
    training: bool = True,
    inplace: bool = False,
    generator: Any = None,
) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``
    (torch.nn.functional.dropout), drawing from ``generator`` (the device's default when
    None; vram's addition). Not ``training``, ``p == 0`` or no elements: ``input`` itself;
    ``p == 1``: ``input * 0``. Otherwise one fused kernel (new numbers at each replay of a
    captured graph); its mask is not PyTorch's for the same seed (PyTorch's fused dropout
    kernel lays out its draws differently)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"input: expected a vram.Tensor, got {type(input).__name__}")
    p = float(p)
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(
            "result type Float can't be cast to the desired output type "
            f"{_math._torch_name(input.dtype)}"
        )
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input.mul_(0) if inplace else input * 0
    return _random.fused_dropout(input, p, generator, inplace)


# ---- embeddings, encodings and padding (composites of vram's indexing and copies) ---------


def _tensor(name: str, argument: str, value: Any) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{name}(): argument '{argument}' must be Tensor, not {type(value).__name__}"
        )
    return value


def _torch_name(dt: Any) -> str:
    return _math._torch_name(dt)


def embedding(
    input: Tensor,  # noqa: A002 - torch's name
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """The rows of ``weight`` [num_embeddings, embedding_dim] that ``input`` (int32 or int64
    indices, any shape) names, in ``input``'s shape + [embedding_dim]. ``padding_idx`` only
    shapes gradients in PyTorch, so the forward result does not depend on it. An index out of
    range is a device-side assert (as on CUDA)."""
    x = _tensor("embedding", "input", input)
    w = _tensor("embedding", "weight", weight)
    if w.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if x.dtype not in (_dtypes.int32, _dtypes.int64):
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {_torch_name(x.dtype)} instead (while checking "
            "arguments for embedding)"
        )
    if padding_idx is not None and not -w.shape[0] <= padding_idx < w.shape[0]:
        raise AssertionError("Padding_idx must be within num_embeddings")
    if max_norm is not None:
        raise NotImplementedError(
            "embedding(): max_norm renormalizes rows of 'weight' in place; vram does not "
            "support it (renormalize the weight before the lookup)"
        )
    rows = _indexing.index_select(w, 0, x.reshape(-1))
    return rows.view(*x.shape, w.shape[1])


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 ``tensor`` as one-hot int64 vectors along a new last dimension of size
    ``num_classes`` (-1: the largest value + 1). Checking the values reads them back (a
    synchronization), as PyTorch does off CUDA."""
    t = _tensor("one_hot", "tensor", tensor)
    if t.dtype != _dtypes.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int):
        raise TypeError(f"one_hot(): argument 'num_classes' must be int, not {num_classes!r}")
    if t.numel() == 0:
        if num_classes == -1:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        if num_classes < 0:
            raise RuntimeError(f"one_hot(): num_classes must be non-negative, got {num_classes}")
        return _factories.zeros(*t.shape, num_classes, dtype=_dtypes.int64, device=t.device)
    low, high = (int(v) for v in _reductions.aminmax(t))
    if low < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes == -1:
        num_classes = high + 1
    elif num_classes <= high:
        raise RuntimeError("Class values must be smaller than num_classes.")
    classes = _factories.arange(num_classes, device=t.device)
    return _math.eq(t.unsqueeze(-1), classes).to(_dtypes.int64)


_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_pairs(x: Tensor, pad: Any) -> list[tuple[int, int, int]]:
    """``pad`` as (dim, before, after) from the last dimension on, checked as PyTorch's."""
    if not isinstance(pad, (tuple, list)) or not all(
        isinstance(p, int) and not isinstance(p, bool) for p in pad
    ):
        raise TypeError(f"pad(): argument 'pad' must be a sequence of ints, got {pad!r}")
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) > 2 * x.ndim:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension but "
            f"got padding length {len(pad)} and input of dimension {x.ndim}"
        )
    return [(x.ndim - 1 - k, pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2)]


def _cropped(x: Tensor, pairs: list[tuple[int, int, int]]) -> Tensor:
    """``x`` with the negative pads cut off (a view)."""
    for d, before, after in pairs:
        n = x.shape[d]
        if n + before + after < 0:
            raise RuntimeError(
                f"The input size {n}, plus negative padding {before} and {after} resulted in a "
                f"negative output size, which is invalid. Check dimension {d} of your input."
            )
        start, stop = max(-before, 0), n - max(-after, 0)
        if stop < start:
            raise RuntimeError(
                f"pad(): the negative padding ({before}, {after}) crops more than the {n} "
                f"elements of dimension {d}"
            )
        x = x.narrow(d, start, stop - start)
    return x


def _source_positions(mode: str, n: int, before: int, after: int, device: Any) -> Tensor:
    """For each position of a padded dimension (``before`` / ``after`` may be negative), the
    input position it copies: mirrored without the edge (reflect), the edge (replicate) or
    wrapped (circular). Computed on the device: no upload, so it can be captured."""
    p = _factories.arange(-before, n + after, device=device)
    if mode == "replicate":
        return _math.clamp(p, 0, n - 1)
    if mode == "circular":
        return _math.remainder(p, n)
    p = _math.abs(p)
    return _math.where(_math.gt(p, n - 1), _math.rsub(p, 2 * (n - 1)), p)


def pad(
    input: Tensor,  # noqa: A002 - torch's name
    pad: Any,
    mode: str = "constant",
    value: float | None = None,
) -> Tensor:
    """torch.nn.functional.pad: ``pad`` = (last dim's before, after, the one before's ...);
    negative pads crop. ``constant`` fills with ``value`` (0 by default, cast to the dtype as
    PyTorch does); ``reflect``, ``replicate`` and ``circular`` pad the last 1, 2 or 3
    dimensions of a batched input as PyTorch does."""
    x = _tensor("pad", "input", input)
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    pairs = _pad_pairs(x, pad)
    if mode == "constant":
        fill = 0 if value is None else value
        if x.dtype == _dtypes.bool_:
            fill = bool(fill)
        elif not x.dtype.is_floating_point and not x.dtype.is_complex:
            fill = int(fill)  # C++'s conversion: toward zero
        source = _cropped(x, pairs)
        shape = list(source.shape)
        for d, before, after in pairs:
            shape[d] += max(before, 0) + max(after, 0)
        out = _factories.full(shape, fill, dtype=x.dtype, device=x.device)
        target = out
        for d, before, _ in pairs:
            target = target.narrow(d, max(before, 0), source.shape[d])
        target.copy_(source)
        return out
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    if (len(pad), x.ndim) not in ((2, 2), (2, 3), (4, 3), (4, 4), (6, 4), (6, 5)):
        raise NotImplementedError(
            f"Padding size {len(pad)} is not supported for {x.ndim}D input tensor."
        )
    # circular crops first and wraps what is left; reflect and replicate index the whole
    # input with the signed pads (a negative pad skips positions), as PyTorch's kernels
    out = _cropped(x, pairs) if mode == "circular" else x
    for d, before, after in pairs:
        n = out.shape[d]
        if mode == "circular":
            before, after = max(before, 0), max(after, 0)
            if before > n or after > n:
                raise RuntimeError("Padding value causes wrapping around more than once.")
        elif mode == "reflect" and (before >= n or after >= n):
            raise RuntimeError(
                "Argument #4: Padding size should be less than the corresponding input "
                f"dimension, but got: padding ({before}, {after}) at dimension {d} of input "
                f"{list(x.shape)}"
            )
        if n + before + after < 0:
            raise RuntimeError(
                f"The input size {n}, plus negative padding {before} and {after} resulted in a "
                f"negative output size, which is invalid. Check dimension {d} of your input."
            )
        if n == 0 and (before > 0 or after > 0):
            raise RuntimeError(
                f"pad(): {mode} padding needs a non-empty dimension {d} of input {list(x.shape)}"
            )
        if before or after:
            positions = _source_positions(mode, n, before, after, x.device)
            out = _indexing.index_select(out, d, positions)
    return out.clone() if out is x or not out.is_contiguous() else out


# ---- normalization -------------------------------------------------------------------------


def normalize(
    input: Tensor,  # noqa: A002 - torch's name
    p: float = 2.0,
    dim: int = 1,
    eps: float = 1e-12,
    out: Tensor | None = None,
) -> Tensor:
    """``input`` divided by its ``p``-norm along ``dim`` (at least ``eps``)."""
    x = _tensor("normalize", "input", input)
    norm = _reductions.vector_norm(x, p, dim, True)
    return _math.div(x, _math.clamp(norm, min=eps), out=out)


def _computation_dtype(dt: Any) -> Any:
    """PyTorch's opmath for a normalization: float32 for the 16-bit floats."""
    return _dtypes.float32 if dt in (_dtypes.float16, _dtypes.bfloat16) else dt


def rms_norm(
    input: Tensor,  # noqa: A002 - torch's name
    normalized_shape: Any,
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    """``input / sqrt(mean(input², last dims) + eps) * weight`` over the last
    ``len(normalized_shape)`` dimensions, computed in float32 for float16 and bfloat16 (as
    PyTorch's); ``eps`` None: the machine epsilon of that computation dtype."""
    x = _tensor("rms_norm", "input", input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"\"rms_norm\" not implemented for '{_torch_name(x.dtype)}'")
    k = len(shape)
    if k == 0 or x.ndim < k or tuple(x.shape[x.ndim - k :]) != shape:
        raise RuntimeError(
            f"Given normalized_shape={list(shape)}, expected input with shape "
            f"[*{', '.join(map(str, shape))}], but got input of size{list(x.shape)}"
        )
    if weight is not None:
        w = _tensor("rms_norm", "weight", weight)
        if tuple(w.shape) != shape:
            raise RuntimeError(
                "Expected weight to be of same shape as normalized_shape, but got weight of "
                f"shape {list(w.shape)} and normalized_shape = {list(shape)}"
            )
    compute = _computation_dtype(x.dtype)
    if eps is None:
        eps = float(np.finfo(compute.np).eps)
    wide = x.to(compute)
    dims = tuple(range(x.ndim - k, x.ndim))
    mean_square = _reductions.mean(_math.mul(wide, wide), dims, True)
    result = _math.mul(wide, _math.rsqrt(_math.add(mean_square, eps)))
    if weight is not None:
        result = _math.mul(result, weight)
    return result.to(x.dtype)


# ---- losses --------------------------------------------------------------------------------


def _reduction(size_average: Any, reduce: Any, reduction: Any) -> str:
    """``reduction``, or the one PyTorch's deprecated ``size_average`` / ``reduce`` name."""
    if size_average is not None or reduce is not None:
        warnings.warn(
            "size_average and reduce args will be deprecated, please use reduction='"
            f"{_legacy_reduction(size_average, reduce)}' instead.",
            UserWarning,
            stacklevel=3,
        )
        return _legacy_reduction(size_average, reduce)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _legacy_reduction(size_average: Any, reduce: Any) -> str:
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return _reductions.mean(loss)
    return _reductions.sum(loss) if reduction == "sum" else loss


def _pointwise_loss(
    name: str,
    input: Any,
    target: Any,
    reduction: str,
    squared: bool,  # noqa: A002
) -> Tensor:
    x = _tensor(name, "input", input)
    y = _tensor(name, "target", target)
    if x.shape != y.shape:
        warnings.warn(
            f"Using a target size ({list(y.shape)}) that is different to the input size "
            f"({list(x.shape)}). This will likely lead to incorrect results due to "
            "broadcasting. Please ensure they have the same size.",
            UserWarning,
            stacklevel=3,
        )
    difference = _math.sub(x, y)
    if squared and not (difference.dtype.is_floating_point or difference.dtype.is_complex):
        raise NotImplementedError(
            f"\"{name}\" not implemented for '{_torch_name(difference.dtype)}'"
        )
    loss = _math.mul(difference, difference) if squared else _math.abs(difference)
    return _reduce(loss, reduction)


def mse_loss(
    input: Tensor,  # noqa: A002 - torch's name
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``(input - target)²``, averaged (``"mean"``), summed or per element (``"none"``);
    ``target`` broadcasts against ``input`` (with PyTorch's warning when their sizes
    differ)."""
    mode = _reduction(size_average, reduce, reduction)
    return _pointwise_loss("mse_loss", input, target, mode, True)


def l1_loss(
    input: Tensor,  # noqa: A002 - torch's name
    target: Tensor,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``|input - target|``, averaged, summed or per element (as mse_loss)."""
    mode = _reduction(size_average, reduce, reduction)
    return _pointwise_loss("l1_loss", input, target, mode, False)


def _class_targets(name: str, x: Tensor, target: Tensor) -> Tensor:
    """``target`` checked against ``input`` [C], [N, C] or [N, C, d1, ...]: int64 (uint8
    widened), one class per position."""
    if x.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {x.ndim})")
    if target.dtype not in (_dtypes.int64, _dtypes.uint8):
        raise RuntimeError(
            f"expected target dtype to be Long or Byte, but got {_torch_name(target.dtype)}"
        )
    if x.ndim >= 2 and target.ndim >= 1 and target.shape[0] != x.shape[0]:
        raise ValueError(
            f"Expected input batch_size ({x.shape[0]}) to match target batch_size "
            f"({target.shape[0]})."
        )
    if x.ndim <= 2 and target.ndim != x.ndim - 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if x.ndim > 2 and tuple(target.shape) != (x.shape[0], *x.shape[2:]):
        raise RuntimeError(
            f"Expected target size {[x.shape[0], *x.shape[2:]]}, got {list(target.shape)}"
        )
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"\"{name}\" not implemented for '{_torch_name(x.dtype)}'")
    return target.to(_dtypes.int64)


def _class_weight(x: Tensor, weight: Any) -> Tensor | None:
    if weight is None:
        return None
    w = _tensor("nll_loss", "weight", weight)
    classes = x.shape[0 if x.ndim == 1 else 1]
    if w.numel() != classes:
        raise RuntimeError(
            f"weight tensor should be defined either for all {classes} classes or no classes "
            f"but got weight tensor of shape: {list(w.shape)}"
        )
    if w.dtype != x.dtype:
        raise RuntimeError(
            f"expected scalar type {_torch_name(x.dtype)} but found {_torch_name(w.dtype)}"
        )
    return w.reshape(-1)


def _target_weights(
    x: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int
) -> tuple[Tensor, Tensor, Tensor]:
    """The class of each position with ignored ones sent to class 0, whether it counts, and
    its weight (0 where ignored) in the accumulation dtype."""
    counts = _math.ne(target, ignore_index)
    classes = _math.where(counts, target, 0)
    compute = _computation_dtype(x.dtype)
    if weight is None:
        return classes, counts, counts.to(compute)
    picked = _indexing.index_select(weight, 0, classes.reshape(-1)).view(classes.shape)
    return classes, counts, _math.where(counts, picked.to(compute), 0.0)


def nll_loss(
    input: Tensor,  # noqa: A002 - torch's name
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
) -> Tensor:
    """``-input[n, target[n]] * weight[target[n]]`` for ``input`` [C], [N, C] or
    [N, C, d1, ...] of log-probabilities and class ``target``; positions whose target is
    ``ignore_index`` count for nothing. ``"mean"`` divides by the total weight of the counted
    positions (NaN when none counts), as PyTorch; float16 and bfloat16 accumulate in float32.
    A class out of range is a device-side assert (as on CUDA)."""
    mode = _reduction(size_average, reduce, reduction)
    x = _tensor("nll_loss", "input", input)
    t = _class_targets("nll_loss", x, _tensor("nll_loss", "target", target))
    w = _class_weight(x, weight)
    classes, _, weights = _target_weights(x, t, w, ignore_index)
    axis = 0 if x.ndim == 1 else 1
    picked = _indexing.gather(x, axis, classes.unsqueeze(axis)).squeeze(axis)
    loss = _math.neg(_math.mul(picked.to(weights.dtype), weights))
    if mode == "none":
        return loss.to(x.dtype)
    total = _reductions.sum(loss)
    if mode == "mean":
        total = _math.div(total, _reductions.sum(weights))
    return total.to(x.dtype)


def cross_entropy(
    input: Tensor,  # noqa: A002 - torch's name
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """``nll_loss(log_softmax(input, class dim), target)`` for class ``target``s, or
    ``-sum(target * log_softmax(input) * weight)`` over the classes for probability targets
    (a floating ``target`` of ``input``'s shape); ``label_smoothing`` mixes in the uniform
    distribution, as PyTorch. log_softmax runs in ``input``'s dtype, as PyTorch's."""
    mode = _reduction(size_average, reduce, reduction)
    x = _tensor("cross_entropy", "input", input)
    y = _tensor("cross_entropy", "target", target)
    smoothing = float(label_smoothing)
    if not 0.0 <= smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {smoothing:g}")
    if x.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {x.ndim})")
    axis = 0 if x.ndim == 1 else 1
    classes = x.shape[axis]
    logp = _softmax.log_softmax(x, axis)
    w = _class_weight(x, weight)
    w_along = None if w is None else w.view([classes] + [1] * (x.ndim - axis - 1))
    if y.dtype.is_floating_point:
        return _cross_entropy_probabilities(x, y, logp, w_along, ignore_index, mode, smoothing)
    nll = nll_loss(logp, y, w, ignore_index=ignore_index, reduction=mode)
    if smoothing == 0.0:
        return nll
    t = _class_targets("cross_entropy", x, y)
    _, counts, weights = _target_weights(x, t, w, ignore_index)
    weighted = logp if w_along is None else _math.mul(logp, w_along)
    smooth = _math.where(counts, _math.neg(_reductions.sum(weighted, axis)), 0.0)
    if mode == "mean":
        smooth = _math.div(_reductions.sum(smooth), _reductions.sum(weights))
    elif mode == "sum":
        smooth = _reductions.sum(smooth)
    mixed = _math.add(_math.mul(nll, 1.0 - smoothing), _math.mul(smooth, smoothing / classes))
    return mixed.to(x.dtype)


def _cross_entropy_probabilities(
    x: Tensor,
    y: Tensor,
    logp: Tensor,
    w_along: Tensor | None,
    ignore_index: int,
    mode: str,
    smoothing: float,
) -> Tensor:
    if tuple(y.shape) != tuple(x.shape):
        raise RuntimeError(
            f"cross_entropy: probability 'target' of shape {list(y.shape)} must match 'input' "
            f"of shape {list(x.shape)}"
        )
    if ignore_index != -100:
        raise RuntimeError("ignore_index is not supported for floating point target")
    axis = 0 if x.ndim == 1 else 1
    classes = x.shape[axis]
    if smoothing > 0.0:
        y = _math.add(_math.mul(y, 1.0 - smoothing), smoothing / classes)
    terms = _math.mul(logp, y)
    if w_along is not None:
        terms = _math.mul(terms, w_along)
    if mode == "none":
        return _math.neg(_reductions.sum(terms, axis))
    total = _math.neg(_reductions.sum(terms))
    if mode == "mean":
        total = _math.div(total, x.numel() // classes if classes else 0)
    return total


def binary_cross_entropy_with_logits(
    input: Tensor,  # noqa: A002 - torch's name
    target: Tensor,
    weight: Tensor | None = None,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """``-(pos_weight * target * log σ(input) + (1 - target) * log(1 - σ(input))) * weight``
    in PyTorch's stable form ``(1 - target) * input - log_weight * log σ(input)``, where
    ``log σ(x) = min(x, 0) - log1p(exp(-|x|))``."""
    mode = _reduction(size_average, reduce, reduction)
    x = _tensor("binary_cross_entropy_with_logits", "input", input)
    y = _tensor("binary_cross_entropy_with_logits", "target", target)
    if tuple(y.shape) != tuple(x.shape):
        raise ValueError(
            f"Target size ({list(y.shape)}) must be the same as input size ({list(x.shape)})"
        )
    log_sigmoid = _math.sub(_math.clamp(x, max=0), _math.log1p(_math.exp(_math.neg(_math.abs(x)))))
    if pos_weight is not None:
        pw = _tensor("binary_cross_entropy_with_logits", "pos_weight", pos_weight)
        log_sigmoid = _math.mul(log_sigmoid, _math.add(_math.mul(_math.sub(pw, 1), y), 1))
    loss = _math.sub(_math.mul(_math.rsub(y, 1), x), log_sigmoid)
    if weight is not None:
        loss = _math.mul(loss, _tensor("binary_cross_entropy_with_logits", "weight", weight))
    return _reduce(loss, mode)

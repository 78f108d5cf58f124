"""Optimizers with torch.optim's names and semantics, without autograd: Adam, AdamW and SGD,
each as a for-loop, foreach (``_foreach_*`` ops) or fused (multi_tensor_apply kernels)."""

from ._adam import Adam, AdamW
from ._optimizer import Optimizer
from ._sgd import SGD

__all__ = ["Optimizer", "Adam", "AdamW", "SGD"]

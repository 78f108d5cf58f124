"""torch.nn's functional pieces that vram has: ``vram.nn.functional`` (linear, softmax,
log_softmax, layer_norm)."""

from . import functional

__all__ = ["functional"]

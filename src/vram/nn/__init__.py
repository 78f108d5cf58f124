"""torch.nn's functional pieces that vram has: ``vram.nn.functional.linear``."""

from . import functional

__all__ = ["functional"]

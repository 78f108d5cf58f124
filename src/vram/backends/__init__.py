"""Library settings with torch.backends' names: ``vram.backends.cuda``."""

from . import cuda

__all__ = ["cuda"]

"""torch.cuda's submodules that vram has: ``vram.cuda.tunable`` (TunableOp)."""

from . import tunable

__all__ = ["tunable"]

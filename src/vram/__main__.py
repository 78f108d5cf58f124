"""``python -m vram``: the same command as ``vram``."""

import sys

from .cli import main

sys.exit(main())

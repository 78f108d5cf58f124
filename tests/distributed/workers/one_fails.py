"""Rank 1 exits with code 3 at once; rank 0 would wait for it forever at the rendezvous."""

from __future__ import annotations

import os
import sys

if os.environ["RANK"] == "1":
    sys.exit(3)

import vram.distributed as dist  # noqa: E402

dist.init_process_group(timeout=600)

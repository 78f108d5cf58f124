"""Tools over memory snapshots: the viewer, the replayer, trace and stats commands."""

from .replay import main_replay, replay
from .trace import main_stats, main_trace
from .viz import load_snapshot, write_html, write_png

__all__ = [
    "load_snapshot",
    "main_replay",
    "main_stats",
    "main_trace",
    "replay",
    "write_html",
    "write_png",
]

"""Tools over memory snapshots: the viewer, the replayer, trace and stats commands."""

from ._snapshot_file import check_snapshot, load_snapshot, read_pickle
from .replay import main_replay, replay
from .trace import main_stats, main_trace
from .viz import write_html, write_png

__all__ = [
    "check_snapshot",
    "load_snapshot",
    "main_replay",
    "main_stats",
    "main_trace",
    "read_pickle",
    "replay",
    "write_html",
    "write_png",
]

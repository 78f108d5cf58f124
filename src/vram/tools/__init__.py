"""Tools over memory snapshots: the viewer, the replayer, trace and stats commands, and the
memory doctor (settings suggested for a trace, OOMs explained, two runs compared)."""

from ._snapshot_file import SnapshotLimits, check_snapshot, load_snapshot, read_pickle
from .diff import snapshot_diff
from .explain import find_setting, main_explain, report_from_snapshot
from .replay import main_replay, replay
from .suggest import suggest_settings
from .trace import main_stats, main_trace
from .viz import write_html, write_png

__all__ = [
    "SnapshotLimits",
    "check_snapshot",
    "find_setting",
    "load_snapshot",
    "main_explain",
    "main_replay",
    "main_stats",
    "main_trace",
    "read_pickle",
    "replay",
    "report_from_snapshot",
    "snapshot_diff",
    "suggest_settings",
    "write_html",
    "write_png",
]

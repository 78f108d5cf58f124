"""Tools over memory snapshots: the viewer, the replayer, trace and stats, and the memory
doctor (settings suggested for a trace, OOMs explained, two runs compared).

The ``vram`` command (``vram.cli``) parses every tool's arguments and prints what these
functions return; ``output`` holds what it prints with (tables that fit, progress bars).
"""

from ._snapshot_file import SnapshotLimits, check_snapshot, load_snapshot, read_pickle
from .diff import snapshot_diff
from .explain import find_setting, fit_verdict, report_from_snapshot
from .replay import replay
from .suggest import suggest_settings
from .trace import peaks, trace_program
from .viz import write_html, write_png

__all__ = [
    "SnapshotLimits",
    "check_snapshot",
    "find_setting",
    "fit_verdict",
    "load_snapshot",
    "peaks",
    "read_pickle",
    "replay",
    "report_from_snapshot",
    "snapshot_diff",
    "suggest_settings",
    "trace_program",
    "write_html",
    "write_png",
]

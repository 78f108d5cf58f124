"""What ``vram replay --suggest`` prints: a search's result as text a PyTorch user can act on.

Lines of at most 80 columns, but for the settings themselves, which are never wrapped: each
on a line of its own, the line to paste (``PYTORCH_CUDA_ALLOC_CONF=...``, the memory
fraction call). PyTorch's settings first, vram's own options in a section of their own with
how to make vram PyTorch's allocator; a note says how many rows were left out.
"""

from __future__ import annotations

from .._units import format_bytes
from .output import counted, wrap
from .suggest import Candidate, Suggestion

__all__ = ["suggest_lines"]

_SHOWN = (10, 5)  # rows shown by default: PyTorch's settings, vram's
_TURN_ON = "from vram.interop import torch as vt; vt.use_vram_allocator()"


def _row(c: Candidate, rank: str, result: Suggestion) -> list[str]:
    """A candidate's numbers on one line, then the lines that ask for it (never wrapped)."""
    if c.pruned:
        peak = f"> {format_bytes(result.baseline.peak_reserved)}"
        recovers = share = mallocs = "-"
    elif c.oom:
        peak = "OOM" if result.capacity is None else format_bytes(c.peak_reserved)
        recovers = share = "-"
        mallocs = str(c.device_malloc)
    else:
        peak = format_bytes(c.peak_reserved)
        recovers = format_bytes(c.recovers) if c.recovers >= 0 else f"-{format_bytes(-c.recovers)}"
        share = "-" if c.recovers_share is None else f"{c.recovers_share:.0%}"
        mallocs = str(c.device_malloc)
    what = c.change if c.knob != "recorded" else "recorded"
    if not c.checked:
        what += "*"
    cells = f"{rank:>3}  {peak:>13}  {recovers:>12}  {share:>5}  {mallocs:>7}"
    if result.capacity is not None:
        if not c.fits:
            fits = "no (OOM)" if not c.pruned else "-"
        else:
            fits = f"yes, {counted(c.flushes, 'flush', 'flushes')}" if c.flushes else "yes"
        cells += f"  {fits:<15}"
    lines = [f"{cells}  {what}"]
    lines += [f"       {line}" for line in c.how]
    return lines


def _header(result: Suggestion) -> str:
    names = f"{'#':>3}  {'peak reserved':>13}  {'recovers':>12}  {'share':>5}  {'mallocs':>7}"
    if result.capacity is not None:
        names += f"  {'fits':<15}"
    return f"{names}  what"


def _section(
    result: Suggestion, rows: list[Candidate], shown: int | None, title: list[str]
) -> list[str]:
    if not rows:
        return []
    lines = ["", *title, _header(result)]
    limit = len(rows) if shown is None else shown
    for n, c in enumerate(rows[:limit], 1):
        lines += _row(c, str(n), result)
    left = len(rows) - limit
    if left > 0:
        rows_text = "1 more row" if left == 1 else f"{left} more rows"
        lines.append(f"     ({rows_text} not shown: --all shows them, --json lists every row)")
    return lines


def _fit_summary(result: Suggestion) -> list[str]:
    """What the capacity did: to the recorded settings, and which change makes it fit."""
    cap = format_bytes(result.capacity)
    base, at = result.baseline, result.at_capacity
    need = format_bytes(base.peak_reserved)
    if at is not None and not at.oom:
        if at.flushes:
            text = (
                f"at {cap}: the recorded settings fit, but only by flushing their cache "
                f"{counted(at.flushes, 'time', 'times')} (they need {need} at their peak on a "
                "device with room; "
                f"here they peak at {format_bytes(at.peak_reserved)})."
            )
            clean = result.fits_without_flushing
            if clean is not None:
                text += f" {clean.settings or 'PyTorch defaults'} fits without flushing:"
                return [*wrap(text), *(f"    {line}" for line in clean.how)]
            return wrap(text)
        return wrap(f"at {cap}: the recorded settings fit (they peak at {need}).")
    fix = result.makes_it_fit
    if fix is None:
        return wrap(
            f"at {cap}: the recorded settings run out of memory (they need {need}), and no "
            "setting tried makes the run fit: the program needs more memory."
        )
    flushed = (
        f", after {counted(fix.flushes, 'cache flush', 'cache flushes')}" if fix.flushes else ""
    )
    return [
        *wrap(
            f"at {cap}: the recorded settings run out of memory (they need {need}); this "
            f"makes the run fit ({format_bytes(fix.peak_reserved)} at its peak{flushed}):"
        ),
        *(f"    {line}" for line in fix.how),
    ]


def _best(result: Suggestion) -> list[str]:
    """The "best:" paragraph: the PyTorch setting that reserves least (with a capacity: of
    those that fit), then the lines that ask for it; the recorded settings' own lines when
    none reserves less."""
    best, base = result.best, result.baseline
    if best is not None and base.fits is False:  # the recorded settings ran out of memory
        text = (
            f"best: it reserves {format_bytes(best.peak_reserved)} at its peak on that device; "
            f"{best.change_text}:"
        )
        return [*wrap(text), *(f"    {line}" for line in best.how)]
    if best is not None and best.recovers > 0:
        share = "" if best.recovers_share is None else f" ({best.recovers_share:.0%} of that)"
        checked = "" if best.checked else " (a prediction no PyTorch run has checked)"
        text = (
            f"best: it reserves {format_bytes(best.peak_reserved)} at its peak, "
            f"{format_bytes(best.recovers)} less{share}{checked}; {best.change_text}:"
        )
        return [*wrap(text), *(f"    {line}" for line in best.how)]
    if best is None and result.capacity is not None:
        return wrap(
            f"best: none; no PyTorch setting tried fits in {format_bytes(result.capacity)}."
        )
    return [
        *wrap("best: the recorded settings; no PyTorch setting tried reserves less. Keep them:"),
        *(f"    {line}" for line in base.how),
    ]


def suggest_lines(result: Suggestion, show_all: bool = False) -> list[str]:
    """What ``vram replay --suggest`` prints: lines of at most 80 columns, but for the
    settings themselves, which are never wrapped (each on a line of its own, to copy)."""
    base = result.baseline
    recoverable = max(base.peak_reserved - result.lower_bound, 0)  # type: ignore[operator]
    title = f"settings for {result.trace}, ranked by peak reserved"
    if result.capacity is not None:
        title += f" on a device of {format_bytes(result.capacity)}"
    lines = wrap(title)
    lines += wrap(
        f"recorded settings: {base.settings or '(none: PyTorch defaults)'}; they reserve "
        f"{format_bytes(base.peak_reserved)} at their peak on a device with room for it, "
        f"in {base.device_malloc} device mallocs."
    )
    lines += wrap(
        f"lower bound: {format_bytes(result.lower_bound)}, the peak of live bytes (each "
        f"request rounded to 512 B): no setting reserves less, so at most "
        f"{format_bytes(recoverable)} can be recovered."
    )
    lines.append("")
    if result.capacity is not None:
        lines += [*_fit_summary(result), ""]
    lines += _best(result)
    pytorch = [c for c in result.candidates if c.pytorch]
    vram = [c for c in result.candidates if not c.pytorch]
    shown_pytorch, shown_vram = (None, None) if show_all else _SHOWN
    lines += _section(
        result,
        pytorch,
        shown_pytorch,
        wrap("PyTorch's settings (PYTORCH_CUDA_ALLOC_CONF), best first:"),
    )
    lines += _section(
        result,
        vram,
        shown_vram,
        [
            *wrap(
                "vram's own options need vram as PyTorch's allocator: this line before "
                "PyTorch's first CUDA tensor, and the settings in VRAM_ALLOC_CONF:"
            ),
            f"    {_TURN_ON}",
            "vram's own options (VRAM_ALLOC_CONF), best first:",
        ],
    )
    pruned = sum(1 for c in result.candidates if c.pruned)
    legend = (
        f"{result.replays} replays"
        + (
            f"; {pruned} stopped early once they reserved more than the recorded settings"
            if pruned
            else ""
        )
        + ". recovers: peak reserved below the recorded settings'; share: of what any "
        "setting can recover; mallocs: device allocations (segments and mapped pages); "
        "what: the row adds to the recorded settings, replaces some of them or drops them; "
        "*: a prediction no PyTorch run has checked (bench/predictions.py checks "
        "max_split_size_mb, roundup_power2_divisions and expandable_segments). "
        "garbage_collection_threshold acts only under a memory fraction: its rows cap the "
        "process at the recorded settings' peak"
        + ("" if result.capacity is None else f" (or the {format_bytes(result.capacity)})")
        + "."
    )
    if result.capacity is not None:
        legend += (
            f" On a device of {format_bytes(result.capacity)} every setting runs to its end "
            "(none is stopped early) and peaks at what it reserved there; flushes: the "
            "times it gave its cache back and retried to stay within the device, which "
            "costs time."
        )
    lines.append("")
    lines += wrap(legend)
    return lines

"""What a block holds, for snapshots and OOM reports, where its stack does not say it.

A library that allocates on behalf of others labels its blocks: "cublas workspace", "aoti
constants of model.pt2: fc1.weight, ...". A labelled live block shows its label as its one
frame. Labels are by address: the owner clears a label when it frees the block.
"""

from __future__ import annotations

__all__ = ["set_label", "clear_label", "label_of"]

_labels: dict[int, str] = {}  # block address -> label (a dict's single operations are atomic)


def set_label(ptr: int, label: str) -> None:
    """Label the block at ``ptr`` (replacing any label it had)."""
    _labels[ptr] = label


def clear_label(ptr: int) -> None:
    """Forget the label of the block at ``ptr``, if any (call it when freeing the block)."""
    _labels.pop(ptr, None)


def label_of(ptr: int) -> str | None:
    """The label of the block at ``ptr``, or None."""
    return _labels.get(ptr)

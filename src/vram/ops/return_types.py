"""Named results of the ops that return several tensors (torch.return_types): tuples whose
items are also fields, so ``values, indices = vram.max(t, 0)`` and ``vram.max(t, 0).values``
both work."""

from __future__ import annotations

from collections import namedtuple

__all__ = ["max", "min", "aminmax"]


def _result(name: str, fields: tuple[str, ...]) -> type:
    base = namedtuple(name, fields)  # noqa: PYI024 - a structseq, as torch's

    def __repr__(self) -> str:  # noqa: N807
        items = ",\n".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"vram.return_types.{name}(\n{items})"

    cls = type(name, (base,), {"__slots__": (), "__repr__": __repr__, "__module__": __name__})
    return cls


max = _result("max", ("values", "indices"))  # noqa: A001 - torch's name
min = _result("min", ("values", "indices"))  # noqa: A001 - torch's name
aminmax = _result("aminmax", ("min", "max"))

"""Expandable segments: one reserved virtual range per stream and pool, mapped page by page.

Note [Expandable segments]
With ``expandable_segments:True`` a pool does not cut its memory into separate device
allocations. For each stream it reserves one virtual range as large as 1 1/8 of the
device's memory and maps physical pages into it (2 MiB pages for the small pool, 20 MiB
for the large) when a request needs them; ``empty_cache`` unmaps pages that are wholly
free. Blocks in the range never have to be released to make room for a differently
shaped request, so fragmentation stays near zero. As in PyTorch, unmapped stretches are
blocks too (``mapped=False``), kept in the pool's ``unmapped`` index by address.
"""

from __future__ import annotations

from ..driver import Driver

__all__ = ["ExpandableSegment"]


class ExpandableSegment:
    """A reserved range ``[ptr, ptr + size)`` whose pages are mapped on demand."""

    __slots__ = ("driver", "device", "stream", "ptr", "size", "page", "handles")

    def __init__(self, driver: Driver, device: int, stream: int, size: int, page: int) -> None:
        granularity = driver.vmm_granularity(device)
        page = -(-page // granularity) * granularity
        pages = -(-size // page)
        self.driver = driver
        self.device = device
        self.stream = stream
        self.page = page  # bytes per mapped page
        self.size = pages * page
        self.ptr = driver.vmm_reserve(device, self.size)
        self.handles: list[int | None] = [None] * pages  # physical handle of each page

    def map(self, ptr: int, size: int) -> tuple[int, int]:
        """Map the pages covering ``[ptr, ptr + size)``; (start, length) mapped, (0, 0) on OOM.

        Pages mapped before a failure are unmapped again, so a failure changes nothing.
        """
        first = (ptr - self.ptr) // self.page
        last = -(-(ptr + size - self.ptr) // self.page)
        done: list[int] = []
        try:
            for i in range(first, last):
                assert self.handles[i] is None, "page mapped twice"
                handle = self.driver.vmm_create(self.device, self.page)
                try:
                    self.driver.vmm_map(self.device, self.ptr + i * self.page, self.page, handle)
                except BaseException:
                    self.driver.vmm_release_handle(self.device, handle)
                    raise
                self.handles[i] = handle
                done.append(i)
        except Exception as exc:
            if not getattr(exc, "is_out_of_memory", False):
                raise
            for i in done:
                self._unmap_page(i)
            return 0, 0
        return self.ptr + first * self.page, (last - first) * self.page

    def unmap(self, ptr: int, size: int) -> tuple[int, int]:
        """Unmap the whole pages inside ``[ptr, ptr + size)``; (start, length), (0, 0) if none.

        Synchronizes the segment's stream first: unmapping does not wait for work in flight.
        """
        first = -(-(ptr - self.ptr) // self.page)
        last = (ptr + size - self.ptr) // self.page
        if first >= last:
            return 0, 0
        self.driver.stream_synchronize(self.stream)
        for i in range(first, last):
            self._unmap_page(i)
        return self.ptr + first * self.page, (last - first) * self.page

    def _unmap_page(self, i: int) -> None:
        handle = self.handles[i]
        assert handle is not None, "unmapping a page that is not mapped"
        self.driver.vmm_unmap(self.device, self.ptr + i * self.page, self.page)
        self.driver.vmm_release_handle(self.device, handle)
        self.handles[i] = None

    def mapped_bytes(self) -> int:
        return sum(self.page for h in self.handles if h is not None)

    def release(self) -> None:
        """Give the reservation back; every page must be unmapped already."""
        assert all(h is None for h in self.handles), "releasing a segment with mapped pages"
        self.driver.vmm_release(self.device, self.ptr, self.size)

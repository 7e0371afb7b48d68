"""The page ledger: the one place that does page arithmetic. It owns the free list; each
Sequence owns its row (``seq.pages``). Scratch pages (for the padded rows of captured decode
steps, see backends/static.py) are set apart at the end and never handed out.

    ledger = PageLedger(num_pages=64, page_size=16, scratch=1)
    ledger.shortfall(seq, 40)      # pages seq still needs to hold 40 tokens
    ledger.grow(seq, 40)           # take them (AK400 if the free list is short)
    ledger.shrink(seq, 1)          # undo of grow: every page past its first one back in front
    ledger.release(seq)            # return every page of seq
"""
from __future__ import annotations

from collections import deque

from attnkit.errors import fail
from attnkit.runner.engine.sequence import Sequence


class PageLedger:
    def __init__(self, num_pages: int, page_size: int, *, scratch: int = 0):
        """num_pages: pages requests may own; scratch: pages after them, kept apart."""
        self.num_pages = num_pages
        self.page_size = page_size
        self.scratch_pages = list(range(num_pages, num_pages + scratch))
        self._free: deque[int] = deque(range(num_pages))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def free_pages(self) -> list[int]:
        """The free page ids, in the order they will be handed out (for state checks)."""
        return list(self._free)

    def pages_for(self, tokens: int) -> int:
        """Pages that hold ``tokens`` tokens."""
        return -(-tokens // self.page_size)

    def shortfall(self, seq: Sequence, tokens: int) -> int:
        """Pages ``seq`` still needs to hold ``tokens`` tokens (0 when it has room)."""
        return max(0, self.pages_for(tokens) - len(seq.pages))

    def grow(self, seq: Sequence, tokens: int) -> list[int]:
        """Give ``seq`` room for ``tokens`` tokens; returns its row."""
        need = self.shortfall(seq, tokens)
        if need > len(self._free):
            fail("AK400", f"sequence {seq.seq_id!r} needs {need} more page(s) but only "
                          f"{len(self._free)} of {self.num_pages} are free",
                 field="num_pages", expected=f">= {need} free", actual=len(self._free),
                 details={"requested": need, "free": len(self._free), "total": self.num_pages})
        seq.pages.extend(self._free.popleft() for _ in range(need))
        return seq.pages

    def shrink(self, seq: Sequence, pages: int) -> None:
        """Undo ``grow``: ``seq`` keeps its first ``pages`` pages; the rest go back to the
        front of the free list, so undoing the last grows in reverse order leaves the list
        exactly as before them (the same pages are handed out next)."""
        self._free.extendleft(reversed(seq.pages[pages:]))
        del seq.pages[pages:]

    def release(self, seq: Sequence) -> None:
        """Return every page of ``seq`` (its row becomes empty)."""
        self._free.extend(seq.pages)
        seq.pages = []

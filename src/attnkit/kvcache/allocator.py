"""Page allocator: hands out KV-cache pages to requests and takes them back; the one place
page arithmetic happens (the runner's engine and scheduler use it too).

A request owns an ordered list of page ids (its block-table row); token ``p`` of the request
lives in page ``row[p // page_size]`` at offset ``p % page_size``. The row is held either here,
by request id (``allocate`` / ``grow`` / ``free`` / ``row``), or by a holder that keeps its own
``pages`` list (the runner's ``Sequence`` record: ``shortfall`` / ``grow_to`` / ``shrink`` /
``release``); the free list is the allocator's alone either way.
"""
from __future__ import annotations

import operator
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable

from attnkit.errors import fail, preview


def _check_count(name: str, value: object, *, minimum: int) -> None:
    """AK405 unless ``value`` is an int or int-like (numpy/torch integer; not a bool) >= ``minimum``."""
    try:
        ok = not isinstance(value, bool) and operator.index(value) >= minimum
    except TypeError:
        ok = False
    if not ok:
        fail("AK405", f"{name} must be an int >= {minimum}, got {preview(value)}",
             field=name, expected=f"int >= {minimum}", actual=preview(value))


PAGE_SIZE_MAX = 2**31 - 1        # block tables and slot mappings are int32


def check_page_size(value: object, *, field: str = "page_size") -> None:
    """The one check of a page size a runtime input names (an allocation, a batch built by
    ``build_batch`` or by hand, static decode buffers): AK405 unless an int 1 .. 2**31 - 1.
    The other boundaries have their own: a request's page size is the planner's (AK306), a
    cache's its construction's (AK430), and each step's batch is compared once with its cache
    by the runtime check layer (AK418)."""
    try:
        ok = not isinstance(value, bool) and 1 <= operator.index(value) <= PAGE_SIZE_MAX
    except TypeError:
        ok = False
    if not ok:
        fail("AK405", f"{field} must be an int >= 1 (and < 2**31), got {preview(value)}",
             field=field, expected="int >= 1", actual=preview(value))


def _check_id(req_id: object) -> None:
    """Request ids key a dict: AK405 for one that cannot (a list, a dict ...)."""
    try:
        hash(req_id)
    except TypeError:
        fail("AK405", f"request id {req_id!r} is not hashable (use an int, a str or a tuple)",
             field="req_id", expected="a hashable id", actual=repr(req_id))


@dataclass(slots=True)
class _Owned:
    page_size: int
    num_tokens: int
    pages: list[int] = field(default_factory=list)


# Shuffled orders are materialised (a list of every page id): more pages than this is refused.
MAX_SHUFFLED_PAGES = 1 << 24
MAX_ROW_PAGES = 1 << 31        # page ids are int32 in block tables: no request can use more


class PageAllocator:
    """Free-list allocator over ``num_pages`` pages.

    Pages are handed out first-in first-out: never-used pages in id order (counted, not
    listed, so a large pool costs nothing up front), then freed pages in the order they came
    back. ``shuffle`` (a seed or ``random.Random``) randomises the initial order instead so
    block tables come out non-contiguous — what tests want; engines leave it None.
    """

    def __init__(self, num_pages: int, *, page_size: int | None = None,
                 shuffle: int | random.Random | None = None, scratch: int = 0):
        """scratch: pages after the ``num_pages`` it hands out, set apart (``scratch_pages``:
        the padded rows of captured decode steps, see backends/static.py) and never handed out."""
        _check_count("num_pages", num_pages, minimum=0)
        _check_count("scratch", scratch, minimum=0)
        if page_size is not None:
            check_page_size(page_size)
        self.num_pages = operator.index(num_pages)
        self.page_size = page_size
        self.scratch_pages = list(range(self.num_pages, self.num_pages + operator.index(scratch)))
        self._fresh = 0                      # pages [_fresh, num_pages) were never handed out
        self._free: deque[int] = deque()     # pages handed back, oldest first
        if shuffle is not None:
            if self.num_pages > MAX_SHUFFLED_PAGES:
                fail("AK405", f"a shuffled allocator lists every page id; {num_pages} pages is "
                              f"more than {MAX_SHUFFLED_PAGES}", field="num_pages",
                     expected=f"<= {MAX_SHUFFLED_PAGES} with shuffle", actual=num_pages)
            if not isinstance(shuffle, (int, random.Random)) or isinstance(shuffle, bool):
                fail("AK405", f"shuffle must be a seed (int) or a random.Random, got {shuffle!r}",
                     field="shuffle", expected="int | random.Random | None", actual=repr(shuffle))
            order = list(range(self.num_pages))
            rng = shuffle if isinstance(shuffle, random.Random) else random.Random(shuffle)
            rng.shuffle(order)
            self._fresh, self._free = self.num_pages, deque(order)
        self._owned: dict[Hashable, _Owned] = {}

    @property
    def num_free(self) -> int:
        return len(self._free) + self.num_pages - self._fresh

    def free_pages(self) -> list[int]:
        """Every free page id, in the order they will be handed out (lists the whole free
        range: for tests and state checks, not the hot path)."""
        return list(range(self._fresh, self.num_pages)) + list(self._free)

    # -- rows their holders keep (anything with a ``pages`` list; the runner's Sequence) --
    def pages_for(self, tokens: int) -> int:
        """Pages of this allocator's page size that hold ``tokens`` tokens."""
        return -(-tokens // self.page_size)

    def shortfall(self, holder, tokens: int) -> int:
        """Pages ``holder`` still needs to hold ``tokens`` tokens (0 when it has room)."""
        return max(0, self.pages_for(tokens) - len(holder.pages))

    def grow_to(self, holder, tokens: int) -> list[int]:
        """Give ``holder`` room for ``tokens`` tokens (AK400 if too few pages are free);
        returns its row."""
        holder.pages.extend(self._take(getattr(holder, "seq_id", "?"), self.shortfall(holder, tokens)))
        return holder.pages

    def shrink(self, holder, pages: int) -> None:
        """Undo ``grow_to``: ``holder`` keeps its first ``pages`` pages and the rest come back
        so that they are the next handed out, in order; undoing the last grows in reverse
        order leaves the free list exactly as before them."""
        for page in reversed(holder.pages[pages:]):
            if page == self._fresh - 1:
                self._fresh -= 1             # it came from the never-used range: back into it
            else:
                self._free.appendleft(page)
        del holder.pages[pages:]

    def release(self, holder) -> None:
        """Return every page of ``holder`` (its row becomes a new, empty list)."""
        self._free.extend(holder.pages)
        holder.pages = []

    def _take(self, req_id: Hashable, count: int) -> list[int]:
        if count > MAX_ROW_PAGES:            # no cache holds more pages (int32 block tables)
            fail("AK405", f"request {preview(req_id)} would need {preview(count)} pages; a block-table "
                          f"row holds at most 2**31", field="num_tokens", expected=f"<= {MAX_ROW_PAGES} pages",
                 actual=preview(count))
        free = self.num_free
        if count > free:
            fail("AK400", f"request {preview(req_id)} needs {preview(count)} more page(s) but only "
                          f"{preview(free)} of {preview(self.num_pages)} are free",
                 field="num_pages", expected=f">= {preview(count)} free", actual=free,
                 details={"requested": count, "free": free, "total": self.num_pages})
        fresh = min(count, self.num_pages - self._fresh)
        pages = list(range(self._fresh, self._fresh + fresh))
        self._fresh += fresh
        return pages + [self._free.popleft() for _ in range(count - fresh)]

    def allocate(self, req_id: Hashable, num_tokens: int, page_size: int | None = None) -> list[int]:
        """Give ``req_id`` room for ``num_tokens`` tokens; returns its block-table row."""
        # `is None`, not `or`: an explicit page_size=0 is an error, not a request for the default.
        size = self.page_size if page_size is None else page_size
        if size is None:
            fail("AK405", "page_size must be given: this allocator has no default page size",
                 field="page_size", expected="int >= 1", actual=None)
        check_page_size(size)
        _check_id(req_id)
        if req_id in self._owned:
            fail("AK401", f"request {req_id!r} already holds pages; free it before allocating again",
                 field="req_id", expected="a request without pages", actual=req_id)
        _check_count("num_tokens", num_tokens, minimum=0)
        pages = self._take(req_id, -(-num_tokens // size))
        self._owned[req_id] = _Owned(size, num_tokens, pages)
        return list(pages)

    def grow(self, req_id: Hashable, num_new_tokens: int) -> list[int]:
        """Make room for ``num_new_tokens`` more tokens; returns the (extended) row."""
        owned = self._get(req_id, "grow")
        _check_count("num_new_tokens", num_new_tokens, minimum=0)
        total = owned.num_tokens + num_new_tokens
        need = -(-total // owned.page_size) - len(owned.pages)
        if need > 0:
            owned.pages.extend(self._take(req_id, need))
        owned.num_tokens = total
        return list(owned.pages)

    def free(self, req_id: Hashable) -> None:
        """Return every page of ``req_id``; freeing twice is an error (AK401)."""
        owned = self._get(req_id, "free")
        self._free.extend(owned.pages)
        del self._owned[req_id]

    def row(self, req_id: Hashable) -> list[int]:
        return list(self._get(req_id, "read the block table of").pages)

    def num_tokens(self, req_id: Hashable) -> int:
        return self._get(req_id, "read").num_tokens

    def block_table(self, req_ids: list[Hashable]) -> list[list[int]]:
        """Rows of ``req_ids`` padded with -1 to the longest."""
        try:
            ids = list(req_ids)
        except TypeError:
            fail("AK405", f"req_ids must be a list of request ids, got {req_ids!r}",
                 field="req_ids", expected="a list of request ids", actual=repr(req_ids))
        rows = [self.row(r) for r in ids]
        width = max((len(r) for r in rows), default=0)
        return [r + [-1] * (width - len(r)) for r in rows]

    def _get(self, req_id: Hashable, action: str) -> _Owned:
        _check_id(req_id)
        owned = self._owned.get(req_id)
        if owned is None:
            fail("AK401", f"cannot {action} request {req_id!r}: it holds no pages "
                          "(never allocated, or already freed)",
                 field="req_id", expected="an allocated request", actual=req_id)
        return owned

"""What a step's block tables say, torch-free: the cache slot of each new token, and the facts
the runtime checks need from the tables, found once when a ``BatchMetadata`` is made.

A request's KV position p lives at slot ``row[p // page_size] * page_size + p % page_size`` of
its block-table row. The slot mapping is that, for the new positions ``prefix_len ..
seq_len - 1`` of every request in turn; ``BatchMetadata`` derives it here when it is not given
(one owner: the tables), so a check never recomputes it (backends/validation.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


def slots_of(row: Sequence[int], positions: range | Sequence[int], page_size: int) -> list[int]:
    """Cache slots of ``positions`` for a request whose block-table row is ``row``."""
    return [row[p // page_size] * page_size + p % page_size for p in positions]


@dataclass(frozen=True, slots=True)
class TableFacts:
    """short:    the first request whose row lacks a page its KV needs (or holds a negative id
                 there), None if every row names its pages
    max_page:    the highest page id any request needs (-1 for none): the tables fit a cache of
                 more pages than that
    derived:     the slot mapping was derived from the tables (not handed in)
    twice:       derived only: a slot two new tokens write (None: every slot is written once)"""
    short: int | None
    max_page: int
    derived: bool
    twice: int | None = None


def table_facts(tables: Sequence[Sequence[int]], prefix_lens: Sequence[int],
                seq_lens: Sequence[int], page_size: int, *, derived: bool) -> TableFacts:
    """One pass over the pages each request needs (not over its tokens)."""
    short, top = None, -1
    for i, (row, n) in enumerate(zip(tables, seq_lens)):
        need = -(-n // page_size)
        pages = row[:need]
        if len(pages) < need or (pages and min(pages) < 0):
            short = i if short is None else short
        elif pages:
            top = max(top, max(pages))
    twice = None
    if derived and short is None:
        twice = _written_twice(tables, prefix_lens, seq_lens, page_size)
    return TableFacts(short, top, derived, twice)


def derive_slots(tables, prefix_lens, seq_lens, page_size: int) -> tuple[int, ...]:
    """The slot mapping of rows that name every page they need: a range per page written."""
    out: list[int] = []
    for row, a, b in zip(tables, prefix_lens, seq_lens):
        p = a
        while p < b:
            page, offset = divmod(p, page_size)
            end = min(b, (page + 1) * page_size)
            base = row[page] * page_size
            out.extend(range(base + offset, base + offset + end - p))
            p = end
    return tuple(out)


def _written_twice(tables, prefix_lens, seq_lens, page_size: int) -> int | None:
    """A slot that two new tokens write (rows that share a page, or name one page twice), else
    None; per page written, with its span of offsets."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for row, a, b in zip(tables, prefix_lens, seq_lens):
        p = a
        while p < b:
            page, offset = divmod(p, page_size)
            end = min(b, (page + 1) * page_size)
            lo, hi = offset, offset + end - p             # offsets [lo, hi) of page row[page]
            for other_lo, other_hi in spans.get(row[page], ()):
                if lo < other_hi and other_lo < hi:
                    return row[page] * page_size + max(lo, other_lo)
            spans.setdefault(row[page], []).append((lo, hi))
            p = end
    return None

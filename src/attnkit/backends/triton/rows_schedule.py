"""Which program of a persistent rows kernel runs which work item, in which order: the index
math of prefill_gluon_chain.py's walk, in plain Python (host ints in, host ints out; the
launcher turns them into two int32 tensors once a step).

A work item is (query block, head) of backend.query_blocks' block list, item i = block
i // H, head i % H (heads fastest), the blocks with the most keys first. An item's cost is
its key tiles (the causal blocks of a request run 1, 2, ... tiles) plus ``item_cost`` tiles
for what every item pays once (its first Q.K's wait, its last P.V and the store).

Schedules (``kind``):
- "round_robin": item i to program i % P, in item order: the walk of prefill_gluon_rows.py's
  persistent form (its load per program is uneven by up to one item a wave).
- "lpt": longest processing time first: the items, costliest first, each to the program with
  the least work so far (a heap), each program running its items in that order.
- "pairs": LPT over pairs of one (request, head): block i with block n - 1 - i of the same
  request, the two run one after the other (equal-cost units for equal requests: causal load
  balancing, and the second block re-reads the first's keys from L2).

-> (order, start): ``order`` [items] the item ids program by program, ``start`` [P + 1] each
program's first slot in ``order`` (program p runs order[start[p]:start[p + 1]]).
"""
from __future__ import annotations

import heapq

KINDS = ("round_robin", "lpt", "pairs")


def block_list(q_lens, kv_lens, block_m: int, *, requests=None) -> list[tuple[int, int]]:
    """(request, first query row) of every block_m-row query block of ``requests`` (default
    all), most keys first (backend.query_blocks' order, as host ints)."""
    reqs = range(len(q_lens)) if requests is None else requests
    # (last key of the block's first row, request, first row): most keys first
    blocks = sorted(((kv_lens[i] - q_lens[i] + m, i, m) for i in reqs
                     for m in range(0, q_lens[i], block_m)), reverse=True)
    return [(b[1], b[2]) for b in blocks]


def item_tiles(q_lens, kv_lens, block_req, block_m, *, block_n: int, block_rows: int = 128):
    """Key tiles of every block (prefill_gluon_rows._geometry's n_tiles): the tiles up to the
    block's last real row's position (kv_len - q_len + its row)."""
    tiles = []
    for r, m0 in zip(block_req, block_m):
        last = kv_lens[r] - q_lens[r] + m0 + min(q_lens[r] - m0, block_rows)
        tiles.append(-(-last // block_n))
    return tiles


def schedule(block_tiles, block_req, block_m, *, heads: int, programs: int, kind: str,
             item_cost: float = 1.0) -> tuple[list[int], list[int]]:
    """The walk of ``programs`` programs over the blocks' (block, head) items (block_tiles,
    block_req, block_m: per block, in backend.query_blocks' order)."""
    if kind not in KINDS:
        raise ValueError(f"rows schedule: kind must be one of {KINDS}, got {kind!r}")
    n_items = len(block_tiles) * heads
    programs = max(1, min(int(programs), max(n_items, 1)))
    if kind == "round_robin":
        per = [list(range(p, n_items, programs)) for p in range(programs)]
    else:
        units = _pair_units(block_req, block_m, heads) if kind == "pairs" else \
            [[i] for i in range(n_items)]
        costs = [sum(block_tiles[i // heads] + item_cost for i in unit) for unit in units]
        ranked = sorted(range(len(units)), key=costs.__getitem__, reverse=True)   # stable
        heap = [(0.0, p) for p in range(programs)]
        per = [[] for _ in range(programs)]
        for u in ranked:
            load, p = heap[0]                     # the least-loaded program (lowest id on ties)
            per[p].extend(units[u])
            heapq.heapreplace(heap, (load + costs[u], p))
    order, start = [], [0]
    for items in per:
        order.extend(items)
        start.append(len(order))
    return order, start


def _pair_units(block_req, block_m, heads: int) -> list[list[int]]:
    """Items grouped (block i, block n - 1 - i) of one (request, head); a request's middle block
    of an odd count alone. Each unit costlier block first."""
    by_req: dict[int, list[tuple[int, int]]] = {}
    for b, (r, m0) in enumerate(zip(block_req, block_m)):
        by_req.setdefault(r, []).append((m0, b))
    units = []
    for r in sorted(by_req):
        blocks = [b for _, b in sorted(by_req[r])]          # by first row
        n = len(blocks)
        for i in range(n // 2 + n % 2):
            pair = [blocks[n - 1 - i]] + ([blocks[i]] if i != n - 1 - i else [])
            units.extend([[b * heads + h for b in pair] for h in range(heads)])
    return units


def program_loads(block_tiles, order, start, *, heads: int, item_cost: float = 1.0) -> list[float]:
    """Cost per program of a schedule (the bench's and tests' balance figure)."""
    return [sum(block_tiles[i // heads] + item_cost for i in order[start[p]:start[p + 1]])
            for p in range(len(start) - 1)]

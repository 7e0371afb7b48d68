"""Which program of a persistent rows kernel runs which work item, in which order: the index
math of prefill_gluon_chain.py's walk, on the host (numpy; the launcher turns it into two
int32 tensors once a step).

A work item is (query block, head) of backend.query_blocks' block list, item i = block
i // H, head i % H (heads fastest), the blocks with the most keys first. An item's cost is
its key tiles (the causal blocks of a request run 1, 2, ... tiles) plus ``item_cost`` tiles
for what every item pays once (its first Q.K's wait, its last P.V and the store).

Schedules (``kind``):
- "round_robin": item i to program i % P, in item order: the walk of prefill_gluon_rows.py's
  persistent form (its load per program is uneven by up to one item a wave).
- "lpt": longest processing time first: the items, costliest first (item order on ties),
  each to the program with the least work so far (lowest id on ties), each program running its
  items in that order. Computed a cost class at a time (_grouped_lpt: the costs are small
  integers, so a class of equal-cost items goes out in rounds, numpy over the programs), exactly
  the item-by-item heap's walk; the heap itself only where a float sum of the costs may round.
- "pairs": LPT over pairs of one (request, head): block i with block n - 1 - i of the same
  request, the two run one after the other (equal-cost units for equal requests: causal load
  balancing, and the second block re-reads the first's keys from L2).

-> (order, start): ``order`` [items] the item ids program by program, ``start`` [P + 1] each
program's first slot in ``order`` (program p runs order[start[p]:start[p + 1]]); host lists
(schedule) or int64 numpy arrays (schedule_arrays, block_arrays, tile_counts: the launcher's form,
tma_path.chain_walk, once a step; benchmarks/profile_rows_schedule.py times it).
"""
from __future__ import annotations

import heapq

import numpy as np

KINDS = ("round_robin", "lpt", "pairs")


def block_arrays(q_lens, kv_lens, block_m: int, *, requests=None) -> tuple[np.ndarray, np.ndarray]:
    """(request [NB], first query row [NB]) int64 of every block_m-row query block of
    ``requests`` (default all), most keys first (backend.query_blocks' order): by the last key
    of the block's first row, then request, then row, all descending."""
    q, kv = np.asarray(q_lens, dtype=np.int64), np.asarray(kv_lens, dtype=np.int64)
    reqs = np.arange(len(q), dtype=np.int64) if requests is None else \
        np.asarray(requests, dtype=np.int64).reshape(-1)
    per = -(-q[reqs] // block_m)
    req = np.repeat(reqs, per)
    row = (np.arange(len(req), dtype=np.int64) - np.repeat(np.cumsum(per) - per, per)) * block_m
    by = np.lexsort((row, req, kv[req] - q[req] + row))[::-1]
    return req[by], row[by]


def tile_counts(q_lens, kv_lens, block_req, block_m, *, block_n: int,
                block_rows: int = 128) -> np.ndarray:
    """Key tiles [NB] int64 of every block (prefill_gluon_rows._geometry's n_tiles): the tiles
    up to the block's last real row's position (kv_len - q_len + its row)."""
    q, kv = np.asarray(q_lens, dtype=np.int64), np.asarray(kv_lens, dtype=np.int64)
    req = np.asarray(block_req, dtype=np.int64).reshape(-1)
    row = np.asarray(block_m, dtype=np.int64).reshape(-1)
    last = kv[req] - q[req] + row + np.minimum(q[req] - row, block_rows)
    return -(-last // block_n)


def block_list(q_lens, kv_lens, block_m: int, *, requests=None) -> list[tuple[int, int]]:
    """block_arrays as host (request, first row) pairs."""
    req, row = block_arrays(q_lens, kv_lens, block_m, requests=requests)
    return list(zip(req.tolist(), row.tolist()))


def item_tiles(q_lens, kv_lens, block_req, block_m, *, block_n: int, block_rows: int = 128):
    """tile_counts as a host list."""
    return tile_counts(q_lens, kv_lens, block_req, block_m, block_n=block_n,
                       block_rows=block_rows).tolist()


def schedule(block_tiles, block_req, block_m, *, heads: int, programs: int, kind: str,
             item_cost: float = 1.0) -> tuple[list[int], list[int]]:
    """The walk of ``programs`` programs over the blocks' (block, head) items (block_tiles,
    block_req, block_m: per block, in backend.query_blocks' order), as host lists."""
    order, start = schedule_arrays(block_tiles, block_req, block_m, heads=heads,
                                   programs=programs, kind=kind, item_cost=item_cost)
    return order.tolist(), start.tolist()


def schedule_arrays(block_tiles, block_req, block_m, *, heads: int, programs: int, kind: str,
                    item_cost: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """schedule's (order [items], start [P + 1]) as int64 numpy arrays (the launcher's form)."""
    if kind not in KINDS:
        raise ValueError(f"rows schedule: kind must be one of {KINDS}, got {kind!r}")
    n_items = len(block_tiles) * heads
    programs = max(1, min(int(programs), max(n_items, 1)))
    if kind == "round_robin":
        return _round_robin(n_items, programs)
    tiles = np.asarray(block_tiles, dtype=np.int64).reshape(-1)
    # units of one head: a block, or a pair of blocks (second -1: none); unit u * H + h is
    # unit u's items on head h (heads fastest, as the items)
    if kind == "pairs":
        first, second = _pair_units(block_req, block_m)
    else:
        first, second = np.arange(len(tiles), dtype=np.int64), np.full(len(tiles), -1)
    paired = second >= 0
    scale = _exact_scale(item_cost, tiles, heads)
    if scale is None:           # costs a float sum may round: the heap, as the model says
        costs = [tiles[f] + item_cost + (tiles[s] + item_cost if s >= 0 else 0)
                 for f, s in zip(first.tolist(), second.tolist())]
        ranked = np.array(sorted(range(len(costs)), key=costs.__getitem__, reverse=True),
                          dtype=np.int64)                                  # stable
        prog = _heap_lpt([costs[u] for u in ranked.tolist() for _ in range(heads)], programs)
    else:
        unit = tiles * (1 << scale) + int(item_cost * (1 << scale))        # exact ints
        costs = unit[first] + np.where(paired, unit[second], 0)
        ranked = np.argsort(-costs, kind="stable")
        prog = _grouped_lpt(costs[ranked], heads, programs)
    # prog [rank position r * H + h]: ranked unit r on head h (a head's units rank in unit
    # order, so the stable sort of the units' costs expands head by head). The positions
    # program by program in assignment order: a stable sort of the program ids, in their
    # smallest dtype (numpy's radix sort)
    walk = prog.astype(np.min_scalar_type(programs - 1)).argsort(kind="stable")
    counts = np.bincount(prog, minlength=programs)
    heads_ = np.arange(heads, dtype=np.int64)
    order = (first[ranked][:, None] * heads + heads_).reshape(-1)[walk]
    if kind == "pairs":             # each unit's second item (-1 x H + h < 0: none) after it
        then = (second[ranked][:, None] * heads + heads_).reshape(-1)[walk]
        both = np.stack([order, then], axis=1).reshape(-1)
        order = both[both >= 0]
        counts += np.bincount(prog, weights=np.repeat(paired[ranked], heads),
                              minlength=programs).astype(np.int64)
    return order, np.concatenate([[0], np.cumsum(counts)])


def _round_robin(n_items: int, programs: int) -> tuple[np.ndarray, np.ndarray]:
    """Item i to program i % P, each program's items in item order."""
    rounds = -(-n_items // programs)
    grid = np.arange(rounds * programs, dtype=np.int64).reshape(rounds, programs).T.reshape(-1)
    counts = (n_items - np.arange(programs, dtype=np.int64) + programs - 1) // programs
    return grid[grid < n_items], np.concatenate([[0], np.cumsum(counts)])


def _exact_scale(item_cost, tiles, heads: int) -> int | None:
    """k such that every cost x 2**k is an integer and the sum of them all stays below 2**53:
    then the model's float loads are exact and integer arithmetic takes the same decisions;
    None where not (or where a cost is <= 0)."""
    cost = float(item_cost)
    if not np.isfinite(cost) or (len(tiles) and int(tiles.min()) + cost <= 0):
        return None
    for k in range(32):
        if (cost * (1 << k)).is_integer():
            total = (int(tiles.sum()) + len(tiles) * cost) * 2 * heads * (1 << k)   # pairs: 2
            return k if total < 2 ** 53 else None
    return None


def _heap_lpt(costs, programs: int) -> np.ndarray:
    """The program taking each of ``costs`` (sorted descending) in turn: a heap of (load,
    program), the least-loaded program (lowest id on ties) taking the next."""
    heap = [(0.0, p) for p in range(programs)]
    prog = []
    for cost in costs:
        load, p = heap[0]
        prog.append(p)
        heapq.heapreplace(heap, (load + cost, p))
    return np.array(prog, dtype=np.int64)


def _grouped_lpt(costs, heads: int, programs: int) -> np.ndarray:
    """The heap's LPT over units of ``costs`` (exact ints > 0, sorted descending), each unit
    ``heads`` items of its cost, a class of equal cost c at a time; -> the program taking each
    item. A program of load L offers the loads L, L + c, L + 2c, ... and the heap hands the
    class's items to the smallest (load, program) offers in turn. With R the largest load,
    program p's offers are V_p + k c (k >= -a_p), V_p in [R, R + c) and a_p the rounds it is
    behind R; so they go round by round (k), within a round in one order: (V_p, p), the
    programs of that round (a_p >= -k) only."""
    pieces = []                                     # the programs taking the items, in turn
    loads = np.zeros(programs, dtype=np.int64)
    top = low = 0                                   # the largest and smallest load
    cuts = (np.flatnonzero(np.diff(costs)) + 1).tolist()
    for u0, u1 in zip([0] + cuts, cuts + [len(costs)]) if len(costs) else ():
        c, n = int(costs[u0]), (u1 - u0) * heads
        behind_most = (top - low + c - 1) // c
        if behind_most:
            behind = (top + c - 1 - loads) // c
            loads += behind * c                                      # V
        turn = loads.argsort(kind="stable")                          # a round's order
        if behind_most:
            late = behind[turn]
            early = [turn[late >= k] for k in range(behind_most, 0, -1)]
            taken = sum(map(len, early))
            if taken >= n:                                           # the class ends before R
                early = np.concatenate(early)[:n]
                pieces.append(early)
                loads += (np.bincount(early, minlength=programs) - behind) * c
                top, low = int(loads.max()), int(loads.min())
                continue
            pieces += early
            n -= taken
        full, extra = divmod(n, programs)
        # the round's last programs end lowest, its first `extra` (one round more) highest
        low = int(loads[turn[extra]]) + full * c
        top = int(loads[turn[extra - 1]]) + (full + 1) * c if extra else \
            int(loads[turn[-1]]) + full * c
        if full:
            pieces += [turn] * full
            loads += full * c
        pieces.append(turn[:extra])
        loads[turn[:extra]] += c
    prog = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)
    return prog


def _pair_units(block_req, block_m) -> tuple[np.ndarray, np.ndarray]:
    """Blocks grouped (block i, block n - 1 - i) of one request; a request's middle block of an
    odd count alone (second -1). Pairs by request, then i; each pair's costlier (later) block
    first. -> (first block, second block) per pair."""
    req = np.asarray(block_req, dtype=np.int64).reshape(-1)
    row = np.asarray(block_m, dtype=np.int64).reshape(-1)
    by = np.lexsort((row, req))                        # blocks by request, then first row
    n_req = np.bincount(req)[req[by]]                  # each sorted block's request's count
    head_of_req = np.flatnonzero(np.r_[True, req[by][1:] != req[by][:-1]])
    pos = np.arange(len(by)) - np.repeat(head_of_req, np.diff(np.r_[head_of_req, len(by)]))
    lead = pos < (n_req + 1) // 2                       # blocks[i] of pair i
    late = by[np.flatnonzero(lead) + (n_req - 1 - 2 * pos)[lead]]      # blocks[n - 1 - i]
    early = np.where(pos[lead] != (n_req - 1 - pos)[lead], by[lead], -1)
    return late, early


def program_loads(block_tiles, order, start, *, heads: int, item_cost: float = 1.0) -> list[float]:
    """Cost per program of a schedule (the bench's and tests' balance figure)."""
    return [sum(block_tiles[i // heads] + item_cost for i in order[start[p]:start[p + 1]])
            for p in range(len(start) - 1)]

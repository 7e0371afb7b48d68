"""rows_schedule.schedule's walk equals a plain heap LPT (the oracle below: each unit, costliest
first and in unit order on ties, to the least-loaded program, lowest id on ties) for random
steps: lengths, prefixes, heads 1-64, programs 1-10,000, every kind, dyadic and other item costs."""
import heapq
import random

import pytest

from attnkit.backends.triton.rows_schedule import KINDS, block_list, item_tiles, schedule


def _oracle(block_tiles, block_req, block_m, *, heads, programs, kind, item_cost=1.0):
    n_items = len(block_tiles) * heads
    programs = max(1, min(programs, max(n_items, 1)))
    if kind == "round_robin":
        per = [list(range(p, n_items, programs)) for p in range(programs)]
    else:
        units = [[i] for i in range(n_items)] if kind == "lpt" else _pairs(block_req, block_m, heads)
        costs = [sum(block_tiles[i // heads] + item_cost for i in u) for u in units]
        heap = [(0.0, p) for p in range(programs)]
        per = [[] for _ in range(programs)]
        for u in sorted(range(len(units)), key=lambda u: -costs[u]):       # stable
            load, p = heapq.heappop(heap)
            per[p] += units[u]
            heapq.heappush(heap, (load + costs[u], p))
    return [i for walk in per for i in walk], [sum(map(len, per[:p])) for p in range(programs + 1)]


def _pairs(block_req, block_m, heads):
    """(request, head) units of blocks (i, n - 1 - i), by request, costlier (later) block first."""
    units = []
    for r in sorted(set(block_req)):
        blocks = sorted((m, b) for b, (rr, m) in enumerate(zip(block_req, block_m)) if rr == r)
        n = len(blocks)
        for i in range((n + 1) // 2):
            pair = {blocks[n - 1 - i][1], blocks[i][1]}
            pair = sorted(pair, key=lambda b: -block_m[b])
            units += [[b * heads + h for b in pair] for h in range(heads)]
    return units


def _step(rng):
    n = rng.choice([1, 1, 2, 3, 8, 17])
    q = [rng.choice([1, 2, 127, 128, 129, 300, rng.randint(1, 3000)]) for _ in range(n)]
    kv = [x + rng.choice([0, 0, 5, 128, rng.randint(0, 2000)]) for x in q]
    blocks = block_list(q, kv, 128)
    reqs, rows = [b[0] for b in blocks], [b[1] for b in blocks]
    return item_tiles(q, kv, reqs, rows, block_n=rng.choice([64, 128])), reqs, rows


@pytest.mark.parametrize("seed", range(60))
def test_schedule_equals_the_heap_oracle(seed):
    rng = random.Random(seed)
    tiles, reqs, rows = _step(rng)
    heads = rng.choice([1, 2, 7, 32, 64])
    programs = rng.choice([1, 2, 3, 5, 132, 133, 264, rng.randint(1, 10_000), 10_000])
    item_cost = rng.choice([1.0, 1.0, 0.0, 0.5, 2.25, 3, 0.3, 1e-9, 7.0, -1.0, -0.75])
    for kind in KINDS:
        got = schedule(tiles, reqs, rows, heads=heads, programs=programs, kind=kind,
                       item_cost=item_cost)
        want = _oracle(tiles, reqs, rows, heads=heads, programs=programs, kind=kind,
                       item_cost=item_cost)
        assert got == want, (kind, heads, programs, item_cost)


@pytest.mark.parametrize("programs", [1, 7, 132, 4096, 5000])
@pytest.mark.parametrize("batch, tokens", [(8, 2048), (3, 8192), (5, 1000)])
def test_equal_requests_equal_the_oracle(batch, tokens, programs):
    """Uniform steps (8 x 2k, 32 heads: the one the kernel is tuned on): long classes of equal
    cost (3 x 8k: 64 classes of 96 items, fewer than 132 programs), where most classes start
    with programs two rounds behind the largest load, some one, some none."""
    q = [tokens] * batch
    blocks = block_list(q, q, 128)
    reqs, rows = [b[0] for b in blocks], [b[1] for b in blocks]
    tiles = item_tiles(q, q, reqs, rows, block_n=128)
    for kind in KINDS:
        assert schedule(tiles, reqs, rows, heads=32, programs=programs, kind=kind) == \
            _oracle(tiles, reqs, rows, heads=32, programs=programs, kind=kind)


def test_empty_step():
    assert schedule([], [], [], heads=4, programs=8, kind="lpt") == ([], [0, 0])


@pytest.mark.parametrize("seed", range(20))
def test_blocks_and_tiles_equal_a_brute_force(seed):
    """block_list (request subsets too) / item_tiles against the blocks listed one by one:
    (last key of the first row, request, row) descending; tiles to the last real row."""
    rng = random.Random(seed)
    q = [rng.choice([0, 1, 128, 129, rng.randint(1, 3000)]) for _ in range(rng.randint(1, 12))]
    kv = [x + rng.choice([0, 7, rng.randint(0, 2000)]) for x in q]
    block_m, block_n = rng.choice([64, 128]), rng.choice([64, 128])
    requests = None if seed % 2 else sorted(rng.sample(range(len(q)), rng.randint(0, len(q))))
    want = sorted(((kv[i] - q[i] + m, i, m) for i in (requests or range(len(q))) if requests != []
                   for m in range(0, q[i], block_m)), reverse=True)
    blocks = block_list(q, kv, block_m, requests=requests)
    assert blocks == [(i, m) for _, i, m in want]
    tiles = item_tiles(q, kv, [i for i, _ in blocks], [m for _, m in blocks], block_n=block_n)
    assert tiles == [-(-(k + min(q[i] - m, 128)) // block_n) for k, i, m in want]

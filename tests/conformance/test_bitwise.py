"""``batch_invariant`` and ``deterministic``, proven bit for bit where declared (bitwise_cases.py).

batch_invariant: a request's output alone equals, exactly, its output in batches of other
requests of other lengths (decode, extend, a chunk of a chunked prefill, and both phases in
one step), at several batch sizes and places in the batch. deterministic: the same batch run
again, by the same backend object and by a new one, gives the same bits. On CUDA (marked
gpu) a captured decode step's replay also equals the eager step, bit for bit.
"""
from __future__ import annotations

import itertools

import pytest
import torch

from attnkit.backends.batch import Request, build_batch, slots_of
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import PagedKVCache
from attnkit.registry import load_backend
from bitwise_cases import FAMILIES, BitConf, batch_sizes, cases, lengths
from factories import make_layer, torch_dtype

PAGE = 16


def _params(families=tuple(FAMILIES)):
    out = []
    for conf in cases():
        marks = [pytest.mark.gpu] if conf.device == "cuda" else []
        if conf.skip:
            marks.append(pytest.mark.skip(reason=conf.skip))
        out += [pytest.param(conf, f, id=f"{conf.id}-{f}", marks=marks) for f in families]
    return out


class World:
    """A pool of requests on one cache, each with its own fixed q/k/v: any subset can be run
    as one step, in any order, and a request's rows compared across steps. Every step writes
    the same new K/V into the same slots, so the cache is the same for every step."""

    def __init__(self, conf: BitConf, pool: list[tuple[int, int]], *, seed: int = 0):
        self.device = torch.device("cpu" if conf.device == "interp" else conf.device)
        dtype = torch_dtype(conf.dtype)
        self.layer = make_layer(kind=conf.kind, num_heads=8, num_kv_heads=2, head_dim=64,
                                dtype=conf.dtype, device=self.device, seed=seed)
        spec = self.spec = self.layer.spec
        need = sum(-(-(p + n) // PAGE) for p, n in pool)
        alloc = PageAllocator(need + 1, page_size=PAGE, shuffle=seed)
        self.requests = [Request(p, n, alloc.allocate(i, p + n)) for i, (p, n) in enumerate(pool)]
        self.cache = PagedKVCache([spec], num_pages=alloc.num_pages, page_size=PAGE, dtype=dtype,
                                  device=self.device)
        gen = torch.Generator().manual_seed(seed)
        draw = lambda *shape: torch.randn(*shape, generator=gen).to(self.device, dtype)  # noqa: E731
        slots = [s for r in self.requests for s in slots_of(r.block_table, range(r.prefix_len), PAGE)]
        k, v = self._kv(draw, len(slots))
        if slots:
            self.cache.write(spec.layer_id, torch.tensor(slots, device=self.device), k, v)
        self.inputs = [(draw(n, spec.num_heads, spec.head_dim), *self._kv(draw, n)) for _, n in pool]
        self.options = conf.options()
        self.backend = load_backend(conf.backend, **self.options)

    def _kv(self, draw, n: int):
        s = self.spec
        if s.kind == "mla":
            return draw(n, s.mla.latent_dim), None
        return draw(n, s.num_kv_heads, s.head_dim), draw(n, s.num_kv_heads, s.value_dim)

    def run(self, order: list[int], backend=None) -> list[torch.Tensor]:
        """The rows of each request of ``order``, run as one step (in that order)."""
        backend = backend or self.backend
        meta = build_batch([self.requests[i] for i in order], page_size=PAGE, device=self.device)
        q, k, v = (None if self.inputs[order[0]][j] is None else
                   torch.cat([self.inputs[i][j] for i in order]) for j in range(3))
        out = backend.forward(q, k, v, self.layer, self.cache, backend.prepare(meta, self.cache))
        return list(out.split([self.requests[i].num_new for i in order]))


def _pool(family: str, device: str) -> list[tuple[int, int]]:
    """The target, then enough others for the largest batch (the family's pool, cycled)."""
    target, *others = lengths(family, device)
    more = itertools.islice(itertools.cycle(others), max(batch_sizes(device)) - 1)
    return [target, *more]


def _orders(size: int):
    """Batches of ``size`` with the target (request 0) in the middle, and for small batches
    also first and last (the others reversed)."""
    others = list(range(1, size))
    yield "middle", others[: len(others) // 2] + [0] + others[len(others) // 2:][::-1]
    if size < 16:
        yield "first", [0] + others
        yield "last", others[::-1] + [0]


@pytest.mark.parametrize(("conf", "family"), _params())
def test_a_request_alone_equals_it_in_any_batch(conf: BitConf, family: str):
    if "batch_invariant" not in conf.features:
        pytest.skip("claims deterministic only")
    world = World(conf, _pool(family, conf.device))
    alone = world.run([0])[0]
    for size in batch_sizes(conf.device):
        for where, order in _orders(size):
            got = world.run(order)[order.index(0)]
            diff = (got.double() - alone.double()).abs().max().item()
            assert torch.equal(got, alone), (
                f"{conf.id} {family}: the target's rows in a batch of {size} ({where}) differ from "
                f"its rows alone (max |diff| {diff:.3g})")


@pytest.mark.parametrize(("conf", "family"), _params())
def test_the_same_batch_gives_the_same_bits(conf: BitConf, family: str):
    world = World(conf, _pool(family, conf.device))
    size = max(batch_sizes(conf.device))
    order = next(o for w, o in _orders(size) if w == "middle")
    first = world.run(order)
    again = world.run(order)
    fresh = world.run(order, backend=load_backend(conf.backend, **world.options))
    for i, (a, b, c) in enumerate(zip(first, again, fresh)):
        assert torch.equal(a, b) and torch.equal(a, c), (
            f"{conf.id} {family}: request {order[i]} differs between two runs of one batch")


def _graph_params():
    return [p for p in _params(("decode",)) if p.values[0].device == "cuda"
            and "cuda_graph" in _features(p.values[0].backend)]


def _features(backend: str) -> frozenset:
    from attnkit.registry import declarations
    return declarations()[backend].capabilities.features


@pytest.mark.gpu
@pytest.mark.parametrize(("conf", "family"), _graph_params())
def test_graph_replay_equals_eager(conf: BitConf, family: str):
    """A captured decode step of a bucket of 8 rows, refilled with batches of other lengths:
    each real row's output equals the same request's eager step alone, bit for bit."""
    from attnkit.backends.static import StaticDecode

    bucket = 8
    world = World(conf, _pool(family, conf.device))
    longest = max(r.seq_len for r in world.requests) + PAGE
    pages = -(-longest // PAGE)
    scratch = StaticDecode.scratch_need(bucket, PAGE)
    total = world.cache.num_pages
    cache = PagedKVCache([world.spec], num_pages=total + scratch, page_size=PAGE,
                         dtype=world.cache.dtype, device=world.device)
    for name in ("k", "v", "latent"):
        src = getattr(world.cache, name).get(world.spec.layer_id)
        if src is not None:
            getattr(cache, name)[world.spec.layer_id][:total].copy_(src)
    world.cache = cache
    static = StaticDecode(max_batch=bucket, max_pages=pages, page_size=PAGE,
                          scratch_pages=range(total, total + scratch), device=world.device)
    backend = world.backend
    step = backend.prepare_static(static.meta(bucket), cache, max_seq_len=static.max_seq_len)
    q0, k0, v0 = world.inputs[0]
    q = q0.new_zeros(bucket, *q0.shape[1:])
    k = k0.new_zeros(bucket, *k0.shape[1:])
    v = None if v0 is None else v0.new_zeros(bucket, *v0.shape[1:])

    def body():
        backend.refill_static(step)
        return backend.forward(q, k, v, world.layer, cache, step)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = body()
    eager = {i: world.run([i], backend=load_backend(conf.backend, **world.options))[0]
             for i in range(len(world.requests))}
    for size in (1, 3, bucket):
        order = list(range(size))[::-1]
        for row, i in enumerate(order):
            q[row], k[row] = world.inputs[i][0][0], world.inputs[i][1][0]
            if v is not None:
                v[row] = world.inputs[i][2][0]
        static.fill(bucket, [world.requests[i] for i in order])
        graph.replay()
        torch.cuda.synchronize()
        for row, i in enumerate(order):
            assert torch.equal(out[row], eager[i][0]), (
                f"{conf.id}: replayed row {row} (request {i}, batch of {size}) != eager alone")

"""The capture contract: every backend declaring ``cuda_graph`` plans one static decode step
and serves every refill of it exactly (captured and replayed on CUDA); the others refuse.
Cases: capture_cases.py."""
from __future__ import annotations

import copy

import pytest
import torch

from attnkit import reference, reference_dsa
from attnkit.backends.batch import Request, build_batch, slots_of
from attnkit.backends.sparse import IndexerInputs
from attnkit.backends.static import StaticDecode
from attnkit.errors import AttnkitError
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import DualChunkConfig, MLAConfig
from attnkit.registry import declarations, load_backend
from attnkit.reference_dca import dual_chunk_reference
from capture_cases import (BUCKET, ROUNDS, CaptureConf, cases, capturable, lengths, max_pages,
                           missing, not_capturable)
from dsa_factory import NEAR_TIE, make_dsa_layer
from factories import assert_close, make_layer, torch_dtype

DCA = DualChunkConfig(chunk_size=16, local_size=4)          # cl = 12
DCA_PAGES = {16: 4, 7: 3}                                   # page sizes that divide cl
ROPE_BASE = 10000.0


class Unreadable(list):
    """A host list a static forward must not read (its values belong to another refill)."""

    def _refuse(self, *args):
        raise AssertionError("a static step's forward read the metadata's host lists")

    __iter__ = __getitem__ = __contains__ = _refuse


def _layer(conf: CaptureConf):
    f = conf.feature
    common = dict(dtype=conf.dtype, device=conf.device, seed=7)
    if f == "sparse_topk" and conf.model_sizes:      # top-k 64 of up to 511 keys, 64 heads
        caps = declarations()[conf.backend].capabilities
        (rank, rope), (ih, idim) = caps.mla_dims[0], caps.sparse_dims[0]
        return make_dsa_layer(topk=64, index_heads=ih, index_dim=idim, num_heads=64,
                              mla=MLAConfig(rank, rope, 128, 128), **common)
    if f == "sparse_topk":       # top-k 8 of up to 127 cached keys, indexer 4 heads x 32
        return make_dsa_layer(topk=8, index_heads=4, index_dim=32, num_heads=4, **common)
    if conf.kind == "mla":
        return make_layer(kind="mla", num_heads=4, **common)
    if f == "dual_chunk":
        return make_layer(num_heads=4, num_kv_heads=2, head_dim=16, dual_chunk=DCA, **common)
    return make_layer(num_heads=8, num_kv_heads=2, head_dim=64,
                      sliding_window=5 if f == "sliding_window" else None,
                      logit_softcap=5.0 if f == "logit_softcap" else None, sinks=f == "sinks",
                      attention_chunk=8 if f == "chunked_local" else None, **common)


class Rig:
    """One backend's static step over a bucket of BUCKET rows, replayed round after round."""

    def __init__(self, conf: CaptureConf, *, backend=None):
        self.conf, self.dev = conf, torch.device(conf.device)
        self.layer = _layer(conf)
        self.spec = spec = self.layer.spec
        self.dtype = torch_dtype(conf.dtype)
        self.page = DCA_PAGES[conf.page_size] if spec.dual_chunk else conf.page_size
        self.pages = max_pages(self.page)
        scratch = StaticDecode.scratch_need(BUCKET, self.page)
        self.num_pages = BUCKET * self.pages + scratch               # the last ones: scratch
        self.cache = PagedKVCache([spec], num_pages=self.num_pages, page_size=self.page,
                                  dtype=self.dtype, device=self.dev, index_dtype=conf.index_dtype)
        self.static = StaticDecode(max_batch=BUCKET, max_pages=self.pages, page_size=self.page,
                                   scratch_pages=range(self.num_pages - scratch, self.num_pages),
                                   device=self.dev)
        self.owned = self.num_pages - scratch                        # pages requests may own
        options = dict(conf.options) | ({"impl": "triton"} if spec.dual_chunk else {})
        self.backend = backend or load_backend(conf.backend, **options)
        # planned while every row is padded: one key each
        self.step = self.backend.prepare_static(self.static.meta(BUCKET), self.cache,
                                                max_seq_len=self.static.max_seq_len)
        self.q, self.k, self.v = self._draw(BUCKET, torch.Generator().manual_seed(0))
        self.indexer = (self._draw_indexer(BUCKET, torch.Generator().manual_seed(0))
                        if spec.sparse_topk is not None else None)     # static inputs too
        self.run = self._replayer()

    def _rand(self, gen, *shape):
        return torch.randn(*shape, generator=gen).to(device=self.dev, dtype=self.dtype)

    def _draw(self, n: int, gen):
        """q, k, v of n decode rows as the backend takes them (dual chunk: q [n, 3, H, D])."""
        s = self.spec
        if s.kind == "mla":
            return (self._rand(gen, n, s.num_heads, s.head_dim), self._rand(gen, n, s.mla.latent_dim), None)
        variants = (3,) if s.dual_chunk else ()
        return (self._rand(gen, n, *variants, s.num_heads, s.head_dim),
                self._rand(gen, n, s.num_kv_heads, s.head_dim),
                self._rand(gen, n, s.num_kv_heads, s.value_dim))

    def _draw_indexer(self, n: int, gen) -> IndexerInputs:
        """A DSA layer's indexer inputs for n rows: q [n, H_i, D_i], weights [n, H_i] fp32, k [n, D_i]."""
        sp = self.spec.sparse_topk
        return IndexerInputs(self._rand(gen, n, sp.index_n_heads, sp.index_head_dim),
                             torch.randn(n, sp.index_n_heads, generator=gen).to(self.dev),
                             self._rand(gen, n, sp.index_head_dim))

    def _body(self):
        self.backend.refill_static(self.step)
        if self.indexer is None:
            return self.backend.forward(self.q, self.k, self.v, self.layer, self.cache, self.step)
        return self.backend.forward(self.q, self.k, self.v, self.layer, self.cache, self.step,
                                    indexer=self.indexer)

    def _replayer(self):
        if self.dev.type != "cuda":
            self._body()                                   # as the GPU warm-up does
            return self._body
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                      # warm-up: compile, allocate plans
            self._body()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._body()

        def replay():
            graph.replay()
            return out
        return replay

    def replay_round(self, index: int, prefixes: list[int], *, poison: bool = True) -> None:
        """Fill the static step with requests decoding after ``prefixes`` (the other rows
        padded), replay, compare with the oracle; raises AssertionError on a mismatch."""
        gen = torch.Generator().manual_seed(100 + index)
        alloc = PageAllocator(self.owned, page_size=self.page, shuffle=index)
        reqs = [Request(p, 1, alloc.allocate(i, p + 1)) for i, p in enumerate(prefixes)]
        n = len(reqs)
        if self.spec.dual_chunk:
            q, k, v, want = self._dual_chunk_round(reqs, gen)
        elif self.indexer is not None:
            q, k, v, want = self._dsa_round(reqs, gen)
        else:
            q, k, v, want = self._plain_round(reqs, gen)
        expected = copy.deepcopy(self.cache)               # what the real writes alone leave
        slots = torch.tensor([slots_of(r.block_table, (r.prefix_len,), self.page)[0] for r in reqs],
                             dtype=torch.int64, device=self.dev)
        expected.write(self.spec.layer_id, slots, k[:n], None if v is None else v[:n])
        if self.indexer is not None:
            expected.write_index(self.spec.layer_id, slots, self._next_indexer.k[:n])
            for name in ("q", "weights", "k"):
                getattr(self.indexer, name).copy_(getattr(self._next_indexer, name))
        self.q.copy_(q)
        self.k.copy_(k)
        if v is not None:
            self.v.copy_(v)
        meta = self.static.fill(BUCKET, reqs)
        if poison:
            for name in ("seq_lens_cpu", "prefix_lens_cpu", "block_tables_cpu", "slot_mapping_cpu"):
                object.__setattr__(meta, name, Unreadable(getattr(meta, name)))   # past the read-only guard
        out = self.run()
        dv = self.spec.mla.v_head_dim if self.spec.kind == "mla" else self.spec.value_dim
        assert out.shape == (BUCKET, self.spec.num_heads * dv)
        assert_close(out[:n], want, dtype=self.conf.dtype, what=f"{self.conf.id} round {index}")
        self._check_cache(expected)

    def _plain_round(self, reqs, gen):
        """Random cached prefixes, the step's inputs and the float64 reference of real rows."""
        lid, n = self.spec.layer_id, len(reqs)
        slots = [s for r in reqs for s in slots_of(r.block_table, range(r.prefix_len), self.page)]
        if slots:
            pk, pv = self._draw(len(slots), gen)[1:]
            self.cache.write(lid, torch.tensor(slots, device=self.dev), pk, pv)
        q, k, v = self._draw(BUCKET, gen)
        meta = build_batch(reqs, page_size=self.page, device=self.dev)
        want = reference.attention(q[:n], k[:n], None if v is None else v[:n], self.layer,
                                   self.cache, meta)
        return q, k, v, want

    def _dsa_round(self, reqs, gen):
        """_plain_round plus the indexer: the cached prefixes' index keys, the step's indexer
        inputs (drawn again while a real row's top-k boundary is a near-tie, which rounding
        could flip) and the float64 DSA reference of the real rows."""
        lid, n = self.spec.layer_id, len(reqs)
        slots = [s for r in reqs for s in slots_of(r.block_table, range(r.prefix_len), self.page)]
        if slots:
            at = torch.tensor(slots, device=self.dev)
            pk = self._draw(len(slots), gen)[1]
            self.cache.write(lid, at, pk, None)
            self.cache.write_index(lid, at, self._draw_indexer(len(slots), gen).k)
        q, k, _ = self._draw(BUCKET, gen)
        meta = build_batch(reqs, page_size=self.page, device=self.dev)
        topk = self.spec.sparse_topk.topk
        for _ in range(50):
            full = self._draw_indexer(BUCKET, gen)
            ix = IndexerInputs(full.q[:n], full.weights[:n], full.k[:n])
            rows = reference_dsa.index_scores(self.layer, self.cache, meta, indexer=ix)
            gaps = [(r.sort(descending=True).values, r.abs().max().item()) for r in rows if r.numel() > topk]
            if not any(0 < (top[topk - 1] - top[topk]).item() < NEAR_TIE * big for top, big in gaps):
                break
        else:
            raise AssertionError("no indexer draw without a near-tie in 50 attempts")
        self._next_indexer = full
        want = reference_dsa.attention(q[:n], k[:n], None, self.layer, self.cache, meta, indexer=ix)
        return q, k, None, want

    def _dual_chunk_round(self, reqs, gen):
        """Raw sequences: the cache holds their keys rotated at chunk-local positions; the
        step's queries go in three rotations; the oracle rotates on its own in float64."""
        from attnkit.runner.layers.rotary import DualChunkRotary

        s, lid = self.spec, self.spec.layer_id
        rotary = DualChunkRotary(DCA, base=ROPE_BASE)
        q3s, ks, vs, wants = [], [], [], []
        for r in reqs:
            m = r.prefix_len + 1
            raw_q = torch.randn(m, s.num_heads, s.head_dim, generator=gen)
            raw_k = torch.randn(m, s.num_kv_heads, s.head_dim, generator=gen)
            raw_v = torch.randn(m, s.num_kv_heads, s.value_dim, generator=gen)
            pos = torch.arange(m)
            q3, k_rot = rotary(raw_q, raw_k, pos)
            if r.prefix_len:
                slots = torch.tensor(slots_of(r.block_table, range(r.prefix_len), self.page))
                self.cache.write(lid, slots.to(self.dev), k_rot[:-1].to(self.dev, self.dtype),
                                 raw_v[:-1].to(self.dev, self.dtype))
            q3s.append(q3[-1:])
            ks.append(k_rot[-1:])
            vs.append(raw_v[-1:])
            wants.append(dual_chunk_reference(raw_q[-1:].double(), raw_k.double(), raw_v.double(),
                                              config=DCA, q_positions=[m - 1], rope_base=ROPE_BASE,
                                              scale=s.softmax_scale))
        pad = BUCKET - len(reqs)
        q3 = torch.cat(q3s + [torch.randn(pad, 3, s.num_heads, s.head_dim, generator=gen)])
        k = torch.cat(ks + [torch.randn(pad, s.num_kv_heads, s.head_dim, generator=gen)])
        v = torch.cat(vs + [torch.randn(pad, s.num_kv_heads, s.value_dim, generator=gen)])
        to = dict(device=self.dev, dtype=self.dtype)
        want = torch.cat(wants).reshape(len(reqs), -1)
        return q3.to(**to), k.to(**to), v.to(**to), want

    def _check_cache(self, expected) -> None:
        """Every page but the scratch pages holds exactly what the real requests wrote."""
        lid, keep = self.spec.layer_id, slice(0, self.owned)
        for name in ("k", "v", "latent", "index_k", "index_k_scale"):
            got, want = getattr(self.cache, name).get(lid), getattr(expected, name).get(lid)
            if got is not None:
                assert torch.equal(got[keep], want[keep]), f"{self.conf.id}: cache {name} differs"


def _params():
    out = []
    for conf in cases():
        marks = [pytest.mark.gpu] if conf.device == "cuda" else []
        why = missing(next(d for d in capturable() if d.name == conf.backend))
        if why:
            marks.append(pytest.mark.skip(reason=why))
        out.append(pytest.param(conf, id=conf.id, marks=marks))
    return out


@pytest.mark.parametrize("conf", _params())
def test_static_step_replays_match_the_reference(conf: CaptureConf):
    rig = Rig(conf)
    for i, prefixes in enumerate(ROUNDS):
        rig.replay_round(i, lengths(prefixes, rig.page))


def test_every_capturable_backend_has_cases():
    for decl in capturable():
        mine = [c for c in cases() if c.backend == decl.name]
        assert {c.device for c in mine} >= ({"cpu", "cuda"} & set(decl.capabilities.platforms) | {"cpu"})
        assert {c.kind for c in mine} == set(decl.capabilities.kinds)


@pytest.mark.parametrize("decl", not_capturable(), ids=lambda d: d.name)
def test_backends_without_cuda_graph_refuse_a_static_step(decl):
    if "cpu" not in decl.capabilities.platforms or missing(decl):
        pytest.skip(f"{decl.name} does not run on this CPU")
    kind = decl.capabilities.kinds[0]
    layer = make_layer(kind=kind, num_heads=4, num_kv_heads=2 if kind == "mha" else None, head_dim=64)
    cache = PagedKVCache([layer.spec], num_pages=9, page_size=16)
    static = StaticDecode(max_batch=2, max_pages=4, page_size=16, scratch_pages=[8], device="cpu")
    with pytest.raises(AttnkitError) as err:
        load_backend(decl.name).prepare_static(static.meta(2), cache, max_seq_len=64)
    assert err.value.code == "AK457"


# ---- the suite fails a wrong implementation --------------------------------------------

CPU_TRITON = CaptureConf("triton", "cpu", "mha", "fp32", 16, None, (("num_splits", 3),))


def _size_for_capture_time_lengths(monkeypatch, backend_cls) -> None:
    """Make ``backend_cls.capture_plan`` size its static step for the lengths of the moment
    (the longest request at capture time) instead of ``max_seq_len``: a wrong plan the suite
    must catch."""
    original = backend_cls.capture_plan

    def stale(self, meta, cache, *, max_seq_len):
        step = original(self, meta, cache, max_seq_len=max_seq_len)
        step.prepared.max_kv = max(meta.seq_lens_cpu)
        return step

    monkeypatch.setattr(backend_cls, "capture_plan", stale)


def test_splits_sized_for_the_capture_time_lengths_fail(monkeypatch):
    """A plan sized for the lengths of the moment (one key per padded row) loses keys."""
    from attnkit.backends.triton import backend as triton_backend

    _size_for_capture_time_lengths(monkeypatch, triton_backend.TritonBackend)
    rig = Rig(CPU_TRITON)
    with pytest.raises(AssertionError, match="max \\|out - ref\\|"):
        rig.replay_round(1, lengths(ROUNDS[1], rig.page))


def test_a_forward_that_reads_host_lengths_fails(monkeypatch):
    """The eager plan (split counts from seq_lens_cpu) under a static step is caught."""
    from attnkit.backends.triton import backend as triton_backend

    monkeypatch.setattr(triton_backend.TritonBackend, "capture_plan",
                        lambda self, meta, cache, max_seq_len: self.prepare(meta, cache))
    rig = Rig(CPU_TRITON)
    with pytest.raises(AssertionError, match="host lists"):
        rig.replay_round(0, lengths(ROUNDS[0], rig.page))


def test_padded_rows_writing_a_real_page_fail(monkeypatch):
    """Padding that writes into a page a request owns is caught by the cache check."""
    monkeypatch.setattr(StaticDecode, "_padded", lambda self, row: (0, row % self.page_size))
    rig = Rig(CPU_TRITON)
    with pytest.raises(AssertionError, match="cache k differs"):
        rig.replay_round(1, lengths(ROUNDS[1], rig.page))


@pytest.mark.interpreter
def test_dsa_scores_sized_for_the_capture_time_lengths_fail(monkeypatch):
    """A DSA static step scored over the lengths of the moment (one key a padded row) never
    sees most of a later request's context: its top-k, and so its output, are wrong."""
    from attnkit.backends.triton_dsa import backend as dsa_backend

    _size_for_capture_time_lengths(monkeypatch, dsa_backend.TritonDSABackend)
    conf = next(c for c in cases() if c.backend == "triton_dsa" and c.device == "cpu")
    rig = Rig(conf)
    with pytest.raises(AssertionError, match="max \\|out - ref\\|"):
        rig.replay_round(1, lengths(ROUNDS[1], rig.page))

"""Fuzz over the runtime API (allocator, batch building, cache writes, prepare/forward):
every input either runs and matches an oracle, or raises AttnkitError; after a refusal the
cache and the allocator are byte-identical; NaN / +-inf in every slot a batch does not hold
never changes its output. Bounded for CI (max_examples, small shapes, CPU backends)."""
from __future__ import annotations

import pickle

import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from attnkit import reference
from attnkit.backends.base import RuntimeLayer
from attnkit.backends.batch import Request, build_batch, slots_of
from attnkit.errors import AttnkitError
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import LayerAttention, MLAConfig
from attnkit.registry import load_backend
from factories import assert_close, fill_garbage

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JUNK = st.sampled_from([-1, 0, 2.5, None, "3", True, [1], 10**6])


def _state(alloc: PageAllocator) -> bytes:
    return pickle.dumps((alloc._fresh, list(alloc._free), alloc._owned))


def _buffers(cache: PagedKVCache) -> list[torch.Tensor]:
    return [t.clone() for d in (cache.k, cache.v, cache.latent) for t in d.values()]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(a, b))


# ---- allocator: a model of who owns which pages ------------------------------------------
OPS = st.lists(st.tuples(st.sampled_from(["allocate", "grow", "free", "row", "table"]),
                         st.one_of(st.sampled_from(["a", "b", "c", 0]), st.just(["unhashable"])),
                         st.one_of(st.integers(0, 40), JUNK)), max_size=25)


@FUZZ
@given(num_pages=st.integers(0, 12), page_size=st.sampled_from([1, 4, 16]), ops=OPS,
       shuffle=st.sampled_from([None, 3]))
def test_allocator_ops_keep_their_invariants(num_pages, page_size, ops, shuffle):
    alloc = PageAllocator(num_pages, page_size=page_size, shuffle=shuffle)
    tokens: dict = {}
    for op, rid, n in ops:
        before = _state(alloc)
        try:
            if op == "allocate":
                row = alloc.allocate(rid, n)
                tokens[rid] = n
            elif op == "grow":
                row = alloc.grow(rid, n)
                tokens[rid] += n
            elif op == "free":
                alloc.free(rid)
                del tokens[rid]
            elif op == "row":
                assert alloc.row(rid) == alloc.block_table([rid])[0]
            else:
                alloc.block_table(n)
        except AttnkitError:
            assert _state(alloc) == before, f"{op}({rid!r}, {n!r}) refused but changed the allocator"
            continue
        if op in ("allocate", "grow"):
            assert len(row) == -(-tokens[rid] // page_size)
        rows = [alloc.row(r) for r in tokens]
        owned = [p for r in rows for p in r]
        assert len(set(owned)) == len(owned) and all(0 <= p < num_pages for p in owned)
        assert alloc.num_free + len(owned) == num_pages


# ---- cache writes: a dense model of the buffer --------------------------------------------
@FUZZ
@given(slots=st.lists(st.integers(-3, 27), min_size=0, max_size=8), mla=st.booleans(),
       bad=st.sampled_from([None, None, "k_shape", "v_none", "float_slots", "layer"]),
       dtype=st.sampled_from(["fp32", "fp8_e4m3"]))
def test_cache_writes_land_exactly_or_change_nothing(slots, mla, bad, dtype):
    spec = (LayerAttention(layer_id=0, num_heads=2, num_kv_heads=1, head_dim=12, kind="mla",
                           mla=MLAConfig(kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8))
            if mla else LayerAttention(layer_id=0, num_heads=2, num_kv_heads=1, head_dim=4))
    cache = PagedKVCache([spec], num_pages=6, page_size=4, dtype=dtype, k_scales={0: 0.5})
    n = len(slots)
    k = torch.randn(n, 12) if mla else torch.randn(n, 1, 4)
    v = None if mla else torch.randn(n, 1, 4)
    s = torch.tensor(slots, dtype=torch.int64)
    layer_id = 0
    if bad == "k_shape":
        k = k[..., :-1]
    elif bad == "v_none":
        v = None if not mla else torch.randn(n, 1, 4)
    elif bad == "float_slots":
        s = s.float()
    elif bad == "layer":
        layer_id = 3
    before = _buffers(cache)
    try:
        cache.write(layer_id, s, k, v)
    except AttnkitError:
        assert _same(_buffers(cache), before)
        return
    assert bad is None and len(set(slots)) == n and all(0 <= x < 24 for x in slots)
    written = torch.zeros(24, dtype=torch.bool)
    written[s] = True
    for new, old, x, scale in zip(_buffers(cache), before, (k,) if mla else (k, v), (0.5, 1.0)):
        rows_new, rows_old = new.view(24, -1), old.view(24, -1)
        assert torch.equal(rows_new[~written].view(torch.uint8), rows_old[~written].view(torch.uint8))
        assert torch.equal(reference.read_back(new, scale)[s], reference.round_to_cache(x, new.dtype, scale))


# ---- one step through a backend -------------------------------------------------------------
@st.composite
def steps(draw):
    mla = draw(st.booleans())
    heads, kv = draw(st.sampled_from([(4, 2), (4, 1), (2, 2), (8, 2), (4, 4), (4, 3)]))
    spec_kw = dict(layer_id=0, num_heads=heads, num_kv_heads=1 if mla else kv,
                   head_dim=24 if mla else draw(st.sampled_from([8, 16])),
                   sliding_window=draw(st.sampled_from([None, None, None, 3, 7, 0])),
                   role=draw(st.sampled_from(["decoder", "decoder", "encoder"])))
    if mla:
        spec_kw.update(kind="mla", mla=MLAConfig(kv_lora_rank=16, qk_rope_head_dim=8,
                                                 qk_nope_head_dim=16, v_head_dim=16))
    reqs = draw(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 9)), min_size=0, max_size=4))
    return dict(spec=spec_kw, reqs=reqs, page_size=draw(st.sampled_from([1, 4, 16])),
                kv_dtype=draw(st.sampled_from(["fp32", "fp32", "fp16", "fp8_e5m2"])),
                backend=draw(st.sampled_from(["torch_native", "sdpa"])),
                corrupt=draw(st.sampled_from([None] * 8 + ["page", "share", "short", "qshape",
                                                         "kdtype", "slot"])),
                seed=draw(st.integers(0, 2**16)))


@settings(FUZZ, max_examples=120)
@given(case=steps())
def test_a_step_matches_the_reference_or_is_refused_unchanged(case):
    try:
        spec = LayerAttention(**case["spec"])
    except AttnkitError:
        event("spec refused")
        return                                        # a spec refused when made is fine
    gen = torch.Generator().manual_seed(case["seed"])
    ps, reqs = case["page_size"], case["reqs"]
    if spec.role == "encoder":
        reqs = [(0, n) for _, n in reqs]
    alloc = PageAllocator(sum(-(-(p + n) // ps) for p, n in reqs) + 3, page_size=ps, shuffle=case["seed"])
    rows = [alloc.allocate(i, p + n) for i, (p, n) in enumerate(reqs)]
    requests = [Request(p, n, row) for (p, n), row in zip(reqs, rows)]
    corrupt = case["corrupt"]
    if corrupt == "page" and requests:
        requests[0] = Request(requests[0].prefix_len, requests[0].num_new, [alloc.num_pages + 5] * 9)
    if corrupt == "share" and len(requests) > 1:
        requests[1] = Request(requests[1].prefix_len, requests[1].num_new, rows[0] * 4)
    if corrupt == "short" and requests:
        requests[0] = Request(requests[0].prefix_len, requests[0].num_new, rows[0][:-1])
    cache = PagedKVCache([spec], num_pages=alloc.num_pages, page_size=ps, dtype=case["kv_dtype"],
                         k_scales={0: 0.5}, v_scales={0: 2.0})
    width = spec.mla.latent_dim if spec.kind == "mla" else None
    # cached prefixes (real K/V) of the block tables the batch really uses (a "share"d row
    # reads its prefix from the other request's page), then NaN / inf everywhere else
    n_slots = alloc.num_pages * ps
    prefix_slots = sorted({s for r in requests for s in slots_of(r.block_table, range(r.prefix_len), ps)
                           if 0 <= s < n_slots} if all(len(r.block_table) * ps >= r.prefix_len for r in requests)
                          else {s for (p, _), row in zip(reqs, rows) for s in slots_of(row, range(p), ps)})
    if prefix_slots:
        n = len(prefix_slots)
        pk = torch.randn(n, width, generator=gen) if width else torch.randn(n, spec.num_kv_heads, spec.head_dim, generator=gen)
        pv = None if width else torch.randn(n, spec.num_kv_heads, spec.value_dim, generator=gen)
        cache.write(0, torch.tensor(prefix_slots), pk, pv)
    fill_garbage(cache, 0, keep=prefix_slots)
    alloc_before = _state(alloc)
    try:
        meta = build_batch(requests, page_size=ps)
    except AttnkitError as err:
        event(f"build_batch refused {err.code}")
        assert _state(alloc) == alloc_before
        return
    t = meta.num_tokens
    q = torch.randn(t, spec.num_heads, spec.head_dim, generator=gen)
    k = torch.randn(t, width, generator=gen) if width else torch.randn(t, spec.num_kv_heads, spec.head_dim, generator=gen)
    v = None if width else torch.randn(t, spec.num_kv_heads, spec.value_dim, generator=gen)
    if corrupt == "qshape":
        q = q[:, :-1]
    if corrupt == "kdtype":
        k = k.half()
    if corrupt == "slot" and t:
        bad = list(meta.slot_mapping_cpu)
        bad[0] = -1
        import dataclasses
        meta = dataclasses.replace(meta, slot_mapping_cpu=bad)
    layer = RuntimeLayer(spec, **_mla_weights(spec, gen))
    before = _buffers(cache)
    try:
        ref = reference.attention(q, k, v, layer, cache, meta)
    except AttnkitError:
        ref = None
    assert _same(_buffers(cache), before), "the reference changed the caller's cache"
    backend = load_backend(case["backend"])
    try:
        out = backend.forward(q, k, v, layer, cache, backend.prepare(meta, cache))
    except AttnkitError as err:
        event(f"backend refused {err.code}")
        assert _same(_buffers(cache), before), "a refusal changed the cache"
        assert _state(alloc) == alloc_before
        return
    event("ran and matched" if t else "ran an empty step")
    assert ref is not None, "the backend computed an input the reference refuses"
    assert assert_close(out, ref, dtype="fp32", kv_dtype=case["kv_dtype"], what=str(case)) is None


def _mla_weights(spec, gen) -> dict:
    if spec.kind != "mla":
        return {}
    m = spec.mla
    return dict(w_kc=torch.randn(spec.num_heads, m.qk_nope_head_dim, m.kv_lora_rank, generator=gen) * 0.25,
                w_vc=torch.randn(spec.num_heads, m.kv_lora_rank, m.v_head_dim, generator=gen) * 0.25)


@FUZZ
@given(case=steps())
def test_the_reference_ignores_what_a_batch_does_not_hold(case):
    """The oracle itself: the same step over a zeroed and a NaN-filled cache (same cached K/V)
    gives the same output, bit for bit."""
    try:
        spec = LayerAttention(**(case["spec"] | {"sliding_window": None}))
    except AttnkitError:
        return
    ps, reqs = case["page_size"], case["reqs"]
    if spec.role == "encoder":
        reqs = [(0, n) for _, n in reqs]
    alloc = PageAllocator(sum(-(-(p + n) // ps) for p, n in reqs) + 2, page_size=ps, shuffle=case["seed"])
    requests = [Request(p, n, alloc.allocate(i, p + n)) for i, (p, n) in enumerate(reqs)]
    meta = build_batch(requests, page_size=ps)
    gen = torch.Generator().manual_seed(case["seed"])
    layer = RuntimeLayer(spec, **_mla_weights(spec, gen))
    width = spec.mla.latent_dim if spec.kind == "mla" else None
    t = meta.num_tokens
    q = torch.randn(t, spec.num_heads, spec.head_dim, generator=gen)
    k = torch.randn(t, width, generator=gen) if width else torch.randn(t, spec.num_kv_heads, spec.head_dim, generator=gen)
    v = None if width else torch.randn(t, spec.num_kv_heads, spec.value_dim, generator=gen)
    outs = []
    for garbage in (False, True):
        cache = PagedKVCache([spec], num_pages=alloc.num_pages, page_size=ps, dtype=case["kv_dtype"])
        prefix = [s for r in requests for s in slots_of(r.block_table, range(r.prefix_len), ps)]
        if prefix:
            g2 = torch.Generator().manual_seed(1)
            n = len(prefix)
            pk = torch.randn(n, width, generator=g2) if width else torch.randn(n, spec.num_kv_heads, spec.head_dim, generator=g2)
            pv = None if width else torch.randn(n, spec.num_kv_heads, spec.value_dim, generator=g2)
            cache.write(0, torch.tensor(prefix), pk, pv)
        if garbage:
            fill_garbage(cache, 0, keep=prefix)
        try:
            outs.append(reference.attention(q, k, v, layer, cache, meta))
        except AttnkitError as err:                   # an invalid spec: refused both times
            outs.append(err.code)
    assert outs[0] == outs[1] if isinstance(outs[0], str) else torch.equal(outs[0], outs[1])


# ---- BatchMetadata by hand: refused, or its tensors are its host values ---------------------
INTS = st.lists(st.one_of(st.integers(-3, 40), JUNK), max_size=4)


@FUZZ
@given(seq=INTS, prefix=INTS, tables=st.lists(INTS, max_size=4), slots=st.lists(st.integers(-2, 200), max_size=12),
       mode=st.sampled_from(["extend", "decode", "mixed", "idle", "verify", "prefill", 3]),
       page_size=st.one_of(st.sampled_from([1, 4]), JUNK))
def test_hand_made_metadata_is_refused_or_consistent(seq, prefix, tables, slots, mode, page_size):
    from attnkit.backends.metadata import BatchMetadata
    from attnkit.backends.validation import validate_batch

    try:
        meta = BatchMetadata(mode=mode, page_size=page_size, seq_lens_cpu=seq, prefix_lens_cpu=prefix,
                             block_tables_cpu=tables, slot_mapping_cpu=slots)
    except AttnkitError:
        return
    assert meta.seq_lens.tolist() == list(meta.seq_lens_cpu)
    assert meta.slot_mapping.tolist() == list(meta.slot_mapping_cpu)
    assert meta.block_tables.tolist() == [list(r) for r in meta.block_tables_cpu]
    assert meta.query_start_loc.tolist()[-1] == meta.num_tokens == len(meta.slot_mapping_cpu)
    cache = PagedKVCache([LayerAttention(layer_id=0, num_heads=1, num_kv_heads=1, head_dim=4)],
                         num_pages=8, page_size=meta.page_size, dtype="fp32")
    try:
        validate_batch(meta, cache)
    except AttnkitError:
        return
    limit = 8 * meta.page_size                        # accepted: every slot is its request's own
    assert all(0 <= s < limit for s in meta.slot_mapping_cpu)
    assert len(set(meta.slot_mapping_cpu)) == meta.num_tokens

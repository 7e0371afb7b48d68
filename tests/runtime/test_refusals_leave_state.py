"""Bad arguments to the KV cache, the allocator and load_backend are coded errors, and leave
the cache and the allocator byte-identical (issue 13, item 6: a -1 slot wrote the last slot,
an out-of-range slot raised IndexError, huge page counts raised MemoryError / RuntimeError,
an unknown backend name raised KeyError)."""
import pickle
import warnings

import pytest
import torch

from attnkit.errors import CATALOG, AttnkitError
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import LayerAttention, MLAConfig
from attnkit.registry import load_backend

MHA = LayerAttention(layer_id=0, num_heads=4, num_kv_heads=2, head_dim=8)
MLA = LayerAttention(layer_id=1, num_heads=4, num_kv_heads=1, head_dim=24, kind="mla",
                     mla=MLAConfig(kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16))


def _code(fn):
    with pytest.raises(AttnkitError) as err:
        fn()
    assert err.value.code in CATALOG
    return err.value


def _snapshot(cache):
    return [t.clone() for d in (cache.k, cache.v, cache.latent) for t in d.values()]


@pytest.fixture
def cache():
    c = PagedKVCache([MHA, MLA], num_pages=3, page_size=4, dtype="fp32")
    g = torch.Generator().manual_seed(0)
    for d in (c.k, c.v, c.latent):
        for t in d.values():
            t.copy_(torch.randn(t.shape, generator=g))
    return c


def kv(n, *, mla=False):
    return (torch.ones(n, 24), None) if mla else (torch.ones(n, 2, 8), torch.ones(n, 2, 8))


@pytest.mark.parametrize("args, code, field", [
    (lambda: (0, torch.tensor([3, -1]), *kv(2)), "AK415", "slot_mapping[1]"),      # wrote slot 11
    (lambda: (0, torch.tensor([0, 12]), *kv(2)), "AK415", "slot_mapping[1]"),      # IndexError
    (lambda: (1, torch.tensor([-12]), *kv(1, mla=True)), "AK415", "slot_mapping[0]"),
    (lambda: (0, torch.tensor([5, 5]), *kv(2)), "AK416", "slot_mapping"),
    (lambda: (0, torch.tensor([1.0, 2.0]), *kv(2)), "AK410", "slot_mapping"),
    (lambda: (0, [1, 2], *kv(2)), "AK410", "slot_mapping"),
    (lambda: (0, torch.tensor([[1, 2]]), *kv(2)), "AK411", "slot_mapping"),
    (lambda: (0, torch.tensor([1, 2, 3]), *kv(2)), "AK411", "k"),
    (lambda: (0, torch.tensor([1, 2]), torch.ones(2, 2, 8), None), "AK411", "v"),
    (lambda: (0, torch.tensor([1, 2]), torch.ones(2, 2, 8, dtype=torch.int32), torch.ones(2, 2, 8)),
     "AK410", "k"),
    (lambda: (1, torch.tensor([1]), torch.ones(1, 24), torch.ones(1, 24)), "AK411", "v"),
    (lambda: (7, torch.tensor([1]), *kv(1)), "AK418", "layer_id"),
    (lambda: (0, torch.tensor([1], device="meta"), *kv(1)), "AK412", "slot_mapping"),
])
def test_bad_writes_are_refused_and_write_nothing(cache, args, code, field):
    before = _snapshot(cache)
    err = _code(lambda: cache.write(*args()))
    assert (err.code, err.field) == (code, field)
    assert all(torch.equal(a, b) for a, b in zip(_snapshot(cache), before))


def test_a_good_write_lands_where_it_says(cache):
    cache.write(0, torch.tensor([11, 0]), torch.full((2, 2, 8), 7.0), torch.full((2, 2, 8), 8.0))
    assert (cache.k[0][2, 3] == 7).all() and (cache.v[0][0, 0] == 8).all()


@pytest.mark.parametrize("kwargs, code, field", [
    (dict(num_pages=10**12), "AK431", "num_pages"),                 # MemoryError / RuntimeError
    (dict(num_pages=2**40, dtype="fp8_e4m3"), "AK431", "num_pages"),
    (dict(device="bogus"), "AK430", "device"),
    (dict(device="mps" if not torch.backends.mps.is_available() else "bogus"), "AK430", "device"),
    (dict(layers=[MHA, MHA]), "AK430", "layers[1].layer_id"),
    (dict(layers=[{"layer_id": 0}]), "AK430", "layers[0]"),
    (dict(layers=7), "AK430", "layers"),
])
def test_cache_arguments_refused_before_allocating(kwargs, code, field):
    args = dict(layers=[MHA], num_pages=4, page_size=16, dtype="fp32") | kwargs
    layers = args.pop("layers")
    err = _code(lambda: PagedKVCache(layers, **args))
    assert (err.code, err.field) == (code, field)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_cuda_cache_without_cuda_is_coded():
    assert _code(lambda: PagedKVCache([MHA], num_pages=1, page_size=1, device="cuda")).code == "AK430"


def test_a_huge_allocator_costs_nothing_until_used():
    alloc = PageAllocator(10**15, page_size=16)
    assert alloc.num_free == 10**15
    assert alloc.allocate("a", 40) == [0, 1, 2] and alloc.allocate("b", 1) == [3]
    alloc.free("a")
    assert alloc.allocate("c", 64) == [4, 5, 6, 7]           # never-used pages first, as before
    assert alloc.num_free == 10**15 - 5
    assert _code(lambda: PageAllocator(10**15, shuffle=1)).code == "AK405"


def test_fifo_order_is_unchanged():
    alloc = PageAllocator(6, page_size=1)
    alloc.allocate("a", 2)
    alloc.allocate("b", 2)
    alloc.free("a")
    assert alloc.allocate("c", 4) == [4, 5, 0, 1] and alloc.num_free == 0


@pytest.mark.parametrize("call", [
    lambda a: a.allocate(["not", "hashable"], 3),
    lambda a: a.allocate("x", 3),                              # already holds pages
    lambda a: a.allocate("new", 10**6),                        # out of pages
    lambda a: a.grow({"a": 1}, 1),
    lambda a: a.grow("x", 10**6),
    lambda a: a.free("never"),
    lambda a: a.block_table(5),
    lambda a: a.allocate("y", 2.5),
])
def test_allocator_refusals_leave_it_unchanged(call):
    alloc = PageAllocator(8, page_size=4, shuffle=3)
    alloc.allocate("x", 5)
    before = pickle.dumps((alloc._fresh, list(alloc._free), alloc._owned))
    _code(lambda: call(alloc))
    assert pickle.dumps((alloc._fresh, list(alloc._free), alloc._owned)) == before


@pytest.mark.parametrize("name, kwargs, code", [
    ("sdpaa", {}, "AK300"), ("tritonmla", {}, "AK300"), (3, {}, "AK300"), (None, {}, "AK300"),
    ("flashinfer", {}, "AK301"), ("sdpa", {"nope": 1}, "AK407"),
    ("torch_native", {"mla_form": "bad"}, "AK407"),
])
def test_load_backend_refusals_are_coded(name, kwargs, code):
    err = _code(lambda: load_backend(name, **kwargs))
    assert err.code == code
    if name == "sdpaa":
        assert err.details["did_you_mean"] == ["sdpa"] and "did you mean 'sdpa'" in err.message


def test_load_backend_accepts_aliases_and_spellings_with_a_warning():
    with pytest.warns(UserWarning, match="deprecated"):
        assert load_backend("torch").name == "torch_native"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_backend("Torch-Native").name == "torch_native"


@pytest.mark.parametrize("backend", ["torch_native", "sdpa", "triton", "dual_chunk"])
@pytest.mark.parametrize("what", ["step", "layer", "cache", "prepare-cache", "prepare-meta"])
def test_wrong_kinds_of_argument_are_coded(backend, what):
    """Each was a raw AttributeError ('NoneType' object has no attribute ...)."""
    from factories import make_case, make_layer

    case = make_case(make_layer(num_heads=4, num_kv_heads=2, head_dim=64), prefix_lens=[3, 0],
                     new_lens=[1, 5], page_size=4)
    be = load_backend(backend)
    step = be.prepare(case.meta, case.cache)
    args = dict(q=case.q, k=case.k, v=case.v, layer=case.layer, cache=case.cache, step=step)
    calls = {
        "step": lambda: be.forward(**(args | {"step": case.meta})),
        "layer": lambda: be.forward(**(args | {"layer": case.layer.spec})),
        "cache": lambda: be.forward(**(args | {"cache": None})),
        "prepare-cache": lambda: be.prepare(case.meta, "cache"),
        "prepare-meta": lambda: be.prepare(None, case.cache),
    }
    before = _snapshot(case.cache)
    err = _code(calls[what])
    assert err.code in ("AK411", "AK419", "AK430")
    assert all(torch.equal(a, b) for a, b in zip(_snapshot(case.cache), before))


def test_build_batch_wants_a_sequence_of_requests():
    from attnkit.backends.batch import build_batch

    for bad in (None, 5, "abc"):
        assert _code(lambda: build_batch(bad, page_size=4)).code == "AK405"

import pytest
import torch

from attnkit.backends.base import AttentionBackend
from attnkit.backends.hybrid import HybridBackend
from attnkit.backends.metadata import ForwardMode
from attnkit.errors import AttnkitError
from attnkit.registry import declarations, load_backend
from factories import assert_close, make_case, make_layer


class Tagged(AttentionBackend):
    """Returns a constant so the test sees which half served the step."""
    name = "tagged"

    def __init__(self, tag: float):
        self.tag, self.prepared = tag, 0

    def _prepare(self, meta, cache):
        self.prepared += 1
        return super()._prepare(meta, cache)

    def _forward(self, q, k, v, layer, cache, step):
        return torch.full((q.shape[0], q.shape[1] * layer.spec.value_dim), self.tag)


@pytest.mark.parametrize("prefix, new, mode, tag", [
    ([0, 4], [3, 2], None, 1.0),                         # EXTEND
    ([0, 4], [3, 1], None, 1.0),                         # MIXED
    ([5, 4], [3, 3], "verify", 1.0),                     # VERIFY
    ([5, 4], [1, 1], None, 2.0),                         # DECODE
    ([], [], None, 2.0),                                 # IDLE
])
def test_routing_by_mode(prefix, new, mode, tag):
    case = make_case(make_layer(num_heads=2, head_dim=4), prefix_lens=prefix, new_lens=new,
                     page_size=4, mode=mode)
    prefill, decode = Tagged(1.0), Tagged(2.0)
    hybrid = HybridBackend(prefill, decode)
    step = hybrid.prepare(case.meta, case.cache)
    out = hybrid.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert (out == tag).all()
    assert (prefill.prepared, decode.prepared) == ((1, 0) if tag == 1.0 else (0, 1))


@pytest.mark.parametrize("prefix, new, mode, tag", [
    ([0, 0], [3, 2], None, 1.0),                         # EXTEND, no cached prefix anywhere: prefill
    ([0], [5], None, 1.0),
    ([0, 4], [3, 2], None, 3.0),                         # EXTEND, one request over a cached prefix
    ([6], [2], None, 3.0),                               # a chunked-prefill continuation
    ([0, 4], [3, 1], None, 3.0),                         # MIXED
    ([5, 4], [3, 3], "verify", 3.0),                     # VERIFY
    ([5, 4], [1, 1], None, 2.0),                         # DECODE
    ([], [], None, 2.0),                                 # IDLE
])
def test_routing_with_an_extend_backend(prefix, new, mode, tag):
    case = make_case(make_layer(num_heads=2, head_dim=4), prefix_lens=prefix, new_lens=new,
                     page_size=4, mode=mode)
    halves = {1.0: Tagged(1.0), 2.0: Tagged(2.0), 3.0: Tagged(3.0)}
    hybrid = HybridBackend(halves[1.0], halves[2.0], extend=halves[3.0])
    out = hybrid.forward(case.q, case.k, case.v, case.layer, case.cache, hybrid.prepare(case.meta, case.cache))
    assert (out == tag).all()
    assert {t: b.prepared for t, b in halves.items()} == {t: int(t == tag) for t in halves}


@pytest.mark.skipif("torch_native" not in declarations(), reason="torch_native not in the tree yet")
def test_two_torch_native_halves_share_one_cache_over_steps():
    """Prefill then two decode steps through the hybrid; every step matches the reference."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, sliding_window=6)
    hybrid = HybridBackend(load_backend("torch_native"), load_backend("torch_native"))
    prefill = make_case(layer, prefix_lens=[0, 0], new_lens=[7, 3], page_size=4, seed=3)
    out = hybrid.forward(*prefill.args(), hybrid.prepare(prefill.meta, prefill.cache))
    assert_close(out, prefill.reference(), dtype="fp32", what="prefill")
    cache, alloc = prefill.cache, prefill.allocator
    lens = [7, 3]
    from attnkit.backends.batch import Request, build_batch
    from attnkit import reference
    for step_no in range(2):
        rows = [alloc.grow(i, 1) for i in range(2)]
        meta = build_batch([Request(n, 1, row) for n, row in zip(lens, rows)], page_size=4)
        assert meta.mode is ForwardMode.DECODE
        q = torch.randn(2, 4, 16)
        k, v = torch.randn(2, 2, 16), torch.randn(2, 2, 16)
        ref = reference.attention(q, k, v, layer, cache, meta)
        out = hybrid.forward(q, k, v, layer, cache, hybrid.prepare(meta, cache))
        assert_close(out, ref, dtype="fp32", what=f"decode {step_no}")
        lens = [n + 1 for n in lens]


def test_forward_needs_hybrid_state():
    case = make_case(make_layer(num_heads=2, head_dim=4), prefix_lens=[0], new_lens=[2], page_size=4)
    hybrid = HybridBackend(Tagged(1.0), Tagged(2.0))
    with pytest.raises(AttnkitError) as err:
        hybrid.forward(*case.args(), Tagged(1.0).prepare(case.meta, case.cache))
    assert err.value.code == "AK406"


def test_shared_cache_must_suit_both_halves():
    """A declared backend whose page sizes exclude the cache's is refused even when idle."""
    picky = next((d for d in declarations().values() if d.capabilities.page_sizes != "any"), None)
    if picky is None:
        pytest.skip("no registered backend restricts page sizes")
    caps = picky.capabilities
    size = next(s for s in (3, 5, 7, 11, 13) if not caps.accepts_page_size(s))
    case = make_case(make_layer(num_heads=2, head_dim=4), prefix_lens=[0], new_lens=[2], page_size=size)
    half = Tagged(1.0)
    half.declaration = picky            # pose as the declared backend for the layout check
    with pytest.raises(AttnkitError) as err:
        HybridBackend(Tagged(1.0), half).prepare(case.meta, case.cache)
    assert err.value.code == "AK446" and err.value.field == "page_size"
    with pytest.raises(AttnkitError) as err:          # an idle extend backend is checked too
        HybridBackend(Tagged(1.0), Tagged(2.0), extend=half).prepare(case.meta, case.cache)
    assert err.value.code == "AK446" and "extend" in err.value.message

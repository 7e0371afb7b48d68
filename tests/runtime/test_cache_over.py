"""PagedKVCache.over: attnkit's pages as views of a buffer another engine owns, in place."""
import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import PagedKVCache
from attnkit.registry import load_backend
from factories import assert_close, make_case, make_layer


def engine_buffer(cache: PagedKVCache, lid: int) -> torch.Tensor:
    """An engine-style buffer [pages, page_size, H_kv, D + D_v] holding ``cache``'s K and V."""
    return torch.cat([cache.k[lid], cache.v[lid]], dim=-1).contiguous()


@pytest.mark.parametrize("backend", ["sdpa", "torch_native"])
def test_backend_on_views_of_an_engine_buffer_matches_the_reference(backend):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=32, sliding_window=9)
    case = make_case(layer, prefix_lens=[0, 13, 30], new_lens=[7, 1, 4], page_size=8)
    lid, d = layer.layer_id, layer.spec.head_dim
    buf = engine_buffer(case.cache, lid)
    view = PagedKVCache.over([layer.spec], k={lid: buf[..., :d]}, v={lid: buf[..., d:]})
    be = load_backend(backend)
    out = be.forward(case.q, case.k, case.v, layer, view, be.prepare(case.meta, view))
    assert_close(out, case.reference(), dtype="fp32")
    # the step's new K/V landed in the engine's buffer itself
    slots = torch.tensor(case.meta.slot_mapping_cpu)
    rows = buf.view(-1, *buf.shape[2:])[slots]
    assert torch.equal(rows[..., :d], case.k) and torch.equal(rows[..., d:], case.v)


def test_over_refuses_views_that_cannot_be_indexed_in_place():
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=32)
    lid = layer.layer_id
    head_major = torch.zeros(6, 2, 8, 64)                  # [pages, H, tokens, K|V]
    k, v = head_major[..., :32].transpose(1, 2), head_major[..., 32:].transpose(1, 2)
    with pytest.raises(AttnkitError) as err:
        PagedKVCache.over([layer.spec], k={lid: k}, v={lid: v})
    assert err.value.code == "AK430" and "strides" in str(err.value)
    with pytest.raises(AttnkitError):
        PagedKVCache.over([layer.spec], k={lid: torch.zeros(6, 8, 2, 32)}, v={})

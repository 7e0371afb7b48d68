"""Regression tests for gaps a review found in runtime validation (each failed before its fix)."""
import pytest
import torch

from attnkit.backends.base import StepState
from attnkit.errors import AttnkitError
from attnkit.registry import load_backend
from factories import make_case, make_layer


@pytest.mark.parametrize("backend", ["torch_native", "sdpa"])
def test_forward_without_prepare_still_checks_the_batch(backend):
    """A hand-made StepState skips prepare; the slot mapping is still checked (AK415)."""
    import dataclasses

    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, dtype="fp32")
    case = make_case(layer, prefix_lens=[3], new_lens=[2], page_size=4, dtype="fp32")
    meta = dataclasses.replace(case.meta, slot_mapping_cpu=[s + 10_000 for s in case.meta.slot_mapping_cpu])
    be = load_backend(backend)
    with pytest.raises(AttnkitError) as info:
        be.forward(case.q, case.k, case.v, case.layer, case.cache, StepState(meta))
    assert info.value.code == "AK415"


@pytest.mark.parametrize("field,value", [("sliding_window", 0), ("sliding_window", -1),
                                         ("role", "xx"), ("kind", "gqa"), ("logit_softcap", 0.0)])
def test_impossible_layer_spec_is_ak419(field, value):
    import dataclasses

    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, dtype="fp32")
    case = make_case(layer, prefix_lens=[3], new_lens=[2], page_size=4, dtype="fp32")
    case.layer.spec = dataclasses.replace(case.layer.spec, **{field: value})
    be = load_backend("torch_native")
    step = be.prepare(case.meta, case.cache)
    with pytest.raises(AttnkitError) as info:
        be.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert info.value.code == "AK419" and info.value.field == f"layer.spec.{field}"


@pytest.mark.parametrize("kv_dtype", [torch.int8, torch.float64])
def test_dual_chunk_refuses_an_undeclared_cache_dtype(kv_dtype):
    from attnkit.kvcache.paged import PagedKVCache
    from attnkit.backends.batch import Request, build_batch
    from attnkit.model.spec import DualChunkConfig, LayerAttention
    from attnkit.backends.base import RuntimeLayer

    spec = LayerAttention(layer_id=0, num_heads=4, num_kv_heads=2, head_dim=16,
                          dual_chunk=DualChunkConfig(chunk_size=8, local_size=2))
    cache = PagedKVCache([spec], num_pages=8, page_size=2, dtype=kv_dtype)
    meta = build_batch([Request(0, 5, [0, 1, 2])], page_size=2, device="cpu")
    be = load_backend("dual_chunk")
    q = torch.randn(5, 3, 4, 16)
    k, v = torch.randn(5, 2, 16), torch.randn(5, 2, 16)
    with pytest.raises(AttnkitError) as info:       # the cache, once per step (was AK420 per layer)
        be.forward(q, k, v, RuntimeLayer(spec), cache, be.prepare(meta, cache))
    assert info.value.code == "AK444" and info.value.field == "kv_cache_dtype"

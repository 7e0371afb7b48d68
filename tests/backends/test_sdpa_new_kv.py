"""sdpa's prefill without a cached prefix: SDPA on the step's own K/V (no page gather), the
K/V still written to the cache; every other step gathers pages as before."""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.sdpa import backend as sdpa_backend
from attnkit.backends.sdpa.backend import SdpaBackend


def run(monkeypatch, layer, *, kv_dtype=None, **lens):
    gathered = []
    real = sdpa_backend.gather_kv
    monkeypatch.setattr(sdpa_backend, "gather_kv", lambda *a: gathered.append(1) or real(*a))
    backend = SdpaBackend()
    case = make_case(layer, dtype="fp32", kv_dtype=kv_dtype, page_size=4, **lens)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, backend.prepare(case.meta, case.cache))
    assert_close(out, case.reference(), dtype="fp32", kv_dtype=kv_dtype, what=str(layer.spec))
    return case, bool(gathered)


@pytest.mark.parametrize("layer_kw", [dict(), dict(sliding_window=3), dict(role="encoder"),
                                      dict(num_kv_heads=1, v_head_dim=8)],
                         ids=["causal", "window", "encoder", "mqa-dv8"])
@pytest.mark.parametrize("new_lens", [[7], [5, 5]], ids=["one", "two-equal"])
def test_prefill_without_prefix_reads_no_pages(monkeypatch, layer_kw, new_lens):
    layer = make_layer(**{"num_heads": 4, "num_kv_heads": 2, "head_dim": 16, **layer_kw})
    case, gathered = run(monkeypatch, layer, prefix_lens=[0] * len(new_lens), new_lens=new_lens)
    assert not gathered
    flat = case.cache.k[0].view(-1, *case.cache.k[0].shape[2:])
    assert torch.equal(flat[case.meta.slot_mapping], case.k)      # the write stays


@pytest.mark.parametrize("lens,kv_dtype", [(dict(prefix_lens=[6], new_lens=[3]), None),
                                           (dict(prefix_lens=[0, 0], new_lens=[5, 2]), None),
                                           (dict(prefix_lens=[0], new_lens=[7]), "fp8_e4m3")],
                         ids=["with-prefix", "ragged", "fp8-cache"])
def test_other_steps_gather_pages(monkeypatch, lens, kv_dtype):
    _, gathered = run(monkeypatch, make_layer(num_heads=4, num_kv_heads=2, head_dim=16), kv_dtype=kv_dtype, **lens)
    assert gathered

"""The ``pdl`` launch option (the reduce kernel as a programmatic dependent of column_split's
split kernel, sm_90+) on a GPU: the same result as the float64 reference, eagerly and replayed
as a CUDA graph, with splits (some empty) and poisoned stale slots; and that it is really
launched with the PDL attribute (a silently ignored option would pass the numerics alone)."""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton_mla import decode
from attnkit.backends.triton_mla.backend import TritonMLABackend
from attnkit.model.spec import MLAConfig

pytestmark = pytest.mark.gpu
DSV3 = MLAConfig(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
needs_sm90 = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                                reason="programmatic dependent launch needs sm_90+")


def _case(heads):
    layer = make_layer(kind="mla", num_heads=heads, mla=DSV3, dtype="bf16", device="cuda",
                       scale=1.0 / 192 ** 0.5, seed=heads)
    return make_case(layer, prefix_lens=[1500, 3, 700, 63, 4095, 0], new_lens=[1] * 6,
                     page_size=64, dtype="bf16", device="cuda", seed=heads, garbage=True)


@pytest.fixture
def pdl_launches(monkeypatch):
    """The ``pdl`` flag of every absorbed_attention call."""
    seen = []
    real = decode.absorbed_attention

    def spy(*args, **kwargs):
        seen.append(kwargs.get("pdl"))
        return real(*args, **kwargs)

    monkeypatch.setattr("attnkit.backends.triton_mla.backend.absorbed_attention", spy)
    return seen


@needs_sm90
@pytest.mark.parametrize("heads", [16, 64])
@pytest.mark.parametrize("splits", [3, 40])
def test_pdl_matches_reference_eager_and_graphed(heads, splits, pdl_launches):
    case = _case(heads)
    be = TritonMLABackend(variant="v2", num_splits=splits, pdl=True)
    step = be.prepare(case.meta, case.cache)
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    torch.cuda.synchronize()
    assert pdl_launches == [True]
    assert_close(out, case.reference(), dtype="bf16", what=f"pdl H={heads} splits={splits}")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out = be.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    for _ in range(3):
        g_out.zero_()
        graph.replay()
    torch.cuda.synchronize()
    assert_close(g_out, case.reference(), dtype="bf16", what=f"pdl graphed H={heads} splits={splits}")

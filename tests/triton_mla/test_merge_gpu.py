"""column_split's fused split merge on a GPU at DeepSeek-V3's latent sizes (bf16, 64-key pages,
NaN / inf in stale slots): the float64 reference, no reduce launch, tickets left zero, and the
same bits call after call and replay after replay of a CUDA graph (which program merges differs
from launch to launch; the merge adds the splits in split order, so the result must not)."""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton_mla.backend import TritonMLABackend
from attnkit.model.spec import MLAConfig

pytestmark = pytest.mark.gpu
DSV3 = MLAConfig(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)


def _case(heads, page_size=64):
    layer = make_layer(kind="mla", num_heads=heads, mla=DSV3, dtype="bf16", device="cuda",
                       scale=1.0 / 192 ** 0.5, seed=heads)
    return make_case(layer, prefix_lens=[1500, 3, 700, 63, 4095, 0], new_lens=[1] * 6,
                     page_size=page_size, dtype="bf16", device="cuda", seed=heads, garbage=True)


# 16 heads: the decode tile of <= 16 heads (32 keys, 6 stages, v_split 1); 64: v_split 2;
# 128: one program for all heads, both column blocks ([128, 512] merged 128 columns at a time)
@pytest.mark.parametrize("heads", [16, 64, 128])
@pytest.mark.parametrize("splits", [3, 8, 40])
def test_fused_merge_eager_and_graphed_bitwise_stable(heads, splits, reduces):
    case = _case(heads)
    be = TritonMLABackend(variant="v2", num_splits=splits, merge_splits=256)
    step = be.prepare(case.meta, case.cache)
    fwd = lambda: be.forward(case.q, case.k, case.v, case.layer, case.cache, step)  # noqa: E731
    first = fwd()
    second = fwd()
    torch.cuda.synchronize()
    part = step.prepared["absorbed"]
    assert reduces == [] and len(part.counters) == 1
    assert int(part.counters[0].abs().sum()) == 0
    assert torch.equal(first, second)
    assert_close(first, case.reference(), dtype="bf16", what=f"fused H={heads} splits={splits}")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_out = fwd()
    replays = []
    for _ in range(2):                   # twice in a row: the first replay must leave zeros
        g_out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replays.append(g_out.clone())
    assert int(part.counters[0].abs().sum()) == 0
    assert torch.equal(replays[0], first) and torch.equal(replays[1], first)


@pytest.mark.parametrize("page_size", [16, 32])
def test_fused_merge_gathered_rows(page_size):
    """Pages of 16 keys under 32-key tiles: the key rows gathered one by one; 32: one page a tile."""
    case = _case(16, page_size)
    be = TritonMLABackend(variant="v2", num_splits=8, merge_splits=256)
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache, be.prepare(case.meta, case.cache))
    torch.cuda.synchronize()
    assert_close(out, case.reference(), dtype="bf16", what=f"fused page {page_size}")


def test_fused_merge_matches_the_reduce():
    """The same partials and LSEs: the two merges differ only in the order of their sums."""
    case = _case(16)
    outs = []
    for merge in (256, 0):
        be = TritonMLABackend(variant="v2", num_splits=8, merge_splits=merge)
        outs.append(be.forward(case.q, case.k, case.v, case.layer, case.cache,
                               be.prepare(case.meta, case.cache)).float())
    torch.testing.assert_close(outs[0], outs[1], atol=1e-2, rtol=1e-2)

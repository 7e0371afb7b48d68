"""The Gluon prefill kernel (prefill_gluon.py, extend_config GLUON=True) on an sm_90 GPU: that
it runs (no silent fallback) and matches the float64 reference, and that what it does not
serve (a window, a prefix, softcap) runs the Triton kernel and is right."""
import pytest
import torch
import triton
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton import tma_path
from attnkit.backends.triton.backend import TritonBackend

pytestmark = pytest.mark.gpu
needs = pytest.mark.skipif(not (torch.cuda.is_available()
                                and torch.cuda.get_device_capability() == (9, 0)
                                and triton.__version__.startswith("3.6.")),
                           reason="the Gluon prefill runs on sm_90 with Triton 3.6")


@pytest.fixture
def launches(monkeypatch):
    calls = []
    real = tma_path.prefill_gluon_attention

    def counted(q, *args, **kwargs):
        calls.append(tuple(q.shape))
        return real(q, *args, **kwargs)

    monkeypatch.setattr(tma_path, "prefill_gluon_attention", counted)
    return calls


def _run(case, **cfg):
    be = TritonBackend(extend_variant="tma", extend_config=dict(GLUON=True, **cfg))
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache, be.prepare(case.meta, case.cache))
    torch.cuda.synchronize()
    return out


@needs
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("tokens", [1, 77, 1500, 4096])
def test_one_prefill_matches_reference(dim, dtype, tokens, launches):
    layer = make_layer(num_heads=16, num_kv_heads=4, head_dim=dim, dtype=dtype, device="cuda")
    case = make_case(layer, prefix_lens=[0], new_lens=[tokens], page_size=16, dtype=dtype,
                     device="cuda", q_scale=4.0, seed=tokens)
    out = _run(case)
    assert launches, "the Gluon kernel did not run"
    assert torch.isfinite(out).all()
    assert_close(out, case.reference(), dtype=dtype, what=f"gluon d{dim} {dtype} T={tokens}")


@needs
@pytest.mark.parametrize("feats, prefix", [(dict(sliding_window=300), [0]),
                                           (dict(logit_softcap=20.0), [0]), (dict(), [500])])
def test_what_it_does_not_serve_runs_triton(feats, prefix, launches):
    layer = make_layer(num_heads=16, num_kv_heads=4, head_dim=128, dtype="bf16", device="cuda",
                       **feats)
    case = make_case(layer, prefix_lens=prefix, new_lens=[1200], page_size=16, dtype="bf16",
                     device="cuda", q_scale=4.0)
    assert_close(_run(case), case.reference(), dtype="bf16", what=f"fallback {feats} {prefix}")
    assert not launches


@needs
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("variant, runs_gluon", [("tma", False), ("gluon", True)])
def test_the_gluon_variant_runs_it_and_tma_does_not(dim, runs_gluon, variant, launches):
    """The plan's gluon variant runs the Gluon kernel on a one-request fresh prefill at every
    head dim it has tiles for, tma the Triton tile; two requests in one step never run it."""
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=dim, dtype="bf16", device="cuda")
    case = make_case(layer, prefix_lens=[0], new_lens=[2048], page_size=16, dtype="bf16",
                     device="cuda", q_scale=4.0)
    be = TritonBackend(extend_variant=variant)
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache, be.prepare(case.meta, case.cache))
    assert_close(out, case.reference(), dtype="bf16", what=f"default d{dim} {variant}")
    assert bool(launches) == runs_gluon
    two = make_case(layer, prefix_lens=[0, 0], new_lens=[700, 1300], page_size=16, dtype="bf16",
                    device="cuda", q_scale=4.0)
    launches.clear()
    out = be.forward(two.q, two.k, two.v, two.layer, two.cache, be.prepare(two.meta, two.cache))
    assert_close(out, two.reference(), dtype="bf16", what=f"two requests d{dim} {variant}")
    assert not launches


@needs
def test_gqa_groups_and_head_counts(launches):
    """Each query head reads its own KV head (h // group): MHA, GQA 4 and 8, MQA, through the
    Gluon kernel (launches counted)."""
    for heads, kv_heads in ((4, 4), (16, 4), (32, 4), (8, 1)):
        layer = make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=128, dtype="bf16",
                           device="cuda")
        case = make_case(layer, prefix_lens=[0], new_lens=[1000], page_size=16, dtype="bf16",
                         device="cuda", q_scale=4.0, seed=heads)
        launches.clear()
        assert_close(_run(case), case.reference(), dtype="bf16", what=f"{heads}/{kv_heads} heads")
        assert launches, f"the Gluon kernel did not run ({heads}/{kv_heads} heads)"


@needs
def test_a_tile_override_runs_that_tile(launches):
    """extend_config naming a tile (not GLUON) runs that Triton tile on a d128 prefill."""
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=128, dtype="bf16", device="cuda")
    case = make_case(layer, prefix_lens=[0], new_lens=[1500], page_size=16, dtype="bf16",
                     device="cuda", q_scale=4.0)
    be = TritonBackend(extend_variant="tma", extend_config=dict(BLOCK_M=64, BLOCK_N=64,
                                                                num_warps=4, num_stages=2))
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache, be.prepare(case.meta, case.cache))
    assert_close(out, case.reference(), dtype="bf16", what="tile override")
    assert not launches


@needs
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("tokens", [1, 77, 1500, 4608])
def test_non_causal_prefill_runs_gluon_and_matches_reference(dim, tokens, launches):
    """An encoder layer (a DiT's joint attention: FLUX.1's 4,608 tokens) through the Gluon
    kernel's non-causal path: every row sees every key; the last partial tile masks past T."""
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=dim, dtype="bf16", device="cuda", role="encoder")
    case = make_case(layer, prefix_lens=[0], new_lens=[tokens], page_size=16, dtype="bf16",
                     device="cuda", q_scale=4.0, seed=tokens)
    out = _run(case)
    assert launches, "the Gluon kernel did not run"
    assert_close(out, case.reference(), dtype="bf16", what=f"gluon non-causal d{dim} T={tokens}")


@needs
def test_varlen_gluon_matches_reference():
    """TritonBackend(varlen_kernel="gluon"): one sequence of 5,000 tokens (the DiT row), and a
    batch of windows with a key mask (which the Gluon kernel does not take: the tile runs)."""
    from attnkit import reference
    from attnkit.backends.base import RuntimeLayer
    from attnkit.backends.varlen import varlen_batch
    from attnkit.model.spec import LayerAttention

    layer = RuntimeLayer(LayerAttention(layer_id=0, num_heads=8, num_kv_heads=8, head_dim=128, role="encoder"))
    be = TritonBackend(varlen_kernel="gluon")
    for lens, masked in (([5000], False), ([64] * 9 + [30], True)):
        n = sum(lens)
        q, k, v = (torch.randn(n, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        cu = torch.tensor([sum(lens[:i]) for i in range(len(lens) + 1)], dtype=torch.int32, device="cuda")
        mask = (torch.arange(n, device="cuda") % 7 != 3) if masked else None
        batch = varlen_batch(cu, key_padding_mask=mask)
        assert_close(be.varlen(q, k, v, layer, batch), reference.varlen_attention(q, k, v, layer, batch),
                     dtype="bf16", what=f"varlen gluon {len(lens)} sequences")

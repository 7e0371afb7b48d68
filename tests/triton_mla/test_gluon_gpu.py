"""The Gluon warp-specialised MLA decode kernel (variant "ws", decode_gluon.py) on an sm_90 GPU:
that it really runs (no silent fallback to v1) and matches the float64 reference, with
poisoned stale slots, partial last tiles, KV splits (empty ones too) and verify steps."""
import pytest
import torch
import triton
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.triton_mla import decode
from attnkit.backends.triton_mla.backend import TritonMLABackend
from attnkit.model.spec import MLAConfig
from attnkit.registry.kernels import in_version_range

pytestmark = pytest.mark.gpu
DSV3 = MLAConfig(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)


def _hopper_36():
    return (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
            and in_version_range(triton.__version__, decode._ws_triton()))


needs_ws = pytest.mark.skipif(not _hopper_36(), reason="the ws kernel runs on sm_90 with Triton 3.6")


@pytest.fixture
def launches(monkeypatch):
    """Counts the Gluon kernel's launches (a fallback to v1 would leave it at 0)."""
    calls = []
    real = decode.absorbed_gluon

    def counted(*args, **kwargs):
        calls.append(kwargs["num_splits"])
        return real(*args, **kwargs)

    monkeypatch.setattr(decode, "absorbed_gluon", counted)
    return calls


def _layer(heads):
    return make_layer(kind="mla", num_heads=heads, mla=DSV3, dtype="bf16", device="cuda",
                      scale=1.0 / 192 ** 0.5, seed=heads)


@needs_ws
@pytest.mark.parametrize("heads", [64, 128])
@pytest.mark.parametrize("splits", [None, 3, 40])
def test_decode_matches_reference_with_garbage(heads, splits, launches):
    """Stale slots of each last page hold NaN / inf (garbage=True); kv lengths hit a full
    last tile (64, 4096), partial ones and a 1-key request; 40 splits leave some empty."""
    case = make_case(_layer(heads), prefix_lens=[1500, 3, 700, 63, 4095, 0], new_lens=[1] * 6,
                     page_size=64, dtype="bf16", device="cuda", seed=heads, garbage=True)
    be = TritonMLABackend(variant="ws", num_splits=splits)
    step = be.prepare(case.meta, case.cache)
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    torch.cuda.synchronize()
    assert launches, "the Gluon kernel did not run"
    assert torch.isfinite(out).all()
    assert_close(out, case.reference(), dtype="bf16", what=f"ws H={heads} splits={splits}")


@needs_ws
def test_verify_tokens_each_see_their_own_keys(launches):
    case = make_case(_layer(128), prefix_lens=[300, 1200], new_lens=[4, 4], page_size=64,
                     dtype="bf16", device="cuda", mode=ForwardMode.VERIFY, seed=2, garbage=True)
    be = TritonMLABackend(variant="ws")
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache,
                     be.prepare(case.meta, case.cache))
    assert launches
    assert_close(out, case.reference(), dtype="bf16", what="ws verify")


@needs_ws
def test_other_shapes_fall_back_to_v1(launches):
    """16 heads, 16-key pages: not the kernel's shapes; the step runs v1 and is right."""
    for heads, page in ((16, 64), (128, 16)):
        case = make_case(_layer(heads), prefix_lens=[200, 9], new_lens=[1, 1], page_size=page,
                         dtype="bf16", device="cuda", seed=3)
        be = TritonMLABackend(variant="ws")
        out = be.forward(case.q, case.k, case.v, case.layer, case.cache,
                         be.prepare(case.meta, case.cache))
        assert_close(out, case.reference(), dtype="bf16", what=f"fallback H={heads} page={page}")
    assert not launches


WS_FORMS = [dict(BLOCK_N=64, NUM_STAGES=2, AHEAD=False, OUT16=True),
            dict(BLOCK_N=32, NUM_STAGES=4, AHEAD=False, OUT16=False),
            dict(BLOCK_N=32, NUM_STAGES=4, AHEAD=True, OUT16=False),
            dict(BLOCK_N=32, NUM_STAGES=4, AHEAD=True, OUT16=True),
            dict(BLOCK_N=16, NUM_STAGES=8, AHEAD=True, OUT16=True)]


@needs_ws
@pytest.mark.parametrize("form", WS_FORMS, ids=lambda f: "n{BLOCK_N}-s{NUM_STAGES}-a{AHEAD:d}-o{OUT16:d}".format(**f))
@pytest.mark.parametrize("heads,splits,page", [(128, None, 64), (64, 3, 64), (128, 40, 32)])
def test_ws_forms_match_reference_with_garbage(form, heads, splits, page, launches):
    """Every ws form (tile, Q.K issued ahead, the 16-bit output stored by the kernel) on
    poisoned stale slots, 1-key to 4096-key requests, tile counts below and above the ring,
    empty splits (40). A 64-key tile on 32-key pages is not the kernel's shape (gluon_ready:
    a tile inside one page): that call falls back, and is right."""
    case = make_case(_layer(heads), prefix_lens=[1500, 3, 700, 63, 4095, 0, 31, 95],
                     new_lens=[1] * 8, page_size=page, dtype="bf16", device="cuda", seed=heads,
                     garbage=True)
    be = TritonMLABackend(variant="ws", num_splits=splits, ws_config=form)
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache,
                     be.prepare(case.meta, case.cache))
    torch.cuda.synchronize()
    assert bool(launches) == (page % form["BLOCK_N"] == 0), "the Gluon kernel ran where it fits"
    assert torch.isfinite(out).all()
    assert_close(out, case.reference(), dtype="bf16", what=f"ws {form} H={heads} splits={splits}")


@needs_ws
@pytest.mark.parametrize("form", WS_FORMS[2:4], ids=["ahead", "ahead-out16"])
def test_ws_forms_replay_in_a_cuda_graph(form, launches):
    """A captured decode step, replayed, gives the eager step's bits (and the reference)."""
    case = make_case(_layer(128), prefix_lens=[700, 40, 2000], new_lens=[1, 1, 1], page_size=64,
                     dtype="bf16", device="cuda", seed=5, garbage=True)
    be = TritonMLABackend(variant="ws", ws_config=form)
    step = be.prepare(case.meta, case.cache)
    run = lambda: be.forward(case.q, case.k, case.v, case.layer, case.cache, step)  # noqa: E731
    eager = run().clone()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        out = run()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
    assert_close(out, case.reference(), dtype="bf16", what=f"ws {form} graph")

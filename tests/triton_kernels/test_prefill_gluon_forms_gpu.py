"""The Gluon prefill kernel's launch forms on an sm_90 GPU, called directly: the head-major
work order and the persistent kernel (prefill_gluon_persistent.py: a few programs walking many
blocks, so ring slots and barrier phases carry across blocks), causal and non-causal, against
the float64 reference. The output buffer starts as NaN: a block a form skips fails."""
import pytest
import torch
import triton
from factories import assert_close, make_case, make_layer

from attnkit.backends._triton import LOG2E

pytestmark = pytest.mark.gpu
needs = pytest.mark.skipif(not (torch.cuda.is_available()
                                and torch.cuda.get_device_capability() == (9, 0)
                                and triton.__version__.startswith("3.6.")),
                           reason="the Gluon prefill runs on sm_90 with Triton 3.6")

FORMS = [dict(head_major=True), dict(programs=3), dict(programs=7, head_major=True),
         dict(programs=132, head_major=True), dict(programs=5, tiles=(128, 3, 3))]


def _kernel(case, layer, *, causal, **form):
    from attnkit.backends.triton.prefill_gluon import prefill_gluon_attention
    from attnkit.backends.triton.prefill_gluon_persistent import prefill_gluon_persistent_attention
    spec = layer.spec
    out = torch.full_like(case.q, float("nan"))
    launch = prefill_gluon_persistent_attention if "programs" in form else prefill_gluon_attention
    launch(case.q, case.k, case.v, out, qk_scale=spec.softmax_scale * LOG2E, v_scale=1.0, causal=causal, **form)
    torch.cuda.synchronize()
    return out.reshape(out.shape[0], -1)


@needs
@pytest.mark.parametrize("form", FORMS, ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("tokens", [1, 77, 1500, 4608])
def test_form_matches_reference(form, causal, tokens):
    _check(form, causal, tokens, 128)


@needs
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("tokens, dim", [(2000, 64), (1300, 256)])
def test_persistent_at_other_head_dims(causal, tokens, dim):
    _check(dict(programs=7, head_major=True), causal, tokens, dim)


def _check(form, causal, tokens, dim):
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=dim, dtype="bf16", device="cuda",
                       role="decoder" if causal else "encoder")
    case = make_case(layer, prefix_lens=[0], new_lens=[tokens], page_size=16, dtype="bf16",
                     device="cuda", q_scale=4.0, seed=tokens)
    out = _kernel(case, layer, causal=causal, **form)
    assert torch.isfinite(out).all(), "a block was not written"
    assert_close(out, case.reference(), dtype="bf16", what=f"{form} causal={causal} T={tokens} d{dim}")


@needs
def test_persistent_more_programs_than_blocks():
    """More programs asked for than (block, head) items: the launch takes one an item."""
    layer = make_layer(num_heads=2, num_kv_heads=2, head_dim=128, dtype="bf16", device="cuda", role="encoder")
    case = make_case(layer, prefix_lens=[0], new_lens=[200], page_size=16, dtype="bf16", device="cuda",
                     q_scale=4.0)
    out = _kernel(case, layer, causal=False, programs=64, head_major=True)
    assert_close(out, case.reference(), dtype="bf16", what="persistent, 4 items, 64 programs asked")

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


@needs
@pytest.mark.parametrize("variant, module, name", [
    ("varlen_gluon", "attnkit.backends.triton.tma_path", "prefill_gluon_attention"),
    ("varlen_gluon_persistent", "attnkit.backends.triton.prefill_gluon_persistent",
     "prefill_gluon_persistent_attention"),
    ("varlen_gluon_split", "attnkit.backends.triton.prefill_gluon_persistent",
     "prefill_gluon_persistent_attention")])
def test_the_varlen_variant_runs_its_kernel(variant, module, name, monkeypatch):
    """The plan's varlen table naming a Gluon form runs that kernel (launches counted), once per
    sequence, and matches the reference; a key mask (which it does not take) runs the tile."""
    import importlib

    from attnkit import reference
    from attnkit.backends.base import RuntimeLayer
    from attnkit.backends.triton.backend import TritonBackend
    from attnkit.backends.varlen import varlen_batch
    from attnkit.model.spec import LayerAttention
    from attnkit.registry.kernels import KernelTable

    mod = importlib.import_module(module)
    calls, real = [], getattr(mod, name)
    monkeypatch.setattr(mod, name, lambda q, *a, **k: calls.append(q.shape[0]) or real(q, *a, **k))
    layer = RuntimeLayer(LayerAttention(layer_id=0, num_heads=8, num_kv_heads=8, head_dim=128, role="encoder"))
    be = TritonBackend(kernels={"varlen": KernelTable.only("varlen", variant)})
    lens = [3000, 1700]
    q, k, v = (torch.randn(sum(lens), 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32, device="cuda")
    batch = varlen_batch(cu)
    assert_close(be.varlen(q, k, v, layer, batch), reference.varlen_attention(q, k, v, layer, batch),
                 dtype="bf16", what=variant)
    assert calls == lens
    calls.clear()
    masked = varlen_batch(cu, key_padding_mask=torch.arange(sum(lens), device="cuda") % 5 != 0)
    assert_close(be.varlen(q, k, v, layer, masked), reference.varlen_attention(q, k, v, layer, masked),
                 dtype="bf16", what=f"{variant} masked: the tile")
    assert not calls

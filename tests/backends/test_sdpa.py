"""sdpa against the float64 reference on small shapes, its kernel-choice paths, its refusals.

The shared conformance suite sweeps the declared envelope; this file pins what is specific
to sdpa: the padded batch (ragged requests, padded query rows), the is_causal fast path,
the repeat-K/V path for torch without enable_gqa, and the AK440 refusals.
"""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.base import StepState
from attnkit.backends.metadata import ForwardMode
from attnkit.backends.sdpa import backend as sdpa_backend
from attnkit.backends.sdpa.backend import SdpaBackend
from attnkit.errors import AttnkitError

MIXED = dict(prefix_lens=[0, 21, 5], new_lens=[9, 1, 4])


def run(layer, *, dtype="fp32", kv_dtype=None, prepare=True, mla_form="auto", **kw):
    backend = SdpaBackend(mla_form=mla_form)
    case = make_case(layer, dtype=dtype, kv_dtype=kv_dtype, page_size=kw.pop("page_size", 4), **kw)
    step = backend.prepare(case.meta, case.cache) if prepare else StepState(case.meta)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert out.dtype == case.q.dtype
    assert_close(out, case.reference(), dtype=dtype, kv_dtype=kv_dtype, what=str(layer.spec))
    return step, out


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("lens", [MIXED, dict(prefix_lens=[0], new_lens=[7]),
                                  dict(prefix_lens=[13, 3, 30], new_lens=[1, 1, 1]),
                                  dict(prefix_lens=[9, 9], new_lens=[1, 1])],
                         ids=["mixed", "square-prefill", "decode-ragged", "decode-even"])
def test_mha_gqa_mqa(heads, kv_heads, lens):
    run(make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=16, v_head_dim=8), **lens)


def test_mask_choice_per_step():
    """No mask for a decode with equal lengths, is_causal for one square prefill, a bool
    mask otherwise; masks are memoised in the step's plan and shared by layers."""
    layer = make_layer(num_heads=2, head_dim=8)
    even, _ = run(layer, prefix_lens=[9, 9], new_lens=[1, 1])
    square, _ = run(layer, prefix_lens=[0], new_lens=[7])
    ragged, _ = run(layer, **MIXED)
    assert list(even.prepared.masks.values()) == [(None, False)]
    assert list(square.prepared.masks.values()) == [(None, True)]
    (mask, causal), = ragged.prepared.masks.values()
    assert not causal and mask.shape == (3, 1, 9, 22) and mask.dtype == torch.bool


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_half_inputs(dtype):
    run(make_layer(num_heads=4, num_kv_heads=2, head_dim=16, dtype=dtype), dtype=dtype, **MIXED)


@pytest.mark.parametrize("features", [dict(sliding_window=3), dict(scale=0.05)], ids=["window", "scale"])
def test_features(features):
    run(make_layer(num_heads=4, num_kv_heads=2, head_dim=16, **features), q_scale=4.0, **MIXED)


def test_verify_mode():
    run(make_layer(num_heads=4, num_kv_heads=2, head_dim=16), prefix_lens=[6, 17], new_lens=[3, 3],
        mode=ForwardMode.VERIFY)


@pytest.mark.parametrize("window", [None, 3])
def test_encoder_self_attention(window):
    run(make_layer(num_heads=4, num_kv_heads=2, head_dim=16, role="encoder", sliding_window=window),
        prefix_lens=[0, 0], new_lens=[9, 2])


@pytest.mark.parametrize("encoder", ["cached", "write"])
def test_cross_attention_with_an_empty_encoder(encoder):
    run(make_layer(num_heads=4, num_kv_heads=2, head_dim=16, role="cross"),
        prefix_lens=[0, 5], new_lens=[6, 1], encoder_lens=[11, 0], encoder=encoder)


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_kv_cache(kv_dtype):
    run(make_layer(num_heads=4, num_kv_heads=2, head_dim=16), kv_dtype=kv_dtype, **MIXED)


@pytest.mark.parametrize("form", ["absorbed", "mha", "auto"])
@pytest.mark.parametrize("kv_dtype", [None, "fp8_e4m3"])
def test_mla_forms(form, kv_dtype):
    run(make_layer(kind="mla", num_heads=4, sliding_window=6), kv_dtype=kv_dtype, mla_form=form, **MIXED)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mla_absorbed_decode_half(dtype):
    run(make_layer(kind="mla", num_heads=4, dtype=dtype), dtype=dtype, mla_form="auto",
        prefix_lens=[30, 7], new_lens=[1, 1])


def test_forward_without_prepare_builds_its_plan():
    """A hand-made StepState gets the step's token grid on the first layer, built for its
    metadata and kept: a second layer reuses it (same object) and still matches."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16)
    step, first = run(layer, prepare=False, **MIXED)
    grid = step.prepared
    assert isinstance(grid, sdpa_backend.TokenGrid) and grid.paged.meta is step.meta
    assert not grid.uniform and grid.q_max == max(MIXED["new_lens"])
    case = make_case(layer, page_size=4, **MIXED)
    again = SdpaBackend().forward(case.q, case.k, case.v, case.layer, case.cache,
                                  StepState(case.meta, prepared=grid))
    assert step.prepared is grid and torch.equal(again, first)


def test_gqa_without_enable_gqa(monkeypatch):
    monkeypatch.setattr(sdpa_backend, "HAS_ENABLE_GQA", False)
    run(make_layer(num_heads=4, num_kv_heads=1, head_dim=16), **MIXED)


def test_idle_returns_empty():
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, v_head_dim=8)
    case = make_case(layer, prefix_lens=[], new_lens=[], mode=ForwardMode.IDLE)
    backend = SdpaBackend()
    out = backend.forward(case.q, case.k, case.v, layer, case.cache, backend.prepare(case.meta, case.cache))
    assert out.shape == (0, 32)


@pytest.mark.parametrize("feature", [dict(logit_softcap=30.0), dict(sinks=True)], ids=["softcap", "sinks"])
def test_unsupported_features_are_refused(feature):
    layer = make_layer(num_heads=2, head_dim=8, **feature)
    case = make_case(make_layer(num_heads=2, head_dim=8), prefix_lens=[0], new_lens=[3])
    with pytest.raises(AttnkitError) as err:
        SdpaBackend().forward(case.q, case.k, case.v, layer, case.cache, StepState(case.meta))
    name = next(iter(layer.spec.features()))
    assert err.value.code == "AK440" and name in err.value.message
    assert "torch_native" in err.value.details["backends"]


def test_unserved_kind_names_the_backends_that_serve_it():
    import dataclasses

    from attnkit.backends.sdpa.declaration import DECLARATION

    class MhaOnly(SdpaBackend):       # sdpa's declaration without MLA (AK441 before the merge)
        declaration = dataclasses.replace(DECLARATION, name="some_mha_backend", capabilities=(
            dataclasses.replace(DECLARATION.capabilities, kinds=("mha",))))

    case = make_case(make_layer(kind="mla", num_heads=2), prefix_lens=[0], new_lens=[3], page_size=4)
    backend = MhaOnly()
    with pytest.raises(AttnkitError) as err:
        backend.forward(case.q, case.k, case.v, case.layer, case.cache, backend.prepare(case.meta, case.cache))
    assert err.value.code == "AK440" and err.value.field == "layer.kind"
    assert {"torch_native", "sdpa"} <= set(err.value.details["backends"])


GPU_SPECS = {"gqa128": dict(kind="mha", num_heads=8, num_kv_heads=2, head_dim=128, sliding_window=7),
             "mha80": dict(kind="mha", num_heads=8, num_kv_heads=8, head_dim=80),
             "mla-absorbed": dict(kind="mla", num_heads=4), "mla-mha": dict(kind="mla", num_heads=4)}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,kv_dtype", [("fp32", None), ("bf16", None), ("fp16", None),
                                            ("bf16", "fp8_e4m3"), ("fp16", "fp8_e5m2")])
@pytest.mark.parametrize("name", list(GPU_SPECS))
@pytest.mark.parametrize("lens", [dict(prefix_lens=[0, 70, 33], new_lens=[40, 1, 5]),
                                  dict(prefix_lens=[0], new_lens=[64]),
                                  dict(prefix_lens=[100, 100], new_lens=[1, 1])],
                         ids=["mixed", "square", "decode"])
def test_cuda(name, dtype, kv_dtype, lens):
    layer = make_layer(**GPU_SPECS[name], dtype=dtype, device="cuda")
    run(layer, dtype=dtype, kv_dtype=kv_dtype, device="cuda", page_size=16,
        mla_form="mha" if name == "mla-mha" else "absorbed", **lens)


@pytest.mark.gpu
def test_cuda_cross_and_encoder():
    for role, extra in (("cross", dict(encoder_lens=[30, 0], encoder="write")), ("encoder", {})):
        layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, role=role, dtype="bf16", device="cuda")
        run(layer, dtype="bf16", device="cuda", prefix_lens=[0, 0], new_lens=[6, 9], **extra)


@pytest.mark.gpu
@pytest.mark.parametrize("mla_form", ["absorbed", "mha"])
def test_cuda_deepseek_sized_latent(mla_form):
    """L + R = 576 is past the fused kernels' head-dim limits in absorbed form: SDPA must
    still dispatch (to whichever kernel takes it) and match."""
    from attnkit.model.spec import MLAConfig

    v3 = MLAConfig(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
    layer = make_layer(kind="mla", num_heads=16, mla=v3, dtype="bf16", device="cuda")
    run(layer, dtype="bf16", device="cuda", page_size=64, mla_form=mla_form,
        prefix_lens=[300, 41], new_lens=[1, 1])

"""torch_native against the float64 reference on small shapes, plus its refusals.

The shared conformance suite sweeps the declared envelope; this file pins what is specific
to torch_native: both MLA forms, every mode, every feature, fp8 reads, and error codes.
"""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.base import StepState
from attnkit.backends.metadata import ForwardMode
from attnkit.backends.torch_native.backend import TorchNativeBackend
from attnkit.backends.paged_torch import absorbed_is_cheaper
from attnkit.errors import AttnkitError
from attnkit.model.spec import MLAConfig

MIXED = dict(prefix_lens=[0, 21, 5], new_lens=[9, 1, 4])


def run(backend, layer, *, dtype="fp32", kv_dtype=None, **kw):
    case = make_case(layer, dtype=dtype, kv_dtype=kv_dtype, page_size=kw.pop("page_size", 4), **kw)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache,
                          backend.prepare(case.meta, case.cache))
    assert out.dtype == case.q.dtype
    assert_close(out, case.reference(), dtype=dtype, kv_dtype=kv_dtype, what=str(layer.spec))
    return case, out


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
@pytest.mark.parametrize("lens", [MIXED, dict(prefix_lens=[0, 0], new_lens=[7, 3]),
                                  dict(prefix_lens=[13, 3, 30], new_lens=[1, 1, 1])],
                         ids=["mixed", "extend", "decode"])
def test_mha_gqa_mqa(heads, kv_heads, lens):
    run(TorchNativeBackend(), make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=16), **lens)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_half_inputs_fp32_math(dtype):
    run(TorchNativeBackend(), make_layer(num_heads=4, num_kv_heads=2, head_dim=24, dtype=dtype),
        dtype=dtype, **MIXED)


@pytest.mark.parametrize("features", [
    dict(sliding_window=3), dict(logit_softcap=2.0), dict(sinks=True), dict(scale=0.05),
    dict(sliding_window=4, logit_softcap=3.0, sinks=True)], ids=lambda f: "+".join(f))
def test_features(features):
    run(TorchNativeBackend(), make_layer(num_heads=4, num_kv_heads=2, head_dim=16, **features),
        q_scale=4.0, **MIXED)


def test_window_at_least_sequence_equals_full_attention():
    full = run(TorchNativeBackend(), make_layer(num_heads=2, head_dim=8), **MIXED)[1]
    wide = run(TorchNativeBackend(), make_layer(num_heads=2, head_dim=8, sliding_window=26), **MIXED)[1]
    torch.testing.assert_close(wide, full, rtol=0, atol=0)


def test_verify_mode_is_causal_among_drafts():
    run(TorchNativeBackend(), make_layer(num_heads=4, num_kv_heads=2, head_dim=16),
        prefix_lens=[6, 17], new_lens=[3, 3], mode=ForwardMode.VERIFY)


@pytest.mark.parametrize("window", [None, 3])
def test_encoder_self_attention_is_non_causal(window):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, role="encoder", sliding_window=window)
    run(TorchNativeBackend(), layer, prefix_lens=[0, 0], new_lens=[9, 2])


@pytest.mark.parametrize("encoder", ["cached", "write"])
def test_cross_attention(encoder):
    # the second request has no encoder tokens: its output is zero, as in the reference
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, role="cross")
    run(TorchNativeBackend(), layer, prefix_lens=[0, 5], new_lens=[6, 1],
        encoder_lens=[11, 0], encoder=encoder)


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2", "bf16"])
def test_low_precision_kv_cache(kv_dtype):
    run(TorchNativeBackend(), make_layer(num_heads=4, num_kv_heads=2, head_dim=16),
        kv_dtype=kv_dtype, **MIXED)


@pytest.mark.parametrize("form", ["absorbed", "mha", "auto"])
@pytest.mark.parametrize("kv_dtype", [None, "fp8_e4m3"])
def test_mla_forms(form, kv_dtype):
    layer = make_layer(kind="mla", num_heads=4, sliding_window=6, sinks=True, logit_softcap=4.0)
    run(TorchNativeBackend(mla_form=form), layer, kv_dtype=kv_dtype, **MIXED)


def test_mla_auto_form_choice():
    v3 = MLAConfig(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
    assert absorbed_is_cheaper(1, 4096, v3)            # decode
    assert not absorbed_is_cheaper(4096, 4096, v3)     # long prefill


def test_forward_writes_new_kv_into_cache():
    case, _ = run(TorchNativeBackend(), make_layer(num_heads=2, head_dim=8), **MIXED)
    slots = case.meta.slot_mapping
    stored = case.cache.k[0].view(-1, 2, 8)[slots]
    torch.testing.assert_close(stored, case.k)


def test_idle_returns_empty():
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, v_head_dim=8)
    case = make_case(layer, prefix_lens=[], new_lens=[], mode=ForwardMode.IDLE)
    backend = TorchNativeBackend()
    out = backend.forward(case.q, case.k, case.v, layer, case.cache, backend.prepare(case.meta, case.cache))
    assert out.shape == (0, 4 * 8)


def test_dual_chunk_is_refused_with_code():
    from attnkit.model.spec import DualChunkConfig

    layer = make_layer(num_heads=2, head_dim=8, dual_chunk=DualChunkConfig(chunk_size=16, local_size=4))
    case = make_case(make_layer(num_heads=2, head_dim=8), prefix_lens=[0], new_lens=[3])
    with pytest.raises(AttnkitError) as err:
        TorchNativeBackend().forward(case.q, case.k, case.v, layer, case.cache, StepState(case.meta))
    assert err.value.code == "AK440" and "dual_chunk" in err.value.message


@pytest.mark.parametrize("kind,missing", [("mla", "w_vc"), ("mha", "sinks")])
def test_missing_layer_tensor_is_refused(kind, missing):
    layer = make_layer(kind=kind, num_heads=4, sinks=missing == "sinks")
    case = make_case(layer, prefix_lens=[0], new_lens=[3])
    setattr(layer, missing, None)
    with pytest.raises(AttnkitError) as err:
        TorchNativeBackend().forward(case.q, case.k, case.v, layer, case.cache, StepState(case.meta))
    assert err.value.code == "AK443" and err.value.field == f"layer.{missing}"


def test_inputs_are_validated_before_compute():
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16)
    case = make_case(layer, prefix_lens=[0], new_lens=[3])
    with pytest.raises(AttnkitError) as err:      # backends/validation.py wraps every forward
        TorchNativeBackend().forward(case.q, case.v, case.k[:, :1], layer, case.cache, StepState(case.meta))
    assert err.value.code == "AK413"


def test_cross_without_encoder_pages_is_refused():
    layer = make_layer(num_heads=2, head_dim=8, role="cross")
    case = make_case(make_layer(num_heads=2, head_dim=8), prefix_lens=[0], new_lens=[3])
    with pytest.raises(AttnkitError) as err:
        TorchNativeBackend().forward(case.q, None, None, layer, case.cache, StepState(case.meta))
    assert err.value.code == "AK442"


GPU_CASES = [dict(kind="mha", num_heads=8, num_kv_heads=2, head_dim=64, sliding_window=7,
                  logit_softcap=20.0, sinks=True),
             dict(kind="mla", num_heads=4, sliding_window=9)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,kv_dtype", [("fp32", None), ("bf16", None), ("fp16", None),
                                            ("bf16", "fp8_e4m3"), ("fp16", "fp8_e5m2")])
@pytest.mark.parametrize("spec", GPU_CASES, ids=["mha", "mla"])
def test_cuda(spec, dtype, kv_dtype):
    layer = make_layer(**spec, dtype=dtype, device="cuda")
    run(TorchNativeBackend(), layer, dtype=dtype, kv_dtype=kv_dtype, device="cuda", page_size=16,
        prefix_lens=[0, 70, 33], new_lens=[40, 1, 5])
    cross = make_layer(num_heads=4, num_kv_heads=2, head_dim=32, role="cross", dtype=dtype, device="cuda")
    run(TorchNativeBackend(), cross, dtype=dtype, kv_dtype=kv_dtype, device="cuda",
        prefix_lens=[0, 5], new_lens=[6, 1], encoder_lens=[30, 3], encoder="write")

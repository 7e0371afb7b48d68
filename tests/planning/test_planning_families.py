"""Planning the 2026 families: the feature visible, attention layers only, no decode for encoders,
compute dtype against the device, value head dims against each declaration."""
import json

import pytest
from plan_fakes import CPU, FAKE, GPU, OLD_GPU, decl, mha, registry

import attnkit
from attnkit.model import load_model
from attnkit.model.spec import LayerAttention, ModelAttention
from attnkit.registry import declarations
from attnkit.planning.solver import plan

REAL = declarations()


def run(model, platform="h100", request=None, **kw):
    kw.setdefault("env", {})
    return plan(model, platform, request, **kw)


def test_llama4_plans_once_a_backend_declares_chunked_local():
    model = load_model("llama-4-scout")
    without = run(model, GPU, registry=FAKE)
    assert not without.ok and without.error["code"] == "AK122" and "chunked_local" in without.error["message"]
    chunked = decl("chunky", features=frozenset({"chunked_local", "verify"}))
    with_it = run(model, GPU, {"attention_backend": "chunky"}, registry={**FAKE, "chunky": chunked})
    assert with_it.ok and with_it.prefill_backend == with_it.decode_backend == "chunky"
    # the real registry: planned with the feature, or refused naming it (until backends declare it)
    real = run(model, "h100")
    assert real.model_info["features"] == ["chunked_local"]
    assert real.ok or (real.error["code"] == "AK122" and "chunked_local" in real.error["message"])


def test_hybrid_plans_only_the_attention_layers():
    p = run("nemotron-nano-9b-v2")
    info = json.loads(json.dumps(p.to_dict()))["model_info"]
    assert p.ok and info["attention_layers"] == [14, 21, 30, 39] and info["num_layers"] == 4
    assert len(info["other_layers"]["mamba"]) == 27 and len(info["other_layers"]["mlp"]) == 25
    q = run("qwen3-next-80b-a3b")
    assert q.ok and q.model_info["attention_layers"] == list(range(3, 48, 4))
    assert q.settings["heads_per_rank"] == 16 and q.settings["kv_heads_per_rank"] == 2


def test_hybrid_reasons_name_model_layer_ids():
    """A 256-wide head no backend takes: the reason names the attention layers by model layer id."""
    model = load_model({"model_type": "jamba", "num_attention_heads": 4, "num_key_value_heads": 2,
                        "hidden_size": 1024, "num_hidden_layers": 16})
    p = run(model, GPU, {"attention_backend": "triton"}, registry=FAKE)
    assert not p.ok and p.rejected["triton"][0].layers == (4, 12)


def test_encoder_has_no_decode_phase_and_needs_non_causal():
    p = run("bge-m3", "h100")
    assert p.ok and p.decode_backend is None and "no decode phase" in p.why["decode"]
    assert "non_causal" in REAL[p.prefill_backend].capabilities.features
    assert p.model_info["phases"] == ["prefill"]
    assert all(phase == ["prefill"] for rs in p.to_dict()["rejected"].values() for phase in
               (r["phases"] for r in rs))
    named = run("bge-m3", "cpu", {"decode_attention_backend": "sdpa"})
    assert named.ok and named.decode_backend is None and any("no decode phase" in w for w in named.warnings)


def test_encoder_refused_where_nothing_is_non_causal():
    causal_only = registry(decl("plain", features=frozenset({"sliding_window"})))
    p = run(load_model("bge-m3"), CPU, registry=causal_only)
    assert not p.ok and p.error["code"] == "AK122" and "non_causal" in p.error["message"]


@pytest.mark.parametrize("device, dtype, why", [
    ("t4", "fp16", "sm75"), ("a100", "bf16", "config dtype is bf16"), ("cpu", "bf16", "config dtype is bf16")])
def test_unset_dtype_fits_the_device(device, dtype, why):
    p = run("gemma-2-9b", device)
    adj = next(a for a in p.adjustments if a["field"] == "dtype")
    assert p.settings["dtype"] == dtype and why in adj["reason"]


def test_explicit_bf16_on_a_device_without_it_is_a_coded_error():
    p = run("gemma-2-9b", "t4", {"dtype": "bf16"})
    assert not p.ok and p.error["code"] == "AK309" and "--dtype fp16" in p.error["example_fix"]["after"]
    assert run("gemma-2-9b", "t4", {"dtype": "fp16"}).ok
    assert run(mha(dtype="bf16"), OLD_GPU, registry=FAKE).settings["dtype"] == "fp16"


@pytest.mark.parametrize("config_dtype, planned, words", [
    ("float64", "fp32", "fp64"), ("float32", "fp32", "config dtype is fp32"),
    (None, "bf16", "names no dtype"), ("int8", "bf16", "not a compute dtype")])
def test_dtype_reason_is_true(config_dtype, planned, words):
    cfg = {"model_type": "llama", "num_attention_heads": 8, "hidden_size": 512, "num_hidden_layers": 2}
    if config_dtype:
        cfg["torch_dtype"] = config_dtype
    p = run(cfg, "h100")
    adj = next(a for a in p.adjustments if a["field"] == "dtype")
    assert p.settings["dtype"] == planned and words in adj["reason"]
    assert p.model_info["dtype"] == load_model(cfg).dtype


def test_value_head_dims_are_checked_against_each_declaration():
    model = ModelAttention(name="vwide", architecture="X", layers=tuple(
        LayerAttention(layer_id=i, num_heads=8, num_kv_heads=2, head_dim=192, v_head_dim=128) for i in range(2)))
    p = run(model, CPU, registry=FAKE)
    assert not p.ok
    assert all(any(r.field == "v_head_dim" for r in rs) for n, rs in p.rejected.items() if n != "triton_mla")
    served = run(model, CPU, {"attention_backend": "vee"}, registry={**FAKE, "vee": decl("vee", v_head_dims=(128,))})
    assert served.ok and served.prefill_backend == "vee"
    assert not run(model, CPU, {"attention_backend": "vee"},
                   registry={"vee": decl("vee", v_head_dims=(96,))}).ok
    assert run(model, CPU, {"attention_backend": "any"}, registry={"any": decl("any", v_head_dims="any")}).ok
    assert REAL["dual_chunk"].capabilities.to_dict()["v_head_dims"] is None   # equal widths only, unless declared


def test_plan_accepts_keyword_settings():
    assert attnkit.plan("llama-3.1-8b", "h100", page_size=32, env={}).settings["page_size"] == 32

"""Each component planned on its own; supported sets as multimodal_gen's selector has them."""
import dataclasses
import json
import subprocess
import sys

import pytest

from attnkit.errors import AttnkitError
from attnkit.model.components import Component, Pipeline, SupportedSet, Workload
from attnkit.model.pipeline import load_components
from attnkit.model.spec import LayerAttention, ModelAttention
from attnkit.planning.components import plan_components


def one(layers, *, supported=None, name="tower"):
    model = ModelAttention(name=name, architecture="test", layers=tuple(layers), dtype="bf16", encode_only=True)
    comp = Component(name, "test", "TestTower", "vision_tower", attention=model, supported=supported,
                     workload=Workload(tokens=256, formula="256"))
    return Pipeline(name="p", class_name="TestPipeline", source="<test>", components=(comp,))


def enc(dim=128, heads=8):
    return [LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=heads, head_dim=dim, role="encoder")
            for i in range(2)]


def planned(pipe, device="h100", **request):
    return plan_components(pipe, device, request, env={}, profile=False).components[0]


def test_wan_components_each_get_their_own_plan():
    result = plan_components(load_components("wan2.1-t2v-14b"), "h100", env={}, profile=False)
    comps = {c.component.name: c for c in result.components}
    dit = comps["transformer"].plan
    assert dit.ok and dit.prefill_backend == "triton"                  # cross layers are varlen calls too
    assert "triton" not in dit.rejected
    shipped = plan_components(load_components("wan2.1-t2v-14b"), "h200", env={})   # the shipped profile
    on_h200 = next(c for c in shipped.components if c.component.role == "denoiser").plan
    assert on_h200.prefill_backend == "triton" and "varlen_tile" in on_h200.kernel_why["varlen"]
    page = next(a for a in on_h200.adjustments if a["field"] == "page_size")
    assert "keeps no KV cache" in page["reason"]
    assert comps["text_encoder"].error["code"] == "AK508" and not result.ok
    d = result.to_dict()
    assert [c["name"] for c in d["components"]] == [c.name for c in result.pipeline.components]
    vae = next(c for c in d["components"] if c["name"] == "vae")
    assert (vae["attention"], vae["planned"], vae["plan"], vae["ok"]) == (False, False, None, True)
    assert "VAE" in vae["why_not"]


def test_a_set_of_one_is_chosen_with_that_reason():
    got = planned(one(enc(), supported=SupportedSet(("sdpa",), "only SDPA runs its mask")))
    assert got.plan.prefill_backend == "sdpa" and "the only backend" in got.plan.why["prefill"]
    assert "only SDPA runs its mask" in got.plan.why["prefill"]


def test_a_backend_outside_the_set_is_refused_naming_the_set():
    got = planned(one(enc(), supported=SupportedSet(("sdpa", "torch_native"), "why")), attention_backend="triton")
    assert got.error["code"] == "AK140" and "[sdpa, torch_native]" in got.error["message"]


def test_without_a_name_the_planner_chooses_inside_the_set():
    got = planned(one(enc(), supported=SupportedSet(("sdpa", "torch_native"), "why")))
    assert got.plan.ok and got.plan.prefill_backend == "sdpa"          # triton, first otherwise, is outside


@pytest.mark.parametrize("alias", ["cudnn_sdpa", "CUDNN", "flash-sdpa"])
def test_cudnn_sdpa_counts_as_sdpa(alias):
    got = planned(one(enc(), supported=SupportedSet(("sdpa",), "why")), attention_backend=alias)
    assert got.plan.ok and got.plan.prefill_backend == "sdpa" and "counted as sdpa" in got.notes[0]


def test_no_kernel_for_this_head_size_is_its_own_code_with_the_fix():
    got = planned(one(enc(dim=72)), attention_backend="triton")         # SigLIP's head size
    assert got.error["code"] == "AK141" and "72" in got.error["message"]
    assert {"sdpa", "torch_native"} <= set(got.error["expected"])
    assert "use sdpa or torch_native" in got.error["solutions"][0]


def test_no_kernel_on_this_platform_is_the_same_code():
    got = planned(one(enc()), "t4", attention_backend="triton")         # sm75: triton needs sm80
    assert got.error["code"] == "AK141" and "sdpa" in got.error["expected"]
    missing = planned(one(enc()), "cpu", attention_backend="triton")    # not installed: not a kernel gap
    assert missing.error is None and missing.plan.error["code"] != "AK141"


def test_a_reason_other_than_the_kernel_keeps_the_plans_own_error():
    got = plan_components(one(enc()), "h100", {"attention_backend": "triton"}, registry=without_varlen("triton"),
                          env={}, profile=False).components[0]             # no varlen call: not a kernel gap
    assert got.error is None and not got.plan.ok


def without_varlen(name):
    from attnkit.registry import declarations
    out = dict(declarations())
    caps = out[name].capabilities
    out[name] = dataclasses.replace(out[name], capabilities=dataclasses.replace(
        caps, features=caps.features - {"varlen"}))
    return out


def test_a_cache_less_component_checks_the_varlen_call_not_the_paged_path():
    layers = [*enc(), *(dataclasses.replace(l, layer_id=l.layer_id + 2, role="cross") for l in enc())]
    pipe = one(layers)
    model = pipe.components[0].attention
    assert model.varlen_only and model.features() == {"non_causal", "cross_attention"}
    got = planned(pipe)
    assert got.plan.ok and got.plan.prefill_backend == "triton"        # triton has no paged cross_attention
    rejected = plan_components(pipe, "h100", registry=without_varlen("triton"), env={},
                               profile=False).components[0].plan
    reasons = rejected.rejected["triton"]
    assert rejected.ok and rejected.prefill_backend == "sdpa"
    assert [(r.code, r.actual) for r in reasons if r.field == "features"] == [("AK103", "varlen")]
    assert "needed by layers 0-3" in reasons[0].message and "without a KV cache" in reasons[0].message


def test_a_cache_less_component_is_not_checked_for_kv_cache_settings():
    from attnkit.registry import declarations
    registry = dict(declarations())
    paged_only = dataclasses.replace(registry["triton"].capabilities, kv_cache_dtypes=("bf16",), page_sizes=(16,))
    registry["triton"] = dataclasses.replace(registry["triton"], capabilities=paged_only)
    request = {"kv_cache_dtype": "fp8_e4m3", "page_size": 32}
    got = plan_components(one(enc()), "h100", request, registry=registry, env={}, profile=False).components[0]
    assert got.plan.ok and got.plan.prefill_backend == "triton" and "triton" not in got.plan.rejected
    from attnkit import plan
    cached = plan("qwen3-8b", "h100", request, registry=registry, env={}, profile=False)   # an LLM still is
    assert {r.code for r in cached.rejected["triton"]} >= {"AK106", "AK107"}


def test_a_layer_the_varlen_call_cannot_compute_keeps_the_paged_check():
    window = [dataclasses.replace(l, sliding_window=64) for l in enc()]
    model = one(window).components[0].attention
    assert not model.varlen_only and model.varlen_gaps() == ["sliding_window"]
    p = planned(one(window)).plan
    assert all(r.actual != "varlen" for rs in p.rejected.values() for r in rs)
    causal = one([dataclasses.replace(l, role="decoder") for l in enc()]).components[0].attention
    assert not causal.varlen_only and causal.varlen_gaps() == ["causal"]


def test_an_llm_with_cross_attention_still_needs_cross_attention():
    from attnkit import plan
    p = plan("whisper-large-v3", "h200", env={}, profile=False)           # cached: a decode phase
    assert any(r.code == "AK103" and r.actual == "cross_attention" for r in p.rejected["triton"])
    assert p.prefill_backend != "triton"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "attnkit", "plan", *args], capture_output=True, text=True)


def test_cli_plans_every_component_of_a_pipeline():
    run = run_cli("flux.1-dev", "--device", "h100", "--json")
    d = json.loads(run.stdout)
    assert run.returncode == 3 and d["kind"] == "components"            # the T5 encoder is refused
    assert [c["name"] for c in d["components"] if c["planned"]] == ["text_encoder", "transformer"]
    dit = next(c for c in d["components"] if c["name"] == "transformer")
    assert dit["workload"]["tokens"] == 4608 and dit["plan"]["ok"]


def test_cli_workload_flags_set_the_tokens():
    run = run_cli("wan2.1-t2v-14b", "--device", "h100", "--height", "720", "--width", "1280", "--json")
    dit = next(c for c in json.loads(run.stdout)["components"] if c["name"] == "transformer")
    assert dit["workload"]["tokens"] == 75_600
    text = run_cli("wan2.1-t2v-14b", "--device", "h100").stdout
    assert "REFUSED" in text and "AK508" in text and "not planned (no attention)" in text


def test_a_vision_towers_set_is_the_backends_declaring_varlen():
    from attnkit.registry import declarations

    pipe = load_components("qwen2.5-vl-7b-instruct")
    result = plan_components(pipe, "h100", env={}, profile=False)
    tower = result.components[1]
    varlen = sorted(n for n, d in declarations().items() if "varlen" in d.capabilities.features)
    assert tower.plan.ok and tower.plan.prefill_backend in varlen
    assert any(", ".join(varlen) in n for n in tower.notes)
    assert result.to_dict()["components"][1]["supported_backends"] == varlen
    named = plan_components(pipe, "h100", {"attention_backend": "triton_mla"}, env={}, profile=False)
    assert named.components[1].error["code"] == "AK140"
    assert named.components[0].plan.ok is False                          # the LM's own plan says why
    bare = {n: dataclasses.replace(d, capabilities=dataclasses.replace(
        d.capabilities, features=d.capabilities.features - {"varlen"})) for n, d in declarations().items()}
    none = plan_components(pipe, "h100", registry=bare, env={}, profile=False).components[1]
    assert none.error["code"] == "AK140" and "no registered backend" in none.error["message"]


def test_the_env_backend_goes_through_the_set_too():
    got = plan_components(one(enc(), supported=SupportedSet(("sdpa",), "why")), "h100",
                          env={"ATTNKIT_ATTENTION_BACKEND": "triton"}, profile=False).components[0]
    assert got.error["code"] == "AK140"


def test_the_prefill_flag_goes_through_the_set_and_its_alias_too():
    pipe = one(enc(), supported=SupportedSet(("sdpa",), "why"))
    assert planned(pipe, prefill_attention_backend="triton").error["code"] == "AK140"
    got = planned(pipe, prefill_attention_backend="cudnn_sdpa")
    assert got.plan.ok and got.plan.prefill_backend == "sdpa"


def test_plan_components_takes_a_pipeline_name_and_refuses_what_is_not_a_pipeline():
    """Found by the probe: plan_components("flux.1-dev") and plan_components(None) raised
    AttributeError. A name or path is read by load_components; a model of one part or another
    type is AK511 pointing to attnkit.plan."""
    by_name = plan_components("flux.1-dev", "h200")
    assert by_name.to_dict() == plan_components(load_components("flux.1-dev"), "h200").to_dict()
    for bad in (None, 3, "llama-3.1-8b"):
        with pytest.raises(AttnkitError) as err:
            plan_components(bad, "h200")
        assert err.value.code == "AK511" and "attnkit.plan" in str(err.value), bad
    with pytest.raises(AttnkitError) as err:
        plan_components("flux-1-dev", "h200")                         # a typo: the loader's own code
    assert err.value.code == "AK507"

"""The engine plugins' shared plan (integrations/engine_plan.py) and interface check, without
any engine installed."""
import types

import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.integrations import engine_plan
from attnkit.integrations.interface import Expected, problems

CONFIG = {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 2, "num_hidden_layers": 2, "head_dim": 32, "vocab_size": 64,
          "max_position_embeddings": 256, "torch_dtype": "float32"}


def plan(**kw):
    args = dict(engine="vLLM", name="tiny", device=torch.device("cpu"), dtype=torch.float32,
                kv_cache_dtype="auto", page_size=32) | kw
    return engine_plan.plan_engine(CONFIG, **args)


def test_engine_settings_are_planned_as_explicit_requests():
    ep = plan()
    assert ep.plan.settings["page_size"] == 32 and ep.plan.settings["kv_cache_dtype"] == "fp32"
    assert ep.kv_dtype == torch.float32 and sorted(ep.layers) == [0, 1]
    line = engine_plan.startup_line(ep, engine_settings={"block_size": 32})
    assert line.startswith("attnkit plan for tiny on ") and "decode=sdpa" in line
    assert "page_size=32" in line and "(vLLM: block_size=32)" in line


def test_tensor_parallel_heads_per_rank():
    ep = plan(tp_size=4)
    spec = ep.layers[0]
    assert (spec.num_heads, spec.num_kv_heads) == (1, 1)      # 2 KV heads replicated over 4 ranks


def test_a_layer_built_otherwise_than_planned_is_refused():
    ep = plan()
    good = dict(num_heads=4, num_kv_heads=2, head_size=32, scale=32 ** -0.5, sliding_window=None,
                softcap=None)
    assert ep.layer(1, **good).spec.layer_id == 1
    with pytest.raises(AttnkitError) as err:
        ep.layer(0, **{**good, "scale": 0.2})
    assert err.value.code == "AK496" and "scale" in str(err.value)
    with pytest.raises(AttnkitError) as err:
        ep.layer(0, **{**good, "sliding_window": 8})
    assert err.value.code == "AK496" and "sliding_window" in str(err.value)
    with pytest.raises(AttnkitError) as err:
        ep.layer(7, **good)
    assert err.value.code == "AK496"


def test_unknown_kv_dtype_and_compute_dtype_are_refused():
    with pytest.raises(AttnkitError) as err:
        plan(kv_cache_dtype="int4")
    assert err.value.code == "AK496"
    with pytest.raises(AttnkitError) as err:
        plan(dtype=torch.float64)
    assert err.value.code == "AK496"


def test_planner_refusals_keep_the_planners_code():
    with pytest.raises(AttnkitError) as err:
        plan(request={"attention_backend": "triton"})
    assert err.value.code != "AK496"


def test_scale_error_knob_changes_the_bound_scale(monkeypatch):
    monkeypatch.setenv(engine_plan.SCALE_ERROR_ENV, "0.01")
    layer = plan().layer(0, num_heads=4, num_kv_heads=2, head_size=32, scale=32 ** -0.5,
                         sliding_window=None, softcap=None)
    assert layer.spec.softmax_scale == pytest.approx(1.01 * 32 ** -0.5)


def test_interface_problems_name_the_class_and_the_version(monkeypatch):
    fake = types.ModuleType("fake_engine")

    class Backend:
        def forward(self, q, k):
            pass

    fake.Backend = Backend
    monkeypatch.setitem(__import__("sys").modules, "fake_engine", fake)
    found = problems("Engine", "9.9", [
        Expected("fake_engine:Backend", params={"forward": ("q", "k", "layer")}, attrs=("name",)),
        Expected("fake_engine:Gone")])
    assert any("Engine 9.9: fake_engine:Backend.forward" in m and "layer" in m for m in found)
    assert any("Engine 9.9: fake_engine:Backend has no attribute 'name'" in m for m in found)
    assert any("Engine 9.9: fake_engine:Gone is missing" in m for m in found)
    assert problems("Engine", "9.9", [Expected("fake_engine:Backend",
                                               params={"forward": ("q", "k")})]) == []


def test_startup_line_names_the_kernels_per_role_from_the_plans_run():
    """On a GPU plan (h100 preset, planned without a GPU) the run description has kernel
    tables; the start-up line quotes them per role."""
    import attnkit

    result = attnkit.plan(CONFIG | {"head_dim": 128, "hidden_size": 512}, "h100",
                          {"dtype": "bf16", "attention_backend": "triton"})
    ep = engine_plan.EnginePlan(engine="vLLM", plan=result, backend=None, layers={}, tp_size=1,
                                page_size=result.run.page_size, kv_dtype=torch.bfloat16)
    line = engine_plan.startup_line(ep, engine_settings={"device": "cuda:0"})
    for role in result.run.roles:
        assert f"{role.role}=triton[{','.join(role.kernels.variants())}]" in line


def test_engine_kv_dtype_names_are_read_with_the_one_spelling_table():
    """vLLM's KV-cache dtype names go through the vocabulary's spellings (what `attnkit plan
    --kv-cache-dtype` reads): "auto" is the compute dtype, fp8 is fp8_e4m3; a dtype with no KV
    cache equivalent is AK496."""
    from attnkit.errors import AttnkitError
    from attnkit.integrations.engine_plan import engine_kv_dtype
    assert engine_kv_dtype("vllm", "auto") is None and engine_kv_dtype("vllm", None) is None
    assert [engine_kv_dtype("vllm", n) for n in ("bfloat16", "half", "fp8", "fp8_e5m2", "float32")] == \
        ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp32"]
    for bad in ("float64", "int8", 3):
        with pytest.raises(AttnkitError) as err:
            engine_kv_dtype("vllm", bad)
        assert err.value.code == "AK496"

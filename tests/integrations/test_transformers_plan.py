"""Planning for attn_implementation="attnkit": at load, inspectable, overridable (flags, env),
and what the plan or a call cannot serve is an attnkit error, never another implementation."""
import pytest
import torch

from attnkit.errors import AttnkitError
from attnkit.integrations import hf_plan
from attnkit.integrations.transformers import attnkit_plan, explain, plan_for_model
from hf_tiny import build_config, close, dtype_kw, load


def codes(excinfo):
    return excinfo.value.code


@pytest.mark.parametrize("family,feature", [("gemma2", "logit_softcap"), ("gpt_oss", "sinks")])
def test_forcing_a_backend_that_cannot_serve_fails_at_load(tiny, attnkit_tf, family, feature):
    path, _ = tiny(family)
    attnkit_tf(attention_backend="sdpa")
    with pytest.raises(AttnkitError) as err:
        load(path)
    assert codes(err) == "AK121" and feature in err.value.message
    assert "torch_native" in err.value.message             # what would serve instead


def test_environment_overrides_like_the_cli(tiny, attnkit_tf, monkeypatch):
    path, eager = tiny("llama")
    attnkit_tf()
    assert attnkit_plan(load(path)).prefill_backend == "sdpa"     # the CPU default
    monkeypatch.setenv("ATTNKIT_ATTENTION_BACKEND", "torch_native")
    assert attnkit_plan(load(path)).prefill_backend == "torch_native"
    monkeypatch.setenv("ATTNKIT_ATTENTION_BACKEND", "sdpa")
    with pytest.raises(AttnkitError) as err:
        load(tiny("gemma2")[0])
    assert codes(err) == "AK121"
    monkeypatch.delenv("ATTNKIT_ATTENTION_BACKEND")
    monkeypatch.setenv("ATTNKIT_DENY_BACKENDS", "sdpa")
    plan = attnkit_plan(load(path))
    assert plan.prefill_backend == "torch_native" and "sdpa" in plan.rejected


def test_plan_is_inspectable(tiny, attnkit_tf):
    path, _ = tiny("gemma2")
    attnkit_tf()
    model = load(path)
    plan = attnkit_plan(model)
    assert plan.ok and plan.prefill_backend == plan.decode_backend == "torch_native"
    assert "sdpa" in plan.why["prefill"] and plan.to_dict()["settings"]["dtype"] == "fp32"
    text = explain(model)
    assert "prefill+decode  torch_native" in text and "logit_softcap" in text


def test_plan_for_model_overrides_one_model(tiny, attnkit_tf):
    path, eager = tiny("llama")
    attnkit_tf()
    model = load(path)
    assert plan_for_model(model, attention_backend="torch_native", page_size=2).prefill_backend \
        == "torch_native"
    assert attnkit_plan(model).settings["page_size"] == 2
    ids = torch.randint(1, 128, (2, 7))
    with torch.no_grad():
        close(model(input_ids=ids).logits, eager(input_ids=ids).logits)
    assert attnkit_plan(model).prefill_backend == "torch_native"
    # a refused override leaves the model as it was
    gemma = load(tiny("gemma2")[0])
    with pytest.raises(AttnkitError):
        plan_for_model(gemma, attention_backend="sdpa")
    assert attnkit_plan(gemma).prefill_backend == "torch_native"


def test_set_attn_implementation_plans_too(tiny, attnkit_tf):
    import transformers

    path, _ = tiny("gemma2")
    attnkit_tf(attention_backend="sdpa")
    model = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    try:
        model.set_attn_implementation("attnkit")
    except AttnkitError as err:
        assert err.code == "AK121"
    # transformers 4.55 logs the error instead of raising; the model stays as it was
    assert model.config._attn_implementation == "eager"
    attnkit_tf()
    model.set_attn_implementation("attnkit")
    assert attnkit_plan(model).prefill_backend == "torch_native"


def test_bad_flags_are_refused_at_register(attnkit_tf):
    with pytest.raises(AttnkitError) as err:
        attnkit_tf(dtype="bf16")
    assert codes(err) == "AK306" and "from_pretrained" in err.value.message
    with pytest.raises(AttnkitError) as err:
        attnkit_tf(page_size=0)
    assert codes(err) == "AK306"
    with pytest.raises(AttnkitError):
        attnkit_tf(backend_options=["x"])


def test_unknown_backend_name_is_the_planners_error(tiny, attnkit_tf):
    attnkit_tf(attention_backend="tritn")
    with pytest.raises(AttnkitError) as err:
        load(tiny("llama")[0])
    assert "triton" in err.value.message                      # did you mean


def test_models_attnkit_cannot_serve_fail_at_load(attnkit_tf):
    import transformers

    attnkit_tf()
    mla = transformers.DeepseekV3Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16,
        q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
        n_routed_experts=4, num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1)
    with pytest.raises(AttnkitError) as err:
        transformers.AutoModelForCausalLM.from_config(mla, attn_implementation="attnkit")
    assert codes(err) == "AK490" and "MLA" in err.value.message
    with pytest.raises(AttnkitError) as err:
        transformers.AutoModelForCausalLM.from_config(
            build_config("llama"), attn_implementation="attnkit", **dtype_kw(torch.float64))
    assert codes(err) == "AK490"


def test_calls_attnkit_cannot_serve_raise(tiny, attnkit_tf):
    import transformers

    attnkit_tf()
    model = load(tiny("llama")[0])
    ids = torch.randint(1, 128, (1, 8))
    with torch.no_grad(), pytest.raises(AttnkitError) as err:      # a 0/1 integer 4D mask
        model(input_ids=ids, attention_mask=torch.ones(1, 1, 8, 8, dtype=torch.long).tril())
    assert codes(err) == "AK491" and "mask.bool()" in err.value.message
    train = transformers.AutoModelForCausalLM.from_config(
        build_config("llama", attention_dropout=0.1), attn_implementation="attnkit").train()
    with pytest.raises(AttnkitError) as err:
        train(input_ids=ids)
    assert codes(err) == "AK491" and "dropout" in err.value.message


def test_other_dtype_plans_on_first_call(tiny, attnkit_tf):
    path, eager = tiny("llama")
    attnkit_tf()
    model = load(path)
    assert attnkit_plan(model).settings["dtype"] == "fp32"
    model.to(torch.bfloat16)
    ids = torch.randint(1, 128, (2, 6))
    with torch.no_grad():
        got = model(input_ids=ids).logits.float()
        want = eager(input_ids=ids).logits
    assert attnkit_plan(model).settings["dtype"] == "bf16"
    close(got, want, rtol=5e-2)
    assert len(hf_plan.state_of(model.config).plans) == 2


def test_old_transformers_is_refused(attnkit_tf, monkeypatch):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "4.50.0")
    with pytest.raises(AttnkitError) as err:
        attnkit_tf()
    assert codes(err) == "AK492" and "4.55" in err.value.message


@pytest.mark.parametrize("page", ["docs/integrations.md", "README.md"])
def test_documented_two_lines_run(tiny, attnkit_tf, page):
    import pathlib
    import re

    import transformers

    text = (pathlib.Path(__file__).resolve().parents[2] / page).read_text()
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                   if 'attn_implementation="attnkit"' in b)
    scope = {"path": tiny("llama")[0], "AutoModelForCausalLM": transformers.AutoModelForCausalLM}
    exec(compile(snippet, page, "exec"), scope)
    assert scope["model"].config._attn_implementation == "attnkit"
    assert attnkit_plan(scope["model"]).ok


def test_importing_the_integration_does_not_import_transformers():
    import subprocess
    import sys

    code = ("import sys, attnkit, attnkit.integrations; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))); "
            "import attnkit.integrations.transformers; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["[]", "[]"], out.stderr


def test_dual_chunk_config_plans_plain_attention_like_transformers(attnkit_tf):
    """transformers ignores dual_chunk_attention_config; attnkit plans it off and says so."""
    import copy

    import transformers

    attnkit_tf()
    config = build_config("qwen2", dual_chunk_attention_config={
        "chunk_size": 16, "local_size": 4, "original_max_position_embeddings": 0})
    with pytest.warns(UserWarning, match="dual chunk attention is off"):
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="attnkit").eval()
    eager = transformers.AutoModelForCausalLM.from_config(
        copy.deepcopy(config), attn_implementation="eager").eval()
    eager.load_state_dict(model.state_dict())
    plan = attnkit_plan(model)
    assert plan.settings["dual_chunk"] == "off" and plan.prefill_backend != "dual_chunk"
    ids = torch.randint(1, 128, (2, 20))                   # past chunk_size
    with torch.no_grad():
        close(model(input_ids=ids).logits, eager(input_ids=ids).logits)


def test_register_is_idempotent_and_leaves_other_implementations_alone(attnkit_tf, monkeypatch):
    """register() wraps transformers' check of the requested implementation once; models
    loaded with eager, sdpa or the default build, plan and compute as without the wrapper."""
    import copy

    import transformers
    from transformers.modeling_utils import PreTrainedModel

    attnkit_tf()
    hook = PreTrainedModel.get_correct_attn_implementation
    attnkit_tf(page_size=2)
    assert PreTrainedModel.get_correct_attn_implementation is hook
    assert not getattr(hook.__wrapped__, "_attnkit_plans_models", False)     # wrapped once
    config, ids = build_config("llama"), torch.randint(1, 128, (2, 6))
    built = {}
    for hooked in (True, False):
        if not hooked:
            monkeypatch.setattr(PreTrainedModel, "get_correct_attn_implementation", hook.__wrapped__)
        for impl in ("eager", "sdpa", None):
            torch.manual_seed(0)
            kw = {} if impl is None else {"attn_implementation": impl}
            model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), **kw)
            with torch.no_grad():
                built[hooked, impl] = model.config._attn_implementation, model.eval()(ids).logits
            assert hf_plan.state_of(model.config, create=False) is None      # never planned
    for impl in ("eager", "sdpa", None):
        assert built[True, impl][0] == built[False, impl][0] != "attnkit"
        assert torch.equal(built[True, impl][1], built[False, impl][1])


def test_plan_for_model_checks_device_and_dtype(tiny, attnkit_tf):
    """Devices torch cannot run on were a raw AssertionError / RuntimeError, or planned as the
    CPU; dtypes may be given by attnkit's names."""
    attnkit_tf()
    model = load(tiny("llama")[0])
    for device in ("cuda:99", "bogus", "meta", 3.5):
        with pytest.raises(AttnkitError) as err:
            plan_for_model(model, device=device)
        assert codes(err) == "AK306" and err.value.field == "device"
    assert plan_for_model(model, dtype="bf16").settings["dtype"] == "bf16"
    with pytest.raises(AttnkitError) as err:
        plan_for_model(model, dtype="bfloat17")
    assert codes(err) == "AK306" and "bf16" in err.value.message
    assert plan_for_model(model, device="cpu", dtype=torch.float32).settings["dtype"] == "fp32"

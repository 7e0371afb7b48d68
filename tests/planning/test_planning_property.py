"""Property: any model x platform x request either plans (ok or not) or raises AttnkitError."""
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnkit.errors import AttnkitError
from attnkit.hardware import get_preset, preset_names
from attnkit.model import load_model, preset_names as model_presets
from attnkit.model.spec import DualChunkConfig, LayerAttention, MLAConfig, ModelAttention
from attnkit.planning.plan import Plan
from attnkit.planning.reasons import check_backend, model_needs
from attnkit.registry import declarations
from attnkit.planning.solver import plan

PRESET_MODELS = {n: load_model(n) for n in model_presets()}
PLATFORMS = {n: get_preset(n) for n in preset_names()}
REGISTRY = declarations()
NAMES = ["triton", "sdpa", "torch_native", "triton_mla", "dual_chunk", "torch", "tritn", "flashinfer",
         "", "auto", "FA3", "Triton-MLA", 7, None]
JUNK = st.sampled_from([None, -1, 0, "x", 3.5, True, [], {}])


@st.composite
def layers(draw):
    n = draw(st.integers(1, 4))
    kind = draw(st.sampled_from(["mha", "mla", "bogus"]))
    out = []
    for i in range(n):
        kv = draw(st.sampled_from([1, 2, 4, 0]))
        heads = kv * draw(st.integers(1, 8)) + draw(st.sampled_from([0, 0, 0, 1]))
        mla = (MLAConfig(kv_lora_rank=draw(st.sampled_from([512, 64, 256])), qk_rope_head_dim=draw(
            st.sampled_from([64, 16])), qk_nope_head_dim=128, v_head_dim=128) if kind == "mla" else None)
        out.append(LayerAttention(
            layer_id=i, num_heads=heads, num_kv_heads=kv, head_dim=draw(st.sampled_from([64, 80, 128, 192, -1])),
            kind=kind, mla=mla, role=draw(st.sampled_from(["decoder", "decoder", "encoder", "cross", "nope"])),
            sliding_window=draw(st.sampled_from([None, None, 128, 0])),
            logit_softcap=draw(st.sampled_from([None, None, 30.0, -1.0])), sinks=draw(st.booleans()),
            dual_chunk=draw(st.sampled_from([None, None, DualChunkConfig(8, 2), DualChunkConfig(262144, 8192)]))))
    return tuple(out)


MODELS = st.one_of(st.sampled_from(sorted(PRESET_MODELS)).map(PRESET_MODELS.get),
                   st.builds(ModelAttention, name=st.just("rand"), architecture=st.just("Rand"), layers=layers(),
                             dtype=st.sampled_from(["bf16", "fp16", "fp32", "fp8", "weird"])))
REQUESTS = st.fixed_dictionaries({}, optional={
    "attention_backend": st.sampled_from(NAMES), "prefill_attention_backend": st.sampled_from(NAMES),
    "decode_attention_backend": st.sampled_from(NAMES),
    "page_size": st.one_of(st.sampled_from([1, 16, 32, 64, 100, 128]), JUNK),
    "kv_cache_dtype": st.one_of(st.sampled_from(["fp8", "fp8_e5m2", "bf16", "fp16", "auto", "fp7"]), JUNK),
    "dtype": st.one_of(st.sampled_from(["bf16", "fp16", "fp32", "float16"]), JUNK),
    "tp_size": st.one_of(st.sampled_from([1, 2, 3, 4, 8, 16, 64]), JUNK),
    "speculative_tokens": st.one_of(st.integers(0, 8), JUNK),
    "dual_chunk": st.one_of(st.sampled_from(["auto", "on", "off"]), JUNK),
    "cuda_graph": st.one_of(st.booleans(), JUNK),
    "deny": st.one_of(st.lists(st.sampled_from(NAMES[:8])), JUNK),
    "bogus_key": st.just(1)})
ENVS = st.fixed_dictionaries({}, optional={"ATTNKIT_ATTENTION_BACKEND": st.sampled_from(["sdpa", "tritn", "", "auto"]),
                                           "ATTNKIT_DENY_BACKENDS": st.sampled_from(["triton", "x,sdpa", ","])})


def result_model(model):
    return model if isinstance(model, ModelAttention) else load_model(model)


@settings(max_examples=2000, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(model=MODELS, platform=st.sampled_from(sorted(PLATFORMS)), request=REQUESTS, env=ENVS)
def test_plan_or_attnkit_error(model, platform, request, env):
    try:
        result = plan(model, PLATFORMS[platform], request, env=env)
    except AttnkitError as err:
        assert err.code.startswith("AK") and not err.code.startswith("AK9"), err
        return
    assert isinstance(result, Plan)
    data = json.loads(json.dumps(result.to_dict()))      # the JSON contract holds for every plan
    assert data["ok"] == (data["error"] is None)
    if result.ok:
        phases = result_model(model).phases
        assert result.prefill_backend and result.settings["page_size"] >= 1
        assert (result.decode_backend is not None) == ("decode" in phases)   # encoders: no decode phase
        given = data["request"]
        for key in ("page_size", "dtype", "kv_cache_dtype", "tp_size"):   # an explicit value is never changed
            if given[key] is not None:
                assert data["settings"][key] == given[key]
                assert all(a["field"] != key for a in data["adjustments"])
        # each chosen backend serves the model per its own declaration (the solver's generic check)
        needs = model_needs(result_model(model), dual_chunk=given["dual_chunk"] != "off")
        for phase, name in (("prefill", result.prefill_backend), ("decode", result.decode_backend)):
            if phase not in phases:
                continue
            reasons = check_backend(REGISTRY[name], model=result_model(model), needs=needs,
                                    platform=PLATFORMS[platform], phase=phase, settings=result.settings)
            assert not reasons, (phase, name, reasons)
    else:
        assert data["error"]["code"][:3] in ("AK1", "AK2", "AK3") and data["error"]["solutions"]


def test_explicit_phase_with_rule_chosen_backend_plans_without_a_crash():
    """Review finding: the dual-chunk rule fills decode while prefill is named; this raised KeyError."""
    request = {"prefill_attention_backend": "dual_chunk", "speculative_tokens": 3}
    result = plan("qwen2.5-7b-instruct-1m", "h100", request, env={})
    assert not result.ok and result.error["code"] == "AK120"
    assert any("drop --speculative-tokens" in s for s in result.error["solutions"])


# Keys that change attention in some Hugging Face family, written from transformers' config
# classes (independent of attnkit/model/keys.py), with values that switch them on and off.
ATTENTION_KEYS = {
    "sliding_window": [8, 16, None], "use_sliding_window": [True, False], "max_window_layers": [0, 2],
    "sliding_window_pattern": [2, 3], "attention_chunk_size": [16, None], "no_rope_layers": [[], [1, 0, 1, 0]],
    "no_rope_layer_interval": [2], "index_topk": [4], "index_n_heads": [2], "index_head_dim": [16],
    "hybrid_override_pattern": ["M*-*", "M*M*", "*X**"], "attn_layer_period": [2], "attn_layer_offset": [1],
    "attn_layer_indices": [[1]], "full_attention_interval": [2], "global_attn_every_n_layers": [1, 3],
    "local_attention": [64], "position_embedding_type": ["absolute", "relative_key", "alibi", "rotary"],
    "use_bidirectional_attention": [True, False], "is_decoder": [True, False], "is_causal": [False, True],
    "add_cross_attention": [True], "attn_logit_softcapping": [30.0], "query_pre_attn_scalar": [16],
    "dual_chunk_attention_config": [{"chunk_size": 64, "local_size": 8}], "alibi": [True, False],
    "use_alibi": [True], "relative_attention_num_buckets": [32], "v_head_dim": [32],
    "attn_temperature_tuning": [True, False], "use_qk_norm": [True], "attn_output_gate": [True],
    "attn_type_list": [[0, 1, 0, 1]], "key_multiplier": [0.5], "indexer_types": [["full", "shared"] * 2],
    "layer_types": [["full_attention", "sliding_attention"] * 2, ["linear_attention", "full_attention"] * 2,
                    ["chunked_attention", "full_attention"] * 2, ["indexed_attention"] * 4, ["window_attention"] * 4],
    "layers_block_type": [["full_attention", "linear_attention", "mlp", "moe"]],
}
FAMILIES = ["llama", "mistral", "qwen2", "qwen3_next", "gemma2", "gemma3_text", "gpt_oss", "llama4_text",
            "nemotron_h", "jamba", "bamba", "falcon_h1", "bert", "modernbert", "deepseek_v3", "deepseek_v32",
            "glm_moe_dsa", "mystery"]
MLA_BASE = {"kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32}


@st.composite
def family_configs(draw):
    family = draw(st.sampled_from(FAMILIES))
    cfg = {"model_type": family, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256,
           "num_hidden_layers": 4, **(MLA_BASE if family.startswith(("deepseek", "glm")) else {})}
    for key in draw(st.lists(st.sampled_from(sorted(ATTENTION_KEYS)), max_size=4, unique=True)):
        cfg[key] = draw(st.sampled_from(ATTENTION_KEYS[key]))
    return family, cfg


@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(family_configs(), st.sampled_from(["h100", "t4", "cpu"]))
def test_no_config_plans_while_ignoring_an_attention_key(case, device):
    from attnkit.model.config import parse_traced
    from attnkit.model.keys import classify

    family, cfg = case
    try:
        model, read = parse_traced(cfg)
    except AttnkitError as err:
        assert err.code.startswith("AK5"), err
        return
    for key, value in cfg.items():
        if key not in ATTENTION_KEYS or value is None:
            continue
        status, _ = classify(key, family, value)
        # never planned with a key no rule knows, a key only other families use, or a refused one
        assert status in ("modelled", "outside", "unused", "inactive"), (family, key, value, status)
        if status == "modelled":
            assert key in read, (family, key, "claimed modelled but never read")
        if status == "outside":
            assert any(key in note for note in model.notes), (family, key, model.notes)
    try:
        result = plan(model, PLATFORMS[device], env={})
    except AttnkitError as err:
        assert not err.code.startswith("AK9"), err
        return
    assert result.ok == (result.error is None) and set(result.model_info["features"]) == set(model.features())

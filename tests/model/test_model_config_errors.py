"""Malformed or unservable configs raise AK5xx naming the field (and file); never a traceback."""
import json

import pytest

from attnkit.errors import CATALOG, AttnkitError
from attnkit.model import load_model

BASE = {"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 8,
        "hidden_size": 4096, "num_hidden_layers": 4}


def _err(source, **kwargs) -> AttnkitError:
    with pytest.raises(AttnkitError) as info:
        load_model(source, **kwargs)
    assert info.value.code in CATALOG, info.value.code
    return info.value


def _with(**changes):
    cfg = dict(BASE)
    for key, value in changes.items():
        if value is _DROP:
            cfg.pop(key)
        else:
            cfg[key] = value
    return cfg


_DROP = object()


@pytest.mark.parametrize("changes, code, field", [
    (dict(num_attention_heads=_DROP), "AK503", "num_attention_heads"),
    (dict(num_hidden_layers=_DROP), "AK503", "num_hidden_layers"),
    (dict(num_attention_heads=None), "AK503", "num_attention_heads"),
    (dict(hidden_size=_DROP), "AK503", "head_dim"),
    (dict(num_attention_heads="32"), "AK504", "num_attention_heads"),
    (dict(num_attention_heads=True), "AK504", "num_attention_heads"),
    (dict(num_key_value_heads=False), "AK504", "num_key_value_heads"),
    (dict(hidden_size=4096.5), "AK504", "hidden_size"),
    (dict(num_hidden_layers=[32]), "AK504", "num_hidden_layers"),
    (dict(model_type=7), "AK504", "model_type"),
    (dict(num_attention_heads=0), "AK505", "num_attention_heads"),
    (dict(num_hidden_layers=-2), "AK505", "num_hidden_layers"),
    (dict(num_hidden_layers=10**9), "AK505", "num_hidden_layers"),
    (dict(head_dim=-128), "AK505", "head_dim"),
    (dict(num_key_value_heads=6), "AK506", "num_key_value_heads"),
    (dict(hidden_size=4001), "AK506", "hidden_size"),
    (dict(layer_types=["full_attention"] * 3), "AK506", "layer_types"),
    (dict(layer_types=["full_attention"] * 3 + ["window_attention"]), "AK512", "layer_types"),
    (dict(layer_types=["full_attention"] * 3 + ["chunked_attention"]), "AK503", "attention_chunk_size"),
    (dict(layer_types=["full_attention"] * 3 + ["linear_attention"]), "AK512", "layer_types"),
    (dict(layer_types=["sliding_attention"] * 4), "AK503", "sliding_window"),
    (dict(layer_types="full_attention"), "AK504", "layer_types"),
    (dict(attn_logit_softcapping=-1.0), "AK505", "attn_logit_softcapping"),
    (dict(query_pre_attn_scalar="256"), "AK504", "query_pre_attn_scalar"),
    (dict(query_pre_attn_scalar=10**400), "AK505", "query_pre_attn_scalar"),   # was OverflowError
    (dict(attn_logit_softcapping=-10**400), "AK505", "attn_logit_softcapping"),
    (dict(dual_chunk_attention_config=[1]), "AK504", "dual_chunk_attention_config"),
    (dict(dual_chunk_attention_config={"chunk_size": 8, "local_size": 8}), "AK505",
     "dual_chunk_attention_config.local_size"),
    (dict(dual_chunk_attention_config={"local_size": 8}), "AK503",
     "dual_chunk_attention_config.chunk_size"),
])
def test_bad_field_is_named(changes, code, field):
    err = _err(_with(**changes))
    assert (err.code, err.field) == (code, field), err
    assert field.split(".")[-1] in err.message


@pytest.mark.parametrize("cfg, code", [
    ({"model_type": "t5", "d_model": 512, "num_heads": 8, "num_layers": 6}, "AK508"),
    ({"model_type": "umt5", "num_heads": 8, "num_layers": 6, "relative_attention_num_buckets": 32}, "AK508"),
    ({"model_type": "bloom", "n_head": 32, "n_layer": 30, "hidden_size": 4096}, "AK509"),
    ({"model_type": "mpt", "n_heads": 32, "n_layers": 32, "d_model": 4096,
      "attn_config": {"alibi": True}}, "AK509"),
    ({"model_type": "falcon", "num_attention_heads": 71, "num_hidden_layers": 32,
      "hidden_size": 4544, "alibi": True}, "AK509"),
    ({"model_type": "baichuan", "architectures": ["BaichuanForCausalLM"], "hidden_size": 5120,
      "num_attention_heads": 40, "num_hidden_layers": 40}, "AK509"),
])
def test_unservable_architectures(cfg, code):
    err = _err(cfg)
    assert err.code == code
    assert cfg["model_type"] in err.message


def test_rotary_falcon_and_baichuan_7b_parse():
    falcon = load_model({"model_type": "falcon", "num_attention_heads": 71, "num_hidden_layers": 32,
                         "hidden_size": 4544, "alibi": False, "multi_query": True})
    assert falcon.layers[0].num_kv_heads == 1 and falcon.layers[0].head_dim == 64
    baichuan = load_model({"model_type": "baichuan", "hidden_size": 4096,
                           "num_attention_heads": 32, "num_hidden_layers": 32})
    assert len(baichuan.layers) == 32


def test_unknown_model_lists_the_fields_looked_for():
    err = _err({"model_type": "mystery", "vocab_size": 10})
    assert err.code == "AK510"
    for name in ("num_attention_heads", "num_hidden_layers", "kv_lora_rank", "encoder_layers"):
        assert name in err.message


def test_not_json_names_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",}')
    err = _err(tmp_path)
    assert err.code == "AK501" and str(path) in err.message and "line 1" in err.message


def test_json_list_is_rejected(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps([BASE]))
    err = _err(path)
    assert err.code == "AK502" and str(path) in err.message


def test_field_errors_name_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_with(num_key_value_heads=0)))
    err = _err(str(path))
    assert err.code == "AK505" and str(path) in err.message and err.details["source"] == str(path)


def test_missing_paths(tmp_path):
    assert _err(tmp_path).code == "AK500"                        # directory without config.json
    assert _err(tmp_path / "nope" / "config.json").code == "AK500"
    assert _err("./no-such-model").code == "AK500"


def test_unknown_preset_did_you_mean():
    err = _err("lama-3.1-8b")
    assert err.code == "AK507" and "llama-3.1-8b" in err.details["did_you_mean"]
    assert "deepseek-v3" in err.message   # the list of presets


def test_wrong_source_type():
    assert _err(42).code == "AK511"
    assert _err([BASE]).code == "AK511"


def test_nested_text_config_errors_carry_the_prefix():
    err = _err({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
                "num_attention_heads": 16, "num_hidden_layers": "48"}})
    assert (err.code, err.field) == ("AK504", "text_config.num_hidden_layers")
    assert _err({"model_type": "x", "text_config": "nope"}).field == "text_config"


def test_to_dict_is_jsonable():
    err = _err(_with(num_attention_heads=True))
    json.dumps(err.to_dict())


def test_every_code_raised_in_model_and_hardware_is_catalogued():
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src" / "attnkit"
    files = [*(src / "model").glob("*.py"), *(src / "hardware").glob("*.py")]
    codes = {c for f in files for c in re.findall(r'"(AK\d{3})"', f.read_text())}
    assert codes and codes <= set(CATALOG), sorted(codes - set(CATALOG))
    assert all("AK500" <= c <= "AK599" or "AK200" <= c <= "AK299" for c in codes)   # AK212: require_package


def test_unknown_hub_repo_id_says_no_download():
    err = _err("some-org/some-model")
    assert err.code == "AK500" and "does not download" in err.message


@pytest.mark.parametrize("preset", ["deepseek-v3", "deepseek-v2-lite", "kimi-k2", "deepseek-v3.2"])
@pytest.mark.parametrize("value", [None, _DROP])
def test_an_mla_family_without_kv_lora_rank_is_refused_not_planned_as_mha(preset, value):
    """Without kv_lora_rank an MLA family's config was planned as 128-head MHA (head_dim
    hidden / heads): a confident wrong plan. transformers cannot build such a model either."""
    from attnkit.model.presets import preset_config
    cfg = dict(preset_config(preset))
    if value is _DROP:
        cfg.pop("kv_lora_rank")
    else:
        cfg["kv_lora_rank"] = value
    err = _err(cfg)
    assert (err.code, err.field) == ("AK503", "kv_lora_rank"), err


@pytest.mark.parametrize("cfg, wrong", [
    (_with(layer_types=["full_attention"] * 3), "num_key_value_heads"),
    ({"model_type": "nemotron_h", "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512,
      "num_hidden_layers": 6, "hybrid_override_pattern": "M*"}, "num_key_value_heads"),
    ({"model_type": "nemotron_h", "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512,
      "num_hidden_layers": 4, "hybrid_override_pattern": "M-M-"}, "num_attention_heads, num_hidden_layers"),
])
def test_the_fixes_offered_fit_the_error(cfg, wrong):
    """A layer list of the wrong length was offered the catalog's head-count fixes first, and a
    hybrid without one attention layer was told to add num_attention_heads."""
    err = _err(cfg)
    text = " ".join(err.solutions)
    assert err.solutions and wrong not in text, err.solutions


@pytest.mark.parametrize("cfg", [
    {"model_type": "xlm-roberta", "num_attention_heads": 4, "num_hidden_layers": 4, "hidden_size": 256,
     "sliding_window": 8, "use_sliding_window": True},
    {"model_type": "roberta", "num_attention_heads": 4, "num_hidden_layers": 4, "hidden_size": 256,
     "sliding_window": 8, "use_sliding_window": True, "max_window_layers": 2},
])
def test_an_encoder_turned_sliding_by_use_sliding_window_is_refused(cfg):
    """Found by the structural fuzz: StopIteration (the refusal looked for the key that made the
    layers slide among four others, not use_sliding_window)."""
    err = _err(cfg)
    assert err.code == "AK513" and err.field in ("use_sliding_window", "sliding_window"), err


def test_bidirectional_chunked_layers_are_refused():
    """Planned as chunked_local + non_causal, which the runtime refuses (a chunked layer is a
    decoder layer: validation's AK419): plan and runtime disagreed."""
    from attnkit.model.presets import preset_config
    cfg = preset_config("llama-4-scout")
    cfg["text_config"] = {**cfg["text_config"], "use_bidirectional_attention": True}
    err = _err(cfg)
    assert (err.code, err.field) == ("AK513", "text_config.use_bidirectional_attention"), err


@pytest.mark.parametrize("key, value", [("is_causal", 0), ("is_causal", "false"), ("use_sliding_window", 1),
                                        ("use_bidirectional_attention", "yes"), ("alibi", 1),
                                        ("use_qk_norm", [])])
def test_a_switch_that_is_not_true_or_false_is_a_type_error(key, value):
    """The key table matches switches by value and type (true, false), but model code tests
    them by truthiness: is_causal: 0 turns the causal mask off there and was planned causal."""
    err = _err(_with(**{key: value}, sliding_window=8))
    assert (err.code, err.field) == ("AK504", key), err

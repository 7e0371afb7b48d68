"""The 2026 families parse into what their transformers code computes, or are refused by name.

Expected layer ids are written out from each family's own rule (transformers' config classes),
not computed by attnkit's code.
"""
import math

import pytest

from attnkit.errors import AttnkitError
from attnkit.model import load_model
from attnkit.model.spec import SparseTopK

MHA = {"num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512, "num_hidden_layers": 8}


def _refused(cfg) -> AttnkitError:
    with pytest.raises(AttnkitError) as info:
        load_model(cfg)
    return info.value


def _other(m, kind):
    return [i for i, k in m.other_layers if k == kind]


def test_deepseek_v32_every_layer_is_sparse_with_the_indexer_sizes():
    m = load_model("deepseek-v3.2")
    assert m.kind == "mla" and len(m.layers) == 61 and m.features() == {"sparse_topk"}
    assert {l.sparse_topk for l in m.layers} == {SparseTopK(topk=2048, index_n_heads=64, index_head_dim=128)}
    # the YaRN softmax scale of DeepSeek-V3 still applies: (128 + 64)**-0.5 * (0.1 * ln 40 + 1)**2
    assert m.layers[0].softmax_scale == pytest.approx(192 ** -0.5 * (0.1 * math.log(40) + 1) ** 2)


def test_glm5_defaults_and_indexer_sharing_note():
    m = load_model({"model_type": "glm_moe_dsa", "num_attention_heads": 64, "num_hidden_layers": 4,
                    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 192, "v_head_dim": 256,
                    "indexer_types": ["full", "shared", "shared", "full"]})
    assert {l.sparse_topk for l in m.layers} == {SparseTopK(2048, 32, 128)}   # transformers' GLM-5 defaults
    assert any("indexer_types" in n for n in m.notes)


def test_dsa_layer_types_pick_the_sparse_layers():
    cfg = {"model_type": "deepseek_v32", "num_attention_heads": 4, "num_hidden_layers": 3, "kv_lora_rank": 32,
           "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
           "layer_types": ["full_attention", "indexed_attention", "deepseek_sparse_attention"]}
    assert [l.sparse_topk is not None for l in load_model(cfg).layers] == [False, True, True]


def test_llama4_scout_chunks_the_rope_layers():
    m = load_model("llama-4-scout")
    chunked = [l.layer_id for l in m.layers if l.attention_chunk == 8192]
    nope = [l.layer_id for l in m.layers if l.attention_chunk is None]
    assert nope == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47]      # every 4th layer: NoPE, global
    assert len(chunked) == 36 and not set(chunked) & set(nope)
    assert {(l.num_heads, l.num_kv_heads, l.head_dim) for l in m.layers} == {(40, 8, 128)}
    assert m.features() == {"chunked_local"}
    notes = " ".join(m.notes)
    assert "attn_temperature_tuning" in notes and "use_qk_norm" in notes   # outside the kernel, recorded


def test_llama4_explicit_lists():
    base = {"model_type": "llama4", "text_config": {"model_type": "llama4_text", **MHA, "num_hidden_layers": 4,
                                                    "attention_chunk_size": 32}}
    rope = load_model({**base, "text_config": {**base["text_config"], "no_rope_layers": [1, 0, 0, 1]}})
    assert [l.attention_chunk for l in rope.layers] == [32, None, None, 32]
    typed = load_model({**base, "text_config": {**base["text_config"], "layer_types":
                                                ["full_attention", "chunked_attention"] * 2}})
    assert [l.attention_chunk for l in typed.layers] == [None, 32, None, 32]
    off = load_model({**base, "text_config": {**base["text_config"], "attention_chunk_size": None}})
    assert all(l.attention_chunk is None for l in off.layers)


def test_qwen3_next_attends_every_fourth_layer():
    m = load_model("qwen3-next-80b-a3b")
    assert m.attention_layer_ids == tuple(range(3, 48, 4))
    assert _other(m, "linear_attention") == [i for i in range(48) if i % 4 != 3]
    assert {(l.num_heads, l.num_kv_heads, l.head_dim) for l in m.layers} == {(16, 2, 256)}
    assert any("attn_output_gate" in n for n in m.notes)


def test_qwen35_wrapper_uses_text_config_layer_types():
    m = load_model({"model_type": "qwen3_5", "text_config": {
        "model_type": "qwen3_5_text", **MHA, "num_hidden_layers": 4,
        "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"]}})
    assert m.attention_layer_ids == (1, 3) and _other(m, "linear_attention") == [0, 2]


def test_nemotron_h_plans_only_the_star_layers():
    m = load_model("nemotron-nano-9b-v2")
    assert m.attention_layer_ids == (14, 21, 30, 39)
    assert len(_other(m, "mamba")) == 27 and len(_other(m, "mlp")) == 25
    m2 = load_model({"model_type": "nemotron_h", **MHA, "num_hidden_layers": None, "head_dim": 64,
                     "layers_block_type": ["moe", "full_attention", "linear_attention", "mlp"]})
    assert m2.attention_layer_ids == (1,) and m2.other_layers == ((0, "moe"), (2, "mamba"), (3, "mlp"))


def test_nemotron_pattern_errors_are_named():
    assert _refused({"model_type": "nemotron_h", **MHA, "hybrid_override_pattern": "M*X*M*M*"}).code == "AK512"
    err = _refused({"model_type": "nemotron_h", **MHA, "hybrid_override_pattern": "M*"})
    assert err.code == "AK506" and "num_hidden_layers" in err.message


def test_jamba_period_and_offset():
    m = load_model({"model_type": "jamba", **MHA, "num_hidden_layers": 32})   # transformers' 8 / 4
    assert m.attention_layer_ids == (4, 12, 20, 28) and len(_other(m, "mamba")) == 28


def test_bamba_and_granite_hybrids():
    bamba = load_model({"model_type": "bamba", **MHA, "attn_layer_indices": [2, 5]})
    assert bamba.attention_layer_ids == (2, 5) and len(_other(bamba, "mamba")) == 6
    granite = load_model({"model_type": "granitemoehybrid", **MHA, "layer_types": ["mamba", "attention"] * 4})
    assert granite.attention_layer_ids == (1, 3, 5, 7) and _other(granite, "mamba") == [0, 2, 4, 6]


def test_falcon_h1_attends_and_runs_mamba_in_every_layer():
    m = load_model({"model_type": "falcon_h1", **MHA})
    assert m.attention_layer_ids == tuple(range(8)) and _other(m, "mamba") == list(range(8))
    assert any("beside its attention" in n for n in m.notes)


def test_encoders_are_non_causal_and_prefill_only():
    m = load_model("bge-m3")
    assert {l.role for l in m.layers} == {"encoder"} and m.phases == ("prefill",)
    assert m.dtype == "fp32" and len(m.layers) == 24 and m.layers[0].head_dim == 64
    for family in ("bert", "roberta", "xlm-roberta", "electra"):
        assert load_model({"model_type": family, **MHA}).phases == ("prefill",)


def test_modernbert_global_only_is_served_local_layers_refused():
    base = {"model_type": "modernbert", "num_attention_heads": 12, "hidden_size": 768, "num_hidden_layers": 22}
    err = _refused(base)                                   # transformers' default: every 3rd layer global
    assert err.code == "AK513" and err.field == "global_attn_every_n_layers" and "two-sided" in err.message
    assert load_model({**base, "global_attn_every_n_layers": 1}).phases == ("prefill",)


@pytest.mark.parametrize("cfg, code, key", [
    ({"model_type": "bert", **MHA, "position_embedding_type": "relative_key_query"}, "AK513",
     "position_embedding_type"),
    ({"model_type": "bert", **MHA, "is_decoder": True}, "AK513", "is_decoder"),
    ({"model_type": "deberta-v2", **MHA}, "AK508", "model_type"),
    ({"model_type": "mpnet", **MHA, "relative_attention_num_buckets": 32}, "AK508", "relative_attention_num_buckets"),
    ({"model_type": "newbert", "architectures": ["NewBertForMaskedLM"], **MHA}, "AK513", "architectures"),
    ({"model_type": "minimax", **MHA, "attn_type_list": [0, 1] * 4}, "AK513", "attn_type_list"),
])
def test_refused_encoders_and_attention_kinds(cfg, code, key):
    err = _refused(cfg)
    assert (err.code, err.field) == (code, key), err


@pytest.mark.parametrize("torch_dtype, expected", [
    ("bfloat16", "bf16"), ("float16", "fp16"), ("float32", "fp32"), ("float64", "fp64"),
    ("torch.float64", "fp64"), ("int8", "int8"), (None, None)])
def test_config_dtype_is_reported_as_written(torch_dtype, expected):
    cfg = {"model_type": "llama", **MHA} | ({"torch_dtype": torch_dtype} if torch_dtype else {})
    assert load_model(cfg).dtype == expected


def test_mha_value_head_dim():
    m = load_model({"model_type": "mimo_v2_flash", **MHA, "head_dim": 192, "v_head_dim": 128})
    assert {(l.head_dim, l.value_dim) for l in m.layers} == {(192, 128)}
    assert load_model({"model_type": "llama", **MHA, "v_head_dim": 64}).layers[0].v_head_dim is None  # = head_dim


def test_an_unknown_model_type_plans_with_a_note():
    """Issue 25: an unknown model_type planned with no note; it says it was read generically."""
    m = load_model({"model_type": "mystery", **MHA})
    assert any("'mystery' is not a family attnkit knows" in n for n in m.notes)
    assert not any("not a family" in n for n in load_model({"model_type": "llama", **MHA}).notes)

"""Every model preset parses into the layer structure of the real model."""
import json
import math

import pytest

from attnkit.model import load_model, preset_config, preset_names
from attnkit.model.spec import ModelAttention

REQUIRED_PRESETS = {
    "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-7b-instruct-1m", "mistral-7b-v0.1",
    "phi-3-mini", "gemma-2-9b", "gemma-3-12b", "gpt-oss-20b", "deepseek-v2-lite", "deepseek-v3",
    "kimi-k2", "whisper-large-v3", "deepseek-v3.2", "llama-4-scout", "qwen3-next-80b-a3b",
    "nemotron-nano-9b-v2", "bge-m3", "gemma-3-27b", "gpt-oss-120b",
}

# name -> (layers, heads, kv_heads, head_dim, sliding layers, window, global layers)
MHA = {
    "llama-3.1-8b": (32, 32, 8, 128, 0, None, 32),
    "llama-3.1-70b": (80, 64, 8, 128, 0, None, 80),
    "qwen2.5-7b": (28, 28, 4, 128, 0, None, 28),
    "qwen2.5-7b-instruct-1m": (28, 28, 4, 128, 0, None, 28),
    "mistral-7b-v0.1": (32, 32, 8, 128, 32, 4096, 0),
    "phi-3-mini": (32, 32, 32, 96, 32, 2047, 0),
    "gemma-2-9b": (42, 16, 8, 256, 21, 4096, 21),
    "gemma-3-12b": (48, 16, 8, 256, 40, 1024, 8),
    "gpt-oss-20b": (24, 64, 8, 64, 12, 128, 12),
    "qwen3-8b": (36, 32, 8, 128, 0, None, 36),
    "qwen3-4b": (36, 32, 8, 128, 0, None, 36),   # head_dim 128 given, though 2560 / 32 = 80
    "gemma-3-27b": (62, 32, 16, 128, 52, 1024, 10),
    "gpt-oss-120b": (36, 64, 8, 64, 18, 128, 18),
}


def test_all_required_presets_ship():
    assert REQUIRED_PRESETS <= set(preset_names())


@pytest.mark.parametrize("name", preset_names())
def test_preset_names_its_source(name):
    cfg = preset_config(name)
    assert cfg["_source"].endswith("config.json") and "/" in cfg["_source"]
    m = load_model(name)
    assert isinstance(m, ModelAttention) and m.name == name
    assert cfg["_source"] in m.source
    # attention layers and the layers that run something else number the model's layers 0..N-1
    ids = [l.layer_id for l in m.layers] + [i for i, _ in m.other_layers if i not in m.attention_layer_ids]
    assert sorted(ids) == list(range(len(ids))) and ids[:len(m.layers)] == sorted(ids[:len(m.layers)])


@pytest.mark.parametrize("name", sorted(MHA))
def test_mha_layer_structure(name):
    n, heads, kv, dim, n_sliding, window, n_global = MHA[name]
    m = load_model(name)
    assert m.kind == "mha" and len(m.layers) == n
    assert {(l.num_heads, l.num_kv_heads, l.head_dim, l.role) for l in m.layers} == {(heads, kv, dim, "decoder")}
    sliding = [l for l in m.layers if l.sliding_window is not None]
    assert len(sliding) == n_sliding and len(m.layers) - len(sliding) == n_global
    assert {l.sliding_window for l in sliding} <= {window}


def test_gemma2_softcap_scale_and_alternation():
    m = load_model("gemma-2-9b")
    assert [l.sliding_window for l in m.layers[:4]] == [4096, None, 4096, None]
    assert all(l.logit_softcap == 50.0 for l in m.layers)
    assert all(l.softmax_scale == pytest.approx(256 ** -0.5) for l in m.layers)
    assert m.features() == {"sliding_window", "logit_softcap"}


def test_gemma3_five_local_one_global_from_defaults():
    m = load_model("gemma-3-12b")
    globals_ = [l.layer_id for l in m.layers if l.sliding_window is None]
    assert globals_ == [5, 11, 17, 23, 29, 35, 41, 47]
    assert m.layers[0].softmax_scale == pytest.approx(1 / 16)
    assert any("head_dim" in note for note in m.notes)   # filled from transformers' default
    assert m.max_position_embeddings == 131072


def test_gpt_oss_sinks_and_alternating_window():
    m = load_model("gpt-oss-20b")
    assert all(l.sinks for l in m.layers)
    assert [l.sliding_window for l in m.layers[:4]] == [128, None, 128, None]
    assert m.features() == {"sliding_window", "sinks"}


def test_qwen_1m_dual_chunk_on_every_layer():
    m = load_model("qwen2.5-7b-instruct-1m")
    dcs = {l.dual_chunk for l in m.layers}
    assert len(dcs) == 1
    (dc,) = dcs
    assert (dc.chunk_size, dc.local_size, dc.original_max_position_embeddings) == (262144, 8192, 262144)
    assert dc.chunk_len == 253952
    assert m.max_position_embeddings == 1010000
    assert load_model("qwen2.5-7b").features() == frozenset()


# name -> (layers, heads, q_lora_rank, yarn factor, mscale_all_dim)
MLA = {
    "deepseek-v2-lite": (27, 16, None, 40, 0.707),
    "deepseek-v3": (61, 128, 1536, 40, 1.0),
    "kimi-k2": (61, 64, 1536, 32, 1.0),
}


@pytest.mark.parametrize("name", sorted(MLA))
def test_mla_dims_and_yarn_scale(name):
    n, heads, q_lora, factor, mscale_all_dim = MLA[name]
    m = load_model(name)
    assert m.kind == "mla" and len(m.layers) == n
    layer = m.layers[0]
    assert (layer.num_heads, layer.num_kv_heads, layer.head_dim, layer.value_dim) == (heads, 1, 192, 128)
    mla = layer.mla
    assert (mla.kv_lora_rank, mla.qk_rope_head_dim, mla.qk_nope_head_dim, mla.v_head_dim) == (512, 64, 128, 128)
    assert mla.q_lora_rank == q_lora and mla.latent_dim == 576
    mscale = 0.1 * mscale_all_dim * math.log(factor) + 1.0
    assert layer.softmax_scale == pytest.approx(192 ** -0.5 * mscale ** 2)


def test_whisper_roles_and_ids():
    m = load_model("whisper-large-v3")
    roles = [l.role for l in m.layers]
    assert roles.count("encoder") == 32 and roles.count("decoder") == 32 and roles.count("cross") == 32
    assert roles[:32] == ["encoder"] * 32 and roles[32:36] == ["decoder", "cross", "decoder", "cross"]
    assert len({l.layer_id for l in m.layers}) == 96
    assert {(l.num_heads, l.num_kv_heads, l.head_dim) for l in m.layers} == {(20, 20, 64)}
    assert m.features() == {"cross_attention", "non_causal"} and m.dtype == "fp16"


def test_preset_loads_from_a_directory_and_a_file(tmp_path):
    cfg = {k: v for k, v in preset_config("gpt-oss-20b").items() if not k.startswith("_")}
    (tmp_path / "gpt-oss-20b").mkdir()
    (tmp_path / "gpt-oss-20b" / "config.json").write_text(json.dumps(cfg))
    from_dir = load_model(tmp_path / "gpt-oss-20b")
    from_file = load_model(str(tmp_path / "gpt-oss-20b" / "config.json"))
    from_dict = load_model(cfg, name="gpt-oss-20b")
    assert from_dir.name == from_file.name == "gpt-oss-20b"
    assert from_dir.layers == from_file.layers == from_dict.layers == load_model("gpt-oss-20b").layers


def test_model_attention_passes_through_and_case_insensitive_names():
    m = load_model("Llama-3.1-8B")
    assert load_model(m) is m
    assert load_model(m, name="x").name == "x"


def test_hub_repo_id_of_a_preset_uses_the_stored_config():
    m = load_model("deepseek-ai/DeepSeek-V3")
    assert m.name == "deepseek-v3" and m.layers == load_model("deepseek-v3").layers
    assert any("not a local path" in note for note in m.notes)

"""Per-family window, scale and layout rules on small hand-written configs."""
import pytest

from attnkit.errors import AttnkitError
from attnkit.model import load_model


def _llama(**extra):
    return {"num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512,
            "num_hidden_layers": 6, **extra}


def _windows(cfg):
    return [l.sliding_window for l in load_model(cfg).layers]


def test_qwen2_window_starts_at_max_window_layers():
    cfg = _llama(model_type="qwen2", use_sliding_window=True, sliding_window=64, max_window_layers=4)
    assert _windows(cfg) == [None] * 4 + [64] * 2
    assert _windows({**cfg, "use_sliding_window": False}) == [None] * 6


def test_mistral_null_window_means_full_attention():
    assert _windows(_llama(model_type="mistral", sliding_window=None)) == [None] * 6
    assert _windows(_llama(model_type="mistral", sliding_window=16)) == [16] * 6


def test_llama_ignores_a_stray_window():
    assert _windows(_llama(model_type="llama", sliding_window=16)) == [None] * 6


def test_layer_types_win_over_the_pattern():
    types = ["full_attention", "sliding_attention"] * 3
    cfg = _llama(model_type="gemma3_text", sliding_window=8, sliding_window_pattern=6, layer_types=types)
    assert _windows(cfg) == [None, 8] * 3


def test_gemma3_pattern_without_layer_types():
    cfg = _llama(model_type="gemma3_text", sliding_window=8, sliding_window_pattern=3)
    assert _windows(cfg) == [8, 8, None, 8, 8, None]


def test_head_dim_from_config_beats_hidden_over_heads():
    m = load_model(_llama(head_dim=80))
    assert m.layers[0].head_dim == 80 and m.layers[0].softmax_scale == pytest.approx(80 ** -0.5)


def test_transformers5_names_dtype_and_rope_parameters():
    cfg = {"model_type": "deepseek_v3", "num_attention_heads": 4, "num_hidden_layers": 2,
           "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 16,
           "dtype": "float16", "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "mscale_all_dim": 1.0}}
    m = load_model(cfg)
    assert m.dtype == "fp16"
    mscale = 0.1 * 1.0 * __import__("math").log(4.0) + 1
    assert m.layers[0].softmax_scale == pytest.approx(48 ** -0.5 * mscale ** 2)
    # mscale_all_dim 0 (or factor 1) leaves the plain scale.
    cfg["rope_parameters"] = {"factor": 4.0, "mscale_all_dim": 0}
    assert load_model(cfg).layers[0].softmax_scale == pytest.approx(48 ** -0.5)


def test_gpt2_style_aliases():
    m = load_model({"model_type": "gpt2", "n_head": 12, "n_layer": 12, "n_embd": 768})
    assert (len(m.layers), m.layers[0].num_heads, m.layers[0].num_kv_heads, m.layers[0].head_dim) == (12, 12, 12, 64)


def test_bidirectional_decoder_is_non_causal():
    m = load_model(_llama(model_type="gemma3_text", use_bidirectional_attention=True,
                          sliding_window=8, sliding_window_pattern=1))
    assert {l.role for l in m.layers} == {"encoder"} and "non_causal" in m.features()


def test_bidirectional_sliding_layers_are_refused():
    """EmbeddingGemma's local layers see |p - k| < window // 2 both ways; attnkit's windows are
    one-sided, so planning them as non_causal + sliding_window would be wrong (it was)."""
    with pytest.raises(AttnkitError) as info:
        load_model(_llama(model_type="gemma3_text", use_bidirectional_attention=True,
                          sliding_window=8, sliding_window_pattern=6))
    assert info.value.code == "AK513" and info.value.field == "use_bidirectional_attention"
    assert "two-sided" in info.value.message

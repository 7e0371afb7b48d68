"""load_model on random dicts: a ModelAttention or an AttnkitError with a catalogued code."""
from hypothesis import HealthCheck, given, settings, strategies as st

from attnkit.errors import CATALOG, AttnkitError
from attnkit.model import load_model
from attnkit.model.spec import ModelAttention

KEYS = ["model_type", "num_attention_heads", "num_key_value_heads", "hidden_size", "head_dim",
        "num_hidden_layers", "sliding_window", "use_sliding_window", "max_window_layers",
        "layer_types", "sliding_window_pattern", "query_pre_attn_scalar", "attn_logit_softcapping",
        "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "q_lora_rank",
        "rope_scaling", "dual_chunk_attention_config", "encoder_layers", "decoder_layers",
        "encoder_attention_heads", "decoder_attention_heads", "d_model", "text_config",
        "torch_dtype", "architectures", "alibi", "multi_query", "n_head", "n_layer"]
MODEL_TYPES = ["llama", "qwen2", "mistral", "gemma2", "gemma3_text", "gpt_oss", "deepseek_v3",
               "whisper", "t5", "bloom", "baichuan", "falcon", "mystery"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-4, 70), st.sampled_from([0.0, -1.5, 2.5, 64.0]),
                    st.sampled_from(MODEL_TYPES), st.text(max_size=4))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(st.one_of(inner, st.sampled_from(["full_attention", "sliding_attention"])), max_size=6),
        st.dictionaries(st.sampled_from(KEYS + ["chunk_size", "local_size", "factor", "mscale_all_dim"]),
                        inner, max_size=6)),
    max_leaves=12)
configs = st.dictionaries(st.sampled_from(KEYS), values, max_size=14)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs)
def test_random_configs_never_crash(cfg):
    try:
        m = load_model(cfg)
    except AttnkitError as err:
        assert err.code in CATALOG and err.code.startswith("AK5")
    else:
        assert isinstance(m, ModelAttention)
        for layer in m.layers:
            assert layer.num_heads % layer.num_kv_heads == 0 and layer.head_dim >= 1

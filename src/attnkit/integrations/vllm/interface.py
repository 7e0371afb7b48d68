"""What attnkit's vLLM plugin uses of vLLM (classes, method signatures, fields), as data.

``check()`` lists every difference with the installed vLLM, each naming the class and vLLM's
version; the interface-guard test (tests/engines/test_vllm_interface.py) fails on any.
"""
from __future__ import annotations

from attnkit.integrations.interface import Expected, dataclass_fields, problems

_BACKEND = "vllm.v1.attention.backend"
EXPECTED = [
    Expected("vllm.v1.attention.backends.registry:register_backend",
             params={"": ("backend", "class_path")}),
    Expected("vllm.v1.attention.backends.registry:AttentionBackendEnum",
             attrs=("CPU_ATTN", "CPU_MLA", "CUSTOM", "get_path")),
    Expected("vllm.platforms.cpu:CpuPlatform",
             params={"get_attn_backend_cls": ("selected_backend", "attn_selector_config")}),
    Expected(f"{_BACKEND}:AttentionBackend",
             attrs=("forward_includes_kv_cache_update", "supported_dtypes",
                    "supported_kv_cache_dtypes", "get_name", "get_impl_cls", "get_builder_cls",
                    "supported_kv_cache_layouts", "supports_sink", "supports_sliding_window",
                    "is_mla")),
    Expected(f"{_BACKEND}:AttentionImpl",
             params={"__init__": ("num_heads", "head_size", "scale", "num_kv_heads",
                                  "alibi_slopes", "sliding_window", "kv_cache_dtype",
                                  "logits_soft_cap", "attn_type", "kv_sharing_target_layer_name"),
                     "forward": ("layer", "query", "key", "value", "kv_cache", "attn_metadata",
                                 "output", "output_scale", "output_block_scale")}),
    # CPU_ATTN's impl takes the sinks the plugin's impl takes too
    Expected("vllm.v1.attention.backends.cpu_attn:CPUAttentionBackendImpl",
             params={"__init__": ("sinks",)}),
    Expected(f"{_BACKEND}:AttentionMetadataBuilder",
             params={"__init__": ("kv_cache_spec", "layer_names", "vllm_config", "device"),
                     "build": ("common_prefix_len", "common_attn_metadata", "fast_build")}),
    Expected(f"{_BACKEND}:CommonAttentionMetadata",
             attrs=("query_start_loc_cpu", "seq_lens", "block_table_tensor", "num_reqs",
                    "num_actual_tokens", "causal")),
    Expected(f"{_BACKEND}:AttentionType", attrs=("DECODER",)),
    Expected("vllm.v1.kv_cache_interface:KVCacheLayout", attrs=("LBNHC",)),
    Expected("vllm.model_executor.models.utils:extract_layer_index", params={"": ("layer_name",)}),
    Expected("vllm.config:get_current_vllm_config"),
    Expected("vllm.logger:init_logger"),
]


def version() -> str:
    import vllm

    return getattr(vllm, "__version__", "unknown")


def check() -> list[str]:
    """Every difference between the installed vLLM and what the plugin uses."""
    return problems("vLLM", version(), EXPECTED, fields=dataclass_fields)

"""What attnkit's SGLang plugin uses of SGLang (classes, method signatures, fields), as data.

``check()`` lists every difference with the installed SGLang, each naming the class and
SGLang's version; the interface-guard test (tests/engines/test_sglang_interface.py) fails on any.
"""
from __future__ import annotations

from attnkit.integrations.interface import Expected, dataclass_fields, problems

_SRT = "sglang.srt"
EXPECTED = [
    Expected(f"{_SRT}.layers.attention.attention_registry:register_attention_backend",
             params={"": ("name",)}),
    Expected(f"{_SRT}.layers.attention.attention_registry:ATTENTION_BACKENDS"),
    Expected(f"{_SRT}.arg_groups.choices:add_attention_backend_choices"),
    Expected(f"{_SRT}.arg_groups.choices:ATTENTION_BACKEND_CHOICES"),
    Expected(f"{_SRT}.layers.attention.base_attn_backend:AttentionBackend",
             params={"init_forward_metadata": ("forward_batch",),
                     "forward": ("q", "k", "v", "layer", "forward_batch", "save_kv_cache"),
                     "forward_extend": ("q", "k", "v", "layer", "forward_batch", "save_kv_cache"),
                     "forward_decode": ("q", "k", "v", "layer", "forward_batch", "save_kv_cache")}),
    Expected(f"{_SRT}.layers.radix_attention:RadixAttention",
             params={"__init__": ("num_heads", "head_dim", "scaling", "num_kv_heads", "layer_id",
                                  "logit_cap", "sliding_window_size")}),
    Expected(f"{_SRT}.model_executor.forward_batch_info:ForwardBatch",
             attrs=("forward_mode", "req_pool_indices", "seq_lens", "extend_seq_lens_cpu")),
    Expected(f"{_SRT}.model_executor.forward_batch_info:ForwardMode",
             attrs=("EXTEND", "DECODE", "IDLE", "is_decode", "is_extend", "is_idle")),
    Expected(f"{_SRT}.mem_cache.memory_pool:MHATokenToKVPool",
             attrs=("get_key_buffer", "get_value_buffer")),
    Expected(f"{_SRT}.mem_cache.memory_pool:ReqToTokenPool"),
    Expected(f"{_SRT}.runtime_context:get_parallel"),
]


def version() -> str:
    from importlib.metadata import version as installed

    return installed("sglang")


def check() -> list[str]:
    """Every difference between the installed SGLang and what the plugin uses."""
    return problems("SGLang", version(), EXPECTED, fields=dataclass_fields)

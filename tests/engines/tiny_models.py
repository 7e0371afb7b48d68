"""Tiny random-weight models for the engine tiers, built with transformers and saved to a
directory (no hub access): one per attention family the engines' CPU paths run."""
from __future__ import annotations

from pathlib import Path

COMMON = dict(vocab_size=256, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
              max_position_embeddings=512, head_dim=32, tie_word_embeddings=False)

# name -> (transformers config class name, config keyword arguments)
FAMILIES = {
    "llama-gqa": ("LlamaConfig", dict(num_attention_heads=4, num_key_value_heads=2)),
    "llama-mqa": ("LlamaConfig", dict(num_attention_heads=4, num_key_value_heads=1)),
    "mistral-window": ("MistralConfig", dict(num_attention_heads=4, num_key_value_heads=2,
                                             sliding_window=12)),
    "gemma2-softcap": ("Gemma2Config", dict(num_attention_heads=4, num_key_value_heads=2,
                                            sliding_window=12, attn_logit_softcapping=20.0,
                                            final_logit_softcapping=30.0,
                                            query_pre_attn_scalar=24,
                                            tie_word_embeddings=True)),   # vLLM's Gemma2 ties them
}

# Families the plugins refuse (at the engine's start-up): MLA.
REFUSED = {
    "deepseek-mla": ("DeepseekV2Config", dict(num_attention_heads=4, num_key_value_heads=4,
                                              q_lora_rank=None, kv_lora_rank=64,
                                              qk_nope_head_dim=32, qk_rope_head_dim=32,
                                              v_head_dim=32, first_k_dense_replace=2,
                                              n_routed_experts=4, num_experts_per_tok=2)),
}


def build(family: str, directory: Path, *, seed: int = 0, **overrides) -> Path:
    """Save the family's tiny model (float32, seeded weights) under ``directory``; returns it."""
    import torch
    import transformers

    cls_name, kwargs = {**FAMILIES, **REFUSED}[family]
    config = getattr(transformers, cls_name)(**{**COMMON, **kwargs, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():               # larger weights than the init's: sharper, distinct logits
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.08)
    directory = Path(directory)
    model.save_pretrained(directory)
    return directory

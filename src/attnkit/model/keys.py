"""Model it or refuse it, as data: the config keys that change what attention computes.

Each ``KeyRule`` says, for the model families (``model_type``) it names, what one config key
does to attention (masks, which layers attend, sparsity, positions, scale) and what attnkit
does with it:

- ``modelled``: the parser reads it into the spec (``how`` names the field);
- ``refused``: parsing stops with ``code`` (AK513 unless said), naming the key, its value and
  what attnkit would need (``how``);
- ``outside``: it acts outside the attention kernel (q/k norms, query temperature, output
  gates); the parser records a model note;
- ``unused``: the family's attention does not read it (``how`` says why), so it changes nothing.

A rule applies to a value in ``values`` (when given), else to any value not in ``inactive``.
``families`` ``("*",)`` covers every family without a rule of its own. ``example`` is a config
fragment that activates the rule; tests/model/test_model_keys.py walks the whole table with it.

After parsing, ``check_keys`` refuses every key some rule knows that the family's parse did not
read and no rule of the family covers: an attention key is never silently ignored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

STATUSES = ("modelled", "refused", "outside", "unused")
QWEN_WINDOW = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
ALL_LAYER_WINDOW = ("mistral", "mixtral", "phi3", "starcoder2")
QWEN_HYBRID = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
MAMBA_HYBRID = ("nemotron_h", "jamba", "bamba", "granitemoehybrid", "falcon_h1")
DSA = ("deepseek_v32", "glm_moe_dsa")
YARN_MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2") + DSA
ENCODERS = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "modernbert")
NO_WINDOW = ("llama", "llama4_text", "nemotron_h", "jamba", "bamba", "falcon_h1") + QWEN_HYBRID + ENCODERS


@dataclass(frozen=True)
class KeyRule:
    key: str
    families: tuple[str, ...]
    status: str
    what: str
    how: str
    example: Mapping[str, Any] = field(default_factory=dict)
    inactive: tuple = (None,)
    values: tuple | None = None
    code: str = "AK513"

    def applies(self, value: Any) -> bool:
        if self.values is not None:
            return _isin(value, self.values)
        return not _isin(value, self.inactive)


def _isin(value: Any, options: tuple) -> bool:
    # 1 == True in Python, but a config's true is not its 1 (1 and 1.0 are listed separately)
    return any(type(value) is type(o) and value == o for o in options)


def _rule(key, families, status, what, how, example=None, **kw) -> KeyRule:
    families = (families,) if isinstance(families, str) else tuple(families)
    return KeyRule(key, families, status, what, how, dict(example or {}), **kw)


_WINDOW = "a sliding window: key k is visible to query p iff p - k < sliding_window"
RULES: tuple[KeyRule, ...] = (
    # -- masks: windows and chunks ---------------------------------------------------------
    _rule("sliding_window", ALL_LAYER_WINDOW, "modelled", _WINDOW, "LayerAttention.sliding_window on every "
          "layer", {"sliding_window": 8}),
    _rule("sliding_window", QWEN_WINDOW, "modelled", _WINDOW, "LayerAttention.sliding_window on layers >= "
          "max_window_layers, only with use_sliding_window: true",
          {"sliding_window": 8, "use_sliding_window": True, "max_window_layers": 2}),
    _rule("sliding_window", ("gemma2", "gpt_oss"), "modelled", _WINDOW, "LayerAttention.sliding_window on "
          "the local layers (even ids unless layer_types says otherwise)", {"sliding_window": 8}),
    _rule("sliding_window", "gemma3_text", "modelled", _WINDOW, "LayerAttention.sliding_window on the local "
          "layers (sliding_window_pattern or layer_types)", {"sliding_window": 8}),
    _rule("sliding_window", NO_WINDOW, "unused", _WINDOW, "transformers' attention of this family never "
          "windows (the config class has no window, or keeps one it never reads)", {"sliding_window": 8}),
    _rule("sliding_window", "*", "modelled", _WINDOW, "read with use_sliding_window: true (every layer, or "
          "from max_window_layers on), layer_types or sliding_window_pattern; alone, in a family attnkit "
          "does not know, it is refused", {"sliding_window": 8, "use_sliding_window": True}),
    _rule("use_sliding_window", "*", "modelled", "turns sliding_window on", "with sliding_window: every "
          "layer, or the layers from max_window_layers on", {"use_sliding_window": True, "sliding_window": 8},
          inactive=(None, False)),
    _rule("max_window_layers", "*", "modelled", "the first layer that slides (Qwen)", "with "
          "use_sliding_window: LayerAttention.sliding_window on layers >= max_window_layers",
          {"max_window_layers": 2, "use_sliding_window": True, "sliding_window": 8}),
    _rule("max_window_layers", NO_WINDOW, "unused", "the first layer that slides (Qwen)", "this family "
          "never windows", {"max_window_layers": 2}),
    _rule("sliding_window_pattern", "*", "modelled", "every pattern-th layer is global, the others slide",
          "LayerAttention.sliding_window on layers i with (i + 1) % pattern != 0",
          {"sliding_window_pattern": 2, "sliding_window": 8}),
    _rule("layer_types", "*", "modelled", "the attention of every layer", "full_attention; sliding_attention "
          "(sliding_window); chunked_attention (attention_chunk); indexed_attention (sparse_topk, MLA); "
          "linear_attention, mlp, moe, conv (no attention: ModelAttention.other_layers); hybrid (both)",
          {"layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
           "sliding_window": 8}),
    _rule("attention_chunk_size", "llama4_text", "modelled", "chunked local attention: key k is visible to "
          "query p iff k <= p and k // chunk == p // chunk", "LayerAttention.attention_chunk on the RoPE "
          "layers (no_rope_layers 1) or the chunked_attention layers", {"attention_chunk_size": 16}),
    _rule("attention_chunk_size", "*", "modelled", "chunked local attention", "LayerAttention.attention_chunk "
          "on layer_types' chunked_attention layers; without them it is refused",
          {"attention_chunk_size": 16, "layer_types": ["chunked_attention", "full_attention"] * 2}),
    _rule("no_rope_layers", "llama4_text", "modelled", "1 = a RoPE layer (chunked), 0 = a NoPE layer (global)",
          "which layers get LayerAttention.attention_chunk ([] = every no_rope_layer_interval-th is NoPE)",
          {"no_rope_layers": [1, 0, 1, 0]}),
    _rule("no_rope_layer_interval", "llama4_text", "modelled", "every interval-th layer is NoPE (global) "
          "when no_rope_layers is empty", "which layers get LayerAttention.attention_chunk",
          {"no_rope_layer_interval": 2}),
    _rule("use_bidirectional_attention", "*", "modelled", "every query sees every key (no causal mask)",
          "LayerAttention.role 'encoder' (non_causal); with sliding layers it is refused: attnkit's windows "
          "are one-sided", {"use_bidirectional_attention": True}, inactive=(None, False)),
    _rule("is_causal", "*", "refused", "turns the causal mask off", "attnkit models bidirectional decoders "
          "through use_bidirectional_attention only", {"is_causal": False}, values=(False,)),
    _rule("is_decoder", ENCODERS, "refused", "turns an encoder into a causal decoder", "a causal variant "
          "of this encoder family", {"is_decoder": True}, values=(True,)),
    _rule("add_cross_attention", ENCODERS, "refused", "adds cross-attention to an encoder", "cross-attention "
          "layers of this encoder family", {"add_cross_attention": True}, values=(True,)),
    _rule("global_attn_every_n_layers", "modernbert", "modelled", "every n-th layer is global, the others "
          "local", "1: every layer is global (non_causal)", {"global_attn_every_n_layers": 1}, values=(1,)),
    _rule("global_attn_every_n_layers", "modernbert", "refused", "every n-th layer is global, the others see "
          "keys with |p - k| <= local_attention // 2", "a two-sided sliding window (attnkit's windows count "
          "keys before the query only)", {"global_attn_every_n_layers": 3}, inactive=(None, 1)),
    _rule("local_attention", "modernbert", "unused", "the local layers' window", "read only for local layers, "
          "which are refused (global_attn_every_n_layers, layer_types)", {"local_attention": 64}),
    # -- which layers attend (hybrids) ------------------------------------------------------
    _rule("hybrid_override_pattern", "nemotron_h", "modelled", "one character per layer: * attention, "
          "M Mamba-2, - MLP, E mixture of experts", "attention layer ids; the rest in "
          "ModelAttention.other_layers", {"hybrid_override_pattern": "M*M*"}),
    _rule("layers_block_type", "nemotron_h", "modelled", "the block of every layer (full_attention, "
          "linear_attention = Mamba-2, mlp, moe)", "attention layer ids; the rest in other_layers",
          {"layers_block_type": ["full_attention", "linear_attention", "moe", "full_attention"]}),
    _rule("attn_layer_period", "jamba", "modelled", "attention on layers i with i % period == offset, Mamba "
          "elsewhere", "attention layer ids; the rest in other_layers", {"attn_layer_period": 2, "attn_layer_offset": 1}),
    _rule("attn_layer_offset", "jamba", "modelled", "attention on layers i with i % period == offset",
          "attention layer ids; the rest in other_layers", {"attn_layer_offset": 1}),
    _rule("attn_layer_indices", "bamba", "modelled", "the attention layers; Mamba-2 elsewhere",
          "attention layer ids; the rest in other_layers", {"attn_layer_indices": [1, 3]}),
    _rule("full_attention_interval", QWEN_HYBRID, "modelled", "every interval-th layer is full attention, "
          "the others Gated DeltaNet (linear attention)", "attention layer ids; the rest in other_layers",
          {"full_attention_interval": 2}),
    # -- sparsity ---------------------------------------------------------------------------
    *(_rule(k, DSA, "modelled", "DeepSeek sparse attention: each query attends to the index_topk keys a "
            "lightning indexer (index_n_heads x index_head_dim) scores best", "LayerAttention.sparse_topk",
            {k: v}) for k, v in (("index_topk", 4), ("index_n_heads", 2), ("index_head_dim", 16))),
    _rule("indexer_types", "glm_moe_dsa", "outside", "which DSA layers run their own indexer (full) and "
          "which reuse the previous full layer's top-k (shared)", "where a layer's key selection comes "
          "from, not how it attends", {"indexer_types": ["full", "shared", "full", "shared"]}),
    # GLM-5's other spellings of that schedule (transformers' GlmMoeDsaConfig derives
    # indexer_types from them): the same selection source, the same status
    *(_rule(k, "glm_moe_dsa", "outside", "which DSA layers run their own indexer and which reuse the "
            "previous full layer's top-k, as a pattern or a period", "where a layer's key selection "
            "comes from, not how it attends", {k: v})
      for k, v in (("index_topk_pattern", "FSFS"), ("index_topk_freq", 2), ("index_skip_topk_offset", 2))),
    _rule("attn_type_list", "*", "refused", "lightning (linear) attention on some layers (MiniMax)",
          "layer_types naming the linear_attention layers", {"attn_type_list": [0, 1, 0, 1]}),
    # -- positions and biases ---------------------------------------------------------------
    _rule("relative_attention_num_buckets", "*", "refused", "a learned relative position bias on every "
          "score (T5, MPNet)", "per-pair attention biases", {"relative_attention_num_buckets": 32},
          code="AK508"),
    *(_rule(k, "*", "refused", "ALiBi: a linear position bias per head on every score", "ALiBi slopes in "
            "the kernels", {k: True}, inactive=(None, False), code="AK509") for k in ("alibi", "use_alibi")),
    _rule("position_embedding_type", "*", "refused", "ALiBi position bias", "ALiBi slopes in the kernels",
          {"position_embedding_type": "alibi"}, values=("alibi",), code="AK509"),
    _rule("position_embedding_type", "*", "refused", "relative position scores (Shaw et al.) added to every "
          "attention score", "per-pair relative position terms in the kernels",
          {"position_embedding_type": "relative_key"}, values=("relative_key", "relative_key_query")),
    _rule("position_embedding_type", "*", "unused", "absolute or rotary positions, added to the inputs or "
          "rotated into q and k before attention", "positions outside the kernel change nothing it computes",
          {"position_embedding_type": "absolute"}, values=("absolute", "rope", "rotary", "nope")),
    _rule("position_embedding_type", "*", "refused", "a position encoding attnkit does not know",
          "a rule for it in attnkit/model/keys.py", {"position_embedding_type": "sinusoidal_bias"}),
    # -- scale and logits -------------------------------------------------------------------
    _rule("query_pre_attn_scalar", "*", "modelled", "softmax scale query_pre_attn_scalar**-0.5 (Gemma)",
          "LayerAttention.scale", {"query_pre_attn_scalar": 16}),
    _rule("attn_logit_softcapping", "*", "modelled", "scores capped to cap * tanh(score / cap)",
          "LayerAttention.logit_softcap", {"attn_logit_softcapping": 30.0}),
    _rule("dual_chunk_attention_config", "*", "modelled", "dual chunk attention (Qwen2.5-1M)",
          "LayerAttention.dual_chunk", {"dual_chunk_attention_config": {"chunk_size": 64, "local_size": 8}}),
    _rule("v_head_dim", "*", "modelled", "values narrower or wider than queries and keys",
          "LayerAttention.v_head_dim", {"v_head_dim": 32}),
    # -- outside the attention kernel -------------------------------------------------------
    *(_rule(k, "llama4_text", "outside", "NoPE layers scale each query by 1 + attn_scale * "
            "log(floor((pos + 1) / floor_scale) + 1)", "on q before attention (the runner's job)",
            {k: v}, inactive=(None, False, 0)) for k, v in (("attn_temperature_tuning", True),
                                                          ("floor_scale", 4096), ("attn_scale", 0.2))),
    _rule("use_qk_norm", "llama4_text", "outside", "L2-normalises q and k of the RoPE layers", "on q and k "
          "before attention (the runner's job)", {"use_qk_norm": True}, inactive=(None, False)),
    _rule("use_qk_norm", "*", "outside", "normalises q and k before attention", "on q and k before "
          "attention (the runner's job)", {"use_qk_norm": True}, inactive=(None, False)),
    _rule("attn_output_gate", "*", "outside", "multiplies the attention output by sigmoid(gate)",
          "after attention (the runner's job)", {"attn_output_gate": True}, inactive=(None, False)),
    *(_rule(k, "falcon_h1", "outside", f"multiplies the attention {what} by {k}", "outside the attention "
            "kernel (the runner's job)", {k: 0.5}, inactive=(None, 1, 1.0))
      for k, what in (("key_multiplier", "keys"), ("attention_in_multiplier", "input"),
                      ("attention_out_multiplier", "output"))),
)


def rules_for(key: str) -> list[KeyRule]:
    return [r for r in RULES if r.key == key]


def is_flag(key: str, family: str) -> bool:
    """Whether ``key`` is a true/false switch in ``family``: every rule of the family (or "*")
    for it names only booleans. Python code tests it with ``if config.key:``, so a 0, "x" or
    [] would switch it by truthiness where the table matches only true and false."""
    rules = rules_for(key)
    own = [r for r in rules if family in r.families] or [r for r in rules if "*" in r.families]
    options = [tuple(o for o in (r.values if r.values is not None else r.inactive) if o is not None) for r in own]
    return bool(own) and all(opts and all(isinstance(o, bool) for o in opts) for opts in options)


def known_family(family: str) -> bool:
    """Whether attnkit knows ``family``: a rule of the table or a family list here names it, or a
    preset is of it (model/presets.py)."""
    from attnkit.model.presets import preset_model_types

    named = (QWEN_WINDOW + ALL_LAYER_WINDOW + QWEN_HYBRID + MAMBA_HYBRID + YARN_MLA + ENCODERS + NO_WINDOW)
    return family in named or any(family in r.families for r in RULES) or family in preset_model_types()


def classify(key: str, family: str, value: Any) -> tuple[str, KeyRule | None]:
    """What ``key`` = ``value`` means in ``family``: (a rule's status, the rule); ("inactive", None)
    when it changes nothing; ("foreign", a rule) when only other families' rules know it;
    ("unknown", None) when no rule does (not an attention key)."""
    rules = rules_for(key)
    if not rules:
        return "unknown", None
    own = [r for r in rules if family in r.families] or [r for r in rules if "*" in r.families]
    if own:
        rule = next((r for r in own if r.applies(value)), None)
        return (rule.status, rule) if rule else ("inactive", None)
    active = [r for r in rules if r.applies(value)]
    return ("foreign", active[0]) if active else ("inactive", None)


"""Hugging Face ``config.json`` -> ``ModelAttention``: what every attention layer needs.

One entry point, ``parse_config``. Head counts are for the whole model (the planner splits
them for tensor parallelism). Per-family rules live in small functions; the field readers in
``_fields.py`` turn every missing, mistyped or out-of-range value into an AK5xx naming it.
"""
from __future__ import annotations

import math

from attnkit.errors import AttnkitError
from attnkit.model._fields import ConfigReader
from attnkit.model.spec import DualChunkConfig, LayerAttention, MLAConfig, ModelAttention

# transformers' config-class defaults for fields that real config.json files leave out.
MODEL_DEFAULTS: dict[str, dict] = {
    "gemma2": {"head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096},
    "gemma3_text": {"head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "max_position_embeddings": 131072},
    "qwen2": {"max_window_layers": 28},
    "qwen3": {"max_window_layers": 28},
}
# Families whose ``sliding_window`` (when set) applies to every layer.
ALL_LAYER_WINDOW = {"mistral", "mixtral", "phi3", "starcoder2"}
# Families with ``use_sliding_window``: the window applies to layers >= ``max_window_layers``.
QWEN_WINDOW = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}
# Families where every layer has attention sinks (a learned per-head logit).
SINK_FAMILIES = {"gpt_oss"}
RELATIVE_BIAS_FAMILIES = {"t5", "mt5", "umt5", "longt5", "switch_transformers", "pop2piano"}
LAYER_TYPES = {"full_attention": None, "sliding_attention": "sliding"}

MAX_LAYERS = 10_000   # far above any real model; guards against building millions of layers
HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
HIDDEN = ("hidden_size", "n_embd", "d_model")
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
          "float": "fp32", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}


def parse_config(cfg: object, *, name: str | None = None, source: str = "<dict>") -> ModelAttention:
    """Every attention layer of the model a parsed config.json describes.

    Raises AttnkitError (AK5xx) for configs that are malformed or that attnkit cannot serve.
    """
    if not isinstance(cfg, dict):
        raise AttnkitError("AK502", f"a model config must be a JSON object, got "
                           f"{type(cfg).__name__} (in {source})", field=None,
                           expected="JSON object", actual=type(cfg).__name__,
                           details={"source": source})
    top = ConfigReader(cfg, source=source)
    model_type = top.str("model_type", default="").lower()
    _reject_unservable(top, model_type)
    reader = ConfigReader(cfg, source=source, defaults=MODEL_DEFAULTS.get(model_type))
    if not _has_attention_fields(top) and top.has("text_config"):
        # Multimodal wrappers (Gemma-3, LLaVA ...) keep the language model in text_config.
        model_type = top.sub("text_config").str("model_type", default=model_type).lower()
        reader = top.sub("text_config", defaults=MODEL_DEFAULTS.get(model_type))
        _reject_unservable(reader, model_type)

    max_pos_key = "max_position_embeddings"
    if reader.has("encoder_layers") and reader.has("decoder_layers"):
        layers, max_pos_key = _encoder_decoder(reader), "max_target_positions"
    elif reader.has("kv_lora_rank"):
        layers = _mla(reader)
    elif reader.first(*HEADS, *LAYERS) is not None:   # _decoder names whichever is missing
        layers = _decoder(reader, model_type)
    else:
        raise reader.error(
            "AK510", None,
            f"cannot find the attention layout of model_type {model_type or '(none)'!r}: looked for "
            f"{' / '.join(HEADS)} with {' / '.join(LAYERS)}, kv_lora_rank (MLA), "
            "encoder_layers + decoder_layers (encoder-decoder), and text_config",
            expected=list(HEADS + LAYERS), actual=sorted(cfg)[:20])
    max_pos = reader.int(max_pos_key, default=None)
    notes = tuple(f"{reader.path(k)} not in config; used transformers' default {reader.defaults[k]!r}"
                  for k in dict.fromkeys(reader.used_defaults))
    architectures = top.list("architectures", default=[])
    arch = architectures[0] if architectures and isinstance(architectures[0], str) else model_type
    return ModelAttention(
        name=name or _default_name(top, model_type), architecture=arch or "unknown",
        layers=tuple(layers), dtype=_dtype(top, reader), max_position_embeddings=max_pos,
        source=source, notes=notes)


# -- families -------------------------------------------------------------------------------

def _decoder(r: ConfigReader, model_type: str) -> list[LayerAttention]:
    """Decoder-only MHA/GQA/MQA: Llama, Mistral, Qwen2/3, Phi-3, Gemma-2/3, gpt-oss ..."""
    heads = r.int(r.first(*HEADS) or HEADS[0])
    n_layers = r.int(r.first(*LAYERS) or LAYERS[0], maximum=MAX_LAYERS)
    kv_heads = _kv_heads(r, heads)
    if r.known("head_dim"):
        head_dim = r.int("head_dim")
    else:
        head_dim = _derived_head_dim(r, heads)
    scale = None
    if r.known("query_pre_attn_scalar"):
        # Gemma: queries are scaled by query_pre_attn_scalar**-0.5 instead of head_dim**-0.5.
        scale = r.float("query_pre_attn_scalar") ** -0.5
    softcap = r.float("attn_logit_softcapping", default=None)
    windows = _windows(r, model_type, n_layers)
    dual = _dual_chunk(r)
    sinks = model_type in SINK_FAMILIES
    # Embedding models built on decoders (EmbeddingGemma) attend both ways: non-causal.
    role = "encoder" if r.bool("use_bidirectional_attention", default=False) else "decoder"
    return [LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                           role=role, scale=scale, sliding_window=windows[i], logit_softcap=softcap,
                           sinks=sinks, dual_chunk=dual)
            for i in range(n_layers)]


def _mla(r: ConfigReader) -> list[LayerAttention]:
    """Multi-head latent attention: DeepSeek-V2/V3, Kimi-K2."""
    heads = r.int(r.first(*HEADS) or HEADS[0])
    n_layers = r.int(r.first(*LAYERS) or LAYERS[0], maximum=MAX_LAYERS)
    mla = MLAConfig(kv_lora_rank=r.int("kv_lora_rank"), qk_rope_head_dim=r.int("qk_rope_head_dim"),
                    qk_nope_head_dim=r.int("qk_nope_head_dim"), v_head_dim=r.int("v_head_dim"),
                    q_lora_rank=r.int("q_lora_rank", default=None))
    head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    # DeepSeek's YaRN: scale = (nope + rope)**-0.5 * m**2, with
    # m = 0.1 * mscale_all_dim * ln(factor) + 1 when factor > 1 and mscale_all_dim != 0, else 1.
    scale = head_dim ** -0.5
    rope = _rope_scaling(r)
    if rope is not None and rope.has("mscale_all_dim"):
        mscale_all_dim = rope.float("mscale_all_dim", positive=False)
        factor = rope.float("factor", default=1.0)
        if mscale_all_dim and factor > 1:
            scale *= (0.1 * mscale_all_dim * math.log(factor) + 1.0) ** 2
    # One latent row per token is shared by every query head, so the cache has one "KV head".
    return [LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=1, head_dim=head_dim,
                           v_head_dim=mla.v_head_dim, kind="mla", scale=scale, mla=mla)
            for i in range(n_layers)]


def _encoder_decoder(r: ConfigReader) -> list[LayerAttention]:
    """Whisper-style encoder-decoder: encoder self-attention (non-causal), then per decoder
    layer its causal self-attention and its cross-attention, each with its own layer_id."""
    d_model = r.int(r.first(*HIDDEN) or "d_model")
    enc_layers = r.int("encoder_layers", maximum=MAX_LAYERS)
    dec_layers = r.int("decoder_layers", maximum=MAX_LAYERS)
    enc_heads = r.int("encoder_attention_heads")
    dec_heads = r.int("decoder_attention_heads")
    enc_dim = _divide(r, d_model, enc_heads, "encoder_attention_heads")
    dec_dim = _divide(r, d_model, dec_heads, "decoder_attention_heads")
    out = [LayerAttention(layer_id=i, num_heads=enc_heads, num_kv_heads=enc_heads,
                          head_dim=enc_dim, role="encoder") for i in range(enc_layers)]
    for j in range(dec_layers):
        base = enc_layers + 2 * j
        out.append(LayerAttention(layer_id=base, num_heads=dec_heads, num_kv_heads=dec_heads,
                                  head_dim=dec_dim, role="decoder"))
        out.append(LayerAttention(layer_id=base + 1, num_heads=dec_heads, num_kv_heads=dec_heads,
                                  head_dim=dec_dim, role="cross"))
    return out


# -- pieces ---------------------------------------------------------------------------------

def _kv_heads(r: ConfigReader, heads: int) -> int:
    key = r.first("num_key_value_heads", "num_kv_heads", "n_kv_heads")
    if key is not None:
        kv = r.int(key)
    elif r.bool("multi_query", default=False):   # Falcon-7B style MQA
        kv = 1
    else:
        kv = heads
    if heads % kv:
        raise r.error("AK506", key, f"{r.path(HEADS[0])}={heads} is not a multiple of "
                      f"{r.path(key or 'num_key_value_heads')}={kv}; grouped-query attention needs "
                      "whole groups", expected=f"a divisor of {heads}", actual=kv)
    return kv


def _derived_head_dim(r: ConfigReader, heads: int) -> int:
    hidden_key = r.first(*HIDDEN)
    if hidden_key is None:
        raise r.error("AK503", "head_dim", "neither head_dim nor hidden_size is set, so the head "
                      "width is unknown", expected="head_dim or hidden_size", actual=None)
    return _divide(r, r.int(hidden_key), heads, hidden_key)


def _divide(r: ConfigReader, hidden: int, heads: int, key: str) -> int:
    if hidden % heads:
        raise r.error("AK506", key, f"{r.path(key)}={hidden} is not divisible by {heads} heads "
                      "and head_dim is not given", expected=f"a multiple of {heads}", actual=hidden)
    return hidden // heads


def _windows(r: ConfigReader, model_type: str, n_layers: int) -> list[int | None]:
    """Per-layer sliding window (None = full attention). ``layer_types`` wins when present."""
    if r.has("layer_types"):
        types = r.list("layer_types")
        if len(types) != n_layers:
            raise r.error("AK506", "layer_types", f"layer_types has {len(types)} entries but the "
                          f"model has {n_layers} layers", expected=n_layers, actual=len(types))
        bad = sorted({repr(t) for t in types if not isinstance(t, str) or t not in LAYER_TYPES})
        if bad:
            raise r.error("AK512", "layer_types", f"layer_types holds {', '.join(bad)}; attnkit "
                          f"serves {', '.join(LAYER_TYPES)}", expected=list(LAYER_TYPES), actual=bad)
        sliding = [LAYER_TYPES[t] == "sliding" for t in types]
    elif r.known("sliding_window_pattern"):
        # Gemma-3: every pattern-th layer is global, the rest local (5 local : 1 global).
        pattern = r.int("sliding_window_pattern")
        sliding = [(i + 1) % pattern != 0 for i in range(n_layers)]
    elif model_type in ("gemma2", "gpt_oss"):
        sliding = [i % 2 == 0 for i in range(n_layers)]   # local, global, local, ...
    elif model_type in QWEN_WINDOW:
        # Qwen: layers from max_window_layers on use the window, and only with use_sliding_window.
        on = r.bool("use_sliding_window", default=False)
        first = r.int("max_window_layers", minimum=0) if on else n_layers
        sliding = [i >= first for i in range(n_layers)]
    elif r.has("sliding_window") and (model_type in ALL_LAYER_WINDOW
                                      or r.bool("use_sliding_window", default=False)):
        sliding = [True] * n_layers
    else:
        sliding = [False] * n_layers
    if not any(sliding):
        return [None] * n_layers
    window = r.int("sliding_window")
    return [window if s else None for s in sliding]


def _dual_chunk(r: ConfigReader) -> DualChunkConfig | None:
    d = r.sub("dual_chunk_attention_config")
    if d is None:
        return None
    chunk, local = d.int("chunk_size"), d.int("local_size")
    if local >= chunk:
        raise d.error("AK505", "local_size", f"local_size ({local}) must be smaller than "
                      f"chunk_size ({chunk}): the chunk length is chunk_size - local_size",
                      expected=f"< {chunk}", actual=local)
    return DualChunkConfig(chunk_size=chunk, local_size=local, original_max_position_embeddings=
                           d.int("original_max_position_embeddings", default=0, minimum=0))


def _rope_scaling(r: ConfigReader) -> ConfigReader | None:
    # transformers 5 renamed rope_scaling to rope_parameters.
    return r.sub("rope_scaling") or r.sub("rope_parameters")


def _has_attention_fields(r: ConfigReader) -> bool:
    return (r.first(*HEADS) is not None and r.first(*LAYERS) is not None) or (
        r.has("encoder_layers") and r.has("decoder_layers"))


def _reject_unservable(r: ConfigReader, model_type: str) -> None:
    """T5's relative position bias and ALiBi add a per-pair bias no attnkit backend computes."""
    if model_type in RELATIVE_BIAS_FAMILIES or r.has("relative_attention_num_buckets"):
        raise r.error("AK508", "model_type", f"model_type {model_type!r} adds a learned relative "
                      "position bias to every attention score (T5-style); attnkit backends do not "
                      "compute per-pair biases", expected="rotary or absolute positions",
                      actual=model_type)
    attn_config = r.sub("attn_config")
    alibi = (model_type == "bloom" or r.cfg.get("alibi") is True or r.cfg.get("use_alibi") is True
             or r.cfg.get("position_embedding_type") == "alibi"
             or (attn_config is not None and attn_config.cfg.get("alibi") is True)
             # Baichuan's own code picks ALiBi for every size but the 7B (hidden_size 4096).
             or (model_type == "baichuan" and r.cfg.get("hidden_size") != 4096))
    if alibi:
        raise r.error("AK509", "model_type", f"model_type {model_type!r} uses ALiBi (a linear "
                      "position bias per head added to the scores); attnkit backends do not "
                      "compute ALiBi", expected="rotary or absolute positions", actual=model_type)


def _dtype(top: ConfigReader, r: ConfigReader) -> str:
    for reader in (r, top):
        key = reader.first("torch_dtype", "dtype")
        if key is not None and isinstance(reader.cfg[key], str):
            return DTYPES.get(reader.cfg[key].lower().removeprefix("torch."), "bf16")
    return "bf16"


def _default_name(top: ConfigReader, model_type: str) -> str:
    path = top.cfg.get("_name_or_path")
    if isinstance(path, str) and path:
        return path.rstrip("/").split("/")[-1]
    return model_type or "model"

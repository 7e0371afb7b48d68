"""Per-family attention layouts: decoder MHA/GQA (and encoders, and hybrids), MLA, Whisper.

Each builder returns ``(layers, other_layers)``: the attention layers (``layer_id`` = the
layer's index in the model) and the model layers that run something else (model/layouts.py).
Head counts are for the whole model; the planner splits them for tensor parallelism.
"""
from __future__ import annotations

import math

from attnkit.model._fields import ConfigReader
from attnkit.model.keys import DSA, ENCODERS
from attnkit.model.layouts import LAYERS, MAX_LAYERS, attention_chunk, layer_slots, typed_slots
from attnkit.model.spec import DualChunkConfig, LayerAttention, MLAConfig, SparseTopK

HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
HIDDEN = ("hidden_size", "n_embd", "d_model")
SINK_FAMILIES = {"gpt_oss"}    # every layer has attention sinks (a learned per-head logit)
Layers = tuple[list[LayerAttention], list[tuple[int, str]]]


def decoder(r: ConfigReader, model_type: str) -> Layers:
    """MHA/GQA/MQA: Llama, Mistral, Qwen, Phi-3, Gemma, gpt-oss, Llama-4; hybrids' attention
    layers (NemotronH, Jamba, Qwen3-Next, Falcon-H1); BERT-style encoders (non-causal)."""
    heads = r.int(r.first(*HEADS) or HEADS[0])
    slots = layer_slots(r, model_type)
    kv_heads = _kv_heads(r, heads)
    head_dim = r.int("head_dim") if r.known("head_dim") else _derived_head_dim(r, heads)
    v_dim = r.int("v_head_dim", default=None)
    scale = None
    if r.known("query_pre_attn_scalar"):
        # Gemma: queries are scaled by query_pre_attn_scalar**-0.5 instead of head_dim**-0.5.
        scale = r.float("query_pre_attn_scalar") ** -0.5
    softcap = r.float("attn_logit_softcapping", default=None)
    kinds = {s.attention for s in slots}
    encoder = model_type in ENCODERS or r.bool("use_bidirectional_attention", default=False)
    if encoder and "sliding" in kinds:
        raise _two_sided(r, ("use_bidirectional_attention", "layer_types", "global_attn_every_n_layers",
                             "sliding_window_pattern", "use_sliding_window", "sliding_window"),
                         "this model's local layers attend both ways within a window (|p - k| within half "
                         "of it); attnkit's sliding windows count keys before the query only",
                         "a two-sided (bidirectional) sliding window mask", "every layer global")
    if encoder and "chunked" in kinds:
        raise _two_sided(r, ("use_bidirectional_attention", "layer_types"),
                         "bidirectional attention with chunked local layers; attnkit's chunk mask is "
                         "causal (a key in the query's chunk and not after it)",
                         "a bidirectional chunked local mask", "no chunked_attention layers")
    window = r.int("sliding_window") if "sliding" in kinds else None
    chunk = attention_chunk(r) if "chunked" in kinds else None
    if "chunked" in kinds and chunk is None:
        raise r.error("AK503", "attention_chunk_size", "layer_types names chunked_attention layers but "
                      "attention_chunk_size is null", expected="the chunk size", actual=None)
    if "indexed" in kinds:
        raise r.error("AK512", "layer_types", "indexed_attention (DeepSeek sparse attention) layers need "
                      "MLA (kv_lora_rank); this config has none", expected="kv_lora_rank", actual=None)
    dual = _dual_chunk(r)
    layers = [LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                             v_head_dim=None if v_dim == head_dim else v_dim,
                             role="encoder" if encoder else "decoder", scale=scale,
                             sliding_window=window if s.attention == "sliding" else None,
                             logit_softcap=softcap, sinks=model_type in SINK_FAMILIES, dual_chunk=dual,
                             attention_chunk=chunk if s.attention == "chunked" else None)
              for i, s in enumerate(slots) if s.attention is not None]
    return layers, [(i, s.other) for i, s in enumerate(slots) if s.other is not None]


def mla(r: ConfigReader, model_type: str) -> Layers:
    """Multi-head latent attention: DeepSeek-V2/V3, Kimi-K2; with an indexer (DeepSeek-V3.2,
    GLM-5) every layer is DeepSeek sparse attention."""
    heads = r.int(r.first(*HEADS) or HEADS[0])
    n_layers = r.int(r.first(*LAYERS) or LAYERS[0], maximum=MAX_LAYERS)
    cfg = MLAConfig(kv_lora_rank=r.int("kv_lora_rank"), qk_rope_head_dim=r.int("qk_rope_head_dim"),
                    qk_nope_head_dim=r.int("qk_nope_head_dim"), v_head_dim=r.int("v_head_dim"),
                    q_lora_rank=r.int("q_lora_rank", default=None))
    head_dim = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    scale = _yarn_mla_scale(r, head_dim)
    sparse = None
    if model_type in DSA or r.has("index_topk"):
        sparse = SparseTopK(topk=r.int("index_topk"), index_n_heads=r.int("index_n_heads"),
                            index_head_dim=r.int("index_head_dim"))
    if r.has("layer_types"):   # DSA configs name every layer indexed_attention
        slots = typed_slots(r, "layer_types", r.list("layer_types"), model_type)
        if len(slots) != n_layers or any(s.attention not in ("full", "indexed") for s in slots):
            raise r.error("AK512", "layer_types", "an MLA model's layer_types must name full_attention or "
                          f"indexed_attention for each of its {n_layers} layers", expected=n_layers,
                          actual=r.cfg["layer_types"][:20])
        if any(s.attention == "indexed" for s in slots) and sparse is None:
            raise r.error("AK503", "index_topk", "layer_types names indexed_attention layers but the config "
                          "has no index_topk", expected="index_topk", actual=None)
        indexed = [s.attention == "indexed" for s in slots]
    else:
        indexed = [sparse is not None] * n_layers
    # One latent row per token is shared by every query head, so the cache has one "KV head".
    layers = [LayerAttention(layer_id=i, num_heads=heads, num_kv_heads=1, head_dim=head_dim,
                             v_head_dim=cfg.v_head_dim, kind="mla", scale=scale, mla=cfg,
                             sparse_topk=sparse if indexed[i] else None) for i in range(n_layers)]
    return layers, []


def encoder_decoder(r: ConfigReader) -> Layers:
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
    return out, []


# -- pieces ---------------------------------------------------------------------------------

def _yarn_mla_scale(r: ConfigReader, head_dim: int) -> float:
    """DeepSeek's YaRN: scale = (nope + rope)**-0.5 * m**2, with m = 0.1 * mscale_all_dim *
    ln(factor) + 1 when factor > 1 and mscale_all_dim != 0, else 1."""
    scale = head_dim ** -0.5
    rope = r.sub("rope_scaling") or r.sub("rope_parameters")   # transformers 5 renamed it
    if rope is None or not rope.has("mscale_all_dim"):
        return scale
    mscale_all_dim = rope.float("mscale_all_dim", positive=False)
    factor = rope.float("factor", default=1.0)
    if mscale_all_dim and factor > 1:
        m = 0.1 * mscale_all_dim * math.log(factor) + 1.0
        scale *= m * m            # float * overflows to inf (where ** raised OverflowError)
        if not math.isfinite(scale) or scale <= 0:
            raise rope.error("AK505", "mscale_all_dim", f"{rope.path('mscale_all_dim')} = {mscale_all_dim} "
                             f"with factor {factor} makes the softmax scale {scale} (it must be finite "
                             "and > 0)", expected="a finite positive softmax scale", actual=mscale_all_dim)
    return scale


def _two_sided(r: ConfigReader, keys: tuple[str, ...], what: str, needs: str, instead: str):
    """AK513 for local layers (windows, chunks) that an encoder would attend both ways: the
    error names the first of ``keys`` the config sets (the last is the fallback)."""
    key = next((k for k in keys if r.known(k)), keys[-1])
    return r.error("AK513", key, f"{r.path(key)}: {what}, so it would need {needs}",
                   expected=f"a causal model, or {instead}", actual=r.cfg.get(key, r.defaults.get(key)),
                   details={"needs": needs})


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

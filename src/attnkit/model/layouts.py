"""Which layers of a model attend, and how: one ``Slot`` per model layer.

Sources, most specific first: NemotronH's block list or ``hybrid_override_pattern``;
``layer_types`` (transformers' per-layer vocabulary); Jamba's period/offset, Bamba's indices,
Falcon-H1 (attention and Mamba side by side in every layer), Qwen3-Next's
``full_attention_interval``, Llama-4's RoPE/NoPE layers, ModernBERT's global layers; else the
per-family sliding-window rules (Mistral, Qwen, Gemma, gpt-oss). Keys and families are listed,
with what each does, in model/keys.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from attnkit.model._fields import ConfigReader
from attnkit.model.keys import ALL_LAYER_WINDOW, MAMBA_HYBRID, QWEN_HYBRID, QWEN_WINDOW

LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
MAX_LAYERS = 10_000   # far above any real model; guards against building millions of layers
NEMOTRON_CHARS = {"*": "full_attention", "M": "linear_attention", "-": "mlp", "E": "moe"}
# Layer types that are not (only) attention, and the families known to mean them: elsewhere the
# same name can mean something else (vLLM's Gemma-3 reuses linear_attention for block-local
# attention), so an unknown family naming one is refused (AK512).
OTHER_TYPES = {
    "linear_attention": QWEN_HYBRID + MAMBA_HYBRID + ("minimax",), "mamba": MAMBA_HYBRID,
    "mlp": ("nemotron_h",), "moe": ("nemotron_h",), "hybrid": ("falcon_h1",), "conv": ("lfm2", "lfm2_moe"),
}


@dataclass(frozen=True)
class Slot:
    """What one model layer runs: ``attention`` "full", "sliding", "chunked", "indexed" (DSA)
    or None; ``other`` an OTHER_KINDS block instead of it (or beside it), or None."""
    attention: str | None = "full"
    other: str | None = None


def layer_slots(r: ConfigReader, model_type: str) -> list[Slot]:
    """One Slot per model layer (AK503/AK505/AK506/AK512 for missing, bad or inconsistent keys)."""
    if model_type == "nemotron_h":
        return _nemotron(r)
    n = r.int(r.first(*LAYERS) or LAYERS[0], maximum=MAX_LAYERS)
    if model_type == "llama4_text":
        rope = _llama4_rope_layers(r, n)   # read whether layer_types is given or not: RoPE is per layer
        chunk = attention_chunk(r)
        if not r.has("layer_types"):
            return [Slot("chunked" if is_rope and chunk else "full") for is_rope in rope]
    if r.has("layer_types"):
        return _from_layer_types(r, model_type, n)
    if model_type == "jamba":
        period, offset = r.int("attn_layer_period"), r.int("attn_layer_offset", minimum=0)
        return [Slot("full") if i % period == offset else Slot(None, "mamba") for i in range(n)]
    if model_type == "bamba":
        ids = set(_int_list(r, "attn_layer_indices", n))
        return [Slot("full") if i in ids else Slot(None, "mamba") for i in range(n)]
    if model_type == "falcon_h1":
        return [Slot("full", "mamba") for _ in range(n)]
    if model_type in QWEN_HYBRID:
        k = r.int("full_attention_interval")
        return [Slot("full") if (i + 1) % k == 0 else Slot(None, "linear_attention") for i in range(n)]
    if model_type == "modernbert":
        k = r.int("global_attn_every_n_layers")
        return [Slot("full") if i % k == 0 else Slot("sliding") for i in range(n)]
    return [Slot("sliding" if s else "full") for s in _sliding(r, model_type, n)]


def _from_layer_types(r: ConfigReader, model_type: str, n: int) -> list[Slot]:
    types = r.list("layer_types")
    if len(types) != n:
        raise r.error("AK506", "layer_types", f"layer_types has {len(types)} entries but the model has "
                      f"{n} layers", expected=n, actual=len(types), solutions=_one_per_layer("layer_types", n))
    # layer_types is what transformers runs; the keys it was derived from are settled by it
    r.considered("sliding_window_pattern", "use_sliding_window", "max_window_layers",
                 "global_attn_every_n_layers", "full_attention_interval")
    slots = typed_slots(r, "layer_types", types, model_type)
    if all(s.attention != "sliding" for s in slots):
        r.considered("sliding_window")       # no layer slides, whatever the window
    return slots


def typed_slots(r: ConfigReader, key: str, types: list, model_type: str) -> list[Slot]:
    # transformers calls Mamba layers "linear_attention" too; name them for what they are
    linear = "mamba" if model_type in MAMBA_HYBRID else "linear_attention"
    table = {"full_attention": Slot("full"), "attention": Slot("full"), "sliding_attention": Slot("sliding"),
             "chunked_attention": Slot("chunked"), "indexed_attention": Slot("indexed"),
             "deepseek_sparse_attention": Slot("indexed"), "linear_attention": Slot(None, linear),
             "mamba": Slot(None, "mamba"), "hybrid": Slot("full", linear), "mlp": Slot(None, "mlp"),
             "moe": Slot(None, "moe"), "conv": Slot(None, "conv")}
    bad = sorted({repr(t) for t in types if not isinstance(t, str) or t not in table})
    if bad:
        raise r.error("AK512", key, f"{r.path(key)} holds {', '.join(bad[:5])}; attnkit knows "
                      f"{', '.join(table)}", expected=list(table), actual=bad[:20])
    foreign = sorted({t for t in types if model_type not in OTHER_TYPES.get(t, (model_type,))})
    if foreign:
        raise r.error("AK512", key, f"{r.path(key)} names {', '.join(map(repr, foreign))} layers; attnkit "
                      f"knows what they compute in {', '.join(OTHER_TYPES[foreign[0]])}, not in model_type "
                      f"{model_type or '(none)'!r}", expected=[t for t in table if t not in OTHER_TYPES],
                      actual=foreign)
    return [table[t] for t in types]


def _nemotron(r: ConfigReader) -> list[Slot]:
    """NemotronH: one block per layer, from layers_block_type (or layer_types), else the
    hybrid_override_pattern string; transformers' default is four blocks."""
    key = r.first("layers_block_type", "layer_types")
    if key is not None:
        types = r.list(key)
        r.considered("hybrid_override_pattern")   # the list wins in transformers' NemotronHConfig
    elif r.has("hybrid_override_pattern"):
        key, pattern = "hybrid_override_pattern", r.str("hybrid_override_pattern")
        bad = sorted(set(pattern) - set(NEMOTRON_CHARS))
        if bad:
            raise r.error("AK512", key, f"hybrid_override_pattern holds {', '.join(map(repr, bad))}; "
                          "NemotronH layers are * (attention), M (Mamba-2), - (MLP), E (MoE)",
                          expected=list(NEMOTRON_CHARS), actual=bad)
        types = [NEMOTRON_CHARS[c] for c in pattern]
    else:
        key, types = "layers_block_type", ["linear_attention", "moe", "full_attention", "mlp"]
    if not types or len(types) > MAX_LAYERS:
        raise r.error("AK505", key, f"{r.path(key)} has {len(types)} layers", expected=f"1 .. {MAX_LAYERS}",
                      actual=len(types))
    declared = r.first(*LAYERS)
    if declared is not None and r.int(declared, maximum=MAX_LAYERS) != len(types):
        raise r.error("AK506", key, f"{r.path(key)} describes {len(types)} layers but {declared} is "
                      f"{r.cfg[declared]}", expected=len(types), actual=r.cfg[declared],
                      solutions=_one_per_layer(key, r.cfg[declared]))
    return typed_slots(r, key, types, "nemotron_h")


def _llama4_rope_layers(r: ConfigReader, n: int) -> list[bool]:
    """Llama-4: no_rope_layers[i] == 1 marks a RoPE layer; [] (or absent) means every
    no_rope_layer_interval-th layer is NoPE (transformers' Llama4TextConfig)."""
    given = r.list("no_rope_layers", default=[])
    if not given:
        k = r.int("no_rope_layer_interval")
        return [(i + 1) % k != 0 for i in range(n)]
    if len(given) < n or any(v not in (0, 1) or isinstance(v, bool) for v in given):
        raise r.error("AK506", "no_rope_layers", f"no_rope_layers must hold a 0 or 1 for each of the {n} "
                      "layers (1 = RoPE layer)", expected=f"{n} entries of 0/1", actual=given[:20],
                      solutions=_one_per_layer("no_rope_layers", n))
    return [v == 1 for v in given[:n]]


def attention_chunk(r: ConfigReader) -> int | None:
    """attention_chunk_size; null turns chunking off (transformers' default is 8192)."""
    if "attention_chunk_size" in r.cfg and r.cfg["attention_chunk_size"] is None:
        return None
    return r.int("attention_chunk_size")


def _int_list(r: ConfigReader, key: str, n: int) -> list[int]:
    values = r.list(key)
    if any(isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n for v in values):
        raise r.error("AK505", key, f"{r.path(key)} must list layer ids in 0 .. {n - 1}",
                      expected=f"ids in 0 .. {n - 1}", actual=values[:20])
    return values


def _sliding(r: ConfigReader, model_type: str, n: int) -> list[bool]:
    """Per-family sliding-window rules for configs without layer_types. A sliding_window no
    rule here reads (an unknown family without use_sliding_window) is refused by check_keys."""
    if r.known("sliding_window_pattern"):
        # Gemma-3 (and Cohere-2): every pattern-th layer is global, the rest local.
        pattern = r.int("sliding_window_pattern")
        if pattern == 1:
            r.considered("sliding_window")   # every layer is global
        return [(i + 1) % pattern != 0 for i in range(n)]
    if model_type in ("gemma2", "gpt_oss"):
        return [i % 2 == 0 for i in range(n)]   # local, global, local, ...
    on = r.bool("use_sliding_window", default=False) if r.has("use_sliding_window") else None
    if model_type in QWEN_WINDOW or (on and r.has("max_window_layers")):
        # Qwen: layers from max_window_layers on use the window, and only with use_sliding_window.
        if not on:
            r.considered("sliding_window", "max_window_layers")
            return [False] * n
        first = r.int("max_window_layers", minimum=0)
        return [i >= first for i in range(n)]
    if on is False:   # the config says the window is off
        r.considered("sliding_window", "max_window_layers")
    if r.has("sliding_window") and (model_type in ALL_LAYER_WINDOW or on):
        return [True] * n
    return [False] * n


def _one_per_layer(key: str, n: int) -> list[str]:
    """The fix for a per-layer list whose length is not the model's layer count (AK506's
    catalog entry also lists the head-count fixes, which do not apply here)."""
    return [f"give {key} exactly one entry per layer (the model has {n})",
            "or correct the layer count (num_hidden_layers) if the list is right"]

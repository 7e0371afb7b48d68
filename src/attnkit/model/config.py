"""Hugging Face ``config.json`` -> ``ModelAttention``: what every attention layer needs.

One entry point, ``parse_config``: find where the attention fields live (``text_config`` for
multimodal wrappers), refuse what attnkit cannot serve (model/keys.py: the keys that change
attention, and what attnkit does with each), build the layers per family (model/families.py,
model/layouts.py), then refuse any attention key the build did not read. The field readers in
``_fields.py`` turn every missing, mistyped or out-of-range value into an AK5xx naming it.
"""
from __future__ import annotations

from attnkit.errors import AttnkitError
from attnkit.model import families
from attnkit.model._fields import ConfigReader
from attnkit.model.enforce import check_keys, refuse_keys
from attnkit.model.keys import ENCODERS, YARN_MLA, known_family
from attnkit.model.layouts import LAYERS
from attnkit.model.spec import ModelAttention
from attnkit.registry.capabilities import dtype_spelled

# transformers' config-class defaults for fields that real config.json files leave out.
MODEL_DEFAULTS: dict[str, dict] = {
    "gemma2": {"head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096},
    "gemma3_text": {"head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "max_position_embeddings": 131072},
    "qwen2": {"max_window_layers": 28},
    "qwen3": {"max_window_layers": 28},
    "llama4_text": {"head_dim": 128, "attention_chunk_size": 8192, "no_rope_layer_interval": 4,
                    "attn_temperature_tuning": True, "floor_scale": 8192, "attn_scale": 0.1,
                    "use_qk_norm": True},
    "qwen3_next": {"head_dim": 256, "full_attention_interval": 4, "attn_output_gate": True},
    "qwen3_5_text": {"head_dim": 256, "full_attention_interval": 4, "attn_output_gate": True},
    "qwen3_5_moe_text": {"head_dim": 256, "full_attention_interval": 4, "attn_output_gate": True},
    "jamba": {"attn_layer_period": 8, "attn_layer_offset": 4},
    "nemotron_h": {"head_dim": 128},
    "modernbert": {"global_attn_every_n_layers": 3, "local_attention": 128},
    "deepseek_v32": {"index_topk": 2048, "index_n_heads": 64, "index_head_dim": 128},
    "glm_moe_dsa": {"index_topk": 2048, "index_n_heads": 32, "index_head_dim": 128},
}
MLA_FAMILIES = YARN_MLA     # model types whose attention is always multi-head latent attention
RELATIVE_BIAS_FAMILIES = {"t5", "mt5", "umt5", "longt5", "switch_transformers", "pop2piano"}
# Encoder families whose attention adds position terms no attnkit backend computes.
DISENTANGLED = {"deberta", "deberta-v2", "sew-d"}


def _non_string_key(cfg: dict) -> tuple[str, object] | None:
    """(where, key) of the first non-string key of the config or of its text_config (the
    objects the parser reads by name and lists in messages), or None. Keys of other nested
    objects are not names attnkit reads (transformers' own to_dict() has int keys in id2label)."""
    for at, obj in (("", cfg), ("text_config", cfg.get("text_config") if all(
            isinstance(k, str) for k in cfg) else None)):
        for key in obj if isinstance(obj, dict) else ():
            if not isinstance(key, str):
                return at, key
    return None


def parse_config(cfg: object, *, name: str | None = None, source: str = "<dict>") -> ModelAttention:
    """Every attention layer of the model a parsed config.json describes.

    Raises AttnkitError (AK5xx) for configs that are malformed or that attnkit cannot serve.
    """
    return parse_traced(cfg, name=name, source=source)[0]


def parse_traced(cfg: object, *, name: str | None = None, source: str = "<dict>"
                 ) -> tuple[ModelAttention, frozenset[str]]:
    """``parse_config``, plus the path of every config field the parse read (tests use it)."""
    if not isinstance(cfg, dict):
        raise AttnkitError("AK502", f"a model config must be a JSON object, got "
                           f"{type(cfg).__name__} (in {source})", field=None,
                           expected="JSON object", actual=type(cfg).__name__,
                           details={"source": source})
    bad_key = _non_string_key(cfg)
    if bad_key is not None:          # JSON keys are strings; a dict built in Python may not be
        raise AttnkitError("AK502", f"a model config is a JSON object: its keys are strings, but "
                           f"{bad_key[0] or 'the top level'} has the key {bad_key[1]!r} "
                           f"({type(bad_key[1]).__name__}) (in {source})", field=bad_key[0] or None,
                           expected="string keys", actual=repr(bad_key[1])[:80], details={"source": source})
    top = ConfigReader(cfg, source=source)
    model_type = top.str("model_type", default="").lower()
    _reject_unservable(top, model_type)
    reader = ConfigReader(cfg, source=source, defaults=MODEL_DEFAULTS.get(model_type))
    if not _has_attention_fields(top) and top.has("text_config"):
        # Multimodal wrappers (Gemma-3, Llama-4, Qwen3.5, LLaVA ...) keep the language model in text_config.
        model_type = top.sub("text_config").str("model_type", default=model_type).lower()
        reader = top.sub("text_config", defaults=MODEL_DEFAULTS.get(model_type))
        _reject_unservable(reader, model_type)
    refuse_keys(reader, model_type)
    _reject_unknown_encoder(top, model_type)

    max_pos_key = "max_position_embeddings"
    if reader.has("encoder_layers") and reader.has("decoder_layers"):
        (layers, other), max_pos_key = families.encoder_decoder(reader), "max_target_positions"
    elif reader.has("kv_lora_rank") or model_type in MLA_FAMILIES:
        # an MLA family without kv_lora_rank is a broken config, not an MHA one (mla() names it)
        layers, other = families.mla(reader, model_type)
    elif reader.first(*families.HEADS, *LAYERS) is not None or model_type == "nemotron_h":
        layers, other = families.decoder(reader, model_type)   # it names whichever field is missing
    else:
        raise reader.error(
            "AK510", None,
            f"cannot find the attention layout of model_type {model_type or '(none)'!r}: looked for "
            f"{' / '.join(families.HEADS)} with {' / '.join(LAYERS)}, kv_lora_rank (MLA), "
            "encoder_layers + decoder_layers (encoder-decoder), and text_config",
            expected=list(families.HEADS + LAYERS), actual=sorted(cfg)[:20])
    if not layers:
        raise reader.error("AK510", None, f"model_type {model_type!r}: no layer of this config attends "
                           "(every layer is " + ", ".join(sorted({k for _, k in other})) + "); attnkit "
                           "plans attention only", expected="at least one attention layer", actual=0,
                           solutions=["a model without attention layers needs no attention backend: "
                                      "there is nothing to plan",
                                      "if some layers do attend, mark them in the config's layer list "
                                      "(layer_types, hybrid_override_pattern, attn_layer_indices ...)"])
    max_pos = reader.int(max_pos_key, default=None)
    notes = check_keys(reader, model_type)
    notes = [f"{reader.path(k)} not in config; used transformers' default {reader.defaults[k]!r}"
             for k in dict.fromkeys(reader.used_defaults)] + notes
    if model_type and not known_family(model_type):
        notes.append(f"model_type {model_type!r} is not a family attnkit knows: read by the generic decoder "
                     "rules (full causal attention over the heads, layers and head_dim it names); a key "
                     "other families use to change attention is refused (AK513), but one only this family "
                     "knows is not seen, so check the plan against the model's attention code")
    if model_type == "falcon_h1":
        notes.append("every layer runs a Mamba-2 mixer beside its attention (summed); the Mamba state "
                     "is not a KV cache and is not planned")
    vision = top.sub("vision_config") if top.has("vision_config") else None
    if vision is not None:
        kind = vision.cfg.get("model_type") or model_type
        notes.append(f"vision_config (model_type {kind!r}): a vision tower beside this language model, a "
                     "component of its own; plan() plans the language model only, `attnkit plan` (or "
                     "attnkit.planning.components) plans every component")
    architectures = top.list("architectures", default=[])
    arch = architectures[0] if architectures and isinstance(architectures[0], str) else model_type
    return ModelAttention(
        name=name or _default_name(top, model_type), architecture=arch or "unknown",
        layers=tuple(layers), dtype=_dtype(top, reader), max_position_embeddings=max_pos,
        source=source, notes=tuple(notes), other_layers=tuple(other)), frozenset(reader.trace)


def _has_attention_fields(r: ConfigReader) -> bool:
    return (r.first(*families.HEADS) is not None and r.first(*LAYERS) is not None) or (
        r.has("encoder_layers") and r.has("decoder_layers"))


def _reject_unservable(r: ConfigReader, model_type: str) -> None:
    """T5's relative position bias, DeBERTa's disentangled attention and ALiBi add per-pair
    terms to the scores that no attnkit backend computes (key-based cases: model/keys.py)."""
    if model_type in RELATIVE_BIAS_FAMILIES or model_type in DISENTANGLED:
        what = "T5-style learned relative position bias" if model_type in RELATIVE_BIAS_FAMILIES else \
            "disentangled (content-to-position) attention terms"
        raise r.error("AK508", "model_type", f"model_type {model_type!r} adds {what} to every attention "
                      "score; attnkit backends do not compute per-pair biases",
                      expected="rotary or absolute positions", actual=model_type)
    attn_config = r.sub("attn_config")
    alibi = (model_type == "bloom" or (attn_config is not None and attn_config.cfg.get("alibi") is True)
             # Baichuan's own code picks ALiBi for every size but the 7B (hidden_size 4096).
             or (model_type == "baichuan" and r.cfg.get("hidden_size") != 4096))
    if alibi:
        raise r.error("AK509", "model_type", f"model_type {model_type!r} uses ALiBi (a linear "
                      "position bias per head added to the scores); attnkit backends do not "
                      "compute ALiBi", expected="rotary or absolute positions", actual=model_type)


def _reject_unknown_encoder(top: ConfigReader, model_type: str) -> None:
    """A masked-LM of a family attnkit does not know would be planned as a causal decoder."""
    archs = [a for a in top.list("architectures", default=[]) if isinstance(a, str)]
    masked = [a for a in archs if a.endswith("ForMaskedLM")]
    if masked and model_type not in ENCODERS:
        raise top.error("AK513", "architectures", f"architectures names {masked[0]}, an encoder, but "
                        f"attnkit does not know how model_type {model_type or '(none)'!r} attends "
                        "(bidirectional? relative positions?); planning it as a causal decoder would "
                        "be wrong", expected=f"an encoder family attnkit models: {', '.join(ENCODERS)}",
                        actual=model_type, details={"needs": f"a rule for {model_type!r} in model/keys.py"})


def _dtype(top: ConfigReader, r: ConfigReader) -> str | None:
    """The dtype the config names, in attnkit's spelling where there is one; None if none."""
    for reader in (r, top):
        key = reader.first("torch_dtype", "dtype")
        if key is not None and isinstance(reader.cfg[key], str):
            raw = reader.cfg[key].strip().lower().removeprefix("torch.")
            return dtype_spelled(raw) or raw[:40] or None
    return None


def _default_name(top: ConfigReader, model_type: str) -> str:
    path = top.cfg.get("_name_or_path")
    if isinstance(path, str) and path:
        return path.rstrip("/").split("/")[-1] or model_type or "model"
    return model_type or "model"

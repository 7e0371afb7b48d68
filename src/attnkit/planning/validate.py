"""Reject a malformed ``ModelAttention`` (built by hand or by a bug) before planning: AK130."""
from __future__ import annotations

import math
from dataclasses import fields

from attnkit.errors import AttnkitError, preview
from attnkit.model.spec import (KINDS, OTHER_KINDS, ROLES, DualChunkConfig, LayerAttention, MLAConfig,
                                ModelAttention, SparseTopK)


def validate_model(model: object) -> None:
    """Raise AK130 naming the first bad field; planning assumes these hold."""
    if not isinstance(model, ModelAttention):
        raise AttnkitError("AK130", f"expected a ModelAttention, got {type(model).__name__}",
                           field="model", actual=type(model).__name__)
    name = model.name if isinstance(model.name, str) else repr(model.name)[:40]
    if not isinstance(model.name, str) or not isinstance(model.architecture, str):
        raise AttnkitError("AK130", f"model {name}: name and architecture must be strings", field="name",
                           actual=name)
    if model.dtype is not None and not isinstance(model.dtype, str):
        raise AttnkitError("AK130", f"model {name!r}: dtype must be a string or None, not "
                           f"{type(model.dtype).__name__}", field="dtype", actual=repr(model.dtype)[:40])
    if not isinstance(model.layers, (tuple, list)) or not model.layers:
        raise AttnkitError("AK130", f"model {name!r} has no attention layers", field="layers", actual=0)
    seen: set[int] = set()
    for layer in model.layers:
        problem = _layer_problem(layer)
        if problem is None and layer.layer_id in seen:
            problem = "layer_id", f"layer id {layer.layer_id} appears twice; each layer has its own KV cache"
        if problem:
            field, why = problem
            raise AttnkitError("AK130", f"model {name!r}: {why}", field=field,
                               actual=getattr(layer, "layer_id", None) if isinstance(layer, LayerAttention) else
                               type(layer).__name__)
        seen.add(layer.layer_id)
    problem = _other_layers_problem(model.other_layers)
    if problem:
        raise AttnkitError("AK130", f"model {name!r}: {problem}", field="other_layers",
                           actual=repr(model.other_layers)[:80])


MAX_SIZE = 1 << 31      # no head count, width or window comes near it (a larger one broke math.log2)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SIZE


def _positive_number(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def _layer_problem(layer: object) -> tuple[str, str] | None:
    if not isinstance(layer, LayerAttention):
        return "layers", f"a layer must be a LayerAttention, not {type(layer).__name__}"
    if not isinstance(layer.layer_id, int) or isinstance(layer.layer_id, bool) or not 0 <= layer.layer_id < MAX_SIZE:
        return "layer_id", f"layer_id must be an integer >= 0 (and < 2**31), not {preview(layer.layer_id)}"
    where = f"layer {layer.layer_id}"
    for name in ("num_heads", "num_kv_heads", "head_dim"):
        if not _positive_int(getattr(layer, name)):
            return name, f"{where} has {name}={preview(getattr(layer, name))}; expected an integer >= 1 (and <= 2**31)"
    if layer.num_heads % layer.num_kv_heads:
        return "num_kv_heads", (f"{where} has {layer.num_heads} query heads, not a multiple of "
                                f"{layer.num_kv_heads} KV heads")
    for name in ("v_head_dim", "sliding_window", "attention_chunk"):
        value = getattr(layer, name)
        if value is not None and not _positive_int(value):
            return name, f"{where} has {name}={preview(value)}; expected None or an integer >= 1 (and <= 2**31)"
    if layer.kind not in KINDS:
        return "kind", f"{where} has kind {layer.kind!r}; expected one of {', '.join(KINDS)}"
    if layer.role not in ROLES:
        return "role", f"{where} has role {layer.role!r}; expected one of {', '.join(ROLES)}"
    if (layer.kind == "mla") != (layer.mla is not None):
        return "mla", f"{where}: kind {layer.kind!r} needs mla set exactly when kind is 'mla'"
    for name, value in (("scale", layer.scale), ("logit_softcap", layer.logit_softcap)):
        if value is not None and not _positive_number(value):
            return name, f"{where} has {name}={value!r}; expected None or a finite number > 0"
    if not isinstance(layer.sinks, bool):
        return "sinks", f"{where} has sinks={layer.sinks!r}; expected true or false"
    for name, value, cls in (("mla", layer.mla, MLAConfig), ("dual_chunk", layer.dual_chunk, DualChunkConfig),
                             ("sparse_topk", layer.sparse_topk, SparseTopK)):
        problem = _sizes_problem(value, cls)
        if problem:
            return name, f"{where} has {name}.{problem}"
    if layer.dual_chunk is not None and layer.dual_chunk.local_size >= layer.dual_chunk.chunk_size:
        return "dual_chunk", f"{where}: dual_chunk.local_size must be smaller than chunk_size"
    return None


def _sizes_problem(value: object, cls: type) -> str | None:
    """Every integer field of an MLA / dual-chunk / DSA size record is >= 1 (optional ones may be
    None; original_max_position_embeddings may be 0)."""
    if value is None:
        return None
    if not isinstance(value, cls):
        return f"{type(value).__name__}; expected {cls.__name__}"
    for f in fields(cls):
        v = getattr(value, f.name)
        if v is None and f.default is None:
            continue
        lowest = 0 if f.name == "original_max_position_embeddings" else 1
        if isinstance(v, bool) or not isinstance(v, int) or not lowest <= v <= MAX_SIZE:
            return f"{f.name}={preview(v)}; expected an integer >= {lowest} (and <= 2**31)"
    return None


def _other_layers_problem(other: object) -> str | None:
    """(layer_id, kind) pairs; an id may also be an attention layer (both side by side)."""
    if not isinstance(other, (tuple, list)):
        return f"other_layers must be a tuple of (layer_id, kind) pairs, not {type(other).__name__}"
    ids: set[int] = set()
    for item in other:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], int)
                and not isinstance(item[0], bool) and item[0] >= 0 and item[1] in OTHER_KINDS):
            return f"other_layers entry {item!r:.60} is not (layer_id >= 0, one of {', '.join(OTHER_KINDS)})"
        if item[0] in ids:
            return f"other_layers lists layer {item[0]} twice"
        ids.add(item[0])
    return None

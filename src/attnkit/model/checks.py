"""What no attention layer can hold, torch-free: the rules a ``LayerAttention`` obeys whoever
made it. One owner for the planner (AK130, planning/validate.py) and the backends (AK419,
backends/validation.py), so a spec the planner refuses is refused at run time too.
"""
from __future__ import annotations

import math
from dataclasses import fields

from attnkit.errors import preview
from attnkit.model.spec import KINDS, ROLES, DualChunkConfig, LayerAttention, MLAConfig, SparseTopK

MAX_SIZE = 1 << 31      # no head count, width or window comes near it (a larger one broke math.log2)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SIZE


def _positive_number(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def layer_problem(layer: object) -> tuple[str, str] | None:
    """(field, why) of the first value no attention layer can have, else None."""
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
    if layer.sparse_topk is not None and (layer.kind != "mla" or layer.role != "decoder"):
        return "sparse_topk", (f"{where}: sparse_topk (DeepSeek sparse attention) is defined for causal "
                               f"MLA decoder layers, not kind {layer.kind!r} role {layer.role!r}")
    if layer.dual_chunk is not None and layer.dual_chunk.local_size >= layer.dual_chunk.chunk_size:
        return "dual_chunk", f"{where}: dual_chunk.local_size must be smaller than chunk_size"
    return None


def _sizes_problem(value: object, cls: type) -> str | None:
    """Every integer field of an MLA / dual-chunk / DSA size record is >= 1 (optional ones may be
    None; original_max_position_embeddings and local_size may be 0)."""
    if value is None:
        return None
    if not isinstance(value, cls):
        return f"{type(value).__name__}; expected {cls.__name__}"
    for f in fields(cls):
        v = getattr(value, f.name)
        if v is None and f.default is None:
            continue
        # 0 turns the length scale off; a dual chunk layout without a local window is one
        # (backends/dual_chunk/config.py: 0 <= local_size < chunk_size)
        lowest = 0 if f.name in ("original_max_position_embeddings", "local_size") else 1
        if isinstance(v, bool) or not isinstance(v, int) or not lowest <= v <= MAX_SIZE:
            return f"{f.name}={preview(v)}; expected an integer >= {lowest} (and <= 2**31)"
    return None

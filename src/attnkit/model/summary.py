"""A ModelAttention as the plan JSON's ``model_info``: which layers attend, how they differ.

``layer_groups`` gathers the attention layers that need the same thing (heads, dims, role,
window, chunk, DSA sizes, features), so a plan shows per-layer detail only where layers differ
(Gemma's local and global layers, Llama-4's chunked and global ones, Whisper's three roles).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from attnkit.model.spec import LayerAttention, ModelAttention

_SHOWN = ("num_heads", "num_kv_heads", "head_dim", "kind", "role", "sliding_window", "attention_chunk",
          "logit_softcap", "sinks")


def model_info(model: ModelAttention) -> dict[str, Any]:
    other: dict[str, list[int]] = {}
    for layer_id, kind in model.other_layers:
        other.setdefault(kind, []).append(layer_id)
    return {"name": model.name, "architecture": model.architecture, "kind": model.kind,
            "num_layers": len(model.layers), "source": model.source,
            "features": sorted(model.features()), "dtype": model.dtype, "phases": list(model.phases),
            "attention_layers": list(model.attention_layer_ids),
            "other_layers": {k: sorted(v) for k, v in other.items()},
            "layer_groups": layer_groups(model), "notes": list(model.notes)}


def layer_groups(model: ModelAttention) -> list[dict[str, Any]]:
    groups: dict[tuple, dict[str, Any]] = {}
    for layer in model.layers:
        d = _describe(layer)
        key = tuple(sorted((k, repr(v)) for k, v in d.items()))
        groups.setdefault(key, {**d, "layers": []})["layers"].append(layer.layer_id)
    return list(groups.values())


def _describe(layer: LayerAttention) -> dict[str, Any]:
    d: dict[str, Any] = {k: getattr(layer, k) for k in _SHOWN}
    d["v_head_dim"] = layer.value_dim
    d["softmax_scale"] = layer.softmax_scale
    d["features"] = sorted(layer.features())
    d["sparse_topk"] = dataclasses.asdict(layer.sparse_topk) if layer.sparse_topk else None
    d["dual_chunk"] = dataclasses.asdict(layer.dual_chunk) if layer.dual_chunk else None
    return d


def layer_ranges(ids: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8" (long lists keep the first six runs)."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs]
    return ", ".join(parts[:6]) + (f" (+{len(parts) - 6} more runs)" if len(parts) > 6 else "")

"""Reject a malformed ``ModelAttention`` (built by hand or by a bug) before planning: AK130."""
from __future__ import annotations

from attnkit.errors import AttnkitError
from attnkit.model.checks import layer_problem
from attnkit.model.spec import OTHER_KINDS, LayerAttention, ModelAttention


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
        problem = layer_problem(layer)
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

"""Reject a malformed ``ModelAttention`` (built by hand or by a bug) before planning: AK130."""
from __future__ import annotations

from attnkit.errors import AttnkitError
from attnkit.model.spec import KINDS, ROLES, LayerAttention, ModelAttention


def validate_model(model: object) -> None:
    """Raise AK130 naming the first bad field; planning assumes these hold."""
    if not isinstance(model, ModelAttention):
        raise AttnkitError("AK130", f"expected a ModelAttention, got {type(model).__name__}",
                           field="model", actual=type(model).__name__)
    if not isinstance(model.layers, (tuple, list)) or not model.layers:
        raise AttnkitError("AK130", f"model {model.name!r} has no attention layers", field="layers", actual=0)
    for layer in model.layers:
        problem = _layer_problem(layer)
        if problem:
            field, why = problem
            raise AttnkitError("AK130", f"model {model.name!r}: {why}", field=field,
                               actual=getattr(layer, "layer_id", None) if isinstance(layer, LayerAttention) else layer)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _layer_problem(layer: object) -> tuple[str, str] | None:
    if not isinstance(layer, LayerAttention):
        return "layers", f"a layer must be a LayerAttention, not {type(layer).__name__}"
    where = f"layer {layer.layer_id}"
    for name in ("num_heads", "num_kv_heads", "head_dim"):
        if not _positive_int(getattr(layer, name)):
            return name, f"{where} has {name}={getattr(layer, name)!r}; expected an integer >= 1"
    if layer.num_heads % layer.num_kv_heads:
        return "num_kv_heads", (f"{where} has {layer.num_heads} query heads, not a multiple of "
                                f"{layer.num_kv_heads} KV heads")
    if layer.v_head_dim is not None and not _positive_int(layer.v_head_dim):
        return "v_head_dim", f"{where} has v_head_dim={layer.v_head_dim!r}"
    if layer.kind not in KINDS:
        return "kind", f"{where} has kind {layer.kind!r}; expected one of {', '.join(KINDS)}"
    if layer.role not in ROLES:
        return "role", f"{where} has role {layer.role!r}; expected one of {', '.join(ROLES)}"
    if (layer.kind == "mla") != (layer.mla is not None):
        return "mla", f"{where}: kind {layer.kind!r} needs mla set exactly when kind is 'mla'"
    if layer.sliding_window is not None and not _positive_int(layer.sliding_window):
        return "sliding_window", f"{where} has sliding_window={layer.sliding_window!r}"
    if layer.logit_softcap is not None and not (isinstance(layer.logit_softcap, (int, float))
                                                and layer.logit_softcap > 0):
        return "logit_softcap", f"{where} has logit_softcap={layer.logit_softcap!r}"
    return None

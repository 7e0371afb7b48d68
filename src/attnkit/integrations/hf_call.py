"""One transformers attention call -> the ``RuntimeLayer`` attnkit runs, or AK491.

transformers calls an attention function with the layer's tensors and keyword arguments
(``scaling``, ``sliding_window``, ``softcap``, ``s_aux``, ``dropout``, ``is_causal`` and
whatever the model and the caller pass along). This module reads them against the plan:
the planned layer spec with the call's scale, window, softcap and sinks; anything attnkit
would otherwise ignore while eager applies it is refused, never dropped.
"""
from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import replace
from typing import Any

import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.errors import fail
from attnkit.integrations import hf_plan
from attnkit.model.summary import layer_ranges

# Keyword arguments some models pass that change what attention computes; attnkit has no
# equivalent, so a call carrying one (not None) is refused.
UNSERVED_KWARGS = {
    "position_bias": "an additive relative-position bias",
    "sinks": "per-token attention sinks",
    "indices": "sparse-attention key indices",
    "block_indices": "block-sparse attention indices",
    "head_mask": "a per-head mask of the attention weights",
}
NO_WEIGHTS_WARNING = (
    "attn_implementation='attnkit' returns no attention weights (as sdpa); load the model with "
    "attn_implementation='eager' for output_attentions=True")


def call_layer(module: torch.nn.Module, planned: hf_plan.Planned, query: torch.Tensor,
               key: torch.Tensor, value: torch.Tensor, *, dropout: float, scaling: float | None,
               sliding_window: int | None, softcap: float | None, s_aux: torch.Tensor | None,
               kwargs: dict[str, Any]) -> RuntimeLayer:
    """The call's layer: the planned spec with the call's scale, window, softcap and sinks.

    query: [B, H, Lq, D]; key: [B, H_kv, Lk, D]; value: [B, H_kv, Lk, D_v]; s_aux: [H] or None.
    """
    idx = _layer_index(module, planned)
    for name, what in UNSERVED_KWARGS.items():
        if kwargs.get(name) is not None:
            fail("AK491", f"layer {idx}: {type(module).__name__} passes {name} ({what}), which "
                          "attnkit backends do not apply; load this model with a transformers "
                          "implementation (attn_implementation='eager' or 'sdpa')",
                 field=name, expected=None, actual=type(kwargs[name]).__name__)
    if kwargs.get("output_attentions"):
        warnings.warn(NO_WEIGHTS_WARNING, UserWarning)
    base = next(l for l in planned.layers if l.layer_id == idx)
    got = {"heads": query.shape[1], "kv_heads": key.shape[1], "head_dim": query.shape[-1],
           "v_head_dim": value.shape[-1]}
    want = {"heads": base.num_heads, "kv_heads": base.num_kv_heads, "head_dim": base.head_dim,
            "v_head_dim": base.value_dim}
    if got != want:
        fail("AK491", f"layer {idx}: transformers passes {got}, the plan (from the config) has "
                      f"{want}", field=f"layers[{idx}]", expected=want, actual=got)
    if dropout:
        fail("AK491", f"layer {idx}: attention dropout {dropout} (training); attnkit backends "
                      "have no dropout: call model.eval()", field="dropout", expected=0.0,
             actual=dropout)
    causal = _causal(module, kwargs.get("is_causal"))
    if not causal:
        fail("AK491", f"layer {idx}: a non-causal call; attn_implementation='attnkit' serves "
                      "causal self-attention", field="is_causal", expected=True, actual=causal)
    scaling, sliding_window, softcap = _call_values(idx, scaling, sliding_window, softcap)
    if s_aux is not None and not isinstance(s_aux, torch.Tensor):
        fail("AK491", f"layer {idx}: s_aux (sinks) must be a tensor [heads], got "
                      f"{type(s_aux).__name__}", field="s_aux", expected="tensor [H] or None",
             actual=type(s_aux).__name__)
    spec = replace(base, scale=base.scale if scaling is None else scaling,
                   sliding_window=sliding_window, logit_softcap=softcap,
                   sinks=s_aux is not None)
    extra = sorted(spec.features() - base.features())
    if extra:
        _unplanned(module, idx, extra, base, spec)
    return RuntimeLayer(spec=spec, sinks=None if s_aux is None else s_aux.float())


def check_dense(idx: Any, query: Any, key: Any, value: Any) -> None:
    """AK491 unless query [B, H, Lq, D], key [B, H_kv, Lk, D] and value [B, H_kv, Lk, D_v] are
    4-D floating tensors of one dtype and device that agree on B, H_kv and Lk."""
    named = {"query": query, "key": key, "value": value}
    for name, t in named.items():
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not t.is_floating_point():
            what = (f"{t.dim()}-D {t.dtype} tensor" if isinstance(t, torch.Tensor)
                    else type(t).__name__)
            fail("AK491", f"layer {idx}: {name} must be a 4-D floating tensor [B, heads, L, D], "
                          f"got a {what}", field=name, expected="[B, heads, L, D] float",
                 actual=what)
    if query.shape[0] != key.shape[0] or key.shape[:3] != value.shape[:3] \
            or key.shape[-1] != query.shape[-1]:
        shapes = {n: list(t.shape) for n, t in named.items()}
        fail("AK491", f"layer {idx}: query, key and value disagree: {shapes} (expected "
                      "[B, H, Lq, D], [B, H_kv, Lk, D], [B, H_kv, Lk, D_v])", field="key",
             expected="[B, H, Lq, D], [B, H_kv, Lk, D], [B, H_kv, Lk, D_v]", actual=shapes)
    if len({t.dtype for t in named.values()}) > 1 or len({t.device for t in named.values()}) > 1:
        got = {n: f"{t.dtype} on {t.device}" for n, t in named.items()}
        fail("AK491", f"layer {idx}: query, key and value must share one dtype and device, got "
                      f"{got}", field="key", expected="one dtype and device", actual=got)
    if query.device.type == "meta":
        fail("AK491", f"layer {idx}: the call's tensors are on the meta device; run the model "
                      "on a real device", field="query", expected="cpu or cuda", actual="meta")


def _call_values(idx: int, scaling: Any, window: Any, softcap: Any) -> tuple:
    """(scale, window, softcap) of the call: scaling a finite number > 0 or None; window an
    int >= 1 or None; softcap a number > 0 (0 / None: none). AK491 otherwise."""
    def number(value: Any) -> float | None:
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None
        return float(value)

    if scaling is not None:
        scale = number(scaling)
        if scale is None or not math.isfinite(scale) or scale <= 0:
            fail("AK491", f"layer {idx}: scaling {scaling!r} is not a finite number > 0",
                 field="scaling", expected="finite float > 0 or None", actual=repr(scaling))
        scaling = scale
    if window is not None and (isinstance(window, bool) or not isinstance(window, numbers.Integral)
                               or window < 1):
        fail("AK491", f"layer {idx}: sliding_window {window!r} is not an int >= 1 (it counts the "
                      "query itself) or None", field="sliding_window", expected="int >= 1 or None",
             actual=repr(window))
    if softcap is not None and softcap != 0:
        cap = number(softcap)
        if cap is None or not math.isfinite(cap) or cap <= 0:
            fail("AK491", f"layer {idx}: softcap {softcap!r} is not a finite number > 0",
                 field="softcap", expected="float > 0 or None", actual=repr(softcap))
        softcap = cap
    return scaling, None if window is None else int(window), softcap or None


def _layer_index(module: torch.nn.Module, planned: hf_plan.Planned) -> int:
    """module.layer_idx, which every decoder self-attention layer of transformers has: the
    layer's index in the model, which is the planned layer's id (a hybrid's attention layers
    are not numbered 0..N-1)."""
    idx = getattr(module, "layer_idx", None)
    ids = [l.layer_id for l in planned.layers]
    shown = layer_ranges(ids)
    if isinstance(idx, int) and idx in ids:
        return idx
    name = type(module).__name__
    if not isinstance(idx, int):
        fail("AK491", f"{name} has no layer_idx ({idx!r}): it is not one of the decoder's "
                      "self-attention layers (a vision or audio tower, an encoder?), which are "
                      "all attn_implementation='attnkit' serves; give the other parts a "
                      "transformers implementation, e.g. attn_implementation={'text_config': "
                      "'attnkit', 'vision_config': 'sdpa'}", field="module.layer_idx",
             expected=shown, actual=idx)
    fail("AK491", f"{name}.layer_idx is {idx}; the plan (from the config) has attention layers {shown}",
         field="module.layer_idx", expected=shown, actual=idx)


def _unplanned(module: torch.nn.Module, idx: int, extra: list[str], base, spec) -> None:
    """AK491 for features the call needs and the plan lacks, with the fix that applies: a
    re-plan when the config now has them, else nothing attnkit can do for this model."""
    config = module.config
    now = {l.layer_id: l for l in hf_plan.config_layers(config)}
    if idx in now and set(extra) <= now[idx].features():
        fix = ("the config changed after the plan was made: re-plan with "
               "attnkit.integrations.transformers.plan_for_model(model)")
    else:
        fix = (f"attnkit's reading of this config (model_type "
               f"{getattr(config, 'model_type', None)!r}) does not have them, so no plan made from "
               "it can serve this model: load it with attn_implementation='eager' or 'sdpa'")
    fail("AK491", f"layer {idx}: transformers asks for {', '.join(extra)}, which the plan was "
                  f"not made for; {fix}", field=f"layers[{idx}]",
         expected=sorted(base.features()), actual=sorted(spec.features()))


def _causal(module: torch.nn.Module, is_causal: Any) -> bool:
    """The call's is_causal when given, else the module's (as transformers' SDPA reads it)."""
    value = getattr(module, "is_causal", True) if is_causal is None else is_causal
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = bool(value.item())
    if not isinstance(value, bool):
        fail("AK491", f"is_causal must be True or False, got {value!r}", field="is_causal",
             expected="bool", actual=repr(value))
    return value

"""One transformers attention call -> the ``AttentionLayer`` attnkit runs, or AK491.

transformers calls an attention function with the layer's tensors and keyword arguments
(``scaling``, ``sliding_window``, ``softcap``, ``s_aux``, ``dropout``, ``is_causal`` and
whatever the model and the caller pass along). This module reads them against the plan:
the planned layer spec with the call's scale, window, softcap and sinks; anything attnkit
would otherwise ignore while eager applies it is refused, never dropped.
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import torch

from attnkit.backends.base import AttentionLayer
from attnkit.errors import fail
from attnkit.integrations import hf_plan
from attnkit.planning.reasons import layer_ranges

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
               kwargs: dict[str, Any]) -> AttentionLayer:
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
    spec = replace(base, scale=base.scale if scaling is None else float(scaling),
                   sliding_window=sliding_window, logit_softcap=softcap or None,
                   sinks=s_aux is not None)
    extra = sorted(spec.features() - base.features())
    if extra:
        _unplanned(module, idx, extra, base, spec)
    return AttentionLayer(spec=spec, sinks=None if s_aux is None else s_aux.float())


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


def _causal(module: torch.nn.Module, is_causal: bool | None) -> bool:
    """The call's is_causal when given, else the module's (as transformers' SDPA reads it)."""
    return getattr(module, "is_causal", True) if is_causal is None else bool(is_causal)

"""torch_native's per-request math for MHA/GQA/MQA, and the softmax every form shares
(softcap, mask, sinks). Everything here is float32."""
from __future__ import annotations

import torch

from attnkit.backends.base import RuntimeLayer

F32 = torch.float32


def attend_mha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, layer: RuntimeLayer):
    """One request, float32. q: [n, H_q, D]; k: [S, H_kv, D]; v: [S, H_kv, D_v];
    mask: [n, S] bool | None -> [n, H_q, D_v]. GQA/MQA by viewing q heads as [H_kv, G]."""
    n, hq, d = q.shape
    s, hkv, dv = v.shape
    g = hq // hkv
    scores = torch.einsum("nkgd,skd->kgns", q.view(n, hkv, g, d), k)      # [H_kv, G, n, S]
    probs = softmax_probs(scores.reshape(hq, n, s) * layer.spec.softmax_scale, mask, layer)
    out = torch.einsum("kgns,skv->nkgv", probs.view(hkv, g, n, s), v)
    return out.reshape(n, hq, dv)


def softmax_probs(scores: torch.Tensor, mask, layer: RuntimeLayer) -> torch.Tensor:
    """scores: [H, n, S] scaled float32 -> probabilities [H, n, S].

    Softcap (cap * tanh(s / cap)) first, then the mask, then a softmax whose denominator
    also holds the head's sink logit; the sink column is dropped after, so it adds no value.
    """
    cap = layer.spec.logit_softcap
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    if not (layer.spec.sinks and layer.sinks is not None):
        return torch.softmax(scores, dim=-1)
    h, n, _ = scores.shape
    sink = layer.sinks.to(device=scores.device, dtype=F32).view(h, 1, 1).expand(h, n, 1)
    return torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]

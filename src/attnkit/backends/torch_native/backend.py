"""torch_native: paged attention as a loop over requests in plain torch ops.

Per request: gather its K/V pages through its block-table row (host lists in the metadata
keep the loop free of device syncs), dequantise to float32, compute scores, softmax and the
weighted sum in float32, and cast the result to q's dtype. MHA/GQA/MQA live here; MLA in
mla.py. Both share ``softmax_probs`` (softcap, mask, sinks).
"""
from __future__ import annotations

import functools

import torch

from attnkit.backends.base import AttentionBackend, AttentionLayer, StepState
from attnkit.backends.paged_torch import (kv_source, read_kv, refuse_unserved, visibility,
                                          write_step_kv)
from attnkit.backends.torch_native.declaration import DECLARATION
from attnkit.backends.validation import validate_forward

F32 = torch.float32
_CAPS = DECLARATION.capabilities


class TorchNativeBackend(AttentionBackend):
    """Any device, any head size; float32 math.

    mla_form: "auto" picks, per request, the cheaper of the absorbed and the decompressed
    (MHA) MLA form by FLOP count (see mla.py); "absorbed" / "mha" force one (tests use both).
    """

    name = "torch_native"

    def __init__(self, *, mla_form: str = "auto"):
        if mla_form not in ("auto", "absorbed", "mha"):
            raise ValueError(f"mla_form must be 'auto', 'absorbed' or 'mha', got {mla_form!r}")
        self.mla_form = mla_form

    def forward(self, q, k, v, layer: AttentionLayer, cache, step: StepState):
        """q: [T, H_q, D]; k/v: [T, H_kv, D|D_v] (MLA: latent [T, L + R], None; cross layers:
        encoder K/V [Te, ...] or None). Returns [T, H_q * D_v] in q.dtype."""
        meta, spec = step.meta, layer.spec
        refuse_unserved(self.name, layer, kinds=_CAPS.kinds, features=_CAPS.features)
        validate_forward(q, k, v, layer, cache, meta)
        write_step_kv(k, v, layer, cache, meta)
        dv = spec.mla.v_head_dim if spec.kind == "mla" else spec.value_dim
        num_tokens = meta.num_tokens
        out = q.new_zeros(num_tokens, spec.num_heads, dv)
        if num_tokens == 0:
            return out.reshape(0, spec.num_heads * dv)
        tables, kv_lens = kv_source(layer, meta)
        attend = self._attend_fn(layer)
        start = 0
        for i, n in enumerate(meta.query_lens_cpu):
            s = kv_lens[i]
            if n and s:                    # no keys (empty encoder): output stays zero
                k_i, v_i = read_kv(cache, layer, tables[i:i + 1], s, F32)     # [1, S, ...]
                mask = visibility(layer, [n], [s], [meta.prefix_lens_cpu[i]], device=q.device)
                out[start:start + n] = attend(
                    q[start:start + n].to(F32), k_i[0], None if v_i is None else v_i[0],
                    None if mask is None else mask[0], layer)
            start += n
        return out.reshape(num_tokens, spec.num_heads * dv)

    def _attend_fn(self, layer: AttentionLayer):
        if layer.spec.kind != "mla":
            return attend_mha
        from attnkit.backends.torch_native.mla import attend_mla

        return functools.partial(attend_mla, form=self.mla_form)


def attend_mha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, layer: AttentionLayer):
    """One request, float32. q: [n, H_q, D]; k: [S, H_kv, D]; v: [S, H_kv, D_v];
    mask: [n, S] bool | None -> [n, H_q, D_v]. GQA/MQA by viewing q heads as [H_kv, G]."""
    n, hq, d = q.shape
    s, hkv, dv = v.shape
    g = hq // hkv
    scores = torch.einsum("nkgd,skd->kgns", q.view(n, hkv, g, d), k)      # [H_kv, G, n, S]
    probs = softmax_probs(scores.reshape(hq, n, s) * layer.spec.softmax_scale, mask, layer)
    out = torch.einsum("kgns,skv->nkgv", probs.view(hkv, g, n, s), v)
    return out.reshape(n, hq, dv)


def softmax_probs(scores: torch.Tensor, mask, layer: AttentionLayer) -> torch.Tensor:
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

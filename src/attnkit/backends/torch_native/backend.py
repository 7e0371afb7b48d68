"""torch_native: paged attention as a loop over requests in plain torch ops.

Per request: gather its K/V pages through its block-table row (host lists in the metadata
keep the loop free of device syncs), dequantise to float32, compute scores, softmax and the
weighted sum in float32 (mha.py for MHA/GQA/MQA, mla.py for MLA), and cast the result to
q's dtype.
"""
from __future__ import annotations

import functools

from attnkit.backends.base import AttentionBackend, AttentionLayer, StepState, check_option
from attnkit.backends.paged_torch import begin_forward, kv_source, read_kv, visibility
from attnkit.backends.torch_native.declaration import DECLARATION
from attnkit.backends.torch_native.mha import F32, attend_mha
from attnkit.backends.torch_native.mla import attend_mla

_CAPS = DECLARATION.capabilities


class TorchNativeBackend(AttentionBackend):
    """Any device, any head size; float32 math.

    mla_form: "auto" picks, per request, the cheaper of the absorbed and the decompressed
    (MHA) MLA form by FLOP count (see mla.py); "absorbed" / "mha" force one (tests use both).
    """

    name = "torch_native"

    def __init__(self, *, mla_form: str = "auto"):
        check_option(self.name, "mla_form", mla_form, ("auto", "absorbed", "mha"))
        self.mla_form = mla_form

    def forward(self, q, k, v, layer: AttentionLayer, cache, step: StepState):
        """q: [T, H_q, D]; k/v: [T, H_kv, D|D_v] (MLA: latent [T, L + R], None; cross layers:
        encoder K/V [Te, ...] or None). Returns [T, H_q * D_v] in q.dtype."""
        meta, spec = step.meta, layer.spec
        dv = begin_forward(self.name, _CAPS, k, v, layer, cache, meta)
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
        return functools.partial(attend_mla, form=self.mla_form)

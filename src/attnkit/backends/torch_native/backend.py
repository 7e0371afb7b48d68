"""torch_native: paged attention as a loop over requests in plain torch ops.

Per request: gather its K/V rows through the slots its block-table row gives (host lists in
the metadata keep the loop free of device syncs), dequantise to float32, compute scores,
softmax and the weighted sum in float32 (mha.py for MHA/GQA/MQA, mla.py for MLA), and cast the
result to q's dtype. The slots and masks are built once per step (``PagedStep``) and shared
by every layer.
"""
from __future__ import annotations

import functools

import torch

from attnkit.backends.base import AttentionBackend, RuntimeLayer, StepState, check_option
from attnkit.backends.metadata import BatchMetadata
from attnkit.backends.paged_torch import (PagedStep, begin_forward, gather_kv, local_limits,
                                          paged_step, visibility)
from attnkit.backends.torch_native.declaration import DECLARATION
from attnkit.backends.torch_native.mha import F32, attend_mha
from attnkit.backends.torch_native.mla import attend_mla
from attnkit.backends.torch_native.sparse import nan_rows, topk_mask



class TorchNativeBackend(AttentionBackend):
    """Any device, any head size; float32 math.

    mla_form: "auto" picks, per request, the cheaper of the absorbed and the decompressed
    (MHA) MLA form by FLOP count (see mla.py); "absorbed" / "mha" force one (tests use both).
    """

    name = "torch_native"
    declaration = DECLARATION

    def __init__(self, *, mla_form: str = "auto"):
        check_option(self.name, "mla_form", mla_form, ("auto", "absorbed", "mha"))
        self.mla_form = mla_form

    def _varlen(self, q, k, v, layer: RuntimeLayer, batch):
        """Packed non-causal sequences without a cache (backends/varlen.py): per sequence, its
        attending keys (selected, not multiplied by zero), float32 math. -> [Tq, H_q * D_v]."""
        from attnkit.backends.varlen import visible_keys

        spec = layer.spec
        out = q.new_zeros(q.shape[0], spec.num_heads, spec.value_dim)
        for i in range(batch.num_seqs):
            qs, qe = batch.cu_q_cpu[i], batch.cu_q_cpu[i + 1]
            idx = visible_keys(batch, i)
            ks, ke = batch.cu_k_cpu[i], batch.cu_k_cpu[i + 1]
            k_i, v_i = (k[ks:ke], v[ks:ke]) if idx is None else (k.index_select(0, idx), v.index_select(0, idx))
            if qe > qs and k_i.shape[0]:
                out[qs:qe] = attend_mha(q[qs:qe].to(F32), k_i.to(F32), v_i.to(F32), None, layer).to(q.dtype)
        return out.reshape(q.shape[0], spec.num_heads * spec.value_dim)

    def _prepare(self, meta: BatchMetadata, cache) -> StepState:
        return StepState(meta=meta, prepared=PagedStep(meta))

    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState, *, indexer=None):
        """q: [T, H_q, D]; k/v: [T, H_kv, D|D_v] (MLA: latent [T, L + R], None; cross layers:
        encoder K/V [Te, ...] or None); indexer: a DSA layer's IndexerInputs (docs/dsa.md).
        Returns [T, H_q * D_v] in q.dtype."""
        meta, spec = step.meta, layer.spec
        dv = begin_forward(k, v, layer, cache, meta)
        if indexer is not None:
            cache.store_index(spec.layer_id, meta.slot_mapping, indexer.k)
        num_tokens = meta.num_tokens
        out = q.new_zeros(num_tokens, spec.num_heads, dv)
        if num_tokens == 0:
            return out.reshape(0, spec.num_heads * dv)
        paged = paged_step(step)
        index = paged.kv_index(layer, cache.page_size)
        attend = self._attend_fn(layer)
        q32 = q if q.dtype == F32 else q.to(F32)
        start = 0
        for i, n in enumerate(meta.query_lens_cpu):
            s = index.lens[i]
            if n and s:                    # no keys (empty encoder): output stays zero
                k_i, v_i = gather_kv(cache, layer, index.request_slots(i), F32)   # [S, ...]
                mask = _mask(paged, layer, i, n, s, q.device)
                blind = None
                if indexer is not None:
                    mask, blind = _selected(indexer, layer, cache, index, meta, i, start, n, mask)
                out[start:start + n] = attend(q32[start:start + n], k_i, v_i, mask, layer)
                if blind is not None:          # a non-finite index key seen: a NaN row
                    out[start:start + n][blind] = float("nan")
            start += n
        return out.reshape(num_tokens, spec.num_heads * dv)

    def _attend_fn(self, layer: RuntimeLayer):
        if layer.spec.kind != "mla":
            return attend_mha
        return functools.partial(attend_mla, form=self.mla_form)


def _selected(indexer, layer: RuntimeLayer, cache, index, meta, i: int, start: int, n: int, mask):
    """Request i's DSA mask [n, S] (its visibility mask, None: all, and the indexer's top-k)
    and [n] bool, its tokens that saw a non-finite index key (sparse.nan_rows)."""
    keys = cache.read_index(layer.layer_id, index.request_slots(i))          # [S, D_i] float32
    prefix = meta.prefix_lens_cpu[i]
    positions = torch.arange(prefix, prefix + n, device=keys.device)
    chosen = topk_mask(indexer.q[start:start + n], indexer.weights[start:start + n], keys,
                       positions, layer.spec.sparse_topk.topk)
    return (chosen if mask is None else chosen & mask), nan_rows(keys, positions)


def _mask(paged: PagedStep, layer: RuntimeLayer, i: int, n: int, s: int, device):
    """Request i's visibility [n, S] bool | None (n queries, S keys), built once per step for
    each kind of layer (self or cross, causal, window, chunk)."""
    spec = layer.spec
    key = ("request", i, spec.role == "cross", spec.causal, local_limits(layer))
    if key not in paged.masks:
        mask = visibility(layer, [n], [s], [paged.meta.prefix_lens_cpu[i]], device=device)
        paged.masks[key] = None if mask is None else mask[0]
    return paged.masks[key]

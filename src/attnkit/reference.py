"""The float64 dense reference every backend is checked against.

``attention(q, k, v, layer, cache, meta)`` computes one layer's attention for one step the
obvious way: build its own float64 copy of what the layer's cache must hold after the step
(``stored_kv``: the cached K/V read back by the documented convention, the step's new K/V
rounded to the cache dtype by this module's own code, not through ``cache.write``), read
each request's keys through its block table, and run a masked softmax per request in
float64. Only the slots a request owns, up to its length, are read. The caller's cache is
never modified. MLA uses the *unabsorbed* formula (per-head keys and values expanded from
the latent) so a backend's absorption mistakes show up.

Storage convention (docs/backends.md), written here again so that the cache's own code is
checked against it, not against itself: a non-fp8 cache stores ``value`` cast to its dtype;
an fp8 cache stores ``fp8(clamp(float32(value) / scale, -max, max))`` (round to nearest,
saturating at the format's largest finite value) and reads back ``stored * scale``, one
scale per layer and tensor (K, V; MLA: the latent uses the K scale).
"""
from __future__ import annotations

import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.backends.tables import slots_of
from attnkit.backends.metadata import BatchMetadata
from attnkit.backends.validation import validate_batch, validate_forward
from attnkit.backends.varlen import VarlenBatch, validate_varlen
from attnkit.errors import fail
from attnkit.kvcache.paged import PagedKVCache

F64 = torch.float64
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def attention(q: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor | None,
              layer: RuntimeLayer, cache: PagedKVCache, meta: BatchMetadata) -> torch.Tensor:
    """q: [T, H_q, D]; k: [T, H_kv, D] / v: [T, H_kv, D_v] (MLA: k latent [T, L + R], v None;
    cross layers: k/v are the encoder K/V [Te, ...] or None when already cached).
    Returns float64 [T, H_q * D_v]."""
    spec = getattr(layer, "spec", None)
    if getattr(spec, "dual_chunk", None) is not None:
        fail("AK420", "the dense reference computes plain attention, not dual chunk attention; "
                      "use the dual-chunk reference (tests/dual_chunk)",
             field="layer.dual_chunk", expected=None, actual=spec.dual_chunk)
    if getattr(spec, "sparse_topk", None) is not None:
        fail("AK420", "the dense reference attends to every key, not to a DSA layer's top-k; use "
                      "attnkit.reference_dsa.attention(..., indexer=...) (docs/dsa.md)",
             field="layer.sparse_topk", expected=None, actual=repr(spec.sparse_topk))
    validate_batch(meta, cache)
    validate_forward(q, k, v, layer, cache, meta)
    keys = stored_kv(k, v, layer, cache, meta)

    heads, dv = spec.num_heads, (spec.mla.v_head_dim if spec.kind == "mla" else spec.value_dim)
    out = torch.zeros(meta.num_tokens, heads, dv, dtype=F64, device=q.device)
    starts = meta.query_start_loc.tolist()
    for i in range(meta.num_reqs):
        qs, qe = starts[i], starts[i + 1]
        if spec.cross_attention:
            n_keys = meta.encoder_lens_cpu[i] if meta.encoder_lens_cpu is not None else 0
            row = _row(meta.encoder_block_tables_cpu, meta.encoder_block_tables, i)
            mask = None
        else:
            n_keys = meta.seq_lens_cpu[i]
            row = _row(meta.block_tables_cpu, meta.block_tables, i)
            mask = _self_mask(meta.prefix_lens_cpu[i], qe - qs, n_keys, spec, q.device)
        if n_keys == 0 or qe == qs:
            continue
        slots = torch.tensor(slots_of(row, range(n_keys), meta.page_size), device=q.device)
        scores, values = _scores_values(q[qs:qe].to(F64), keys, slots, layer)
        out[qs:qe] = _softmax_pv(scores, values, mask, layer)
    return out.reshape(meta.num_tokens, heads * dv)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: RuntimeLayer,
                     batch: VarlenBatch) -> torch.Tensor:
    """The varlen call (backends/varlen.py) densely in float64: sequence b's query rows
    cu_q[b] .. cu_q[b+1] attend to its key rows cu_k[b] .. cu_k[b+1] whose key_padding_mask
    is True; no other row of q, k or v is read. Output rows outside every sequence, and of a
    sequence without an attending key, are 0. Returns float64 [Tq, H_q * D_v]."""
    validate_varlen(q, k, v, layer, batch, backend="reference", features=("varlen",))
    spec = layer.spec
    out = torch.zeros(q.shape[0], spec.num_heads, spec.value_dim, dtype=F64, device=q.device)
    flags = batch.key_mask.tolist() if batch.key_mask is not None else None
    keys = (k.to(F64), v.to(F64))
    for i in range(batch.num_seqs):
        qs, qe = batch.cu_q_cpu[i], batch.cu_q_cpu[i + 1]
        rows = [j for j in range(batch.cu_k_cpu[i], batch.cu_k_cpu[i + 1]) if flags is None or flags[j]]
        if qe == qs or not rows:
            continue
        scores, values = _scores_values(q[qs:qe].to(F64), keys, torch.tensor(rows, device=q.device), layer)
        out[qs:qe] = _softmax_pv(scores, values, None, layer)
    return out.reshape(q.shape[0], spec.num_heads * spec.value_dim)


def stored_kv(k: torch.Tensor | None, v: torch.Tensor | None, layer: RuntimeLayer,
              cache: PagedKVCache, meta: BatchMetadata) -> tuple[torch.Tensor, ...]:
    """What the layer's cache must read back after this step, in float64, one row per slot
    [num_pages * page_size, ...]: (K, V), or (latent,) for MLA. The cache's current contents
    are read back by the module's convention, then the step's new K/V (k/v; None: nothing
    new) are rounded to the cache's dtype and stored at their slots. ``cache`` is unchanged."""
    spec = layer.spec
    lid = spec.layer_id
    names = ("latent",) if spec.kind == "mla" else ("k", "v")
    bufs = [getattr(cache, name)[lid] for name in names]
    scales = [float(cache.k_scales[lid]), float(cache.v_scales[lid])][:len(names)]
    rows = [read_back(buf, scale) for buf, scale in zip(bufs, scales)]
    if k is not None:
        slots = meta.encoder_slot_mapping if spec.cross_attention else meta.slot_mapping
        if slots is None:
            fail("AK415", "cross-attention K/V given but the batch has no encoder_slot_mapping; "
                          "build it with build_batch(..., encoder='write')",
                 field="meta.encoder_slot_mapping", expected="[sum encoder_lens] slots", actual=None)
        for row, new, buf, scale in zip(rows, (k, v), bufs, scales):
            row[slots.long()] = round_to_cache(new, buf.dtype, scale)
    return tuple(rows)


def read_back(buf: torch.Tensor, scale: float) -> torch.Tensor:
    """buf [num_pages, page_size, ...] as float64 rows [num_pages * page_size, ...]:
    ``stored * scale`` for fp8, the stored value otherwise."""
    rows = buf.reshape(-1, *buf.shape[2:]).to(F64)
    return rows * scale if buf.dtype in _FP8 else rows


def round_to_cache(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """x as a cache of ``dtype`` stores it and reads it back, in float64 (the convention above;
    torch's own casts do the rounding)."""
    if dtype in _FP8:
        top = torch.finfo(dtype).max
        stored = (x.to(torch.float32) / scale).clamp(-top, top).to(dtype)
        return stored.to(F64) * scale
    return x.to(dtype).to(F64)


def _row(host: list[list[int]] | None, table: torch.Tensor, i: int) -> list[int]:
    return host[i] if host is not None else table[i].tolist()


def _self_mask(prefix: int, n_q: int, n_keys: int, spec, device) -> torch.Tensor:
    """[n_q, n_keys] bool, True where key k is visible to the query at position p."""
    p = torch.arange(prefix, prefix + n_q, device=device)[:, None]
    kpos = torch.arange(n_keys, device=device)[None, :]
    visible = torch.ones(n_q, n_keys, dtype=torch.bool, device=device)
    if spec.causal:
        visible &= kpos <= p
    if spec.sliding_window is not None:
        visible &= (p - kpos) < spec.sliding_window
    if spec.attention_chunk is not None:              # chunked local: same chunk as the query
        visible &= (kpos <= p) & (kpos // spec.attention_chunk == p // spec.attention_chunk)
    return visible


def _scores_values(q: torch.Tensor, keys: tuple[torch.Tensor, ...], slots: torch.Tensor,
                   layer: RuntimeLayer) -> tuple[torch.Tensor, torch.Tensor]:
    """q: [n, H, D] float64 -> scores [H, n, n_keys] (scaled), values [n_keys, H, D_v]."""
    spec = layer.spec
    if spec.kind == "mla":
        mla = spec.mla
        lat = keys[0][slots]
        lat_c, k_pe = lat[:, :mla.kv_lora_rank], lat[:, mla.kv_lora_rank:]
        k_nope = torch.einsum("kl,hdl->khd", lat_c, layer.w_kc.to(F64))      # [n_keys, H, nope]
        values = torch.einsum("kl,hlv->khv", lat_c, layer.w_vc.to(F64))      # [n_keys, H, D_v]
        q_nope, q_pe = q[..., :mla.qk_nope_head_dim], q[..., mla.qk_nope_head_dim:]
        scores = (torch.einsum("nhd,khd->hnk", q_nope, k_nope)
                  + torch.einsum("nhr,kr->hnk", q_pe, k_pe))
    else:
        group = spec.num_heads // spec.num_kv_heads
        k_all = keys[0][slots].repeat_interleave(group, dim=1)
        values = keys[1][slots].repeat_interleave(group, dim=1)
        scores = torch.einsum("nhd,khd->hnk", q, k_all)
    return scores * spec.softmax_scale, values


def _softmax_pv(scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None,
                layer: RuntimeLayer) -> torch.Tensor:
    """scores [H, n, K], values [K, H, D_v] -> [n, H, D_v]. Softcap, mask, then a softmax
    whose denominator also holds the per-head sink (which contributes no value)."""
    cap = layer.spec.logit_softcap
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    if mask is not None:
        scores = scores.masked_fill(~mask[None], float("-inf"))
    peak = scores.amax(dim=-1, keepdim=True)                                  # [H, n, 1]
    sinks = None
    if layer.spec.sinks and layer.sinks is not None:
        sinks = layer.sinks.to(F64)[:, None, None].expand_as(peak)
        peak = torch.maximum(peak, sinks)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    weights = torch.exp(scores - peak)
    denom = weights.sum(dim=-1, keepdim=True)
    if sinks is not None:
        denom = denom + torch.exp(sinks - peak)
    probs = weights / torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.einsum("hnk,khv->nhv", probs, values)

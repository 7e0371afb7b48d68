"""sdpa: gather pages into a padded batch, then one scaled_dot_product_attention call.

Batched with padding and a mask rather than a loop over requests: one SDPA launch per layer
whatever the batch size, which is what makes decode of many requests tolerable on a GPU.
Layout per layer:
  q  [T, H_q, D]     -> [B, H_q, q_max, D]      (token grid built once per step in prepare; a
                                                 plain view when every request has q_max tokens)
  K/V pages          -> [B, H_kv, kv_max, D]    (one index through the step's cache slots,
                                                 paged_torch.KVIndex; dequantised)
  mask               -> [B, 1, q_max, kv_max]   bool, True = visible (see paged_torch.visibility);
                        omitted when nothing is masked, and replaced by is_causal for a single
                        square causal prefill so the flash kernel can run.
Padded query rows see every key (no empty softmax row) and are dropped afterwards.
Keys far from zero are centred first (``centre_keys``): a shift that every logit of a row
shares changes no softmax, and it keeps kernels whose running maximum starts at a finite
sentinel (FlashInfer #4450 / #4451) from taking a row whose logits all lie below it for an
empty row and returning zeros.
GQA/MQA use SDPA's enable_gqa where torch has it (>= 2.5), else K/V heads are repeated.
MLA: decode-like steps in absorbed form (the latent as one shared KV head, q absorbed
through w_kc, the output lifted through w_vc), long prefills decompressed into per-head
K/V; the cheaper by FLOP count (paged_torch.absorbed_is_cheaper).
A prefill without a cached prefix (every request's keys are this step's new tokens) runs SDPA
on the new K/V as given, with no page gather, when the cache stores them unrounded; the K/V
write into the cache happens all the same.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnkit.backends.base import AttentionBackend, RuntimeLayer, StepState, check_option
from attnkit.backends.metadata import BatchMetadata
from attnkit.backends.paged_torch import (PagedStep, absorbed_is_cheaper, begin_forward,
                                          decompress_latent, gather_kv, local_limits, select_out,
                                          visibility)
from attnkit.backends.sdpa.declaration import DECLARATION

HAS_ENABLE_GQA = torch.__version__ >= (2, 5)


@dataclass(slots=True)
class TokenGrid:
    """Where the step's ragged tokens sit in a [B, q_max] grid; built once per step.

    uniform:     every request has q_max tokens, so the grid is q viewed as [B, q_max, ...]
                 and the two indices below are not needed (None)
    q_index:     [B, q_max] int64  token of cell (b, j); padded cells point at token 0
    token_index: [T] int64         flat cell b * q_max + j of each real token, in token order
    paged:       the step's KV slots and masks (paged_torch.PagedStep)
    new_counts:  [B] float32, max(1, seq_lens[b]): the key counts of a step over its own new
                 keys (``centre_keys``), built by the first layer that needs them and reused,
                 so a captured step (warmed up first) copies nothing from the host
    """
    q_max: int
    uniform: bool
    q_index: torch.Tensor | None
    token_index: torch.Tensor | None
    paged: PagedStep
    new_counts: torch.Tensor | None = None

    @classmethod
    def build(cls, meta: BatchMetadata, device) -> "TokenGrid":
        q_lens = meta.query_lens_cpu
        q_max = max(q_lens, default=0)
        if all(n == q_max for n in q_lens):
            return cls(q_max, True, None, None, PagedStep(meta))
        rows, cells, start = [], [], 0
        for b, n in enumerate(q_lens):
            rows.append([start + j if j < n else 0 for j in range(q_max)])
            cells += range(b * q_max, b * q_max + n)
            start += n
        as_long = dict(dtype=torch.int64, device=device)
        return cls(q_max, False, torch.tensor(rows, **as_long).reshape(len(rows), q_max),
                   torch.tensor(cells, **as_long), PagedStep(meta))

    @property
    def masks(self) -> dict:
        """Visibility masks built this step (kept with the KV slots in ``paged``)."""
        return self.paged.masks

    @classmethod
    def of(cls, step: StepState, device) -> "TokenGrid":
        """``step.prepared`` if it is the grid of ``step.meta``; else a new one, kept in step.prepared
        (a StepState made without ``prepare``, or one holding another step's state)."""
        grid = step.prepared
        if not isinstance(grid, TokenGrid) or grid.paged.meta is not step.meta:
            grid = step.prepared = cls.build(step.meta, device)
        return grid


class SdpaBackend(AttentionBackend):
    """torch SDPA over gathered pages; no softcap, no sinks (refused with AK440).

    mla_form: "auto" takes, per step, the cheaper MLA form by FLOP count (paged_torch.
    absorbed_is_cheaper with the step's longest query): absorbed for decode-like steps,
    decompressed for long prefills; "absorbed" / "mha" force one (tests use both).
    """

    name = "sdpa"
    declaration = DECLARATION

    def __init__(self, *, mla_form: str = "auto"):
        check_option(self.name, "mla_form", mla_form, ("auto", "absorbed", "mha"))
        self.mla_form = mla_form

    def _varlen(self, q, k, v, layer: RuntimeLayer, batch):
        """Packed non-causal sequences without a cache (backends/sdpa/varlen.py)."""
        from attnkit.backends.sdpa.varlen import sdpa_varlen

        return sdpa_varlen(q, k, v, layer, batch, sdpa)

    def _prepare(self, meta: BatchMetadata, cache) -> StepState:
        return StepState(meta=meta, prepared=TokenGrid.build(meta, meta.query_start_loc.device))

    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState):
        """q: [T, H_q, D]; k/v: [T, H_kv, D|D_v] (MLA: latent [T, L + R], None; cross layers:
        encoder K/V [Te, ...] or None). Returns [T, H_q * D_v] in q.dtype."""
        meta, spec = step.meta, layer.spec
        dv = begin_forward(k, v, layer, cache, meta)
        num_tokens, heads = meta.num_tokens, spec.num_heads
        if num_tokens == 0:
            return q.new_zeros(0, heads * dv)
        grid = TokenGrid.of(step, q.device)
        if self._keys_are_new(grid, layer, meta, cache, k):
            return self._attend_new(q, k, v, grid, layer, meta)
        index = grid.paged.kv_index(layer, cache.page_size)
        kv_max = index.kv_max
        if kv_max == 0:
            return q.new_zeros(num_tokens, heads * dv)
        keys, values = gather_kv(cache, layer, index.slots, q.dtype)         # [B, need * ps, ...]
        # rows past a request's length are selected out: a masked logit still multiplies them
        keys = select_out(keys[:, :kv_max], index.padding)
        values = values if values is None else select_out(values[:, :kv_max], index.padding)
        lift = None
        if spec.kind == "mla":
            q, keys, values, lift = self._mla_operands(q, keys, layer, q_max=grid.q_max)
        mask, is_causal = self._mask(grid, layer, meta, index.lens, q.device)
        if grid.uniform:                            # the grid is q itself: no gather
            qp = q.contiguous().view(len(index.lens), grid.q_max, *q.shape[1:])
        else:
            qp = q[grid.q_index]
        qp = qp.transpose(1, 2)                                    # [B, H_q, q_max, D]
        # centred, the padded rows hold -c: zero them again so no masked logit is huge (q.c
        # overflows fp16 to inf, and a kernel adding a -inf mask to it gets NaN or 0)
        keys = select_out(centre_keys(keys, index.counts), index.padding)
        out = sdpa(qp, keys.transpose(1, 2), values.transpose(1, 2),
                   mask=mask, is_causal=is_causal, scale=spec.softmax_scale)  # [B, H_q, q_max, D_out]
        if index.any_empty:                         # no encoder keys: output is zero (as reference)
            empty = torch.tensor([n == 0 for n in index.lens], device=q.device)
            out = out.masked_fill(empty[:, None, None, None], 0)
        out = out.transpose(1, 2).flatten(0, 1)                    # [B * q_max, H_q, D_out]
        if not grid.uniform:
            out = out.index_select(0, grid.token_index)            # [T, H_q, D_out]
        if lift is not None:                        # absorbed MLA: latent context -> per-head value
            out = torch.einsum("thl,hlv->thv", out, lift)
        return out.reshape(num_tokens, heads * dv)

    @staticmethod
    def _keys_are_new(grid: TokenGrid, layer: RuntimeLayer, meta: BatchMetadata, cache, k) -> bool:
        """No request has a cached prefix (its keys are exactly its new tokens), the cache holds
        them unrounded (same dtype, so not fp8), requests are of equal length (q is the grid),
        and the layer attends over its own tokens with per-head K/V (MHA self-attention)."""
        spec = layer.spec
        return (grid.uniform and spec.kind == "mha" and spec.role != "cross" and k is not None
                and k.dtype == cache.dtype and not any(meta.prefix_lens_cpu))

    def _attend_new(self, q, k, v, grid: TokenGrid, layer: RuntimeLayer, meta: BatchMetadata):
        """SDPA over the step's own K/V: q [T, H_q, D], k/v [T, H_kv, D|D_v] -> [T, H_q * D_v]."""
        spec, b = layer.spec, len(meta.query_lens_cpu)
        mask, is_causal = self._mask(grid, layer, meta, meta.seq_lens_cpu, q.device)
        grid_view = lambda x: x.contiguous().view(b, grid.q_max, *x.shape[1:]).transpose(1, 2)  # noqa: E731
        if grid.new_counts is None:
            grid.new_counts = torch.tensor([max(1, n) for n in meta.seq_lens_cpu],
                                           dtype=torch.float32, device=q.device)
        keys = centre_keys(k.contiguous().view(b, grid.q_max, *k.shape[1:]), grid.new_counts)
        out = sdpa(grid_view(q), keys.transpose(1, 2), grid_view(v), mask=mask, is_causal=is_causal,
                   scale=spec.softmax_scale)                      # [B, H_q, q_max, D_v]
        return out.transpose(1, 2).reshape(meta.num_tokens, spec.num_heads * spec.value_dim)

    def _mla_operands(self, q, latent, layer: RuntimeLayer, *, q_max: int):
        """SDPA operands for MLA over latent [B, S, L + R]; -> (q, keys [B, S, H, *], values
        [B, S, H, *], lift), lift = w_vc [H, L, D_v] in absorbed form, else None.

        absorbed: one shared KV head (MQA): q = [q_nope @ w_kc, q_pe] [T, H, L + R], keys the
        latent rows, values their first L columns; the output is lifted with w_vc after.
        mha: per-head keys and values decompressed from the latent.
        """
        mla = layer.spec.mla
        w_kc, w_vc = (w.to(device=q.device, dtype=q.dtype) for w in (layer.w_kc, layer.w_vc))
        absorbed = self.mla_form == "absorbed" or (
            self.mla_form == "auto" and absorbed_is_cheaper(q_max, latent.shape[1], mla))
        if not absorbed:
            keys, values = decompress_latent(latent, w_kc, w_vc, mla.kv_lora_rank)
            return q, keys, values, None
        q_nope, q_pe = q[..., :mla.qk_nope_head_dim], q[..., mla.qk_nope_head_dim:]
        q_lat = torch.einsum("thd,hdl->thl", q_nope, w_kc)
        keys = latent.unsqueeze(2)                                     # [B, S, 1, L + R]
        return torch.cat([q_lat, q_pe], dim=-1), keys, keys[..., :mla.kv_lora_rank], w_vc

    @staticmethod
    def _mask(grid: TokenGrid, layer: RuntimeLayer, meta: BatchMetadata, kv_lens, device):
        """(mask [B, 1, q_max, kv_max] | None, is_causal); memoised per step."""
        spec = layer.spec
        limits = local_limits(layer)                # (window, chunk): None, None = no local limit
        key = (spec.role == "cross", spec.causal, limits)
        masks = grid.masks
        if key not in masks:
            q_lens, prefix = meta.query_lens_cpu, meta.prefix_lens_cpu
            square = (len(q_lens) == 1 and spec.causal and limits == (None, None)
                      and prefix[0] == 0 and q_lens[0] == kv_lens[0])
            if square:          # SDPA's is_causal is top-left aligned: right only when square
                masks[key] = (None, True)
            else:
                mask = visibility(layer, q_lens, kv_lens, prefix, device=device, q_max=grid.q_max)
                masks[key] = (None if mask is None else mask[:, None], False)
        return masks[key]


def centre_keys(keys: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """keys [B, S, H_k, D], rows past a request's count zero (select_out); counts [B] float32
    on keys' device (KVIndex.counts: no host copy here, so a captured step can run it) -> the
    keys less c, their mean
    over the request's rows, per (request, head) where the mean outweighs the spread
    (|c|^2 > mean |k - c|^2), else less 0 (the same bits). There every logit of a query row
    shares the offset q.c, and a kernel may take a row whose logits all lie below its finite
    sentinel (about -5e4) for an empty one (FlashInfer #4450 / #4451). Softmax drops a shift its
    row shares, and q.(k - c) has a row maximum >= 0 for a query that sees all its request's
    keys (decode); keys clustered at c subtract exactly (Sterbenz). No host sync: two
    reductions and one subtraction over the keys."""
    n = counts[:, None]
    mean = keys.sum(1, dtype=torch.float32) / n[..., None]                              # [B, H, D]
    squares = torch.linalg.vector_norm(keys, dim=-1, dtype=torch.float32).square().sum(1) / n
    offset = mean.square().sum(-1)                                                      # [B, H]
    far = offset > squares - offset                              # |c|^2 > mean |k|^2 - |c|^2
    shift = torch.where(far[..., None], mean, torch.zeros_like(mean)).to(keys.dtype)
    return keys - shift[:, None]


def sdpa(q, k, v, *, mask, is_causal: bool, scale: float):
    """q: [B, H_q, n, D]; k: [B, H_kv, S, D]; v: [B, H_kv, S, D_v]; mask: [B, 1, n, S] bool
    | None -> [B, H_q, n, D_v]. Query head h reads KV head h // (H_q / H_kv).

    enable_gqa rather than folding query heads into rows: on an H200 with torch 2.11 it was
    as fast as folding for unmasked decode and faster with a mask (ragged decode, extend),
    and 17x faster than repeating K/V heads for decode of 64 x 4k.
    """
    group = q.shape[1] // k.shape[1]
    extra = {}
    if group > 1 and HAS_ENABLE_GQA:
        extra["enable_gqa"] = True
    elif group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                          scale=scale, **extra)

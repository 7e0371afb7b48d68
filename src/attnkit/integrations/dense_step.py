"""One transformers attention call as one attnkit step over a paged KV cache.

transformers hands an attention function dense tensors: query ``[B, H, Lq, D]``, key / value
``[B, H_kv, Lk, D]`` (its own cache, already holding this call's keys) and a mask
``[B, 1, Lq, Lk]`` (boolean, True = attend, or additive float) or None. attnkit backends take
packed tokens and a paged cache. ``DenseLayout`` is the bridge, built from the mask alone:
``dense_mask.plan_mask`` turns the mask into the step's requests, each query at a position
whose causal (+ window) keys are exactly the keys the mask gives it, or refuses the mask
(AK491); this module lays those requests out in pages, copies the keys there and runs the
backend. Every query that sees a key gets what the masked softmax gives (right padding,
bidirectional blocks and packed sequences included); a query that sees no key (left padding)
gets a zero output, which reaches no real token.

No mask (transformers' "is_causal" shortcut, which it takes only without padding) means
what SDPA makes of it: one query sees every key; several queries are causal from key 0.

The layout depends on the mask only, so every layer handed the same mask object shares one
layout and the backend's ``prepare`` runs once per layout ("plan once, run many"); each layer
call copies its keys into a fresh paged cache and runs ``backend.forward``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnkit.backends.base import AttentionBackend, RuntimeLayer, StepState
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.metadata import BatchMetadata
from attnkit.integrations.dense_mask import MaskPlan, plan_mask, plan_unmasked, visible
from attnkit.kvcache.paged import PagedKVCache


@dataclass(slots=True)
class DenseLayout:
    """Where one call's dense rows go in the packed step (all index tensors int64).

    q_rows, q_cols:   [T] batch row and query index of each packed query token
    q_keys:           [T] key index (in Lk) of each packed token's own key
    kv_rows, kv_cols: [N] batch row and key index of each key the pages hold (a key may be
                      held more than once: shadows' last pages, chains)
    kv_slots:         [N] cache slot of each of them
    meta: the step's BatchMetadata, None when no query sees a key.
    """
    batch: int
    q_len: int
    page_size: int
    num_pages: int
    q_rows: torch.Tensor
    q_cols: torch.Tensor
    q_keys: torch.Tensor
    kv_rows: torch.Tensor
    kv_cols: torch.Tensor
    kv_slots: torch.Tensor
    meta: BatchMetadata | None
    steps: list = field(default_factory=list)      # [(backend, StepState)], prepared once

    @classmethod
    def of(cls, mask: torch.Tensor | None, *, batch: int, q_len: int, kv_len: int,
           window: int | None, page_size: int, device: torch.device) -> "DenseLayout":
        """mask: [B or 1, 1 or H, Lq, Lk] bool (True = attend) or additive float, or None."""
        if mask is None:
            planned = plan_unmasked(batch, q_len, kv_len)
        else:
            planned = plan_mask(visible(mask, batch, q_len, kv_len), window=window,
                                page_size=page_size)
        return cls._build(planned, batch=batch, q_len=q_len, page_size=page_size, device=device)

    @classmethod
    def _build(cls, planned: MaskPlan, *, batch, q_len, page_size, device) -> "DenseLayout":
        """Pages for each row's storage and each request's own keys, numbered in order."""
        kv_rows: list[int] = []
        kv_cols: list[int] = []
        kv_slots: list[int] = []

        def place(row: int, keys: list[int]) -> list[int]:
            first = -(-(kv_slots[-1] + 1) // page_size) if kv_slots else 0    # next free page
            kv_rows.extend([row] * len(keys))
            kv_cols.extend(keys)
            kv_slots.extend(range(first * page_size, first * page_size + len(keys)))
            return list(range(first, first + -(-len(keys) // page_size)))

        storage = [place(b, keys) if keys else [] for b, keys in enumerate(planned.storage)]
        reqs, q_rows, q_cols, q_keys = [], [], [], []
        for g in planned.groups:
            table = storage[g.row][:-(-g.shared // page_size)] + place(g.row, g.keys[g.shared:])
            t = len(g.queries)
            reqs.append(Request(prefix_len=len(g.keys) - t, num_new=t, block_table=table))
            q_rows += [g.row] * t
            q_cols += g.queries
            q_keys += g.keys[-t:]
        meta = build_batch(reqs, page_size=page_size, device=device) if reqs else None
        num_pages = -(-(kv_slots[-1] + 1) // page_size) if kv_slots else 1
        t64 = lambda x: torch.tensor(x, dtype=torch.int64, device=device)   # noqa: E731
        return cls(batch=batch, q_len=q_len, page_size=page_size, num_pages=num_pages,
                   q_rows=t64(q_rows), q_cols=t64(q_cols), q_keys=t64(q_keys),
                   kv_rows=t64(kv_rows), kv_cols=t64(kv_cols), kv_slots=t64(kv_slots), meta=meta)

    def run(self, backend: AttentionBackend, layer: RuntimeLayer, query: torch.Tensor,
            key: torch.Tensor, value: torch.Tensor, *, kv_dtype: torch.dtype) -> torch.Tensor:
        """query: [B, H, Lq, D]; key: [B, H_kv, Lk, D]; value: [B, H_kv, Lk, D_v].
        Returns [B, Lq, H, D_v] in query's dtype (zeros for query rows that see no key)."""
        heads, dv = query.shape[1], value.shape[-1]
        out = query.new_zeros(self.batch, self.q_len, heads, dv)
        if self.meta is None:
            return out
        q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)   # [B, L, H, D]
        cache = PagedKVCache([layer.spec], num_pages=self.num_pages, page_size=self.page_size,
                             dtype=kv_dtype, device=query.device)
        cache.write(layer.layer_id, self.kv_slots, k[self.kv_rows, self.kv_cols],
                    v[self.kv_rows, self.kv_cols])
        step = self._step(backend, cache)
        att = backend.forward(q[self.q_rows, self.q_cols], k[self.q_rows, self.q_keys],
                              v[self.q_rows, self.q_keys], layer, cache, step)   # [T, H * D_v]
        out[self.q_rows, self.q_cols] = att.view(-1, heads, dv).to(out.dtype)
        return out

    def _step(self, backend: AttentionBackend, cache: PagedKVCache) -> StepState:
        """The backend's per-step state, prepared on the first layer's cache; later layers'
        caches have the same pages, page size, dtype and device."""
        for owner, step in self.steps:
            if owner is backend:
                return step
        step = backend.prepare(self.meta, cache)
        self.steps.append((backend, step))
        return step


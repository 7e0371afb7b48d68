"""The float64 reference for DeepSeek sparse attention (DSA) layers, docs/dsa.md.

``attention(q, k, v, layer, cache, meta, indexer=...)`` computes one DSA layer's step the
obvious way, in float64: its own copy of the latent rows and indexer keys the cache must hold
after the step (the cached ones read back by the documented formats, the step's new ones
rounded by this module's code, never through the cache's ``store_index``), then per query
token the indexer score of every earlier token of its request, the top-k by the documented
rule (``selection``), and the layer's MLA attention, unabsorbed, over those tokens only; a
token whose indexer inputs, or one of the index keys it scores, hold a NaN or inf gets a NaN
row (``unscorable``). It
shares no code with any backend; the MLA part is ``attnkit.reference``'s.

Index-key storage, written here again (kvcache/index_keys.py holds the numbers): a compute
dtype stores the key cast to it; fp8 e4m3 stores fp8(clamp(k / scale, -448, 448)) with
scale = max(max |k|, 1e-4) / 448 per token, and reads back stored * scale.
"""
from __future__ import annotations

import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.backends.metadata import BatchMetadata
from attnkit.backends.sparse import IndexerInputs
from attnkit.backends.tables import slots_of
from attnkit.backends.validation import validate_batch, validate_forward, validate_indexer
from attnkit.errors import fail
from attnkit.kvcache.index_keys import INDEX_AMAX_FLOOR, INDEX_FP8_MAX
from attnkit.kvcache.paged import PagedKVCache
from attnkit.reference import _scores_values, _softmax_pv, stored_kv

F64 = torch.float64


def attention(q: torch.Tensor, k: torch.Tensor | None, v: None, layer: RuntimeLayer,
              cache: PagedKVCache, meta: BatchMetadata, *, indexer: IndexerInputs) -> torch.Tensor:
    """q: [T, H, nope + R] (rope part rotated); k: the new latent rows [T, L + R]; v: None;
    indexer: the step's IndexerInputs. Returns float64 [T, H * v_head_dim]."""
    spec = _checked(q, k, v, layer, cache, meta, indexer)
    keys = stored_kv(k, v, layer, cache, meta)                           # (latent rows,)
    chosen = selection(layer, cache, meta, indexer=indexer)
    heads, dv = spec.num_heads, spec.mla.v_head_dim
    out = torch.zeros(meta.num_tokens, heads, dv, dtype=F64, device=q.device)
    starts = meta.query_start_loc.tolist()
    for i in range(meta.num_reqs):
        qs, qe, n_keys = starts[i], starts[i + 1], meta.seq_lens_cpu[i]
        if qe == qs or n_keys == 0:
            continue
        mask = torch.zeros(qe - qs, n_keys, dtype=torch.bool, device=q.device)
        for j in range(qe - qs):
            mask[j, chosen[qs + j]] = True
        slots = torch.tensor(slots_of(meta.block_tables_cpu[i], range(n_keys), meta.page_size),
                             device=q.device)
        scores, values = _scores_values(q[qs:qe].to(F64), keys, slots, layer)
        out[qs:qe] = _softmax_pv(scores, values, mask, layer)
    blind = unscorable(layer, cache, meta, indexer=indexer)
    for t in range(meta.num_tokens):     # a NaN / inf indexer input or key: no selection to trust
        if blind[t] or not (torch.isfinite(indexer.q[t]).all() and torch.isfinite(indexer.weights[t]).all()):
            out[t] = float("nan")
    return out.reshape(meta.num_tokens, heads * dv)


def selection(layer: RuntimeLayer, cache: PagedKVCache, meta: BatchMetadata, *,
              indexer: IndexerInputs) -> list[list[int]]:
    """The positions (in its request, ascending) each of the step's T tokens attends to, by
    the indexer scores over the index keys the cache holds after the step. ``cache`` is
    unchanged. For token t at position p: every position 0..p when p + 1 <= topk, else the
    topk best by (score descending, position ascending)."""
    scores = index_scores(layer, cache, meta, indexer=indexer)
    topk = layer.spec.sparse_topk.topk
    return [_choose(row, topk) for row in scores]


def index_scores(layer: RuntimeLayer, cache: PagedKVCache, meta: BatchMetadata, *,
                 indexer: IndexerInputs) -> list[torch.Tensor]:
    """Per token t of the step, float64 [p + 1]: score[t, s] = sum_h w[t, h] relu(q[t, h] . k_s)
    over its request's positions s = 0..p, k_s read from this module's copy of the index keys."""
    keys = stored_index(indexer.k, layer, cache, meta)                  # [slots, D_i]
    iq, iw = indexer.q.to(F64), indexer.weights.to(F64)
    out: list[torch.Tensor] = []
    for t, slots in _visible_slots(meta, keys.device):
        ks = keys[slots]
        # per position, elementwise products summed over the head dim, then the weighted sum
        # over heads, each a reduction along a row: every position takes the same operations,
        # so equal keys tie exactly (a matmul, or a sum across rows, may round some columns
        # another way and break ties by noise)
        dots = (ks[:, None, :] * iq[t][None, :, :]).sum(dim=-1)              # [p + 1, H_i]
        out.append((dots.clamp(min=0) * iw[t][None, :]).sum(dim=-1))
    return out


def unscorable(layer: RuntimeLayer, cache: PagedKVCache, meta: BatchMetadata, *,
               indexer: IndexerInputs) -> list[bool]:
    """Per token t of the step: whether an index key it scores (its request's positions 0..p,
    as the cache holds them after the step, fp8 ones times their scale) holds a NaN or inf.
    Its scores are then not numbers to rank, so its output row is NaN (docs/dsa.md)."""
    bad = ~torch.isfinite(stored_index(indexer.k, layer, cache, meta)).all(dim=1)     # [slots]
    return [bool(bad[slots].any()) for _, slots in _visible_slots(meta, bad.device)]


def _visible_slots(meta: BatchMetadata, device):
    """(token, its request's slots of positions 0..p [p + 1] int64) for every token, in order."""
    starts = meta.query_start_loc.tolist()
    for i in range(meta.num_reqs):
        prefix, row = meta.prefix_lens_cpu[i], meta.block_tables_cpu[i]
        for j, t in enumerate(range(starts[i], starts[i + 1])):
            yield t, torch.tensor(slots_of(row, range(prefix + j + 1), meta.page_size), device=device)


def stored_index(k: torch.Tensor | None, layer: RuntimeLayer, cache: PagedKVCache,
                 meta: BatchMetadata) -> torch.Tensor:
    """The layer's index keys after this step as float64 rows [num_pages * page_size, D_i]:
    the cache's read back (fp8: stored * its token's scale), then the step's new keys k
    [T, D_i] (None: nothing new) rounded to the index dtype here and put at their slots."""
    lid = layer.spec.layer_id
    buf = cache.index_k[lid]
    rows = buf.reshape(-1, buf.shape[-1]).to(F64)
    fp8 = buf.dtype == torch.float8_e4m3fn
    if fp8:
        rows = rows * cache.index_k_scale[lid].reshape(-1, 1).to(F64)
    if k is not None:
        rows[meta.slot_mapping.long()] = _round_index(k, buf.dtype) if fp8 else k.to(buf.dtype).to(F64)
    return rows


def _round_index(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """k [T, D_i] as an fp8 index cache stores and reads it back, float64."""
    k32 = k.to(torch.float32)
    amax = torch.clamp(k32.abs().max(dim=1).values, min=INDEX_AMAX_FLOOR)
    scale = amax / INDEX_FP8_MAX                                          # float32, per token
    stored = torch.clamp(k32 / scale[:, None], -INDEX_FP8_MAX, INDEX_FP8_MAX).to(dtype)
    return stored.to(F64) * scale.to(F64)[:, None]


def _choose(scores: torch.Tensor, topk: int) -> list[int]:
    """scores [p + 1] -> the chosen positions, ascending (the documented rule)."""
    n = scores.shape[0]
    if n <= topk:
        return list(range(n))
    values = scores.tolist()
    # a NaN ranks first (the token's output is NaN anyway: ``unscorable``), so the order is total
    ranked = sorted(range(n), key=lambda s: (0, 0.0, s) if values[s] != values[s] else (1, -values[s], s))
    return sorted(ranked[:topk])


def _checked(q, k, v, layer, cache, meta, indexer):
    spec = getattr(layer, "spec", None)
    if getattr(spec, "sparse_topk", None) is None:
        fail("AK420", "reference_dsa computes DSA layers (spec.sparse_topk); use "
                      "attnkit.reference.attention for this layer",
             field="layer.sparse_topk", expected="SparseTopK", actual=None)
    validate_batch(meta, cache)
    validate_forward(q, k, v, layer, cache, meta)
    validate_indexer(indexer, layer, cache, meta, q)
    return spec

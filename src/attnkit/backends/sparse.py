"""DeepSeek sparse attention (DSA) at run time: what a DSA layer's forward is handed besides
q and the latent. Torch-free (plain data), so that the runner and every backend can name it;
the contract is docs/dsa.md.

A layer whose spec has ``sparse_topk`` (DeepSeek-V3.2, GLM-5) is MLA plus a lightning
indexer. Per step the model computes, for its new tokens, the indexer's queries, per-head
weights and keys, and hands them to ``backend.forward(..., indexer=IndexerInputs(...))``.
The backend writes ``k`` into the cache's ``index_k`` buffer through the step's slot mapping
(the latent's slots: one slot mapping), then, for query t at position p of its request,
scores every cached token s <= p of that request

    score[t, s] = sum_h weights[t, h] * relu(q[t, h] . k_s)

(k_s the cached key as read back: an fp8 value times its per-token scale, the format
kvcache/index_keys.py owns), keeps the ``topk`` best (ties go to the LOWER position; every
position 0..p while p + 1 <= topk) and runs the layer's MLA attention over those positions
only (its own softmax scale; the values are the first L latent columns, as for any MLA layer).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class IndexerInputs:
    """The indexer's inputs for one DSA layer and step (T = the step's new tokens).

    q:       [T, H_i, D_i]  the indexer's queries, rotary already applied, compute dtype
    weights: [T, H_i]       float32 per-head weights, every scale the model applies folded in
                            (DeepSeek-V3.2: weights_proj(x) * H_i**-0.5 * D_i**-0.5)
    k:       [T, D_i]       the new tokens' indexer keys (compute dtype), written into the
                            cache's index_k at the step's slot mapping (fp8 caches: per token)
    H_i, D_i are the layer's ``sparse_topk.index_n_heads`` / ``index_head_dim``.
    """
    q: Any
    weights: Any
    k: Any

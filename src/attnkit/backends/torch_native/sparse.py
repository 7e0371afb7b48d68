"""DSA for torch_native (docs/dsa.md): the indexer's top-k as a mask over a request's keys.

Per request: score its gathered index keys in float32, order each query's candidates by
(score descending, position ascending) with a stable sort, keep the first topk, and hand the
result to the MLA path (mla.py) as its visibility mask, so only the selected latent rows
reach the softmax (the others are masked out, never multiplied by zero).
"""
from __future__ import annotations

import torch

F32 = torch.float32


def topk_mask(q: torch.Tensor, weights: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor,
              topk: int) -> torch.Tensor:
    """One request. q: [n, H_i, D_i] and weights: [n, H_i] of its n new tokens, at absolute
    positions [n] (int64); keys: [S, D_i] float32 index keys of its positions 0..S-1.
    Returns [n, S] bool: True where the token attends (its topk, or all of 0..p when
    p + 1 <= topk)."""
    dots = torch.einsum("nhd,sd->nhs", q.to(F32), keys)                     # [n, H_i, S]
    # + 0.0 turns -0.0 (a negative weight times relu's 0) into 0.0: the same score, a tie
    scores = (weights.to(F32)[:, :, None] * dots.clamp(min=0)).sum(dim=1) + 0.0   # [n, S]
    s = keys.shape[0]
    causal = torch.arange(s, device=keys.device)[None, :] <= positions[:, None]
    scores = scores.masked_fill(~causal, float("-inf"))
    # stable: equal scores keep ascending position order, so ties go to the lower position
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :topk]
    chosen = torch.zeros_like(causal)
    chosen.scatter_(1, order, True)
    return chosen & causal          # rows with fewer than topk candidates picked -inf ones too

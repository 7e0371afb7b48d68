"""DSA for torch_native (docs/dsa.md): the indexer's top-k as a mask over a request's keys.

Per request: score its gathered index keys in float32, order each query's candidates by
(score descending, position ascending) with a stable sort, keep the first topk, and hand the
result to the MLA path (mla.py) as its visibility mask, so only the selected latent rows
reach the softmax (the others are masked out, never multiplied by zero). A token one of whose
visible index keys holds a NaN or inf (``nan_rows``) gets a NaN output row (docs/dsa.md).
"""
from __future__ import annotations

import torch

F32 = torch.float32
CHUNK_ELEMENTS = 1 << 24        # products held at once (n x keys x H_i x D_i), 64 MiB of float32


def index_scores(q: torch.Tensor, weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """q: [n, H_i, D_i], weights: [n, H_i], keys: [S, D_i] float32 -> scores [n, S]:
    sum_h weights * relu(q . k). Each score is reduced along the last dimension only (products
    over D_i, then over heads), so every key takes the same operations and equal keys score
    bitwise equal: a matmul may round some columns another way and break ties by noise. Keys
    go in chunks so the products stay within CHUNK_ELEMENTS."""
    n, h, d = q.shape
    step = max(1, CHUNK_ELEMENTS // max(1, n * h * d))
    out = []
    for s0 in range(0, keys.shape[0], step):
        dots = (q[:, None] * keys[None, s0:s0 + step, None]).sum(dim=-1)     # [n, c, H_i]
        out.append((dots.clamp(min=0) * weights[:, None]).sum(dim=-1))      # [n, c]
    # + 0.0 turns -0.0 (a negative weight times relu's 0) into 0.0: the same score, a tie
    return torch.cat(out, dim=1) + 0.0 if out else q.new_zeros(n, 0)


def topk_mask(q: torch.Tensor, weights: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor,
              topk: int) -> torch.Tensor:
    """One request. q: [n, H_i, D_i] and weights: [n, H_i] of its n new tokens, at absolute
    positions [n] (int64); keys: [S, D_i] float32 index keys of its positions 0..S-1.
    Returns [n, S] bool: True where the token attends (its topk, or all of 0..p when
    p + 1 <= topk)."""
    scores = index_scores(q.to(F32), weights.to(F32), keys)                # [n, S]
    s = keys.shape[0]
    causal = torch.arange(s, device=keys.device)[None, :] <= positions[:, None]
    scores = scores.masked_fill(~causal, float("-inf"))
    # stable: equal scores keep ascending position order, so ties go to the lower position
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :topk]
    chosen = torch.zeros_like(causal)
    chosen.scatter_(1, order, True)
    return chosen & causal          # rows with fewer than topk candidates picked -inf ones too


def nan_rows(keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """One request. keys: [S, D_i] float32 index keys of its positions 0..S-1 (as read back);
    positions: [n] int64 of its new tokens. Returns [n] bool: True where a key at a position
    <= the token's holds a NaN or inf (its scores cannot be ranked)."""
    bad = (~torch.isfinite(keys).all(dim=1)).to(torch.int8)                      # [S]
    return torch.cummax(bad, dim=0).values.bool()[positions]

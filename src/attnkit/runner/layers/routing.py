"""DeepSeek expert routers: which experts each token goes to, and with what weight.

Every router starts from the gate's logits ``l = x @ gate.weight^T`` in float32 ([T, E]),
turns them into scores, picks ``top_k`` experts per token, and scales their weights by
``routed_scaling_factor``. The variants (``DeepseekMoEConfig`` names one of each):

- scoring ``softmax`` (DeepSeek-V2) or ``sigmoid`` (DeepSeek-V3, Kimi-K2), elementwise;
- selection ``greedy``: the top_k scores;
  ``group_limited_greedy`` (V2): experts sit in n_group equal groups, a group counts its best
  score, the topk_group best groups stay and the other experts score 0, then the top_k;
  ``noaux_tc`` (V3): choosing uses ``scores + e_score_correction_bias`` (one learned float32
  bias per expert, for load balance), a group counts the sum of its two best biased scores,
  experts of dropped groups cannot be chosen; the weights are the *unbiased* scores of the
  chosen experts;
- ``norm_topk_prob`` (V3): weights divided by their sum (+ 1e-20) before the scaling.

Ties between equal scores go whichever way ``torch.topk`` puts them.
"""
from __future__ import annotations

from typing import Callable

import torch


def _softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits, dim=-1)


SCORING: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": _softmax, "sigmoid": torch.sigmoid}


def _kept_experts(scores: torch.Tensor, groups: int, keep: int,
                  group_score: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """scores: [T, E] -> [T, E] bool, True for the experts of each token's ``keep`` best
    groups; ``group_score`` maps [T, G, E/G] to [T, G]."""
    grouped = scores.view(scores.shape[0], groups, -1)                  # [T, G, E/G]
    best = group_score(grouped).topk(keep, dim=-1).indices               # [T, keep]
    kept = torch.zeros(grouped.shape[:2], dtype=torch.bool, device=scores.device)
    kept.scatter_(1, best, True)
    return kept[..., None].expand(grouped.shape).reshape(scores.shape)


def _greedy(scores, moe, bias):
    return scores.topk(moe.top_k, dim=-1)


def _group_limited_greedy(scores, moe, bias):
    kept = _kept_experts(scores, moe.num_groups, moe.topk_groups, lambda g: g.amax(dim=-1))
    return scores.masked_fill(~kept, 0.0).topk(moe.top_k, dim=-1)


def _noaux_tc(scores, moe, bias):
    biased = scores + bias                                               # for choosing only
    kept = _kept_experts(biased, moe.num_groups, moe.topk_groups,
                         lambda g: g.topk(2, dim=-1).values.sum(dim=-1))
    chosen = biased.masked_fill(~kept, float("-inf")).topk(moe.top_k, dim=-1).indices
    return scores.gather(1, chosen), chosen


SELECTION = {"greedy": _greedy, "group_limited_greedy": _group_limited_greedy,
             "noaux_tc": _noaux_tc}


def route(logits: torch.Tensor, moe, bias: torch.Tensor | None = None
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits: [T, E] float32; ``moe``: a DeepseekMoEConfig; bias: [E] float32 (noaux_tc's
    e_score_correction_bias) -> (weights [T, top_k] float32, experts [T, top_k] int64)."""
    scores = SCORING[moe.scoring](logits)
    weights, chosen = SELECTION[moe.topk_method](scores, moe, bias)
    if moe.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * moe.scaling, chosen

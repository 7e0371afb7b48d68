"""Choosing the next token: greedy, or temperature / top-k / top-p sampling with a seed.

    params = SamplingParams(temperature=0.8, top_p=0.9, seed=7, max_new_tokens=32)
    tokens = sample(logits, [params, greedy], [params.generator(), None])   # logits: [2, V]

Each sampled request owns a CPU ``torch.Generator`` seeded once; a step draws exactly one
uniform number from it per sampled token and picks the token by inverse CDF over the
request's filtered distribution. So a request's tokens depend on its seed and its own logits
only: not on which other requests share the batch, nor on the device the logits live on
(except where the device's float rounding moves a cumulative sum across the draw).
"""
from __future__ import annotations

import math
import numbers
import random
from dataclasses import dataclass
from typing import Sequence

import torch

from attnkit.errors import fail, preview
from attnkit.runner.engine.checks import check_count, coded_args
from attnkit.runner.engine.tokens import stop_ids

SEED_MAX = 2 ** 64 - 1          # torch.Generator.manual_seed's range


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How one request chooses tokens and when it stops.

    temperature: 0 is greedy (argmax); > 0 divides the logits before softmax.
    top_p: keep the smallest set of most likely tokens whose mass reaches top_p (1: all).
    top_k: keep the k most likely tokens (0, or k >= the vocabulary: all).
    seed: the request's generator seed (None: a fresh random one, recorded in its stats).
    max_new_tokens: stop after this many new tokens ("length").
    stop_token_ids: stop after producing one of these (kept in the output; "stop"); one id
    or a list, stored as a tuple."""
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_new_tokens: int = 16
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not _finite(t) or t < 0:
            _bad("temperature", t, "a finite number >= 0 (0 = greedy)")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 < p <= 1:
            _bad("top_p", p, "a number in (0, 1]")
        check_count("top_k", self.top_k, minimum=0, code="AK486")
        check_count("max_new_tokens", self.max_new_tokens, minimum=0, code="AK486")
        check_count("seed", self.seed, minimum=0, maximum=SEED_MAX, allow_none=True, code="AK486")
        object.__setattr__(self, "stop_token_ids", stop_ids(self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def generator(self, seed: int | None = None) -> torch.Generator | None:
        """A CPU generator seeded with ``seed`` (default: ``self.seed``); None when greedy."""
        if self.greedy:
            return None
        g = torch.Generator()
        g.manual_seed(self.seed if seed is None else seed)
        return g


# A misspelled field is AK486 naming the nearest one, not the dataclass's TypeError.
SamplingParams.__init__ = coded_args("AK486")(SamplingParams.__init__)


def fresh_seed() -> int:
    """A random seed for a request that named none (OS entropy; reported so it can be replayed)."""
    return random.SystemRandom().getrandbits(63)


@torch.no_grad()
def sample(logits: torch.Tensor, params: Sequence[SamplingParams],
           generators: Sequence[torch.Generator | None]) -> list[int]:
    """logits: [R, V] (any float dtype, any device), row i for a request with ``params[i]``
    and ``generators[i]`` (None for greedy rows). Returns R token ids."""
    out = [0] * len(params)
    greedy = [i for i, p in enumerate(params) if p.greedy]
    drawn = [i for i, p in enumerate(params) if not p.greedy]
    if greedy:
        from attnkit.runner.layers.fused import greedy as greedy_tokens

        rows = logits if len(greedy) == len(params) else logits[greedy]
        for i, t in zip(greedy, greedy_tokens(rows).tolist()):
            out[i] = t
    if drawn:
        chosen = _draw(logits[drawn].float(), [params[i] for i in drawn],
                       [generators[i] for i in drawn])
        for i, t in zip(drawn, chosen):
            out[i] = t
    return out


def _draw(logits: torch.Tensor, params: list[SamplingParams],
          generators: list[torch.Generator | None]) -> list[int]:
    """logits: [R, V] float32. Filter each row by top-k and top-p, then inverse-CDF sample."""
    dev, vocab = logits.device, logits.shape[-1]
    temp = torch.tensor([p.temperature for p in params], device=dev)
    top_p = torch.tensor([p.top_p for p in params], device=dev)
    # top_k >= vocab keeps every token (and would overflow an int64 tensor past 2**63)
    top_k = torch.tensor([min(p.top_k, vocab) or vocab for p in params], device=dev)
    u = torch.tensor([float(torch.rand((), generator=g)) for g in generators], device=dev)
    # Shift by the row max first: a tiny temperature sends (logits - max) / T to -inf, never
    # +inf, so the softmax stays finite (it becomes argmax); the clamp keeps T a float32 > 0.
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    probs = torch.softmax(shifted / temp.clamp_min(torch.finfo(torch.float32).tiny)[:, None], dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)   # [R, V]
    rank = torch.arange(vocab, device=dev)
    # A token is kept while the mass strictly before it is < top_p: the smallest prefix whose
    # mass reaches top_p (the most likely token is always kept).
    keep = ((sorted_p.cumsum(-1) - sorted_p) < top_p[:, None]) & (rank < top_k[:, None])
    cdf = (sorted_p * keep).cumsum(-1)
    target = (u * cdf[:, -1])[:, None]
    pos = torch.searchsorted(cdf, target, right=True)                    # first cdf > target
    pos = torch.minimum(pos, keep.sum(-1, keepdim=True) - 1)             # u*total rounding up
    return order.gather(-1, pos)[:, 0].tolist()


def _finite(x: numbers.Real) -> bool:
    """math.isfinite, False for an int too large for a float (10**5000) instead of OverflowError."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _bad(name: str, value: object, expected: str) -> None:
    fail("AK486", f"{name}={preview(value)} is not valid: expected {expected}", field=name,
         expected=expected, actual=preview(value))

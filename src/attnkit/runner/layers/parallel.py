"""Tensor parallelism inside the layers: which slice of each weight a rank holds, and the
collectives that put the slices' results back together (torch.distributed: NCCL on GPUs,
gloo on CPU).

    tp = TensorParallel(rank=1, size=2)            # SINGLE (rank 0 of 1) is no parallelism
    h0, h1 = tp.heads(32)                          # this rank's query heads: 16..32
    spec = tp.local(spec)                          # the layer as this rank's backend sees it
    y = tp.all_reduce(partial)                     # row-parallel outputs summed over ranks

The split (Megatron's): column-parallel q/k/v and gate/up (each rank computes its heads or
its slice of the intermediate), row-parallel o_proj / down_proj (each rank's partial product,
one all-reduce per block half), vocab-parallel embedding (each rank looks up the tokens of
its vocabulary slice, zeros elsewhere, one all-reduce) and LM head (each rank's vocabulary
slice of the logits, one all-gather). KV heads follow the planner's rule
(planning/rules.py tensor_parallel_rule): with at least as many KV heads as ranks each rank
holds its share; with fewer, rank r holds KV head ``r // (size / kv_heads)`` (replicated),
the one its query heads read. MLA keeps the whole latent on every rank.
With ``size == 1`` every method returns its input and every span is the whole tensor, so a
single-device engine runs exactly the ops it ran before.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from attnkit.errors import fail
from attnkit.model.spec import LayerAttention


@dataclass(frozen=True, slots=True)
class TensorParallel:
    """rank / size of this process in its tensor-parallel group; ``group``: the
    torch.distributed ProcessGroup of the model's collectives (None: the default group)."""
    rank: int = 0
    size: int = 1
    group: Any = None

    def span(self, n: int) -> tuple[int, int]:
        """This rank's slice [start, stop) of n rows split as evenly as possible (the first
        n % size ranks hold one more): vocabularies and intermediate widths."""
        base, extra = divmod(n, self.size)
        start = self.rank * base + min(self.rank, extra)
        return start, start + base + (self.rank < extra)

    def heads(self, n: int) -> tuple[int, int]:
        """This rank's query heads [start, stop) of n (the planner checked size divides n)."""
        if n % self.size:
            fail("AK305", f"{n} heads do not split over {self.size} ranks", field="tp_size",
                 expected=f"a divisor of {n}", actual=self.size)
        per = n // self.size
        return self.rank * per, (self.rank + 1) * per

    def kv_heads(self, n: int) -> tuple[int, int]:
        """This rank's KV heads [start, stop) of n: its share, or (fewer KV heads than ranks)
        the one KV head its query heads use, replicated on size / n ranks."""
        if self.size <= n:
            return self.heads(n)
        if self.size % n:
            fail("AK305", f"{n} KV heads do not replicate evenly over {self.size} ranks",
                 field="tp_size", expected=f"a multiple of {n}", actual=self.size)
        head = self.rank // (self.size // n)
        return head, head + 1

    def local(self, spec: LayerAttention) -> LayerAttention:
        """``spec`` with this rank's heads: the layer its backend and KV cache see (MLA: the
        heads split, the one latent row per token kept)."""
        if self.size == 1:
            return spec
        h0, h1 = self.heads(spec.num_heads)
        if spec.kind == "mla":
            return dataclasses.replace(spec, num_heads=h1 - h0)
        k0, k1 = self.kv_heads(spec.num_kv_heads)
        return dataclasses.replace(spec, num_heads=h1 - h0, num_kv_heads=k1 - k0)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of every rank's ``x`` (in place; x itself with one rank)."""
        if self.size > 1:
            import torch.distributed as dist

            dist.all_reduce(x, group=self.group)
        return x

    def all_gather(self, x: torch.Tensor, full: int) -> torch.Tensor:
        """x: [R, span(full) width] this rank's columns -> [R, full], every rank's columns in
        rank order (slices of uneven width are padded for the collective, then cut)."""
        if self.size == 1:
            return x
        import torch.distributed as dist

        widest = -(-full // self.size)
        if x.shape[-1] < widest:
            x = torch.cat([x, x.new_zeros(*x.shape[:-1], widest - x.shape[-1])], dim=-1)
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        widths = [TensorParallel(r, self.size).span(full) for r in range(self.size)]
        return torch.cat([p[..., :b - a] for p, (a, b) in zip(parts, widths)], dim=-1)


SINGLE = TensorParallel()


class RowParallel:
    """A linear map whose input features are split over the ranks: each rank multiplies its
    slice (``part``: weight [out, in slice], no bias), the partial products are summed
    (``reduce``; False leaves the sum to the caller, who adds other partials first) and the
    bias [out] is added once, after the sum (or, without the reduce, by rank 0 only)."""

    __slots__ = ("part", "bias", "tp", "reduce")

    def __init__(self, part, bias: torch.Tensor | None, tp: TensorParallel, *, reduce: bool = True):
        self.part, self.bias, self.tp, self.reduce = part, bias, tp, reduce
        if not reduce and tp.rank != 0:
            self.bias = None

    @property
    def weight(self) -> torch.Tensor:
        return self.part.weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = self.part(x)
        if self.reduce:
            y = self.tp.all_reduce(y)
        return y if self.bias is None else y + self.bias


def vocab_lookup(table: torch.Tensor, tokens: torch.Tensor, tp: TensorParallel,
                 start: int) -> torch.Tensor:
    """The vocab-parallel embedding: table [V slice, hidden] holds token ids start.. of this
    rank; tokens [T] int64 -> [T, hidden], every rank's rows summed (a token's row comes from
    the one rank holding it; the others add exact zeros, selected, not multiplied)."""
    if tp.size == 1:
        return table[tokens]
    local = tokens - start
    mine = (local >= 0) & (local < table.shape[0])
    rows = table[local.clamp(0, table.shape[0] - 1)]
    return tp.all_reduce(torch.where(mine[:, None], rows, torch.zeros_like(rows)))

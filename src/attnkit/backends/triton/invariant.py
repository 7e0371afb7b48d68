"""The triton backend's batch-invariant variants, split_fixed and paged_fixed (declaration.py).

A request's bits depend only on the request when (1) its decode splits are a fixed number of
keys each, ``split_keys`` (configs.split_keys) rounded up to whole tiles, from its own first
key on, whatever the grid's split count, and always merged in key order (decode_merge.py's
reduce_in_order; one split included: the decode kernel's own normalisation differs in its last
bits): split_fixed; (2) no kernel choice depends on the batch: a plan that requires
batch_invariant lists only these variants in its kernel tables; (3) a step of the extend kernel
(paged_fixed) runs its one-token rows over a cached prefix (a MIXED step's decodes) through the
split_fixed decode, as their DECODE steps do (``DecodeRows``). The paged extend kernel's own
reduction order is a request's: one program per BLOCK_M query rows of one request, its keys in
BLOCK_N tiles from the first, tiles fixed by head dim and dtype (configs.py), never by the batch.
Proven by tests/conformance/test_bitwise.py. ``batch_invariant=True`` spells both variants.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnkit.backends._triton import padded_dim
from attnkit.backends.metadata import BatchMetadata
from attnkit.backends.triton.decode import decode_attention, decode_span
from attnkit.errors import fail

# option -> what batch_invariant=True allows beside it (the fixed variant, by either name)
_ALLOWED = {"extend_variant": (None, "fixed"), "decode_variant": (None, "fixed")}


def fixed_splits(span: int, split_keys: int, block_n: int) -> tuple[int, int]:
    """(splits, chunk) covering ``span`` keys in chunks of ``split_keys`` rounded up to tiles."""
    chunk = -(-split_keys // block_n) * block_n
    return max(1, -(-span // chunk)), chunk


def check_invariant_options(kernels, extend_variant, decode_variant, num_splits) -> None:
    """batch_invariant=True runs split_fixed and paged_fixed: refuse a choice that brings
    another variant back (AK407). The variant options arrive as their internal names."""
    if kernels:
        fail("AK407", "triton: batch_invariant runs split_fixed and paged_fixed; kernel tables "
                      "pick variants per step (a plan with --require batch-invariant lists only "
                      "those two: pass its tables alone)", field="kernels", expected=None,
             actual=sorted(kernels))
    for option, value in (("extend_variant", extend_variant), ("decode_variant", decode_variant)):
        if value not in _ALLOWED[option]:
            fixed = "paged_fixed" if option == "extend_variant" else "split_fixed"
            fail("AK407", f"triton: {option}={value!r} does not keep a request's bits independent "
                          f"of its batch (it does not declare batch_invariant); leave it unset or "
                          f"name {fixed}", field=option, expected=[fixed], actual=value)
    if num_splits is not None:
        fail("AK407", "triton: num_splits sizes each request's splits by the batch's longest; "
                      "batch_invariant uses split_keys (keys per split) instead",
             field="num_splits", expected="None (use split_keys)", actual=num_splits)


@dataclass(slots=True)
class DecodeRows:
    """The decode-like requests of a paged_fixed step (one new token over a cached prefix: a
    MIXED step's decodes), as the decode kernel takes them, so that such a request's bits are
    those of its DECODE steps.

    requests: their indices; others: the other requests' (the extend kernel's)
    tokens: [Bd] int64 their token rows; seq_lens: [Bd] int32; block_tables: [Bd, P] int32
    """
    requests: list[int]
    others: list[int]
    tokens: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    partials: dict = field(default_factory=dict)

    @classmethod
    def of(cls, meta: BatchMetadata, plan) -> "DecodeRows | None":
        """The step's decode-like rows (None if none); ``plan``: its TritonStep (int32 tensors)."""
        rows = [i for i, (n, p) in enumerate(zip(meta.query_lens_cpu, meta.prefix_lens_cpu))
                if n == 1 and p > 0]
        if not rows:
            return None
        dev = plan.seq_lens.device
        index = torch.tensor(rows, dtype=torch.int64, device=dev)
        first = [0]                                  # each request's first token row
        for n in meta.query_lens_cpu:
            first.append(first[-1] + n)
        taken = set(rows)
        return cls(rows, [i for i in range(meta.num_reqs) if i not in taken],
                   torch.tensor([first[i] for i in rows], dtype=torch.int64, device=dev),
                   plan.seq_lens.index_select(0, index), plan.block_tables.index_select(0, index))

    def run(self, q, k_cache, v_cache, out, spec, seq_lens_cpu, *, config: dict, split_keys: int,
            qk_scale, v_scale, softcap, window, attention_chunk, sinks) -> None:
        """The decode kernel over these rows (their K/V already written) into their rows of
        ``out`` [T, H_q, D_v]; q: [T, H_q, D]."""
        spans = [decode_span(seq_lens_cpu[i], window, attention_chunk, config["BLOCK_N"])
                 for i in self.requests]
        splits, chunk = fixed_splits(max(spans), split_keys, config["BLOCK_N"])
        key = (spec.num_heads, splits)
        if key not in self.partials:
            f32 = dict(dtype=torch.float32, device=q.device)
            n, h, dv = len(self.requests), spec.num_heads, padded_dim(spec.value_dim)
            self.partials[key] = (torch.empty(n, h, splits, dv, **f32), torch.empty(n, h, splits, **f32),
                                  torch.empty(n, h, splits, **f32))
        part = out.new_empty(len(self.requests), *out.shape[1:])
        decode_attention(q.index_select(0, self.tokens), k_cache, v_cache, part,
                         seq_lens=self.seq_lens, block_tables=self.block_tables, num_splits=splits,
                         chunk=chunk, partials=self.partials[key], config=config, fixed_chunk=True,
                         qk_scale=qk_scale, v_scale=v_scale, softcap=softcap, window=window,
                         attention_chunk=attention_chunk, sinks=sinks)
        out.index_copy_(0, self.tokens, part)

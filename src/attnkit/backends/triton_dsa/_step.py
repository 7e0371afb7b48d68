"""Per-step index tensors of the triton_dsa backend, built once from the batch metadata's host
lists (no device synchronisation) and shared by every DSA layer of the step.

A static (CUDA-graph) decode step (``static_step``) holds no value a refill changes: each row is
one token of its own request (request = row, one token a score tile), its position and block
table are the metadata's own buffers, read in place, and the score width is the longest KV the
tables address (``max_seq_len``), so the score kernel's grid and the top-k's width are the same
at every replay; positions past a row's token score -inf and are never selected."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from attnkit.backends.metadata import BatchMetadata


@dataclass(slots=True)
class DSAStep:
    """token_request / token_position: [T] int32 (a static step's positions: int64), each new
    token's request and absolute position; block_tables: [B, P] int32; max_kv: the longest
    request's KV length (a static step: the longest its tables address); tiles: {block_t:
    (request [W] int32, first token [W] int32)} for the score kernel (tiles of up to block_t
    consecutive tokens of one request); max_query_len: the most new tokens of one request."""
    token_request: torch.Tensor
    token_position: torch.Tensor
    block_tables: torch.Tensor
    max_kv: int
    max_query_len: int
    tiles: dict
    tile_starts: list

    def chunks(self, max_tokens: int):
        """(first token, end token, first tile, end tile) of consecutive token ranges of at
        most ``max_tokens`` tokens (or one tile, if a tile is longer), cut at tile starts."""
        T = int(self.token_request.numel())
        starts = self.tile_starts + [T]
        first = 0
        for i in range(1, len(starts)):
            if i == len(starts) - 1 or starts[i + 1] - starts[first] > max_tokens:
                yield starts[first], starts[i], first, i
                first = i


def static_step(meta: BatchMetadata, *, max_seq_len: int) -> DSAStep:
    """The step of a static DECODE bucket of ``meta.num_reqs`` rows (StaticDecode's buffers):
    token_position is meta.positions [B] int64 and block_tables meta.block_tables [B, P]
    int32, both read in place; max_kv = ``max_seq_len``."""
    rows = torch.arange(meta.num_reqs, dtype=torch.int32, device=meta.block_tables.device)
    return DSAStep(rows, meta.positions, meta.block_tables, max_seq_len, 1, {1: (rows, rows)},
                   list(range(meta.num_reqs)))


def build_step(meta: BatchMetadata, device, *, head_rows: int, max_rows: int = 128) -> DSAStep:
    """The step's tensors; the score kernel's tiles hold up to ``max_rows // head_rows``
    tokens of one request (one token a tile in decode)."""
    qlens, prefix = list(meta.query_lens_cpu), list(meta.prefix_lens_cpu)
    req = [b for b, n in enumerate(qlens) for _ in range(n)]
    pos = [p + i for p, n in zip(prefix, qlens) for i in range(n)]
    longest = max(qlens, default=0)
    block_t = max(1, min(triton.next_power_of_2(max(longest, 1)), max_rows // head_rows))
    tile_req, tile_tok, start = [], [], 0
    for b, n in enumerate(qlens):
        for t in range(start, start + n, block_t):
            tile_req.append(b)
            tile_tok.append(t)
        start += n

    def i32(x):
        return torch.tensor(x, dtype=torch.int32, device=device)

    return DSAStep(i32(req), i32(pos), torch.as_tensor(meta.block_tables, device=device).to(torch.int32),
                   max(meta.seq_lens_cpu, default=0), longest,
                   {block_t: (i32(tile_req), i32(tile_tok))}, tile_tok)

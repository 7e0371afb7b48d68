"""Dual chunk attention of one request over contiguous K/V: three parts merged by LSE.

Chunk length cl; query p lies in chunk c = p // cl, which starts at a = c * cl. Its keys
split by chunk distance into
  intra      [a, p]            query variant 0, causal,
  successor  [a - cl, a)       query variant 1, no mask   (c >= 1),
  inter      [0, a - cl)       query variant 2, no mask   (c >= 2).
Each part gives (out, lse); the merge weighs part t by exp(lse_t - max) / sum_u exp(lse_u -
max), an empty part having lse = -inf. All queries of one chunk share the key ranges, so a
request's queries are handled chunk by chunk, three ``attend_part`` calls per chunk.
"""
from __future__ import annotations

import torch

F32 = torch.float32
NEG_INF = float("-inf")
# Cap on one block's logits (elements) so a long prefill never materialises [H, n, S] whole.
_LOGIT_BUDGET = 1 << 26


def attend_part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                causal_offset: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of q-rows over one key range, with its log-sum-exp.

    q: [n, H_q, D]; k: [m, H_kv, D]; v: [m, H_kv, D_v] (H_q a multiple of H_kv), float32.
    causal_offset: None for no mask; else key j is visible to row r iff j <= r + offset.
    -> out [n, H_q, D_v], lse [n, H_q] (natural log, of the scaled logits). A row that sees
    no key (or m == 0) gets out 0 and lse -inf, so it weighs nothing in a merge.
    """
    n, hq, d = q.shape
    m, hkv, dv = v.shape
    out = q.new_zeros(n, hq, dv)
    lse = q.new_full((n, hq), NEG_INF)
    if n == 0 or m == 0:
        return out, lse
    g = hq // hkv
    kt = k.permute(1, 2, 0)                                      # [H_kv, D, m]
    vh = v.permute(1, 0, 2)                                      # [H_kv, m, D_v]
    step = max(1, _LOGIT_BUDGET // (hq * m))
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        qb = q[r0:r1].reshape(r1 - r0, hkv, g, d).permute(1, 2, 0, 3).reshape(hkv, g * (r1 - r0), d)
        logits = torch.bmm(qb, kt).mul_(scale).view(hkv, g, r1 - r0, m)
        if causal_offset is not None:
            rows = torch.arange(r0, r1, device=q.device)[:, None]
            cols = torch.arange(m, device=q.device)[None, :]
            logits.masked_fill_(cols > rows + causal_offset, NEG_INF)
        blse = torch.logsumexp(logits, dim=-1)                   # [H_kv, G, nb]
        safe = torch.where(torch.isfinite(blse), blse, torch.zeros_like(blse))
        probs = torch.exp(logits - safe[..., None]).view(hkv, g * (r1 - r0), m)
        bout = torch.bmm(probs, vh).view(hkv, g, r1 - r0, dv)
        out[r0:r1] = bout.permute(2, 0, 1, 3).reshape(r1 - r0, hq, dv)
        lse[r0:r1] = blse.permute(2, 0, 1).reshape(r1 - r0, hq)
    return out, lse


def merge_parts(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge (out [n, H, D_v], lse [n, H]) parts of one softmax -> (out, lse), folding them
    one at a time into the first part's ``out`` (overwritten): two parts' outputs at a time."""
    out, lse = parts[0]
    for o, l in parts[1:]:
        out, lse = fold_part(out, lse, o, l)
    return out, lse


def fold_part(out: torch.Tensor, lse: torch.Tensor, o: torch.Tensor,
              l: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge part (o, l) into (out, lse) in place of ``out`` -> (out, new lse). Each output is
    normalised within its part, so the merge weighs part t by exp(lse_t - peak) / total; an
    empty part (lse -inf, out 0) weighs nothing."""
    peak = torch.maximum(lse, l)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    w_out, w_o = torch.exp(lse - peak), torch.exp(l - peak)
    total = w_out + w_o
    norm = torch.where(total > 0, total, torch.ones_like(total))
    out.mul_((w_out / norm)[..., None]).addcmul_(o, (w_o / norm)[..., None])
    return out, peak + torch.log(total)


def chunk_groups(q_start: int, n: int, chunk_len: int):
    """Split new rows 0..n-1 (positions q_start ..) by chunk: yields (r0, r1, a) for rows
    [r0, r1) lying in the chunk that starts at position a."""
    r0 = 0
    while r0 < n:
        a = ((q_start + r0) // chunk_len) * chunk_len
        r1 = min(n, a + chunk_len - q_start)
        yield r0, r1, a
        r0 = r1


def part_ranges(a: int, end: int, chunk_len: int) -> tuple[tuple[int, int], ...]:
    """Key ranges [lo, hi) of the intra, successor and inter parts for queries of the chunk
    starting at ``a`` whose last position is ``end - 1`` (an empty range: lo == hi)."""
    cl = chunk_len
    succ = max(a - cl, 0)
    return (a, end), (succ, a), (0, succ)


def dual_chunk_attend(q3: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_start: int,
                      chunk_len: int, scale: float) -> torch.Tensor:
    """DCA of one request's new queries over all of its keys, float32.

    q3: [n, 3, H_q, D] (intra, successor, inter variants) at positions q_start .. q_start+n-1;
    k: [S, H_kv, D] (chunk-local rotated), v: [S, H_kv, D_v] with S = q_start + n.
    -> [n, H_q, D_v]
    """
    n = q3.shape[0]
    out = q3.new_zeros(n, q3.shape[2], v.shape[-1])
    for r0, r1, a in chunk_groups(q_start, n, chunk_len):
        rows = q3[r0:r1]
        parts = []
        for part, (lo, hi) in enumerate(part_ranges(a, q_start + r1, chunk_len)):
            if hi > lo:    # intra is causal: its row r sees keys up to position q_start + r
                offset = q_start + r0 - a if part == 0 else None
                parts.append(attend_part(rows[:, part], k[lo:hi], v[lo:hi], scale=scale,
                                         causal_offset=offset))
        out[r0:r1] = merge_parts(parts)[0]
    return out

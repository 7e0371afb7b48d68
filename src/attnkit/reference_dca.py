"""The float64 dense reference for dual chunk attention (shared/DUAL_CHUNK.md), one request.

Built from the raw (unrotated) q and k, the positions and the DualChunkConfig — never from
the rotary or the backend: rotation and length scale are written out again here, in
float64, so the oracle shares no code with what it checks. For each query p, ONE softmax
over all keys k <= p of

    scale * <R(pos_variant(p)) q_p * s_q,  R(k % cl) k_k * s_k>

where the variant comes from the chunk distance d = p // cl - k // cl: d = 0 intra
(p % cl), d = 1 successor (min(p % cl + cl, cs)), d >= 2 inter (min(2cl - 1, cs)), and s is
the length scale max(1, 0.1 ln(L / omax) + 1) of the length L given for that token.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from attnkit.model.spec import DualChunkConfig

F64 = torch.float64


def dual_chunk_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                         config: DualChunkConfig, q_positions: Sequence[int], rope_base: float,
                         rotary_dim: int | None = None, scale: float | None = None,
                         q_lengths: int | Sequence[int] | None = None,
                         k_lengths: int | Sequence[int] | None = None,
                         cached_keys: torch.Tensor | None = None) -> torch.Tensor:
    """q: [n, H_q, D] raw queries at q_positions [n]; k: [m, H_kv, D] raw keys and
    v: [m, H_kv, D_v] at positions 0 .. m-1 (max(q_positions) < m).
    q_lengths / k_lengths: the length L each query / key was scaled with (an int for all, one
    per token, or None for s = 1). scale: softmax scale, default 1/sqrt(D).
    cached_keys: [m, H_kv, D] the keys as a KV cache holds them (already rotated at
    chunk-local positions and length-scaled, e.g. read back from fp8 pages, whose rounding
    then reaches the oracle as it reaches the backend); k and k_lengths are then unused.
    -> float64 [n, H_q, D_v]
    """
    n, hq, d = q.shape
    m, hkv, _ = k.shape
    dev = q.device
    cs, cl = config.chunk_size, config.chunk_size - config.local_size
    rd = d if rotary_dim is None else rotary_dim
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    p = torch.tensor(list(q_positions), dtype=torch.int64, device=dev)
    kpos = torch.arange(m, device=dev)
    omax = config.original_max_position_embeddings
    sq = _scales(q_lengths, n, omax, dev)
    sk = _scales(k_lengths, m, omax, dev)

    if cached_keys is None:
        keys = _rotate(k.to(F64), kpos % cl, rope_base, rd) * sk[:, None, None]
    else:
        keys = cached_keys.to(F64)
    keys = keys.repeat_interleave(hq // hkv, dim=1)                          # [m, H_q, D]
    values = v.to(F64).repeat_interleave(hq // hkv, dim=1)
    local = p % cl
    variant_pos = [local, torch.clamp(local + cl, max=cs), torch.full_like(p, min(2 * cl - 1, cs))]
    scores = torch.stack([
        torch.einsum("nhd,mhd->hnm", _rotate(q.to(F64), pos, rope_base, rd) * sq[:, None, None], keys)
        for pos in variant_pos])                                             # [3, H, n, m]
    dist = (p[:, None] // cl - kpos[None, :] // cl).clamp(0, 2)              # [n, m]
    chosen = scores.gather(0, dist[None, None].expand(1, hq, n, m))[0] * scale
    chosen = chosen.masked_fill(kpos[None, None, :] > p[None, :, None], float("-inf"))
    return torch.einsum("hnm,mhv->nhv", torch.softmax(chosen, dim=-1), values)


def _rotate(x: torch.Tensor, pos: torch.Tensor, base: float, rd: int) -> torch.Tensor:
    """Neox rotary in float64: x [N, H, D] at integer positions [N]."""
    inv_freq = base ** (-torch.arange(0, rd, 2, dtype=F64, device=x.device) / rd)
    ang = pos.to(F64)[:, None, None] * inv_freq                              # [N, 1, rd/2]
    x1, x2, rest = x[..., :rd // 2], x[..., rd // 2:rd], x[..., rd:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x2 * ang.cos() + x1 * ang.sin(), rest], -1)


def _scales(lengths, count: int, omax: int, device) -> torch.Tensor:
    """[count] float64 length scales; 1 where omax is 0 or L <= omax."""
    if lengths is None:
        lengths = [1] * count
    elif isinstance(lengths, int):
        lengths = [lengths] * count
    vals = [max(1.0, 0.1 * math.log(L / omax) + 1.0) if omax > 0 else 1.0 for L in lengths]
    return torch.tensor(vals, dtype=F64, device=device)

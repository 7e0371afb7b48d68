"""sdpa's varlen call (backends/varlen.py): packed non-causal sequences through SDPA.

Sequences of the same query and key length (a batch of equal videos, Qwen2.5-VL's full
windows) are stacked into one [n, H, S, D] call; without a key padding mask a group whose
sequences lie back to back is a plain view of the packed rows (others are copied), so a single
long sequence (B = 1, a DiT step) is one SDPA call on the tensors as given, torch picks its
flash / cuDNN kernel, and its output is returned as SDPA wrote it. With a mask each sequence
reads only its attending keys (selected, never multiplied by zero).
"""
from __future__ import annotations

import torch

from attnkit.backends.varlen import VarlenBatch, visible_keys


def sdpa_varlen(q, k, v, layer, batch: VarlenBatch, attend) -> torch.Tensor:
    """q: [Tq, H_q, D]; k: [Tk, H_kv, D]; v: [Tk, H_kv, D_v] -> [Tq, H_q * D_v].
    ``attend``: the backend's SDPA call (q, k, v as [B, H, S, D]; mask; is_causal; scale)."""
    spec = layer.spec
    rows, width = q.shape[0], spec.num_heads * spec.value_dim
    groups: dict[tuple[int, int], list[int]] = {}
    for i in range(batch.num_seqs):
        nq = batch.cu_q_cpu[i + 1] - batch.cu_q_cpu[i]
        nk = batch.cu_k_cpu[i + 1] - batch.cu_k_cpu[i]
        if nq and nk:                        # no keys: the output rows stay zero
            groups.setdefault((nq, nk) if batch.key_mask is None else (i, -1), []).append(i)
    if batch.key_mask is None and len(groups) == 1:
        (nq, nk), seqs = next(iter(groups.items()))
        starts = [batch.cu_q_cpu[i] for i in seqs]
        if starts[0] == 0 and _consecutive(starts, nq) and len(seqs) * nq == rows:
            return _group(q, k, v, batch, seqs, nq, nk, spec, attend).reshape(rows, width)   # every row: no copy
    out = q.new_zeros(rows, spec.num_heads, spec.value_dim)
    for (nq, nk), seqs in groups.items():
        if batch.key_mask is not None:
            (i,) = seqs
            idx = visible_keys(batch, i)
            if idx.numel() == 0:
                continue
            qs, qe = batch.cu_q_cpu[i], batch.cu_q_cpu[i + 1]
            res = attend(q[qs:qe].transpose(0, 1)[None], k.index_select(0, idx).transpose(0, 1)[None],
                         v.index_select(0, idx).transpose(0, 1)[None], mask=None, is_causal=False,
                         scale=spec.softmax_scale)
            out[qs:qe] = res[0].transpose(0, 1)
            continue
        res = _group(q, k, v, batch, seqs, nq, nk, spec, attend)
        for j, i in enumerate(seqs):
            out[batch.cu_q_cpu[i]:batch.cu_q_cpu[i] + nq] = res[j]
    return out.reshape(rows, width)


def _group(q, k, v, batch, seqs, nq, nk, spec, attend) -> torch.Tensor:
    """One SDPA call over the sequences ``seqs`` (nq queries, nk keys each) -> [n, nq, H_q, D_v]."""
    q_starts, k_starts = [batch.cu_q_cpu[i] for i in seqs], [batch.cu_k_cpu[i] for i in seqs]
    qi, ki, vi = (_stacked(t, starts, n).transpose(1, 2)
                  for t, starts, n in ((q, q_starts, nq), (k, k_starts, nk), (v, k_starts, nk)))
    return attend(qi, ki, vi, mask=None, is_causal=False, scale=spec.softmax_scale).transpose(1, 2)


def _consecutive(starts: list[int], n: int) -> bool:
    return all(b - a == n for a, b in zip(starts, starts[1:]))


def _stacked(t: torch.Tensor, starts: list[int], n: int) -> torch.Tensor:
    """[len(starts), n, H, D]: the rows starts[j] .. + n of ``t`` for each j; a view where the
    sequences lie back to back (one DiT sequence, a run of equal windows), else a copy."""
    if _consecutive(starts, n):
        return t[starts[0]:starts[0] + len(starts) * n].unflatten(0, (len(starts), n))
    return torch.stack([t[a:a + n] for a in starts])

"""sdpa's varlen call (backends/varlen.py): packed non-causal sequences through SDPA.

Sequences of the same query and key length (a batch of equal videos, Qwen2.5-VL's full
windows) are stacked into one [n, H, S, D] call; without a key padding mask each group is a
plain view of the packed rows, so a single long sequence (B = 1, a DiT step) is one SDPA call
on the tensors as given, and torch picks its flash / cuDNN kernel. With a mask each sequence
reads only its attending keys (selected, never multiplied by zero).
"""
from __future__ import annotations

import torch

from attnkit.backends.varlen import VarlenBatch, visible_keys


def sdpa_varlen(q, k, v, layer, batch: VarlenBatch, attend) -> torch.Tensor:
    """q: [Tq, H_q, D]; k: [Tk, H_kv, D]; v: [Tk, H_kv, D_v] -> [Tq, H_q * D_v].
    ``attend``: the backend's SDPA call (q, k, v as [B, H, S, D]; mask; is_causal; scale)."""
    spec = layer.spec
    out = q.new_zeros(q.shape[0], spec.num_heads, spec.value_dim)
    groups: dict[tuple[int, int], list[int]] = {}
    for i in range(batch.num_seqs):
        nq = batch.cu_q_cpu[i + 1] - batch.cu_q_cpu[i]
        nk = batch.cu_k_cpu[i + 1] - batch.cu_k_cpu[i]
        if nq and nk:                        # no keys: the output rows stay zero
            groups.setdefault((nq, nk) if batch.key_mask is None else (i, -1), []).append(i)
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
        qi = torch.stack([q[batch.cu_q_cpu[i]:batch.cu_q_cpu[i] + nq] for i in seqs]).transpose(1, 2)
        ki = torch.stack([k[batch.cu_k_cpu[i]:batch.cu_k_cpu[i] + nk] for i in seqs]).transpose(1, 2)
        vi = torch.stack([v[batch.cu_k_cpu[i]:batch.cu_k_cpu[i] + nk] for i in seqs]).transpose(1, 2)
        res = attend(qi, ki, vi, mask=None, is_causal=False, scale=spec.softmax_scale).transpose(1, 2)
        for j, i in enumerate(seqs):
            out[batch.cu_q_cpu[i]:batch.cu_q_cpu[i] + nq] = res[j]
    return out.reshape(q.shape[0], spec.num_heads * spec.value_dim)

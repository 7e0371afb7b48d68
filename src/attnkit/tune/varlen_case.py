"""A varlen bucket as a real call: packed q / k / v of ``batch`` sequences of ``new`` tokens
(self-attention, non-causal, no KV cache: backends/varlen.py), the work it does, and the check
of a backend's output against the float64 reference.

The check runs attnkit.reference.varlen_attention on sampled query rows (first, middle and last
of the first, middle and last sequence) over those sequences' whole keys: a non-causal query
sees every key of its sequence, so a few rows cost little next to the call even at 75,600
tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from attnkit import reference
from attnkit.backends.base import RuntimeLayer
from attnkit.backends.varlen import VarlenBatch, varlen_batch
from attnkit.kvcache.paged import TORCH_KV_DTYPES
from attnkit.model.spec import LayerAttention
from attnkit.planning.profile import Bucket, Shape


@dataclass
class VarlenCase:
    bucket: Bucket
    layer: RuntimeLayer
    batch: VarlenBatch
    q: torch.Tensor                   # [B * new, H_q, D]
    k: torch.Tensor                   # [B * new, H_kv, D]
    v: torch.Tensor                   # [B * new, H_kv, D_v]

    def call(self, backend):
        """The timed call: ``backend.varlen`` -> [T, H_q * D_v]."""
        return backend.varlen(self.q, self.k, self.v, self.layer, self.batch)


def layer_spec(s: Shape) -> LayerAttention:
    """A non-causal self-attention layer of shape ``s`` (layer id 0)."""
    return LayerAttention(layer_id=0, num_heads=s.heads, num_kv_heads=s.kv_heads, head_dim=s.head_dim,
                          v_head_dim=s.v_head_dim, role="encoder")


def make_case(b: Bucket, device: str, *, seed: int = 0) -> VarlenCase:
    gen = torch.Generator(device=device).manual_seed(seed)
    s, dt = b.shape, TORCH_KV_DTYPES[b.shape.dtype]
    t = b.batch * b.new
    rand = lambda *d: torch.randn(*d, generator=gen, device=device, dtype=dt)  # noqa: E731
    cu = torch.arange(0, t + 1, b.new, dtype=torch.int32, device=device)
    return VarlenCase(b, RuntimeLayer(spec=layer_spec(s)), varlen_batch(cu), rand(t, s.heads, s.head_dim),
                      rand(t, s.kv_heads, s.head_dim), rand(t, s.kv_heads, s.v_head_dim))


def work(b: Bucket) -> float:
    """FLOPs of QK^T and PV over every (query, key) pair of each sequence."""
    s = b.shape
    return float(2 * s.heads * b.batch * b.new * b.context * (s.head_dim + s.v_head_dim))


def check(case: VarlenCase, out: torch.Tensor) -> float:
    """Worst relative error of ``out`` [T, H_q * D_v] over the sampled query rows."""
    b = case.bucket
    seqs = sorted({0, b.batch // 2, b.batch - 1})
    offs = sorted({0, b.new // 2, b.new - 1})
    rows = [i * b.new + j for i in seqs for j in offs]
    keys = torch.cat([torch.arange(i * b.new, (i + 1) * b.new) for i in seqs]).to(case.q.device)
    cu_q = torch.arange(0, len(rows) + 1, len(offs), dtype=torch.int32, device=case.q.device)
    cu_k = torch.arange(0, len(seqs) * b.new + 1, b.new, dtype=torch.int32, device=case.q.device)
    pick = torch.tensor(rows, device=case.q.device)
    sub = varlen_batch(cu_q, cu_k)
    ref = reference.varlen_attention(case.q.index_select(0, pick), case.k.index_select(0, keys),
                                     case.v.index_select(0, keys), case.layer, sub)
    got = out.index_select(0, pick).double()
    err = (got - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-30)
    return float(err.max())

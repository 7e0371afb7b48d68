"""The varlen kernel (backends/varlen.py): dense non-causal attention over packed sequences.

No KV cache: q, k and v are the packed rows ([T, H, D]) and ``cu_q`` / ``cu_k`` ([B+1]) say
where each sequence starts. One program per (query block, sequence, query head): it walks the
keys of its own sequence only, so a row of another sequence, or past the last one, is never
loaded. Index math: query row ``i`` of sequence b is packed row ``cu_q[b] + i``; its keys are
rows ``cu_k[b] + j`` for j < cu_k[b+1] - cu_k[b]; query head h reads KV head h // GROUP.
With a key padding mask, a masked key's logit is -inf and its value row is replaced by 0
before the product (a padded key may hold NaN: p = 0 times NaN would still be NaN).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from attnkit.backends._triton import LOG2E, online_softmax_step_scaled, padded_dim, softmax_start


@triton.jit
def _varlen_kernel(Q, K, V, O, CuQ, CuK, Mask, stride_qt, stride_qh, stride_kt, stride_kh,
                   stride_vt, stride_vh, stride_ot, stride_oh, qk_scale, blocks_per_seq,
                   GROUP: tl.constexpr, HAS_MASK: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_DV: tl.constexpr, DOT_PREC: tl.constexpr):
    # axis 0: (sequence, query block), so a batch of many windows is not bound by grid.y's 65535
    b = tl.program_id(0) // blocks_per_seq
    start = (tl.program_id(0) % blocks_per_seq) * BLOCK_M
    h = tl.program_id(1)
    q_lo = tl.load(CuQ + b)
    n_q = tl.load(CuQ + b + 1) - q_lo
    if start >= n_q:
        return
    k_lo = tl.load(CuK + b)
    n_k = tl.load(CuK + b + 1) - k_lo
    offs_m = start + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    m_ok, d_ok, dv_ok = offs_m < n_q, offs_d < D, offs_dv < DV
    rows_q = (q_lo + offs_m).to(tl.int64)
    q = tl.load(Q + rows_q[:, None] * stride_qt + h * stride_qh + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    kh = h // GROUP
    m_i, l_i = softmax_start(Q, h, BLOCK_M, False)          # no sinks: an empty softmax state
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    for n0 in range(0, n_k, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        in_seq = offs_n < n_k
        rows_k = (k_lo + offs_n).to(tl.int64)
        k = tl.load(K + rows_k[:, None] * stride_kt + kh * stride_kh + offs_d[None, :],
                    mask=in_seq[:, None] & d_ok[None, :], other=0.0)
        v = tl.load(V + rows_k[:, None] * stride_vt + kh * stride_vh + offs_dv[None, :],
                    mask=in_seq[:, None] & dv_ok[None, :], other=0.0)
        attend = in_seq
        if HAS_MASK:
            attend = in_seq & (tl.load(Mask + rows_k, mask=in_seq, other=0) != 0)
            v = tl.where(attend[:, None], v, 0.0)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
        qk = tl.where(attend[None, :], qk, float("-inf"))
        m_i, l_i, acc = online_softmax_step_scaled(m_i, l_i, acc, qk, qk_scale, v, DOT_PREC)
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]       # no attending key: acc is 0
    tl.store(O + rows_q[:, None] * stride_ot + h * stride_oh + offs_dv[None, :],
             out.to(O.dtype.element_ty), mask=m_ok[:, None] & dv_ok[None, :])


def varlen_attention(q, k, v, out, *, cu_q, cu_k, key_mask, max_q: int, scale: float, config: dict):
    """q: [Tq, H_q, D]; k: [Tk, H_kv, D]; v: [Tk, H_kv, DV]; out: [Tq, H_q, DV] (each sequence's rows written, others left);
    cu_q / cu_k: [B+1] int32; key_mask: [Tk] bool | None. Head rows must be dense (stride 1)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if t.stride(-1) != 1:
            raise ValueError(f"varlen_attention: {name} must be dense in its head dim")
    cfg = dict(config)
    block_m = cfg.pop("BLOCK_M")
    heads, dim, dv = q.shape[1], q.shape[2], v.shape[2]
    mask = key_mask.view(torch.uint8) if key_mask is not None else cu_q     # any pointer when unused
    blocks = triton.cdiv(max(max_q, 1), block_m)
    grid = (blocks * (cu_q.shape[0] - 1), heads)
    _varlen_kernel[grid](
        q, k, v, out, cu_q, cu_k, mask, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        v.stride(0), v.stride(1), out.stride(0), out.stride(1), scale * LOG2E, blocks,
        GROUP=heads // k.shape[1], HAS_MASK=key_mask is not None, D=dim, DV=dv, BLOCK_M=block_m,
        BLOCK_D=padded_dim(dim), BLOCK_DV=padded_dim(dv),
        DOT_PREC="ieee", **cfg)
    return out

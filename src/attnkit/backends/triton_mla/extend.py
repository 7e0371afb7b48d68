"""MLA extend in MHA form: decompress the latent into per-head K/V, then causal flash attention.

For a long new chunk (many query tokens per request) the MHA form does fewer FLOPs than the
absorbed form: per (query, key, head) it costs 2 * (nope + rope + v) = 640 multiply-adds
for DeepSeek-V3 against 2 * (L + R + L) = 2176 absorbed, plus one decompression GEMM per
key. ``k_pe`` is shared by all heads, so it is read once per key tile, not per head.

Index math: request b owns queries ``q_start[b]:q_start[b+1]`` and dense keys
``kv_start[b]:kv_start[b+1]`` (its prefix then its new tokens); query i of its n new tokens
sees keys ``< S_b - n + i + 1``.
"""
from __future__ import annotations

import triton
import triton.language as tl

from attnkit.backends._triton import LOG2E, NEG_BIG, online_softmax_step, padded_dim


@triton.jit
def _within(rows_ok, cols, WIDTH: tl.constexpr, WIDTH_P: tl.constexpr):
    """[rows, cols] load mask; no column test when the width is already a power of two, so
    the mask stays constant along the contiguous dim and loads vectorise (and pipeline)."""
    if WIDTH == WIDTH_P:
        return rows_ok[:, None]
    else:
        return rows_ok[:, None] & (cols[None, :] < WIDTH)


@triton.jit
def _mha_form_kernel(
    QN, QP, KN, KP, V, Out, WorkReq, WorkTok, QStart, KVStart,
    stride_qnt, stride_qnh, stride_qpt, stride_qph, stride_knt, stride_knh, stride_kpt,
    stride_vt, stride_vh, stride_ot, stride_oh,
    qk_scale, DN: tl.constexpr, R: tl.constexpr, DV: tl.constexpr,
    DN_P: tl.constexpr, R_P: tl.constexpr, DV_P: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PREC: tl.constexpr,
):
    """QN: [T, H, DN]; QP: [T, H, R]; KN: [S, H, DN]; KP: [S, R]; V: [S, H, DV];
    Out: [T, H, DV]; WorkReq/WorkTok: [W] request and first query of each tile;
    QStart, KVStart: [B+1] int32. Widths are padded to powers of two (*_P); when a width is
    already one its mask folds away at compile time, which keeps the loads vectorised."""
    w = tl.program_id(0)
    h = tl.program_id(1)
    req = tl.load(WorkReq + w)
    tok0 = tl.load(WorkTok + w)
    q_lo = tl.load(QStart + req)
    q_hi = tl.load(QStart + req + 1)
    kv_lo = tl.load(KVStart + req)
    kv_len = tl.load(KVStart + req + 1) - kv_lo
    offset = kv_len - (q_hi - q_lo)        # keys visible to the first new token, minus one

    tok = tok0 + tl.arange(0, BLOCK_M)
    row_ok = tok < q_hi
    limit = offset + (tok - q_lo) + 1      # per-row causal bound
    kv_end = tl.minimum(kv_len, offset + (tl.minimum(tok0 + BLOCK_M, q_hi) - q_lo))

    d_n = tl.arange(0, DN_P)
    d_r = tl.arange(0, R_P)
    d_v = tl.arange(0, DV_P)
    qn = tl.load(QN + tok[:, None] * stride_qnt + h * stride_qnh + d_n[None, :],
                 mask=_within(row_ok, d_n, DN, DN_P), other=0.0)
    qp = tl.load(QP + tok[:, None] * stride_qpt + h * stride_qph + d_r[None, :],
                 mask=_within(row_ok, d_r, R, R_P), other=0.0)
    m_i = tl.zeros([BLOCK_M], tl.float32) + NEG_BIG     # finite: fully masked tiles add 0
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DV_P], tl.float32)
    for n0 in range(0, kv_end, BLOCK_N):
        key = n0 + tl.arange(0, BLOCK_N)
        key_ok = key < kv_end
        row = (kv_lo + key).to(tl.int64)
        kn = tl.load(KN + row[:, None] * stride_knt + h * stride_knh + d_n[None, :],
                     mask=_within(key_ok, d_n, DN, DN_P), other=0.0)
        kp = tl.load(KP + row[:, None] * stride_kpt + d_r[None, :],
                     mask=_within(key_ok, d_r, R, R_P), other=0.0)
        v = tl.load(V + row[:, None] * stride_vt + h * stride_vh + d_v[None, :],
                    mask=_within(key_ok, d_v, DV, DV_P), other=0.0)
        s = tl.dot(qn, tl.trans(kn), input_precision=DOT_PREC)
        s = tl.dot(qp, tl.trans(kp), s, input_precision=DOT_PREC)
        s = tl.where(key[None, :] < limit[:, None], s * qk_scale, float("-inf"))
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, v, DOT_PREC)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(Out + tok[:, None] * stride_ot + h * stride_oh + d_v[None, :],
             out.to(Out.dtype.element_ty), mask=_within(row_ok, d_v, DV, DV_P))


def mha_form_attention(q_nope, q_pe, k_nope, k_pe, v, work_req, work_tok, query_start_loc,
                       kv_start_loc, *, scale: float, block_m: int, block_n: int,
                       num_warps: int = 4, num_stages: int = 2):
    """Causal varlen attention with a head-shared rope key; returns [T, H, DV].

    q_nope: [T, H, DN]; q_pe: [T, H, R]; k_nope: [S, H, DN]; k_pe: [S, R]; v: [S, H, DV]
    (last dims contiguous; all in the compute dtype); work_req / work_tok: [W] int32 tiles
    of ``block_m`` queries of one request; query_start_loc, kv_start_loc: [B+1] int32.
    """
    import torch

    T, H, DN = q_nope.shape
    R, DV = q_pe.shape[-1], v.shape[-1]
    out = torch.empty(T, H, DV, dtype=q_nope.dtype, device=q_nope.device)
    if T == 0 or work_req.numel() == 0:
        return out
    _mha_form_kernel[(work_req.numel(), H)](
        q_nope, q_pe, k_nope, k_pe, v, out, work_req, work_tok, query_start_loc, kv_start_loc,
        q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
        k_nope.stride(0), k_nope.stride(1), k_pe.stride(0), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1),
        scale * LOG2E, DN=DN, R=R, DV=DV,
        DN_P=padded_dim(DN), R_P=padded_dim(R), DV_P=padded_dim(DV), BLOCK_M=block_m,
        BLOCK_N=block_n, DOT_PREC="ieee" if q_nope.dtype == torch.float32 else "tf32", num_warps=num_warps, num_stages=num_stages,
    )
    return out

"""Extend kernel, version 2: the new tokens' K/V come straight from the step's k / v inputs.

Version 1 (extend.py) reads every key through the block table. Here the key range of a
request splits at its cached prefix (``prefix = kv_len - q_len``):
- keys ``[0, prefix)`` are gathered through the block table, as in version 1;
- keys ``[prefix, kv_len)`` are this step's new tokens, rows ``q_begin + j`` of k / v
  ([T, H_kv, D], the same token order as q), read with plain strided row loads.

The new part is indexed relative to the request's first new token (query row ``i``, key
``j``; causal iff ``j <= i``), so its tiles are aligned to the query blocks: for a causal
prefill every tile left of the block's diagonal is unmasked, and only the diagonal tiles
(and the window's left edge or the chunk start) pay for the mask. Each part runs the same
three loops as version 1 (masked left edge, unmasked middle, masked right edge). Chunk
boundaries are absolute positions, so the new part's masks see positions shifted back by
``prefix`` (causality and the window do not care; the chunk start does).

Only valid when the new K/V in the cache equal k / v exactly: the backend uses it when the
cache has k's dtype (never for fp8 pages, whose rounding the reference reads back).
"""
from __future__ import annotations

import triton
import triton.language as tl

from attnkit.backends._triton import (NEG_BIG, attend_range, key_ranges, logits,
                                             online_softmax_step, padded_dim, unit_stride_rows)


@triton.jit
def load_rows(base, offs_n, n_keys, stride_t, offs_d, d_ok, BOUND: tl.constexpr,
              EVEN_D: tl.constexpr):
    """Rows ``offs_n`` ([BLOCK_N]) of a [rows, D] strided view at ``base`` -> [BLOCK_N, BLOCK_D];
    with BOUND rows at or past ``n_keys`` read 0."""
    ptrs = base + offs_n[:, None] * stride_t + offs_d[None, :]
    if BOUND:
        if EVEN_D:
            tile = tl.load(ptrs, mask=(offs_n < n_keys)[:, None], other=0.0)
        else:
            tile = tl.load(ptrs, mask=(offs_n < n_keys)[:, None] & d_ok[None, :], other=0.0)
    else:
        if EVEN_D:
            tile = tl.load(ptrs)
        else:
            tile = tl.load(ptrs, mask=d_ok[None, :], other=0.0)
    return tile


@triton.jit
def attend_rows(q, m_i, l_i, acc, Kn, Vn, n_lo, n_hi, q_rel, n_keys, offs_d, d_ok, offs_dv, dv_ok,
                stride_knt, stride_vnt, qk_scale, softcap, window, attn_chunk, shift,
                BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
                HAS_WINDOW: tl.constexpr, HAS_CHUNK: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, DOT_PREC: tl.constexpr):
    """attend_range for keys held as contiguous rows (``Kn`` / ``Vn`` point at row 0 of the
    request's new tokens, head already applied); ``q_rel`` and keys in the same coordinates,
    ``shift`` less than absolute positions (the masks compare absolute positions)."""
    for n0 in range(n_lo, n_hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        k = load_rows(Kn, offs_n, n_keys, stride_knt, offs_d, d_ok, MASK, EVEN_D).to(q.dtype)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
        s = logits(qk, q_rel + shift, offs_n + shift, n_keys + shift, qk_scale, softcap, window,
                   attn_chunk, MASK, CAUSAL, HAS_WINDOW, HAS_CHUNK, HAS_SOFTCAP)
        v = load_rows(Vn, offs_n, n_keys, stride_vnt, offs_dv, dv_ok, MASK, EVEN_DV).to(q.dtype)
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, v, DOT_PREC)
    return m_i, l_i, acc


@triton.jit
def _extend_v2_kernel(
    Q, KN, VN, K, V, Out, Sinks, BlockReq, BlockM, QStart, SeqLens, BlockTables,
    qk_scale, v_scale, softcap, window, attn_chunk,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_knt, stride_knh, stride_vnt, stride_vnh,
    stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh, stride_bt,
    GROUP: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CHUNK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr, DOT_PREC: tl.constexpr,
):
    blk = tl.program_id(0)
    h = tl.program_id(1)
    req = tl.load(BlockReq + blk)
    m0 = tl.load(BlockM + blk)
    q_begin = tl.load(QStart + req)
    q_len = tl.load(QStart + req + 1) - q_begin
    kv_len = tl.load(SeqLens + req)
    prefix = kv_len - q_len

    offs_m = m0 + tl.arange(0, BLOCK_M)
    m_ok = offs_m < q_len
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    offs_dv = tl.arange(0, BLOCK_DV)
    dv_ok = offs_dv < DV
    q_rows = (q_begin + offs_m).to(tl.int64)
    q = tl.load(Q + q_rows[:, None] * stride_qt + h * stride_qh + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    EVEN_D: tl.constexpr = D == BLOCK_D
    EVEN_DV: tl.constexpr = DV == BLOCK_DV

    if HAS_SINKS:   # the sink is a logit with no value: start the softmax from it
        m_i = tl.zeros([BLOCK_M], tl.float32) + tl.load(Sinks + h).to(tl.float32) * 1.4426950408889634
        l_i = tl.zeros([BLOCK_M], tl.float32) + 1.0
    else:
        m_i = tl.zeros([BLOCK_M], tl.float32) + NEG_BIG
        l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    kvh = h // GROUP
    r1 = tl.minimum(m0 + BLOCK_M, q_len) - 1          # last query row of this block

    # Cached prefix, absolute positions, through the block table (every key precedes every
    # query, so only the window, the chunk start and the prefix's last partial tile need masks).
    bt_row = BlockTables + req.to(tl.int64) * stride_bt
    q_pos = prefix + offs_m
    lo, mid_lo, mid_hi, hi = key_ranges(prefix + m0, prefix + r1, prefix, window, attn_chunk, 0,
                                        CAUSAL, HAS_WINDOW, HAS_CHUNK, BLOCK_N)
    k_head = kvh * stride_kh
    v_head = kvh * stride_vh
    m_i, l_i, acc = attend_range(q, m_i, l_i, acc, K, V, bt_row, lo, mid_lo, q_pos, prefix,
                                 k_head, v_head, offs_d, d_ok, offs_dv, dv_ok,
                                 stride_kp, stride_kt, stride_vp, stride_vt, qk_scale, softcap,
                                 window, attn_chunk, PAGE, BLOCK_N, True, CAUSAL, HAS_WINDOW,
                                 HAS_CHUNK, HAS_SOFTCAP, EVEN_D, EVEN_DV, DOT_PREC)
    m_i, l_i, acc = attend_range(q, m_i, l_i, acc, K, V, bt_row, mid_lo, mid_hi, q_pos, prefix,
                                 k_head, v_head, offs_d, d_ok, offs_dv, dv_ok,
                                 stride_kp, stride_kt, stride_vp, stride_vt, qk_scale, softcap,
                                 window, attn_chunk, PAGE, BLOCK_N, False, CAUSAL, HAS_WINDOW,
                                 HAS_CHUNK, HAS_SOFTCAP, EVEN_D, EVEN_DV, DOT_PREC)
    m_i, l_i, acc = attend_range(q, m_i, l_i, acc, K, V, bt_row, mid_hi, hi, q_pos, prefix,
                                 k_head, v_head, offs_d, d_ok, offs_dv, dv_ok,
                                 stride_kp, stride_kt, stride_vp, stride_vt, qk_scale, softcap,
                                 window, attn_chunk, PAGE, BLOCK_N, True, CAUSAL, HAS_WINDOW,
                                 HAS_CHUNK, HAS_SOFTCAP, EVEN_D, EVEN_DV, DOT_PREC)

    # New tokens, positions relative to the first one, as contiguous rows of k / v.
    kn = KN + q_begin.to(tl.int64) * stride_knt + kvh * stride_knh
    vn = VN + q_begin.to(tl.int64) * stride_vnt + kvh * stride_vnh
    lo, mid_lo, mid_hi, hi = key_ranges(m0, r1, q_len, window, attn_chunk, prefix, CAUSAL,
                                        HAS_WINDOW, HAS_CHUNK, BLOCK_N)
    m_i, l_i, acc = attend_rows(q, m_i, l_i, acc, kn, vn, lo, mid_lo, offs_m, q_len,
                                offs_d, d_ok, offs_dv, dv_ok, stride_knt, stride_vnt, qk_scale,
                                softcap, window, attn_chunk, prefix, BLOCK_N, True, CAUSAL,
                                HAS_WINDOW, HAS_CHUNK, HAS_SOFTCAP, EVEN_D, EVEN_DV, DOT_PREC)
    m_i, l_i, acc = attend_rows(q, m_i, l_i, acc, kn, vn, mid_lo, mid_hi, offs_m, q_len,
                                offs_d, d_ok, offs_dv, dv_ok, stride_knt, stride_vnt, qk_scale,
                                softcap, window, attn_chunk, prefix, BLOCK_N, False, CAUSAL,
                                HAS_WINDOW, HAS_CHUNK, HAS_SOFTCAP, EVEN_D, EVEN_DV, DOT_PREC)
    m_i, l_i, acc = attend_rows(q, m_i, l_i, acc, kn, vn, mid_hi, hi, offs_m, q_len,
                                offs_d, d_ok, offs_dv, dv_ok, stride_knt, stride_vnt, qk_scale,
                                softcap, window, attn_chunk, prefix, BLOCK_N, True, CAUSAL,
                                HAS_WINDOW, HAS_CHUNK, HAS_SOFTCAP, EVEN_D, EVEN_DV, DOT_PREC)

    l_i = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc * (v_scale / l_i)[:, None]
    tl.store(Out + q_rows[:, None] * stride_ot + h * stride_oh + offs_dv[None, :],
             out.to(Out.dtype.element_ty), mask=m_ok[:, None] & dv_ok[None, :])


def extend_attention_v2(q, k, v, k_cache, v_cache, out, *, block_req, block_m, query_start_loc,
                        seq_lens, block_tables, qk_scale, v_scale, softcap, window, sinks, causal,
                        config, attention_chunk=None):
    """As extend.extend_attention, plus k: [T, H_kv, D] and v: [T, H_kv, DV], this step's new
    K/V (rows dense in the head dim; the same values the cache now holds for them)."""
    q = unit_stride_rows(q, k_cache, v_cache)
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    num_heads, head_dim = q.shape[1], q.shape[2]
    dv = v_cache.shape[3]
    cfg = dict(config)
    _extend_v2_kernel[(block_req.shape[0], num_heads)](
        q, k, v, k_cache, v_cache, out, sinks if sinks is not None else q, block_req, block_m,
        query_start_loc, seq_lens, block_tables,
        qk_scale, v_scale, float(softcap or 1.0), int(window or 0), int(attention_chunk or 1),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0),
        GROUP=num_heads // k_cache.shape[2], D=head_dim, DV=dv, PAGE=k_cache.shape[1],
        BLOCK_M=cfg.pop("BLOCK_M"), BLOCK_N=cfg.pop("BLOCK_N"),
        BLOCK_D=padded_dim(head_dim), BLOCK_DV=padded_dim(dv),
        CAUSAL=causal, HAS_WINDOW=window is not None, HAS_CHUNK=attention_chunk is not None,
        HAS_SOFTCAP=softcap is not None, HAS_SINKS=sinks is not None, DOT_PREC="ieee", **cfg,
    )
    return out

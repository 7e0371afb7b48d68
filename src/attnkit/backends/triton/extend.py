"""Extend (prefill / verify / mixed) kernel: new queries over all keys through the block table.

The new K/V are written into the cache first, so one gather path serves the cached prefix
and the new tokens alike. Query ``i`` of a request with ``q_len`` new tokens and ``kv_len``
keys sits at absolute position ``kv_len - q_len + i``; causality, the sliding window and the
attention chunk (chunked local: keys from the query's chunk start ``(p // chunk) * chunk``
on) are masks on absolute positions.

Grid: (query blocks of all requests, q heads). ``block_req[b]`` / ``block_m[b]`` name the
request and first query row of block ``b`` (built once per step by the backend's prepare).
The key range of a block splits into three loops: a masked left edge (window, chunk start), an
unmasked middle where every key is visible to every row, and a masked right edge
(causal diagonal and the last partial tile).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from attnkit.backends.triton import configs
from attnkit.backends._triton import (NEG_BIG, attend_range, key_ranges, padded_dim,
                                             store_lse, unit_stride_rows)

# The extend kernels' variants (declaration.py names them for the plan: paged, paged_new_kv,
# tma, gluon). Option spellings: "v1" / "paged_kv" (this file: every key through the block
# table), "v2" / "new_kv_direct" (extend_new_kv.py: the new tokens' K/V from the step's k / v,
# the cached prefix through the block table), "tma" / "dense_rows_tma" (prefill_tma.py: K/V as
# dense rows through tensor descriptors; tma_path.py), "gluon" (prefill_gluon.py on a one-request
# fresh prefill), "fixed" / "paged_fixed" (v1 whose one-token rows over a cached prefix run the
# split_fixed decode: backends/triton/invariant.py). Which runs is the plan's choice (its kernel
# table), never a threshold here.
EXTEND_VARIANTS = ("v1", "v2", "tma")       # gluon (and its rows forms), fixed: spelled, tested on their own
EXTEND_VARIANT_NAMES = {"paged_kv": "v1", "new_kv_direct": "v2", "dense_rows_tma": "tma",
                        "paged": "v1", "paged_new_kv": "v2", "paged_fixed": "fixed"}
PLAN_NAMES = {"v1": "paged", "v2": "paged_new_kv", "tma": "tma", "gluon": "gluon", "fixed": "paged_fixed",
              "gluon_rows": "gluon_rows", "gluon_rows_persistent": "gluon_rows_persistent",
              "gluon_rows_chain": "gluon_rows_chain"}


@triton.jit
def _extend_kernel(
    Q, K, V, Out, Lse, Sinks, BlockReq, BlockM, QStart, SeqLens, BlockTables,
    qk_scale, v_scale, softcap, window, attn_chunk,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_lt,
    stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh, stride_bt,
    GROUP: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CHUNK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr, STORE_LSE: tl.constexpr,
    DOT_PREC: tl.constexpr,
):
    blk = tl.program_id(0)
    h = tl.program_id(1)
    req = tl.load(BlockReq + blk)
    m0 = tl.load(BlockM + blk)
    q_begin = tl.load(QStart + req)
    q_len = tl.load(QStart + req + 1) - q_begin
    kv_len = tl.load(SeqLens + req)
    first_pos = kv_len - q_len          # absolute position of the request's first new token

    offs_m = m0 + tl.arange(0, BLOCK_M)
    m_ok = offs_m < q_len
    q_pos = first_pos + offs_m
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    offs_dv = tl.arange(0, BLOCK_DV)
    dv_ok = offs_dv < DV
    q_rows = (q_begin + offs_m).to(tl.int64)
    q = tl.load(Q + q_rows[:, None] * stride_qt + h * stride_qh + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)

    kvh = h // GROUP
    bt_row = BlockTables + req.to(tl.int64) * stride_bt
    p0 = first_pos + m0                                  # first and last query position here
    p1 = first_pos + tl.minimum(m0 + BLOCK_M, q_len) - 1
    lo, mid_lo, mid_hi, hi = key_ranges(p0, p1, kv_len, window, attn_chunk, 0, CAUSAL,
                                        HAS_WINDOW, HAS_CHUNK, BLOCK_N)

    if HAS_SINKS:   # the sink is a logit with no value: start the softmax from it
        m_i = tl.zeros([BLOCK_M], tl.float32) + tl.load(Sinks + h).to(tl.float32) * 1.4426950408889634
        l_i = tl.zeros([BLOCK_M], tl.float32) + 1.0
    else:
        m_i = tl.zeros([BLOCK_M], tl.float32) + NEG_BIG
        l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    k_head = kvh * stride_kh
    v_head = kvh * stride_vh
    m_i, l_i, acc = attend_range(q, m_i, l_i, acc, K, V, bt_row, lo, mid_lo, q_pos, kv_len,
                                 k_head, v_head, offs_d, d_ok, offs_dv, dv_ok,
                                 stride_kp, stride_kt, stride_vp, stride_vt, qk_scale, softcap,
                                 window, attn_chunk, PAGE, BLOCK_N, True, CAUSAL, HAS_WINDOW,
                                 HAS_CHUNK, HAS_SOFTCAP,
                                 D == BLOCK_D, DV == BLOCK_DV, DOT_PREC)
    m_i, l_i, acc = attend_range(q, m_i, l_i, acc, K, V, bt_row, mid_lo, mid_hi, q_pos, kv_len,
                                 k_head, v_head, offs_d, d_ok, offs_dv, dv_ok,
                                 stride_kp, stride_kt, stride_vp, stride_vt, qk_scale, softcap,
                                 window, attn_chunk, PAGE, BLOCK_N, False, CAUSAL, HAS_WINDOW,
                                 HAS_CHUNK, HAS_SOFTCAP,
                                 D == BLOCK_D, DV == BLOCK_DV, DOT_PREC)
    m_i, l_i, acc = attend_range(q, m_i, l_i, acc, K, V, bt_row, mid_hi, hi, q_pos, kv_len,
                                 k_head, v_head, offs_d, d_ok, offs_dv, dv_ok,
                                 stride_kp, stride_kt, stride_vp, stride_vt, qk_scale, softcap,
                                 window, attn_chunk, PAGE, BLOCK_N, True, CAUSAL, HAS_WINDOW,
                                 HAS_CHUNK, HAS_SOFTCAP,
                                 D == BLOCK_D, DV == BLOCK_DV, DOT_PREC)

    if STORE_LSE:
        store_lse(Lse + q_rows * stride_lt + h, m_i, l_i, m_ok)
    l_i = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc * (v_scale / l_i)[:, None]
    tl.store(Out + q_rows[:, None] * stride_ot + h * stride_oh + offs_dv[None, :],
             out.to(Out.dtype.element_ty), mask=m_ok[:, None] & dv_ok[None, :])


def pick_extend_variant(requested: str | None, k, v, cache, layer_id: int) -> str:
    """``requested`` ("v1" / "v2"; None: "v1") where it can run: v2 only where it reads exactly
    what the cache holds (same dtype, not fp8) and its int32 row offsets into k / v cannot
    overflow; else v1."""
    if (requested or "v1") != "v2":
        return "v1"
    return "v2" if new_kv_ok(k, v, cache, layer_id) else "v1"


def new_kv_ok(k, v, cache, layer_id: int) -> bool:
    """Whether extend v2 can read the new tokens' K/V from k / v."""
    exact = not cache.is_fp8 and k.dtype == cache.k[layer_id].dtype and v.dtype == cache.v[layer_id].dtype
    return exact and max(k.shape[0] * k.stride(0), v.shape[0] * v.stride(0)) < 2**31


def extend_config(head_dim: int, dtype: torch.dtype, *, interpret: bool, variant: str = "v1") -> dict:
    """Block sizes and launch shape for one head dim, compute dtype and kernel variant (configs.py)."""
    return configs.extend_config(head_dim, dtype == torch.float32, interpret=interpret, variant=variant)


def extend_attention(q, k_cache, v_cache, out, *, block_req, block_m, query_start_loc, seq_lens,
                     block_tables, qk_scale, v_scale, softcap, window, sinks, causal, config,
                     lse=None, attention_chunk=None):
    """q: [T, H_q, D]; k_cache: [P, page, H_kv, D]; v_cache: [P, page, H_kv, DV];
    out: [T, H_q, DV] (written); block_req / block_m: [NB] int32 query blocks of BLOCK_M rows;
    query_start_loc: [B+1] int32; seq_lens: [B] int32; block_tables: [B, pages] int32;
    sinks: [H_q] float32 or None. ``softcap`` / ``window`` / ``attention_chunk`` None when unused
    (a chunk needs ``causal``).
    lse: None, or [T, H_q] float32 (dense in H) to receive each row's log-sum-exp of its
    scaled logits (natural log; -inf for a row that saw no key). Rows of requests with no
    block in ``block_req`` are left untouched in ``out`` and ``lse``."""
    q = unit_stride_rows(q, k_cache, v_cache)
    num_heads, head_dim = q.shape[1], q.shape[2]
    dv = v_cache.shape[3]
    group = num_heads // k_cache.shape[2]
    cfg = dict(config)
    grid = (block_req.shape[0], num_heads)
    _extend_kernel[grid](
        q, k_cache, v_cache, out, out if lse is None else lse, sinks if sinks is not None else q,
        block_req, block_m, query_start_loc, seq_lens, block_tables,
        qk_scale, v_scale, float(softcap or 1.0), int(window or 0), int(attention_chunk or 1),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), 0 if lse is None else lse.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0),
        GROUP=group, D=head_dim, DV=dv, PAGE=k_cache.shape[1],
        BLOCK_M=cfg.pop("BLOCK_M"), BLOCK_N=cfg.pop("BLOCK_N"),
        BLOCK_D=padded_dim(head_dim), BLOCK_DV=padded_dim(dv),
        CAUSAL=causal, HAS_WINDOW=window is not None, HAS_CHUNK=attention_chunk is not None,
        HAS_SOFTCAP=softcap is not None, HAS_SINKS=sinks is not None, STORE_LSE=lse is not None,
        DOT_PREC="ieee", **cfg,
    )
    return out

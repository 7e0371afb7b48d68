"""Absorbed MLA split-KV kernel with latent tiles read through tensor descriptors (TMA on
sm_90). Same grid, inputs, partials and merge as decode_column_split.py's kernel (column blocks of the
latent per program, 128 heads a program); what differs is how a key tile arrives: a tile of
BLOCK_N keys lies in one page (PAGE_SIZE % BLOCK_N == 0), so it is the rectangle rows
[slot0, slot0 + BLOCK_N) of the flat latent [slots, L + R], and two descriptors (latent
column blocks [BLOCK_N, L / V_SPLIT] and rope [BLOCK_N, R]) replace the per-row pointers
and their cp.async gathers.

The last page of a request can hold stale slots past its keys (a page reused from an earlier
request, NaN even). A descriptor load cannot mask rows, so the loop selects those rows to 0
before P.V (their logits are -inf), and a zero weight never multiplies a stale value.

Triton 3.6's automatic warp specialisation does not take this kernel: with the stale-row
guard the pass fails, and without it the partitioned program asks for ~350 KB of shared
memory (benchmarks/NOTES-hopper.md).
"""
from __future__ import annotations

import triton
import triton.language as tl

from attnkit.backends._triton import NEG_BIG, online_softmax_step, split_range
from attnkit.backends.triton_mla.decode_column_split import load_queries, program_rows, store_split


@triton.jit
def _latent_tiles(q_own, q_oth, q_pe, m_i, l_i, acc, lat_desc, pe_desc, bt_row, n_lo, n_hi,
                  kv_len, kv_max, qk_scale, vb, L: tl.constexpr, PAGE_SIZE: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr, V_SPLIT: tl.constexpr):
    """Fold key tiles [n_lo, n_hi) into the softmax state. Slots at or past kv_max (stale rows
    of the last page) are selected to 0 before P.V: on every tile, since a second loop for the
    last one made ptxas spill (Triton 3.6, sm_90; NOTES-hopper.md)."""
    offs_n = tl.arange(0, BLOCK_N)
    for n0 in range(n_lo, n_hi, BLOCK_N):
        pos = n0 + offs_n
        slot0 = tl.load(bt_row + n0 // PAGE_SIZE) * PAGE_SIZE + n0 % PAGE_SIZE
        c_own = lat_desc.load([slot0, vb * BLOCK_V])
        s = tl.dot(q_own, c_own.T)
        if V_SPLIT == 2:
            s = tl.dot(q_oth, lat_desc.load([slot0, (1 - vb) * BLOCK_V]).T, s)
        s = tl.dot(q_pe, pe_desc.load([slot0, L]).T, s)
        s = tl.where(pos[None, :] < kv_len[:, None], s * qk_scale, float("-inf"))
        c_own = tl.where((pos < kv_max)[:, None], c_own, 0.0)
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, c_own, "ieee")
    return m_i, l_i, acc


@triton.jit
def _absorbed_tma_kernel(
    QL, QP, lat_desc, pe_desc, BlockTables, WorkReq, WorkTok, QStart, SeqLens, Out, Lse,
    stride_qlh, stride_qlt, stride_qpt, stride_qph, stride_bt,
    stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
    qk_scale, v_scale, H, num_splits,
    L: tl.constexpr, R: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    V_SPLIT: tl.constexpr, DIRECT: tl.constexpr,
):
    """As decode_column_split._absorbed_v2_kernel, with the latent cache as two descriptors over
    [slots, L + R]: lat_desc blocks [BLOCK_N, L // V_SPLIT], pe_desc blocks [BLOCK_N, R]."""
    BLOCK_M: tl.constexpr = BLOCK_T * BLOCK_H
    BLOCK_V: tl.constexpr = L // V_SPLIT
    vb, split, req, tok, head, row_ok, kv_len, kv_max = program_rows(
        WorkReq, WorkTok, QStart, SeqLens, H, BLOCK_M, BLOCK_H, V_SPLIT)

    q_own, q_oth, q_pe, offs_v, _ = load_queries(QL, QP, head, tok, row_ok, vb, stride_qlh,
                                                 stride_qlt, stride_qpt, stride_qph, R, BLOCK_V,
                                                 V_SPLIT)

    start, end = split_range(kv_max, num_splits, split, BLOCK_N)

    m_i = tl.zeros([BLOCK_M], tl.float32) + NEG_BIG
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_V], tl.float32)
    m_i, l_i, acc = _latent_tiles(q_own, q_oth, q_pe, m_i, l_i, acc, lat_desc, pe_desc,
                                  BlockTables + req * stride_bt, start, end, kv_len, kv_max,
                                  qk_scale, vb, L, PAGE_SIZE, BLOCK_N, BLOCK_V, V_SPLIT)

    store_split(Out, Lse, acc, m_i, l_i, tok, head, row_ok, vb, split, offs_v, v_scale,
                stride_ot, stride_oh, stride_os, stride_lt, stride_lh, DIRECT)


def tma_ready(q_lat, cache_flat, *, page_size: int, block_h: int, block_n: int) -> bool:
    """Whether the tensor-descriptor kernel serves this call: 128-head programs (the tile it is
    built for: 223 registers, no spills, 221 KB of shared memory with ptxas for sm_90), a
    cache of q's 16-bit dtype (fp8 tiles are converted in registers: v2 does that), key tiles
    inside one page, and a latent TMA can address (16-byte aligned rows, < 2**31 slots)."""
    import torch
    return (block_h >= 128 and q_lat.dtype in (torch.float16, torch.bfloat16)
            and cache_flat.dtype == q_lat.dtype and page_size % block_n == 0
            and cache_flat.stride(1) == 1 and (cache_flat.stride(0) * cache_flat.element_size()) % 16 == 0
            and cache_flat.data_ptr() % 16 == 0 and cache_flat.shape[0] < 2**31)


def absorbed_tma(grid, q_lat, q_pe, cache_flat, block_tables, work_req, work_tok, query_start_loc,
                 seq_lens, partial, lse, partial_strides, *, qk_scale, v_scale, num_splits,
                 page_size, block_t, block_h, block_n, v_split, direct, num_warps, num_stages):
    """Launch _absorbed_tma_kernel on ``grid`` (head blocks * v_split, tiles, splits); arguments
    as decode.absorbed_attention prepares them for the v2 kernel."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    H, _, L = q_lat.shape
    R = q_pe.shape[-1]
    rows = [cache_flat.shape[0], cache_flat.shape[1]]
    strides = [cache_flat.stride(0), 1]
    _absorbed_tma_kernel[grid](
        q_lat, q_pe, TensorDescriptor(cache_flat, rows, strides, [block_n, L // v_split]),
        TensorDescriptor(cache_flat, rows, strides, [block_n, R]), block_tables, work_req,
        work_tok, query_start_loc, seq_lens, partial, lse,
        q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1), block_tables.stride(0),
        *partial_strides, qk_scale, v_scale, H, num_splits,
        L=L, R=R, PAGE_SIZE=page_size, BLOCK_T=block_t, BLOCK_H=block_h, BLOCK_N=block_n,
        V_SPLIT=v_split, DIRECT=direct, num_warps=num_warps, num_stages=num_stages,
    )

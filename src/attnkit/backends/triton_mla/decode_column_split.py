"""Absorbed MLA split-KV kernel, version 2: output columns split across programs, 128 heads
a program, page-local key tiles. Same inputs, outputs and partial layout as decode.py's
version 1 kernel, so the launcher and the reduce kernel are shared (decode.absorbed_attention,
``variant``: the plan chooses it, its kernel tables measured by attnkit tune).

Why (benchmarks/NOTES-mla.md, version 3): a version 1 program of 64 heads holds the whole
[64, 512] fp32 accumulator, which needs two warpgroups; Triton then splits the Q.K product
along the keys between them (36 narrow 64x16 wgmma per 32-key tile each, the row max
crossing warpgroups through shared memory every tile), and registers sit at 255 with spills.
Here:
- ``V_SPLIT`` programs share a (head block, request, KV split); program ``v`` owns output
  columns [v * L / V_SPLIT, (v + 1) * L / V_SPLIT). Each recomputes the full scores (Q.K is
  576 of the 1088 FLOPs a key, so V_SPLIT = 2 costs 1.53x the FLOPs) but holds only a
  [BLOCK_M, L / V_SPLIT] accumulator.
- With 128 rows and 8 warps Triton gives each warpgroup 64 ROWS (heads): its Q.K runs as
  64 x BLOCK_N wgmma and its softmax never leaves the warpgroup; one latent tile in shared
  memory serves all 128 heads.
- The latent tile is loaded as two column blocks: the program's own columns (used by Q.K
  AND P.V, one shared-memory copy) and the rest (Q.K only), plus the rope columns.
- When BLOCK_N divides the page size, a key tile lies in one page: one block-table load
  per tile, rows at a constant stride from one base, instead of a page id and a 64-bit
  address per row (the gather addresses were a large part of version 1's registers).

MERGE (version 9, NOTES-mla.md; the launcher's ``merge_splits``): the splits are merged inside
this kernel, not by decode._reduce_splits_kernel launched after it. Every program of a (work
tile, head block) stores its split's partial and LSE as without it, then takes a ticket from
that pair's counter; the num_splits * V_SPLIT tickets cover every split of every column block,
and the program drawing the last one merges all L columns of the tile's rows (merge_if_last).
One counter a tile, not one a column block: column block 0 writes the one LSE a split has, as
the reduce kernel reads it, so the last program of any column block may need it.
"""
from __future__ import annotations

import triton
import triton.language as tl

from triton.language.extra.cuda import gdc_launch_dependents

from attnkit.backends._triton import NEG_BIG, online_softmax_step, split_range


@triton.jit
def work_rows(WorkReq, WorkTok, QStart, SeqLens, w, hb, H, BLOCK_M: tl.constexpr,
              BLOCK_H: tl.constexpr):
    """The rows of work tile ``w`` and head block ``hb``: row r is token tok0 + r // BLOCK_H,
    head hb * BLOCK_H + r % BLOCK_H. -> (request, tok [BLOCK_M], head [BLOCK_M], row_ok,
    kv_len [BLOCK_M], kv_max): causal, token tok (of the last q_end - tok new ones) sees the
    keys below its kv_len (0 for rows past the request's tokens or the heads)."""
    req = tl.load(WorkReq + w)
    tok0 = tl.load(WorkTok + w)
    q_end = tl.load(QStart + req + 1)
    seq_len = tl.load(SeqLens + req)
    rows = tl.arange(0, BLOCK_M)
    tok = tok0 + rows // BLOCK_H
    head = hb * BLOCK_H + rows % BLOCK_H
    row_ok = (tok < q_end) & (head < H)
    kv_len = tl.where(row_ok, seq_len - (q_end - tok) + 1, 0)
    return req, tok, head, row_ok, kv_len, tl.max(kv_len, axis=0)


@triton.jit
def program_rows(WorkReq, WorkTok, QStart, SeqLens, H, BLOCK_M: tl.constexpr,
                 BLOCK_H: tl.constexpr, V_SPLIT: tl.constexpr):
    """Grid (head block * V_SPLIT + column block, work tile, KV split) -> (column block,
    split, then work_rows' request, tok, head, row_ok, kv_len, kv_max)."""
    hb = tl.program_id(0) // V_SPLIT
    vb = tl.program_id(0) % V_SPLIT
    req, tok, head, row_ok, kv_len, kv_max = work_rows(WorkReq, WorkTok, QStart, SeqLens,
                                                       tl.program_id(1), hb, H, BLOCK_M, BLOCK_H)
    return vb, tl.program_id(2), req, tok, head, row_ok, kv_len, kv_max


@triton.jit
def load_queries(QL, QP, head, tok, row_ok, vb, stride_qlh, stride_qlt, stride_qpt, stride_qph,
                 R: tl.constexpr, BLOCK_V: tl.constexpr, V_SPLIT: tl.constexpr):
    """The program's query rows: (q_own [M, BLOCK_V] on its own columns offs_v, q_oth on the
    other half's columns offs_o (Q.K only; q_own and offs_v again when V_SPLIT == 1),
    q_pe [M, R], offs_v, offs_o)."""
    offs_v = vb * BLOCK_V + tl.arange(0, BLOCK_V)            # this program's columns
    q_base = QL + head[:, None] * stride_qlh + tok[:, None] * stride_qlt
    q_own = tl.load(q_base + offs_v[None, :], mask=row_ok[:, None], other=0.0)
    if V_SPLIT == 2:
        offs_o = (1 - vb) * BLOCK_V + tl.arange(0, BLOCK_V)  # the other half (Q.K only)
        q_oth = tl.load(q_base + offs_o[None, :], mask=row_ok[:, None], other=0.0)
    else:
        offs_o = offs_v
        q_oth = q_own
    q_pe = tl.load(QP + tok[:, None] * stride_qpt + head[:, None] * stride_qph
                   + tl.arange(0, R)[None, :], mask=row_ok[:, None], other=0.0)
    return q_own, q_oth, q_pe, offs_v, offs_o


@triton.jit
def store_split(Out, Lse, acc, m_i, l_i, tok, head, row_ok, vb, split, offs_v, v_scale,
                stride_ot, stride_oh, stride_os, stride_lt, stride_lh, DIRECT: tl.constexpr):
    """Normalised fp32 output of this split on the program's columns (DIRECT: the final
    output), and with splits the base-2 LSE (column block 0 writes it)."""
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc * (v_scale / l_safe)[:, None]
    o_ptr = Out + tok[:, None] * stride_ot + head[:, None] * stride_oh + offs_v[None, :]
    if DIRECT:
        tl.store(o_ptr, out, mask=row_ok[:, None])
    else:
        tl.store(o_ptr + split * stride_os, out, mask=row_ok[:, None])
        # the column blocks' LSEs agree up to the summation order of the score dots
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        lse_ok = row_ok & (tok * 0 + vb == 0)
        tl.store(Lse + tok * stride_lt + head * stride_lh + split, lse, mask=lse_ok)


@triton.jit
def merge_if_last(Out, Lse, Final, Counter, tok, head, row_ok, tickets, num_splits,
                  stride_ot, stride_oh, stride_os, stride_lt, stride_lh, stride_ft, stride_fh,
                  L: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
                  CHUNK_S: tl.constexpr):
    """Called by every program of a (work tile, head block) after store_split; the one that
    draws the last of ``tickets`` merges the num_splits partials of the tile's rows into
    Final [T, H, L] (its dtype) and resets Counter to 0 for the next launch.

    Ordering as triton's decode_merge.merge_if_last: a CTA barrier puts every thread's stores
    before the ticket (acq_rel, GPU scope), and the merging program reads after its ticket,
    through L2 (.cg). The row maximum of the LSEs comes first, 32 splits a load; then per
    BLOCK_C columns the splits are added in split order, CHUNK_S a load round, each weighed by
    exp2(lse - max) (an empty split: lse = -inf, weight 0), into a [BLOCK_M, BLOCK_C]
    accumulator and the weights' sum: the same sums whichever program was last."""
    tl.debug_barrier()
    ticket = tl.atomic_add(Counter, 1, sem="acq_rel", scope="gpu")
    if ticket == tickets - 1:
        lse_row = Lse + tok * stride_lt + head * stride_lh                        # [BLOCK_M]
        offs_s = tl.arange(0, 32)
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)
        for s0 in range(0, num_splits, 32):
            ok = row_ok[:, None] & (s0 + offs_s < num_splits)[None, :]
            lse = tl.load(lse_row[:, None] + s0 + offs_s[None, :], mask=ok, other=float("-inf"),
                          cache_modifier=".cg")
            m = tl.maximum(m, tl.max(lse, axis=1))
        m = tl.where(m == float("-inf"), 0.0, m)
        part_row = Out + tok[:, None] * stride_ot + head[:, None] * stride_oh
        final_row = Final + tok[:, None] * stride_ft + head[:, None] * stride_fh
        for c0 in range(0, L, BLOCK_C):
            offs_c = c0 + tl.arange(0, BLOCK_C)
            acc = tl.zeros([BLOCK_M, BLOCK_C], tl.float32)
            total = tl.zeros([BLOCK_M], tl.float32)
            for s0 in range(0, num_splits, CHUNK_S):
                for j in tl.static_range(CHUNK_S):      # independent loads, added in order
                    ok = row_ok & (tok * 0 + s0 + j < num_splits)      # [BLOCK_M]
                    w = tl.exp2(tl.load(lse_row + s0 + j, mask=ok, other=float("-inf"),
                                        cache_modifier=".cg") - m)
                    part = tl.load(part_row + (s0 + j) * stride_os + offs_c[None, :],
                                   mask=ok[:, None], other=0.0, cache_modifier=".cg")
                    acc += w[:, None] * part
                    total += w
            total = tl.where(total == 0.0, 1.0, total)
            tl.store(final_row + offs_c[None, :], (acc / total[:, None]).to(Final.dtype.element_ty),
                     mask=row_ok[:, None])
        tl.atomic_xchg(Counter, 0, sem="relaxed", scope="gpu")       # ready for the next launch


@triton.jit
def _absorbed_v2_kernel(
    QL, QP, Cache, BlockTables, WorkReq, WorkTok, QStart, SeqLens, Out, Lse, Final, Counters,
    stride_qlh, stride_qlt, stride_qpt, stride_qph, stride_bt,
    stride_ot, stride_oh, stride_os, stride_lt, stride_lh, stride_ft, stride_fh,
    qk_scale, v_scale, H, num_splits,
    L: tl.constexpr, R: tl.constexpr, ROW: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    V_SPLIT: tl.constexpr, DIRECT: tl.constexpr, DOT_PREC: tl.constexpr,
    PDL: tl.constexpr = False, MERGE: tl.constexpr = False, BLOCK_C: tl.constexpr = 16,
    CHUNK_S: tl.constexpr = 1,
):
    """As decode._absorbed_split_kernel, with Cache: latent [slots, ROW] (ROW = L + R, a
    constexpr so row offsets fold into immediates) and grid axis 0 = head block * V_SPLIT +
    column block. Out / Lse as there; every column block writes its columns, block 0 the LSE.
    PDL (launched with programmatic dependent launch): the reduce kernel that follows may be
    scheduled as soon as every program has started; it waits (gdc_wait) for this grid's
    stores before it reads them. MERGE (with splits): merge_if_last writes Final [T, H, L]
    (q's dtype), taking tickets from Counters [>= work tiles x head blocks] int32 (zeros, left
    zero); unused without it."""
    if PDL:
        gdc_launch_dependents()
    BLOCK_M: tl.constexpr = BLOCK_T * BLOCK_H
    BLOCK_V: tl.constexpr = L // V_SPLIT
    # column blocks of one head block, then head blocks, vary fastest: the programs that read
    # the same latent rows run together and all but the first read them from L2
    vb, split, req, tok, head, row_ok, kv_len, kv_max = program_rows(
        WorkReq, WorkTok, QStart, SeqLens, H, BLOCK_M, BLOCK_H, V_SPLIT)

    q_own, q_oth, q_pe, offs_v, offs_o = load_queries(QL, QP, head, tok, row_ok, vb, stride_qlh,
                                                      stride_qlt, stride_qpt, stride_qph, R,
                                                      BLOCK_V, V_SPLIT)
    offs_r = tl.arange(0, R)

    start, end = split_range(kv_max, num_splits, split, BLOCK_N)

    m_i = tl.zeros([BLOCK_M], tl.float32) + NEG_BIG
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_V], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        pos_ok = pos < end
        if PAGE_SIZE % BLOCK_N == 0:
            # n0 is a multiple of BLOCK_N, so the whole tile lies in one page
            page = tl.load(BlockTables + req * stride_bt + n0 // PAGE_SIZE)
            slot = page.to(tl.int64) * PAGE_SIZE + (n0 % PAGE_SIZE) + offs_n
        else:
            page = tl.load(BlockTables + req * stride_bt + pos // PAGE_SIZE, mask=pos_ok, other=0)
            slot = page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE
        base = Cache + slot[:, None] * ROW
        c_own = tl.load(base + offs_v[None, :], mask=pos_ok[:, None], other=0.0).to(q_own.dtype)
        s = tl.dot(q_own, tl.trans(c_own), input_precision=DOT_PREC)
        if V_SPLIT == 2:
            c_oth = tl.load(base + offs_o[None, :], mask=pos_ok[:, None], other=0.0).to(q_own.dtype)
            s = tl.dot(q_oth, tl.trans(c_oth), s, input_precision=DOT_PREC)
        pe = tl.load(base + L + offs_r[None, :], mask=pos_ok[:, None], other=0.0).to(q_own.dtype)
        s = tl.dot(q_pe, tl.trans(pe), s, input_precision=DOT_PREC)
        s = tl.where(pos[None, :] < kv_len[:, None], s * qk_scale, float("-inf"))
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, c_own, DOT_PREC)

    store_split(Out, Lse, acc, m_i, l_i, tok, head, row_ok, vb, split, offs_v, v_scale,
                stride_ot, stride_oh, stride_os, stride_lt, stride_lh, DIRECT)
    if MERGE:
        tl.static_assert(not DIRECT, "MERGE merges splits: DIRECT has none")
        head_blocks = tl.num_programs(0) // V_SPLIT
        counter = Counters + tl.program_id(1) * head_blocks + tl.program_id(0) // V_SPLIT
        merge_if_last(Out, Lse, Final, counter, tok, head, row_ok, num_splits * V_SPLIT,
                      num_splits, stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
                      stride_ft, stride_fh, L, BLOCK_M, BLOCK_C, CHUNK_S)

"""The decode splits' merges: inside the decode kernel (the last split program of a (request,
KV head) merges), the reduce launch that follows it (``_reduce_kernel``), and in key order
(variant split_fixed, ``reduce_in_order``).

Decode variant "fused" (decode.py's kernel with MERGE) drops the separate reduce launch: each
split program stores its partials (max, denominator, unnormalised output per query row),
then takes a ticket from a per-(request, KV head) counter; the program that draws the last
ticket reads every split's partials of its query heads, merges them (log-sum-exp, the sink
added once), writes the output and resets the counter to 0 for the next launch.

Ordering: the partial stores of all threads of a program happen before its ticket (a CTA
barrier, then an acq_rel atomic at GPU scope, which is cumulative), and the merging program
reads the partials after its own ticket (acquire), bypassing L1 (``.cg``), so it sees every
other program's stores. No program waits for another, so there is no deadlock whatever
order the programs run in.

Variant "fixed" (split_fixed) merges with ``reduce_in_order``: one program per (request, query
head) folds its splits one after another, first key first, skipping the splits that hold no
key. Its arithmetic is a chain over the request's own splits, the same whatever the grid's
split count (the reduce's one-shot ``tl.sum`` over a power-of-two padding of every split is
a tree whose shape follows the longest request of the step).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from attnkit.backends._triton import NEG_BIG

MAX_KV_HEADS = tl.constexpr(256)     # tickets per request in the step plan's counters


@triton.jit
def merge_if_last(Out, MidO, MidM, MidL, Counter, Sinks, b, kvh, v_scale, num_splits,
                  stride_ot, stride_oh, stride_mb, stride_mh, stride_ms,
                  GROUP: tl.constexpr, DV: tl.constexpr, BLOCK_DV: tl.constexpr,
                  HAS_SINKS: tl.constexpr, ROWS: tl.constexpr, CHUNK_S: tl.constexpr):
    """Called by every split program after storing its partials for heads
    kvh * GROUP .. + GROUP of request b (ROWS = GROUP rounded up to a power of two); the last
    of the num_splits programs merges them, CHUNK_S splits per load."""
    tl.debug_barrier()                        # every thread's partial stores precede the ticket
    counter = Counter + b * MAX_KV_HEADS + kvh
    ticket = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    if ticket == num_splits - 1:
        rows = tl.arange(0, ROWS)
        row_ok = rows < GROUP
        heads = kvh * GROUP + rows
        offs_dv = tl.arange(0, BLOCK_DV)
        offs_s = tl.arange(0, CHUNK_S)
        base = b.to(tl.int64) * stride_mb + heads * stride_mh                    # [ROWS]
        if HAS_SINKS:   # the sink: a logit with no value, counted once
            m = tl.load(Sinks + heads, mask=row_ok, other=0.0).to(tl.float32) * 1.4426950408889634
            l = tl.where(row_ok, 1.0, 0.0)
        else:
            m = tl.full([ROWS], -1.0e30, tl.float32)
            l = tl.zeros([ROWS], tl.float32)
        acc = tl.zeros([ROWS, BLOCK_DV], tl.float32)
        for s0 in range(0, num_splits, CHUNK_S):     # one load round per CHUNK_S splits
            ok = row_ok[:, None] & ((s0 + offs_s) < num_splits)[None, :]
            mid = base[:, None] + (s0 + offs_s)[None, :] * stride_ms             # [ROWS, S]
            m_s = tl.load(MidM + mid, mask=ok, other=-1.0e30, cache_modifier=".cg")
            l_s = tl.load(MidL + mid, mask=ok, other=0.0, cache_modifier=".cg")
            a_s = tl.load(MidO + (mid * BLOCK_DV)[:, :, None] + offs_dv[None, None, :],
                          mask=ok[:, :, None], other=0.0, cache_modifier=".cg")
            m_new = tl.maximum(m, tl.max(m_s, 1))
            alpha = tl.exp2(m - m_new)
            w = tl.where(ok, tl.exp2(m_s - m_new[:, None]), 0.0)
            l = l * alpha + tl.sum(l_s * w, 1)
            acc = acc * alpha[:, None] + tl.sum(a_s * w[:, :, None], 1)
            m = m_new
        l = tl.where(l == 0.0, 1.0, l)
        tl.store(Out + b.to(tl.int64) * stride_ot + heads[:, None] * stride_oh + offs_dv[None, :],
                 (acc * (v_scale / l)[:, None]).to(Out.dtype.element_ty),
                 mask=row_ok[:, None] & (offs_dv < DV)[None, :])
        tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")     # ready for the next launch


@triton.jit
def _reduce_kernel(
    Out, MidO, MidM, MidL, Sinks, v_scale, num_splits,
    stride_ot, stride_oh, stride_mb, stride_mh, stride_ms,
    DV: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_S: tl.constexpr, HAS_SINKS: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """Merge the splits of one (request, q head): a log-sum-exp over all split partials at
    once (one round of loads, no serial chain over splits). With PDL it was launched as a
    programmatic dependent of the split kernel and waits for that grid before any load."""
    if PDL:
        gdc_wait()
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    s_ok = offs_s < num_splits
    offs_dv = tl.arange(0, BLOCK_DV)
    mid = b.to(tl.int64) * stride_mb + h * stride_mh + offs_s * stride_ms          # [BLOCK_S]
    m_s = tl.load(MidM + mid, mask=s_ok, other=NEG_BIG)
    l_s = tl.load(MidL + mid, mask=s_ok, other=0.0)
    a_s = tl.load(MidO + (mid * BLOCK_DV)[:, None] + offs_dv[None, :], mask=s_ok[:, None], other=0.0)
    m = tl.max(m_s, 0)
    if HAS_SINKS:
        sink = tl.load(Sinks + h).to(tl.float32) * 1.4426950408889634
        m = tl.maximum(m, sink)
    w = tl.exp2(m_s - m)
    l = tl.sum(l_s * w, 0)
    if HAS_SINKS:
        l += tl.exp2(sink - m)
    acc = tl.sum(a_s * w[:, None], 0)
    l = tl.where(l == 0.0, 1.0, l)
    tl.store(Out + b.to(tl.int64) * stride_ot + h * stride_oh + offs_dv,
             (acc * (v_scale / l)).to(Out.dtype.element_ty), mask=offs_dv < DV)


def merge_shape(group: int, block_dv: int) -> tuple[int, int] | None:
    """(ROWS, CHUNK_S) for a KV-head group, or None where the merge's [ROWS, CHUNK_S, BLOCK_DV]
    tile would pass 8192 elements with one split per load (the reduce launch serves it)."""
    rows = triton.next_power_of_2(group)
    chunk = min(16, 8192 // (rows * block_dv)) if rows * block_dv <= 8192 else 0
    return (rows, chunk) if chunk >= 1 else None


def merge_counters(num_reqs: int, device) -> torch.Tensor:
    """Zeroed tickets for one step: [num_reqs * MAX_KV_HEADS] int32 (the kernel leaves them 0)."""
    return torch.zeros(num_reqs * MAX_KV_HEADS.value, dtype=torch.int32, device=device)


@triton.jit
def _reduce_in_order_kernel(
    Out, MidO, MidM, MidL, Sinks, v_scale, num_splits,
    stride_ot, stride_oh, stride_mb, stride_mh, stride_ms,
    DV: tl.constexpr, BLOCK_DV: tl.constexpr, HAS_SINKS: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_dv = tl.arange(0, BLOCK_DV)
    base = b.to(tl.int64) * stride_mb + h * stride_mh
    m = tl.full([1], -1.0e30, tl.float32)
    l = tl.zeros([1], tl.float32)
    acc = tl.zeros([BLOCK_DV], tl.float32)
    for s in range(0, num_splits):
        mid = base + s * stride_ms
        l_s = tl.load(MidL + mid + tl.arange(0, 1))
        if tl.sum(l_s, 0) > 0.0:                 # a split past the request's keys is empty
            m_s = tl.load(MidM + mid + tl.arange(0, 1))
            a_s = tl.load(MidO + mid * BLOCK_DV + offs_dv)
            m_new = tl.maximum(m, m_s)
            alpha = tl.exp2(m - m_new)
            beta = tl.exp2(m_s - m_new)
            acc = acc * alpha + a_s * beta
            l = l * alpha + l_s * beta
            m = m_new
    if HAS_SINKS:   # the sink: a logit with no value, counted once, after the keys
        sink = tl.load(Sinks + h + tl.arange(0, 1)).to(tl.float32) * 1.4426950408889634
        m_new = tl.maximum(m, sink)
        alpha = tl.exp2(m - m_new)
        acc = acc * alpha
        l = l * alpha + tl.exp2(sink - m_new)
    l = tl.where(l == 0.0, 1.0, l)
    tl.store(Out + b.to(tl.int64) * stride_ot + h * stride_oh + offs_dv,
             (acc * (v_scale / l)).to(Out.dtype.element_ty), mask=offs_dv < DV)


def reduce_in_order(out, partials, *, sinks, v_scale: float, num_splits: int) -> None:
    """out: [B, H_q, DV] (written); partials: (mid_o [B, H_q, S, BLOCK_DV], mid_m [B, H_q, S],
    mid_l [B, H_q, S]) float32 from the decode kernel, S = num_splits; sinks: [H_q] f32 or None."""
    mid_o, mid_m, mid_l = partials
    dv = out.shape[-1]
    _reduce_in_order_kernel[(out.shape[0], out.shape[1])](
        out, mid_o, mid_m, mid_l, sinks if sinks is not None else mid_m, v_scale, num_splits,
        out.stride(0), out.stride(1), mid_m.stride(0), mid_m.stride(1), mid_m.stride(2),
        DV=dv, BLOCK_DV=mid_o.shape[-1], HAS_SINKS=sinks is not None, num_warps=4,
    )

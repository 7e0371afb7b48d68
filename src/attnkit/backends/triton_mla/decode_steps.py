"""Softmax steps of the candidate absorbed-decode variants (decode._absorbed_split_kernel's
LAZY / KEY_SPLIT constexprs; benchmarks/NOTES-mla.md, version 4). Both aim at the 64-head,
512-column program of version 1 on sm_90, where Triton 3.6 lays the Q.K product out with
``warpsPerCTA = [8, 1]``: a 64-row tile on two warpgroups, so BOTH warpgroups compute the
whole [64, BLOCK_N] score tile (Q.K done twice: 13.6 MFLOP of MMA per 64-key tile for 8.9
useful) and then each does P.V on its own 256 output columns.

LAZY (the threshold rescale): the running max moves only when some row's tile max exceeds
it by more than ``LAZY_LOG2`` (base 2); otherwise P is taken against the stale max (values
up to 2**LAZY_LOG2, exact in fp32 and representable in bf16) and the [rows, 512] fp32
accumulator is not multiplied, saving 128 multiplies a thread per tile on most tiles.

KEY_SPLIT: Triton picks ``[num_warps, 1]`` for a dot whose result reaches another dot in
the same SSA forward slice ("chained dot", flash attention). Here P and the rescale factors
take a round trip through a small per-program scratch in global memory (L1-resident: 2
buffers of P [rows, BLOCK_N] and alpha [rows], fp32), with a barrier between store and
load, so no SSA path leads from the Q.K dot to the P.V dot: Q.K then gets the plain layout (``[4, 2]``: each
warpgroup computes half the keys, no duplicate), and its row max crosses the warpgroups
through shared memory (the two Q.K dots are summed, not chained, for the same reason).
Statically (Triton 3.6, sm_90) the barrier in the loop also stops the pipeliner: the latent
loads are plain loads, not cp.async (NOTES-mla.md, version 4). The buffer alternates per tile, so a fast warp writing tile j + 1
never overwrites what a slow warp still reads of tile j (every warp passed tile j + 1's
barrier only after its reads of tile j).
"""
from __future__ import annotations

import triton
import triton.language as tl

LAZY_LOG2 = tl.constexpr(8.0)


@triton.jit
def softmax_step_mla(m_i, l_i, acc, s, v, buf, DOT_PREC: tl.constexpr, LAZY: tl.constexpr,
                     KEY_SPLIT: tl.constexpr):
    """As _triton.online_softmax_step (same arguments and result), in the variant the
    constexprs pick. buf: this tile's scratch buffer, P [M, N] then alpha [M], fp32 (KEY_SPLIT only)."""
    M: tl.constexpr = s.shape[0]
    N: tl.constexpr = s.shape[1]
    m_tile = tl.maximum(m_i, tl.max(s, 1))
    if LAZY:
        # move every row's max only when one of them grew past the threshold
        grow = tl.max(m_tile - m_i, 0)
        m_new = tl.where(grow > LAZY_LOG2, m_tile, m_i)
    else:
        m_new = m_tile
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if KEY_SPLIT:
        rows = tl.arange(0, M)
        cols = tl.arange(0, N)
        tl.store(buf + rows[:, None] * N + cols[None, :], p)
        tl.store(buf + M * N + rows, alpha)
        tl.debug_barrier()
        p = tl.load(buf + rows[:, None] * N + cols[None, :])
        alpha = tl.load(buf + M * N + rows)
    if LAZY:
        if tl.min(alpha, 0) < 1.0:
            acc = acc * alpha[:, None]
    else:
        acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PREC)
    return m_new, l_i, acc

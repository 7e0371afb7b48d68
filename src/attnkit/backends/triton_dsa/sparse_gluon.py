"""Sparse MLA decode for 64-head blocks on sm_90 in Gluon, warp-specialised: triton_mla's ws
schedule (triton_mla/decode_gluon.py) over gathered latent rows.

One program: one query token, 64 heads, one split of the token's slot list (``Slots`` [T,
topk] int32 cache slots, -1 = none; sparse_mla.selected_slots builds it). Rows are gathered
with cp.async (TMA cannot gather rows on Hopper), 64 columns a copy, into a ring of NS
shared-memory stages of BN rows; a -1 slot's row is not read and lands as zeros, and its
logit is -inf. Every gathering thread arrives on the stage's ``kv_ready`` barrier when its
own copies have landed (cp.async.mbarrier.arrive.noinc; count = gathering threads).

Two schedules (GLUON_FORMS):
- two warpgroups + a loader (THREE False): the loader partition (LW warps) fills the ring;
  the scores warpgroup computes S = Q_lat.C^T + Q_pe.K_pe^T (wgmma, Q in shared memory), the
  online softmax, P (bf16) and the rescale factor into shared memory, then
  O[:, :L/2] += P.C[:, :L/2]; the values warpgroup O[:, L/2:] += P.C[:, L/2:];
- three warpgroups (THREE True): the scores warpgroup computes S, softmax and P only, and
  issues the gathers itself, NS - 1 tiles ahead; two values warpgroups compute one half of
  P.V each. The tensor-core work of a tile splits 4.7 / 2.1 / 2.1 MFLOP instead of
  6.8 / 2.1, and no registers go to a loader.

Either way Q.K runs once per tile for the 64 heads and P.V overlaps the next tile's softmax.
The two 64-head programs of a token read the same rows; head blocks vary fastest in the grid
so the second read comes from L2.

Outputs: fp32 partials [T, H, S, L] + base-2 LSE [T, H, S] per split for the split merge
(triton_mla's ``_reduce_splits_kernel``), or with DIRECT (one split) the final rows [T, H, L]
in Out's dtype.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              warpgroup_mma, warpgroup_mma_wait)

from attnkit.backends.triton_dsa.configs import GLUON_FORMS, WS_HEADS  # noqa: F401 (re-exported)

# Triton 3.6 names the pointer cp.async async_copy_global_to_shared; later versions async_load
_cp_async = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared

BLOCK_H = WS_HEADS    # heads a program: one wgmma M tile
MAXNREG = 168         # 12 warps (3 warpgroups) x 32 x 168 <= 65536 registers
VALUES_REGS = 232     # the values warpgroup: a [64, 256] fp32 accumulator (128) and addresses
CHUNK = gl.constexpr(64)  # columns a cp.async chunk (128 B of bf16: one swizzle row)


@gluon.jit
def _gather_tile(cache, slot_row, stage_lat, stage_pe, bar, j0, end, ROW: gl.constexpr,
                 L: gl.constexpr, BN: gl.constexpr, WARPS: gl.constexpr):
    """cp.async the rows of slots j0 .. j0 + BN (-1 or past ``end``: zeros) into one ring
    stage, 64 columns a copy; each of the WARPS * 32 calling threads then arrives on ``bar``
    once its own copies have landed."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [WARPS, 1], [1, 0])
    j = j0 + gl.arange(0, BN, layout=gl.SliceLayout(1, layout))
    cols = gl.expand_dims(gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout)), 0)
    slot = gl.load(slot_row + j, mask=j < end, other=-1)
    ok = gl.expand_dims(slot >= 0, 1)
    base = gl.expand_dims(cache + gl.maximum(slot, 0).to(gl.int64) * ROW, 1)
    for c in gl.static_range(L // CHUNK):
        _cp_async(stage_lat.slice(c * CHUNK, CHUNK, dim=1), base + (c * CHUNK + cols), mask=ok)
    _cp_async(stage_pe, base + (L + cols), mask=ok)
    async_copy.mbarrier_arrive(bar, increment_count=False)


@gluon.jit
def _loader(cache, slot_row, klat, kpe, kv_ready, kv_free, start, end, n_tiles,
            ROW: gl.constexpr, L: gl.constexpr, BN: gl.constexpr, NS: gl.constexpr,
            LW: gl.constexpr):
    """Gather tile i's rows into stage i % NS once every warpgroup has released it."""
    for i in range(n_tiles):
        s = i % NS
        mbarrier.wait(kv_free.index(s), ((i // NS) & 1) ^ 1)
        _gather_tile(cache, slot_row, klat.index(s), kpe.index(s), kv_ready.index(s),
                     start + i * BN, end, ROW, L, BN, LW)


@gluon.jit
def _store_half(o_row, acc, l_i, v_scale, COL0: gl.constexpr, HALF: gl.constexpr,
                o_layout: gl.constexpr):
    """acc / l_i * v_scale into columns COL0 .. + HALF of the rows o_row (pointers [BH])."""
    l_safe = gl.where(l_i == 0.0, 1.0, l_i)
    out = acc * gl.expand_dims(v_scale / l_safe, 1)
    cols = COL0 + gl.arange(0, HALF, layout=gl.SliceLayout(0, o_layout))
    ptrs = gl.expand_dims(o_row, 1) + gl.expand_dims(cols, 0)
    gl.store(ptrs, out.to(ptrs.dtype.element_ty))


@gluon.jit
def _values(klat, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready, p_free, fin,
            o_base, stride_oh, n_tiles, v_scale, L: gl.constexpr, BH: gl.constexpr,
            NS: gl.constexpr, COL0: gl.constexpr):
    """O[:, COL0:COL0 + L/2] over every tile with the scores partition's P; then the
    normalised store."""
    HALF: gl.constexpr = L // 2
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    row_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
    acc = gl.zeros([BH, HALF], gl.float32, o_layout)
    for i in range(n_tiles):
        s = i % NS
        mbarrier.wait(kv_ready.index(s), (i // NS) & 1)
        mbarrier.wait(p_ready, i & 1)
        fence_async_shared()      # the loader's cp.async rows, read by wgmma (async proxy)
        alpha = alpha_smem.load(row_layout)
        acc = acc * gl.expand_dims(alpha, 1)
        acc = warpgroup_mma(p_smem, klat.index(s).slice(COL0, HALF, dim=1), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        mbarrier.arrive(p_free, count=1)
        mbarrier.arrive(kv_free.index(s), count=1)
    mbarrier.wait(fin, 0)
    l_i = l_smem.load(row_layout)
    o_row = o_base + gl.arange(0, BH, layout=row_layout).to(gl.int64) * stride_oh
    _store_half(o_row, acc, l_i, v_scale, COL0, HALF, o_layout)


@gluon.jit
def _qk_softmax(q_lat, q_pe, klat, kpe, kv_ready, slot_row, i, start, end, m_i, l_i, s0,
                qk_scale, BN: gl.constexpr, NS: gl.constexpr, s_layout: gl.constexpr):
    """Tile i: wait for its rows, S = Q.K^T (-inf where the slot is -1), the online-softmax
    step. -> (P fp32 [BH, BN], alpha [BH], m_i, l_i)."""
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    j = start + i * BN + cols
    ok = gl.load(slot_row + j, mask=j < end, other=-1) >= 0
    s = i % NS
    mbarrier.wait(kv_ready.index(s), (i // NS) & 1)
    fence_async_shared()      # the loader's cp.async rows, read by wgmma (async proxy)
    sc = warpgroup_mma(q_lat, klat.index(s).permute((1, 0)), s0, use_acc=False, is_async=True)
    sc = warpgroup_mma(q_pe, kpe.index(s).permute((1, 0)), sc, is_async=True)
    sc = warpgroup_mma_wait(num_outstanding=0, deps=[sc])
    sc = gl.where(gl.expand_dims(ok, 0), sc * qk_scale, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(sc, axis=1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(sc - gl.expand_dims(m_new, 1))
    return p, alpha, m_new, l_i * alpha + gl.sum(p, axis=1)


@gluon.jit
def _store_lse(lse_row, m_i, l_i, s_layout: gl.constexpr):
    lse = gl.where(l_i == 0.0, float("-inf"), m_i + gl.log2(gl.where(l_i == 0.0, 1.0, l_i)))
    gl.store(gl.convert_layout(lse_row, gl.SliceLayout(1, s_layout)), lse)


@gluon.jit
def _scores_gather(q_lat, q_pe, klat, kpe, p_smem, alpha_smem, l_smem, kv_ready, p_ready,
                   p_free, fin, cache, slot_row, lse_row, start, end, n_tiles, qk_scale,
                   ROW: gl.constexpr, L: gl.constexpr, BH: gl.constexpr, BN: gl.constexpr,
                   NS: gl.constexpr, DIRECT: gl.constexpr):
    """The three-warpgroup schedule's scores partition, which also issues the gathers: S,
    softmax and P for the two values warpgroups (no P.V of its own). Tile i + NS - 1 goes
    into the stage of tile i - 1 once P(i - 1) is released (both values warpgroups are done
    with that stage then, and Q.K(i - 1) was its own), so no loader partition is needed."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    for i in gl.static_range(NS - 1):           # the ring's first tiles
        if i < n_tiles:
            _gather_tile(cache, slot_row, klat.index(i), kpe.index(i), kv_ready.index(i),
                         start + i * BN, end, ROW, L, BN, 4)
    m_i = gl.full([BH], -1.0e30, gl.float32, gl.SliceLayout(1, s_layout))   # finite: 0 weight
    l_i = gl.zeros([BH], gl.float32, gl.SliceLayout(1, s_layout))
    s0 = gl.zeros([BH, BN], gl.float32, s_layout)
    for i in range(n_tiles):
        p, alpha, m_i, l_i = _qk_softmax(q_lat, q_pe, klat, kpe, kv_ready, slot_row, i, start,
                                         end, m_i, l_i, s0, qk_scale, BN, NS, s_layout)
        p16 = p.to(q_lat.dtype)
        mbarrier.wait(p_free, (i & 1) ^ 1)
        p_smem.store(p16)
        alpha_smem.store(alpha)
        fence_async_shared()
        mbarrier.arrive(p_ready, count=1)
        nxt = i + NS - 1
        if nxt < n_tiles:
            st = nxt % NS
            _gather_tile(cache, slot_row, klat.index(st), kpe.index(st), kv_ready.index(st),
                         start + nxt * BN, end, ROW, L, BN, 4)
    l_smem.store(l_i)
    mbarrier.arrive(fin, count=1)
    if not DIRECT:
        _store_lse(lse_row, m_i, l_i, s_layout)


@gluon.jit
def _scores(q_lat, q_pe, klat, kpe, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready,
            p_free, fin, slot_row, o_row, lse_row, start, end, n_tiles, qk_scale, v_scale,
            L: gl.constexpr, BH: gl.constexpr, BN: gl.constexpr, NS: gl.constexpr,
            DIRECT: gl.constexpr):
    """S, softmax, P for the values partition, O[:, :L/2]; then the normalised store and LSE."""
    HALF: gl.constexpr = L // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    m_i = gl.full([BH], -1.0e30, gl.float32, gl.SliceLayout(1, s_layout))   # finite: 0 weight
    l_i = gl.zeros([BH], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BH, HALF], gl.float32, o_layout)
    s0 = gl.zeros([BH, BN], gl.float32, s_layout)
    for i in range(n_tiles):
        s = i % NS
        p, alpha, m_i, l_i = _qk_softmax(q_lat, q_pe, klat, kpe, kv_ready, slot_row, i, start,
                                         end, m_i, l_i, s0, qk_scale, BN, NS, s_layout)
        kl = klat.index(s)
        p16 = p.to(q_lat.dtype)
        mbarrier.wait(p_free, (i & 1) ^ 1)
        p_smem.store(p16)
        alpha_smem.store(alpha)
        fence_async_shared()
        mbarrier.arrive(p_ready, count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        acc = warpgroup_mma(gl.convert_layout(p16, p_layout), kl.slice(0, HALF, dim=1), acc,
                            is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        mbarrier.arrive(kv_free.index(s), count=1)
    l_smem.store(l_i)
    mbarrier.arrive(fin, count=1)
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    _store_half(gl.convert_layout(o_row, gl.SliceLayout(1, o_layout)), acc, l_o, v_scale, 0,
                HALF, o_layout)
    if not DIRECT:
        _store_lse(lse_row, m_i, l_i, s_layout)


@gluon.jit
def _sparse_gluon_kernel(
    Q, Cache, Slots, Out, Lse,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
    qk_scale, v_scale, topk, num_splits,
    L: gl.constexpr, R: gl.constexpr, ROW: gl.constexpr, BH: gl.constexpr, BN: gl.constexpr,
    NS: gl.constexpr, LW: gl.constexpr, DIRECT: gl.constexpr, VALUES_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr, THREE: gl.constexpr,
):
    """Q: [T, H, L + R] bf16; Cache: [slots, L + R] bf16 rows ROW elements apart; Slots:
    [T, topk] int32; Out / Lse as the module docstring. Grid (H / BH, T, splits)."""
    hb = gl.program_id(0)
    t = gl.program_id(1).to(gl.int64)
    split = gl.program_id(2)
    per_split = gl.cdiv(gl.cdiv(topk, num_splits), BN) * BN
    start = split * per_split
    end = gl.minimum(start + per_split, topk)
    n_tiles = gl.maximum(gl.cdiv(end - start, BN), 0)
    slot_row = Slots + t * topk

    # queries: [BH, L] and [BH, R] into shared memory, once
    q_blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    heads = hb * BH + gl.arange(0, BH, layout=gl.SliceLayout(1, q_blocked))
    lat_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, L], gl.bfloat16)
    pe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, R], gl.bfloat16)
    q_lat = gl.allocate_shared_memory(Q.dtype.element_ty, [BH, L], lat_layout)
    q_pe = gl.allocate_shared_memory(Q.dtype.element_ty, [BH, R], pe_layout)
    q_rows = Q + gl.expand_dims(t * stride_qt + heads.to(gl.int64) * stride_qh, 1)
    for c in gl.static_range(L // CHUNK):
        cols = c * CHUNK + gl.arange(0, CHUNK, layout=gl.SliceLayout(0, q_blocked))
        q_lat.slice(c * CHUNK, CHUNK, dim=1).store(gl.load(q_rows + gl.expand_dims(cols, 0)))
    pe_cols = L + gl.arange(0, R, layout=gl.SliceLayout(0, q_blocked))
    q_pe.store(gl.load(q_rows + gl.expand_dims(pe_cols, 0)))

    klat_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, L], gl.bfloat16)
    kpe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, R], gl.bfloat16)
    klat = gl.allocate_shared_memory(Q.dtype.element_ty, [NS, BN, L], klat_layout)
    kpe = gl.allocate_shared_memory(Q.dtype.element_ty, [NS, BN, R], kpe_layout)
    p_smem = gl.allocate_shared_memory(Q.dtype.element_ty, [BH, BN],
                                       gl.NVMMASharedLayout.get_default_for([BH, BN], gl.bfloat16))
    vec_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    alpha_smem = gl.allocate_shared_memory(gl.float32, [BH], vec_layout)
    l_smem = gl.allocate_shared_memory(gl.float32, [BH], vec_layout)
    kv_ready = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    kv_free = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    p_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    p_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    fin = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for st in gl.static_range(NS):
        mbarrier.init(kv_ready.index(st), count=(4 if THREE else LW) * 32)   # each gathering thread
        mbarrier.init(kv_free.index(st), count=2)          # both P.V warpgroups release a stage
    mbarrier.init(p_ready, count=1)
    mbarrier.init(p_free, count=2 if THREE else 1)          # every P.V warpgroup releases P
    mbarrier.init(fin, count=1)
    fence_async_shared()

    o_base = Out + t * stride_ot + split.to(gl.int64) * stride_os
    o_row = o_base + heads.to(gl.int64) * stride_oh
    lse_row = Lse + t * stride_lt + heads * stride_lh + split
    o_block = o_base + hb * BH * stride_oh
    if THREE:
        # scores + gathers | values cols 0..L/2 | values cols L/2..L
        gl.warp_specialize([
            (_scores_gather, (q_lat, q_pe, klat, kpe, p_smem, alpha_smem, l_smem, kv_ready,
                              p_ready, p_free, fin, Cache, slot_row, lse_row, start, end,
                              n_tiles, qk_scale, ROW, L, BH, BN, NS, DIRECT)),
            (_values, (klat, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready, p_free,
                       fin, o_block, stride_oh, n_tiles, v_scale, L, BH, NS, 0)),
            (_values, (klat, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready, p_free,
                       fin, o_block, stride_oh, n_tiles, v_scale, L, BH, NS, L // 2)),
        ], [4, 4], [VALUES_REGS, VALUES_REGS])
    else:
        # scores + values cols 0..L/2 | values cols L/2..L | loader
        gl.warp_specialize([
            (_scores, (q_lat, q_pe, klat, kpe, p_smem, alpha_smem, l_smem, kv_ready, kv_free,
                       p_ready, p_free, fin, slot_row, o_row, lse_row, start, end, n_tiles,
                       qk_scale, v_scale, L, BH, BN, NS, DIRECT)),
            (_values, (klat, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready, p_free,
                       fin, o_block, stride_oh, n_tiles, v_scale, L, BH, NS, L // 2)),
            (_loader, (Cache, slot_row, klat, kpe, kv_ready, kv_free, start, end, n_tiles,
                       ROW, L, BN, NS, LW)),
        ], [4, LW], [VALUES_REGS, LOADER_REGS])


def gluon_serves(q_cat, rows, *, L: int) -> bool:
    """Whether the Gluon kernel serves the call: bf16 query and cache, H a multiple of 64,
    latent L 512 + R 64 (its chunked gather and the wgmma tiles), rows 16-byte aligned."""
    import torch
    return (q_cat.is_cuda and q_cat.dtype == torch.bfloat16 and rows.dtype == torch.bfloat16
            and q_cat.shape[1] % BLOCK_H == 0 and L == 512 and q_cat.shape[2] == 576
            and rows.shape[1] == 576 and rows.stride(1) == 1 and q_cat.stride(2) == 1
            and (rows.stride(0) * 2) % 16 == 0 and rows.data_ptr() % 16 == 0
            and torch.cuda.get_device_capability(q_cat.device)[0] == 9)


def launch_sparse_gluon(q_cat, rows, slots, out, lse, out_strides, *, qk_scale: float,
                        v_scale: float, num_splits: int, direct: bool, form: str = "ws64x2"):
    """Launch _sparse_gluon_kernel over q_cat [T, H, 576], rows [slots, 576], slots [T, topk];
    ``out`` [T, H, S, L] fp32 partials (``direct``: [T, H, L] final, stride_os 0) with
    ``out_strides`` (t, h, s), ``lse`` [T, H, S]."""
    bn, ns, lw, loader_regs, three = GLUON_FORMS[form]
    T, H, D = q_cat.shape
    L = 512
    _sparse_gluon_kernel[(H // BLOCK_H, T, num_splits)](
        q_cat, rows, slots, out, lse, q_cat.stride(0), q_cat.stride(1), *out_strides,
        lse.stride(0), lse.stride(1), qk_scale, v_scale, slots.shape[1], num_splits,
        L=L, R=D - L, ROW=rows.stride(0), BH=BLOCK_H, BN=bn, NS=ns, LW=lw, DIRECT=direct,
        VALUES_REGS=MAXNREG if three else VALUES_REGS, LOADER_REGS=loader_regs,
        THREE=three, num_warps=4, maxnreg=MAXNREG,
    )

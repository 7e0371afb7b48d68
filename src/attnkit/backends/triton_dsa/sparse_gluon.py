"""Sparse MLA decode for 64-head blocks on sm_90 in Gluon, warp-specialised: triton_mla's ws
schedule (triton_mla/decode_gluon.py) over gathered latent rows.

One program: one query token, 64 heads, one split of the token's slot list (``Slots`` [T,
topk] int32 cache slots, -1 = none; sparse_mla.selected_slots builds it). Three partitions:

- loader (LOADER_WARPS warps): per tile of BN slots, the rows ``slot * ROW`` of the latent
  cache gathered with cp.async (TMA cannot gather rows on Hopper) in 64-column chunks into a
  ring of NS shared-memory stages; a -1 slot's row is not read and lands as zeros. Every
  loader thread arrives on the stage's ``kv_ready`` barrier (count LOADER_WARPS * 32) when
  its own copies have landed (cp.async.mbarrier.arrive.noinc);
- scores (default partition, one warpgroup): S = Q_lat.C^T + Q_pe.K_pe^T (wgmma, Q in shared
  memory), -inf where the slot is -1, online softmax, P (bf16) and the rescale factor to
  shared memory for the values warpgroup, then O[:, :L/2] += P.C[:, :L/2];
- values (one warpgroup): O[:, L/2:] += P.C[:, L/2:] with P from shared memory.

Q.K runs once per tile for the 64 heads, the second half of P.V overlaps the next tile's
softmax, and the gathers run NS - 1 tiles ahead. The two 64-head programs of a token read the
same rows; head blocks vary fastest in the grid so the second read comes from L2.

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

# Triton 3.6 names the pointer cp.async async_copy_global_to_shared; later versions async_load
_cp_async = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared

BLOCK_H = 64          # heads a program: one wgmma M tile
MAXNREG = 168         # 12 warps (3 warpgroups) x 32 x 168 <= 65536 registers
VALUES_REGS = 232     # the values warpgroup: a [64, 256] fp32 accumulator (128) and addresses
CHUNK = gl.constexpr(64)  # columns a cp.async chunk (128 B of bf16: one swizzle row)


@gluon.jit
def _loader(cache, slot_row, klat, kpe, kv_ready, kv_free, start, end, n_tiles,
            ROW: gl.constexpr, L: gl.constexpr, BN: gl.constexpr, NS: gl.constexpr,
            LW: gl.constexpr):
    """Gather tile i's rows into stage i % NS once both warpgroups have released it."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [LW, 1], [1, 0])
    rows = gl.arange(0, BN, layout=gl.SliceLayout(1, layout))
    cols = gl.expand_dims(gl.arange(0, CHUNK, layout=gl.SliceLayout(0, layout)), 0)
    for i in range(n_tiles):
        s = i % NS
        mbarrier.wait(kv_free.index(s), ((i // NS) & 1) ^ 1)
        j = start + i * BN + rows
        slot = gl.load(slot_row + j, mask=j < end, other=-1)
        ok = gl.expand_dims(slot >= 0, 1)
        base = gl.expand_dims(cache + gl.maximum(slot, 0).to(gl.int64) * ROW, 1)
        stage = klat.index(s)
        for c in gl.static_range(L // CHUNK):
            _cp_async(stage.slice(c * CHUNK, CHUNK, dim=1), base + (c * CHUNK + cols), mask=ok)
        _cp_async(kpe.index(s), base + (L + cols), mask=ok)
        async_copy.mbarrier_arrive(kv_ready.index(s), increment_count=False)


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
            NS: gl.constexpr):
    """O[:, L/2:] over every tile with the scores partition's P; then the normalised store."""
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
        acc = warpgroup_mma(p_smem, klat.index(s).slice(HALF, HALF, dim=1), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        mbarrier.arrive(p_free, count=1)
        mbarrier.arrive(kv_free.index(s), count=1)
    mbarrier.wait(fin, 0)
    l_i = l_smem.load(row_layout)
    o_row = o_base + gl.arange(0, BH, layout=row_layout).to(gl.int64) * stride_oh
    _store_half(o_row, acc, l_i, v_scale, HALF, HALF, o_layout)


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
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    for i in range(n_tiles):
        s = i % NS
        j = start + i * BN + cols
        ok = gl.load(slot_row + j, mask=j < end, other=-1) >= 0
        mbarrier.wait(kv_ready.index(s), (i // NS) & 1)
        fence_async_shared()      # the loader's cp.async rows, read by wgmma (async proxy)
        kl = klat.index(s)
        sc = warpgroup_mma(q_lat, kl.permute((1, 0)), s0, use_acc=False, is_async=True)
        sc = warpgroup_mma(q_pe, kpe.index(s).permute((1, 0)), sc, is_async=True)
        sc = warpgroup_mma_wait(num_outstanding=0, deps=[sc])
        sc = gl.where(gl.expand_dims(ok, 0), sc * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(sc, axis=1))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(sc - gl.expand_dims(m_new, 1))
        l_i = l_i * alpha + gl.sum(p, axis=1)
        m_i = m_new
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
        lse = gl.where(l_i == 0.0, float("-inf"), m_i + gl.log2(gl.where(l_i == 0.0, 1.0, l_i)))
        gl.store(gl.convert_layout(lse_row, gl.SliceLayout(1, s_layout)), lse)


@gluon.jit
def _sparse_gluon_kernel(
    Q, Cache, Slots, Out, Lse,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
    qk_scale, v_scale, topk, num_splits,
    L: gl.constexpr, R: gl.constexpr, ROW: gl.constexpr, BH: gl.constexpr, BN: gl.constexpr,
    NS: gl.constexpr, LW: gl.constexpr, DIRECT: gl.constexpr, VALUES_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr,
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
        mbarrier.init(kv_ready.index(st), count=LW * 32)   # every loader thread arrives
        mbarrier.init(kv_free.index(st), count=2)          # both warpgroups release a stage
    mbarrier.init(p_ready, count=1)
    mbarrier.init(p_free, count=1)
    mbarrier.init(fin, count=1)
    fence_async_shared()

    o_base = Out + t * stride_ot + split.to(gl.int64) * stride_os
    o_row = o_base + heads.to(gl.int64) * stride_oh
    lse_row = Lse + t * stride_lt + heads * stride_lh + split
    gl.warp_specialize([
        (_scores, (q_lat, q_pe, klat, kpe, p_smem, alpha_smem, l_smem, kv_ready, kv_free,
                   p_ready, p_free, fin, slot_row, o_row, lse_row, start, end, n_tiles,
                   qk_scale, v_scale, L, BH, BN, NS, DIRECT)),
        (_values, (klat, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready, p_free, fin,
                   o_base + hb * BH * stride_oh, stride_oh, n_tiles, v_scale, L, BH, NS)),
        (_loader, (Cache, slot_row, klat, kpe, kv_ready, kv_free, start, end, n_tiles,
                   ROW, L, BN, NS, LW)),
    ], [4, LW], [VALUES_REGS, LOADER_REGS])


# (BN, NS, loader warps, loader registers) of each declared form; shared memory at BN 64,
# NS 2: 2 x 72 KB ring + Q 72 KB + P 8 KB = 224 KB
GLUON_FORMS = {
    "ws64x2": (64, 2, 4, 56),
    "ws32x4": (32, 4, 4, 56),
    "ws32x3": (32, 3, 4, 56),
    "ws64x2w1": (64, 2, 1, 56),
}


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
    bn, ns, lw, loader_regs = GLUON_FORMS[form]
    T, H, D = q_cat.shape
    L = 512
    _sparse_gluon_kernel[(H // BLOCK_H, T, num_splits)](
        q_cat, rows, slots, out, lse, q_cat.stride(0), q_cat.stride(1), *out_strides,
        lse.stride(0), lse.stride(1), qk_scale, v_scale, slots.shape[1], num_splits,
        L=L, R=D - L, ROW=rows.stride(0), BH=BLOCK_H, BN=bn, NS=ns, LW=lw, DIRECT=direct,
        VALUES_REGS=VALUES_REGS, LOADER_REGS=loader_regs, num_warps=4, maxnreg=MAXNREG,
    )

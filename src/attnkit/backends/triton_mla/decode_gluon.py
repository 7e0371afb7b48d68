"""Absorbed MLA decode for 64-head blocks on sm_90, written in Gluon (Triton's lower-level
language) with explicit warp specialisation: the schedule Triton's own compiler does not
build from decode.py's kernels (benchmarks/NOTES-mla.md, versions 3-5).

One program: one decode token (one request), 64 heads, one KV split. Three partitions:

- loader (1 warp): for each key tile of BLOCK_N keys (one page holds it: PAGE_SIZE %
  BLOCK_N == 0), the latent rows [BLOCK_N, L] and rope rows [BLOCK_N, R] through two tensor
  descriptors (TMA) into a ring of NUM_STAGES shared-memory stages;
- scores (the default partition, 4 warps = one warpgroup): S = Q_lat.C^T + Q_pe.K_pe^T once
  per tile (wgmma, Q from shared memory), the online softmax, P (bf16) and the rescale factor
  into shared memory for the other warpgroup, then O[:, :L/2] = O * alpha + P.C[:, :L/2]
  with P from registers;
- values (a worker, 4 warps): O[:, L/2:] = O * alpha + P.C[:, L/2:] with P from shared
  memory.

So Q.K is computed once per tile (decode.py's 64-head program computes it on both
warpgroups), the second warpgroup's P.V runs while the first computes the next tile's
softmax, and the loads run ahead in their own warp.

The last page of a request can hold stale slots past its keys (a page reused from an earlier
request: any bits, NaN too). TMA cannot mask rows, so on the tile that reaches past the
request's keys the scores partition writes zeros over those rows before either P.V reads
them (their logits are -inf, so their weight is 0, and 0 * stale would still be NaN).

Outputs are decode.py's: fp32 partials [T, H, S, L] + base-2 LSE [T, H, S] per split, or the
fp32 output [T, H, L] when there is one split (DIRECT); the launcher merges splits with
decode._reduce_splits_kernel.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              tma, warpgroup_mma,
                                                              warpgroup_mma_init,
                                                              warpgroup_mma_wait)

from attnkit.backends.triton_mla.configs import WS  # noqa: E402  (the shape a plan names)

BLOCK_H = WS["BLOCK_H"]        # heads a program: one wgmma M tile; the rest of the tile: WS
MAXNREG = 168         # 12 warps (3 warpgroups) x 32 x 168 <= 65536 registers
VALUES_REGS = 232     # the values warpgroup: a [64, 256] fp32 accumulator (128) and addresses
LOADER_REGS = 24


@gluon.jit
def _loader(lat_desc, pe_desc, klat, kpe, kv_ready, kv_free, bt_row, start, n_tiles,
            L: gl.constexpr, PAGE_SIZE: gl.constexpr, BN: gl.constexpr, NS: gl.constexpr):
    """Fill stage i % NS with key tile i once both warpgroups have released it."""
    for i in range(n_tiles):
        s = i % NS
        mbarrier.wait(kv_free.index(s), ((i // NS) & 1) ^ 1)
        n0 = start + i * BN
        slot0 = gl.load(bt_row + n0 // PAGE_SIZE) * PAGE_SIZE + n0 % PAGE_SIZE
        bar = kv_ready.index(s)
        mbarrier.expect(bar, lat_desc.block_type.nbytes + pe_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(lat_desc, [slot0, 0], bar, klat.index(s))
        tma.async_copy_global_to_shared(pe_desc, [slot0, L], bar, kpe.index(s))


@gluon.jit
def _values(klat, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready, p_free, fin,
            o_row, n_tiles, v_scale, L: gl.constexpr, BH: gl.constexpr, NS: gl.constexpr):
    """O[:, L/2:] over every tile with the scores partition's P; then the normalised store."""
    HALF: gl.constexpr = L // 2
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    row_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
    acc = gl.zeros([BH, HALF], gl.float32, o_layout)
    for i in range(n_tiles):
        s = i % NS
        mbarrier.wait(p_ready, i & 1)
        alpha = alpha_smem.load(row_layout)
        acc = acc * gl.expand_dims(alpha, 1)
        acc = warpgroup_mma(p_smem, klat.index(s).slice(HALF, HALF, dim=1), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        mbarrier.arrive(p_free, count=1)
        mbarrier.arrive(kv_free.index(s), count=1)
    mbarrier.wait(fin, 0)
    l_i = l_smem.load(row_layout)
    _store_half(o_row, acc, l_i, v_scale, HALF, HALF, o_layout)


@gluon.jit
def _store_half(o_row, acc, l_i, v_scale, COL0: gl.constexpr, HALF: gl.constexpr,
                o_layout: gl.constexpr):
    """acc / l_i * v_scale into columns COL0 .. + HALF of the rows o_row (pointers [BH]), in
    the output's dtype (fp32 partials, or the 16-bit output of a one-split launch)."""
    l_safe = gl.where(l_i == 0.0, 1.0, l_i)
    out = acc * gl.expand_dims(v_scale / l_safe, 1)
    cols = COL0 + gl.arange(0, HALF, layout=gl.SliceLayout(0, o_layout))
    ptr = gl.expand_dims(o_row, 1) + gl.expand_dims(cols, 0)
    gl.store(ptr, out.to(ptr.dtype.element_ty))


@gluon.jit
def _softmax_tile(sc, m_i, l_i, n0, kv_len, s_layout: gl.constexpr, BN: gl.constexpr):
    """The online softmax of one tile's raw scores (keys n0 .. + BN, past kv_len masked):
    -> (p, alpha, m_new, l_new), base 2 (qk_scale is folded in by the caller)."""
    pos = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    sc = gl.where(gl.expand_dims(pos < kv_len, 0), sc, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(sc, axis=1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(sc - gl.expand_dims(m_new, 1))
    return p, alpha, m_new, l_i * alpha + gl.sum(p, axis=1)


@gluon.jit
def _zero_stale(kl, n0, kv_len, L: gl.constexpr, BN: gl.constexpr):
    """Zeros over the rows of stage ``kl`` at or past kv_len (stale slots of the request's
    last page), before either P.V reads them: their weight is 0, and 0 * stale can be NaN."""
    zero_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    keep = gl.expand_dims(n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, zero_layout)) < kv_len, 1)
    for c in gl.static_range(L // 64):
        part = kl.slice(c * 64, 64, dim=1)
        part.store(gl.where(keep, part.load(zero_layout), 0.0))
    fence_async_shared()


@gluon.jit
def _publish_p(p16, alpha, p_smem, alpha_smem, p_ready, p_free, i):
    """P of tile i and its rescale factor for the values partition, once it took tile i - 1's."""
    mbarrier.wait(p_free, (i & 1) ^ 1)
    p_smem.store(p16)
    alpha_smem.store(alpha)
    fence_async_shared()
    mbarrier.arrive(p_ready, count=1)


@gluon.jit
def _qk(q_lat, q_pe, klat, kpe, st, s_layout: gl.constexpr, BH: gl.constexpr, BN: gl.constexpr):
    """Q.K of the tile in stage ``st`` (latent and rope parts), issued, not waited for."""
    sc = warpgroup_mma(q_lat, klat.index(st).permute((1, 0)),
                       gl.zeros([BH, BN], gl.float32, s_layout), use_acc=False, is_async=True)
    return warpgroup_mma(q_pe, kpe.index(st).permute((1, 0)), sc, is_async=True)


@gluon.jit
def _left_pv(p, alpha, acc, kl, n0, kv_len, p_smem, alpha_smem, p_ready, p_free, i,
             o_layout: gl.constexpr, L: gl.constexpr, BN: gl.constexpr):
    """Tile i's P to the values partition (stale rows of its stage zeroed first), then
    O[:, :L/2] = O * alpha + P.C[:, :L/2], issued, not waited for."""
    HALF: gl.constexpr = L // 2
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    if n0 + BN > kv_len:
        _zero_stale(kl, n0, kv_len, L, BN)
    p16 = p.to(p_smem.dtype)
    _publish_p(p16, alpha, p_smem, alpha_smem, p_ready, p_free, i)
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    return warpgroup_mma(gl.convert_layout(p16, p_layout), kl.slice(0, HALF, dim=1), acc,
                         is_async=True)


@gluon.jit
def _scores(q_lat, q_pe, klat, kpe, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready,
            p_free, fin, o_row, lse_row, start, n_tiles, kv_len, qk_scale, v_scale,
            L: gl.constexpr, BH: gl.constexpr, BN: gl.constexpr, NS: gl.constexpr,
            DIRECT: gl.constexpr, AHEAD: gl.constexpr):
    """S, softmax, P for the values partition, O[:, :L/2]; then the normalised store and LSE.
    AHEAD: Q.K of tile i + 1 is issued before the softmax of tile i, so the tensor cores work
    under this warpgroup's softmax (one tile more of the ring is held: NS >= 3)."""
    HALF: gl.constexpr = L // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    m_i = gl.full([BH], -1.0e30, gl.float32, gl.SliceLayout(1, s_layout))   # finite: 0 weight
    l_i = gl.zeros([BH], gl.float32, gl.SliceLayout(1, s_layout))
    if AHEAD:
        acc = warpgroup_mma_init(gl.zeros([BH, HALF], gl.float32, o_layout))
        # tile 0's scores, the one Q.K not issued ahead (with no tile, a spare over a stage
        # nothing loads: never read)
        mbarrier.wait(kv_ready.index(0), 0, pred=n_tiles > 0)
        tok = _qk(q_lat, q_pe, klat, kpe, 0, s_layout, BH, BN)
        sc = warpgroup_mma_wait(num_outstanding=0, deps=[tok])
        for i in range(n_tiles):
            s = i % NS
            n0 = start + i * BN
            # P.V of tile i - 1 first, waited for with nothing else in flight: ptxas serialises
            # every wgmma of the kernel (C7514) where a wait must retire a group issued in an
            # earlier loop iteration while a later one stays in flight
            acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
            mbarrier.arrive(kv_free.index((i + NS - 1) % NS), count=1, pred=i > 0)
            # Q.K of tile i + 1, under this tile's softmax; on the last tile a spare over the
            # stage after it, which nothing loads any more (its tile was released, or it was
            # never filled): the spare's scores are never read
            sn = (i + 1) % NS
            mbarrier.wait(kv_ready.index(sn), ((i + 1) // NS) & 1, pred=i + 1 < n_tiles)
            nxt = _qk(q_lat, q_pe, klat, kpe, sn, s_layout, BH, BN)
            p, alpha, m_i, l_i = _softmax_tile(sc * qk_scale, m_i, l_i, n0, kv_len, s_layout, BN)
            acc = _left_pv(p, alpha, acc, klat.index(s), n0, kv_len, p_smem, alpha_smem, p_ready,
                           p_free, i, o_layout, L, BN)
            sc = warpgroup_mma_wait(num_outstanding=1, deps=[nxt])      # scores of tile i + 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        mbarrier.arrive(kv_free.index((n_tiles + NS - 1) % NS), count=1, pred=n_tiles > 0)
    else:
        acc = gl.zeros([BH, HALF], gl.float32, o_layout)
        for i in range(n_tiles):
            s = i % NS
            n0 = start + i * BN
            mbarrier.wait(kv_ready.index(s), (i // NS) & 1)
            sc = warpgroup_mma_wait(num_outstanding=0, deps=[_qk(q_lat, q_pe, klat, kpe, s,
                                                                 s_layout, BH, BN)])
            p, alpha, m_i, l_i = _softmax_tile(sc * qk_scale, m_i, l_i, n0, kv_len, s_layout, BN)
            acc = _left_pv(p, alpha, acc, klat.index(s), n0, kv_len, p_smem, alpha_smem, p_ready,
                           p_free, i, o_layout, L, BN)
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
def _absorbed_gluon_kernel(
    QL, QP, lat_desc, pe_desc, BlockTables, WorkReq, WorkTok, QStart, SeqLens, Out, Lse,
    stride_qlh, stride_qlt, stride_qpt, stride_qph, stride_bt,
    stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
    qk_scale, v_scale, num_splits,
    L: gl.constexpr, R: gl.constexpr, PAGE_SIZE: gl.constexpr, BH: gl.constexpr,
    BN: gl.constexpr, NS: gl.constexpr, DIRECT: gl.constexpr, VALUES_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr, AHEAD: gl.constexpr,
):
    """Grid (head block, work tile = one decode token, KV split). Arguments as decode.py's
    version 1 kernel, with the latent cache as two descriptors over [slots, L + R]: lat_desc
    blocks [BN, L] and pe_desc blocks [BN, R]."""
    hb = gl.program_id(0)
    w = gl.program_id(1)
    split = gl.program_id(2)
    req = gl.load(WorkReq + w)
    tok = gl.load(WorkTok + w)
    kv_len = gl.load(SeqLens + req) - (gl.load(QStart + req + 1) - tok) + 1
    per_split = gl.cdiv(gl.cdiv(kv_len, num_splits), BN) * BN
    start = split * per_split
    end = gl.minimum(start + per_split, kv_len)
    n_tiles = gl.maximum(gl.cdiv(end - start, BN), 0)

    # queries: [BH, L] and [BH, R] into shared memory, once
    q_blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    heads = hb * BH + gl.arange(0, BH, layout=gl.SliceLayout(1, q_blocked))
    lat_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, L], gl.bfloat16)
    pe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, R], gl.bfloat16)
    q_lat = gl.allocate_shared_memory(QL.dtype.element_ty, [BH, L], lat_layout)
    q_pe = gl.allocate_shared_memory(QL.dtype.element_ty, [BH, R], pe_layout)
    q_rows = QL + gl.expand_dims(heads.to(gl.int64) * stride_qlh + tok * stride_qlt, 1)
    for c in gl.static_range(L // 64):
        cols = c * 64 + gl.arange(0, 64, layout=gl.SliceLayout(0, q_blocked))
        q_lat.slice(c * 64, 64, dim=1).store(gl.load(q_rows + gl.expand_dims(cols, 0)))
    pe_cols = gl.arange(0, R, layout=gl.SliceLayout(0, q_blocked))
    q_pe.store(gl.load(QP + gl.expand_dims(tok.to(gl.int64) * stride_qpt + heads * stride_qph, 1)
                       + gl.expand_dims(pe_cols, 0)))

    klat = gl.allocate_shared_memory(lat_desc.dtype, [NS, BN, L], lat_desc.layout)
    kpe = gl.allocate_shared_memory(pe_desc.dtype, [NS, BN, R], pe_desc.layout)
    p_smem = gl.allocate_shared_memory(QL.dtype.element_ty, [BH, BN],
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
        mbarrier.init(kv_ready.index(st), count=1)
        mbarrier.init(kv_free.index(st), count=2)       # both warpgroups release a stage
    mbarrier.init(p_ready, count=1)
    mbarrier.init(p_free, count=1)
    mbarrier.init(fin, count=1)
    fence_async_shared()

    # output rows: [T, H, (S,) L] fp32
    o_base = Out + tok.to(gl.int64) * stride_ot + split.to(gl.int64) * stride_os
    o_row = o_base + heads.to(gl.int64) * stride_oh
    lse_row = Lse + tok.to(gl.int64) * stride_lt + heads * stride_lh + split
    o_row_values = o_base + hb * BH * stride_oh
    gl.warp_specialize([
        (_scores, (q_lat, q_pe, klat, kpe, p_smem, alpha_smem, l_smem, kv_ready, kv_free,
                   p_ready, p_free, fin, o_row, lse_row, start, n_tiles, kv_len,
                   qk_scale, v_scale, L, BH, BN, NS, DIRECT, AHEAD)),
        (_values_entry, (klat, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready, p_free,
                         fin, o_row_values, stride_oh, n_tiles, v_scale, L, BH, NS)),
        (_loader, (lat_desc, pe_desc, klat, kpe, kv_ready, kv_free,
                   BlockTables + req * stride_bt, start, n_tiles, L, PAGE_SIZE, BN, NS)),
    ], [4, 1], [VALUES_REGS, LOADER_REGS])


@gluon.jit
def _values_entry(klat, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready, p_free, fin,
                  o_base, stride_oh, n_tiles, v_scale, L: gl.constexpr, BH: gl.constexpr,
                  NS: gl.constexpr):
    """The values partition takes no tensors: its output row pointers are built here."""
    HALF: gl.constexpr = L // 2
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    rows = gl.arange(0, BH, layout=gl.SliceLayout(1, o_layout))
    o_row = o_base + rows.to(gl.int64) * stride_oh
    _values(klat, p_smem, alpha_smem, l_smem, kv_ready, kv_free, p_ready, p_free, fin,
            o_row, n_tiles, v_scale, L, BH, NS)


def gluon_ready(q_lat, cache_flat, *, page_size: int, block_t: int, heads: int,
                block_n: int) -> bool:
    """Whether this kernel serves the call: decode tiles (one token a program), 64-head blocks,
    a bf16 cache of q's dtype, the latent widths it is built for (L 512, R 64), key tiles
    inside one page, rows TMA can address."""
    import torch
    return (block_t == 1 and heads % BLOCK_H == 0 and q_lat.dtype == torch.bfloat16
            and cache_flat.dtype == torch.bfloat16 and q_lat.shape[2] == 512
            and cache_flat.shape[1] == 576 and page_size % block_n == 0
            and cache_flat.stride(1) == 1 and q_lat.stride(2) == 1
            and (cache_flat.stride(0) * 2) % 16 == 0 and cache_flat.data_ptr() % 16 == 0
            and cache_flat.shape[0] < 2**31)


def absorbed_gluon(q_lat, q_pe, cache_flat, block_tables, work_req, work_tok, query_start_loc,
                   seq_lens, partial, lse, partial_strides, *, qk_scale, v_scale, num_splits,
                   page_size, direct, tile):
    """Launch _absorbed_gluon_kernel; arguments as decode.absorbed_attention prepares them,
    ``tile`` configs.ws_tile's (BLOCK_N, NUM_STAGES, AHEAD; partial of q's dtype where one
    split stores the output itself)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    BLOCK_N = tile["BLOCK_N"]
    H, _, L = q_lat.shape
    R = q_pe.shape[-1]
    rows = [cache_flat.shape[0], cache_flat.shape[1]]
    strides = [cache_flat.stride(0), 1]
    lat_l = gl.NVMMASharedLayout.get_default_for([BLOCK_N, L], gl.bfloat16)
    pe_l = gl.NVMMASharedLayout.get_default_for([BLOCK_N, R], gl.bfloat16)
    grid = (H // BLOCK_H, work_req.numel(), num_splits)
    _absorbed_gluon_kernel[grid](
        q_lat, q_pe, TensorDescriptor(cache_flat, rows, strides, [BLOCK_N, L], lat_l),
        TensorDescriptor(cache_flat, rows, strides, [BLOCK_N, R], pe_l), block_tables,
        work_req, work_tok, query_start_loc, seq_lens, partial, lse,
        q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1), block_tables.stride(0),
        *partial_strides, qk_scale, v_scale, num_splits,
        L=L, R=R, PAGE_SIZE=page_size, BH=BLOCK_H, BN=BLOCK_N, NS=tile["NUM_STAGES"],
        DIRECT=direct, VALUES_REGS=VALUES_REGS, LOADER_REGS=LOADER_REGS, AHEAD=tile["AHEAD"],
        num_warps=4, maxnreg=MAXNREG,
    )

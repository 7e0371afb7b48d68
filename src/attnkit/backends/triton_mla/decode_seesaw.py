"""Absorbed MLA decode for 64-head blocks on sm_90 in Gluon, the "seesaw" schedule: two
warpgroups that take the key tiles in turns, each owning half of the 512 output columns.

decode_gluon.py ("ws") computes every tile's scores on one warpgroup, so that warpgroup runs
Q.K (4.7 MFLOP a 64-key tile) + its half of P.V (2.1) while the other runs only its half of
P.V (2.1), and the tensor cores wait while the first one does the softmax. Here a round is
two key tiles, tile 2r in stage 0 and tile 2r+1 in stage 1 of a two-stage ring:

- left (the default partition, 4 warps): S0 = Q.K0^T, m_a = max(m, rowmax S0), P0, the
  factor a0 = 2^(m - m_a); P0, m_a, a0 and rowsum(P0) into shared memory (P0 over the rope
  rows of stage 0, dead after Q.K); O_L = O_L * a0 + P0.V0_L; then, once the right one has
  published P1 and a1 = 2^(m_a - m_b): O_L = O_L * a1 + P1.V1_L.
- right (a worker, 4 warps): S1 = Q.K1^T (while the left one runs its softmax), then with
  m_a: m_b = max(m_a, rowmax S1), P1, a1; P1 (over stage 1's rope rows), a1 and m_b out;
  O_R = O_R * a0 * a1 + (P0 * a1).V0_R + P1.V1_R. It keeps l, the row sums.
- loader (1 warp): both tiles of a round through TMA, a stage once both warpgroups released it.

So each warpgroup runs the same MMA work per round (one Q.K, two half P.V) and one's softmax
runs under the other's MMAs. Both end a round on the same max m_b. With an odd tile count
the last round's second tile is the split's last tile loaded again and masked whole (its
rows zeroed like stale slots).

Stale slots past the request's keys (TMA cannot mask rows) are zeroed in shared memory by the
warpgroup that owns the tile, before it publishes P, so neither P.V reads them.
Outputs and arguments as decode_gluon.py's kernel (fp32 partials + base-2 LSE, or DIRECT).
"""
from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from attnkit.backends.triton_mla.configs import SEESAW

BLOCK_H = SEESAW["BLOCK_H"]
BLOCK_N = SEESAW["BLOCK_N"]
MAXNREG = 168          # 12 warps x 32 x 168 <= 65536 at launch; setmaxnreg moves them
RIGHT_REGS = 232
LOADER_REGS = 24


@gluon.jit
def _pair_loader(lat_desc, pe_desc, klat, kpe, kv_ready, kv_free, bt_row, start, n_tiles,
                 n_rounds, L: gl.constexpr, PAGE_SIZE: gl.constexpr, BN: gl.constexpr,
                 NC: gl.constexpr):
    """Tile i into stage i % 2; tile n_tiles (odd counts) re-reads tile n_tiles - 1. NC = 1:
    one barrier a stage; else L / 64 latent column blocks and the rope rows, a barrier each
    (kv_ready.index(s * NC + c)), so Q.K starts on the first block that lands."""
    for i in range(2 * n_rounds):
        s = i % 2
        mbarrier.wait(kv_free.index(s), ((i // 2) & 1) ^ 1)
        n0 = start + gl.minimum(i, n_tiles - 1) * BN
        slot0 = gl.load(bt_row + n0 // PAGE_SIZE) * PAGE_SIZE + n0 % PAGE_SIZE
        if NC == 1:
            bar = kv_ready.index(s)
            mbarrier.expect(bar, lat_desc.block_type.nbytes + pe_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(lat_desc, [slot0, 0], bar, klat.index(s))
            tma.async_copy_global_to_shared(pe_desc, [slot0, L], bar, kpe.index(s))
        else:
            for c in gl.static_range(NC - 1):
                bar = kv_ready.index(s * NC + c)
                mbarrier.expect(bar, lat_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(lat_desc, [slot0, c * 64], bar,
                                                klat.index(s).slice(c * 64, 64, dim=1))
            bar = kv_ready.index(s * NC + NC - 1)
            mbarrier.expect(bar, pe_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(pe_desc, [slot0, L], bar, kpe.index(s))


@gluon.jit
def _scores(q_lat, q_pe, kl, kp, ready, s, phase, n0, end, qk_scale, L: gl.constexpr,
            BH: gl.constexpr, BN: gl.constexpr, NC: gl.constexpr, s_layout: gl.constexpr):
    """[BH, BN] scaled, masked scores of the tile in stage s (keys at n0 .. n0 + BN, valid
    below end), once its barrier(s) of this phase complete (NC: _pair_loader's)."""
    s0 = gl.zeros([BH, BN], gl.float32, s_layout)
    if NC == 1:
        mbarrier.wait(ready.index(s), phase)
        sc = warpgroup_mma(q_lat, kl.permute((1, 0)), s0, use_acc=False, is_async=True)
    else:
        sc = s0
        for c in gl.static_range(NC - 1):
            mbarrier.wait(ready.index(s * NC + c), phase)
            sc = warpgroup_mma(q_lat.slice(c * 64, 64, dim=1),
                               kl.slice(c * 64, 64, dim=1).permute((1, 0)), sc, is_async=True)
        mbarrier.wait(ready.index(s * NC + NC - 1), phase)
    sc = warpgroup_mma(q_pe, kp.permute((1, 0)), sc, is_async=True)
    sc = warpgroup_mma_wait(num_outstanding=0, deps=[sc])
    pos = n0 + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    return gl.where(gl.expand_dims(pos < end, 0), sc * qk_scale, float("-inf"))


@gluon.jit
def _store_rows(o_base, stride_oh, acc, l_i, v_scale, live, COL0: gl.constexpr,
                HALF: gl.constexpr, BH: gl.constexpr, o_layout: gl.constexpr):
    """acc / l_i * v_scale into columns COL0 .. + HALF of the block's first ``live`` head rows."""
    rows = gl.arange(0, BH, layout=gl.SliceLayout(1, o_layout))
    cols = COL0 + gl.arange(0, HALF, layout=gl.SliceLayout(0, o_layout))
    out = acc * gl.expand_dims(v_scale / gl.where(l_i == 0.0, 1.0, l_i), 1)
    ptrs = o_base + gl.expand_dims(rows.to(gl.int64) * stride_oh, 1) + gl.expand_dims(cols, 0)
    gl.store(ptrs, out, mask=gl.expand_dims(rows < live, 1))


@gluon.jit
def _zero_stale(kl, n0, end, L: gl.constexpr, BN: gl.constexpr):
    """Zeros over the latent rows of a tile at or past end (then fenced for wgmma)."""
    zero_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    keep = gl.expand_dims(n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, zero_layout)) < end, 1)
    for c in gl.static_range(L // 64):
        part = kl.slice(c * 64, 64, dim=1)
        part.store(gl.where(keep, part.load(zero_layout), 0.0))
    fence_async_shared()


@gluon.jit
def _left(q_lat, q_pe, klat, kpe, xa, xb, kv_ready, kv_free, p0_ready, p1_ready, fin,
          o_base, stride_oh, live, start, end, n_rounds, qk_scale, v_scale,
          L: gl.constexpr, BH: gl.constexpr, BN: gl.constexpr, NC: gl.constexpr):
    """Even tiles' scores and softmax; O[:, :L/2]. xa: three [BH] buffers (m_a, a0,
    rowsum P0) written here; xb: three (a1, m_b, final l) read here."""
    HALF: gl.constexpr = L // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    m_i = gl.full([BH], -1.0e30, gl.float32, s_rows)    # finite: a masked tile weighs 0
    acc = gl.zeros([BH, HALF], gl.float32, o_layout)
    for r in range(n_rounds):
        n0 = start + 2 * r * BN
        kl = klat.index(0)
        sc = _scores(q_lat, q_pe, kl, kpe.index(0), kv_ready, 0, r & 1, n0, end, qk_scale, L,
                     BH, BN, NC, s_layout)
        m_a = gl.maximum(m_i, gl.max(sc, axis=1))
        a0 = gl.exp2(m_i - m_a)
        p = gl.exp2(sc - gl.expand_dims(m_a, 1))
        if n0 + BN > end:
            _zero_stale(kl, n0, end, L, BN)
        p16 = p.to(q_lat.dtype)
        kpe.index(0).store(p16)         # the rope rows are dead after Q.K: P0 goes there
        xa[0].store(m_a)
        xa[1].store(a0)
        xa[2].store(gl.sum(p, axis=1))
        fence_async_shared()
        mbarrier.arrive(p0_ready, count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(a0, o_rows), 1)
        acc = warpgroup_mma(gl.convert_layout(p16, p_layout), kl.slice(0, HALF, dim=1), acc,
                            is_async=True)
        mbarrier.wait(p1_ready, r & 1)
        a1 = xb[0].load(o_rows)
        m_i = xb[1].load(s_rows)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        mbarrier.arrive(kv_free.index(0), count=1)
        acc = acc * gl.expand_dims(a1, 1)
        acc = warpgroup_mma(kpe.index(1), klat.index(1).slice(0, HALF, dim=1), acc,
                            is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        mbarrier.arrive(kv_free.index(1), count=1)
    mbarrier.wait(fin, 0)
    _store_rows(o_base, stride_oh, acc, xb[2].load(o_rows), v_scale, live, 0, HALF, BH, o_layout)


@gluon.jit
def _right(q_lat, q_pe, klat, kpe, xa, xb, kv_ready, kv_free, p0_ready, p1_ready, fin,
           o_base, lse_base, stride_oh, stride_lh, live, start, end, n_rounds, qk_scale, v_scale,
           L: gl.constexpr, BH: gl.constexpr, BN: gl.constexpr, NC: gl.constexpr,
           DIRECT: gl.constexpr):
    """Odd tiles' scores and softmax; O[:, L/2:], the row sums, the LSE."""
    HALF: gl.constexpr = L // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    m_i = gl.full([BH], -1.0e30, gl.float32, s_rows)
    l_i = gl.zeros([BH], gl.float32, s_rows)
    acc = gl.zeros([BH, HALF], gl.float32, o_layout)
    for r in range(n_rounds):
        n1 = start + (2 * r + 1) * BN
        kl = klat.index(1)
        sc = _scores(q_lat, q_pe, kl, kpe.index(1), kv_ready, 1, r & 1, n1, end, qk_scale, L,
                     BH, BN, NC, s_layout)
        mbarrier.wait(p0_ready, r & 1)
        m_a = xa[0].load(s_rows)
        a0 = xa[1].load(s_rows)
        l0 = xa[2].load(s_rows)
        m_b = gl.maximum(m_a, gl.max(sc, axis=1))
        a1 = gl.exp2(m_a - m_b)
        p = gl.exp2(sc - gl.expand_dims(m_b, 1))
        if n1 + BN > end:
            _zero_stale(kl, n1, end, L, BN)
        p16 = p.to(q_lat.dtype)
        kpe.index(1).store(p16)
        xb[0].store(a1)
        xb[1].store(m_b)
        fence_async_shared()
        mbarrier.arrive(p1_ready, count=1)
        l_i = (l_i * a0 + l0) * a1 + gl.sum(p, axis=1)
        m_i = m_b
        p0 = kpe.index(0).load(s_layout).to(gl.float32) * gl.expand_dims(a1, 1)
        acc = acc * gl.expand_dims(gl.convert_layout(a0 * a1, o_rows), 1)
        acc = warpgroup_mma(gl.convert_layout(p0.to(q_lat.dtype), p_layout),
                            klat.index(0).slice(HALF, HALF, dim=1), acc, is_async=True)
        acc = warpgroup_mma(gl.convert_layout(p16, p_layout), kl.slice(HALF, HALF, dim=1), acc,
                            is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        mbarrier.arrive(kv_free.index(0), count=1)
        mbarrier.arrive(kv_free.index(1), count=1)
    xb[2].store(l_i)
    mbarrier.arrive(fin, count=1)
    _store_rows(o_base, stride_oh, acc, gl.convert_layout(l_i, o_rows), v_scale, live, HALF, HALF,
                BH, o_layout)
    if not DIRECT:
        lse = gl.where(l_i == 0.0, float("-inf"), m_i + gl.log2(gl.where(l_i == 0.0, 1.0, l_i)))
        rows = gl.arange(0, BH, layout=s_rows)
        gl.store(lse_base + rows * stride_lh, lse, mask=rows < live)


@gluon.jit
def _absorbed_seesaw_kernel(
    QL, QP, lat_desc, pe_desc, BlockTables, WorkReq, WorkTok, QStart, SeqLens, Out, Lse,
    stride_qlh, stride_qlt, stride_qpt, stride_qph, stride_bt,
    stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
    qk_scale, v_scale, num_splits, H,
    L: gl.constexpr, R: gl.constexpr, PAGE_SIZE: gl.constexpr, BH: gl.constexpr,
    BN: gl.constexpr, NC: gl.constexpr, DIRECT: gl.constexpr, RIGHT_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr,
):
    """Grid (head block, decode token, KV split); arguments as decode_gluon's kernel, plus H
    (query heads: a block past H has its rows masked, so any head count runs in 64-row
    programs; rows past H read q = 0 and store nothing)."""
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
    n_rounds = gl.cdiv(n_tiles, 2)
    gl.static_assert(BH == BN and R == BN)      # P [BH, BN] lives over a tile's [BN, R] rope rows

    q_blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    heads = hb * BH + gl.arange(0, BH, layout=gl.SliceLayout(1, q_blocked))
    q_lat = gl.allocate_shared_memory(QL.dtype.element_ty, [BH, L],
                                      gl.NVMMASharedLayout.get_default_for([BH, L], gl.bfloat16))
    q_pe = gl.allocate_shared_memory(QL.dtype.element_ty, [BH, R],
                                     gl.NVMMASharedLayout.get_default_for([BH, R], gl.bfloat16))
    q_rows = QL + gl.expand_dims(heads.to(gl.int64) * stride_qlh + tok * stride_qlt, 1)
    head_ok = gl.expand_dims(heads < H, 1)
    for c in gl.static_range(L // 64):
        cols = c * 64 + gl.arange(0, 64, layout=gl.SliceLayout(0, q_blocked))
        q_lat.slice(c * 64, 64, dim=1).store(gl.load(q_rows + gl.expand_dims(cols, 0),
                                                     mask=head_ok, other=0.0))
    pe_cols = gl.arange(0, R, layout=gl.SliceLayout(0, q_blocked))
    q_pe.store(gl.load(QP + gl.expand_dims(tok.to(gl.int64) * stride_qpt + heads * stride_qph, 1)
                       + gl.expand_dims(pe_cols, 0), mask=head_ok, other=0.0))

    klat = gl.allocate_shared_memory(lat_desc.dtype, [2, BN, L], lat_desc.layout)
    kpe = gl.allocate_shared_memory(pe_desc.dtype, [2, BN, R], pe_desc.layout)
    vec: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    xa = (gl.allocate_shared_memory(gl.float32, [BH], vec),     # m_a, a0, rowsum P0
          gl.allocate_shared_memory(gl.float32, [BH], vec),
          gl.allocate_shared_memory(gl.float32, [BH], vec))
    xb = (gl.allocate_shared_memory(gl.float32, [BH], vec),     # a1, m_b, final l
          gl.allocate_shared_memory(gl.float32, [BH], vec),
          gl.allocate_shared_memory(gl.float32, [BH], vec))
    kv_ready = gl.allocate_shared_memory(gl.int64, [2 * NC, 1], mbarrier.MBarrierLayout())
    kv_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    p0_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    p1_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    fin = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for st in gl.static_range(2 * NC):
        mbarrier.init(kv_ready.index(st), count=1)
    for st in gl.static_range(2):
        mbarrier.init(kv_free.index(st), count=2)       # both warpgroups release a stage
    mbarrier.init(p0_ready, count=1)
    mbarrier.init(p1_ready, count=1)
    mbarrier.init(fin, count=1)
    fence_async_shared()

    o_base = Out + tok.to(gl.int64) * stride_ot + split.to(gl.int64) * stride_os
    head0 = o_base + hb * BH * stride_oh
    lse_base = Lse + tok.to(gl.int64) * stride_lt + hb * BH * stride_lh + split
    live = H - hb * BH
    gl.warp_specialize([
        (_left, (q_lat, q_pe, klat, kpe, xa, xb, kv_ready, kv_free, p0_ready, p1_ready, fin,
                 head0, stride_oh, live, start, end, n_rounds, qk_scale, v_scale, L, BH, BN,
                 NC)),
        (_right, (q_lat, q_pe, klat, kpe, xa, xb, kv_ready, kv_free, p0_ready, p1_ready, fin,
                  head0, lse_base, stride_oh, stride_lh, live, start, end, n_rounds, qk_scale,
                  v_scale, L, BH, BN, NC, DIRECT)),
        (_pair_loader, (lat_desc, pe_desc, klat, kpe, kv_ready, kv_free,
                        BlockTables + req * stride_bt, start, n_tiles, n_rounds, L, PAGE_SIZE,
                        BN, NC)),
    ], [4, 1], [RIGHT_REGS, LOADER_REGS])


def absorbed_seesaw(q_lat, q_pe, cache_flat, block_tables, work_req, work_tok, query_start_loc,
                    seq_lens, partial, lse, partial_strides, *, qk_scale, v_scale, num_splits,
                    page_size, direct):
    """Launch _absorbed_seesaw_kernel; arguments as decode_gluon.absorbed_gluon's (the shapes
    decode_gluon.gluon_ready takes, any head count)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    H, _, L = q_lat.shape
    R = q_pe.shape[-1]
    nc = SEESAW["CHUNKS"]          # read at launch: 1, or L / 64 + 1 (a barrier a 64-column block)
    lat_cols = L if nc == 1 else 64
    rows = [cache_flat.shape[0], cache_flat.shape[1]]
    strides = [cache_flat.stride(0), 1]
    lat_l = gl.NVMMASharedLayout.get_default_for([BLOCK_N, lat_cols], gl.bfloat16)
    pe_l = gl.NVMMASharedLayout.get_default_for([BLOCK_N, R], gl.bfloat16)
    grid = (triton.cdiv(H, BLOCK_H), work_req.numel(), num_splits)
    _absorbed_seesaw_kernel[grid](
        q_lat, q_pe, TensorDescriptor(cache_flat, rows, strides, [BLOCK_N, lat_cols], lat_l),
        TensorDescriptor(cache_flat, rows, strides, [BLOCK_N, R], pe_l), block_tables,
        work_req, work_tok, query_start_loc, seq_lens, partial, lse,
        q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1), block_tables.stride(0),
        *partial_strides, qk_scale, v_scale, num_splits, H,
        L=L, R=R, PAGE_SIZE=page_size, BH=BLOCK_H, BN=BLOCK_N, NC=nc, DIRECT=direct,
        RIGHT_REGS=RIGHT_REGS, LOADER_REGS=LOADER_REGS, num_warps=4, maxnreg=MAXNREG,
    )

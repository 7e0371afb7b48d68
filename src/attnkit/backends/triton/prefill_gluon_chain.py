"""The rows kernel (prefill_gluon_rows.py: batched causal prefills, cached prefixes) as a
persistent chain: every item's first Q.K is issued in the previous item's last tile, where the
one-item form issues a spare Q.K of its own last tile again (issue 28; NOTES-hopper.md
version 13).

What the persistent rows form pays per item (4,096 items of 1-16 key tiles at 8 x 2k): the
spare Q.K (half a tile of tensor work), then a prologue with nothing in flight (wait for Q and
K, issue the first Q.K, wait for it). Chained, the warpgroup's last tile of item u issues
Q.K of tile 0 of item u + 1 (its Q in the second of two Q buffers, its first K tile the next
slot of the one ring the loader fills across items) before its own last P.V; the epilogue
(the last P.V's wait, the store) then runs while the other warpgroup's GEMMs keep the tensor
cores busy, and the next item starts on scores already there. Only a program's last item
issues a spare. Turns: one per tile (t += n_tiles), plus the program's one prologue.

Which program runs which items is a schedule from the host (rows_schedule.py: round-robin,
LPT, causal pairs): program p runs items Order[Start[p] .. Start[p + 1] - 1]. Item u of a
program (u counted from 0) holds Q buffer u % 2: the loader loads it once both warpgroups
released item u - 2 (q_free[u % 2]).

Geometry (request, head, rows, positions, the causal mask aligned to the last key, the
output shift) is prefill_gluon_rows._geometry's; the store is prefill_gluon._store_out.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_init,
                                                              warpgroup_mma_wait)

from attnkit.backends.triton.prefill_gluon import _normalised, _store_out, launch_args
from attnkit.backends.triton.prefill_gluon_rows import _geometry


@gluon.jit
def _chain_rings(q_desc, k_desc, v_desc, D: gl.constexpr, BN: gl.constexpr, NSK: gl.constexpr,
                 NSV: gl.constexpr):
    """prefill_gluon._rings with two Q buffers (each its q_bar / q_free)."""
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, 128, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [NSK, BN, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [NSV, BN, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NSK, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [NSK, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NSV, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [NSV, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(2):
        mbarrier.init(q_bar.index(b), count=1)
        mbarrier.init(q_free.index(b), count=2)         # both warpgroups release a Q
    for s in gl.static_range(NSK):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(k_free.index(s), count=2)
    for s in gl.static_range(NSV):
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(v_free.index(s), count=2)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    fence_async_shared()
    mbarrier.arrive(turn.index(0), count=1)             # warpgroup 0 has the first turn
    return q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn


@gluon.jit
def _load_k(k_desc, k_smem, k_ready, k_free, g, row, col, NSK: gl.constexpr):
    """K tile number g of this program (rows row .. + BN) into its ring slot, once free."""
    s = g % NSK
    mbarrier.wait(k_free.index(s), ((g // NSK) & 1) ^ 1)
    mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row, col], k_ready.index(s), k_smem.index(s))


@gluon.jit
def _load_q(q_desc, q_smem, q_bar, q_free, u, row, col):
    """Q of the program's item u into buffer u % 2, once item u - 2 released it."""
    b = u % 2
    mbarrier.wait(q_free.index(b), ((u // 2) & 1) ^ 1)
    mbarrier.expect(q_bar.index(b), q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row, col], q_bar.index(b), q_smem.index(b))


@gluon.jit
def _write_tile(kc_desc, vc_desc, k_smem, v_smem, k_ready, v_ready, g, row0, kv_len, t0, kv_col,
                SlotMap, Kin, Vin, stride_kin, stride_vin, Kc, Vc, stride_c, BN: gl.constexpr,
                PAGE: gl.constexpr, D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr):
    """WRITE: this program's tile g (keys row0 .. + BN of a fresh request whose step rows
    start at t0) into the cache once it is in shared memory: its whole pages by TMA from the
    ring slots, the rows of a last partial page (below kv_len) from the step's k / v."""
    sk = g % NSK
    sv = g % NSV
    mbarrier.wait(k_ready.index(sk), (g // NSK) & 1)
    mbarrier.wait(v_ready.index(sv), (g // NSV) & 1)
    rows = gl.minimum(kv_len - row0, BN)
    full = rows // PAGE
    for p in gl.static_range(BN // PAGE):
        if p < full:
            slot = gl.load(SlotMap + t0 + row0 + p * PAGE).to(gl.int32)
            tma.async_copy_shared_to_global(kc_desc, [slot, kv_col], k_smem.index(sk).slice(p * PAGE, PAGE))
            tma.async_copy_shared_to_global(vc_desc, [slot, kv_col], v_smem.index(sv).slice(p * PAGE, PAGE))
    cols = gl.arange(0, D, layout=gl.BlockedLayout([D // 32], [32], [1], [0]))
    for r in range(row0 + full * PAGE, row0 + rows):
        t = (t0 + r).to(gl.int64)
        slot = gl.load(SlotMap + t)
        gl.store(Kc + slot * stride_c + kv_col + cols, gl.load(Kin + t * stride_kin + kv_col + cols))
        gl.store(Vc + slot * stride_c + kv_col + cols, gl.load(Vin + t * stride_vin + kv_col + cols))


@gluon.jit
def _chain_loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
                  k_free, v_free, Order, Start, BlockReq, BlockM, QStart, KStart, SeqLens,
                  kc_desc, vc_desc, SlotMap, Kin, Vin, stride_kin, stride_vin, Kc, Vc, stride_c,
                  NUM_HEADS: gl.constexpr, GROUP: gl.constexpr, BN: gl.constexpr,
                  D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr, WRITE: gl.constexpr,
                  PAGE: gl.constexpr):
    """The loader partition: the first item's K tile 0 and Q, then per tile K one ahead of V;
    the last tile's "K ahead" is the next item's tile 0, followed by the next item's Q.
    WRITE (a packed fresh step): the item of a block's first head of each KV group also
    writes its last (diagonal) tile, the block's own keys, into the cache (_write_tile); a
    slot is refilled only once those stores have read it (store_wait)."""
    s0 = gl.load(Start + gl.program_id(0))
    s1 = gl.load(Start + gl.program_id(0) + 1)
    if s0 < s1:
        req, h, q_row, pos0, kv_len, n = _geometry(gl.load(Order + s0), BlockReq, BlockM, QStart,
                                                   SeqLens, NUM_HEADS, BN)
        _load_k(k_desc, k_smem, k_ready, k_free, 0, gl.load(KStart + req), (h // GROUP) * D, NSK)
        _load_q(q_desc, q_smem, q_bar, q_free, 0, q_row, h * D)
    g = 0
    for s in range(s0, s1):
        req, h, q_row, pos0, kv_len, n = _geometry(gl.load(Order + s), BlockReq, BlockM, QStart,
                                                   SeqLens, NUM_HEADS, BN)
        kv_row0 = gl.load(KStart + req)
        kv_col = (h // GROUP) * D
        nxt = gl.minimum(s + 1, s1 - 1)
        req2, h2, q_row2, pos2, kv_len2, n2 = _geometry(gl.load(Order + nxt), BlockReq, BlockM,
                                                        QStart, SeqLens, NUM_HEADS, BN)
        for i in range(n):
            if WRITE:
                tma.store_wait(0)
            if i + 1 < n:
                _load_k(k_desc, k_smem, k_ready, k_free, g + i + 1, kv_row0 + (i + 1) * BN,
                        kv_col, NSK)
            elif s + 1 < s1:
                _load_k(k_desc, k_smem, k_ready, k_free, g + n, gl.load(KStart + req2),
                        (h2 // GROUP) * D, NSK)
                _load_q(q_desc, q_smem, q_bar, q_free, s + 1 - s0, q_row2, h2 * D)
            gv = g + i
            sv = gv % NSV
            mbarrier.wait(v_free.index(sv), ((gv // NSV) & 1) ^ 1)
            mbarrier.expect(v_ready.index(sv), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [kv_row0 + i * BN, kv_col], v_ready.index(sv),
                                            v_smem.index(sv))
        if WRITE:
            if h % GROUP == 0:
                _write_tile(kc_desc, vc_desc, k_smem, v_smem, k_ready, v_ready, g + n - 1,
                            (n - 1) * BN, kv_len, kv_row0, kv_col, SlotMap, Kin, Vin, stride_kin,
                            stride_vin, Kc, Vc, stride_c, BN, PAGE, D, NSK, NSV)
        g += n
    if WRITE:
        tma.store_wait(0)


@gluon.jit
def _chain_tile(j, n, g0, t0, u, more, sc, o, m_i, l_i, rows, q_smem, k_smem, v_smem, q_bar,
                k_ready, v_ready, k_free, v_free, turn, qk_scale, MASKED: gl.constexpr,
                WG: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, NSK: gl.constexpr,
                NSV: gl.constexpr):
    """prefill_gluon._tile (causal) for key tile j of the program's item u (n tiles, the
    program's tiles g0 .. before it, turns t0 + 1 ..), except what its issue reads: Q.K of
    tile j + 1, or on the last tile (j = n - 1) of item u + 1's tile 0 (Q buffer (u + 1) % 2,
    K tile g0 + n) where ``more`` (an item follows), else a spare Q.K of this last tile."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    if MASKED:
        cols = j * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
        sc = gl.where(gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1), sc, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(sc, axis=1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(sc * qk_scale - gl.expand_dims(m_new, 1))
    l_i = l_i * alpha + gl.sum(p, axis=1)
    o = warpgroup_mma_wait(num_outstanding=0, deps=[o])              # P.V of tile j - 1
    mbarrier.arrive(v_free.index((g0 + j + NSV - 1) % NSV), count=1, pred=j > 0)
    p16 = gl.convert_layout(p.to(q_smem.dtype), p_layout)
    o = o * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    last = j + 1 == n
    spare = last & (more == 0)
    gn = g0 + j + 1 - spare.to(gl.int32)        # the spare reads the last tile's slot again
    sn = gn % NSK
    uq = u + (last & (more != 0)).to(gl.int32)   # the item whose Q the issue reads
    mbarrier.wait(k_ready.index(sn), (gn // NSK) & 1)
    mbarrier.wait(q_bar.index(uq % 2), (uq // 2) & 1)
    mbarrier.wait(turn.index(WG), (t0 + j + 1) & 1)
    tok = warpgroup_mma(q_smem.index(uq % 2).slice(64 * WG, 64), k_smem.index(sn).permute((1, 0)),
                        gl.zeros([64, BN], gl.float32, s_layout), use_acc=False, is_async=True)
    gv = g0 + j
    mbarrier.wait(v_ready.index(gv % NSV), (gv // NSV) & 1)
    o = warpgroup_mma(p16, v_smem.index(gv % NSV), o, is_async=True)
    mbarrier.arrive(turn.index(1 - WG), count=1)
    sc = warpgroup_mma_wait(num_outstanding=1 - WG, deps=[tok])     # scores of the next tile
    # the spare's slot was released by the Q.K that read it first; nothing refills it after
    mbarrier.arrive(k_free.index(sn), count=1, pred=spare == 0)
    return sc, o, m_new, l_i


@gluon.jit
def _geo_row(Geo, s, GEO: gl.constexpr):
    """GEO: slot s's row of the host's geometry table (chain_geometry: head, first step row,
    first row's position, kv_len, key tiles), five loads with no dependence between them;
    else zeros (the table is not passed)."""
    if GEO:
        row = Geo + s * 8
        return (gl.load(row), gl.load(row + 1), gl.load(row + 2), gl.load(row + 3),
                gl.load(row + 4))
    else:
        return 0, 0, 0, 0, 0


@gluon.jit
def _store_item(o, l_i, Out, stride_ot, q_row, pos0, h, kv_len, v_scale, WG: gl.constexpr,
                D: gl.constexpr, o_layout: gl.constexpr):
    """Warpgroup WG's 64 rows of an item by plain stores (_store_out; rows past kv_len not)."""
    out = Out + (q_row - pos0).to(gl.int64) * stride_ot      # position p -> its step row
    _store_out(o, l_i, out, stride_ot, h * D, pos0 + 64 * WG, kv_len, v_scale, D, o_layout)


@gluon.jit
def _chain_compute(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                   Out, stride_ot, Order, Start, BlockReq, BlockM, QStart, SeqLens, Geo, o_desc,
                   qk_scale, v_scale, WG: gl.constexpr, NUM_HEADS: gl.constexpr, BN: gl.constexpr,
                   D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr, GEO: gl.constexpr,
                   STORE_TMA: gl.constexpr):
    """Warpgroup WG's rows (64 * WG .. + 63 of each block) of every item of this program."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    s0 = gl.load(Start + gl.program_id(0))
    s1 = gl.load(Start + gl.program_id(0) + 1)
    sc = gl.zeros([64, BN], gl.float32, s_layout)
    if s0 < s1:                             # the program's one prologue: item 0's first Q.K
        mbarrier.wait(q_bar.index(0), 0)
        mbarrier.wait(k_ready.index(0), 0)
        mbarrier.wait(turn.index(WG), 0)
        tok = warpgroup_mma(q_smem.index(0).slice(64 * WG, 64), k_smem.index(0).permute((1, 0)),
                            gl.zeros([64, BN], gl.float32, s_layout), use_acc=False, is_async=True)
        mbarrier.arrive(turn.index(1 - WG), count=1)
        sc = warpgroup_mma_wait(num_outstanding=0, deps=[tok])
        mbarrier.arrive(k_free.index(0), count=1)
    g = 0                                   # key tiles of the items before this one
    t = 0                                   # turns taken before this item's first tile
    nh, nq, np0, nkv, nn = _geo_row(Geo, gl.minimum(s0, gl.maximum(s1 - 1, 0)), GEO)
    held = 0                                # STORE_TMA: the last item's Q buffer not yet released
    for s in range(s0, s1):
        u = s - s0
        if GEO:     # this item's row came with the last one; the next one's loads go out now
            h, q_row, pos0, kv_len, n = nh, nq, np0, nkv, nn
            nh, nq, np0, nkv, nn = _geo_row(Geo, gl.minimum(s + 1, s1 - 1), GEO)
        else:
            req, h, q_row, pos0, kv_len, n = _geometry(gl.load(Order + s), BlockReq, BlockM,
                                                       QStart, SeqLens, NUM_HEADS, BN)
        if STORE_TMA:   # the last item's TMA store has read its Q rows: release that buffer
            tma.store_wait(0)
            mbarrier.arrive(q_free.index((u + 1) % 2), count=1, pred=held != 0)
        more = (s + 1 < s1).to(gl.int32)
        rows = pos0 + 64 * WG + gl.arange(0, 64, layout=gl.SliceLayout(1, s_layout))
        m_i = gl.full([64], -1.0e30, gl.float32, gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([64], gl.float32, gl.SliceLayout(1, s_layout))
        o = warpgroup_mma_init(gl.zeros([64, D], gl.float32, o_layout))
        n_left = pos0 // BN                 # tiles wholly left of the block's first row
        for j in range(n_left):
            sc, o, m_i, l_i = _chain_tile(j, n, g, t, u, more, sc, o, m_i, l_i, rows, q_smem,
                                          k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free,
                                          turn, qk_scale, False, WG, BN, D, NSK, NSV)
        for j in range(n_left, n):
            sc, o, m_i, l_i = _chain_tile(j, n, g, t, u, more, sc, o, m_i, l_i, rows, q_smem,
                                          k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free,
                                          turn, qk_scale, True, WG, BN, D, NSK, NSV)
        if STORE_TMA:
            o = warpgroup_mma_wait(num_outstanding=0, deps=[o])
            mbarrier.arrive(v_free.index((g + n - 1) % NSV), count=1)
            # rows all the request's: O through this warpgroup's rows of its Q buffer (no MMA
            # reads it now) and one TMA store; the buffer is released at the next item's top
            full = pos0 + 64 * WG + 64 <= kv_len
            if full:
                rows_smem = q_smem.index(u % 2).slice(64 * WG, 64)
                rows_smem.store(_normalised(o, l_i, v_scale, o_layout).to(q_smem.dtype))
                fence_async_shared()
                tma.async_copy_shared_to_global(o_desc, [q_row + 64 * WG, h * D], rows_smem)
            else:
                mbarrier.arrive(q_free.index(u % 2), count=1)
                _store_item(o, l_i, Out, stride_ot, q_row, pos0, h, kv_len, v_scale, WG, D,
                            o_layout)
            held = full.to(gl.int32)
        else:
            mbarrier.arrive(q_free.index(u % 2), count=1)     # its last Q.K is done
            o = warpgroup_mma_wait(num_outstanding=0, deps=[o])
            mbarrier.arrive(v_free.index((g + n - 1) % NSV), count=1)
            _store_item(o, l_i, Out, stride_ot, q_row, pos0, h, kv_len, v_scale, WG, D, o_layout)
        g += n
        t += n
    if STORE_TMA:
        tma.store_wait(0)


@gluon.jit
def _chain_compute_second(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free,
                          turn, Out, stride_ot, Order, Start, BlockReq, BlockM, QStart, SeqLens,
                          Geo, o_desc, qk_scale, v_scale, NUM_HEADS: gl.constexpr, BN: gl.constexpr,
                          D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr,
                          GEO: gl.constexpr, STORE_TMA: gl.constexpr):
    """Warpgroup 1, the worker partition (its constexprs from its own signature)."""
    _chain_compute(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                   Out, stride_ot, Order, Start, BlockReq, BlockM, QStart, SeqLens, Geo, o_desc,
                   qk_scale, v_scale, 1, NUM_HEADS, BN, D, NSK, NSV, GEO, STORE_TMA)


@gluon.jit
def _prefill_gluon_chain_kernel(q_desc, k_desc, v_desc, Out, stride_ot, Order, Start, BlockReq,
                                BlockM, QStart, KStart, SeqLens, Geo, o_desc, qk_scale, v_scale, kc_desc,
                                vc_desc, SlotMap, Kin, Vin, stride_kin, stride_vin, Kc, Vc,
                                stride_c, NUM_HEADS: gl.constexpr, GROUP: gl.constexpr,
                                D: gl.constexpr, BN: gl.constexpr, NSK: gl.constexpr,
                                NSV: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                                LOADER_REGS: gl.constexpr, WRITE: gl.constexpr,
                                PAGE: gl.constexpr, GEO: gl.constexpr, STORE_TMA: gl.constexpr):
    """Grid: (programs,). Descriptors, Out and the block / request arrays as
    _prefill_gluon_rows_kernel's; Order [items] int32 item ids, Start [programs + 1] int32
    (rows_schedule.schedule). WRITE: kc_desc / vc_desc over the cache pages as [slots,
    H_kv * D] rows (blocks [PAGE, D]), Kc / Vc the same pages (row stride stride_c), SlotMap
    [T] int64 each step row's slot, Kin / Vin the step's k / v (row strides stride_kin /
    stride_vin); unused otherwise. GEO: the compute partitions read each item's geometry from
    Geo [items, 8] int32 (chain_geometry), not through Order / BlockReq / QStart. STORE_TMA:
    o_desc over Out's rows ([T, H_q * D], blocks [64, D]); a warpgroup's 64 rows that are all
    its request's go out through its rows of the item's Q buffer by TMA. num_warps = 4."""
    q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn = _chain_rings(
        q_desc, k_desc, v_desc, D, BN, NSK, NSV)
    gl.warp_specialize([
        (_chain_compute, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free,
                          turn, Out, stride_ot, Order, Start, BlockReq, BlockM, QStart, SeqLens,
                          Geo, o_desc, qk_scale, v_scale, 0, NUM_HEADS, BN, D, NSK, NSV, GEO,
                          STORE_TMA)),
        (_chain_compute_second, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free,
                                 v_free, turn, Out, stride_ot, Order, Start, BlockReq, BlockM,
                                 QStart, SeqLens, Geo, o_desc, qk_scale, v_scale, NUM_HEADS, BN, D,
                                 NSK, NSV, GEO, STORE_TMA)),
        (_chain_loader, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready,
                         v_ready, k_free, v_free, Order, Start, BlockReq, BlockM, QStart, KStart,
                         SeqLens, kc_desc, vc_desc, SlotMap, Kin, Vin, stride_kin, stride_vin, Kc,
                         Vc, stride_c, NUM_HEADS, GROUP, BN, D, NSK, NSV, WRITE, PAGE)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


def prefill_gluon_chain_attention(q, k_rows, v_rows, out, *, block_req, block_m, query_start_loc,
                                  key_start, seq_lens, order, start, qk_scale, v_scale, tiles,
                                  write=None, geo=None, store_tma=False):
    """prefill_gluon_rows_attention's causal attention (q [T, H_q, D]; k_rows / v_rows
    [R, H_kv, D]; out [T, H_q, D]; block_req / block_m [NB], query_start_loc [B + 1],
    key_start / seq_lens [B] int32) with the chained persistent walk: order [items] / start
    [programs + 1] int32 on q's device (rows_schedule.schedule), one program per entry of
    start but the last. tiles: (BN, K slots, V slots); shared memory 2 x 128 x D (Q) +
    (K + V slots) x BN x D, 16-bit. write: (k_cache, v_cache [pages, PAGE, H_kv, D] dense, of
    q's dtype, PAGE a power of two from 8 to BN; slot_mapping [T] int64) on a packed fresh step
    (k_rows / v_rows the step's own k / v): the step's K/V written into the cache by the
    kernel (chain_write_ok says where it can). geo: chain_geometry's table [items, 8] int32 on
    q's device, rows in ``order``'s slots (the compute partitions' geometry), or None.
    store_tma: full 64-row output blocks stored by TMA (where out's rows allow a descriptor)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from attnkit.backends.triton.gluon_host import descriptor
    from attnkit.backends.triton.prefill_tma import descriptor_ready
    args, consts = launch_args(q, k_rows, v_rows, out, tiles=tiles, causal=True, head_major=False)
    for name in ("CAUSAL", "HEAD_MAJOR"):
        consts.pop(name)
    programs = start.shape[0] - 1
    if block_req.shape[0] == 0 or programs < 1:
        return out
    if write is None:
        extra = (args[1], args[2], order, k_rows, v_rows, 0, 0, k_rows, v_rows, 0)
        consts.update(WRITE=False, PAGE=8)
    else:
        kc, vc, slots = write
        page, row = kc.shape[1], kc.shape[2] * kc.shape[3]
        layout = args[1].layout

        def desc(x):
            return TensorDescriptor(x, [x.shape[0] * page, row], [row, 1], [page, q.shape[2]], layout)
        extra = (desc(kc), desc(vc), slots, k_rows, v_rows, k_rows.stride(0), v_rows.stride(0), kc, vc, row)
        consts.update(WRITE=True, PAGE=page)
    store_tma = bool(store_tma) and out.dtype == q.dtype and descriptor_ready(out)
    consts.update(GEO=geo is not None, STORE_TMA=store_tma)
    o_desc = descriptor(out, 64) if store_tma else args[0]
    _prefill_gluon_chain_kernel[(programs,)](*args[:5], order, start, block_req, block_m,
                                             query_start_loc, key_start, seq_lens,
                                             order if geo is None else geo, o_desc, qk_scale,
                                             v_scale, *extra, **consts)
    return out


def chain_write_ok(k, v, k_cache, v_cache, *, block_n: int) -> bool:
    """Whether the kernel can write a packed fresh step's k / v [T, H_kv, D] into these cache
    pages [pages, PAGE, H_kv, D]: key tiles of one query block's rows (block_n = 128: a
    block's last tile holds all its keys), dense pages of k's dtype (no fp8 scaling), PAGE a
    power of two from 8 (a TMA box of whole swizzle rows) to block_n (a page within one key
    tile), and head rows of k / v dense (the partial pages' rows are copied from them)."""
    page = k_cache.shape[1]
    return (block_n == 128 and k_cache.dtype == v_cache.dtype == k.dtype == v.dtype and k_cache.is_contiguous()
            and v_cache.is_contiguous() and 8 <= page <= block_n and page & (page - 1) == 0
            and k_cache.shape[1:] == v_cache.shape[1:] and v.shape[2] == k.shape[2]
            and k.stride(2) == v.stride(2) == 1 and k.stride(1) == v.stride(1) == k.shape[2])

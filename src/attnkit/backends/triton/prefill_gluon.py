"""Prefill of one request (causal, or non-causal with CAUSAL=False) on sm_90 in Gluon,
warp-specialised with FlashAttention-3's ping-pong (the "direct" route of tma_path.py;
extend_config GLUON=True, tma_config's default at d128 and d256): a loader warp and two
computing warpgroups, each its own partition.

A program owns 128 query rows of one head; warpgroup WG (0 or 1) the rows 64 * WG .. + 63,
with its own softmax state. The loader brings Q once, then K / V tiles of BN keys through TMA,
K and V each in a ring of its own (TILES: slots per head dim), K one tile ahead of V. A K slot
is released once both warpgroups' Q.K of it are done, a V slot once both P.V's are.

Ping-pong: a turn token (two mbarriers; the first warpgroup holds it first) makes each
warpgroup issue its Q.K of tile j + 1 and P.V of tile j only after the other has issued its
own, so one warpgroup's softmax runs while the tensor cores do the other's GEMMs. Warpgroup 0
(the default partition) also overlaps inside itself: its P.V of tile j - 1 stays in flight
during its softmax of tile j. Warpgroup 1 (a worker partition) waits for its own P.V first:
Triton 3.6 places a worker partition's code in its dispatch loop, and ptxas then serialises
every wgmma of the kernel (advisory C7512, "insufficient register resources", at any register
budget) if a wgmma stays in flight across that partition's softmax
(benchmarks/static_prefill_gluon.py reports the advisory; NOTES-hopper.md versions 4-6).

Keys are the step's own k / v rows (one request, no prefix): key n < T is at position n, query
row i at position i. Key tiles wholly left of the block (j < q0 / BN) run unmasked in a first
loop; the tiles that cross the diagonal run masked in a second (keys past a row are masked,
keys past T are zeros from TMA, rows past T are not stored). Non-causal (an encoder layer, a
DiT's joint attention): every block walks all T keys; the whole tiles run unmasked and only the
last partial tile masks the keys past T (TMA's zeros would otherwise score 0, not -inf). Scores use the fused scale:
exp2(qk * qk_scale - m), m = max(qk) * qk_scale, exact for qk_scale > 0 (the launcher's
condition).
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_init,
                                                              warpgroup_mma_wait)

BM = 128                                 # query rows a program: two warpgroups of 64
# D -> (BN keys a tile, K slots, V slots): the fastest of the H200 sweep of 2026-12-01, causal
# 16k (benchmarks/results/sweep_hopper_gluon_v6.md, NOTES-hopper.md).
# Shared memory Q 128 x D + (K + V slots) x BN x D bf16: d64 144 KB, d128 224 KB, d256 192 KB.
from attnkit.backends.triton.configs import GLUON_TILES as TILES  # noqa: E402
MAXNREG = 168                            # 12 warps x 32 x 168 <= 65536 registers
CONSUMER_REGS = 240                      # the second warpgroup (the default partition: the rest)
LOADER_REGS = 24


@gluon.jit
def _loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
            k_free, v_free, q_row0, q_col, kv_col, n_tiles, g0, q_phase, k0, BN: gl.constexpr,
            NSK: gl.constexpr, NSV: gl.constexpr):
    """One block's loads: K of its first tile, Q once both warpgroups released the previous
    block's (q_free; phase q_phase), then K one tile ahead of V (K of tile i + 1 before V of
    tile i), each into its own ring once both warpgroups have released the slot. Slots and
    phases count tiles from g0 (the tiles this program loaded before the block); the block's
    tile i holds keys (k0 + i) * BN .. + BN - 1 (k0 > 0: a piece of a split block)."""
    s0 = g0 % NSK
    mbarrier.wait(k_free.index(s0), ((g0 // NSK) & 1) ^ 1)
    mbarrier.expect(k_ready.index(s0), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [k0 * BN, kv_col], k_ready.index(s0), k_smem.index(s0))
    mbarrier.wait(q_free, q_phase ^ 1)
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row0, q_col], q_bar, q_smem)
    for i in range(n_tiles):
        if i + 1 < n_tiles:
            gk = g0 + i + 1
            sk = gk % NSK
            mbarrier.wait(k_free.index(sk), ((gk // NSK) & 1) ^ 1)
            mbarrier.expect(k_ready.index(sk), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [(k0 + i + 1) * BN, kv_col], k_ready.index(sk),
                                            k_smem.index(sk))
        gv = g0 + i
        sv = gv % NSV
        mbarrier.wait(v_free.index(sv), ((gv // NSV) & 1) ^ 1)
        mbarrier.expect(v_ready.index(sv), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [(k0 + i) * BN, kv_col], v_ready.index(sv), v_smem.index(sv))


@gluon.jit
def _load_one(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
              k_free, v_free, q_row0, q_col, kv_col, n_tiles, BN: gl.constexpr, NSK: gl.constexpr,
              NSV: gl.constexpr):
    """The loader partition of the one-block kernel."""
    _loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
            k_free, v_free, q_row0, q_col, kv_col, n_tiles, 0, 0, 0, BN, NSK, NSV)


@gluon.jit
def _tile(j, g0, t0, n_tiles, sc, o, m_i, l_i, rows, q, k_smem, v_smem, k_ready, v_ready, k_free,
          v_free, turn, qk_scale, T, k0, MASKED: gl.constexpr, CAUSAL: gl.constexpr, WG: gl.constexpr,
          BN: gl.constexpr, D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr):
    """Key tile j of the block for warpgroup WG: the softmax of its scores ``sc`` (ready; for
    WG 0 the P.V of tile j - 1 is still in flight meanwhile); then, holding the turn (its turn
    t0 + j + 1), Q.K of tile j + 1 and P.V of tile j are issued, the turn passed on, and the
    new scores waited for. Ring slots and phases count tiles from g0 (the tiles this program
    ran before the block: 0 but in the persistent kernel). The last tile's K slot is released
    by the spare Q.K the last tile issues (it reads that slot), not before. Tile j holds keys
    (k0 + j) * BN .. (k0: the key tile a piece of a split block starts at). -> (sc, o, m_i, l_i)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    if MASKED:
        cols = (k0 + j) * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
        if CAUSAL:
            sc = gl.where(gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1), sc, float("-inf"))
        else:       # keys past T: [64, BN] by the same broadcast as the causal comparison
            sc = gl.where(gl.expand_dims(cols, 0) + gl.expand_dims(rows * 0, 1) < T, sc, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(sc, axis=1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(sc * qk_scale - gl.expand_dims(m_new, 1))
    l_i = l_i * alpha + gl.sum(p, axis=1)
    o = warpgroup_mma_wait(num_outstanding=0, deps=[o])              # P.V of tile j - 1
    mbarrier.arrive(v_free.index((g0 + j + NSV - 1) % NSV), count=1, pred=j > 0)
    p16 = gl.convert_layout(p.to(q.dtype), p_layout)
    o = o * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    gn = g0 + gl.minimum(j + 1, n_tiles - 1)                         # the last issues a spare
    sn = gn % NSK
    mbarrier.wait(k_ready.index(sn), (gn // NSK) & 1)
    mbarrier.wait(turn.index(WG), (t0 + j + 1) & 1)
    tok = warpgroup_mma(q, k_smem.index(sn).permute((1, 0)),
                        gl.zeros([64, BN], gl.float32, s_layout), use_acc=False, is_async=True)
    gv = g0 + j
    mbarrier.wait(v_ready.index(gv % NSV), (gv // NSV) & 1)
    o = warpgroup_mma(p16, v_smem.index(gv % NSV), o, is_async=True)
    mbarrier.arrive(turn.index(1 - WG), count=1)
    sc = warpgroup_mma_wait(num_outstanding=1 - WG, deps=[tok])     # scores of tile j + 1
    # release the slot just read, except the last tile's at its real Q.K (j = n - 2): the
    # spare (j = n - 1) reads it again and releases it
    mbarrier.arrive(k_free.index(sn), count=1, pred=j + 2 != n_tiles)
    return sc, o, m_new, l_i


@gluon.jit
def _block(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn, Out,
           stride_ot, out_col, q0, n_tiles, g0, t0, q_phase, T, qk_scale, v_scale,
           WG: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, NSK: gl.constexpr,
           NSV: gl.constexpr, CAUSAL: gl.constexpr, k0=0, part=-1, Work=None, WorkML=None,
           SPLIT: gl.constexpr = False):
    """Rows q0 + 64 * WG .. + 63 of one block over its key tiles k0 .. k0 + n_tiles - 1; then
    the normalised store. Turn t0 of the warpgroup is the first tile's Q.K; tile j's issue is
    its turn t0 + j + 1. g0: the tiles this program ran before (ring slots and phases),
    q_phase: the Q load's phase; Q is released (q_free) after the block's last Q.K.
    The trailing arguments (defaults: a whole block, every caller before the split form):
    SPLIT (non-causal only; prefill_gluon_persistent.py's split form): with ``part`` >= 0 the
    block is one piece of a key-split block and stores its unnormalised state instead, fp32:
    Work [pieces * 128, D] (o), WorkML [pieces, 2, 128] (m in the log2 domain, then l)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    r0 = q0 + 64 * WG
    q = q_smem.slice(64 * WG, 64)
    rows = r0 + gl.arange(0, 64, layout=gl.SliceLayout(1, s_layout))
    m_i = gl.full([64], -1.0e30, gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([64], gl.float32, gl.SliceLayout(1, s_layout))
    o = warpgroup_mma_init(gl.zeros([64, D], gl.float32, o_layout))
    s0 = g0 % NSK
    mbarrier.wait(q_bar, q_phase)
    mbarrier.wait(k_ready.index(s0), (g0 // NSK) & 1)
    mbarrier.wait(turn.index(WG), t0 & 1)
    tok = warpgroup_mma(q, k_smem.index(s0).permute((1, 0)),
                        gl.zeros([64, BN], gl.float32, s_layout), use_acc=False, is_async=True)
    mbarrier.arrive(turn.index(1 - WG), count=1)
    sc = warpgroup_mma_wait(num_outstanding=0, deps=[tok])
    mbarrier.arrive(k_free.index(s0), count=1, pred=n_tiles > 1)   # one tile: the spare frees it
    if CAUSAL:
        n_left = q0 // BN                   # tiles wholly left of the block's first row
    else:                                   # whole tiles: every key visible to every row
        n_left = gl.minimum(T // BN - k0, n_tiles)
    for j in range(n_left):
        sc, o, m_i, l_i = _tile(j, g0, t0, n_tiles, sc, o, m_i, l_i, rows, q, k_smem, v_smem,
                                k_ready, v_ready, k_free, v_free, turn, qk_scale, T, k0, False,
                                CAUSAL, WG, BN, D, NSK, NSV)
    for j in range(n_left, n_tiles):
        sc, o, m_i, l_i = _tile(j, g0, t0, n_tiles, sc, o, m_i, l_i, rows, q, k_smem, v_smem,
                                k_ready, v_ready, k_free, v_free, turn, qk_scale, T, k0, True,
                                CAUSAL, WG, BN, D, NSK, NSV)
    mbarrier.arrive(q_free, count=1)
    o = warpgroup_mma_wait(num_outstanding=0, deps=[o])
    mbarrier.arrive(v_free.index((g0 + n_tiles - 1) % NSV), count=1)
    if SPLIT:
        if part >= 0:
            _store_piece(o, m_i, l_i, Work, WorkML, part, WG, D, o_layout)
        else:
            _store_out(o, l_i, Out, stride_ot, out_col, r0, T, v_scale, D, o_layout)
    else:
        _store_out(o, l_i, Out, stride_ot, out_col, r0, T, v_scale, D, o_layout)


@gluon.jit
def _normalised(o, l_i, v_scale, o_layout: gl.constexpr):
    """o [64, D] fp32 over its rows' denominators l_i, times v_scale (an empty row: 0)."""
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    return o * gl.expand_dims(v_scale / gl.where(l_o == 0.0, 1.0, l_o), 1)


@gluon.jit
def _store_out(o, l_i, Out, stride_ot, out_col, r0, T, v_scale, D: gl.constexpr,
               o_layout: gl.constexpr):
    """Rows r0 .. r0 + 63 of the output, normalised (rows past T are not stored)."""
    out = _normalised(o, l_i, v_scale, o_layout)
    orow = r0 + gl.arange(0, 64, layout=gl.SliceLayout(1, o_layout))
    ocol = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    ptr = Out + gl.expand_dims(orow.to(gl.int64) * stride_ot + out_col, 1) + gl.expand_dims(ocol, 0)
    gl.store(ptr, out.to(Out.dtype.element_ty), mask=gl.expand_dims(orow < T, 1))


@gluon.jit
def _store_piece(o, m_i, l_i, Work, WorkML, part, WG: gl.constexpr, D: gl.constexpr,
                 o_layout: gl.constexpr):
    """Warpgroup WG's 64 rows of piece ``part``: o unnormalised, m and l, all fp32."""
    prow = part * 128 + 64 * WG + gl.arange(0, 64, layout=gl.SliceLayout(1, o_layout))
    ocol = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    gl.store(Work + gl.expand_dims(prow.to(gl.int64) * D, 1) + gl.expand_dims(ocol, 0), o)
    srow = 64 * WG + gl.arange(0, 64, layout=gl.SliceLayout(1, o_layout))
    gl.store(WorkML + part * 256 + srow, gl.convert_layout(m_i, gl.SliceLayout(1, o_layout)))
    gl.store(WorkML + part * 256 + 128 + srow, gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)))


@gluon.jit
def _compute(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn, Out,
             stride_ot, out_col, q0, n_tiles, T, qk_scale, v_scale, WG: gl.constexpr,
             BN: gl.constexpr, D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr,
             CAUSAL: gl.constexpr):
    """Warpgroup WG's half of the program's one block."""
    _block(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn, Out,
           stride_ot, out_col, q0, n_tiles, 0, 0, 0, T, qk_scale, v_scale, WG, BN, D, NSK, NSV,
           CAUSAL)


@gluon.jit
def _compute_second(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                    Out, stride_ot, out_col, q0, n_tiles, T, qk_scale, v_scale, BN: gl.constexpr,
                    D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr, CAUSAL: gl.constexpr):
    """Warpgroup 1, the worker partition (a separate entry: a partition takes its constexprs
    from its own signature)."""
    _compute(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn, Out,
             stride_ot, out_col, q0, n_tiles, T, qk_scale, v_scale, 1, BN, D, NSK, NSV, CAUSAL)


@gluon.jit
def _item(i, num_blocks, NUM_HEADS: gl.constexpr, HEAD_MAJOR: gl.constexpr):
    """Work item i -> (query block, head). Block-major (the causal default): heads fastest, the
    blocks with the most keys first. HEAD_MAJOR: a head's blocks one after another, so the
    programs running at once share one head's K / V in L2 (non-causal long sequences: one
    head's K / V is read by every block of it)."""
    if HEAD_MAJOR:
        blk = i % num_blocks
        h = i // num_blocks
    else:
        blk = num_blocks - 1 - i // NUM_HEADS
        h = i % NUM_HEADS
    return blk, h


@gluon.jit
def _n_tiles(q0, T, BN: gl.constexpr, CAUSAL: gl.constexpr):
    if CAUSAL:
        return gl.cdiv(gl.minimum(q0 + 128, T), BN)
    else:
        return gl.cdiv(T, BN)


@gluon.jit
def _rings(q_desc, k_desc, v_desc, D: gl.constexpr, BN: gl.constexpr, NSK: gl.constexpr,
           NSV: gl.constexpr):
    """Shared memory (Q, the K and V rings) and the barriers, initialised; warpgroup 0 holds
    the first turn. -> (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free,
    v_free, turn)."""
    q_smem = gl.allocate_shared_memory(q_desc.dtype, [128, D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [NSK, BN, D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [NSV, BN, D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [NSK, 1], mbarrier.MBarrierLayout())
    k_free = gl.allocate_shared_memory(gl.int64, [NSK, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NSV, 1], mbarrier.MBarrierLayout())
    v_free = gl.allocate_shared_memory(gl.int64, [NSV, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(q_free, count=2)                      # both warpgroups release Q
    for s in gl.static_range(NSK):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(k_free.index(s), count=2)         # both warpgroups release a slot
    for s in gl.static_range(NSV):
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(v_free.index(s), count=2)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    fence_async_shared()
    mbarrier.arrive(turn.index(0), count=1)             # warpgroup 0 has the first turn
    return q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn


@gluon.jit
def _prefill_gluon_kernel(q_desc, k_desc, v_desc, Out, stride_ot, T, num_blocks, qk_scale,
                          v_scale, NUM_HEADS: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr,
                          BN: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr,
                          CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,
                          CAUSAL: gl.constexpr, HEAD_MAJOR: gl.constexpr):
    """Grid: (query block, head), in _item's order. q_desc: [T, H_q * D] blocks [128, D];
    k_desc / v_desc: [T, H_kv * D] blocks [BN, D]; Out: [T, H_q, D] (row stride stride_ot,
    heads dense). num_warps = 4."""
    blk, h = _item(gl.program_id(0), num_blocks, NUM_HEADS, HEAD_MAJOR)
    q0 = blk * 128
    n_tiles = _n_tiles(q0, T, BN, CAUSAL)
    q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn = _rings(
        q_desc, k_desc, v_desc, D, BN, NSK, NSV)
    gl.warp_specialize([
        (_compute, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                    Out, stride_ot, h * D, q0, n_tiles, T, qk_scale, v_scale, 0, BN, D, NSK, NSV,
                    CAUSAL)),
        (_compute_second, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free,
                           turn, Out, stride_ot, h * D, q0, n_tiles, T, qk_scale, v_scale, BN,
                           D, NSK, NSV, CAUSAL)),
        (_load_one, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready,
                     v_ready, k_free, v_free, q0, h * D, (h // GROUP) * D, n_tiles, BN, NSK, NSV)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


def gluon_prefill_ready(q, k, v, out, *, causal, window, softcap, sinks, qk_scale) -> bool:
    """Whether this kernel serves a direct-route prefill: Triton 3.6 on sm_90 (compiled), a
    16-bit q / k / v / out of one dtype with dense head rows, d 64, 128 or 256, plain causal or
    non-causal attention (no window, softcap or sinks) with a positive scale."""
    import torch
    import triton

    from attnkit.backends._triton import interpreting
    from attnkit.backends.triton.gluon_host import device_facts
    if (not triton.__version__.startswith("3.6.") or not q.is_cuda or interpreting()
            or device_facts(q.device)[0] != (9, 0)):
        return False
    D = q.shape[2]
    return (window is None and softcap is None and sinks is None and qk_scale > 0
            and q.dtype in (torch.float16, torch.bfloat16)
            and k.dtype == v.dtype == out.dtype == q.dtype and D in TILES
            and k.shape[2] == v.shape[2] == D and out.stride(2) == 1 and out.stride(1) == D)


def launch_args(q, k, v, out, *, tiles, causal, head_major):
    """The descriptors and constants both launchers (this one and the persistent kernel's)
    pass: -> (positional head: descriptors, out, its row stride, T, blocks; constexprs)."""
    from attnkit.backends.triton.gluon_host import descriptor as desc   # built once per shape
    T, H, D = q.shape
    BN, NSK, NSV = tiles or TILES[D]
    blocks = -(-T // BM)
    consts = dict(NUM_HEADS=H, GROUP=H // k.shape[1], D=D, BN=BN, NSK=NSK, NSV=NSV,
                  CONSUMER_REGS=CONSUMER_REGS, LOADER_REGS=LOADER_REGS, CAUSAL=bool(causal),
                  HEAD_MAJOR=bool(head_major), num_warps=4, maxnreg=MAXNREG)
    return (desc(q, BM), desc(k, BN), desc(v, BN), out, out.stride(0), T, blocks), consts


def prefill_gluon_attention(q, k, v, out, *, qk_scale, v_scale, tiles=None, causal=True,
                            head_major=False):
    """q [T, H_q, D], k / v [T, H_kv, D] (descriptor_ready), out [T, H_q, D] (written);
    ``causal=False``: every query attends to all T keys. One program a (query block, head).
    tiles: (BN, K slots, V slots) instead of TILES[D]; head_major: _item's head-major order.
    The launch configuration is the caller's (configs.py). The persistent form:
    prefill_gluon_persistent.prefill_gluon_persistent_attention."""
    args, consts = launch_args(q, k, v, out, tiles=tiles, causal=causal, head_major=head_major)
    blocks, heads = args[-1], q.shape[1]
    _prefill_gluon_kernel[(blocks * heads,)](*args, qk_scale, v_scale, **consts)
    return out

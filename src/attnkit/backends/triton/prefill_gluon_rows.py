"""The Gluon ping-pong prefill (prefill_gluon.py) over many requests and cached prefixes: the
causal "rows" form (issue 28). The warpgroups run prefill_gluon._block unchanged; what this
file adds is the work items of a step of several requests and a loader that reads each
request's keys from its own rows.

Work items: (query block, head), heads fastest, over the step's 128-row query blocks
(``block_req`` / ``block_m``: a block's request and its first new row, the blocks with the
most keys first, backend.query_blocks' order). Request r has q_len new rows from step row
QStart[r] and kv_len = SeqLens[r] keys, rows KStart[r] .. + kv_len of k_rows / v_rows; its
new row i sits at position kv_len - q_len + i (the causal mask aligned to the last key,
bottom-right), its key n at position n.

prefill_gluon._block takes a block by the position of its first row: its score rows are
positions, its masked loop starts at the first tile that crosses that position, and it
stores the rows below its ``T`` at Out + row * stride_ot. So a block is handed ``q0`` = its
first row's position, ``T`` = kv_len (the positions of the request's new rows end there) and
Out shifted by the request's (first step row - prefix) rows: position p lands on step row
QStart[r] + p - prefix. Key tiles start at the request's first key row; a tile reaching past
kv_len reads the next rows of k_rows (the next request's keys in a packed step, the gathered
buffer's zero padding, or TMA's zeros past the end): finite, and each is past every stored
row's position, so it is masked to -inf and weighs exactly 0. Query rows of a block past
q_len read other rows too and are not stored.

``programs``: the grid. One program an item (programs = items) is the program-per-block form;
fewer programs walk items pid, pid + programs, ... (the persistent form of
prefill_gluon_persistent.py: ring slots, turns and the Q phase carry across items).
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from attnkit.backends.triton.prefill_gluon import _block, _rings, launch_args


@gluon.jit
def _geometry(i, BlockReq, BlockM, QStart, SeqLens, NUM_HEADS: gl.constexpr, BN: gl.constexpr):
    """Work item i -> (request, head, first step row, first row's position, kv_len, key
    tiles up to the block's last real row)."""
    blk = i // NUM_HEADS
    h = i % NUM_HEADS
    req = gl.load(BlockReq + blk)
    m0 = gl.load(BlockM + blk)
    q_begin = gl.load(QStart + req)
    q_len = gl.load(QStart + req + 1) - q_begin
    kv_len = gl.load(SeqLens + req)
    pos0 = kv_len - q_len + m0
    n_tiles = gl.cdiv(pos0 + gl.minimum(q_len - m0, 128), BN)
    return req, h, q_begin + m0, pos0, kv_len, n_tiles


@gluon.jit
def _loader_rows(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready,
                 v_ready, k_free, v_free, q_row0, q_col, kv_row0, kv_col, n_tiles, g0, q_phase,
                 BN: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr):
    """prefill_gluon._loader with the keys from row kv_row0: K of the first tile, Q once both
    warpgroups released the previous item's, then K one tile ahead of V, each into its ring
    once both warpgroups released the slot (slots and phases count tiles from g0)."""
    s0 = g0 % NSK
    mbarrier.wait(k_free.index(s0), ((g0 // NSK) & 1) ^ 1)
    mbarrier.expect(k_ready.index(s0), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row0, kv_col], k_ready.index(s0), k_smem.index(s0))
    mbarrier.wait(q_free, q_phase ^ 1)
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row0, q_col], q_bar, q_smem)
    for i in range(n_tiles):
        if i + 1 < n_tiles:
            gk = g0 + i + 1
            sk = gk % NSK
            mbarrier.wait(k_free.index(sk), ((gk // NSK) & 1) ^ 1)
            mbarrier.expect(k_ready.index(sk), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [kv_row0 + (i + 1) * BN, kv_col],
                                            k_ready.index(sk), k_smem.index(sk))
        gv = g0 + i
        sv = gv % NSV
        mbarrier.wait(v_free.index(sv), ((gv // NSV) & 1) ^ 1)
        mbarrier.expect(v_ready.index(sv), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row0 + i * BN, kv_col], v_ready.index(sv),
                                        v_smem.index(sv))


@gluon.jit
def _load_items(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
                k_free, v_free, BlockReq, BlockM, QStart, KStart, SeqLens, num_items, programs,
                NUM_HEADS: gl.constexpr, GROUP: gl.constexpr, BN: gl.constexpr,
                D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr):
    """The loader partition: every item's loads, in the warpgroups' order."""
    g = 0
    n_done = 0
    for i in range(gl.program_id(0), num_items, programs):
        req, h, q_row, pos0, kv_len, n_tiles = _geometry(i, BlockReq, BlockM, QStart, SeqLens,
                                                         NUM_HEADS, BN)
        _loader_rows(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready,
                     v_ready, k_free, v_free, q_row, h * D, gl.load(KStart + req),
                     (h // GROUP) * D, n_tiles, g, n_done & 1, BN, NSK, NSV)
        g += n_tiles
        n_done += 1


@gluon.jit
def _compute_items(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                   Out, stride_ot, BlockReq, BlockM, QStart, SeqLens, num_items, programs,
                   qk_scale, v_scale, WG: gl.constexpr, NUM_HEADS: gl.constexpr,
                   BN: gl.constexpr, D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr):
    """Warpgroup WG's half of every item of this program (prefill_gluon._block by position)."""
    g = 0                                   # key tiles run before this item
    t = 0                                   # turns this warpgroup took before it
    n_done = 0                              # items before it (the Q load's phase)
    for i in range(gl.program_id(0), num_items, programs):
        req, h, q_row, pos0, kv_len, n_tiles = _geometry(i, BlockReq, BlockM, QStart, SeqLens,
                                                         NUM_HEADS, BN)
        out = Out + (q_row - pos0).to(gl.int64) * stride_ot      # position p -> its step row
        _block(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn, out,
               stride_ot, h * D, pos0, n_tiles, g, t, n_done & 1, kv_len, qk_scale, v_scale, WG,
               BN, D, NSK, NSV, True)
        g += n_tiles
        t += n_tiles + 1
        n_done += 1


@gluon.jit
def _compute_items_second(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free,
                          turn, Out, stride_ot, BlockReq, BlockM, QStart, SeqLens, num_items,
                          programs, qk_scale, v_scale, NUM_HEADS: gl.constexpr, BN: gl.constexpr,
                          D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr):
    """Warpgroup 1, the worker partition (its constexprs from its own signature)."""
    _compute_items(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                   Out, stride_ot, BlockReq, BlockM, QStart, SeqLens, num_items, programs,
                   qk_scale, v_scale, 1, NUM_HEADS, BN, D, NSK, NSV)


@gluon.jit
def _prefill_gluon_rows_kernel(q_desc, k_desc, v_desc, Out, stride_ot, BlockReq, BlockM, QStart,
                               KStart, SeqLens, num_items, programs, qk_scale, v_scale,
                               NUM_HEADS: gl.constexpr, GROUP: gl.constexpr, D: gl.constexpr,
                               BN: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr,
                               CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr):
    """Grid: (programs,). q_desc: [T, H_q * D] blocks [128, D]; k_desc / v_desc: [R, H_kv * D]
    blocks [BN, D]; Out: [T, H_q, D] (row stride stride_ot, heads dense); BlockReq / BlockM
    [NB], QStart [B + 1], KStart / SeqLens [B] int32; num_items = NB * NUM_HEADS.
    num_warps = 4."""
    q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn = _rings(
        q_desc, k_desc, v_desc, D, BN, NSK, NSV)
    gl.warp_specialize([
        (_compute_items, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free,
                          turn, Out, stride_ot, BlockReq, BlockM, QStart, SeqLens, num_items,
                          programs, qk_scale, v_scale, 0, NUM_HEADS, BN, D, NSK, NSV)),
        (_compute_items_second, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free,
                                 v_free, turn, Out, stride_ot, BlockReq, BlockM, QStart, SeqLens,
                                 num_items, programs, qk_scale, v_scale, NUM_HEADS, BN, D, NSK,
                                 NSV)),
        (_load_items, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready,
                       v_ready, k_free, v_free, BlockReq, BlockM, QStart, KStart, SeqLens,
                       num_items, programs, NUM_HEADS, GROUP, BN, D, NSK, NSV)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


def prefill_gluon_rows_attention(q, k_rows, v_rows, out, *, block_req, block_m, query_start_loc,
                                 key_start, seq_lens, qk_scale, v_scale, programs=None,
                                 tiles=None):
    """Causal attention of a step's new rows over each request's keys.

    q [T, H_q, D]; k_rows / v_rows [R, H_kv, D] (descriptor_ready, q's dtype): request r's keys
    are rows key_start[r] .. + seq_lens[r], and the rows after them up to the next multiple of
    BN finite or past R (a packed step's own k / v with key_start = query_start_loc[:-1], or
    tma_path's gathered buffer); out [T, H_q, D] (written, heads dense). block_req / block_m
    [NB] int32: the 128-row (BM) query blocks, most keys first; query_start_loc [B + 1],
    key_start / seq_lens [B] int32. programs: the grid (default one program an item; fewer:
    persistent). tiles: (BN, K slots, V slots) instead of GLUON_TILES[D]."""
    args, consts = launch_args(q, k_rows, v_rows, out, tiles=tiles, causal=True, head_major=False)
    for name in ("CAUSAL", "HEAD_MAJOR"):
        consts.pop(name)
    items = block_req.shape[0] * q.shape[1]
    if items == 0:
        return out
    n = items if programs is None else max(1, min(int(programs), items))
    _prefill_gluon_rows_kernel[(n,)](*args[:5], block_req, block_m, query_start_loc, key_start,
                                     seq_lens, items, n, qk_scale, v_scale, **consts)
    return out

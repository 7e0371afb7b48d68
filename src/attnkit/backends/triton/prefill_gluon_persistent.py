"""The Gluon ping-pong prefill (prefill_gluon.py) as a persistent kernel: a fixed number of
programs (about one per SM: the rings take ~224 KB of shared memory, one program an SM), each
walking the work items (query block, head) pid, pid + P, pid + 2P ... in prefill_gluon._item's
order. Every partition walks the same items, so each counts for itself the key tiles it ran
before (ring slots and mbarrier phases continue across blocks) and the turns its warpgroup
took (n_tiles + 1 a block). Between blocks the loader brings the next block's first K tile
while the warpgroups finish the last P.V and store, then its Q once both released the old
one (q_free, after the block's last Q.K): the prologue of one block runs under the epilogue
of the one before, which a program-per-block grid pays for each block.

Same arguments and layouts as ``_prefill_gluon_kernel``, plus the launch's program count
(the grid); ``prefill_gluon_persistent_attention`` launches it. SPLIT (non-causal, the
``split_tail`` option): the items of the last, partial wave are not run whole but cut along
the keys and dealt out evenly to all programs (split_tail.py: the schedule, the merge), so no
program idles through the tail while others run it.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from attnkit.backends.triton.prefill_gluon import _block, _item, _loader, _n_tiles, _rings, launch_args


@gluon.jit
def _tail_piece(cur, u1, full, n_tiles, units, max_pieces, num_blocks, NUM_HEADS: gl.constexpr,
                HEAD_MAJOR: gl.constexpr):
    """The piece of the split tail that starts at unit ``cur`` (a unit: one key tile of one
    tail item; this program owns units cur .. u1 - 1, ``units`` a program): -> (query block,
    head, first key tile, tiles, workspace piece). Tail item r (item full + r) spans the units
    r * n_tiles .. + n_tiles - 1; its pieces are those of programs (r * n_tiles) // units
    onwards, piece slot r * max_pieces + (this program - the first)."""
    r = cur // n_tiles
    k0 = cur - r * n_tiles
    n = gl.minimum(n_tiles - k0, u1 - cur)
    blk, h = _item(full + r, num_blocks, NUM_HEADS, HEAD_MAJOR)
    part = r * max_pieces + gl.program_id(0) - (r * n_tiles) // units
    return blk, h, k0, n, part


@gluon.jit
def _compute_items(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                   Out, stride_ot, T, num_blocks, programs, qk_scale, v_scale, Work, WorkML, full,
                   units, max_pieces, WG: gl.constexpr, NUM_HEADS: gl.constexpr,
                   BN: gl.constexpr, D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr,
                   CAUSAL: gl.constexpr, HEAD_MAJOR: gl.constexpr, SPLIT: gl.constexpr):
    """Warpgroup WG's half of every block of this program: the whole items pid, pid + P ...
    below ``full``, then (SPLIT) its units of the tail."""
    g = 0                                   # key tiles run before this block
    t = 0                                   # turns this warpgroup took before it
    n_done = 0                              # blocks before it (the Q load's phase)
    for i in range(gl.program_id(0), full, programs):
        blk, h = _item(i, num_blocks, NUM_HEADS, HEAD_MAJOR)
        q0 = blk * 128
        n_tiles = _n_tiles(q0, T, BN, CAUSAL)
        _block(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn, Out,
               stride_ot, h * D, q0, n_tiles, g, t, n_done & 1, T, qk_scale, v_scale, WG, BN, D,
               NSK, NSV, CAUSAL, 0, -1, Work, WorkML, SPLIT)
        g += n_tiles
        t += n_tiles + 1
        n_done += 1
    if SPLIT:
        nt = gl.cdiv(T, BN)
        cur = gl.program_id(0) * units
        u1 = gl.minimum(cur + units, (num_blocks * NUM_HEADS - full) * nt)
        while cur < u1:
            blk, h, k0, n, part = _tail_piece(cur, u1, full, nt, units, max_pieces, num_blocks,
                                              NUM_HEADS, HEAD_MAJOR)
            _block(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                   Out, stride_ot, h * D, blk * 128, n, g, t, n_done & 1, T, qk_scale, v_scale, WG,
                   BN, D, NSK, NSV, CAUSAL, k0, part, Work, WorkML, SPLIT)
            g += n
            t += n + 1
            n_done += 1
            cur += n


@gluon.jit
def _compute_items_second(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free,
                          turn, Out, stride_ot, T, num_blocks, programs, qk_scale, v_scale, Work,
                          WorkML, full, units, max_pieces, NUM_HEADS: gl.constexpr,
                          BN: gl.constexpr, D: gl.constexpr, NSK: gl.constexpr, NSV: gl.constexpr,
                          CAUSAL: gl.constexpr, HEAD_MAJOR: gl.constexpr, SPLIT: gl.constexpr):
    """Warpgroup 1, the worker partition."""
    _compute_items(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                   Out, stride_ot, T, num_blocks, programs, qk_scale, v_scale, Work, WorkML, full,
                   units, max_pieces, 1, NUM_HEADS, BN, D, NSK, NSV, CAUSAL, HEAD_MAJOR, SPLIT)


@gluon.jit
def _load_items(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
                k_free, v_free, T, num_blocks, programs, full, units, max_pieces,
                NUM_HEADS: gl.constexpr, GROUP: gl.constexpr, BN: gl.constexpr, D: gl.constexpr,
                NSK: gl.constexpr, NSV: gl.constexpr, CAUSAL: gl.constexpr,
                HEAD_MAJOR: gl.constexpr, SPLIT: gl.constexpr):
    """The loader partition: every block's (and tail piece's) loads, in the warpgroups' order."""
    g = 0
    n_done = 0
    for i in range(gl.program_id(0), full, programs):
        blk, h = _item(i, num_blocks, NUM_HEADS, HEAD_MAJOR)
        q0 = blk * 128
        n_tiles = _n_tiles(q0, T, BN, CAUSAL)
        _loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
                k_free, v_free, q0, h * D, (h // GROUP) * D, n_tiles, g, n_done & 1, 0, BN, NSK, NSV)
        g += n_tiles
        n_done += 1
    if SPLIT:
        nt = gl.cdiv(T, BN)
        cur = gl.program_id(0) * units
        u1 = gl.minimum(cur + units, (num_blocks * NUM_HEADS - full) * nt)
        while cur < u1:
            blk, h, k0, n, part = _tail_piece(cur, u1, full, nt, units, max_pieces, num_blocks,
                                              NUM_HEADS, HEAD_MAJOR)
            _loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
                    k_free, v_free, blk * 128, h * D, (h // GROUP) * D, n, g, n_done & 1, k0, BN,
                    NSK, NSV)
            g += n
            n_done += 1
            cur += n


@gluon.jit
def _prefill_gluon_persistent_kernel(q_desc, k_desc, v_desc, Out, stride_ot, T, num_blocks,
                                     programs, qk_scale, v_scale, Work, WorkML, full, units,
                                     max_pieces, NUM_HEADS: gl.constexpr,
                                     GROUP: gl.constexpr, D: gl.constexpr, BN: gl.constexpr,
                                     NSK: gl.constexpr, NSV: gl.constexpr,
                                     CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,
                                     CAUSAL: gl.constexpr, HEAD_MAJOR: gl.constexpr,
                                     SPLIT: gl.constexpr):
    """Grid: (programs,). Shapes as _prefill_gluon_kernel's; items below ``full`` whole, the
    rest (SPLIT) as ``units`` key tiles a program into Work / WorkML (split_tail)."""
    q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn = _rings(
        q_desc, k_desc, v_desc, D, BN, NSK, NSV)
    gl.warp_specialize([
        (_compute_items, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free,
                          turn, Out, stride_ot, T, num_blocks, programs, qk_scale, v_scale, Work,
                          WorkML, full, units, max_pieces, 0, NUM_HEADS, BN, D, NSK, NSV, CAUSAL,
                          HEAD_MAJOR, SPLIT)),
        (_compute_items_second, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free,
                                 v_free, turn, Out, stride_ot, T, num_blocks, programs, qk_scale,
                                 v_scale, Work, WorkML, full, units, max_pieces, NUM_HEADS, BN, D,
                                 NSK, NSV, CAUSAL, HEAD_MAJOR, SPLIT)),
        (_load_items, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready,
                       v_ready, k_free, v_free, T, num_blocks, programs, full, units, max_pieces,
                       NUM_HEADS, GROUP, BN, D, NSK, NSV, CAUSAL, HEAD_MAJOR, SPLIT)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


def prefill_gluon_persistent_attention(q, k, v, out, *, qk_scale, v_scale, programs, tiles=None,
                                       causal=True, head_major=False, split_tail=False):
    """prefill_gluon_attention's arguments (q [T, H_q, D], k / v [T, H_kv, D], out [T, H_q, D])
    with ``programs`` programs (at most one a (query block, head) item). ``split_tail``
    (non-causal only): the last, partial wave's items are cut along the keys and dealt out to
    every program, their pieces merged after (split_tail.py)."""
    from attnkit.backends.triton.split_tail import merge_tail, tail_schedule, workspace

    args, consts = launch_args(q, k, v, out, tiles=tiles, causal=causal, head_major=head_major)
    blocks = args[-1]
    items = blocks * q.shape[1]
    if not split_tail:
        n = max(1, min(int(programs), items))
        _prefill_gluon_persistent_kernel[(n,)](*args, n, qk_scale, v_scale, out, out, items, 0, 1,
                                               SPLIT=False, **consts)
        return out
    if causal:
        raise ValueError("prefill_gluon_persistent_attention: split_tail is for non-causal attention")
    n = max(1, int(programs))
    n_tiles = -(-q.shape[0] // consts["BN"])
    full, units, pieces = tail_schedule(items, n_tiles, n)
    work, work_ml = workspace(items - full, pieces, q.shape[2], q.device)
    _prefill_gluon_persistent_kernel[(n,)](*args, n, qk_scale, v_scale, work, work_ml, full, units, pieces,
                                           SPLIT=True, **consts)
    merge_tail(work, work_ml, out, full=full, num_blocks=blocks, n_tiles=n_tiles, units=units,
               max_pieces=pieces, v_scale=v_scale, head_major=head_major)
    return out

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
(the grid); ``prefill_gluon_persistent_attention`` launches it.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from attnkit.backends.triton.prefill_gluon import _block, _item, _loader, _n_tiles, _rings, launch_args


@gluon.jit
def _compute_items(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                   Out, stride_ot, T, num_blocks, programs, qk_scale, v_scale, WG: gl.constexpr,
                   NUM_HEADS: gl.constexpr, BN: gl.constexpr, D: gl.constexpr,
                   NSK: gl.constexpr, NSV: gl.constexpr, CAUSAL: gl.constexpr,
                   HEAD_MAJOR: gl.constexpr):
    """Warpgroup WG's half of every block of this program."""
    g = 0                                   # key tiles run before this block
    t = 0                                   # turns this warpgroup took before it
    n_done = 0                              # blocks before it (the Q load's phase)
    for i in range(gl.program_id(0), num_blocks * NUM_HEADS, programs):
        blk, h = _item(i, num_blocks, NUM_HEADS, HEAD_MAJOR)
        q0 = blk * 128
        n_tiles = _n_tiles(q0, T, BN, CAUSAL)
        _block(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn, Out,
               stride_ot, h * D, q0, n_tiles, g, t, n_done & 1, T, qk_scale, v_scale, WG, BN, D,
               NSK, NSV, CAUSAL)
        g += n_tiles
        t += n_tiles + 1
        n_done += 1


@gluon.jit
def _compute_items_second(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free,
                          turn, Out, stride_ot, T, num_blocks, programs, qk_scale, v_scale,
                          NUM_HEADS: gl.constexpr, BN: gl.constexpr, D: gl.constexpr,
                          NSK: gl.constexpr, NSV: gl.constexpr, CAUSAL: gl.constexpr,
                          HEAD_MAJOR: gl.constexpr):
    """Warpgroup 1, the worker partition."""
    _compute_items(q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn,
                   Out, stride_ot, T, num_blocks, programs, qk_scale, v_scale, 1, NUM_HEADS, BN,
                   D, NSK, NSV, CAUSAL, HEAD_MAJOR)


@gluon.jit
def _load_items(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
                k_free, v_free, T, num_blocks, programs, NUM_HEADS: gl.constexpr,
                GROUP: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, NSK: gl.constexpr,
                NSV: gl.constexpr, CAUSAL: gl.constexpr, HEAD_MAJOR: gl.constexpr):
    """The loader partition: every block's loads, in the warpgroups' order."""
    g = 0
    n_done = 0
    for i in range(gl.program_id(0), num_blocks * NUM_HEADS, programs):
        blk, h = _item(i, num_blocks, NUM_HEADS, HEAD_MAJOR)
        q0 = blk * 128
        n_tiles = _n_tiles(q0, T, BN, CAUSAL)
        _loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready,
                k_free, v_free, q0, h * D, (h // GROUP) * D, n_tiles, g, n_done & 1, BN, NSK, NSV)
        g += n_tiles
        n_done += 1


@gluon.jit
def _prefill_gluon_persistent_kernel(q_desc, k_desc, v_desc, Out, stride_ot, T, num_blocks,
                                     programs, qk_scale, v_scale, NUM_HEADS: gl.constexpr,
                                     GROUP: gl.constexpr, D: gl.constexpr, BN: gl.constexpr,
                                     NSK: gl.constexpr, NSV: gl.constexpr,
                                     CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,
                                     CAUSAL: gl.constexpr, HEAD_MAJOR: gl.constexpr):
    """Grid: (programs,). Shapes as _prefill_gluon_kernel's."""
    q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free, turn = _rings(
        q_desc, k_desc, v_desc, D, BN, NSK, NSV)
    gl.warp_specialize([
        (_compute_items, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free, v_free,
                          turn, Out, stride_ot, T, num_blocks, programs, qk_scale, v_scale, 0,
                          NUM_HEADS, BN, D, NSK, NSV, CAUSAL, HEAD_MAJOR)),
        (_compute_items_second, (q_smem, k_smem, v_smem, q_bar, q_free, k_ready, v_ready, k_free,
                                 v_free, turn, Out, stride_ot, T, num_blocks, programs, qk_scale,
                                 v_scale, NUM_HEADS, BN, D, NSK, NSV, CAUSAL, HEAD_MAJOR)),
        (_load_items, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, q_free, k_ready,
                       v_ready, k_free, v_free, T, num_blocks, programs, NUM_HEADS, GROUP, BN, D,
                       NSK, NSV, CAUSAL, HEAD_MAJOR)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


def prefill_gluon_persistent_attention(q, k, v, out, *, qk_scale, v_scale, programs, tiles=None,
                                       causal=True, head_major=False):
    """prefill_gluon_attention's arguments (q [T, H_q, D], k / v [T, H_kv, D], out [T, H_q, D])
    with ``programs`` programs (at most one a (query block, head) item)."""
    args, consts = launch_args(q, k, v, out, tiles=tiles, causal=causal, head_major=head_major)
    n = max(1, min(int(programs), args[-1] * q.shape[1]))
    _prefill_gluon_persistent_kernel[(n,)](*args, n, qk_scale, v_scale, **consts)
    return out

"""The split tail of the persistent Gluon kernel (prefill_gluon_persistent.py, ``split_tail``):
its schedule and the kernel that merges the pieces.

P programs walking I (query block, head) items one after another finish ``I // P`` whole waves
together; the last ``R = I % P`` items would run on R programs while the others wait (FLUX.1:
864 items on 132 SMs, the last wave 72 of 132 programs). Split instead: the items below
``full = I - R`` run whole as before, and the tail's R * n_tiles key tiles ("units", one key
tile of one item) are dealt out evenly, ``units`` per program in order, so tail item r is cut
into the pieces of the programs (r * n_tiles) // units .. ((r + 1) * n_tiles - 1) // units.
Each piece stores its unnormalised softmax state (fp32: o [128, D]; m in the log2 domain and l
[128]) in slot r * max_pieces + (program - first program of r); ``merge_tail`` combines the
slots of each tail item into its output rows:

    M = max_p m_p,   out = sum_p 2^(m_p - M) o_p / sum_p 2^(m_p - M) l_p   (times v_scale)
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BM = 128            # query rows of an item (the Gluon kernel's block)


def tail_schedule(items: int, n_tiles: int, programs: int) -> tuple[int, int, int]:
    """-> (full: items run whole, units: key tiles of the tail a program, max_pieces: the
    most pieces one tail item is cut into). No tail (items a multiple of programs): units 0."""
    full = (items // programs) * programs
    tail = (items - full) * n_tiles
    if tail == 0:
        return full, 0, 1
    units = -(-tail // programs)
    return full, units, (n_tiles - 1) // units + 2


@triton.jit
def _merge_tail_kernel(Work, WorkML, Out, stride_ot, T, full, num_blocks, n_tiles, units,
                       max_pieces, v_scale, NUM_HEADS: tl.constexpr, HEAD_MAJOR: tl.constexpr,
                       D: tl.constexpr, BLOCK_D: tl.constexpr):
    """Grid: (tail items,). Work: [slots * 128, D] fp32; WorkML: [slots, 2, 128] fp32 (m, l);
    Out: [T, H, D] (row stride stride_ot, heads dense). The item's (block, head) is
    prefill_gluon._item's: block-major, heads fastest and the last block first, or head-major."""
    r = tl.program_id(0)
    i = full + r
    if HEAD_MAJOR:
        blk = i % num_blocks
        h = i // num_blocks
    else:
        blk = num_blocks - 1 - i // NUM_HEADS
        h = i % NUM_HEADS
    first = (r * n_tiles) // units
    last = ((r + 1) * n_tiles - 1) // units
    rows = tl.arange(0, 128)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < D
    m = tl.full([128], -1.0e30, tl.float32)
    for p in range(first, last + 1):
        m = tl.maximum(m, tl.load(WorkML + (r * max_pieces + p - first) * 256 + rows))
    acc = tl.zeros([128, BLOCK_D], tl.float32)
    den = tl.zeros([128], tl.float32)
    for p in range(first, last + 1):
        slot = r * max_pieces + p - first
        w = tl.exp2(tl.load(WorkML + slot * 256 + rows) - m)
        den += w * tl.load(WorkML + slot * 256 + 128 + rows)
        o = tl.load(Work + (slot * 128 + rows).to(tl.int64)[:, None] * D + cols[None, :],
                    mask=col_ok[None, :], other=0.0)
        acc += w[:, None] * o
    out = acc * (v_scale / tl.where(den == 0.0, 1.0, den))[:, None]
    orow = blk * 128 + rows
    tl.store(Out + orow.to(tl.int64)[:, None] * stride_ot + h * D + cols[None, :],
             out.to(Out.dtype.element_ty), mask=(orow < T)[:, None] & col_ok[None, :])


def merge_tail(work, work_ml, out, *, full: int, num_blocks: int, n_tiles: int, units: int,
               max_pieces: int, v_scale: float, head_major: bool) -> None:
    """work: [slots * 128, D] fp32, work_ml: [slots, 2, 128] fp32 (the tail's pieces);
    out: [T, H, D] with dense heads -> the tail items' rows of ``out`` written."""
    T, heads, dim = out.shape
    tail = num_blocks * heads - full
    if tail <= 0:
        return
    if out.stride(2) != 1 or out.stride(1) != dim or work.stride(1) != 1:
        raise ValueError("merge_tail: out needs dense heads [T, H, D] and work dense rows")
    _merge_tail_kernel[(tail,)](work, work_ml, out, out.stride(0), T, full, num_blocks, n_tiles, units,
                                max_pieces, v_scale, NUM_HEADS=heads, HEAD_MAJOR=bool(head_major), D=dim,
                                BLOCK_D=triton.next_power_of_2(dim), num_warps=8)


def workspace(tail_items: int, max_pieces: int, dim: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The pieces' fp32 buffers: ([slots * 128, D], [slots, 2, 128]), slots = tail x max_pieces."""
    slots = max(tail_items * max_pieces, 1)
    return (torch.empty(slots * BM, dim, dtype=torch.float32, device=device),
            torch.empty(slots, 2, BM, dtype=torch.float32, device=device))

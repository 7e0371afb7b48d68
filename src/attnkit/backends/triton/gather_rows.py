"""Gather kernel: every key of every request, from the paged cache into dense padded rows.

The tensor-descriptor kernel (prefill_tma.py) reads keys as rectangles of one dense buffer.
This kernel builds that buffer for a step: request ``r``'s keys 0..kv_len-1 go to rows
``key_start[r] ..``, copied token by token through its block-table row (page =
table[t // PAGE], offset t % PAGE) and converted to the compute dtype (exact from fp8: the
scales stay folded into the kernel's logit and output scales). The rows after them, up to
the next multiple of ``PAD``, are written as zeros, so a key tile that reaches past a
request's end reads finite values, never another request's rows.

Grid: (requests, row blocks of the longest padded segment, KV heads); one program copies
BLOCK_T token rows of one head's K [D] and V [DV].
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_head_rows(src, dst, page, off, dst_rows, live, keep, stride_p, stride_t, head_off,
                    stride_r, dst_head, W: tl.constexpr, BLOCK_W: tl.constexpr):
    """Rows of one head: cache (page, off) -> dst_rows; live rows copied, the rest of the
    segment (keep) written as 0."""
    offs = tl.arange(0, BLOCK_W)
    w_ok = offs < W
    x = tl.load(src + (page * stride_p + off * stride_t + head_off)[:, None] + offs[None, :],
                mask=live[:, None] & w_ok[None, :], other=0.0)
    tl.store(dst + (dst_rows * stride_r + dst_head)[:, None] + offs[None, :],
             x.to(dst.dtype.element_ty), mask=keep[:, None] & w_ok[None, :])


@triton.jit
def _gather_rows_kernel(KC, VC, KR, VR, BlockTables, KStart, SeqLens,
                        stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh, stride_bt,
                        stride_kr, stride_krh, stride_vr, stride_vrh,
                        D: tl.constexpr, DV: tl.constexpr, PAGE: tl.constexpr, PAD: tl.constexpr,
                        BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    b = tl.program_id(0)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    h = tl.program_id(2)
    kv_len = tl.load(SeqLens + b)
    padded = tl.cdiv(kv_len, PAD) * PAD
    live = t < kv_len                  # a cached key: copy it
    keep = t < padded                  # a row of this request's segment: write it (0 past kv_len)
    page = tl.load(BlockTables + b.to(tl.int64) * stride_bt + t // PAGE, mask=live, other=0)
    page = page.to(tl.int64)
    off = (t % PAGE).to(tl.int64)
    dst = (tl.load(KStart + b) + t).to(tl.int64)
    _copy_head_rows(KC, KR, page, off, dst, live, keep, stride_kp, stride_kt, h * stride_kh,
                    stride_kr, h * stride_krh, D, BLOCK_D)
    _copy_head_rows(VC, VR, page, off, dst, live, keep, stride_vp, stride_vt, h * stride_vh,
                    stride_vr, h * stride_vrh, DV, BLOCK_DV)


def gather_rows(k_cache, v_cache, *, block_tables, key_start, seq_lens, total_rows: int,
                longest: int, pad: int, dtype: torch.dtype):
    """-> (k_rows [total_rows, H_kv, D], v_rows [total_rows, H_kv, DV]) in ``dtype``.

    k_cache: [P, page, H_kv, D]; v_cache: [P, page, H_kv, DV] (rows_dense); block_tables:
    [B, pages] int32; key_start / seq_lens: [B] int32 with request r's segment of
    ceil(seq_lens[r] / pad) * pad rows at key_start[r]; ``longest``: the longest segment.
    Head rows of the cache must be dense in the head dim (unit_stride_rows checks it)."""
    _, page, heads, dk = k_cache.shape
    dv = v_cache.shape[3]
    k_rows = torch.empty(total_rows, heads, dk, dtype=dtype, device=k_cache.device)
    v_rows = torch.empty(total_rows, heads, dv, dtype=dtype, device=k_cache.device)
    num_reqs = seq_lens.shape[0]
    block_t = 64
    if num_reqs and longest:
        _gather_rows_kernel[(num_reqs, triton.cdiv(longest, block_t), heads)](
            k_cache, v_cache, k_rows, v_rows, block_tables, key_start, seq_lens,
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_tables.stride(0),
            k_rows.stride(0), k_rows.stride(1), v_rows.stride(0), v_rows.stride(1),
            D=dk, DV=dv, PAGE=page, PAD=pad, BLOCK_T=block_t, BLOCK_D=triton.next_power_of_2(dk),
            BLOCK_DV=triton.next_power_of_2(dv), num_warps=4,
        )
    return k_rows, v_rows

"""Sparse MLA attention (absorbed form) over each query token's selected positions.

One program = one query token x ``BLOCK_H`` heads x one split of the token's index list
(``indices[t]``, ``topk`` positions in the token's request, -1 = none). A first tiny kernel
turns the positions into cache slots through the request's block table (page =
block_table[r, pos // page], slot page * page_size + pos % page), so the attention loop
reads one int32 per row and gathers the row at ``slot * (L + R)``. Per tile of ``BLOCK_N``
selected rows:
    s   = scale * (q_lat[:, :L] @ c.T + q_lat[:, L:] @ k_pe.T)     [BLOCK_H, BLOCK_N]
    acc = acc * alpha + softmax_part(s) @ c                        [BLOCK_H, L]
as in triton_mla's absorbed decode (decode.py, version 1), whose split merge
(``reduce_splits``, base-2 LSE) this reuses. A -1 index is MASKED: its row is never
loaded (reads 0) and its logit is -inf, so nothing from an unselected or unowned slot
reaches the output, NaN included. Decode and prefill are the same math: every token has
its own list, so prefill is just more programs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from attnkit.backends._triton import LOG2E, NEG_BIG, online_softmax_step, split_range
from attnkit.backends.triton_dsa.configs import (GLUON_FORMS, SPARSE_WS, WS_HEADS,
                                                 sparse_tile_config)
from attnkit.backends.triton_mla.decode import choose_splits, reduce_splits


@triton.jit
def _slots_kernel(Indices, BlockTables, TokReq, Slots, topk, max_pos, stride_it, stride_bt,
                  PAGE_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    """Slots [T, topk] int32: the cache slot of each selected position through its token's
    block-table row (page * PAGE_SIZE + pos % PAGE_SIZE), -1 where the index is -1 or past
    the table. Grid (T, ceil(topk / BLOCK))."""
    t = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    in_row = j < topk
    pos = tl.load(Indices + t * stride_it + j, mask=in_row, other=-1)
    ok = (pos >= 0) & (pos < max_pos)
    req = tl.load(TokReq + t)
    page = tl.load(BlockTables + req * stride_bt + pos // PAGE_SIZE, mask=ok, other=0)
    tl.store(Slots + t * topk + j, tl.where(ok, page * PAGE_SIZE + pos % PAGE_SIZE, -1),
             mask=in_row)


@triton.jit
def _sparse_mla_kernel(
    Q, Cache, Slots, Out, Lse,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
    qk_scale, v_scale, H, topk, num_splits,
    L: tl.constexpr, R: tl.constexpr, ROW: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, DIRECT: tl.constexpr, DOT_PREC: tl.constexpr,
):
    """Q: [T, H, L + R]; Cache: [slots, L + R] rows ROW elements apart; Slots: [T, topk]
    int32 (-1: none); Out: [T, H, S, L] fp32 partials (DIRECT: [T, H, L] final, in its dtype); Lse:
    [T, H, S] fp32 base-2 log-sum-exp of each split.
    Grid (head blocks, T, splits); head blocks vary fastest so the programs of one token,
    which gather the same rows, run together and share them through L2."""
    hb = tl.program_id(0)
    t = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    head = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = head < H
    offs_l = tl.arange(0, L)
    offs_r = tl.arange(0, R)
    q_row = Q + t * stride_qt + head[:, None] * stride_qh
    q_lat = tl.load(q_row + offs_l[None, :], mask=h_ok[:, None], other=0.0)
    q_pe = tl.load(q_row + L + offs_r[None, :], mask=h_ok[:, None], other=0.0)

    start, end = split_range(topk, num_splits, split, BLOCK_N)
    m_i = tl.zeros([BLOCK_H], tl.float32) + NEG_BIG
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, L], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    for n0 in range(start, end, BLOCK_N):
        j = n0 + offs_n
        slot = tl.load(Slots + t * topk + j, mask=j < end, other=-1)
        ok = slot >= 0
        row = Cache + slot.to(tl.int64) * ROW
        c = tl.load(row[:, None] + offs_l[None, :], mask=ok[:, None], other=0.0).to(q_lat.dtype)
        pe = tl.load(row[:, None] + L + offs_r[None, :], mask=ok[:, None],
                     other=0.0).to(q_lat.dtype)
        s = tl.dot(q_lat, tl.trans(c), input_precision=DOT_PREC)
        s = tl.dot(q_pe, tl.trans(pe), s, input_precision=DOT_PREC)
        s = tl.where(ok[None, :], s * qk_scale, float("-inf"))
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, c, DOT_PREC)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc * (v_scale / l_safe)[:, None]
    o_ptr = Out + t * stride_ot + head[:, None] * stride_oh + split * stride_os + offs_l[None, :]
    tl.store(o_ptr, out, mask=h_ok[:, None])
    if not DIRECT:
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(Lse + t * stride_lt + head * stride_lh + split, lse, mask=h_ok)


def selected_slots(indices, block_table, token_request, *, page_size: int) -> torch.Tensor:
    """[T, topk] int32 cache slots of ``indices`` [T, topk] (positions, -1 pads) through
    each token's block-table row; -1 for a pad or a position past the table."""
    T, topk = indices.shape
    slots = torch.empty(T, topk, dtype=torch.int32, device=indices.device)
    if T and topk:
        block = min(1024, triton.next_power_of_2(topk))
        _slots_kernel[(T, triton.cdiv(topk, block))](
            indices, block_table, token_request, slots, topk,
            block_table.shape[1] * page_size, indices.stride(0), block_table.stride(0),
            PAGE_SIZE=page_size, BLOCK=block)
    return slots


def sparse_tile(q_lat, topk: int, *, L: int, block_h: int = 64) -> dict:
    """The launch shape for ``q_lat`` [T, H, L + R] over ``topk`` indices a token on its
    device: the Triton kernel's tile for programs of ``block_h`` heads
    (configs.sparse_tile_config) and the fewest splits of the index list that fill the SMs."""
    T, H, _ = q_lat.shape
    smem_kb, sms = _geometry(q_lat.device)
    tile = sparse_tile_config(H, L, fp32=q_lat.dtype == torch.float32, smem_kb=smem_kb,
                              block_h=block_h)
    programs = triton.cdiv(H, tile["block_h"]) * T
    splits = choose_splits(programs, topk, slots=sms * tile.pop("programs_per_sm"), min_keys=64)
    return dict(tile, num_splits=splits)


def ws_tile(q_lat, topk: int, *, form: str = SPARSE_WS) -> dict:
    """sparse_mla's keywords for the Gluon kernel in ``form`` over ``q_lat`` [T, H, L + R]:
    the fewest splits of the index list that fill the SMs (one 64-head CTA an SM)."""
    T, H, _ = q_lat.shape
    _, sms = _geometry(q_lat.device)
    programs = triton.cdiv(H, WS_HEADS) * T
    return dict(kernel=form, num_splits=choose_splits(programs, topk, slots=sms,
                                                      min_keys=GLUON_FORMS[form][0]))


def ws_ready(q_lat, latent, *, L: int) -> bool:
    """Whether the Gluon kernel (variant sparse_ws) serves this call: the Triton its Gluon
    code is written for (the variant's declared range), a compiled launch on an sm_90 GPU,
    and sparse_gluon.gluon_serves's shapes (bf16, L 512 + R 64, heads a multiple of 64)."""
    from attnkit.backends._triton import interpreting
    from attnkit.backends.triton_dsa.declaration import VARIANTS
    from attnkit.registry.kernels import in_version_range
    bounds = next(k.triton for k in VARIANTS if k.name == "sparse_ws")
    if not q_lat.is_cuda or interpreting() or not in_version_range(triton.__version__, bounds):
        return False
    try:        # Gluon's Hopper API as the declared Triton spells it
        from attnkit.backends.triton_dsa.sparse_gluon import gluon_serves
    except ImportError:         # pragma: no cover - depends on the installed Triton
        return False
    return gluon_serves(q_lat, latent.view(-1, latent.shape[-1]), L=L)


def _geometry(device) -> tuple[int, int]:
    """(shared memory a block may opt into in KB, SMs) of ``device``; a CPU: an sm_90's."""
    if device.type != "cuda":
        return 227, 4
    props = torch.cuda.get_device_properties(device)
    return props.shared_memory_per_block_optin // 1024, props.multi_processor_count


def sparse_mla(q_lat, latent, block_table, token_request, indices, *, scale: float, L: int,
               kv_scale: float = 1.0, num_splits: int = 1, block_h: int = 64,
               block_n: int = 32, num_warps: int = 4, num_stages: int = 2,
               return_lse: bool = False, kernel: str = "triton"):
    """out_lat [T, H, L] in q_lat's dtype (and, with ``return_lse``, the natural-log LSE
    [T, H] fp32 of each row's logits; -inf where a token selected nothing).

    q_lat: [T, H, L + R] (absorbed query: q_nope @ W_kc, then q_pe); latent: [pages, page,
    L + R] of the compute dtype, or fp8 e4m3 with ``kv_scale`` undoing its storage scale;
    block_table: [B, P] int32; token_request: [T] int32; indices: [T, topk] int32 positions
    of the token's request (-1: none); ``scale``: the layer's softmax scale.
    ``kernel``: "triton" (this module's kernel, every dtype and width) or a form of
    sparse_gluon.GLUON_FORMS (bf16, L 512 + R 64, H a multiple of 64, sm_90; see
    sparse_gluon.gluon_serves), which ignores the Triton tile options."""
    T, H, D = q_lat.shape
    R = D - L
    topk = indices.shape[1]
    out = torch.empty(T, H, L, dtype=q_lat.dtype, device=q_lat.device)
    if T == 0:
        return (out, torch.empty(T, H, dtype=torch.float32, device=q_lat.device)) if return_lse else out
    block_h = max(16, min(block_h, triton.next_power_of_2(H)))
    num_splits = max(1, min(num_splits, triton.cdiv(topk, block_n)))
    # with return_lse a single split still stores its LSE (the merge kernel is skipped)
    direct = num_splits == 1 and not return_lse
    # DIRECT: the kernel writes the final rows into out (split stride 0), no fp32 partial
    partial = out if direct else torch.empty(T, H, num_splits, L, dtype=torch.float32,
                                             device=q_lat.device)
    p_strides = (out.stride(0), out.stride(1), 0) if direct else partial.stride()[:3]
    lse = torch.empty(T, H, num_splits, dtype=torch.float32, device=q_lat.device)
    slots = selected_slots(indices, block_table, token_request, page_size=latent.shape[1])
    rows = latent.view(-1, latent.shape[-1])         # [pages * page, L + R]: one row a slot
    if kernel == "triton":
        _sparse_mla_kernel[(triton.cdiv(H, block_h), T, num_splits)](
            q_lat, rows, slots, partial, lse, q_lat.stride(0), q_lat.stride(1), *p_strides,
            lse.stride(0), lse.stride(1), scale * kv_scale * LOG2E, kv_scale, H, topk, num_splits,
            L=L, R=R, ROW=rows.stride(0), BLOCK_H=block_h, BLOCK_N=block_n,
            DIRECT=direct, DOT_PREC="ieee" if q_lat.dtype == torch.float32 else "tf32",
            num_warps=num_warps, num_stages=num_stages,
        )
    else:
        from attnkit.backends.triton_dsa.sparse_gluon import launch_sparse_gluon
        launch_sparse_gluon(q_lat, rows, slots, partial, lse, p_strides,
                            qk_scale=scale * kv_scale * LOG2E, v_scale=kv_scale,
                            num_splits=num_splits, direct=direct, form=kernel)
    if num_splits == 1:
        if not direct:
            out.copy_(partial[:, :, 0])
    else:
        reduce_splits(partial, lse, out, num_splits)
    if not return_lse:
        return out
    m = lse.amax(dim=2, keepdim=True)
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    total = torch.log2(torch.exp2(lse - m_safe).sum(dim=2)) + m_safe[..., 0]
    return out, total / LOG2E

"""Absorbed MLA attention over the paged latent cache: split-KV kernel, reduce kernel, launcher.

One program owns a tile of ``BLOCK_T`` query tokens x ``BLOCK_H`` heads of ONE request
(decode: 1 token x all heads of a rank, so each latent row is read once per split),
and one of ``num_splits`` contiguous slices of that request's KV. Rows are causal: query
token i of a request with ``n`` new tokens and KV length ``S`` sees keys ``< S - n + i + 1``,
which covers DECODE (n = 1), VERIFY (a few draft tokens) and short EXTEND steps.

Per latent tile ``c [BLOCK_N, L]`` (read once, used twice):
    s   = scale * (q_lat @ c.T + q_pe @ k_pe.T)        [BLOCK_M, BLOCK_N]
    acc = acc * alpha + softmax_part(s) @ c            [BLOCK_M, L]
Softmax runs in base 2 (``exp2``): the launcher folds log2(e) into the scale.
"""
from __future__ import annotations

import warnings

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait
from triton.runtime.errors import OutOfResources

from attnkit.backends._triton import LOG2E, NEG_BIG, interpreting, online_softmax_step
from attnkit.backends.triton_mla.decode_column_split import _absorbed_v2_kernel, work_rows
from attnkit.backends.triton_mla.decode_tma import absorbed_tma

from attnkit.backends.triton_mla import configs
from attnkit.backends.triton_mla.configs import WS
from attnkit.errors import fail

try:        # Gluon's Hopper API as Triton 3.6 spells it; another Triton: "ws" does not run
    from attnkit.backends.triton_mla.decode_gluon import absorbed_gluon, gluon_ready
except ImportError:         # pragma: no cover - depends on the installed Triton
    absorbed_gluon, gluon_ready = None, None

# The absorbed split kernel's variants (declaration.py names them for the plan): "v1" /
# "whole_rows" (_absorbed_split_kernel: one program holds a head block's whole latent row),
# "v2" / "column_split" (decode_column_split.py: output columns split across programs,
# page-local key tiles), "tma" / "column_split_tma" (decode_tma.py: v2's program with the
# latent tiles read through tensor descriptors; 128-head programs of a 16-bit cache:
# decode_tma.tma_ready), "ws" (decode_gluon.py: Gluon, a loader warp and two warpgroups; bf16
# decode tokens over 64-key pages on sm_90 with the Triton the declaration names: ws_ready).
# Which one runs is the plan's choice (its kernel table, measured by attnkit tune); the backend
# runs the first of the table's that can take the call (backend.RUNNABLE), and this launcher
# runs the one it is given. Tiles: configs.py.
VARIANT_NAMES = {"whole_rows": "v1", "column_split": "v2", "column_split_tma": "tma",
                 "warp_specialised": "ws"}
PLAN_NAMES = {"v1": "whole_rows", "v2": "column_split", "tma": "column_split_tma", "ws": "ws"}
KERNEL_OF = {plan: code for code, plan in PLAN_NAMES.items()}
VARIANTS = ("v1", "v2", "tma", "ws")


@triton.jit
def _absorbed_split_kernel(
    QL, QP, Cache, BlockTables, WorkReq, WorkTok, QStart, SeqLens, Out, Lse,
    stride_qlh, stride_qlt, stride_qpt, stride_qph, stride_cache, stride_bt,
    stride_ot, stride_oh, stride_os, stride_lt, stride_lh,
    qk_scale, v_scale, H, num_splits,
    L: tl.constexpr, R: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    DIRECT: tl.constexpr, DOT_PREC: tl.constexpr,
):
    """QL: q_lat [H, T, L]; QP: q_pe [T, H, R]; Cache: latent [slots, L + R];
    BlockTables: [B, P] int32; WorkReq/WorkTok: [W] request id and first token of each tile;
    QStart: [B+1]; SeqLens: [B]; Out: [T, H, S, L] fp32 partials (DIRECT: [T, H, L] fp32 final);
    Lse: [T, H, S] fp32 base-2 log-sum-exp of each split (unused when DIRECT)."""
    BLOCK_M: tl.constexpr = BLOCK_T * BLOCK_H
    # head blocks vary fastest, so the programs that share a request's latent rows run
    # together and all but the first read them from L2
    hb = tl.program_id(0)
    w = tl.program_id(1)
    split = tl.program_id(2)
    req, tok, head, row_ok, kv_len, kv_max = work_rows(WorkReq, WorkTok, QStart, SeqLens, w, hb,
                                                       H, BLOCK_M, BLOCK_H)

    offs_l = tl.arange(0, L)
    offs_r = tl.arange(0, R)
    q_lat = tl.load(QL + head[:, None] * stride_qlh + tok[:, None] * stride_qlt + offs_l[None, :],
                    mask=row_ok[:, None], other=0.0)
    q_pe = tl.load(QP + tok[:, None] * stride_qpt + head[:, None] * stride_qph + offs_r[None, :],
                   mask=row_ok[:, None], other=0.0)

    # this split's slice of the KV, a whole number of BLOCK_N tiles
    per_split = tl.cdiv(tl.cdiv(kv_max, num_splits), BLOCK_N) * BLOCK_N
    start = split * per_split
    end = tl.minimum(start + per_split, kv_max)

    m_i = tl.zeros([BLOCK_M], tl.float32) + NEG_BIG   # finite: fully masked tiles add 0
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, L], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        pos_ok = pos < end
        # token address: page id from the request's block table, then offset in page
        page = tl.load(BlockTables + req * stride_bt + pos // PAGE_SIZE, mask=pos_ok, other=0)
        slot = page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE
        c = tl.load(Cache + slot[:, None] * stride_cache + offs_l[None, :],
                    mask=pos_ok[:, None], other=0.0).to(q_lat.dtype)
        pe = tl.load(Cache + slot[:, None] * stride_cache + L + offs_r[None, :],
                     mask=pos_ok[:, None], other=0.0).to(q_lat.dtype)
        s = tl.dot(q_lat, tl.trans(c), input_precision=DOT_PREC)
        s = tl.dot(q_pe, tl.trans(pe), s, input_precision=DOT_PREC)
        s = tl.where(pos[None, :] < kv_len[:, None], s * qk_scale, float("-inf"))
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, c, DOT_PREC)

    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc * (v_scale / l_safe)[:, None]
    if DIRECT:
        o_ptr = Out + tok[:, None] * stride_ot + head[:, None] * stride_oh + offs_l[None, :]
        tl.store(o_ptr, out, mask=row_ok[:, None])
    else:
        o_ptr = (Out + tok[:, None] * stride_ot + head[:, None] * stride_oh + split * stride_os
                 + offs_l[None, :])
        tl.store(o_ptr, out, mask=row_ok[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(l_safe))
        tl.store(Lse + tok * stride_lt + head * stride_lh + split, lse, mask=row_ok)


@triton.jit
def _reduce_splits_kernel(
    Partial, Lse, Out, num_splits,
    stride_pt, stride_ph, stride_ps, stride_lt, stride_lh, stride_ot, stride_oh,
    BLOCK_S: tl.constexpr, BLOCK_L: tl.constexpr, PDL: tl.constexpr = False,
):
    """Partial: [T, H, S, L] fp32; Lse: [T, H, S] fp32 (base 2); Out: [T, H, L].
    Grid (T, H, L / BLOCK_L). One pass over the splits, BLOCK_S at a time: each round loads
    the splits' LSEs and partials together and folds them into a running max, denominator and
    sum (rescaled when the max moves), so a step of <= BLOCK_S splits is one round of loads
    (the two-pass form, a max over the LSEs first, waited one L2 round trip before the
    partials' loads; NOTES-mla.md version 10).
    PDL: launched as a programmatic dependent of the split kernel; waits for its stores."""
    if PDL:
        gdc_wait()
    t = tl.program_id(0)
    h = tl.program_id(1)
    offs_l = tl.program_id(2) * BLOCK_L + tl.arange(0, BLOCK_L)
    offs_s = tl.arange(0, BLOCK_S)
    lse_base = Lse + t * stride_lt + h * stride_lh
    part_base = Partial + t * stride_pt + h * stride_ph
    m = tl.max(tl.full([BLOCK_S], float("-inf"), tl.float32), axis=0)
    acc = tl.zeros([BLOCK_L], tl.float32)
    denom = tl.sum(tl.zeros([BLOCK_S], tl.float32), axis=0)
    for s0 in range(0, num_splits, BLOCK_S):
        s_ok = s0 + offs_s < num_splits
        # empty splits stored lse = -inf and a zero partial: weight 0
        lse = tl.load(lse_base + s0 + offs_s, mask=s_ok, other=float("-inf"))
        part = tl.load(part_base + (s0 + offs_s)[:, None] * stride_ps + offs_l[None, :],
                       mask=s_ok[:, None], other=0.0)
        m_new = tl.maximum(m, tl.max(lse, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)                  # 0 while m is -inf (nothing folded yet)
        wgt = tl.exp2(lse - m_safe)
        acc = acc * alpha + tl.sum(wgt[:, None] * part, axis=0)
        denom = denom * alpha + tl.sum(wgt, axis=0)
        m = m_new
    denom = tl.where(denom == 0.0, 1.0, denom)
    tl.store(Out + t * stride_ot + h * stride_oh + offs_l, (acc / denom).to(Out.dtype.element_ty))


def reduce_splits(partial, lse, out, num_splits: int, *, pdl: bool = False) -> None:
    """Merge split partials into ``out`` [T, H, L] (written): partial [T, H, S, L] fp32, lse
    [T, H, S] fp32 base 2, S >= num_splits. Tile: ``configs.reduce_tile``."""
    T, H, L = out.shape
    block_s, block_l = configs.reduce_tile(T * H, L, num_splits)
    _reduce_splits_kernel[(T, H, L // block_l)](
        partial, lse, out, num_splits, partial.stride(0), partial.stride(1), partial.stride(2),
        lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        BLOCK_S=block_s, BLOCK_L=block_l, num_warps=4,
        PDL=pdl, **({"launch_pdl": True} if pdl else {}),
    )


def _ws_triton() -> tuple:
    """The Triton versions the ws variant builds with: its declaration's envelope (Gluon is
    experimental; Triton 3.9 already spells warp_specialize differently)."""
    from attnkit.backends.triton_mla.declaration import VARIANTS as DECLARED
    return next(k.triton for k in DECLARED if k.name == "ws")


def ws_ready(q_lat, cache_flat, *, page_size: int, block_t: int, block_h: int,
             block_n: int = WS["BLOCK_N"]) -> bool:
    """Whether the Gluon kernel ("ws") serves this call: a Triton with Gluon's Hopper API, a
    compiled (not interpreted) launch on an sm_90 GPU, and decode_gluon.gluon_ready's shapes."""
    from attnkit.registry.kernels import in_version_range
    if (gluon_ready is None or not in_version_range(triton.__version__, _ws_triton()) or not q_lat.is_cuda
            or interpreting() or block_h != WS["BLOCK_H"]):
        return False
    import torch
    if torch.cuda.get_device_capability(q_lat.device) != (9, 0):
        return False
    return gluon_ready(q_lat, cache_flat, page_size=page_size, block_t=block_t,
                       heads=q_lat.shape[0], block_n=block_n)


def choose_splits(programs: int, max_kv: int, *, slots: int, min_keys: int = 128) -> int:
    """KV splits per tile: the fewest whose programs fill the ``slots`` (SMs x programs per
    SM) in whole waves within 90 % as well as the best count does, each split keeping
    >= ``min_keys`` keys. Fewest, because every extra split writes and merges another fp32
    partial of [heads, L] per token (at B=128, H=128, 17 splits moved 570 MB of partials)."""
    cap = max(1, min(256, max_kv // min_keys))
    fill = [programs * s / (triton.cdiv(programs * s, slots) * slots) for s in range(1, cap + 1)]
    best = max(fill)
    return next(s for s, f in enumerate(fill, start=1) if f >= 0.9 * best)


def fuses_merge(variant: str, num_splits: int, merge_splits: int) -> bool:
    """Whether absorbed_attention merges the splits inside the split kernel (v2's MERGE)."""
    return variant == "v2" and 1 < num_splits <= merge_splits


def absorbed_attention(q_lat, q_pe, cache_flat, block_tables, work_req, work_tok,
                       query_start_loc, seq_lens, *, page_size: int, scale: float,
                       kv_scale: float, block_t: int, block_h: int, block_n: int,
                       num_splits: int, num_warps: int = 4, num_stages: int = 2,
                       variant: str = "v1", v_split: int = 1, pdl: bool = False,
                       merge_splits: int = 0, counters=None, ws_tile=None):
    """Absorbed attention core; returns out_lat [T, H, L] in q_lat's dtype.

    q_lat: [H, T, L] (last dim contiguous); q_pe: [T, H, R]; cache_flat: [slots, L + R]
    (compute dtype or fp8; ``kv_scale`` undoes fp8 storage); block_tables: [B, P] int32;
    work_req / work_tok: [W] int32 tiles of ``block_t`` tokens of one request;
    query_start_loc: [B+1] int32; seq_lens: [B] int32. ``variant`` picks the split kernel
    ("v1", "v2" or "tma"); ``v_split`` (v2 / tma, 1 or 2) column blocks of L per head block;
    ``pdl`` (v2 with splits): the reduce kernel launched as a programmatic dependent of the
    split kernel (sm_90+; the split kernel itself launches as usual, after its inputs), its
    launch and prologue under the split kernel's tail. ``merge_splits`` (v2): with 2 up to
    that many splits the split kernel merges them itself (MERGE, no reduce launch; pdl has
    nothing to do then), taking tickets from ``counters``: int32 zeros, >= W x head blocks,
    left zero (a step's persistent buffer, so that a CUDA graph needs no zeroing; None: new
    zeros each call). ``ws_tile``: the ws kernel's tile (configs.ws_tile; None: configs.WS);
    with its OUT16 a one-split launch writes the output in q's dtype itself.
    """
    import torch

    H, T, L = q_lat.shape
    R = q_pe.shape[-1]
    W = work_req.numel()
    if T == 0 or W == 0:
        return torch.empty(T, H, L, dtype=q_lat.dtype, device=q_lat.device)
    head_blocks = triton.cdiv(H, block_h)
    direct = num_splits == 1
    ws_tile = ws_tile or WS
    if direct:
        # fp32 even here for the Triton kernels: a bf16 epilogue made ptxas spill the [64, 512]
        # accumulator (sm_90); the ws kernel's [64, 256] halves store q's dtype with OUT16
        dtype = q_lat.dtype if variant == "ws" and ws_tile["OUT16"] else torch.float32
        partial = torch.empty(T, H, L, dtype=dtype, device=q_lat.device)
        lse = partial.new_empty(1, dtype=torch.float32)
        sp = (partial.stride(0), partial.stride(1), 0, 0, 0)
    else:
        partial = torch.empty(T, H, num_splits, L, dtype=torch.float32, device=q_lat.device)
        lse = torch.empty(T, H, num_splits, dtype=torch.float32, device=q_lat.device)
        sp = (partial.stride(0), partial.stride(1), partial.stride(2), lse.stride(0), lse.stride(1))
    dot_prec = "ieee" if q_lat.dtype == torch.float32 else "tf32"
    merge = fuses_merge(variant, num_splits, merge_splits)
    pdl = pdl and variant == "v2" and not direct and not merge
    if merge:                       # the split kernel writes the output itself
        out = torch.empty(T, H, L, dtype=q_lat.dtype, device=q_lat.device)
        need = W * head_blocks
        if counters is None:
            counters = torch.zeros(need, dtype=torch.int32, device=q_lat.device)
        elif counters.dtype != torch.int32 or counters.numel() < need:
            fail("AK900", f"triton_mla: the fused merge needs {need} int32 tickets, got "
                          f"{counters.numel()} {counters.dtype}", field="counters",
                 expected=f">= {need} int32", actual=f"{counters.numel()} {counters.dtype}")
        block_c, chunk_s = configs.merge_tile(block_t * block_h, L, num_warps)
    if variant == "ws":
        absorbed_gluon(q_lat, q_pe, cache_flat, block_tables, work_req, work_tok,
                       query_start_loc, seq_lens, partial, lse, sp,
                       qk_scale=scale * kv_scale * LOG2E, v_scale=kv_scale,
                       num_splits=num_splits, page_size=page_size, direct=direct, tile=ws_tile)
    elif variant == "tma":
        absorbed_tma((head_blocks * v_split, W, num_splits), q_lat, q_pe, cache_flat,
                     block_tables, work_req, work_tok, query_start_loc, seq_lens, partial, lse,
                     sp, qk_scale=scale * kv_scale * LOG2E, v_scale=kv_scale,
                     num_splits=num_splits, page_size=page_size, block_t=block_t,
                     block_h=block_h, block_n=block_n, v_split=v_split, direct=direct,
                     num_warps=num_warps, num_stages=num_stages)
    elif variant == "v2":
        def launch(stages):
            _absorbed_v2_kernel[(head_blocks * v_split, W, num_splits)](
                q_lat, q_pe, cache_flat, block_tables, work_req, work_tok, query_start_loc,
                seq_lens, partial, lse, *((out, counters) if merge else (lse, lse)),
                q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1),
                block_tables.stride(0), *sp, *((out.stride(0), out.stride(1)) if merge else (0, 0)),
                scale * kv_scale * LOG2E, kv_scale, H, num_splits,
                L=L, R=R, ROW=cache_flat.stride(0), PAGE_SIZE=page_size, BLOCK_T=block_t,
                BLOCK_H=block_h, BLOCK_N=block_n, V_SPLIT=v_split, DIRECT=direct,
                DOT_PREC=dot_prec, PDL=pdl, num_warps=num_warps, num_stages=stages,
                **(dict(MERGE=True, BLOCK_C=block_c, CHUNK_S=chunk_s) if merge else {}),
            )
        try:
            launch(num_stages)
        except OutOfResources as exc:
            # v2's 128-head tile uses 221 KB of shared memory with Triton 3.9's pipeliner (two
            # latent buffers at 3 stages); a Triton that allocates one buffer per stage would
            # not fit it, and 2 stages never hold more than two buffers
            if num_stages <= 2:
                raise
            warnings.warn(f"triton_mla v2 tile ({block_h} heads, {block_n} keys, {num_stages} "
                          f"stages) does not fit ({exc}); using 2 stages", stacklevel=2)
            launch(2)
    else:
        _absorbed_split_kernel[(head_blocks, W, num_splits)](
            q_lat, q_pe, cache_flat, block_tables, work_req, work_tok, query_start_loc, seq_lens,
            partial, lse,
            q_lat.stride(0), q_lat.stride(1), q_pe.stride(0), q_pe.stride(1), cache_flat.stride(0),
            block_tables.stride(0), *sp,
            scale * kv_scale * LOG2E, kv_scale, H, num_splits,
            L=L, R=R, PAGE_SIZE=page_size, BLOCK_T=block_t, BLOCK_H=block_h, BLOCK_N=block_n,
            DIRECT=direct, DOT_PREC=dot_prec, num_warps=num_warps, num_stages=num_stages,
        )
    if direct:
        return partial.to(q_lat.dtype)               # no copy where the kernel wrote q's dtype
    if merge:
        return out
    out = torch.empty(T, H, L, dtype=q_lat.dtype, device=q_lat.device)
    reduce_splits(partial, lse, out, num_splits, pdl=pdl)
    return out

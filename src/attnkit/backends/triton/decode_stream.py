"""Decode variant "stream": one program per (request, KV head[, split]) over its keys with a
deep ring of K / V tiles in shared memory, in Gluon (sm_90, Triton 3.6). The schedule cuDNN's
B=16 decode shows under Nsight Compute (NOTES-triton.md version 6): few programs, no split
where the (request, KV head) pairs fill the SMs, many bytes in flight per program.

Two partitions:

- loader (1 warp): for key tile i (BN keys, BN / PAGE pages), waits for ring slot i % NS to
  be free, then issues one TMA copy per page of K and of V (PAGE rows of the KV head's D
  columns: the cache viewed as [slots, H_kv * D]) into the slot, all on the slot's one
  mbarrier. A page index past the request's last page is clamped to the last page (the rows
  are read, then masked), so every tile has the same byte count.
- compute (the default partition, 4 warps = one warpgroup): S = Q.K^T (wgmma, the group's
  query rows padded to 64, Q in shared memory), the online softmax in base 2, O += P.V (P
  from registers); the slot is released after its P.V.

The keys past the cached ones (a partial last page: stale slots, any bits, NaN too) score
-inf; their V rows are zeroed in shared memory before P.V reads them (0 * NaN is NaN).
FUSED_WRITE: the program of the split that holds a request's last key writes that token's
K / V row of its KV head into the cache and folds it into the softmax from registers; the
tiles' keys stop one short, so the row being written (its page may be copied by the same
program's TMA at the same time) is always one of the masked, zeroed rows.

EARLY (a launch-config switch): every load before the first tile is issued at once in the
prologue (length, queries, the split's first page ids, the new K / V), and the new key starts
the softmax instead of ending it: two dependent round trips fewer (NOTES-triton.md version 8).

Splits (grid dim 2) cover whole tiles; one split writes the normalised output, more write
decode.py's partials (unnormalised output, base-2 max, denominator), merged by its
_reduce_kernel. Shapes: q [B, H_q, D]; k / v cache [P, PAGE, H_kv, D]; out [B, H_q, D].
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)

BH_ROWS = 64
BH = gl.constexpr(BH_ROWS)    # query rows a program: one wgmma M tile (the group's rows, zero-padded)
LOADER_REGS = 24
IDS = gl.constexpr(32)          # page ids the loader holds at once (a lane each; a tile has <= 32 pages)
STREAM_PAGES = (16, 32, 64)     # page sizes a key tile (BLOCK_N raised to the page) holds whole


@gluon.jit
def _loader(k_desc, v_desc, k_ring, v_ring, ready, free, ids_smem, bt_row, n0, n_tiles,
            last_page, col, PAGE: gl.constexpr, BN: gl.constexpr, NS: gl.constexpr,
            EARLY: gl.constexpr):
    """Fill slot i % NS with key tile i (keys n0 + i * BN ..) once compute has released it.
    Page ids come IDS at a time, one per lane (one load every IDS / PAGES tiles, not one round
    trip a page between the copies); a page's id is read out of the warp by a reduction.
    EARLY: the first IDS ids were loaded with the request's length (ids_smem, the kernel's
    prologue), so the first copy waits one round trip less."""
    PAGES: gl.constexpr = BN // PAGE
    TILES_PER_LOAD: gl.constexpr = IDS // PAGES
    ids_layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    offs = gl.arange(0, IDS, layout=ids_layout)
    first = n0 // PAGE
    if EARLY:
        ids = ids_smem.load(ids_layout)
    else:
        ids = gl.load(bt_row + gl.minimum(first + offs, last_page))
    for i in range(n_tiles):
        s = i % NS
        base = first + (i - i % TILES_PER_LOAD) * PAGES      # the page ids holds from
        if (i % TILES_PER_LOAD == 0) & (i > 0):      # the next IDS ids (the first: above)
            ids = gl.load(bt_row + gl.minimum(base + offs, last_page))
        mbarrier.wait(free.index(s), ((i // NS) & 1) ^ 1)
        bar = ready.index(s)
        mbarrier.expect(bar, 2 * PAGES * k_desc.block_type.nbytes)
        for j in gl.static_range(PAGES):
            if EARLY:      # the first ids are clamped to the table's width, not the last page
                at = gl.minimum(first + i * PAGES + j, last_page) - base
            else:
                at = (i % TILES_PER_LOAD) * PAGES + j
            page = gl.sum(gl.where(offs == at, ids, 0), axis=0)
            tma.async_copy_global_to_shared(k_desc, [page * PAGE, col], bar,
                                            k_ring.index(s).slice(j * PAGE, PAGE))
            tma.async_copy_global_to_shared(v_desc, [page * PAGE, col], bar,
                                            v_ring.index(s).slice(j * PAGE, PAGE))


@gluon.jit
def _compute(q_smem, k_ring, v_ring, ready, free, sn_smem, vn_smem, Q, Out, MidO, MidM, MidL,
             KN, VN, K, V, Slots, b, kvh, sp, n0, n_tiles, cached, owner, qk_scale, stride_qt,
             stride_qh, stride_ot, stride_oh, stride_mb, stride_mh, stride_ms, stride_knt,
             stride_knh, stride_vnt, stride_vnh, stride_kt, stride_vt, GROUP: gl.constexpr,
             D: gl.constexpr, PAGE: gl.constexpr, BN: gl.constexpr, NS: gl.constexpr,
             SPLIT: gl.constexpr, FUSED_WRITE: gl.constexpr, EARLY: gl.constexpr):
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    zero_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    m_i = gl.full([BH], -1.0e30, gl.float32, gl.SliceLayout(1, s_layout))   # finite: 0 weight
    l_i = gl.zeros([BH], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BH, D], gl.float32, o_layout)
    if FUSED_WRITE and EARLY:   # the softmax starts from the new key (its logit: the kernel's)
        own = owner.to(gl.float32)
        s_n = sn_smem.load(gl.SliceLayout(1, s_layout))
        m_i = gl.where(owner, s_n, m_i)
        l_i = l_i + own
        v_n = vn_smem.load(gl.SliceLayout(0, o_layout)).to(gl.float32)
        acc = acc + gl.expand_dims(v_n * own, 0)
    s0 = gl.zeros([BH, BN], gl.float32, s_layout)
    for i in range(n_tiles):
        s = i % NS
        t0 = n0 + i * BN
        mbarrier.wait(ready.index(s), (i // NS) & 1)
        kt = k_ring.index(s)
        vt = v_ring.index(s)
        sc = warpgroup_mma(q_smem, kt.permute((1, 0)), s0, use_acc=False, is_async=True)
        sc = warpgroup_mma_wait(num_outstanding=0, deps=[sc])
        pos = t0 + gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
        sc = gl.where(gl.expand_dims(pos < cached, 0), sc * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(sc, axis=1))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(sc - gl.expand_dims(m_new, 1))
        l_i = l_i * alpha + gl.sum(p, axis=1)
        m_i = m_new
        if t0 + BN > cached:        # stale rows of the last page: zeros before P.V reads them
            keep = gl.expand_dims(t0 + gl.arange(0, BN, layout=gl.SliceLayout(1, zero_layout))
                                  < cached, 1)
            for c in gl.static_range(D // 64):
                part = vt.slice(c * 64, 64, dim=1)
                part.store(gl.where(keep, part.load(zero_layout), 0.0))
            fence_async_shared()
            gl.thread_barrier()     # every warp's zeros land before the warpgroup's P.V
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        acc = warpgroup_mma(gl.convert_layout(p.to(q_smem.dtype), p_layout), vt, acc,
                            is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        mbarrier.arrive(free.index(s), count=1)

    rows = gl.arange(0, BH, layout=gl.SliceLayout(1, o_layout))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, o_layout))
    heads = kvh * GROUP + rows
    row_ok = gl.expand_dims(rows < GROUP, 1)
    m_o = gl.convert_layout(m_i, gl.SliceLayout(1, o_layout))
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    if FUSED_WRITE and not EARLY:
        if owner:   # the new key: into the cache, and into the softmax from registers
            k_n = gl.load(KN + b.to(gl.int64) * stride_knt + kvh * stride_knh + cols)
            v_n = gl.load(VN + b.to(gl.int64) * stride_vnt + kvh * stride_vnh + cols)
            slot = gl.load(Slots + b)
            gl.store(K + slot * stride_kt + kvh * D + cols, k_n)
            gl.store(V + slot * stride_vt + kvh * D + cols, v_n)
            q_r = gl.load(Q + b.to(gl.int64) * stride_qt + gl.expand_dims(heads * stride_qh, 1)
                          + gl.expand_dims(cols, 0), mask=row_ok, other=0.0)
            s_n = gl.sum(q_r.to(gl.float32) * gl.expand_dims(k_n.to(gl.float32), 0), axis=1)
            s_n = s_n * qk_scale
            m_new = gl.maximum(m_o, s_n)
            alpha = gl.exp2(m_o - m_new)
            p_n = gl.exp2(s_n - m_new)
            acc = acc * gl.expand_dims(alpha, 1) + gl.expand_dims(p_n, 1) * gl.expand_dims(
                v_n.to(gl.float32), 0)
            l_o = l_o * alpha + p_n
            m_o = m_new
    ok = row_ok & gl.expand_dims(cols < D, 0)
    if SPLIT:
        mid = b.to(gl.int64) * stride_mb + heads * stride_mh + sp * stride_ms        # [BH]
        gl.store(MidM + mid, m_o, mask=rows < GROUP)
        gl.store(MidL + mid, l_o, mask=rows < GROUP)
        gl.store(MidO + gl.expand_dims(mid * D, 1) + gl.expand_dims(cols, 0), acc, mask=ok)
    else:
        l_safe = gl.where(l_o == 0.0, 1.0, l_o)
        out = acc * gl.expand_dims(1.0 / l_safe, 1)
        gl.store(Out + b.to(gl.int64) * stride_ot + gl.expand_dims(heads * stride_oh, 1)
                 + gl.expand_dims(cols, 0), out.to(Out.dtype.element_ty), mask=ok)


@gluon.jit
def _stream_kernel(
    Q, k_desc, v_desc, K, V, Out, MidO, MidM, MidL, SeqLens, BlockTables, KN, VN, Slots,
    qk_scale, chunk, max_pages, stride_qt, stride_qh, stride_ot, stride_oh, stride_kt,
    stride_vt, stride_bt, stride_mb, stride_mh, stride_ms, stride_knt, stride_knh, stride_vnt,
    stride_vnh, GROUP: gl.constexpr, D: gl.constexpr, PAGE: gl.constexpr, BN: gl.constexpr,
    NS: gl.constexpr, SPLIT: gl.constexpr, FUSED_WRITE: gl.constexpr,
    LOADER_REGS: gl.constexpr, EARLY: gl.constexpr = False,
):
    """Grid (requests, KV heads, splits); ``chunk``: keys a split, whole BN tiles;
    ``max_pages``: the block table's width. EARLY: every load the program needs before its
    first tile (length, queries, first page ids, the new K / V) is issued at once, here, and
    the new key is written and folded in before the key loop, not after it."""
    b = gl.program_id(0)
    kvh = gl.program_id(1)
    sp = gl.program_id(2)
    kv_len = gl.load(SeqLens + b)
    q_blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, BH, layout=gl.SliceLayout(1, q_blocked))
    cols = gl.arange(0, D, layout=gl.SliceLayout(0, q_blocked))
    q_ptr = (Q + b.to(gl.int64) * stride_qt + gl.expand_dims((kvh * GROUP + rows) * stride_qh, 1)
             + gl.expand_dims(cols, 0))
    bt_row = BlockTables + b * stride_bt
    if EARLY:          # every load before the first use of the length: one round trip
        q = gl.load(q_ptr, mask=gl.expand_dims(rows < GROUP, 1), other=0.0)
        ids_offs = gl.arange(0, IDS, layout=gl.BlockedLayout([1], [32], [4], [0]))
        ids0 = gl.load(bt_row + gl.minimum((sp * chunk) // PAGE + ids_offs, max_pages - 1))
        if FUSED_WRITE:
            k_n = gl.load(KN + b.to(gl.int64) * stride_knt + kvh * stride_knh + cols)
            v_n = gl.load(VN + b.to(gl.int64) * stride_vnt + kvh * stride_vnh + cols)
            slot = gl.load(Slots + b)
    if FUSED_WRITE:    # the new key is not read from the cache; its split's program owns it
        cached = kv_len - 1
        owner = sp == (kv_len - 1) // chunk
    else:
        cached = kv_len
        owner = sp < 0
    n0 = sp * chunk
    n1 = gl.minimum(n0 + chunk, cached)
    n_tiles = gl.maximum(gl.cdiv(n1 - n0, BN), 0)
    last_page = gl.maximum(cached - 1, 0) // PAGE

    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, D], gl.bfloat16)
    q_smem = gl.allocate_shared_memory(Q.dtype.element_ty, [BH, D], q_layout)
    if not EARLY:
        q = gl.load(q_ptr, mask=gl.expand_dims(rows < GROUP, 1), other=0.0)
    q_smem.store(q)
    vec_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    ids_smem = gl.allocate_shared_memory(gl.int32, [IDS], vec_layout)
    sn_smem = gl.allocate_shared_memory(gl.float32, [BH], vec_layout)
    vn_smem = gl.allocate_shared_memory(Q.dtype.element_ty, [D], vec_layout)
    if EARLY:
        # the split's first page ids, read within the table's width whatever the length (the
        # loader takes only those up to the last page); with FUSED_WRITE the new K / V row
        # written by its owner, and the new key's logit per query row and its value, for
        # _compute to start its softmax from
        ids_smem.store(ids0)
        if FUSED_WRITE:
            if owner:
                gl.store(K + slot * stride_kt + kvh * D + cols, k_n)
                gl.store(V + slot * stride_vt + kvh * D + cols, v_n)
            s_n = gl.sum(q.to(gl.float32) * gl.expand_dims(k_n.to(gl.float32), 0), axis=1)
            sn_smem.store(s_n * qk_scale)
            vn_smem.store(v_n)

    k_ring = gl.allocate_shared_memory(k_desc.dtype, [NS, BN, D], k_desc.layout)
    v_ring = gl.allocate_shared_memory(v_desc.dtype, [NS, BN, D], v_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    free = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    for st in gl.static_range(NS):
        mbarrier.init(ready.index(st), count=1)
        mbarrier.init(free.index(st), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (_compute, (q_smem, k_ring, v_ring, ready, free, sn_smem, vn_smem, Q, Out, MidO, MidM,
                    MidL, KN, VN, K, V, Slots, b, kvh, sp, n0, n_tiles, cached, owner, qk_scale,
                    stride_qt, stride_qh, stride_ot, stride_oh, stride_mb, stride_mh, stride_ms,
                    stride_knt, stride_knh, stride_vnt, stride_vnh, stride_kt, stride_vt, GROUP,
                    D, PAGE, BN, NS, SPLIT, FUSED_WRITE, EARLY)),
        (_loader, (k_desc, v_desc, k_ring, v_ring, ready, free, ids_smem,
                   bt_row, n0, n_tiles, last_page, kvh * D, PAGE, BN, NS, EARLY)),
    ], [1], [LOADER_REGS])


def stream_ok(q, k, v, layer, cache) -> bool:
    """Whether the stream variant serves the step's layer: sm_90 with Triton 3.6 (Gluon), a
    plain layer (no window, softcap, sinks, chunked attention; D = DV = 64 or 128) with at
    most 64 query heads a KV head, 16-bit q
    and cache of one dtype, dense rows TMA can address (16-byte aligned, a page's slots
    adjacent), pages of STREAM_PAGES rows (a key tile holds whole pages)."""
    import torch
    import triton

    from attnkit.backends._triton import interpreting
    spec = layer.spec
    lid = spec.layer_id
    if (not triton.__version__.startswith("3.6.") or not q.is_cuda or interpreting()
            or torch.cuda.get_device_capability(q.device) != (9, 0)):
        return False
    kc, vc = cache.k[lid], cache.v[lid]
    plain = (spec.sliding_window is None and spec.logit_softcap is None and not spec.sinks
             and spec.attention_chunk is None and spec.value_dim == spec.head_dim in (64, 128))
    dense = (not cache.is_fp8 and q.dtype in (torch.float16, torch.bfloat16)
             and kc.dtype == vc.dtype == k.dtype == v.dtype == q.dtype
             and all(t.stride(-1) == 1 for t in (q, k, v))
             and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (kc, vc)))
    page = kc.shape[1]
    grouped = spec.num_heads // spec.num_kv_heads <= BH_ROWS     # a KV head's rows: one M tile
    return (plain and dense and grouped and page in STREAM_PAGES and kc.shape[1] * kc.shape[0] < 2**31
            and kc.stride(1) == kc.shape[2] * kc.shape[3])


def stream_splits(max_kv: int, num_reqs: int, num_kv_heads: int, *, num_sms: int, block_n: int,
                  min_keys: int) -> tuple[int, int]:
    """(splits, chunk): splits only where the (request, KV head) pairs leave SMs idle (as many
    as fill them, floor), each at least ``min_keys`` keys in whole tiles (geometry, no
    measured figure: configs.DECODE_STREAM_RULE names the floor)."""
    want = max(1, num_sms // max(num_reqs * num_kv_heads, 1))
    most = max(1, -(-max_kv // max(min_keys, block_n)))
    chunk = -(-max(max_kv, 1) // min(want, most))
    chunk = -(-chunk // block_n) * block_n
    return -(-max(max_kv, 1) // chunk), chunk


def decode_stream_attention(q, k_cache, v_cache, out, *, seq_lens, block_tables, qk_scale: float,
                            num_splits: int, chunk: int, partials, config: dict, new_kv=None):
    """q: [B, H_q, D]; k_cache / v_cache: [P, PAGE, H_kv, D] (stream_ok); out: [B, H_q, D]
    (written); seq_lens: [B] int32 (the new key counted); block_tables: [B, pages] int32;
    num_splits / chunk: stream_splits (chunk in tiles of max(BLOCK_N, PAGE)); partials: (mid_o [B, H_q, S, D], mid_m, mid_l [B, H_q,
    S]) f32 when num_splits > 1, merged here by decode_merge._reduce_kernel; config: BLOCK_N,
    NUM_STAGES (configs.decode_config, variant stream; the stages cut to what
    the device's shared memory holds); new_kv: (k [B, H_kv, D], v [B, H_kv,
    D], slot_mapping [B] int64) to write in the kernel (FUSED_WRITE), or None (written
    already)."""
    import torch
    import triton as _triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from attnkit.backends.triton.decode_merge import _reduce_kernel
    num_reqs, num_heads, d = q.shape
    num_pages, page, h_kv, _ = k_cache.shape
    elem = gl.bfloat16 if str(q.dtype).endswith("bfloat16") else gl.float16
    layout = gl.NVMMASharedLayout.get_default_for([page, d], elem)

    def desc(x):
        return TensorDescriptor(x, [num_pages * page, h_kv * d], [h_kv * d, 1], [page, d], layout)

    split = num_splits > 1
    mid_o, mid_m, mid_l = partials if split else (out, out, out)
    strides = (mid_m.stride(0), mid_m.stride(1), mid_m.stride(2)) if split else (0, 0, 0)
    if new_kv is not None:
        k_new, v_new, slots = new_kv
        new_strides = (k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1))
    else:
        k_new, v_new, slots, new_strides = q, q, seq_lens, (0, 0, 0, 0)
    bn = max(config["BLOCK_N"], page)
    # ring slots that fit the device's shared memory (a tile raised to a large page is bigger)
    smem = torch.cuda.get_device_properties(q.device).shared_memory_per_block_optin
    slot_bytes = 2 * bn * d * q.element_size()
    stages = max(1, min(config["NUM_STAGES"], (smem - BH_ROWS * d * q.element_size() - 1024) // slot_bytes))
    _stream_kernel[(num_reqs, h_kv, num_splits)](
        q, desc(k_cache), desc(v_cache), k_cache, v_cache, out, mid_o, mid_m, mid_l, seq_lens,
        block_tables, k_new, v_new, slots, qk_scale, chunk, block_tables.shape[1],
        q.stride(0), q.stride(1),
        out.stride(0), out.stride(1), k_cache.stride(1), v_cache.stride(1),
        block_tables.stride(0), *strides, *new_strides,
        GROUP=num_heads // h_kv, D=d, PAGE=page, BN=bn, NS=stages, SPLIT=split, FUSED_WRITE=new_kv is not None,
        LOADER_REGS=LOADER_REGS, EARLY=bool(config.get("EARLY", False)), num_warps=4,
        **({"maxnreg": config["maxnreg"]} if config.get("maxnreg") else {}))
    if split:
        _reduce_kernel[(num_reqs, num_heads)](
            out, mid_o, mid_m, mid_l, mid_m, 1.0, num_splits, out.stride(0), out.stride(1),
            *strides, DV=d, BLOCK_DV=d, BLOCK_S=max(2, _triton.next_power_of_2(num_splits)),
            HAS_SINKS=False, num_warps=4)
    return out

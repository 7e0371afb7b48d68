"""Experimental decode kernel for issue 28's B=16 rows: one program reads EVERY KV head of its
keys (a candidate of sweep_decode16.py, not a backend variant until it measures).

decode.py gives each program one KV head: a token's K row of that head is 256 bytes (d128,
bf16) at a 2 KB stride (the token's 8 heads lie side by side in a page). Here program
(request, split) loads a tile of BLOCK_N tokens of all H_kv heads, [H_kv, BLOCK_N, D]: with
BLOCK_N = PAGE = 16 that is one whole 32 KB page of K (and one of V), contiguous in memory. The
products are batched over heads (3-D tl.dot): q [H_kv, R, D] (R = the GQA group padded to
16 rows) against the tile's keys [H_kv, D, BLOCK_N], so each head's rows meet only its own
keys. Splits are the request's keys in whole tiles; the new K/V of the step is written by the
program whose split holds the last key, which attends to it from k / v (as decode.py's
FUSED_WRITE); the last split program of a request merges (decode_merge.merge_if_last over all
H_q heads, one ticket counter a request).

    decode_heads(q, k_cache, v_cache, out, seq_lens=..., block_tables=..., new_kv=(k, v, slots),
                 qk_scale=..., num_splits=S, partials=..., counters=..., block_n=16, num_warps=8,
                 num_stages=3)
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from attnkit.backends._triton import NEG_BIG
from attnkit.backends.triton.decode_merge import merge_if_last


@triton.jit
def _decode_heads_kernel(
    Q, K, V, Out, MidO, MidM, MidL, SeqLens, BlockTables, KN, VN, Slots, Counter, qk_scale,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_kp, stride_kt, stride_kh, stride_vp,
    stride_vt, stride_vh, stride_bt, stride_mb, stride_mh, stride_ms, stride_knt, stride_knh,
    stride_vnt, stride_vnh,
    HKV: tl.constexpr, GROUP: tl.constexpr, R: tl.constexpr, D: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, MERGE_ROWS: tl.constexpr, MERGE_CHUNK: tl.constexpr,
):
    b = tl.program_id(0)
    sp = tl.program_id(1)
    kv_len = tl.load(SeqLens + b)
    chunk = tl.cdiv(tl.cdiv(kv_len, tl.num_programs(1)), BLOCK_N) * BLOCK_N
    n_lo = sp * chunk
    hi = tl.minimum(n_lo + chunk, kv_len - 1)          # cached keys; the last is the new one
    h = tl.arange(0, HKV)
    r = tl.arange(0, R)
    d = tl.arange(0, D)
    row_ok = (r < GROUP)[None, :]                                                  # [1, R]
    heads = h[:, None] * GROUP + r[None, :]                                        # [HKV, R]
    q = tl.load(Q + b.to(tl.int64) * stride_qt + heads[:, :, None] * stride_qh + d[None, None, :],
                mask=row_ok[:, :, None], other=0.0)                                # [HKV, R, D]
    m_i = tl.zeros([HKV, R], tl.float32) + NEG_BIG
    l_i = tl.zeros([HKV, R], tl.float32)
    acc = tl.zeros([HKV, R, D], tl.float32)
    bt_row = BlockTables + b.to(tl.int64) * stride_bt
    k_head = (h * stride_kh)[:, None, None] + d[None, None, :]
    v_head = (h * stride_vh)[:, None, None] + d[None, None, :]
    for n0 in range(n_lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        valid = offs_n < hi
        page = tl.load(bt_row + offs_n // PAGE, mask=valid, other=0).to(tl.int64)
        slot = (offs_n % PAGE).to(tl.int64)
        k = tl.load(K + (page * stride_kp + slot * stride_kt)[None, :, None] + k_head,
                    mask=valid[None, :, None], other=0.0)                          # [HKV, N, D]
        s = tl.dot(q, tl.trans(k, (0, 2, 1))) * qk_scale                           # [HKV, R, N]
        s = tl.where(valid[None, None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 2))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, :, None])
        v = tl.load(V + (page * stride_vp + slot * stride_vt)[None, :, None] + v_head,
                    mask=valid[None, :, None], other=0.0)
        l_i = l_i * alpha + tl.sum(p, 2)
        acc = acc * alpha[:, :, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    if sp == (kv_len - 1) // chunk:     # this split holds the new key: write it, attend to it
        kn = tl.load(KN + b.to(tl.int64) * stride_knt + h[:, None] * stride_knh + d[None, :])
        vn = tl.load(VN + b.to(tl.int64) * stride_vnt + h[:, None] * stride_vnh + d[None, :])
        cslot = tl.load(Slots + b)
        pg, off = cslot // PAGE, cslot % PAGE
        tl.store(K + pg * stride_kp + off * stride_kt + h[:, None] * stride_kh + d[None, :],
                 kn.to(K.dtype.element_ty))
        tl.store(V + pg * stride_vp + off * stride_vt + h[:, None] * stride_vh + d[None, :],
                 vn.to(V.dtype.element_ty))
        s_new = tl.sum(q.to(tl.float32) * kn.to(q.dtype).to(tl.float32)[:, None, :], 2) * qk_scale
        m_new = tl.maximum(m_i, s_new)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s_new - m_new)
        acc = acc * alpha[:, :, None] + p[:, :, None] * vn.to(q.dtype).to(tl.float32)[:, None, :]
        l_i = l_i * alpha + p
        m_i = m_new
    mid = b.to(tl.int64) * stride_mb + heads * stride_mh + sp * stride_ms                # [HKV, R]
    tl.store(MidM + mid, m_i, mask=row_ok)
    tl.store(MidL + mid, l_i, mask=row_ok)
    tl.store(MidO + (mid * D)[:, :, None] + d[None, None, :], acc, mask=row_ok[:, :, None])
    merge_if_last(Out, MidO, MidM, MidL, Counter, MidM, b, 0, 1.0, tl.num_programs(1),
                  stride_ot, stride_oh, stride_mb, stride_mh, stride_ms, HKV * GROUP, D, D,
                  False, MERGE_ROWS, MERGE_CHUNK)


def decode_heads(q, k_cache, v_cache, out, *, seq_lens, block_tables, new_kv, qk_scale: float,
                 num_splits: int, partials, counters, block_n: int = 16, num_warps: int = 8,
                 num_stages: int = 3):
    """q: [B, H_q, D]; k_cache / v_cache: [P, PAGE, H_kv, D] (bf16 / fp16, D a power of two,
    H_kv a power of two); out: [B, H_q, D] (written); seq_lens: [B] int32 (the new key
    counted); block_tables: [B, pages] int32; new_kv: (k [B, H_kv, D], v [B, H_kv, D], slots [B]
    int64); partials: (mid_o [B, H_q, S, D], mid_m [B, H_q, S], mid_l [B, H_q, S]) f32;
    counters: decode_merge.merge_counters(B) (left zero)."""
    num_reqs, num_heads, d = q.shape
    h_kv = k_cache.shape[2]
    group = num_heads // h_kv
    mid_o, mid_m, mid_l = partials
    k_new, v_new, slots = new_kv
    rows = triton.next_power_of_2(num_heads)
    _decode_heads_kernel[(num_reqs, num_splits)](
        q, k_cache, v_cache, out, mid_o, mid_m, mid_l, seq_lens, block_tables, k_new, v_new,
        slots, counters, qk_scale, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0),
        v_cache.stride(1), v_cache.stride(2), block_tables.stride(0), mid_m.stride(0),
        mid_m.stride(1), mid_m.stride(2), k_new.stride(0), k_new.stride(1), v_new.stride(0),
        v_new.stride(1),
        HKV=h_kv, GROUP=group, R=max(16, triton.next_power_of_2(group)), D=d,
        PAGE=k_cache.shape[1], BLOCK_N=block_n, MERGE_ROWS=rows,
        MERGE_CHUNK=max(1, min(16, 8192 // (rows * d))), num_warps=num_warps, num_stages=num_stages)
    return out


class HeadsBackend:
    """The sweep's stand-in for a TritonBackend (``prepare`` / ``forward`` as sweep_decode.py
    calls them) that runs decode_heads with ``splits`` splits and a launch config."""

    def __init__(self, splits: int | None, config: dict | None):
        cfg = dict(config or {})
        self.splits = splits or 8
        self.launch = dict(block_n=cfg.get("BLOCK_N", 16), num_warps=cfg.get("num_warps", 8),
                           num_stages=cfg.get("num_stages", 3))

    def prepare(self, meta, cache):
        from types import SimpleNamespace

        from attnkit.backends.triton.backend import TritonBackend
        from attnkit.backends.triton.decode_merge import merge_counters
        step = TritonBackend(decode_variant="split").prepare(meta, cache)
        plan = step.prepared
        b = meta.num_reqs
        f32 = dict(dtype=torch.float32, device=cache.k[0].device)
        prepared = SimpleNamespace(splits={"all": (self.splits, 0)}, seq_lens=plan.seq_lens,
                                   block_tables=plan.block_tables, slots=meta.slot_mapping,
                                   counters=merge_counters(b, cache.k[0].device), partials={})
        return SimpleNamespace(prepared=prepared, meta=meta)

    def forward(self, q, k, v, layer, cache, step):
        from attnkit.backends._triton import kernel_scales
        p = step.prepared
        lid = layer.layer_id
        spec = layer.spec
        key = (spec.num_heads, spec.head_dim)
        if key not in p.partials:
            shape = (q.shape[0], spec.num_heads, self.splits)
            f32 = dict(dtype=torch.float32, device=q.device)
            p.partials[key] = (torch.empty(*shape, spec.head_dim, **f32), torch.empty(*shape, **f32),
                               torch.empty(*shape, **f32))
        out = torch.empty(q.shape[0], spec.num_heads, spec.head_dim, dtype=q.dtype, device=q.device)
        qk_scale = kernel_scales(layer, cache, None)[0]
        decode_heads(q, cache.k[lid], cache.v[lid], out, seq_lens=p.seq_lens,
                     block_tables=p.block_tables, new_kv=(k, v, p.slots), qk_scale=qk_scale,
                     num_splits=self.splits, partials=p.partials[key], counters=p.counters,
                     **self.launch)
        return out.view(q.shape[0], -1)

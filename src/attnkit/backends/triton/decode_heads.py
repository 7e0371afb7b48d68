"""Decode variant split_heads: one program reads EVERY KV head of its keys.

decode.py gives a program one KV head (or PACK adjacent ones): of a token's cache row, whose
H_kv heads lie side by side, it reads D values, and the rest of the row is read by other
programs at their own pace. Here program (request, split) loads a tile of BLOCK_N tokens of
all H_kv heads, [H_kv, BLOCK_N, D]: with BLOCK_N = page size that is a whole page of K (and
one of V), contiguous in memory. The products are batched over heads (3-D tl.dot): q
[H_kv, R, D] (R = the GQA group padded to 16 rows, tl.dot's minimum) against the tile's keys
[H_kv, D, BLOCK_N], so each head's rows meet only its own keys.

Split ``s`` covers keys [s * chunk, (s + 1) * chunk) of its request, ``chunk`` the request's
own keys over the grid's S splits in whole tiles (decode.py's EVEN_SPLITS rule); S comes from
configs.DECODE_HEADS_RULE (``heads_splits``). The step's new K/V is written by the program
whose split holds the request's last key, which attends to it from k / v (decode.py's
FUSED_WRITE); then the last split program of the request merges every query head's splits
(decode_merge.merge_if_last over the H_q heads, one ticket counter a request). One launch a
step. Served: 16-bit caches of the compute dtype, no window / softcap / sinks / chunked
attention, value dim = head dim, H_kv and D powers of two with H_kv * R * D <= 16384 (the
accumulator's registers; heads_ok).
"""
from __future__ import annotations

import triton
import triton.language as tl

from attnkit.backends._triton import NEG_BIG
from attnkit.backends.triton import configs
from attnkit.backends.triton.decode_merge import merge_if_last

MAX_ACC = 16384      # H_kv * R * D: the fp32 accumulator, 64 registers a thread at 8 warps
# the launch keys split_heads takes from a decode config (decode.py's PACK / EDGE_MASK / PDL
# are the split kernel's switches, not this kernel's)
LAUNCH_KEYS = ("BLOCK_N", "num_warps", "num_stages", "maxnreg")


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


def heads_ok(q, k, v, layer, cache) -> bool:
    """Whether split_heads serves the step's layer (see the module docstring)."""
    spec = layer.spec
    h_kv, d = spec.num_kv_heads, spec.head_dim
    rows = max(16, triton.next_power_of_2(max(spec.num_heads // max(h_kv, 1), 1)))
    plain = (spec.sliding_window is None and spec.logit_softcap is None and not spec.sinks
             and spec.attention_chunk is None and spec.value_dim == d)
    dense = (not cache.is_fp8 and k.dtype == cache.k[spec.layer_id].dtype == q.dtype
             and q.stride(-1) == 1
             and v.dtype == cache.v[spec.layer_id].dtype and k.stride(-1) == 1 and v.stride(-1) == 1
             and cache.k[spec.layer_id].stride(-1) == 1 and cache.v[spec.layer_id].stride(-1) == 1)
    shaped = h_kv & (h_kv - 1) == 0 and d & (d - 1) == 0 and d >= 16 and h_kv * rows * d <= MAX_ACC
    return plain and dense and shaped and q.dtype.itemsize == 2


def heads_splits(max_kv: int, num_reqs: int, *, num_sms: int, block_n: int) -> tuple[int, int]:
    """(splits, chunk) by configs.DECODE_HEADS_RULE: ``programs_per_sm`` programs an SM over
    the requests (whole waves: floor), each split at least ``min_keys`` keys in whole tiles."""
    rule = configs.DECODE_HEADS_RULE
    want = max(1, num_sms * rule["programs_per_sm"] // max(num_reqs, 1))
    most = max(1, -(-max_kv // max(rule["min_keys"], block_n)))
    chunk = -(-max(max_kv, 1) // min(want, most))
    chunk = -(-chunk // block_n) * block_n
    return -(-max(max_kv, 1) // chunk), chunk


def decode_heads_attention(q, k_cache, v_cache, out, *, seq_lens, block_tables, new_kv,
                           qk_scale: float, num_splits: int, partials, counters, config: dict):
    """q: [B, H_q, D]; k_cache / v_cache: [P, page, H_kv, D]; out: [B, H_q, D] (written);
    seq_lens: [B] int32 (the new key counted); block_tables: [B, pages] int32; new_kv: (k
    [B, H_kv, D], v [B, H_kv, D], slot_mapping [B] int64), written into the cache here;
    partials: (mid_o [B, H_q, S, D], mid_m [B, H_q, S], mid_l [B, H_q, S]) f32, S = num_splits;
    counters: decode_merge.merge_counters of the step (zeros; left zero); config: BLOCK_N,
    num_warps, num_stages (configs.decode_config, variant split_heads; other keys ignored)."""
    num_reqs, num_heads, d = q.shape
    h_kv = k_cache.shape[2]
    group = num_heads // h_kv
    mid_o, mid_m, mid_l = partials
    k_new, v_new, slots = new_kv
    rows = triton.next_power_of_2(num_heads)
    cfg = {key: val for key, val in config.items() if key in LAUNCH_KEYS}
    _decode_heads_kernel[(num_reqs, num_splits)](
        q, k_cache, v_cache, out, mid_o, mid_m, mid_l, seq_lens, block_tables, k_new, v_new,
        slots, counters, qk_scale, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0),
        v_cache.stride(1), v_cache.stride(2), block_tables.stride(0), mid_m.stride(0),
        mid_m.stride(1), mid_m.stride(2), k_new.stride(0), k_new.stride(1), v_new.stride(0),
        v_new.stride(1),
        HKV=h_kv, GROUP=group, R=max(16, triton.next_power_of_2(group)), D=d,
        PAGE=k_cache.shape[1], BLOCK_N=cfg.pop("BLOCK_N"), MERGE_ROWS=rows,
        MERGE_CHUNK=max(1, min(16, 8192 // (rows * d))), **cfg)
    return out

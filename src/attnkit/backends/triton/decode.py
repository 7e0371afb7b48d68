"""Decode kernel: split-KV (flash-decoding), GQA-grouped, plus the split reduction.

Grid: (requests, KV heads, splits). One program serves every query head of one KV-head
group — the group's rows padded to G_PAD >= 16 so the products run on tl.dot — so each
K/V page is read once per group, not once per query head. Split ``s`` covers keys
``[lo + s * chunk, lo + (s + 1) * chunk)`` of its request, ``lo`` being the query's first
visible key (0, the window's left edge, or with chunked local attention its chunk's start)
rounded down to a tile, so no tile left of it is read. Without parts, ``chunk`` is the
request's own: its keys spread over the grid's S splits in whole tiles,
``ceil(ceil(keys / S) / BLOCK_N) * BLOCK_N``, so a short request in a grid sized for long
ones (a captured step is sized for the longest possible) still runs on several programs,
and the partition depends only on the request and S, never on the other requests of the
batch. (With parts, dual chunk attention, the host's chunk applies to every part.) With one split the kernel writes the
normalised output itself; otherwise it writes (max, denominator, unnormalised output) per split and
``_reduce_kernel`` merges them, adding the sink to the denominator exactly once.

Variant v2 (FUSED_WRITE) also stores the step's new K/V: the program of the split that holds
a request's last key writes that token's row for its KV head into the cache and attends to
it straight from the k / v inputs, so the step needs no separate K/V-write launch and no
program reads a row another program writes.

Launch-config switches (configs.DECODE_TILES): PACK > 1 gives one program PACK adjacent KV
heads: their rows of a token are one contiguous PACK * D row of the cache, read as one tile;
query row r of KV head j holds its query in columns [j * D, (j + 1) * D) and zeros elsewhere,
so q @ K^T gives each row its own head's logits, and each row keeps only its head's columns
of p @ V. EDGE_MASK masks only the window's first tile and the split's last partial tile
(interior tiles load and score unmasked). PDL launches the reduce kernel (decode_merge.py)
as a programmatic dependent: it may start once every split program has, and waits for the
split grid before reading its partials.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

from attnkit.backends._triton import (NEG_BIG, attend_range, first_key, interpreting, logits,
                                      padded_dim, unit_stride_rows)
from attnkit.backends.triton import configs
from attnkit.backends.triton.decode_merge import (_reduce_kernel, merge_if_last, merge_shape,
                                                 reduce_in_order)

# The decode kernel's variants (declaration.py names them for the plan: split, split_write,
# split_merge). Option spellings: "v1" / "separate_write" (the new K/V written by a launch of
# its own, then every key read from the cache), "v2" / "fused_write" (the kernel writes the
# new K/V itself: one launch fewer), "fused" / "merge_in_kernel" (v2 whose last split program
# per (request, KV head) also merges the splits: one launch a step), "fixed" / "split_fixed"
# (v1 in splits of a fixed number of keys, merged in key order: fixed_chunk below), "heads" /
# "split_heads" (one program reads every KV head of its keys: decode_heads.py), "stream" (one
# program a (request, KV head) over a deep TMA ring, Gluon: decode_stream.py). Which runs
# is the plan's choice (its kernel table, measured by attnkit tune), never a threshold here.
# DECODE_VARIANTS: those a test may run with any split count and layer (fixed sizes its own
# splits; heads serves plain 16-bit layers only: decode_heads.heads_ok).
DECODE_VARIANTS = ("v1", "v2", "fused")
DECODE_VARIANT_NAMES = {"separate_write": "v1", "fused_write": "v2", "merge_in_kernel": "fused",
                        "split": "v1", "split_write": "v2", "split_merge": "fused", "split_fixed": "fixed",
                        "split_heads": "heads", "stream": "stream"}
PLAN_NAMES = {"v1": "split", "v2": "split_write", "fused": "split_merge", "fixed": "split_fixed",
              "heads": "split_heads", "stream": "stream"}


@triton.jit
def _decode_kernel(
    Q, K, V, Out, MidO, MidM, MidL, Sinks, SeqLens, BlockTables, KN, VN, Slots,
    PartStart, Counter, qk_scale, v_scale, softcap, window, attn_chunk, chunk,
    stride_qt, stride_qp, stride_qh, stride_ot, stride_oh,
    stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh, stride_sp, stride_bp,
    stride_bt, stride_mb, stride_mh, stride_ms, stride_knt, stride_knh, stride_vnt, stride_vnh,
    GROUP: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    SPLIT: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CHUNK: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_SINKS: tl.constexpr, FUSED_WRITE: tl.constexpr, NUM_PARTS: tl.constexpr,
    DOT_PREC: tl.constexpr, MERGE_ROWS: tl.constexpr = 0, MERGE_CHUNK: tl.constexpr = 0,
    EVEN_SPLITS: tl.constexpr = False, PACK: tl.constexpr = 1, MID_W: tl.constexpr = 0,
    EDGE_MASK: tl.constexpr = False, PDL: tl.constexpr = False,
):
    if PDL:     # the reduce launch may start once every program here has (it waits to read)
        gdc_launch_dependents()
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    sp_all = tl.program_id(2)          # the split's slot among every part's splits
    part = sp_all * 0                  # part p owns slots [PartStart[p], PartStart[p + 1])
    for i in tl.static_range(1, NUM_PARTS):
        part += (sp_all >= tl.load(PartStart + i)).to(tl.int32)
    if NUM_PARTS > 1:
        sp = sp_all - tl.load(PartStart + part)
    else:
        sp = sp_all
    kv_len = tl.load(SeqLens + part * stride_sp + b)
    # the first key the query (at kv_len - 1) sees, rounded down to a tile
    lo = (first_key(kv_len - 1, window, attn_chunk, 0, HAS_WINDOW, HAS_CHUNK) // BLOCK_N) * BLOCK_N
    if EVEN_SPLITS:    # this request's own keys over the grid's splits, whole tiles each
        chunk = tl.cdiv(tl.cdiv(kv_len - lo, tl.num_programs(2)), BLOCK_N) * BLOCK_N
    n_lo = lo + sp * chunk
    n_hi = tl.minimum(n_lo + chunk, kv_len)
    if FUSED_WRITE:    # the new key is the last of part 0; the split holding it owns it
        cached = kv_len - (part == 0).to(tl.int32)
        owner = (part == 0) & (sp == (kv_len - 1 - lo) // chunk)
    else:
        cached = kv_len

    kvb = kvh * PACK                   # the program's first KV head (PACK heads, see above)
    rows = tl.arange(0, G_PAD)
    row_ok = rows < GROUP * PACK
    heads = kvb * GROUP + rows
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < PACK * D
    offs_dv = tl.arange(0, BLOCK_DV)
    dv_ok = offs_dv < PACK * DV
    if PACK > 1:   # row r holds its query in the columns of its own KV head, zeros elsewhere
        qd = offs_d[None, :] - ((rows // GROUP) * D)[:, None]                 # [G_PAD, BLOCK_D]
        q_ok = row_ok[:, None] & (qd >= 0) & (qd < D)
        od = offs_dv[None, :] - ((rows // GROUP) * DV)[:, None]               # [G_PAD, BLOCK_DV]
        o_ok = row_ok[:, None] & (od >= 0) & (od < DV)
    else:
        qd = offs_d[None, :]
        q_ok = row_ok[:, None] & d_ok[None, :]
        od = offs_dv[None, :]
        o_ok = row_ok[:, None] & dv_ok[None, :]
    q = tl.load(Q + b.to(tl.int64) * stride_qt + part * stride_qp + heads[:, None] * stride_qh + qd,
                mask=q_ok, other=0.0)
    q_pos = tl.zeros([G_PAD], tl.int32) + (kv_len - 1)

    if HAS_SINKS and not SPLIT:   # one split: the sink starts the softmax (see extend)
        m_i = tl.load(Sinks + heads, mask=row_ok, other=0.0).to(tl.float32) * 1.4426950408889634
        l_i = tl.zeros([G_PAD], tl.float32) + 1.0
    else:
        m_i = tl.zeros([G_PAD], tl.float32) + NEG_BIG
        l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, BLOCK_DV], tl.float32)
    bt_row = BlockTables + part.to(tl.int64) * stride_bp + b.to(tl.int64) * stride_bt
    hi = tl.minimum(n_hi, cached)
    if EDGE_MASK:   # masks on the window's first tile and the last partial tile only
        full_lo = n_lo
        if HAS_WINDOW or HAS_CHUNK:
            fk = first_key(kv_len - 1, window, attn_chunk, 0, HAS_WINDOW, HAS_CHUNK)
            full_lo = tl.minimum(tl.maximum(tl.cdiv(fk, BLOCK_N) * BLOCK_N, n_lo), hi)
        full_hi = full_lo + (tl.maximum(hi - full_lo, 0) // BLOCK_N) * BLOCK_N
        m_i, l_i, acc = _attend(q, m_i, l_i, acc, K, V, bt_row, n_lo, full_lo, q_pos, cached, kvb,
                                offs_d, d_ok, offs_dv, dv_ok, stride_kp, stride_kt, stride_kh,
                                stride_vp, stride_vt, stride_vh, qk_scale, softcap, window,
                                attn_chunk, PAGE, BLOCK_N, True, HAS_WINDOW, HAS_CHUNK,
                                HAS_SOFTCAP, PACK * D == BLOCK_D, PACK * DV == BLOCK_DV, DOT_PREC)
        m_i, l_i, acc = _attend(q, m_i, l_i, acc, K, V, bt_row, full_lo, full_hi, q_pos, cached,
                                kvb, offs_d, d_ok, offs_dv, dv_ok, stride_kp, stride_kt, stride_kh,
                                stride_vp, stride_vt, stride_vh, qk_scale, softcap, window,
                                attn_chunk, PAGE, BLOCK_N, False, HAS_WINDOW, HAS_CHUNK,
                                HAS_SOFTCAP, PACK * D == BLOCK_D, PACK * DV == BLOCK_DV, DOT_PREC)
        n_lo = full_hi
    m_i, l_i, acc = _attend(q, m_i, l_i, acc, K, V, bt_row, n_lo, hi, q_pos, cached, kvb,
                            offs_d, d_ok, offs_dv, dv_ok, stride_kp, stride_kt, stride_kh,
                            stride_vp, stride_vt, stride_vh, qk_scale, softcap, window,
                            attn_chunk, PAGE, BLOCK_N, True, HAS_WINDOW, HAS_CHUNK,
                            HAS_SOFTCAP, PACK * D == BLOCK_D, PACK * DV == BLOCK_DV, DOT_PREC)
    if FUSED_WRITE:
        if owner:
            m_i, l_i, acc = _write_and_attend_new(
                q, m_i, l_i, acc, K, V, KN, VN, Slots, b, kvb, q_pos, qk_scale, softcap, window,
                offs_d, d_ok, offs_dv, dv_ok, stride_kp, stride_kt, stride_kh, stride_vp,
                stride_vt, stride_vh, stride_knt, stride_knh, stride_vnt, stride_vnh,
                PAGE, HAS_WINDOW, HAS_SOFTCAP)
    if SPLIT:
        mid = b.to(tl.int64) * stride_mb + heads * stride_mh + sp_all * stride_ms    # [G_PAD]
        tl.store(MidM + mid, m_i, mask=row_ok)
        tl.store(MidL + mid, l_i, mask=row_ok)
        if PACK > 1:    # each row's own DV columns, at the partials' row width MID_W
            tl.store(MidO + (mid * MID_W)[:, None] + od, acc, mask=o_ok)
        else:
            tl.store(MidO + (mid * BLOCK_DV)[:, None] + offs_dv[None, :], acc, mask=row_ok[:, None])
        if MERGE_ROWS > 0:     # variant "fused": the last split program merges (decode_merge.py)
            merge_if_last(Out, MidO, MidM, MidL, Counter, Sinks, b, kvh, v_scale,
                          tl.num_programs(2), stride_ot, stride_oh, stride_mb, stride_mh,
                          stride_ms, GROUP * PACK, DV, MID_W if PACK > 1 else BLOCK_DV,
                          HAS_SINKS, MERGE_ROWS, MERGE_CHUNK)
    else:
        l_i = tl.where(l_i == 0.0, 1.0, l_i)
        out = acc * (v_scale / l_i)[:, None]
        tl.store(Out + b.to(tl.int64) * stride_ot + heads[:, None] * stride_oh + od,
                 out.to(Out.dtype.element_ty), mask=o_ok)


@triton.jit
def _attend(q, m_i, l_i, acc, K, V, bt_row, n_lo, n_hi, q_pos, kv_len, kvb, offs_d, d_ok, offs_dv,
            dv_ok, stride_kp, stride_kt, stride_kh, stride_vp, stride_vt, stride_vh, qk_scale,
            softcap, window, attn_chunk, PAGE: tl.constexpr, BLOCK_N: tl.constexpr,
            MASK: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CHUNK: tl.constexpr,
            HAS_SOFTCAP: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr,
            DOT_PREC: tl.constexpr):
    """attend_range over cached keys [n_lo, n_hi) of KV heads kvb .. kvb + PACK (their rows
    are adjacent in a token's cache row), masked with MASK, no causal mask (decode)."""
    return attend_range(q, m_i, l_i, acc, K, V, bt_row, n_lo, n_hi, q_pos, kv_len,
                        kvb * stride_kh, kvb * stride_vh, offs_d, d_ok, offs_dv, dv_ok, stride_kp,
                        stride_kt, stride_vp, stride_vt, qk_scale, softcap, window, attn_chunk,
                        PAGE, BLOCK_N, MASK, False, HAS_WINDOW, HAS_CHUNK, HAS_SOFTCAP, EVEN_D,
                        EVEN_DV, DOT_PREC)


@triton.jit
def _write_and_attend_new(q, m_i, l_i, acc, K, V, KN, VN, Slots, b, kvh, q_pos, qk_scale, softcap,
                          window, offs_d, d_ok, offs_dv, dv_ok, stride_kp, stride_kt, stride_kh,
                          stride_vp, stride_vt, stride_vh, stride_knt, stride_knh, stride_vnt,
                          stride_vnh, PAGE: tl.constexpr, HAS_WINDOW: tl.constexpr,
                          HAS_SOFTCAP: tl.constexpr):
    """Store request b's new K/V row of KV head kvh into its cache slot and fold that key
    (always visible: it is the query's own position) into the softmax of rows q [G_PAD, D]."""
    k = tl.load(KN + b.to(tl.int64) * stride_knt + kvh * stride_knh + offs_d, mask=d_ok, other=0.0)
    v = tl.load(VN + b.to(tl.int64) * stride_vnt + kvh * stride_vnh + offs_dv, mask=dv_ok, other=0.0)
    slot = tl.load(Slots + b)
    page, off = slot // PAGE, slot % PAGE
    tl.store(K + page * stride_kp + off * stride_kt + kvh * stride_kh + offs_d,
             k.to(K.dtype.element_ty), mask=d_ok)
    tl.store(V + page * stride_vp + off * stride_vt + kvh * stride_vh + offs_dv,
             v.to(V.dtype.element_ty), mask=dv_ok)
    qk = tl.sum(q.to(tl.float32) * k.to(q.dtype).to(tl.float32)[None, :], 1)        # [G_PAD]
    s = logits(qk[:, None], q_pos, q_pos, q_pos, qk_scale, softcap, window, 1,   # no masks
               False, False, HAS_WINDOW, False, HAS_SOFTCAP)                     # [G_PAD, 1]
    s = tl.sum(s, 1)
    m_new = tl.maximum(m_i, s)
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new)
    acc = acc * alpha[:, None] + p[:, None] * v.to(q.dtype).to(tl.float32)[None, :]
    return m_new, l_i * alpha + p, acc


def pick_decode_variant(requested: str | None, k, v, cache, layer_id: int) -> str:
    """``requested`` ("v1" / "v2" / "fused"; None: "v1") where it can run: v2 and fused only
    where the kernel's store equals the cache's own write (same dtype, not fp8) and the rows
    are dense in the head dim; else v1."""
    want = requested or "v1"
    if want not in ("v2", "fused"):
        return "v1"
    return want if fused_write_ok(k, v, cache, layer_id) else "v1"


def fused_write_ok(k, v, cache, layer_id: int) -> bool:
    """Whether the decode kernel can write the new K/V itself (v2, fused)."""
    exact = (not cache.is_fp8 and k.dtype == cache.k[layer_id].dtype
             and v.dtype == cache.v[layer_id].dtype)
    return exact and k.stride(-1) == 1 and v.stride(-1) == 1


def decode_config(head_dim: int, dtype: torch.dtype, *, interpret: bool,
                  variant: str = "split") -> dict:
    """Tile size and launch shape for one head dim, compute dtype and decode variant (the
    plan's name: split / split_write / split_merge; configs.py)."""
    return configs.decode_config(head_dim, dtype == torch.float32, interpret=interpret,
                                 variant=variant)


def decode_span(kv_len: int, window: int | None, attention_chunk: int | None, block_n: int) -> int:
    """Keys the decode kernel reads for a query at position kv_len - 1: from its first
    visible key (window edge, chunk start) rounded down to a tile, up to kv_len. The host
    side of the kernel's ``lo``; split counts are sized by it."""
    p = kv_len - 1
    first = 0
    if window is not None:
        first = max(first, p - window + 1)
    if attention_chunk is not None:
        first = max(first, (p // attention_chunk) * attention_chunk)
    return kv_len - (first // block_n) * block_n


def max_decode_span(max_kv: int, window: int | None, attention_chunk: int | None,
                    block_n: int) -> int:
    """The most keys ``decode_span`` gives any KV length up to ``max_kv``: a split count sized
    for it serves every such length (static steps). Past the window's edge (or the chunk's
    start) the span is that many keys plus less than one tile of rounding."""
    bound = max_kv
    for limit in (window, attention_chunk):
        if limit is not None:
            bound = min(bound, limit + block_n - 1)
    return max(bound, 1)


def choose_splits(max_kv: int, num_reqs: int, num_kv_heads: int, *, block_n: int, num_sms: int,
                  min_chunk: int = configs.DECODE_SPLIT_RULE["min_keys"],
                  max_splits: int = configs.DECODE_SPLIT_RULE["max_splits"]) -> tuple[int, int]:
    """(num_splits, chunk) by configs.DECODE_SPLIT_RULE: enough programs to fill its waves of
    the SMs, each split a whole number of tiles and at least ``min_chunk`` keys; with few
    (request, KV head) pairs (at most half the SMs) its few-pairs waves and key floor."""
    rule = configs.DECODE_SPLIT_RULE
    base = max(1, num_reqs * num_kv_heads)
    waves = rule["waves"]
    if 2 * base <= num_sms:
        waves, min_chunk = rule["few_waves"], min(min_chunk, rule["few_min_keys"])
    want = max(1, -(-waves * num_sms // base))
    most = max(1, -(-max_kv // max(min_chunk, block_n)))
    splits = min(want, most, max_splits)
    chunk = -(-max(max_kv, 1) // splits)
    chunk = -(-chunk // block_n) * block_n
    return -(-max(max_kv, 1) // chunk), chunk


def decode_pack(want: int, k_cache, v_cache, new_kv=None) -> int:
    """KV heads per decode program: ``want`` (a launch config's PACK) where it divides the
    layer's KV heads, the head dims are powers of two and a token's K (V) rows of adjacent KV
    heads are adjacent in the cache and in the step's new k / v (head stride = head dim,
    unit stride within a row); else 1. k_cache: [P, page, H_kv, D]; v_cache: [P, page, H_kv, DV]."""
    num_kv_heads, d, dv = k_cache.shape[2], k_cache.shape[3], v_cache.shape[3]
    if want <= 1 or num_kv_heads % want or d & (d - 1) or dv & (dv - 1):
        return 1
    rows = [(k_cache, d), (v_cache, dv)]
    if new_kv is not None:
        rows += [(new_kv[0], d), (new_kv[1], dv)]
    dense = all(t.stride(-1) == 1 and t.stride(-2) == width for t, width in rows)
    return want if dense else 1


def decode_attention(q, k_cache, v_cache, out, *, seq_lens, block_tables, qk_scale, v_scale,
                     softcap, window, sinks, num_splits, chunk, partials, config, new_kv=None,
                     part_starts=None, attention_chunk=None, counters=None, fixed_chunk=False):
    """q: [B, H_q, D]; k_cache: [P, page, H_kv, D]; v_cache: [P, page, H_kv, DV];
    out: [B, H_q, DV] (written); seq_lens: [B] int32; block_tables: [B, pages] int32;
    partials: (mid_o [B, H_q, S, BLOCK_DV] f32, mid_m [B, H_q, S] f32, mid_l [B, H_q, S] f32)
    with S = num_splits, when S > 1, else None; ``chunk`` is keys per split (not the attention
    chunk: ``attention_chunk``, chunked local attention, None when unused; splits then start
    at the query's chunk, see ``decode_span``). new_kv (variant v2): (k [B, H_kv, D],
    v [B, H_kv, DV], slot_mapping [B] int64), this step's K/V, not yet in the cache: the
    kernel writes them.

    Parts (one softmax over several key ranges with a different query each, e.g. dual chunk
    attention): q [B, parts, H_q, D], seq_lens [parts, B], block_tables [parts, B, pages],
    part_starts [parts + 1] int32: part p's splits are slots [part_starts[p],
    part_starts[p + 1]) of the num_splits. The reduction merges every split of every part,
    so a request's output is the softmax over the union of its parts' keys. With new_kv the
    new key is the last key of part 0.

    counters (variant "fused"): decode_merge.merge_counters of the step, zeros; with splits
    the kernel's last split program per (request, KV head) merges them (no reduce launch)
    where decode_merge.merge_shape serves the group.

    fixed_chunk (variant "fixed"): every request's split s covers keys [lo + s * chunk, ...)
    whatever the grid's split count, and decode_merge.reduce_in_order merges its splits, even
    one, in key order, so a request's bits do not depend on the other requests of the step."""
    q = unit_stride_rows(q, k_cache, v_cache)
    parted = q.dim() == 4
    if not parted:
        q, seq_lens, block_tables = q[:, None], seq_lens[None], block_tables[None]
    num_reqs, num_parts, num_heads, head_dim = q.shape
    num_kv_heads, dv = k_cache.shape[2], v_cache.shape[3]
    group = num_heads // num_kv_heads
    cfg = dict(config)
    pack = decode_pack(cfg.pop("PACK", 1), k_cache, v_cache, new_kv)
    total_splits = num_splits
    split = total_splits > 1 or fixed_chunk
    mid_o, mid_m, mid_l = partials if split else (out, out, out)
    strides = (mid_m.stride(0), mid_m.stride(1), mid_m.stride(2)) if split else (0, 0, 0)
    sinks_arg = sinks if sinks is not None else q
    if new_kv is not None:
        k_new, v_new, slots = new_kv
        new_strides = (k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1))
    else:
        k_new, v_new, slots, new_strides = q, q, seq_lens, (0, 0, 0, 0)
    merge = merge_shape(group * pack, padded_dim(dv)) if split and counters is not None else None
    # PDL: the reduce launch (the one that follows) as a programmatic dependent, on sm_90+
    pdl = bool(cfg.pop("PDL", False)) and split and not merge and not interpreting()
    pdl = pdl and torch.cuda.get_device_capability(q.device)[0] >= 9
    _decode_kernel[(num_reqs, num_kv_heads // pack, total_splits)](
        q, k_cache, v_cache, out, mid_o, mid_m, mid_l, sinks_arg, seq_lens, block_tables,
        k_new, v_new, slots, seq_lens if part_starts is None else part_starts,
        counters if merge else seq_lens,
        qk_scale, v_scale, float(softcap or 1.0), int(window or 0), int(attention_chunk or 1), chunk,
        q.stride(0), q.stride(1), q.stride(2), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), seq_lens.stride(0),
        block_tables.stride(0), block_tables.stride(1),
        *strides, *new_strides,
        GROUP=group, G_PAD=max(16, triton.next_power_of_2(group * pack)), D=head_dim, DV=dv,
        PAGE=k_cache.shape[1], BLOCK_N=cfg.pop("BLOCK_N"), BLOCK_D=padded_dim(pack * head_dim),
        BLOCK_DV=padded_dim(pack * dv), PACK=pack, MID_W=padded_dim(dv), SPLIT=split,
        HAS_WINDOW=window is not None,
        HAS_CHUNK=attention_chunk is not None, HAS_SOFTCAP=softcap is not None, HAS_SINKS=sinks is not None,
        FUSED_WRITE=new_kv is not None, NUM_PARTS=num_parts, DOT_PREC="ieee",
        EVEN_SPLITS=split and part_starts is None and not fixed_chunk,
        MERGE_ROWS=merge[0] if merge else 0, MERGE_CHUNK=merge[1] if merge else 0, PDL=pdl, **cfg,
    )
    if fixed_chunk:
        reduce_in_order(out, (mid_o, mid_m, mid_l), sinks=sinks, v_scale=v_scale,
                        num_splits=total_splits)
    elif split and not merge:
        _reduce_kernel[(num_reqs, num_heads)](
            out, mid_o, mid_m, mid_l, sinks_arg, v_scale, total_splits,
            out.stride(0), out.stride(1), *strides,
            DV=dv, BLOCK_DV=padded_dim(dv), BLOCK_S=max(2, triton.next_power_of_2(total_splits)),
            HAS_SINKS=sinks is not None, num_warps=4, PDL=pdl,
            **({"launch_pdl": True} if pdl else {}),
        )
    return out

"""Triton helpers shared by the triton, triton_mla and dual_chunk backends' kernels and launchers.

Index math, once: KV token ``t`` of a request lives in page ``block_table[t // PAGE]`` at
offset ``t % PAGE``; its K row for KV head ``h`` starts at
``page * stride_page + (t % PAGE) * stride_tok + h * stride_head``. Gathering token by token
works for every page size; the repeated block-table loads inside one tile hit L1.

Logits are kept in log2 units (``s * log2(e)``) so the softmax uses ``exp2``. Masked logits
are ``-inf`` while the running max starts at a finite ``NEG_BIG``: a tile with every key
masked then adds exactly zero instead of ``exp(-inf + inf) = nan``.
"""
from __future__ import annotations

import math

import triton
import triton.language as tl

from attnkit.backends.envelope import interpreting  # noqa: F401  (re-exported for the kernels)
from attnkit.errors import fail

LOG2E = math.log2(math.e)
NEG_BIG = tl.constexpr(-1.0e30)


@triton.jit
def gather_kv_tile(cache, bt_row, offs_n, kv_len, head_off, offs_d, d_ok, stride_page, stride_tok,
                   PAGE: tl.constexpr, BOUND: tl.constexpr, EVEN_D: tl.constexpr):
    """Load K or V rows of tokens ``offs_n`` ([BLOCK_N]) through one block-table row.

    Returns [BLOCK_N, BLOCK_D]; with BOUND, rows at or past ``kv_len`` read 0; without
    EVEN_D, columns past the head dim read 0. Unmasked loads keep 16-byte vector accesses.
    """
    if BOUND:
        valid = offs_n < kv_len
        page = tl.load(bt_row + offs_n // PAGE, mask=valid, other=0)
    else:
        page = tl.load(bt_row + offs_n // PAGE)
    row = page.to(tl.int64) * stride_page + (offs_n % PAGE).to(tl.int64) * stride_tok + head_off
    ptrs = cache + row[:, None] + offs_d[None, :]
    if BOUND:
        if EVEN_D:
            tile = tl.load(ptrs, mask=valid[:, None], other=0.0)
        else:
            tile = tl.load(ptrs, mask=valid[:, None] & d_ok[None, :], other=0.0)
    else:
        if EVEN_D:
            tile = tl.load(ptrs)
        else:
            tile = tl.load(ptrs, mask=d_ok[None, :], other=0.0)
    return tile


@triton.jit
def tanh(x):
    """tanh through exp2, stable at both ends (the interpreter has no libdevice)."""
    return 1.0 - 2.0 / (tl.exp2(x * 2.8853900817779268) + 1.0)   # 2 * log2(e)


@triton.jit
def chunk_start(pos, attn_chunk):
    """First position of the attention chunk holding ``pos`` (chunked local attention)."""
    return (pos // attn_chunk) * attn_chunk


@triton.jit
def visible(q_pos, k_pos, kv_len, window, attn_chunk, CAUSAL: tl.constexpr,
            HAS_WINDOW: tl.constexpr, HAS_CHUNK: tl.constexpr):
    """[M, N] whether the query at ``q_pos`` [M] sees the key at ``k_pos`` [N] (absolute
    positions). HAS_CHUNK (chunked local) keeps keys from the query's chunk start on: with
    k <= p (CAUSAL, or in decode every key before the query) that is exactly
    k // attn_chunk == p // attn_chunk."""
    ok = (k_pos < kv_len)[None, :]
    if CAUSAL:
        ok = ok & (k_pos[None, :] <= q_pos[:, None])
    if HAS_WINDOW:
        ok = ok & ((q_pos[:, None] - k_pos[None, :]) < window)
    if HAS_CHUNK:
        ok = ok & (k_pos[None, :] >= chunk_start(q_pos, attn_chunk)[:, None])
    return ok


@triton.jit
def logits(qk, q_pos, k_pos, kv_len, qk_scale, softcap, window, attn_chunk,
           MASK: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
           HAS_CHUNK: tl.constexpr, HAS_SOFTCAP: tl.constexpr):
    """Scaled (and soft-capped) logits in log2 units, masked to -inf where not visible.

    qk: [M, N] raw dot products; q_pos: [M] and k_pos: [N] absolute positions.
    With HAS_SOFTCAP, ``qk_scale`` is the plain softmax scale; otherwise scale * log2(e).
    """
    if HAS_SOFTCAP:
        s = softcap * tanh(qk * (qk_scale / softcap)) * 1.4426950408889634
    else:
        s = qk * qk_scale
    if MASK:
        s = tl.where(visible(q_pos, k_pos, kv_len, window, attn_chunk, CAUSAL, HAS_WINDOW,
                             HAS_CHUNK), s, float("-inf"))
    return s


@triton.jit
def _fold_tile(alpha, l_i, acc, p, v, DOT_PREC: tl.constexpr):
    """(l_i, acc) after a tile of weights ``p`` = exp2(logit - m_new), with
    ``alpha`` = exp2(m_i - m_new) rescaling what came before."""
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PREC)
    return l_i, acc


@triton.jit
def online_softmax_step(m_i, l_i, acc, s, v, DOT_PREC: tl.constexpr):
    """Fold one tile of logits ``s`` [M, N] and values ``v`` [N, DV] into the running
    max ``m_i`` [M], denominator ``l_i`` [M] and unnormalised output ``acc`` [M, DV]."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i, acc = _fold_tile(alpha, l_i, acc, p, v, DOT_PREC)
    return m_new, l_i, acc


@triton.jit
def online_softmax_step_scaled(m_i, l_i, acc, qk, qk_scale, v, DOT_PREC: tl.constexpr):
    """online_softmax_step on logits ``qk * qk_scale`` given the RAW products ``qk`` (masked
    keys -inf) and ``qk_scale`` > 0 (scale * log2(e), no softcap): the row max is taken over
    qk and scaled once a row (max(qk) * c == max(qk * c) for c > 0), so each element costs one
    fused multiply-add, ``qk * c - m``, before its exp2. A masked key stays -inf
    (-inf * c - m, m finite), so an all-masked tile adds exactly 0 as in the unscaled form."""
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(qk * qk_scale - m_new[:, None])
    l_i, acc = _fold_tile(alpha, l_i, acc, p, v, DOT_PREC)
    return m_new, l_i, acc


@triton.jit
def softmax_start(Sinks, h, BLOCK_M: tl.constexpr, HAS_SINKS: tl.constexpr):
    """(m_i, l_i) [BLOCK_M] before any key of head h: the sink is a logit with no value, so
    it starts the softmax (max = sink in log2 units, denominator 1); else an empty state."""
    if HAS_SINKS:
        m_i = tl.zeros([BLOCK_M], tl.float32) + tl.load(Sinks + h).to(tl.float32) * 1.4426950408889634
        l_i = tl.zeros([BLOCK_M], tl.float32) + 1.0
    else:
        m_i = tl.zeros([BLOCK_M], tl.float32) + NEG_BIG
        l_i = tl.zeros([BLOCK_M], tl.float32)
    return m_i, l_i


@triton.jit
def first_key(p, window, attn_chunk, shift, HAS_WINDOW: tl.constexpr, HAS_CHUNK: tl.constexpr):
    """The first key visible to the query at ``p`` (>= 0): the window's left edge and/or its
    chunk's start. ``p`` and the result are in coordinates ``shift`` less than absolute
    positions (chunk boundaries are absolute). Nondecreasing in p."""
    lo = p * 0
    if HAS_WINDOW:
        lo = tl.maximum(lo, p - window + 1)
    if HAS_CHUNK:
        lo = tl.maximum(lo, chunk_start(p + shift, attn_chunk) - shift)
    return lo


@triton.jit
def key_ranges(p0, p1, n_keys, window, attn_chunk, shift, CAUSAL: tl.constexpr,
               HAS_WINDOW: tl.constexpr, HAS_CHUNK: tl.constexpr, BLOCK_N: tl.constexpr):
    """(lo, mid_lo, mid_hi, hi) for keys [0, n_keys) seen by query positions p0..p1 (same
    coordinates as the keys, ``shift`` less than absolute): tiles below ``lo`` hold no key
    any row sees (never loaded); [mid_lo, mid_hi) is whole tiles visible to every row."""
    if CAUSAL:
        hi = tl.minimum(n_keys, p1 + 1)
        full_hi = (tl.minimum(p0 + 1, n_keys) // BLOCK_N) * BLOCK_N
    else:
        hi = n_keys
        full_hi = (n_keys // BLOCK_N) * BLOCK_N
    # The first visible key grows with the row, so row p0 bounds the loads, row p1 the full tiles.
    lo = (first_key(p0, window, attn_chunk, shift, HAS_WINDOW, HAS_CHUNK) // BLOCK_N) * BLOCK_N
    full_lo = tl.cdiv(first_key(p1, window, attn_chunk, shift, HAS_WINDOW, HAS_CHUNK),
                      BLOCK_N) * BLOCK_N
    mid_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
    mid_hi = tl.minimum(tl.maximum(full_hi, mid_lo), hi)
    return lo, mid_lo, mid_hi, hi


@triton.jit
def store_lse(ptrs, m_i, l_i, ok):
    """Store the natural-log log-sum-exp of rows whose softmax state is (m_i, l_i) in log2
    units; a row that saw no key (l_i == 0) gets -inf, so it weighs nothing in a merge."""
    lse = tl.where(l_i > 0.0, (m_i + tl.log2(tl.maximum(l_i, 1e-30))) * 0.6931471805599453,
                   float("-inf"))
    tl.store(ptrs, lse, mask=ok)


@triton.jit
def attend_range(q, m_i, l_i, acc, K, V, bt_row, n_lo, n_hi, q_pos, kv_len,
                 k_head, v_head, offs_d, d_ok, offs_dv, dv_ok,
                 stride_kp, stride_kt, stride_vp, stride_vt, qk_scale, softcap, window,
                 attn_chunk, PAGE: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
                 CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_CHUNK: tl.constexpr,
                 HAS_SOFTCAP: tl.constexpr, EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr,
                 DOT_PREC: tl.constexpr):
    """Attend queries ``q`` [M, BLOCK_D] (positions ``q_pos`` [M]) to keys [n_lo, n_hi) of
    one request. Without MASK every key of every tile must be visible to every row."""
    for n0 in range(n_lo, n_hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        k = gather_kv_tile(K, bt_row, offs_n, kv_len, k_head, offs_d, d_ok, stride_kp, stride_kt,
                           PAGE, MASK, EVEN_D).to(q.dtype)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
        s = logits(qk, q_pos, offs_n, kv_len, qk_scale, softcap, window, attn_chunk,
                   MASK, CAUSAL, HAS_WINDOW, HAS_CHUNK, HAS_SOFTCAP)
        v = gather_kv_tile(V, bt_row, offs_n, kv_len, v_head, offs_dv, dv_ok, stride_vp, stride_vt,
                           PAGE, MASK, EVEN_DV).to(q.dtype)
        m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, v, DOT_PREC)
    return m_i, l_i, acc


@triton.jit
def _store_kv_kernel(K, V, KC, VC, Slots, stride_kt, stride_vt,
                     ROW_K: tl.constexpr, ROW_V: tl.constexpr,
                     BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr):
    """Copy token t's K row [H_kv * D] and V row [H_kv * D_v] into cache slot Slots[t]."""
    t = tl.program_id(0)
    slot = tl.load(Slots + t).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    k = tl.load(K + t.to(tl.int64) * stride_kt + offs_k, mask=offs_k < ROW_K)
    tl.store(KC + slot * ROW_K + offs_k, k.to(KC.dtype.element_ty), mask=offs_k < ROW_K)
    offs_v = tl.arange(0, BLOCK_V)
    v = tl.load(V + t.to(tl.int64) * stride_vt + offs_v, mask=offs_v < ROW_V)
    tl.store(VC + slot * ROW_V + offs_v, v.to(VC.dtype.element_ty), mask=offs_v < ROW_V)


def write_kv(cache, layer_id: int, slot_mapping, k, v) -> None:
    """Write new K/V through the slot mapping: one launch for both when the rows are dense
    and the cache is not fp8 (fp8 keeps PagedKVCache.store's scale-and-saturate rounding).

    k: [T, H_kv, D]; v: [T, H_kv, D_v]; slot_mapping: [T] int64."""
    kc, vc = cache.k[layer_id], cache.v[layer_id]
    dense = (k.stride(2) == 1 and k.stride(1) == k.shape[2] and v.stride(2) == 1
             and v.stride(1) == v.shape[2] and kc.is_contiguous() and vc.is_contiguous())
    if cache.is_fp8 or not dense or k.shape[0] == 0:
        cache.store(layer_id, slot_mapping, k, v)
        return
    row_k, row_v = k.shape[1] * k.shape[2], v.shape[1] * v.shape[2]
    _store_kv_kernel[(k.shape[0],)](
        k, v, kc, vc, slot_mapping, k.stride(0), v.stride(0), ROW_K=row_k, ROW_V=row_v,
        BLOCK_K=triton.next_power_of_2(row_k), BLOCK_V=triton.next_power_of_2(row_v), num_warps=4)


def unit_stride_rows(q, k_cache, v_cache):
    """The kernels address a head row as base + arange(D): q may be any view whose last dim is
    dense (else it is copied); the cache pages must be, since the kernels cannot copy them."""
    if q.stride(-1) != 1:
        q = q.contiguous()
    for name, buf in (("k", k_cache), ("v", v_cache)):
        if buf.stride(-1) != 1:
            fail("AK418", f"the {name} cache pages are not dense in the head dim "
                          f"(strides {list(buf.stride())}); the triton kernels need stride 1 there",
                 field=f"cache.{name}", expected="stride(-1) == 1", actual=list(buf.stride()))
    return q


def kernel_scales(layer, cache, softcap: float | None) -> tuple[float, float, float]:
    """(qk_scale, k_scale, v_scale) as the kernels take them.

    fp8 pages hold value / scale; the K scale folds into the logit scale and the V scale into
    the output, so a tile is converted once (fp8 -> compute dtype, exact) and never rescaled.
    """
    k_scale = float(cache.k_scales[layer.layer_id]) if cache.is_fp8 else 1.0
    v_scale = float(cache.v_scales[layer.layer_id]) if cache.is_fp8 else 1.0
    scale = layer.spec.softmax_scale * k_scale
    qk_scale = scale if softcap is not None else scale * LOG2E
    return qk_scale, k_scale, v_scale


def padded_dim(d: int) -> int:
    """Block width for a head dim: the next power of two, at least 16 (tl.dot minimum)."""
    return max(16, triton.next_power_of_2(d))


@triton.jit
def split_range(kv_max, num_splits, split, BLOCK_N: tl.constexpr):
    """Keys [start, end) of KV split ``split``: a whole number of BLOCK_N tiles each."""
    per_split = tl.cdiv(tl.cdiv(kv_max, num_splits), BLOCK_N) * BLOCK_N
    start = split * per_split
    return start, tl.minimum(start + per_split, kv_max)

"""Extend / prefill kernel over CONTIGUOUS K/V rows, read through tensor descriptors.

The paged kernels (extend.py, extend_new_kv.py) gather K/V through pointer tensors. Here every
key row lies in one dense [rows, H_kv * D] buffer, so a key tile is one rectangle and is read
with a tensor descriptor: on sm_90 the bulk tensor copy engine (TMA) writes it straight into
swizzled shared memory, with no address registers; with ``WS`` the compiler also splits the
program into a loading warpgroup and two computing warpgroups (Triton's automatic warp
specialisation; 4 warps ask for 12).

Two sources of rows (the backend picks, tma_path.py):
- prefill with no cached prefix: the step's own k / v inputs ([T, H_kv, D]); request ``r``'s
  keys are rows ``QStart[r] ..`` (the same rows as its queries);
- extend over a cached prefix: a per-step buffer that the gather kernel fills with every key
  of every request (``KStart[r] ..``), converted to the compute dtype (exact for fp8).

Query ``i`` of a request with ``q_len`` new tokens and ``kv_len`` keys sits at position
``kv_len - q_len + i`` (lower-right causal). Key tiles start at multiples of BLOCK_N from the
request's first key, so only the causal diagonal, the window's left edge and the last
partial tile are masked; a tile reaching past ``kv_len`` reads another request's rows (or
zeros past the buffer), whose logits are -inf and whose values are selected to 0 with
tl.where, so a NaN there cannot reach this request.

Grid: one program per (query block, q head), heads fastest, so the heads that share a KV head
run side by side and the blocks with the most keys start first (``block_req`` order).
"""
from __future__ import annotations

import triton
import triton.language as tl

from attnkit.backends._triton import (key_ranges, logits, online_softmax_step,
                                     online_softmax_step_scaled, softmax_start, visible)


@triton.jit
def _attend_tiles(q, m_i, l_i, acc, k_desc, v_desc, row0, k_col, v_col, n_lo, n_hi, q_pos, kv_len,
                  qk_scale, softcap, window, BLOCK_N: tl.constexpr, MASK: tl.constexpr,
                  CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                  WS: tl.constexpr, FUSED_SCALE: tl.constexpr):
    """Fold keys [n_lo, n_hi) (request coordinates; rows row0 + n of the descriptors) into the
    softmax state of queries ``q`` [BLOCK_M, D] at positions ``q_pos``. Without MASK every key
    of every tile must be visible to every row. Rows past ``kv_len`` hold finite values (zeros
    of the padded buffer, or zeros past the descriptor's end), so a zero weight on them is exact.
    FUSED_SCALE (no softcap, qk_scale > 0): the mask goes on the raw products and the scale
    into the exp2's argument (online_softmax_step_scaled)."""
    for n0 in tl.range(n_lo, n_hi, BLOCK_N, warp_specialize=WS):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        k = k_desc.load([row0 + n0, k_col])
        qk = tl.dot(q, k.T)
        if FUSED_SCALE:
            if MASK:            # no chunked layers here (attn_chunk 1, HAS_CHUNK False)
                qk = tl.where(visible(q_pos, offs_n, kv_len, window, 1, CAUSAL, HAS_WINDOW, False),
                              qk, float("-inf"))
            v = v_desc.load([row0 + n0, v_col])
            m_i, l_i, acc = online_softmax_step_scaled(m_i, l_i, acc, qk, qk_scale, v, "ieee")
        else:
            s = logits(qk, q_pos, offs_n, kv_len, qk_scale, softcap, window, 1,
                       MASK, CAUSAL, HAS_WINDOW, False, HAS_SOFTCAP)
            v = v_desc.load([row0 + n0, v_col])
            m_i, l_i, acc = online_softmax_step(m_i, l_i, acc, s, v, "ieee")
    return m_i, l_i, acc


@triton.jit
def _prefill_tma_kernel(
    q_desc, k_desc, v_desc, Out, Sinks, BlockReq, BlockM, QStart, KStart, SeqLens,
    qk_scale, v_scale, softcap, window, stride_ot, stride_oh, num_q_rows, stride_qt,
    NUM_HEADS: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr,
    WS: tl.constexpr, FUSED_SCALE: tl.constexpr,
):
    """q_desc: [T, H_q * D] blocks [BLOCK_M, D] (with WS: q's pointer, the descriptor is made
    here); k_desc / v_desc: [rows, H_kv * D(V)] blocks [BLOCK_N, D(V)]; Out: [T, H_q, DV];
    KStart: [B] first key row of each request."""
    if WS:
        # Triton 3.6 splits the Q tile between the two computing warpgroups; a host
        # descriptor keeps its [BLOCK_M, D] box, so each half-tile copy would write BLOCK_M
        # rows into a BLOCK_M / 2 buffer (and overrun its transaction count: the GPU hung).
        # A descriptor made in the kernel gets the split box.
        q_desc = tl.make_tensor_descriptor(q_desc, [num_q_rows, NUM_HEADS * D], [stride_qt, 1],
                                           [BLOCK_M, D])
    pid = tl.program_id(0)
    blk = pid // NUM_HEADS
    h = pid % NUM_HEADS
    req = tl.load(BlockReq + blk)
    m0 = tl.load(BlockM + blk)
    q_begin = tl.load(QStart + req)
    q_len = tl.load(QStart + req + 1) - q_begin
    kv_len = tl.load(SeqLens + req)
    row0 = tl.load(KStart + req)
    prefix = kv_len - q_len
    kvh = h // GROUP

    q = q_desc.load([q_begin + m0, h * D])
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q_pos = prefix + offs_m
    r1 = tl.minimum(m0 + BLOCK_M, q_len) - 1          # last real query row of the block
    lo, mid_lo, mid_hi, hi = key_ranges(prefix + m0, prefix + r1, kv_len, window, 1, 0,
                                        CAUSAL, HAS_WINDOW, False, BLOCK_N)   # tma_route refuses chunked layers
    m_i, l_i = softmax_start(Sinks, h, BLOCK_M, HAS_SINKS)
    acc = tl.zeros([BLOCK_M, DV], tl.float32)
    k_col = kvh * D
    v_col = kvh * DV
    if WS:
        # Triton 3.6 warp-specialises a kernel with ONE loop only: every tile takes the mask
        m_i, l_i, acc = _attend_tiles(q, m_i, l_i, acc, k_desc, v_desc, row0, k_col, v_col, lo, hi,
                                      q_pos, kv_len, qk_scale, softcap, window, BLOCK_N, True,
                                      CAUSAL, HAS_WINDOW, HAS_SOFTCAP, True, FUSED_SCALE)
    else:
        m_i, l_i, acc = _attend_tiles(q, m_i, l_i, acc, k_desc, v_desc, row0, k_col, v_col, lo,
                                      mid_lo, q_pos, kv_len, qk_scale, softcap, window, BLOCK_N,
                                      True, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, False, FUSED_SCALE)
        m_i, l_i, acc = _attend_tiles(q, m_i, l_i, acc, k_desc, v_desc, row0, k_col, v_col, mid_lo,
                                      mid_hi, q_pos, kv_len, qk_scale, softcap, window, BLOCK_N,
                                      False, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, False, FUSED_SCALE)
        m_i, l_i, acc = _attend_tiles(q, m_i, l_i, acc, k_desc, v_desc, row0, k_col, v_col, mid_hi,
                                      hi, q_pos, kv_len, qk_scale, softcap, window, BLOCK_N, True,
                                      CAUSAL, HAS_WINDOW, HAS_SOFTCAP, False, FUSED_SCALE)

    l_i = tl.where(l_i == 0.0, 1.0, l_i)
    out = acc * (v_scale / l_i)[:, None]
    offs_dv = tl.arange(0, DV)
    rows = (q_begin + offs_m).to(tl.int64)
    tl.store(Out + rows[:, None] * stride_ot + h * stride_oh + offs_dv[None, :],
             out.to(Out.dtype.element_ty), mask=(offs_m < q_len)[:, None])


def _rows_2d(x, block_rows: int):
    """A host tensor descriptor over the rows of x [R, heads, width] (each head row dense) as
    one [R, heads * width] matrix, blocks of [block_rows, width]."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    rows, heads, width = x.shape
    return TensorDescriptor(x, [rows, heads * width], [x.stride(0), 1], [block_rows, width])


def _scratch_allocator() -> None:
    """A descriptor made inside a kernel lives in global scratch that Triton asks the process's
    allocator for; give it torch's caching allocator unless the process has set one."""
    import torch
    try:
        from triton.runtime._allocation import NullAllocator, _allocator
        if not isinstance(_allocator.get(), NullAllocator):
            return
    except ImportError:     # a Triton without this module: set it (torch's allocator either way)
        pass
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                 device="cuda"))


def descriptor_ready(x) -> bool:
    """Whether x [R, heads, width] can back a tensor descriptor as it is: head rows dense and
    contiguous with each other, base and row stride 16-byte aligned (TMA's rules)."""
    elem = x.element_size()
    return (x.stride(2) == 1 and x.stride(1) == x.shape[2] and x.data_ptr() % 16 == 0
            and (x.stride(0) * elem) % 16 == 0 and x.shape[0] > 0)


def prefill_tma_attention(q, k_rows, v_rows, out, *, block_req, block_m, query_start_loc,
                          key_start, seq_lens, qk_scale, v_scale, softcap, window, sinks, causal,
                          config):
    """q: [T, H_q, D]; k_rows: [R, H_kv, D]; v_rows: [R, H_kv, DV] in q's dtype, each
    descriptor_ready; request r's keys are rows key_start[r] .. + seq_lens[r], and the rows
    after them up to the next multiple of BLOCK_N are finite (zeros) or past R.
    out: [T, H_q, DV] (written); block_req / block_m: [NB] int32 query blocks of BLOCK_M rows;
    query_start_loc: [B+1], key_start / seq_lens: [B] int32; sinks: [H_q] float32 or None;
    config: BLOCK_M, BLOCK_N, WS, num_warps, num_stages and optionally FUSED_SCALE (the scale
    folded into the exp2's argument; taken only without softcap and with qk_scale > 0, where
    it is the same softmax: otherwise the separate scale)."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    dv = v_rows.shape[2]
    cfg = dict(config)
    block_m_rows, block_n, ws = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("WS")
    fused = bool(cfg.pop("FUSED_SCALE", False)) and softcap is None and qk_scale > 0
    cfg.pop("GLUON", None)          # run_tma_extend's switch (prefill_gluon.py), not this kernel's
    if ws:
        _scratch_allocator()
    _prefill_tma_kernel[(block_req.shape[0] * num_heads,)](
        q if ws else _rows_2d(q, block_m_rows), _rows_2d(k_rows, block_n),
        _rows_2d(v_rows, block_n), out, sinks if sinks is not None else q, block_req, block_m,
        query_start_loc, key_start, seq_lens, qk_scale, v_scale, float(softcap or 1.0),
        int(window or 0), out.stride(0), out.stride(1), q.shape[0], q.stride(0),
        NUM_HEADS=num_heads, GROUP=num_heads // k_rows.shape[1], D=head_dim, DV=dv,
        BLOCK_M=block_m_rows, BLOCK_N=block_n, CAUSAL=causal, HAS_WINDOW=window is not None,
        HAS_SOFTCAP=softcap is not None, HAS_SINKS=sinks is not None, WS=ws, FUSED_SCALE=fused,
        **cfg,
    )
    return out

"""Fused elementwise kernels for the GPU forward: RMSNorm (with the residual add before it),
RoPE, and SiLU(gate) * up. One launch each where the torch formulas take six to eight, which
is what a CUDA-graph replay of a small decode step spends most of its time on.

Each computes what its torch formula (norm.py, rotary.py, mlp.py) computes, with the same
roundings to the compute dtype in the same places; float32 reductions and products may
differ in the last bit. The layers use them on CUDA only (``enabled``), so CPU results are
the torch formulas'; the Triton interpreter runs them in tests.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra import cuda as _cuda

gdc_wait = _cuda.gdc_wait
if hasattr(_cuda, "gdc_launch_dependents"):
    gdc_launch_dependents = _cuda.gdc_launch_dependents
else:                                      # an older Triton: no early trigger (exit triggers)
    @triton.jit
    def gdc_launch_dependents():
        pass


def enabled(x: torch.Tensor) -> bool:
    """Use the fused kernels for ``x``: on CUDA, unless ATTNKIT_FUSED=0."""
    return x.is_cuda and os.environ.get("ATTNKIT_FUSED", "1") != "0"


PDL_MODES = {"0": 0, "1": 1, "early": 2}


def _pdl(x: torch.Tensor, *, between: bool = False) -> dict:
    """Launch options for a kernel over x's rows (sm_90+, not the interpreter): with PDL 1 it
    is launched as a programmatic dependent of the kernel before it (``launch_pdl``), so its
    launch overlaps that kernel's last blocks, and it waits for that kernel (``gdc_wait``)
    before its first load of that kernel's output; with PDL 2 (``early``) it also lets its
    own dependent launch as soon as it has waited (``pdl_enter``), so a product two kernels
    on starts fetching its weights while this one runs. ATTNKIT_FUSED_PDL picks 0, 1 or
    ``early``; by default (``auto``) a launch over one row, or over the rows whose products
    stream_mm.py serves (``stream_rows``: it loads its first W tiles before it waits), is
    ``early`` and others 0.

    ``between`` (the norm, rope and silu * up kernels): see ``pdl_mode``.

    Why (H200, benchmarks/NOTES-engine.md versions 4-5 and 8): the engine's one-token decode
    step ran 225 tok/s (216-232) with ``auto`` against 218 (212-220) with 0, medians of five
    rounds interleaved in one process (bench_switch.py, results/session-1203b/c4; 16 and 64
    rows even), and a layer's one-row products 116.7 against 118.2 µs (bench_fold,
    1203a/c2); at 4 and 16 rows ``early`` was 2-3 % slower there. PDL 3 between the products,
    with o_proj and down_proj on stream_mm, cut the one-row step's GPU-busy time from 4.256
    to 4.159 ms (results/session-1203e/c4); PDL 3 without stream_mm made it 4.296."""
    mode = pdl_mode(x.shape[0] if x.dim() else 0, between=between)
    on = (mode and x.is_cuda and os.environ.get("TRITON_INTERPRET", "0") != "1"
          and torch.cuda.get_device_capability(x.device) >= (9, 0))
    if on and mode == 3 and os.environ.get("ATTNKIT_FUSED_PDL", "auto") == "auto" and not (
            triton.__version__.startswith("3.6.") and torch.cuda.get_device_capability(x.device) == (9, 0)):
        mode = 2                # no stream_mm here (its Gluon form: sm_90, Triton 3.6)
    return {"PDL": mode, "launch_pdl": True} if on else {"PDL": 0}


# Where skinny.mm hands products to stream_mm.py's warp-specialised Gluon product where it
# runs (sm_90, Triton 3.6): one row, products of at most 4096 output columns (o_proj and
# down_proj at the Llama-3-8B shape, the only shape measured). There, with the kernels
# between the products launching their dependents before they wait (``pdl_mode``), a B=1
# decode step's GPU-busy time fell 2.3 % (NOTES-engine.md version 8); the wider products
# were no faster on it, and at 17-64 rows it made the engine slower (version 7). Kept here,
# beside the PDL choice it also drives, so skinny.py and this module need not import each other.
STREAM_ROWS = (1, 1)
STREAM_COLS = 4096


def stream_rows() -> tuple[int, int]:
    """The row counts (lo, hi) that stream_mm.py serves where it runs (sm_90, Triton 3.6):
    STREAM_ROWS, or ATTNKIT_STREAM_MM="lo-hi" (a measurement switch; "0-0": none), at least
    one row; (1, 0) where there are none."""
    lo, _, hi = os.environ.get("ATTNKIT_STREAM_MM", "").partition("-")
    if lo.isdigit() and hi.isdigit():
        lo_hi = int(lo), min(int(hi), 128)
    else:
        lo_hi = STREAM_ROWS
    return (max(lo_hi[0], 1), lo_hi[1]) if lo_hi[1] >= 1 else (1, 0)     # (1, 0): none


def stream_cols() -> int:
    """The widest product (output columns N) stream_mm.py serves from skinny.mm:
    ATTNKIT_STREAM_MM_N (a measurement switch), else STREAM_COLS at STREAM_ROWS and no limit
    at rows that ATTNKIT_STREAM_MM names."""
    raw = os.environ.get("ATTNKIT_STREAM_MM_N", "")
    if raw.isdigit():
        return int(raw)
    lo, _, hi = os.environ.get("ATTNKIT_STREAM_MM", "").partition("-")
    return 1 << 62 if lo.isdigit() and hi.isdigit() else STREAM_COLS


def stream_regs() -> int | None:
    """Registers a thread for stream_mm.py's launches from skinny.mm: ATTNKIT_STREAM_MM_REGS
    (a measurement switch: 128 leaves half the register file to the norm and rope kernels
    between the products), or None (the compiler's count, 255 at every tile it runs)."""
    raw = os.environ.get("ATTNKIT_STREAM_MM_REGS", "")
    return int(raw) if raw.isdigit() and 24 <= int(raw) <= 255 else None


def pdl_mode(rows: int, *, between: bool = False) -> int:
    """``_pdl``'s PDL value for a launch over ``rows`` rows, before the device checks.
    ``between``: the launch is one of the small kernels between products (norm, rope,
    silu * up). Under ``auto`` they take PDL 3 at the rows stream_mm.py serves (``_pdl``
    keeps 2 where it cannot run): they let the next kernel launch before they wait, so the
    product after them starts loading its weights while the product before them still runs
    (with 2 it can launch only once that product has ended). ATTNKIT_FUSED_PDL=ahead (a
    measurement switch) gives them 3 at every row ``auto`` makes early."""
    raw = os.environ.get("ATTNKIT_FUSED_PDL", "auto")
    if raw in ("auto", "ahead"):
        lo, hi = stream_rows()
        mode = 2 if rows == 1 or lo <= rows <= hi else 0
        ahead = raw == "ahead" or lo <= rows <= hi
        return 3 if mode == 2 and between and ahead else mode
    return PDL_MODES.get(raw, 0)


@triton.jit
def pdl_enter(PDL: tl.constexpr):
    """A kernel's first step under ``_pdl``'s options: wait for the kernel before (PDL >= 1);
    with PDL == 2, then let the next kernel launch (it waits for this one in turn); with PDL
    == 3, let it launch first, then wait. (3 is safe for a kernel whose dependent touches
    nothing before its own wait but memory no kernel writes, a product's weights: that wait
    ends when this kernel has, and this kernel ends after the one before it.)"""
    if PDL == 3:
        gdc_launch_dependents()
    if PDL >= 1:
        gdc_wait()
    if PDL == 2:
        gdc_launch_dependents()


@triton.jit
def _rms_norm_kernel(X, R, W, Y, H, stride_x, stride_r, stride_y, stride_h, eps, offset,
                     N: tl.constexpr, BLOCK: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                     WEIGHT_FP32: tl.constexpr, PDL: tl.constexpr):
    """Row t: h = x + r (rounded to x's dtype, stored to H) if HAS_RESIDUAL else x; then
    y = (offset + w) * (h / rms(h)) with the weight applied after (Llama) or before
    (WEIGHT_FP32: Gemma, gpt-oss) the cast back to the dtype."""
    pdl_enter(PDL)
    t = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < N
    x = tl.load(X + t.to(tl.int64) * stride_x + cols, mask=ok, other=0.0)
    if HAS_RESIDUAL:
        x = (x.to(tl.float32) + tl.load(R + t.to(tl.int64) * stride_r + cols, mask=ok,
                                        other=0.0).to(tl.float32)).to(X.dtype.element_ty)
        tl.store(H + t.to(tl.int64) * stride_h + cols, x, mask=ok)
    xf = x.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / N + eps)
    w = tl.load(W + cols, mask=ok, other=0.0)
    if WEIGHT_FP32:
        y = xf * inv * (offset + w.to(tl.float32))
    else:
        xn = (xf * inv).to(X.dtype.element_ty)
        if offset != 0.0:
            w = (offset + w.to(tl.float32)).to(X.dtype.element_ty)
        y = w.to(tl.float32) * xn.to(tl.float32)
    tl.store(Y + t.to(tl.int64) * stride_y + cols, y.to(Y.dtype.element_ty), mask=ok)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, style, residual: torch.Tensor | None = None):
    """x: [T, N] (rows dense); weight: [N]; residual: [T, N] | None.
    -> y [T, N], or (y, x + residual) with a residual. See norm.rms_norm for the formula."""
    rows = x.reshape(-1, x.shape[-1])
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    n = rows.shape[-1]
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    h = torch.empty_like(y) if residual is not None else y
    r = residual.reshape(-1, n).contiguous() if residual is not None else rows
    if rows.shape[0] == 0:
        return y.view(x.shape) if residual is None else (y.view(x.shape), h.view(x.shape))
    _rms_norm_kernel[(rows.shape[0],)](
        rows, r, weight, y, h, rows.stride(0), r.stride(0), y.stride(0), h.stride(0),
        style.eps, style.offset, N=n, BLOCK=triton.next_power_of_2(n),
        HAS_RESIDUAL=residual is not None, WEIGHT_FP32=style.weight_in_fp32,
        num_warps=4 if n <= 4096 else 8, **_pdl(rows, between=True))
    y = y.view(x.shape)
    return y if residual is None else (y, h.view(x.shape))


@triton.jit
def _rope_row(X, COS, SIN, Y, t, h, stride_xt, stride_xh, stride_ct, stride_yt, stride_yh,
              D: tl.constexpr, RD: tl.constexpr, BLOCK: tl.constexpr, INTERLEAVED: tl.constexpr):
    """Token t, head h: y = x * cos + swap(x) * sin on the first RD features (the RopeTable
    layout: sin signed per pair), x on the rest. swap exchanges the two features of a pair:
    neighbours (INTERLEAVED) or the halves (neox)."""
    d = tl.arange(0, BLOCK)
    ok = d < D
    base = X + t.to(tl.int64) * stride_xt + h * stride_xh
    x = tl.load(base + d, mask=ok, other=0.0).to(tl.float32)
    rot = d < RD
    if INTERLEAVED:
        partner = d ^ 1
    else:
        partner = tl.where(d < RD // 2, d + RD // 2, d - RD // 2)
    xp = tl.load(base + partner, mask=ok & rot, other=0.0).to(tl.float32)
    c = tl.load(COS + t.to(tl.int64) * stride_ct + d, mask=ok & rot, other=1.0)
    s = tl.load(SIN + t.to(tl.int64) * stride_ct + d, mask=ok & rot, other=0.0)
    y = tl.where(rot, x * c + xp * s, x)
    tl.store(Y + t.to(tl.int64) * stride_yt + h * stride_yh + d, y.to(Y.dtype.element_ty), mask=ok)


@triton.jit
def _rope_kernel(X1, Y1, X2, Y2, COS, SIN, H1, s1t, s1h, y1t, y1h, s2t, s2h, y2t, y2h, stride_ct,
                 D: tl.constexpr, RD: tl.constexpr, BLOCK: tl.constexpr,
                 INTERLEAVED: tl.constexpr, PDL: tl.constexpr):
    """Grid (T, H1 + H2): heads below H1 rotate X1 into Y1 (queries), the rest X2 into Y2
    (keys), one launch for both."""
    pdl_enter(PDL)
    t = tl.program_id(0)
    h = tl.program_id(1)
    if h < H1:
        _rope_row(X1, COS, SIN, Y1, t, h, s1t, s1h, stride_ct, y1t, y1h, D, RD, BLOCK, INTERLEAVED)
    else:
        _rope_row(X2, COS, SIN, Y2, t, h - H1, s2t, s2h, stride_ct, y2t, y2h, D, RD, BLOCK,
                  INTERLEAVED)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool,
         other: torch.Tensor | None = None):
    """x: [T, H, D] (last dim dense); cos, sin: [T, 1, RD] float32 (RopeTable) -> [T, H, D];
    with ``other`` ([T, H2, D], e.g. the keys) both rotated in one launch -> (x', other')."""
    t, heads, d = x.shape
    rd = cos.shape[-1]
    y = torch.empty(t, heads, d, dtype=x.dtype, device=x.device)
    o = other if other is not None else x
    yo = torch.empty(o.shape, dtype=o.dtype, device=o.device) if other is not None else y
    if t:
        cos, sin = cos.reshape(t, rd), sin.reshape(t, rd)
        _rope_kernel[(t, heads + (o.shape[1] if other is not None else 0))](
            x, y, o, yo, cos, sin, heads, x.stride(0), x.stride(1), y.stride(0), y.stride(1),
            o.stride(0), o.stride(1), yo.stride(0), yo.stride(1), cos.stride(0), D=d, RD=rd,
            BLOCK=triton.next_power_of_2(d), INTERLEAVED=interleaved, num_warps=1, **_pdl(x, between=True))
    return y if other is None else (y, yo)


@triton.jit
def _silu_mul_kernel(GU, Y, stride_g, stride_y, I: tl.constexpr, BLOCK: tl.constexpr,
                     PDL: tl.constexpr):
    """Row t: y = silu(gate) * up, gate = GU[t, :I], up = GU[t, I:], each product rounded to
    the dtype as torch's two ops round it."""
    pdl_enter(PDL)
    t = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < I
    row = GU + t.to(tl.int64) * stride_g
    g = tl.load(row + cols, mask=ok, other=0.0).to(tl.float32)
    u = tl.load(row + I + cols, mask=ok, other=0.0).to(tl.float32)
    s = (g / (1.0 + tl.exp(-g))).to(Y.dtype.element_ty).to(tl.float32)
    tl.store(Y + t.to(tl.int64) * stride_y + cols, (s * u).to(Y.dtype.element_ty), mask=ok)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up: [T, 2I] (gate columns first) -> silu(gate) * up: [T, I]."""
    t, two_i = gate_up.shape
    inter = two_i // 2
    y = torch.empty(t, inter, dtype=gate_up.dtype, device=gate_up.device)
    if t == 0:
        return y
    block = min(1024, triton.next_power_of_2(inter))
    _silu_mul_kernel[(t, triton.cdiv(inter, block))](gate_up, y, gate_up.stride(0), y.stride(0),
                                                     I=inter, BLOCK=block, num_warps=4,
                                                     **_pdl(gate_up, between=True))
    return y


@triton.jit
def _argmax_chunk_kernel(X, PV, PI, V, stride_x, CHUNKS, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Row r, chunk c of BLOCK columns: the chunk's winner (PV its value, PI its column) by
    torch.argmax's order: a NaN beats every number, then the larger value, then the lower
    column."""
    pdl_enter(PDL)
    r = tl.program_id(0)
    c = tl.program_id(1)
    cols = c * BLOCK + tl.arange(0, BLOCK)
    ok = cols < V
    x = tl.load(X + r.to(tl.int64) * stride_x + cols, mask=ok, other=float("-inf"))
    nan = (x != x) & ok
    first_nan = tl.min(tl.where(nan, cols, V), axis=0)
    best = tl.max(tl.where(nan, float("-inf"), x), axis=0)
    first_best = tl.min(tl.where((x == best) & ok, cols, V), axis=0)
    col = tl.where(first_nan < V, first_nan, first_best)
    tl.store(PI + r * CHUNKS + c, col)
    tl.store(PV + r * CHUNKS + c, tl.where(first_nan < V, float("nan"), best))


@triton.jit
def _argmax_rows_kernel(PV, PI, OUT, V, CHUNKS, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Row r: the winner among its chunks' winners, by the same order (chunks hold ascending
    columns, so the lower column of two equal values is the lower chunk's)."""
    pdl_enter(PDL)
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    ok = c < CHUNKS
    v = tl.load(PV + r * CHUNKS + c, mask=ok, other=float("-inf"))
    i = tl.load(PI + r * CHUNKS + c, mask=ok, other=V)
    nan = (v != v) & ok
    first_nan = tl.min(tl.where(nan, i, V), axis=0)
    best = tl.max(tl.where(nan, float("-inf"), v), axis=0)
    first_best = tl.min(tl.where((v == best) & ok, i, V), axis=0)
    tl.store(OUT + r, tl.where(first_nan < V, first_nan, first_best).to(tl.int64))


def argmax_rows(x: torch.Tensor) -> torch.Tensor:
    """x: [R, V] float32 logits (last dim dense) -> [R] int64, torch.argmax(x, -1)'s indices
    (the first maximum; a NaN counts as the maximum) in two launches that read x once
    across many programs: torch's kernel reads a row in one block (27.5 µs for one row of
    128k logits on an H200, benchmarks/results/session-1202f/c1)."""
    if x.dim() != 2 or x.dtype != torch.float32:
        raise ValueError(f"argmax_rows: want [R, V] float32 logits, got {tuple(x.shape)} {x.dtype} "
                         "(the chunk winners are kept in float32)")
    rows, vocab = x.shape
    out = torch.empty(rows, dtype=torch.int64, device=x.device)
    if rows == 0 or vocab == 0:
        return x.argmax(-1) if vocab == 0 else out     # torch's own error for an empty row
    if x.stride(-1) != 1:
        x = x.contiguous()
    block = min(4096, triton.next_power_of_2(vocab))
    chunks = triton.cdiv(vocab, block)
    pv = torch.empty(rows, chunks, dtype=torch.float32, device=x.device)
    pi = torch.empty(rows, chunks, dtype=torch.int32, device=x.device)
    _argmax_chunk_kernel[(rows, chunks)](x, pv, pi, vocab, x.stride(0), chunks, BLOCK=block,
                                         num_warps=8 if block >= 2048 else 4, **_pdl(x))
    _argmax_rows_kernel[(rows,)](pv, pi, out, vocab, chunks, BLOCK=triton.next_power_of_2(chunks),
                                 num_warps=1, **_pdl(x))
    return out


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """logits: [R, V] float32 -> [R] int64 greedy tokens: argmax_rows on CUDA (unless
    ATTNKIT_FUSED=0), torch.argmax elsewhere; the same indices either way."""
    if enabled(logits) and logits.dim() == 2 and logits.dtype == torch.float32:
        return argmax_rows(logits)
    return logits.argmax(-1)

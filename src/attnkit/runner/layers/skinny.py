"""Matrix products for few rows, with the work around them folded in: y = f(x) @ W^T (+ bias)
(+ residual), x [M, K] with M a decode step's tokens, W [N, K] in Hugging Face's layout.

A decode step at small batch is bound by reading the weights, and a step of the Llama-3-8B
shape spends about a tenth of its GPU time on the fixed cost of ~400 small launches (the norm
before each projection, SiLU * up, split-K reduces: benchmarks/NOTES-engine.md). One kernel
here does a projection together with what the torch formulas do around it:

    epilogue  ``bias``:  added in float32 before the one rounding (as cuBLAS's addmm does).
              ``residual``: y = residual + round(x @ W^T): torch's ``residual + out``.
    prologue  ``norm``:  x is the residual stream; each row is RMS-normalised (norm.py's
                         formula and roundings) as it is read. Every program reads the few
                         KB of x from L2 twice: once for the row's sum of squares, then tile
                         by tile.
              ``silu``:  x is the gate_up product [M, 2K]; the tile is silu(gate) * up,
                         rounded as mlp.py's two torch ops round it.

The engine uses the epilogues; the prologues only where ATTNKIT_SKINNY_FOLD names them
(``folds``: measured slower than their own kernels, kept as the measured alternative).

Each program owns BLOCK_N output columns (rows of W) and walks K in BLOCK_K steps, so W is
read once, in its own row-major order. Two inner forms (constexpr DOT): ``acc[BN, BM] += W_tile
@ x_tile^T`` on the tensor cores (x padded to 16 rows), or, for one row, CUDA-core FMAs summed
over K once at the end. fp32 accumulation. Past 16 rows a product of few column tiles also
splits K across programs (Config.split): each stores its float32 partial, and the last
program of a column tile (a ticket counter) sums them in split order and runs the epilogue,
so the result is the same whichever program finishes last.

Under programmatic dependent launch (fused._pdl's options: by default a one-row launch on
sm_90+, ATTNKIT_FUSED_PDL otherwise) a program prefetches the first BLOCK_K columns
(ATTNKIT_SKINNY_PREFETCH tiles) of its W rows into L2 before it waits for the kernel before
it (W does not depend on that kernel; x does), and lets the next kernel launch once its own K
loop is done (PDL 1) or as soon as it has waited (``early``, the one-row default).

The layers use this on CUDA for steps of at most ``MAX_ROWS`` tokens (``usable``); the
Triton interpreter runs it in tests. benchmarks/bench_skinny.py measures it against cuBLAS.
``mm`` hands the products of fused.stream_rows and fused.stream_cols (by default one row and
at most 4096 output columns) to stream_mm.py's warp-specialised Gluon product instead, where
that kernel runs (``_stream``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from attnkit.runner.layers import fused
from attnkit.runner.layers.fused import gdc_launch_dependents, pdl_enter

# Steps of more tokens run cuBLAS and the separate kernels. Up to FEW_ROWS one column tile a
# program (session 1202f: 0.93-1.10x cuBLAS's rate at <= 32 rows); from there to MAX_ROWS the
# split-K rule of ``config`` (session 1203c: the engine's B=32 step +4.7 % and +3.6 % over
# cuBLAS's products in two calls, B=48 and B=64 even, so cuBLAS keeps those; NOTES-engine.md
# version 6). ATTNKIT_SKINNY_ROWS moves the limit for measurement (``max_rows``).
FEW_ROWS = 16
MAX_ROWS = 32

NONE, NORM, SILU = 0, 1, 2                  # prologues


@triton.jit
def _x_tile(x_row, kk, k_ok, row_ok, K, inv, NW, offset, DT: tl.constexpr,
            PROLOGUE: tl.constexpr, WEIGHT_FP32: tl.constexpr):
    """The [BM, BK] tile of f(x) at columns kk, in the compute dtype DT."""
    m = row_ok[:, None] & k_ok[None, :]
    if PROLOGUE == 2:
        g = tl.load(x_row + kk[None, :], mask=m, other=0.0).to(tl.float32)
        u = tl.load(x_row + K + kk[None, :], mask=m, other=0.0).to(tl.float32)
        s = (g / (1.0 + tl.exp(-g))).to(DT).to(tl.float32)
        x = (s * u).to(DT)
    else:
        x = tl.load(x_row + kk[None, :], mask=m, other=0.0)
        if PROLOGUE == 1:
            xf = x.to(tl.float32)
            nw = tl.load(NW + kk, mask=k_ok, other=0.0)
            if WEIGHT_FP32:
                x = (xf * inv[:, None] * (offset + nw.to(tl.float32))[None, :]).to(DT)
            else:
                xn = (xf * inv[:, None]).to(DT)
                if offset != 0.0:
                    nw = (offset + nw.to(tl.float32)).to(DT)
                x = (nw.to(tl.float32)[None, :] * xn.to(tl.float32)).to(DT)
    return x


@triton.jit
def _skinny_kernel(X, W, Y, NW, BIAS, R, PART, COUNTER, M, N, K, K_SPLIT,
                   stride_xm, stride_wn, stride_ym, stride_rm, eps, offset,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   PASS_K: tl.constexpr, SPLIT: tl.constexpr,
                   DOT: tl.constexpr, EVEN_K: tl.constexpr, PROLOGUE: tl.constexpr,
                   WEIGHT_FP32: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                   PDL: tl.constexpr, PREFETCH: tl.constexpr):
    """Program (n, s): y[:, n*BLOCK_N : (n+1)*BLOCK_N] over all M (<= BLOCK_M) rows, from K
    columns [s * K_SPLIT, (s + 1) * K_SPLIT) (SPLIT > 1: ``_merge_splits``)."""
    DT: tl.constexpr = W.dtype.element_ty
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)      # rows of W, columns of y
    rows = tl.arange(0, BLOCK_M)                                   # rows of x and y
    ks = tl.arange(0, BLOCK_K)
    col_ok = cols < N
    row_ok = rows < M
    k_lo = tl.program_id(1) * K_SPLIT
    k_hi = tl.minimum(k_lo + K_SPLIT, K)
    w_ptr = W + cols.to(tl.int64)[:, None] * stride_wn + (k_lo + ks)[None, :]  # [BN, BK]
    x_row = X + rows.to(tl.int64)[:, None] * stride_xm                        # [BM, 1]
    if PDL:
        # W is this kernel's own: fetch its first PREFETCH tiles (every 64th element: a 128-byte
        # line of a 16-bit W) while the kernel before finishes.
        lines = (cols.to(tl.int64)[:, None] * stride_wn + k_lo
                 + (tl.arange(0, PREFETCH * BLOCK_K // 64) * 64)[None, :])
        tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1];", "=r,l", [W + lines],
                                  dtype=tl.int32, is_pure=False, pack=1)
    pdl_enter(PDL)
    inv = tl.zeros([BLOCK_M], dtype=tl.float32)
    if PROLOGUE == 1:          # the rows' sums of squares first, in few wide loads (from L2)
        ss = tl.zeros([BLOCK_M], dtype=tl.float32)
        for k0 in range(0, K, PASS_K):
            kk = k0 + tl.arange(0, PASS_K)
            xv = tl.load(x_row + kk[None, :], mask=row_ok[:, None] & (kk < K)[None, :],
                         other=0.0).to(tl.float32)
            ss += tl.sum(xv * xv, axis=1)
        inv = 1.0 / tl.sqrt(ss / K + eps)
    if DOT:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        kk = k0 + ks
        k_ok = kk < k_hi
        if EVEN_K:
            w = tl.load(w_ptr, mask=col_ok[:, None], other=0.0)
        else:
            w = tl.load(w_ptr, mask=col_ok[:, None] & k_ok[None, :], other=0.0)
        x = _x_tile(x_row, kk, k_ok, row_ok, K, inv, NW, offset, DT, PROLOGUE, WEIGHT_FP32)
        if DOT:
            if DT == tl.float32:                   # fp32 products in full precision, not TF32
                acc = tl.dot(w, tl.trans(x), acc, input_precision="ieee")
            else:
                acc = tl.dot(w, tl.trans(x), acc)
        else:
            acc += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
        w_ptr += BLOCK_K
    if PDL == 1:
        gdc_launch_dependents()
    if DOT:
        out = tl.trans(acc)                                                   # [BM, BN]
    else:
        out = tl.sum(acc, axis=2)
    if SPLIT == 1:
        _epilogue(out, Y, BIAS, R, rows, cols, row_ok, col_ok, stride_ym, stride_rm, DT,
                  HAS_BIAS, HAS_RESIDUAL)
    else:
        _merge_splits(out, PART, COUNTER, Y, BIAS, R, rows, cols, row_ok, col_ok, N, stride_ym,
                      stride_rm, DT, BLOCK_M, SPLIT, HAS_BIAS, HAS_RESIDUAL)


@triton.jit
def _merge_splits(out, PART, COUNTER, Y, BIAS, R, rows, cols, row_ok, col_ok, N, stride_ym,
                  stride_rm, DT: tl.constexpr, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr,
                  HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """Split-K: every program stores its float32 [BM, BN] partial (PART [SPLIT, N, BM]), then
    takes a ticket from its column tile's counter; the program that draws the last one sums
    the SPLIT partials in split order (so the sum does not depend on which program came
    last), runs the epilogue and resets the counter to 0 for the next launch.

    Ordering as decode_merge.merge_if_last's: the CTA barrier puts every thread's partial
    stores before the ticket (an acq_rel atomic at GPU scope), and the last program reads the
    partials after its own ticket, bypassing L1."""
    part = PART + cols.to(tl.int64)[None, :] * BLOCK_M + rows[:, None]             # [BM, BN]
    ok = row_ok[:, None] & col_ok[None, :]
    tl.store(part + tl.program_id(1) * N * BLOCK_M, out, mask=ok)
    tl.debug_barrier()
    counter = COUNTER + tl.program_id(0)
    ticket = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    if ticket == SPLIT - 1:
        total = tl.load(part, mask=ok, other=0.0, cache_modifier=".cg")
        for s in tl.static_range(1, SPLIT):
            total += tl.load(part + s * N * BLOCK_M, mask=ok, other=0.0, cache_modifier=".cg")
        _epilogue(total, Y, BIAS, R, rows, cols, row_ok, col_ok, stride_ym, stride_rm, DT,
                  HAS_BIAS, HAS_RESIDUAL)
        tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")


@triton.jit
def _epilogue(out, Y, BIAS, R, rows, cols, row_ok, col_ok, stride_ym, stride_rm,
              DT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """y = round(out (+ bias)) (+ residual): float32 out [BM, BN] to the dtype DT."""
    if HAS_BIAS:
        out += tl.load(BIAS + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    y = out.to(DT)
    ok = row_ok[:, None] & col_ok[None, :]
    if HAS_RESIDUAL:
        r = tl.load(R + rows.to(tl.int64)[:, None] * stride_rm + cols[None, :], mask=ok, other=0.0)
        y = (y.to(tl.float32) + r.to(tl.float32)).to(DT)
    tl.store(Y + rows.to(tl.int64)[:, None] * stride_ym + cols[None, :], y, mask=ok)


@dataclass(frozen=True, slots=True)
class Config:
    """A launch: the inner form, the tile and the pipeline."""
    dot: bool
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 4
    split: int = 1          # K split across programs, merged by the last (``_merge_splits``)


def config(m: int, n: int) -> Config:
    """The configuration bench_skinny measured fastest for the Llama-3-8B decode products
    (results/session-1202f/c2): one row with fewer than 16k outputs on CUDA cores (8 x 512),
    otherwise the tensor-core form, 64-column tiles where there are >= 6k outputs. Past
    FEW_ROWS rows (and to 64 with ATTNKIT_SKINNY_ROWS), by bench_skinny at 32 and 64 rows
    (results/session-1203c/c1): 64-column tiles with K split in two where there are <= 4096
    outputs (64 column tiles would fill half of 132 SMs; o 1.07x / 1.00x cuBLAS, down 1.00x /
    1.02x), whole K at 6144 (qkv 1.01x / 0.97x), and past 32 rows 128-column tiles of 8 warps
    where there are >= 16k outputs (gate_up 0.99x, lm_head 1.06x at 64 rows, where the
    64-column tile read at 0.91x / 0.98x)."""
    if m == 1 and n < 16384:
        return Config(False, 8, 512, 4, 2)
    if m > FEW_ROWS:
        if n <= 4096:
            return Config(True, 64, 128, 4, 4, split=2)
        return Config(True, 128, 128, 8, 3) if m > 32 and n >= 16384 else Config(True, 64, 128)
    return Config(True, 64, 128) if n >= 6144 else Config(True, 32, 256)


def _stream(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether ``mm`` hands x @ weight^T to stream_mm.py: x's rows in fused.stream_rows and
    weight's in fused.stream_cols, the kernel able to read both (stream_mm.ready: sm_90,
    Triton 3.6, TMA's alignments) and the ticket counters there (not first made inside a
    graph capture)."""
    lo, hi = fused.stream_rows()
    if (not lo <= x.shape[0] <= hi or weight.shape[0] > fused.stream_cols()
            or not triton.__version__.startswith("3.6.")):
        return False                    # (stream_mm imports Triton 3.6's Gluon Hopper API)
    from attnkit.runner.layers import stream_mm
    return (stream_mm.ready(x, weight) and -(-weight.shape[0] // 64) <= _COUNTER_TILES
            and counters(x.device) is not None)


def max_rows() -> int:
    """The most rows ``usable`` admits: MAX_ROWS, or ATTNKIT_SKINNY_ROWS (a measurement
    switch, 1-128) where set."""
    raw = os.environ.get("ATTNKIT_SKINNY_ROWS", "")
    return min(128, max(1, int(raw))) if raw.isdigit() else MAX_ROWS


def usable(x: torch.Tensor, lin) -> bool:
    """Whether ``mm`` serves x @ lin: CUDA (unless ATTNKIT_FUSED=0 or ATTNKIT_SKINNY=0), a
    2-D x of 1..max_rows() rows (or rows stream_mm serves, ``_stream``, with no prologue
    folded: it has none), a whole (not
    tensor-parallel) 16-bit ``Linear`` in x's dtype, and not inside ``row_by_row`` (whose rows
    must not depend on the step's row count)."""
    from attnkit.runner.layers.linear import _ROW_BY_ROW, Linear

    return (fused.enabled(x) and os.environ.get("ATTNKIT_SKINNY", "1") != "0"
            and isinstance(lin, Linear) and x.dim() == 2
            and x.dtype in (torch.float16, torch.bfloat16) and lin.weight.dtype == x.dtype
            and lin.weight.stride(-1) == 1 and not _ROW_BY_ROW.get()
            and (0 < x.shape[0] <= max_rows() or (not folds() and _stream(x, lin.weight))))


# Per-device ticket counters of the split-K merges (this kernel's and stream_mm.py's), one a
# column tile, zero between launches (each merge resets its own). Made outside CUDA-graph
# capture only (``counters``), so a counter is zero in memory before the first launch that
# uses it, eager or replayed. Products on one device are stream-ordered (the runner's one
# stream); under PDL launches overlap, but no kernel touches the counters before its wait
# for the kernel before (gdc_wait), so two launches never use them at once.
_COUNTERS: dict = {}
_COUNTER_TILES = 1 << 14


def counters(device) -> torch.Tensor | None:
    """The device's ticket counters (_COUNTER_TILES int32, zero between launches), made on
    first use; None where they do not exist yet and the stream is capturing a graph (they
    cannot be zeroed there before the replay's first use)."""
    if device not in _COUNTERS:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        _COUNTERS[device] = torch.zeros(_COUNTER_TILES, dtype=torch.int32, device=device)
    return _COUNTERS[device]


def _split(k: int, cfg: Config, tiles: int, device) -> tuple[int, int]:
    """(programs along K, K columns each, a multiple of BLOCK_K): cfg.split, clamped so no
    program is empty; 1 where there are more column tiles than counters, or where the
    counters do not exist yet and the stream is capturing a graph (they cannot be zeroed
    there before the replay's first use)."""
    steps = triton.cdiv(k, cfg.block_k)
    split = max(1, min(cfg.split, steps))
    if split > 1 and (tiles > _COUNTER_TILES or counters(device) is None):
        split = 1
    per = triton.cdiv(steps, split) * cfg.block_k
    return triton.cdiv(k, per), per


def _prefetch(k: int, block_k: int) -> int:
    """Tiles of W a program prefetches under PDL: ATTNKIT_SKINNY_PREFETCH (1, 2 or 4; a
    measurement switch, default 1), no more than K holds."""
    want = {"2": 2, "4": 4}.get(os.environ.get("ATTNKIT_SKINNY_PREFETCH", "1"), 1)
    while want > 1 and want * block_k > k:
        want //= 2
    return want


def folds() -> frozenset:
    """Which prologues ``project`` folds into the product: ATTNKIT_SKINNY_FOLD, a comma list
    of ``norm`` / ``silu``; default neither (``none``). A prologue not folded runs as its own
    kernel (fused.rms_norm, fused.silu_mul) before the product.

    Neither is the default because both cost more than the launch they save (H200,
    results/session-1203a/c1, bench_fold.py, a layer's four products): folding the norm made
    a layer 27 us slower at one row (every program re-reads x twice from L2 and waits on the
    sum of squares before its first W tile), folding silu * up was even at one row and 70-110
    us slower at 4-16 (each program recomputes the [M, 2K] gate for its own columns)."""
    raw = os.environ.get("ATTNKIT_SKINNY_FOLD", "none")
    return frozenset(p for p in raw.split(",") if p in ("norm", "silu"))


def project(x: torch.Tensor, lin, *, norm: tuple | None = None, silu: bool = False,
            residual: torch.Tensor | None = None) -> torch.Tensor:
    """``lin`` (a Linear, where ``usable``) applied to f(x) (+ residual), f as in ``mm``; the
    prologues ``folds`` leaves out run first as their own kernels."""
    fold = folds()
    if norm is not None and "norm" not in fold:
        x, norm = fused.rms_norm(x, norm[0], norm[1]), None
    if silu and "silu" not in fold:
        x, silu = fused.silu_mul(x), False
    return mm(x, lin.weight, bias=lin.bias, norm=norm, silu=silu, residual=residual)


def mm(x: torch.Tensor, weight: torch.Tensor, *, bias: torch.Tensor | None = None,
       norm: tuple | None = None, silu: bool = False, residual: torch.Tensor | None = None,
       cfg: Config | None = None) -> torch.Tensor:
    """f(x) @ weight^T (+ bias) (+ residual): [M, N] in weight's dtype.

    x: [M, K], or [M, 2K] with ``silu`` (gate columns first); weight: [N, K];
    norm: (norm weight [K], NormStyle): x is normalised first; residual: [M, N].
    cfg: the launch (default ``config``)."""
    m = x.shape[0]
    n, k = weight.shape
    if norm is not None and silu:
        raise ValueError("skinny.mm: one prologue at a time (norm or silu)")
    want_k = 2 * k if silu else k
    if (x.dim() != 2 or x.shape[1] != want_k or weight.stride(-1) != 1 or x.dtype != weight.dtype
            or x.dtype not in (torch.float16, torch.bfloat16, torch.float32)):
        raise ValueError(f"skinny.mm: x {tuple(x.shape)} {x.dtype}, weight {tuple(weight.shape)} "
                         f"{weight.dtype}: want [M, {want_k}] and [N, K] in one dtype, last dim dense")
    if x.stride(-1) != 1:
        x = x.contiguous()
    y = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    nw, style = norm if norm is not None else (weight, None)
    if residual is not None and (residual.shape != (m, n) or residual.stride(-1) != 1):
        residual = residual.expand(m, n).contiguous()
    r = residual if residual is not None else y
    if cfg is None and norm is None and not silu and _stream(x, weight):
        from attnkit.runner.layers import stream_mm
        return stream_mm.mm(x, weight, bias=bias, residual=residual,
                            counters=counters(x.device), pdl=fused._pdl(x), out=y,
                            maxnreg=fused.stream_regs())
    cfg = cfg or config(m, n)
    bm = max(16 if cfg.dot else 1, triton.next_power_of_2(max(m, 1)))
    pdl = fused._pdl(x)
    tiles = triton.cdiv(n, cfg.block_n)
    split, k_split = _split(k, cfg, tiles, x.device)
    part = y.new_empty(split * n * bm, dtype=torch.float32) if split > 1 else y
    counter = _COUNTERS[x.device] if split > 1 else y
    _skinny_kernel[(tiles, split)](
        x, weight, y, nw, bias if bias is not None else weight, r, part, counter, m, n, k,
        k_split, x.stride(0), weight.stride(0), y.stride(0), r.stride(0),
        style.eps if style else 0.0, style.offset if style else 0.0,
        BLOCK_M=bm, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, DOT=cfg.dot, SPLIT=split,
        PASS_K=min(triton.next_power_of_2(k), max(cfg.block_k, 8192 // bm)),
        EVEN_K=k_split % cfg.block_k == 0 and k % cfg.block_k == 0,
        PROLOGUE=NORM if norm is not None else SILU if silu else NONE,
        WEIGHT_FP32=bool(style and style.weight_in_fp32), HAS_BIAS=bias is not None,
        HAS_RESIDUAL=residual is not None, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        PREFETCH=_prefetch(k, cfg.block_k) if pdl["PDL"] else 1, **pdl)
    return y

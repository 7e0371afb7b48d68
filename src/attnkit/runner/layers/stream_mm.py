"""Products of a few dozen rows on sm_90, in Gluon: y = x @ W^T (+ bias) (+ residual), x [M, K]
with M a decode step's tokens (up to 128), W [N, K] in Hugging Face's layout, W read once.

Why a second few-row kernel (skinny.py is the first): at 64 rows neither cuBLAS nor a Triton
``tl.dot`` tile reads the Llama-3-8B decode products faster than ~3.0-3.7 TB/s against the
H200's 4.2 TB/s copy rate, split-K included (NOTES-engine.md version 6): each K step of
those kernels waits for its own loads. Here the loads run under the products instead:

- a loader warp issues, per work unit, one TMA copy of a [BN, BK] tile of W and one of the
  [BM, BK] tile of x (rows past M are TMA's zeros) into a ring of NS slots, one mbarrier a
  slot, as far ahead as the ring allows;
- one compute warpgroup (the default partition) waits for a slot, issues
  acc[BN, BM] += W_tile @ x_tile^T on the tensor cores (wgmma, the rows of x as the MMA's
  short N side), keeps one MMA in flight and releases the slot of the one before.

Work is split stream-K: the units (column tile, K step), tile-major, are cut into P equal
contiguous ranges, one a program (``programs_for``: a multiple of the column tiles where they
fit the SMs, else the SM count); a program walks its range without a pause between tiles
(the loader runs into the next tile while the MMAs finish the last). A tile wholly inside
one range is stored at once (bias and residual in the epilogue); a tile
cut between ranges is stored by each of its programs as a float32 partial (PART, two slots a
program: its first and its last tile), and after its loop each such program takes a ticket
from the tile's counter (acq_rel, GPU scope, after a barrier of the warpgroup); the one that
draws the last ticket sums the partials in program order (the same bits whichever finishes
last; every partial's load issued at once), runs the epilogue and resets the counter. The
counters are skinny.py's per-device buffer.

PDL (fused._pdl's options): the loader issues the W copies of the first NS units before it
waits for the kernel before (W is this kernel's own, x is that kernel's output), then the x
copies of those units. The compute warpgroup waits first thing, before any global write or
read of another kernel's memory: the residual and bias, but also y and PART (fresh
allocations the kernel before may still be reading) and the ticket counters (shared by every
launch: no kernel touches them before its wait). PDL 2 lets the next kernel launch as soon as
this one has waited.

Served from skinny.mm for the rows of fused.stream_rows and the widths of fused.stream_cols:
by default one row and at most 4096 output columns (o_proj and down_proj of a one-token step:
with the kernels between the products launching their dependents before they wait, the
step's GPU-busy time fell 2.3 % on the H200, NOTES-engine.md version 8; at 17-64 rows it
made the engine slower, version 7; ATTNKIT_STREAM_MM="lo-hi" moves the rows); the GPU tests
(tests/runner/test_stream_mm_gpu.py) check it against float64 on the H200;
benchmarks/bench_skinny.py measures it against cuBLAS and skinny's kernel.
"""
from __future__ import annotations

import functools
import os

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)

LOADER_REGS = 24


@gluon.jit
def _start(p, P, TOTAL):
    """The first unit of program p's range (P ranges over TOTAL units)."""
    return p * TOTAL // P


@gluon.jit
def _owner(u, P, TOTAL):
    """The program whose range holds unit u: the largest p with _start(p) <= u."""
    return ((u + 1) * P - 1) // TOTAL


@gluon.jit
def _gdc_wait():
    gl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def _gdc_launch_dependents():
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _now():
    """The GPU's global nanosecond timer (benchmarks/probe_stream_mm.py's TIMES)."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64,
                                     is_pure=False, pack=1)


@gluon.jit
def _loader(w_desc, x_desc, w_ring, x_ring, ready, free, u0, u1, KSTEPS, BN: gl.constexpr,
            BK: gl.constexpr, NS: gl.constexpr, PDL: gl.constexpr):
    """Units u0 .. u1 - 1 into the ring, slot i % NS for the range's i-th unit, once the
    compute warpgroup has released it. Under PDL the first NS units' W copies go out before
    the wait for the kernel before, their x copies after it (one mbarrier counts both)."""
    n = u1 - u0
    first = 0
    if PDL >= 1:
        first = gl.minimum(n, NS)
        for i in range(first):
            t = (u0 + i) // KSTEPS
            kk = u0 + i - t * KSTEPS
            bar = ready.index(i)
            mbarrier.expect(bar, w_desc.block_type.nbytes + x_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(w_desc, [t * BN, kk * BK], bar, w_ring.index(i))
        _gdc_wait()
        if PDL == 2:
            _gdc_launch_dependents()
        for i in range(first):
            t = (u0 + i) // KSTEPS
            kk = u0 + i - t * KSTEPS
            tma.async_copy_global_to_shared(x_desc, [0, kk * BK], ready.index(i), x_ring.index(i))
    for i in range(first, n):
        t = (u0 + i) // KSTEPS
        kk = u0 + i - t * KSTEPS
        s = i % NS
        mbarrier.wait(free.index(s), ((i // NS) & 1) ^ 1)
        bar = ready.index(s)
        mbarrier.expect(bar, w_desc.block_type.nbytes + x_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [t * BN, kk * BK], bar, w_ring.index(s))
        tma.async_copy_global_to_shared(x_desc, [0, kk * BK], bar, x_ring.index(s))


@gluon.jit
def _epilogue(acc, n0, Y, BIAS, R, M, N, stride_ym, stride_rm, layout: gl.constexpr,
              BN: gl.constexpr, BM: gl.constexpr, HAS_BIAS: gl.constexpr,
              HAS_RESIDUAL: gl.constexpr):
    """y[:, n0 : n0 + BN] = round(acc^T (+ bias)) (+ residual), acc [BN, BM] float32."""
    cols = n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, layout))      # columns of y
    rows = gl.arange(0, BM, layout=gl.SliceLayout(0, layout))           # rows of y
    col_ok = cols < N
    ok = gl.expand_dims(col_ok, 1) & gl.expand_dims(rows < M, 0)
    if HAS_BIAS:
        acc = acc + gl.expand_dims(gl.load(BIAS + cols, mask=col_ok, other=0.0).to(gl.float32), 1)
    y = acc.to(Y.dtype.element_ty)
    if HAS_RESIDUAL:
        r = gl.load(R + gl.expand_dims(rows.to(gl.int64) * stride_rm, 0) + gl.expand_dims(cols, 1),
                    mask=ok, other=0.0)
        y = (y.to(gl.float32) + r.to(gl.float32)).to(Y.dtype.element_ty)
    gl.store(Y + gl.expand_dims(rows.to(gl.int64) * stride_ym, 0) + gl.expand_dims(cols, 1), y,
             mask=ok)


@gluon.jit
def _part_offsets(layout: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr):
    """[BN, BM] offsets of a float32 partial tile, in the accumulator's layout."""
    cols = gl.arange(0, BN, layout=gl.SliceLayout(1, layout))
    rows = gl.arange(0, BM, layout=gl.SliceLayout(0, layout))
    return gl.expand_dims(cols * BM, 1) + gl.expand_dims(rows, 0)


@gluon.jit
def _merge(t, PART, COUNTER, Y, BIAS, R, P, TOTAL, KSTEPS, M, N, stride_ym, stride_rm,
           layout: gl.constexpr, BN: gl.constexpr, BM: gl.constexpr, PIECES: gl.constexpr,
           HAS_BIAS: gl.constexpr, HAS_RESIDUAL: gl.constexpr):
    """Tile t, cut between programs: a ticket; the program with the last one sums the
    partials of programs first .. last in order (a program's slot 0 holds its first tile, slot
    1 its last; PIECES bounds last - first + 1, so every load is issued at once), stores the
    tile and resets the counter."""
    counter = COUNTER + t
    ticket = gl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    first = _owner(t * KSTEPS, P, TOTAL)
    last = _owner((t + 1) * KSTEPS - 1, P, TOTAL)
    if ticket == last - first:
        offs = _part_offsets(layout, BN, BM)
        total = gl.zeros([BN, BM], gl.float32, layout)
        for q in gl.static_range(PIECES):
            p = first + q
            slot = (_start(p, P, TOTAL) < t * KSTEPS).to(gl.int32)
            total += gl.load(PART + (p * 2 + slot).to(gl.int64) * (BN * BM) + offs,
                             mask=(offs >= 0) & (p <= last), other=0.0, cache_modifier=".cg")
        _epilogue(total, t * BN, Y, BIAS, R, M, N, stride_ym, stride_rm, layout, BN, BM,
                  HAS_BIAS, HAS_RESIDUAL)
        gl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")


@gluon.jit
def _compute(w_ring, x_ring, ready, free, Y, BIAS, R, PART, COUNTER, u0, u1, P, TOTAL, KSTEPS,
             M, N, stride_ym, stride_rm, TIMES, BN: gl.constexpr, BM: gl.constexpr,
             NS: gl.constexpr, PIECES: gl.constexpr, HAS_BIAS: gl.constexpr,
             HAS_RESIDUAL: gl.constexpr, PDL: gl.constexpr, TIMING: gl.constexpr):
    """The program's tiles in order: each tile's units through the ring (one MMA in flight),
    then the tile stored, or its partial; the cut tiles merged after the loop. TIMING (a
    probe): the global timer at the start, at the first unit's arrival, after the loop and
    at the end, into TIMES [P, 4]."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, BM, 16])
    pid = gl.program_id(0)
    if TIMING:
        gl.store(TIMES + pid * 4, _now())
    t_first = u0 // KSTEPS
    t_last = (u1 - 1) // KSTEPS
    if PDL >= 1:
        _gdc_wait()         # before any global access: y, PART, the counters, residual, bias
    g = 0
    for t in range(t_first, t_last + 1):
        a = gl.maximum(u0, t * KSTEPS)
        b = gl.minimum(u1, (t + 1) * KSTEPS)
        acc = gl.zeros([BN, BM], gl.float32, layout)
        for j in range(b - a):
            s = (g + j) % NS
            mbarrier.wait(ready.index(s), ((g + j) // NS) & 1)
            if TIMING:
                if g + j == 0:
                    gl.store(TIMES + pid * 4 + 1, _now())
            acc = warpgroup_mma(w_ring.index(s), x_ring.index(s).permute((1, 0)), acc,
                                is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=[acc])
            mbarrier.arrive(free.index((g + j + NS - 1) % NS), count=1, pred=j > 0)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=[acc])
        g += b - a
        mbarrier.arrive(free.index((g + NS - 1) % NS), count=1)
        if (a == t * KSTEPS) & (b == (t + 1) * KSTEPS):
            _epilogue(acc, t * BN, Y, BIAS, R, M, N, stride_ym, stride_rm, layout, BN, BM,
                      HAS_BIAS, HAS_RESIDUAL)
        else:
            slot = (t != t_first).to(gl.int32)
            gl.store(PART + (pid * 2 + slot).to(gl.int64) * (BN * BM)
                     + _part_offsets(layout, BN, BM), acc)
    if TIMING:
        gl.store(TIMES + pid * 4 + 2, _now())
    gl.thread_barrier()         # every thread's partial stores before the tickets
    first_cut = (u0 != t_first * KSTEPS) | (u1 < (t_first + 1) * KSTEPS)
    if first_cut:
        _merge(t_first, PART, COUNTER, Y, BIAS, R, P, TOTAL, KSTEPS, M, N, stride_ym, stride_rm,
               layout, BN, BM, PIECES, HAS_BIAS, HAS_RESIDUAL)
    if (t_last != t_first) & (u1 != (t_last + 1) * KSTEPS):
        _merge(t_last, PART, COUNTER, Y, BIAS, R, P, TOTAL, KSTEPS, M, N, stride_ym, stride_rm,
               layout, BN, BM, PIECES, HAS_BIAS, HAS_RESIDUAL)
    if TIMING:
        gl.store(TIMES + pid * 4 + 3, _now())


@gluon.jit
def _stream_mm_kernel(w_desc, x_desc, Y, BIAS, R, PART, COUNTER, M, N, P, TOTAL, KSTEPS,
                      stride_ym, stride_rm, TIMES, BN: gl.constexpr, BK: gl.constexpr,
                      BM: gl.constexpr, NS: gl.constexpr, PIECES: gl.constexpr,
                      HAS_BIAS: gl.constexpr, HAS_RESIDUAL: gl.constexpr, PDL: gl.constexpr,
                      LOADER_REGS: gl.constexpr, TIMING: gl.constexpr = False):
    """Grid (P,): program p runs units _start(p) .. _start(p + 1) - 1 of TOTAL = column tiles
    x KSTEPS. w_desc: W [N, K] in [BN, BK] blocks; x_desc: x [M, K] in [BM, BK] blocks."""
    pid = gl.program_id(0)
    u0 = _start(pid, P, TOTAL)
    u1 = _start(pid + 1, P, TOTAL)
    w_ring = gl.allocate_shared_memory(w_desc.dtype, [NS, BN, BK], w_desc.layout)
    x_ring = gl.allocate_shared_memory(x_desc.dtype, [NS, BM, BK], x_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    free = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(NS):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(free.index(s), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (_compute, (w_ring, x_ring, ready, free, Y, BIAS, R, PART, COUNTER, u0, u1, P, TOTAL,
                    KSTEPS, M, N, stride_ym, stride_rm, TIMES, BN, BM, NS, PIECES, HAS_BIAS,
                    HAS_RESIDUAL, PDL, TIMING)),
        (_loader, (w_desc, x_desc, w_ring, x_ring, ready, free, u0, u1, KSTEPS, BN, BK, NS,
                   PDL)),
    ], [1], [LOADER_REGS])


# ---------------------------------------------------------------------------------------------
# Host side

MAX_ROWS = 128                   # BM <= 128: the accumulator [BN, BM] in one warpgroup


def tile(bm: int) -> tuple[int, int, int]:
    """(BN, BK, NS) at BM padded rows: 64 columns of W a tile (one wgmma M side), 128 of K a
    step, six slots to 64 rows (6 x (16 KB of W + 16 KB of x) = 192 KB), four at 128. The
    fastest of bench_skinny's stream forms at 32 and 64 rows (session 1203d call 3, with PDL
    2: 128-column tiles, stream-K over every SM and no PDL all slower; NOTES-engine.md
    version 7)."""
    return (64, 128, 6) if bm <= 64 else (64, 128, 4)


@functools.lru_cache(maxsize=256)
def _pieces(total: int, programs: int, ksteps: int) -> int:
    """The most programs any column tile is cut between (1: no tile is cut, no partials)."""
    owner = lambda u: ((u + 1) * programs - 1) // total          # noqa: E731 (the kernel's)
    return max(owner(t + ksteps - 1) - owner(t) + 1 for t in range(0, total, ksteps))


def programs_for(tiles: int, sms: int) -> int:
    """The stream-K ranges: with no more column tiles than SMs, a whole multiple of the tiles
    (each tile cut into the same number of equal pieces, the fewest partials a merge sums:
    cut tiles' merges were the launch's tail, probe_stream_mm in session 1203d's call 2);
    otherwise one range an SM."""
    return tiles * (sms // tiles) if tiles <= sms else sms


def ready(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether this kernel can run x @ weight^T: Triton 3.6 (Gluon) on sm_90, not the
    interpreter, 16-bit 2-D x and weight of one dtype, 1..MAX_ROWS rows, K and N > 0, both
    16-byte aligned with dense last dims and row strides of whole 16 bytes (TMA's
    conditions; x's rows not broadcast)."""
    import triton

    from attnkit.backends.triton.gluon_host import device_facts
    if (not triton.__version__.startswith("3.6.") or not x.is_cuda
            or os.environ.get("TRITON_INTERPRET", "0") == "1"):
        return False
    if device_facts(x.device)[0] != (9, 0):
        return False
    return (x.dtype in (torch.float16, torch.bfloat16) and weight.dtype == x.dtype
            and x.dim() == 2 and weight.dim() == 2 and 0 < x.shape[0] <= MAX_ROWS
            and x.shape[1] > 0 and weight.shape[0] > 0 and x.stride(-1) == 1
            and x.stride(0) > 0 and weight.stride(-1) == 1 and x.data_ptr() % 16 == 0
            and weight.data_ptr() % 16 == 0 and (x.stride(0) * 2) % 16 == 0
            and (weight.stride(0) * 2) % 16 == 0)


def mm(x: torch.Tensor, weight: torch.Tensor, *, bias: torch.Tensor | None = None,
       residual: torch.Tensor | None = None, counters: torch.Tensor, programs: int | None = None,
       tiles: tuple[int, int, int] | None = None, pdl: dict | None = None,
       out: torch.Tensor | None = None, maxnreg: int | None = None,
       times: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight^T (+ bias) (+ residual) -> [M, N] in x's dtype; the caller checked ``ready``.

    counters: int32, zero, at least one per column tile (skinny's buffer); programs: the
    stream-K ranges (default ``programs_for``); tiles: (BN, BK, NS) instead of ``tile``'s;
    pdl: fused._pdl's launch options; out: an [M, N] tensor of x's dtype to write; maxnreg:
    registers a thread (128: two programs an SM where the ring leaves room); times: an int64
    [P, 4] tensor for the TIMING probe's timestamps (benchmarks/probe_stream_mm.py)."""
    from attnkit.backends.triton.gluon_host import device_facts, matrix_descriptor
    m, k = x.shape
    n = weight.shape[0]
    y = out if out is not None else torch.empty(m, n, dtype=x.dtype, device=x.device)
    bm = max(16, 1 << (m - 1).bit_length())          # arange's power of two
    bn, bk, ns = tiles or tile(bm)
    col_tiles, ksteps = -(-n // bn), -(-k // bk)
    total = col_tiles * ksteps
    p = max(1, min(programs or programs_for(col_tiles, device_facts(x.device)[1]), total))
    pieces = _pieces(total, p, ksteps)
    part = y.new_empty(2 * p * bn * bm, dtype=torch.float32) if pieces > 1 else y
    r = residual if residual is not None else y
    _stream_mm_kernel[(p,)](
        matrix_descriptor(weight, bn, bk), matrix_descriptor(x, bm, bk), y,
        bias if bias is not None else y, r, part, counters, m, n, p, total, ksteps, y.stride(0),
        r.stride(0), times if times is not None else counters, TIMING=times is not None,
        PIECES=pieces, BN=bn, BK=bk, BM=bm, NS=ns, HAS_BIAS=bias is not None,
        HAS_RESIDUAL=residual is not None, LOADER_REGS=LOADER_REGS, num_warps=4,
        **(pdl or {"PDL": 0}), **({"maxnreg": maxnreg} if maxnreg else {}))
    return y

"""A weight read into L2 ahead of its product, while kernels that leave the DRAM idle run.

In a decode step at small batch the attention between the qkv and o products reads a few
hundred KB of K/V at ctx 128 and runs ~8 µs a layer (benchmarks/NOTES-engine.md, the step's
profile), time in which the DRAM could have delivered most of o_proj's 33.5 MB (Llama-3-8B
shape). ``start`` launches, on a side stream forked from the current one, a kernel that only
issues ``prefetch.global.L2`` for every 128-byte line of the weight; ``finish`` joins it back
before the product that reads the weight. Nothing is written: results are bitwise the same
with it or without, only the order in which the DRAM is read changes.

Where it is switched on, it runs only where it could pay: on CUDA (not the Triton interpreter), while a CUDA graph is
being captured (in eager steps the fork, the join and one more launch cost host time that a
host-bound step does not have), for a dense weight: all of it, or as much of its start as
fills ``L2_SHARE`` of the L2. ATTNKIT_L2_PREFETCH
picks the mode: ``0`` off, ``1`` plain prefetches, ``last`` with the evict-last hint (the lines
stay while the attention streams its K/V through L2); ``auto`` (the default) is ``DEFAULT``
for steps of at most ``MAX_ROWS`` rows and off above. ``DEFAULT`` is off: measured slower.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from attnkit.runner.layers import fused

MODES = {"0": 0, "1": 1, "last": 2}
# Off: on the H200 the prefetch made the step slower (bench_prefetch, results/session-1203b/c3,
# four rounds interleaved, median tok/s at B=1 off 223.5, plain 221, evict-last 216; at B=64
# 11,330 / 11,100 / 11,013): the products read o_proj ~1 µs a layer faster, but the attention
# and rope under the prefetch's DRAM traffic ran ~3 µs a layer slower (NOTES-engine.md v5).
DEFAULT = 0
MAX_ROWS = 64
L2_SHARE = 0.75       # of the L2 a prefetch may fill
LINE = 128            # bytes a prefetch covers
BLOCK = 1024          # lines a program covers (8 a thread at 4 warps)

_SIDE: dict[int, torch.cuda.Stream] = {}


@triton.jit
def _l2_prefetch_kernel(P, LINES, BLOCK: tl.constexpr, LAST: tl.constexpr):
    """Program p: prefetch lines [p*BLOCK, (p+1)*BLOCK) of P (a byte pointer) into L2; the
    last program's overhang repeats the last line (the instruction has no mask)."""
    i = tl.minimum(tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), LINES - 1)
    addr = P + i.to(tl.int64) * 128
    if LAST:
        tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1];", "=r,l", [addr],
                                  dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];", "=r,l", [addr],
                                  dtype=tl.int32, is_pure=False, pack=1)


def mode(rows: int) -> int:
    """The mode for a step of ``rows`` rows, before the device checks: ATTNKIT_L2_PREFETCH
    (0, 1, last; anything else reads as auto)."""
    raw = os.environ.get("ATTNKIT_L2_PREFETCH", "auto")
    if raw in MODES:
        return MODES[raw]
    return DEFAULT if rows <= MAX_ROWS else 0


def extent(weight: torch.Tensor) -> int:
    """Bytes of ``weight`` to prefetch, from its start: all of it up to ``L2_SHARE`` of the
    L2 (the Llama-3-8B o_proj, 33.5 MB, whole in the H200's 50 MiB), else that share: the
    product's first programs read the first rows (skinny.py; cuBLAS's tiles too, in order)."""
    l2 = torch.cuda.get_device_properties(weight.device).L2_cache_size
    return min(weight.numel() * weight.element_size(), int(l2 * L2_SHARE))


def wanted(weight: torch.Tensor, rows: int) -> int:
    """``mode`` where the prefetch can run and pay (module docstring), else 0. The mode is
    asked first: off (the default), a layer's step pays for nothing more."""
    how = mode(rows)
    if not (how and weight.is_cuda and fused.enabled(weight) and weight.is_contiguous()
            and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
            and torch.cuda.is_current_stream_capturing()):
        return 0
    return how


def launch(weight: torch.Tensor, last: bool, nbytes: int | None = None) -> None:
    """The prefetch kernel over ``weight``'s first ``nbytes`` (default ``extent``), on the
    current stream."""
    lines = triton.cdiv(extent(weight) if nbytes is None else nbytes, LINE)
    _l2_prefetch_kernel[(triton.cdiv(lines, BLOCK),)](
        weight.view(-1).view(torch.uint8), lines, BLOCK=BLOCK, LAST=last, num_warps=4)


def start(weight: torch.Tensor, rows: int) -> torch.cuda.Stream | None:
    """Fork a side stream from the current one and prefetch ``weight`` there; the handle for
    ``finish`` (None where ``wanted`` says no: nothing launched)."""
    how = wanted(weight, rows)
    if not how:
        return None
    main = torch.cuda.current_stream(weight.device)
    side = _SIDE.get(weight.device.index)
    if side is None:
        side = _SIDE[weight.device.index] = torch.cuda.Stream(weight.device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        launch(weight, how == 2)
    return side


def finish(side: torch.cuda.Stream | None) -> None:
    """Join ``start``'s side stream into the current one (before the product that reads the
    weight: a captured graph must join every stream it forked)."""
    if side is not None:
        torch.cuda.current_stream().wait_stream(side)

"""Issue 28's B=16 decode rows (d128, ctx 1k / 4k / 32k), third sweep: the stream variant
(decode_stream.py: one program a (request, KV head), a TMA ring; NOTES-triton.md version 7)
in its tiles, next to the plan's choice, split_merge and split_heads, by sweep_decode.py's
method and code (``run_row``: cuDNN and flash SDPA in the same process, CUDA-graph replays,
L2 flushed; every candidate checked against SDPA before it is timed), plus guard rows B=1,
B=64 and B=128 so a default that helps B=16 is seen not to slow them.

    PYTHONPATH=src python3 benchmarks/sweep_decodeb16.py --only ROW[,ROW] [--out DIR] [--warm]
    PYTHONPATH=src python3 benchmarks/sweep_decodeb16.py --table [--out DIR]
    VERIFY=1 ...: version 8's candidates (the EARLY prologue next to the adopted tile)

Results merge into DIR/sweep_decode.json (``--table``: DIR/sweep_decode.md), as sweep_decode.py's.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import sweep_decode  # noqa: E402
from sweep_decode import candidate_sweep, t  # noqa: E402

sweep_decode.TARGETS.setdefault("b128-4k", (128, 4096, 32, 128))
sweep_decode.TARGETS.setdefault("b16-4k-d64", (16, 4096, 32, 64))
ST, SM, SP, SH = "stream", "split_merge", "split", "split_heads"
B16 = ("b16-1k", "b16-4k", "b16-32k")
GUARDS = ("b1-1k", "b1-32k", "b64-4k", "b128-4k", "b16-4k-d64", "d64")
UNFUSED = dict(FUSED_WRITE=False)


def s(bn, ns, **switches):
    """A stream tile: BLOCK_N keys, NUM_STAGES ring slots, switches (FUSED_WRITE, maxnreg)."""
    return dict(BLOCK_N=bn, NUM_STAGES=ns, **switches)


def candidates(row: str) -> list[tuple[str, int | None, dict]]:
    """(variant, splits or None for the rule, config override), most likely first. Shared
    memory a program (static compile, Triton 3.6, sm_90, d128): Q 16 KB + NS x BN x 512 B:
    (64, 4) 144 KB, (128, 3) 208 KB, (32, 8) 144 KB, (64, 6) 208 KB, (64, 2) 80 KB; 255
    registers at 8 warps (one program an SM) unless maxnreg=128 (two an SM at 80 KB). d64:
    (128, 4) 136 KB, (64, 4) 72 KB (two an SM with maxnreg=128)."""
    two = s(64, 2, maxnreg=128)
    if os.environ.get("VERIFY"):        # version 8: the EARLY prologue against the adopted tile
        early = dict(EARLY=True)
        rows = [(ST, None, {}), (ST, None, early), (ST, None, two), (ST, None, two | early)]
        if os.environ.get("NO_EARLY"):  # its smoke test hung (gpu_decodeb16_verify.sh)
            rows = [r for r in rows if not r[2].get("EARLY")]
        return rows
    if os.environ.get("NO_STREAM"):     # the stream smoke test hung (gpu_decodeb16.sh)
        return [(SM, None, t(32, 4, 5))] if row not in GUARDS else []
    if row in ("d64", "b16-4k-d64"):      # d64's default (128, 4): 128 KB in flight, as d128's
        return [(ST, None, {}), (ST, None, s(64, 4)), (ST, None, s(64, 4, maxnreg=128)),
                (ST, None, UNFUSED)]
    if row in GUARDS:
        return [(ST, None, {}), (ST, None, UNFUSED), (ST, None, two), (ST, None, s(64, 4, maxnreg=128))]
    return [(ST, None, {}), (ST, None, UNFUSED), (ST, None, s(128, 3)), (ST, None, s(32, 8)),
            (ST, None, s(64, 6)), (ST, None, two), (ST, 2, two), (ST, None, s(128, 3, **UNFUSED)),
            (ST, 2, {}), (SM, None, t(32, 4, 5)), (SH, None, {})]


def main():
    candidate_sweep(candidates, B16, GUARDS, budget_s=8.0, guard_budget_s=4.0)


if __name__ == "__main__":
    main()

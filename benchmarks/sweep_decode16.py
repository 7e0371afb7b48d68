"""Issue 28's B=16 decode rows (d128, ctx 1k / 4k / 32k), second sweep: the candidates the
structure predicts (NOTES-triton.md version 6; variant split_heads among them), by
sweep_decode.py's method and code (its
``run_row``: cuDNN and flash SDPA in the same process, each candidate checked against SDPA
before it is timed, the plan and the three fastest timed twice), plus the guard rows (B=1,
B=64) with the same launch shapes, so an adopted tile is seen not to slow them.

    PYTHONPATH=src python3 benchmarks/sweep_decode16.py --only ROW[,ROW] [--out DIR] [--warm]
    PYTHONPATH=src python3 benchmarks/sweep_decode16.py --table [--out DIR]

Results merge into DIR/sweep_decode.json (``--table``: DIR/sweep_decode.md), as sweep_decode.py's.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from sweep_decode import candidate_sweep, t  # noqa: E402

P2, P4 = dict(PACK=2), dict(PACK=4)
R128 = dict(maxnreg=128)        # a register cap: 4 programs of 4 warps an SM (64K registers)
SM, SW, SP, SH = "split_merge", "split_write", "split", "split_heads"
B16 = ("b16-1k", "b16-4k", "b16-32k")
GUARDS = {"b1-1k": (SM, SW), "b1-32k": (SW, SM), "b64-1k": (SP, SM), "b64-4k": (SP, SM)}


def candidates16(row: str) -> list[tuple[str, int | None, dict]]:
    """(variant, splits or None for the rule, config override), most likely first. Programs
    an SM (static_decode.py, split_merge's form, Triton 3.6): default (64, 4, 4) 145 registers,
    3; (32, 4, 5) 128, 4; (16, 4, 8) 128, 4 with three K/V buffers; (64, 4, 4) capped at 128
    registers (maxnreg) 4, 24 bytes spilled; PACK 2 (16, 4, 5) 143, 3; (32, 4, 4) 168, 3;
    (32, 4, 5) 181, 2; PACK 4 (16, 4, 5) 220, 2. Explicit split counts keep every program
    resident (B=16: 16 x 8 / PACK (request, KV-head group) pairs). split_heads (decode_heads.py):
    202 registers at 8 warps, one program an SM, (16, 8, 5) two page buffers (164 KB shared),
    (32, 8, 3) / (16, 8, 3) one; 8 splits: 128 programs, one wave at B=16."""
    if row in GUARDS:
        first, second = GUARDS[row]
        return [(first, None, {}), (SH, None, {}), (first, None, t(16, 4, 8)),
                (first, None, t(64, 4, 4, **R128)), (first, None, t(16, 4, 5, **P2)),
                (second, None, t(16, 4, 8)), (first, None, t(32, 4, 4, **P2)), (SH, None, t(32, 8, 3))]
    return [
        (SM, None, {}), (SM, None, t(32, 4, 5)),
        (SH, None, {}), (SH, None, t(32, 8, 3)), (SH, None, t(16, 8, 3)), (SH, 4, {}),
        (SM, None, t(16, 4, 8)), (SM, 4, t(16, 4, 8)),
        (SM, 4, t(64, 4, 4, **R128)), (SM, None, t(64, 4, 4, **R128)),
        (SM, 6, t(16, 4, 5, **P2)), (SM, None, t(16, 4, 5, **P2)), (SM, 6, t(32, 4, 4, **P2)),
        (SM, 4, t(32, 4, 5, **P2)), (SM, 8, t(16, 4, 5, **P4)), (SM, 4, t(32, 8, 4, **P4)),
        (SP, 4, {}), (SW, 4, t(64, 4, 4, **R128)), (SW, None, t(16, 4, 8)),
        (SM, 4, t(32, 4, 5)),
    ]


def main():
    candidate_sweep(candidates16, B16, tuple(GUARDS), budget_s=15.0, guard_budget_s=6.0)


if __name__ == "__main__":
    main()

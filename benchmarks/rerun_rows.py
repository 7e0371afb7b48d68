"""Run one part of a bench_triton.py tree again: its prefill/extend rows only (the part where
issue 24's comparison moved), by that tree's own code, into ``OUT/bench_triton.json``.

    PYTHONPATH=ROOT/src python3 benchmarks/rerun_rows.py ROOT --out DIR

ROOT: a tree holding benchmarks/bench_triton.py (this checkout, or .prev/ for the previous
default). Same timing, peers and row format as that tree's bench_triton.py (its ``prefill_rows``
and ``ceilings``), so compare_defaults.py reads the output like a whole run's.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(args.root, "benchmarks"))
    bench = importlib.import_module("bench_triton")
    import torch
    torch.manual_seed(0)
    ceil, rows = bench.ceilings(), []
    bench.prefill_rows(argparse.Namespace(quick=False, sweep=False), ceil, rows, {})
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_triton.json"), "w") as f:
        json.dump({"environment": bench.environment(), "ceilings": ceil, "rows": rows,
                   "part": "prefill_rows", "root": args.root}, f, indent=1, default=str)
    for r in rows:
        print(r.get("kind"), r.get("prefix"), r.get("new"), r.get("head_dim"), r.get("attnkit"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

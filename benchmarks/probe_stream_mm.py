"""Where the time of layers/stream_mm.py's product goes (issue 28, session 2026-12-03d): at 64
rows bench_skinny measured it far under cuBLAS with a marginal rate near the copy rate, i.e.
a large fixed cost a launch. Two readings, one process, H200:

1. torch.profiler over a CUDA graph of L products in a row (bench_skinny's method): each
   kernel's duration and the idle gap before it, medians, for cuBLAS, skinny's rule and
   stream_mm's forms (its tile, 64-column tiles, one program a column tile: no cut tiles).
2. The kernel's TIMING probe in the same kind of graph: per program the global timer at its
   start, at its first unit's arrival, after its loop and at its end; reported as medians
   over programs of the phases and the launch's first start to last end.

    PYTHONPATH=src python3 benchmarks/probe_stream_mm.py [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import environment, graphed  # noqa: E402

from attnkit.runner.layers import skinny, stream_mm  # noqa: E402

SHAPES = {"o": (4096, 4096), "down": (4096, 14336), "gate_up": (28672, 4096)}


def forms(n: int, sms: int) -> dict:
    """stream_mm's default (programs_for's ranges), 64-column tiles, one range an SM (call 2:
    the tail of cut tiles' merges) and one program a 64-column tile (no cut tiles)."""
    tiles64 = -(-n // 64)
    return {"cublas": None, "skinny": "skinny", "stream": dict(),
            "stream 64-col": dict(tiles=(64, 128, 6)),
            "stream an SM": dict(programs=sms),
            "stream whole tiles": dict(tiles=(64, 128, 6), programs=min(tiles64, sms))}


def run(form, x, w):
    if form is None:
        return torch.mm(x, w.t())
    if form == "skinny":
        return skinny.mm(x, w, cfg=skinny.config(x.shape[0], w.shape[0]))
    return stream_mm.mm(x, w, counters=skinny.counters(x.device), **form)


def profile(fn, steps: int = 3) -> list:
    from torch.profiler import ProfilerActivity, profile as prof
    fn()
    torch.cuda.synchronize()
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    ev = sorted((e for e in p.events() if e.device_type.name == "CUDA" and "emcpy" not in e.name),
                key=lambda e: e.time_range.start)
    return [(e.name, e.time_range.start, e.time_range.end) for e in ev]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--m", type=int, default=64)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    report = {"environment": environment(), "m": args.m, "rows": []}
    for name, (n, k) in SHAPES.items():
        copies = max(2, -(-(512 << 20) // (n * k * 2)))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5 for _ in range(copies)]
        x = torch.randn(args.m, k, device="cuda", dtype=torch.bfloat16)
        for label, form in forms(n, sms).items():
            run(form, x, ws[0])
            graph_fn, note = graphed(lambda: [run(form, x, w) for w in ws])
            ev = profile(graph_fn)
            durs = [(b - a) for _, a, b in ev]
            gaps = [ev[i][1] - ev[i - 1][2] for i in range(1, len(ev))]
            row = {"shape": name, "form": label, "kernels": len(ev), "note": note,
                   "dur_us": statistics.median(durs), "gap_us": statistics.median(gaps),
                   "gbs": n * k * 2 / (statistics.median(durs) * 1e3)}
            if form not in (None, "skinny"):
                bn = (form.get("tiles") or stream_mm.tile(64))[0]
                p = min(form.get("programs") or stream_mm.programs_for(-(-n // bn), sms),
                        -(-n // bn) * -(-k // 128))
                times = torch.zeros(len(ws), p, 4, dtype=torch.int64, device="cuda")
                tf, _ = graphed(lambda: [stream_mm.mm(x, w, counters=skinny.counters(x.device),
                                                      times=times[i], **form)
                                         for i, w in enumerate(ws)])
                tf()
                torch.cuda.synchronize()
                t = times[1:-1] if len(ws) > 2 else times
                t = t.double() / 1e3                    # µs; the chain's inner launches
                t0, t1, t2, t3 = t.unbind(-1)
                med = lambda v: statistics.median(v.flatten().tolist())  # noqa: E731
                row.update(first_data_us=med(t1 - t0), loop_us=med(t2 - t1), merge_us=med(t3 - t2),
                           start_skew_us=med(t0.max(1).values - t0.min(1).values),
                           span_us=med(t3.max(1).values - t0.min(1).values),
                           end_skew_us=med(t3.max(1).values - t3.min(1).values),
                           launch_gap_us=med(t0[1:].min(1).values - t3[:-1].max(1).values)
                           if len(t) > 1 else None,
                           end_us=[round(v, 2) for v in (t3[0] - t0[0].min()).tolist()])
            report["rows"].append(row)
            print(json.dumps(row))
        del ws
        torch.cuda.empty_cache()
    with open(os.path.join(args.out, "probe_stream_mm.json"), "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

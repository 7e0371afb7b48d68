"""The decode GEMMs of a Llama-3-8B-shaped step, cuBLAS (torch.mm) against the runner's
few-row Triton kernel (attnkit.runner.layers.skinny) at each of its launch configurations and,
on sm_90, the warp-specialised Gluon product (layers/stream_mm.py) at its tiles.

    PYTHONPATH=src python3 benchmarks/bench_skinny.py [--out DIR] [--ms 1,2,4,8,16,32,64]

Per (weight shape, M): L copies of the weight (together over 8 times the L2) are multiplied
one after another by the same x [M, K] inside one CUDA graph, as a model's layers follow each
other, so every product reads its weight from DRAM; the replay is timed (attnkit's timing
method: median of CUDA-event timings), and rate = weight bytes / (time / L), in GB/s, next to
the copy rate of the same run (bytes read + written). Each kernel's output is checked against
torch.mm's first (max abs error relative to max |y|). Writes bench_skinny.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import copy_bandwidth_gbs, environment, graphed, time_ms  # noqa: E402

from attnkit.runner.layers import stream_mm  # noqa: E402
from attnkit.runner.layers.skinny import Config, config, counters, mm  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
          "down": (4096, 14336), "lm_head": (128256, 4096)}
DOT = [Config(True, bn, bk, w, s) for bn, bk, w, s in
       [(16, 256, 4, 4), (16, 512, 4, 3), (16, 128, 4, 6), (32, 256, 4, 4), (32, 128, 4, 5),
        (64, 128, 4, 4), (64, 256, 8, 3)]]
FMA = [Config(False, bn, bk, w, s) for bn, bk, w, s in
       [(16, 256, 4, 2), (8, 512, 4, 2), (32, 128, 4, 2), (16, 512, 8, 2), (4, 1024, 4, 2)]]
# split-K (the last program of a column tile merges): one-row forms and the tensor-core tiles
# for 17-128 rows, where a column tile per program leaves SMs idle or the waves ragged
FMA_SPLIT = [Config(False, bn, bk, w, s, sp) for bn, bk, w, s, sp in
             [(8, 512, 4, 2, 2), (16, 512, 4, 2, 2), (16, 256, 4, 2, 4), (32, 256, 4, 2, 4)]]
DOT_SPLIT = [Config(True, bn, bk, w, s, sp) for bn, bk, w, s, sp in
             [(64, 128, 4, 4, 2), (64, 128, 4, 4, 4), (64, 64, 4, 6, 2), (64, 64, 4, 6, 4),
              (128, 128, 8, 4, 2), (128, 128, 8, 4, 4), (128, 64, 4, 5, 2), (128, 64, 4, 5, 4),
              (128, 128, 8, 3, 1), (64, 256, 4, 3, 2), (32, 256, 4, 4, 2)]]
# wider column tiles read x (from L2) fewer times a weight byte (1203c c1: at 64 rows x's
# share is what the 64-column tiles lose to); split K to give the few tiles SMs
WIDE = [Config(True, 256, 64, 8, s, sp) for s, sp in
        [(4, 1), (4, 2), (4, 4), (4, 8), (3, 4)]] + [Config(True, 128, 128, 8, 3, sp) for sp in (2, 4)]


# stream_mm: ((BN, BK, NS), ranges, PDL); ranges 0: stream_mm.programs_for's (a multiple of
# the column tiles), 1: one an SM (stream-K over every SM; call 1 also timed two an SM at 128
# registers: slower); PDL 2: each product of the graph's chain a programmatic dependent of the one
# before, its first W tiles loaded while that one drains. (Session 1203d call 1 measured one
# range an SM everywhere: far slower than cuBLAS, the cut tiles' merges the tail.)
STREAM = [((128, 128, 4), 0, 0), ((64, 128, 6), 0, 0), ((64, 128, 4), 0, 0),
          ((128, 128, 4), 1, 0), ((64, 128, 6), 1, 0), ((128, 128, 4), 0, 2),
          ((64, 128, 6), 0, 2)]
# below 16 rows (x padded to 16 by TMA's zeros), all under PDL 2 as the engine launches one
# row: deeper rings, wider tiles, and a fourth field: registers a thread (128: room on the SM
# for the norm / rope kernels that the engine runs between the products, or two programs)
STREAM_FEW = [((64, 128, 6), 0, 2), ((64, 128, 8), 0, 2), ((128, 128, 4), 0, 2),
              ((64, 128, 6), 1, 2), ((64, 128, 4), 0, 2, 128), ((64, 128, 6), 0, 2, 128)]


def candidates(m: int, args) -> list:
    """The configurations timed at m rows: --configs old (the 1202f set), split, wide (256-
    and 128-column tiles at 32-64 rows), stream (stream_mm's), or all."""
    old = DOT + (FMA if m <= 4 else [])
    new = (FMA_SPLIT if m == 1 else []) + (DOT_SPLIT if m > 1 else [])
    wide = WIDE if 32 <= m <= 64 else []
    stream = [c for c in STREAM if c[0][0] * max(16, m) <= 8192] if m >= 16 else STREAM_FEW
    return {"old": old, "split": new, "wide": wide, "stream": stream,
            "all": old + new + wide + stream}[args.configs]
TOTAL_BYTES = 512 << 20


def label(cfg) -> str:
    if not isinstance(cfg, Config):
        (bn, bk, ns), per_sm, pdl, *regs = cfg
        ranges = ", an SM" if per_sm else ""
        regs = f", {regs[0]} regs" if regs else ""
        return f"stream ({bn}, {bk}, s{ns}{ranges}{', pdl' if pdl else ''}{regs})"
    split = f", k/{cfg.split}" if cfg.split > 1 else ""
    return (f"{'dot' if cfg.dot else 'fma'} ({cfg.block_n}, {cfg.block_k}, w{cfg.num_warps}, "
            f"s{cfg.num_stages}{split})")


def product(x, w, cfg):
    """x @ w^T by ``cfg``: a skinny Config, or a STREAM entry."""
    if isinstance(cfg, Config):
        return mm(x, w, cfg=cfg)
    tiles, per_sm, pdl, *regs = cfg
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    return stream_mm.mm(x, w, counters=counters(x.device), tiles=tiles,
                        programs=per_sm * sms if per_sm else None,
                        pdl={"PDL": pdl, "launch_pdl": True} if pdl else None,
                        maxnreg=regs[0] if regs else None)


def rate(fn, weights, nbytes: int) -> float:
    run, note = graphed(lambda: [fn(w) for w in weights])
    if note is not None:            # timed eagerly, launches included: not this table's method
        raise RuntimeError(f"did not capture: {note}")
    ms = time_ms(run, warmup=3, reps=20)
    return nbytes * len(weights) / (ms / 1e3) / 1e9


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--ms", default="1,2,4,8,16,32,64")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--budget-s", type=float, default=240)
    p.add_argument("--configs", choices=("old", "split", "wide", "stream", "all"), default="all")
    args = p.parse_args(argv)
    unknown = set(args.shapes.split(",")) - set(SHAPES)
    if unknown:
        p.error(f"unknown shape(s) {', '.join(sorted(unknown))}; known: {', '.join(SHAPES)}")
    if not torch.cuda.is_available():
        print("bench_skinny needs a CUDA GPU", file=sys.stderr)
        return 2
    start = time.time()
    torch.manual_seed(0)
    report = {"environment": environment(), "copy_gbs": copy_bandwidth_gbs(), "rows": []}
    path = os.path.join(args.out, "bench_skinny")
    for name in args.shapes.split(","):
        if time.time() - start > args.budget_s:
            break
        n, k = SHAPES[name]
        nbytes = n * k * 2
        copies = max(2, -(-TOTAL_BYTES // nbytes))
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
                   for _ in range(copies)]
        for m in (int(v) for v in args.ms.split(",")):
            if time.time() - start > args.budget_s:
                break
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            want = torch.mm(x, weights[0].t())
            row = {"shape": name, "n": n, "k": k, "m": m, "copies": copies,
                   "cublas_gbs": rate(lambda w: torch.mm(x, w.t()), weights, nbytes), "kernels": []}
            row["rule"] = label(config(m, n))
            rule = config(m, n)
            cfgs = candidates(m, args)
            if not stream_mm.ready(x, weights[0]):
                cfgs = [c for c in cfgs if isinstance(c, Config)]
            for cfg in ([rule] if rule not in cfgs else []) + cfgs:
                if time.time() - start > args.budget_s:
                    break
                try:
                    got = product(x, weights[0], cfg)
                    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
                    gbs = rate(lambda w: product(x, w, cfg), weights, nbytes)
                    row["kernels"].append({"config": label(cfg), "gbs": gbs, "rel_err": err})
                except Exception as exc:  # noqa: BLE001 -- a config that fails to build is a row
                    row["kernels"].append({"config": label(cfg), "error": f"{type(exc).__name__}: {exc}"[:200]})
            report["rows"].append(row)
            write(report, path)
        del weights
        torch.cuda.empty_cache()
    write(report, path)
    print(markdown(report))
    return 0


def write(report: dict, path: str) -> None:
    with open(path + ".json", "w") as f:
        json.dump(report, f, indent=1)
    with open(path + ".md", "w") as f:
        f.write(markdown(report))


def markdown(report: dict) -> str:
    lines = [f"## bench_skinny ({report['environment']})", "",
             f"copy rate {report['copy_gbs']:.0f} GB/s (read + write). GB/s of weights read, "
             "CUDA-graph replays of L products in a row.", "",
             "| shape | M | cuBLAS | best skinny | config | best / cuBLAS | rel err | rule's config | rule / cuBLAS |",
             "|---|---:|---:|---:|---|---:|---:|---|---:|"]
    for r in report["rows"]:
        ok = [c for c in r["kernels"] if "gbs" in c]
        best = max(ok, key=lambda c: c["gbs"]) if ok else None
        if best is None:
            lines.append(f"| {r['shape']} | {r['m']} | {r['cublas_gbs']:.0f} | n/a | | | |")
            continue
        rule = next((c for c in ok if c["config"] == r.get("rule")), None)
        rule_ratio = f"{rule['gbs'] / r['cublas_gbs']:.2f}" if rule else "n/a"
        lines.append(f"| {r['shape']} | {r['m']} | {r['cublas_gbs']:.0f} | {best['gbs']:.0f} | "
                     f"{best['config']} | {best['gbs'] / r['cublas_gbs']:.2f} | {best['rel_err']:.1e} | "
                     f"{r.get('rule', '')} | {rule_ratio} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

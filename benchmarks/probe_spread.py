"""Where a kernel's run-to-run spread comes from: per row of bench_selection, every (backend,
variant) that serves it, timed on several cases (the row's step built again with another seed:
other random K/V, another page order, tensors allocated again) and, within each case, in
interleaved rounds (tune/timing.interleaved: CUDA-graph replays, L2 flushed, medians).
A spread within a case is drift over time (clocks, power); a spread between cases that is
larger is the case itself (data, placement).

    PYTHONPATH=src python3 benchmarks/probe_spread.py [--cases 4] [--rounds 4] [--out DIR]

Writes probe_spread.json and probe_spread.md (per row and pair: each case's median rate, the
spread within cases and between them).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys

# (phase, batch, new, context, shape key of bench_selection): the rows whose variants tied
ROWS = [("decode", 16, 1, 32768, "d128"), ("prefill", 1, 16384, 16384, "d128"),
        ("prefill", 1, 16384, 16384, "d256")]


def probe(rows, cases: int, rounds: int, on_row=None) -> list[dict]:
    import torch

    from attnkit.registry import declarations
    from attnkit.tune import grid
    from attnkit.tune.case import make_case, work
    from attnkit.tune.environment import platform_for
    from attnkit.tune.run import SLOW_S, _forward, _one_call, backend_for, pairs_for
    from attnkit.tune.timing import graphed, interleaved

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_selection import model_of, plan_page, shape_of

    platform, registry, out = platform_for("cuda"), declarations(), []
    for phase, batch, new, context, key in rows:
        shape = shape_of(key)
        page = plan_page(model_of(shape, key), platform, phase, shape, batch, new, context, None)
        b = grid.bucket(shape, phase, batch, new, context, page)
        pairs = pairs_for(b, registry, platform)
        unit = 1e6 if phase == "decode" else 1e9
        rates: dict[str, list[list[float]]] = {}
        for seed in range(cases):
            case = make_case(b, "cuda", seed=seed)
            runs, names = [], []
            for n, k in pairs:
                try:
                    fwd = _forward(case, backend_for(b, n, k))
                    _one_call(fwd, "cuda")                      # compiles
                    if _one_call(fwd, "cuda") > SLOW_S:         # no contender (the tune's rule)
                        continue
                    run, note = graphed(fwd)
                except Exception:  # noqa: BLE001 - a pair that cannot run here is left out
                    gc.collect()
                    torch.cuda.empty_cache()
                    continue
                if note is None:
                    runs.append(run)
                    names.append(n if k is None else f"{n}/{k}")
            times = interleaved(runs, "cuda", rounds=rounds)
            for name, ms in zip(names, times):
                rates.setdefault(name, []).append([work(b) / t / unit for t in ms])
            runs = case = None
            gc.collect()
            torch.cuda.empty_cache()
        row = {"phase": phase, "batch": batch, "new": new, "context": context, "shape": key,
               "page_size": page, "unit": "GB/s" if phase == "decode" else "TFLOP/s", "pairs": {}}
        for name, per_case in rates.items():
            medians = [statistics.median(r) for r in per_case]
            within = max((max(r) - min(r)) / statistics.median(r) for r in per_case)
            row["pairs"][name] = {"rounds": per_case, "case_medians": medians,
                                  "within_case": within,
                                  "between_cases": (max(medians) - min(medians)) / statistics.median(medians)}
        out.append(row)
        if on_row is not None:
            on_row(out)
        print(json.dumps({"row": key, "phase": phase, "context": context,
                          **{n: [round(m) for m in p["case_medians"]] for n, p in row["pairs"].items()}}), flush=True)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| row | pair | each case's median | widest spread within a case | spread between cases |",
             "|---|---|---|---:|---:|"]
    for r in rows:
        label = f"{r['phase']} B={r['batch']} new={r['new']} ctx={r['context']} {r['shape']}"
        for name, p in sorted(r["pairs"].items(), key=lambda kv: -statistics.median(kv[1]["case_medians"])):
            meds = ", ".join(f"{m:.0f}" for m in p["case_medians"])
            lines.append(f"| {label} | {name} | {meds} {r['unit']} | {100 * p['within_case']:.1f} % "
                         f"| {100 * p['between_cases']:.1f} % |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import environment
    os.makedirs(args.out, exist_ok=True)
    env = environment()

    def save(rows: list[dict]) -> str:
        """JSON and markdown of the rows so far (a cut run keeps them)."""
        with open(os.path.join(args.out, "probe_spread.json"), "w") as f:
            json.dump({"environment": env, "cases": args.cases, "rounds": args.rounds, "rows": rows}, f, indent=1)
        md = f"{env}\n\n{table(rows)}\n"
        with open(os.path.join(args.out, "probe_spread.md"), "w") as f:
            f.write(md)
        return md

    print(save(probe(ROWS, args.cases, args.rounds, on_row=save)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

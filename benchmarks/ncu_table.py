"""The table of an ncu run of profile_prefill_ncu.py (``--csv --page raw``): one row per
attention kernel with its time, TFLOP/s, the tensor pipes' active share, issue-slot use and
the largest stall reasons, to JSON and Markdown.

    python3 benchmarks/ncu_table.py ncu_prefill.csv[.gz] --order ncu_order.json --out results/ncu_prefill
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import sys

KERNELS = (("_prefill_gluon_kernel", "gluon"), ("_prefill_tma_kernel", "triton"), ("cudnn", "cudnn"),
           ("sm90", "cudnn"))       # a kernel name's part -> profile_prefill_ncu.py's kernel key
STALL = re.compile(r"smsp__average_warps?_(?:latency_)?issue_stalled_(\w+?)_per_issue_active\.ratio$")


def kernel_key(name: str):
    for part, key in KERNELS:
        if part in name or part in name.lower():
            return key
    return None


def number(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def rows(path: str):
    import gzip
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        lines = [ln for ln in f if ln.startswith('"')]        # ncu's own log lines are not CSV
    table = list(csv.reader(lines))
    header, units, body = table[0], table[1], table[2:]
    return [{h: (v, u) for h, u, v in zip(header, units, r)} for r in body]


def summarise(kernel: dict, flops: float) -> dict:
    def val(name):
        v = kernel.get(name)
        return number(v[0]) if v else None

    dur, unit = kernel["gpu__time_duration.sum"]
    ms = number(dur) / {"nsecond": 1e6, "ns": 1e6, "usecond": 1e3, "us": 1e3, "msecond": 1.0, "ms": 1.0}[unit]
    stalls = {m.group(1): number(v[0]) for k, v in kernel.items() if (m := STALL.match(k))
              and number(v[0]) is not None and m.group(1) != "selected"}
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:5]
    return dict(kernel=kernel["Kernel Name"][0][:60], ms=round(ms, 3),
                tflops=round(flops / ms / 1e9, 1),
                tensor_pipe_pct=val("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
                fma_pipe_pct=val("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"),
                xu_pipe_pct=val("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
                issue_active_pct=round(100 * (val("smsp__issue_active.avg.per_cycle_active") or 0), 1),
                warps_active=val("sm__warps_active.avg.per_cycle_active"),
                stalls_per_issue=[[k, round(v, 2)] for k, v in top])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--order", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    order = json.load(open(args.order))
    seen: dict[str, int] = {}
    out = []
    for k in rows(args.csv):
        key = kernel_key(k["Kernel Name"][0])
        if key is None:
            continue                        # the step's cache write and other helpers
        mine = [o for o in order if o.get("kernel") == key      # launch order per kernel; an
                or "kernel" not in o and key in o["who"]]       # older order file: by label
        i = seen.get(key, 0)
        seen[key] = i + 1
        if i >= len(mine):
            continue
        out.append(dict(dim=mine[i]["dim"], who=mine[i]["who"], **summarise(k, mine[i]["flops"])))
    json.dump(out, open(args.out + ".json", "w"), indent=1)
    with open(args.out + ".md", "w") as f:
        f.write("| d | kernel | ms | TFLOP/s | tensor pipe active % | FMA pipe % | XU (exp2) "
                "pipe % | issue slots busy % | largest stalls (warp cycles per issue) |\n"
                "|---|---|---:|---:|---:|---:|---:|---:|---|\n")
        for r in out:
            stalls = ", ".join(f"{k} {v}" for k, v in r["stalls_per_issue"]) or "-"
            f.write(f"| {r['dim']} | {r['who']} | {r['ms']} | {r['tflops']} | "
                    f"{r['tensor_pipe_pct']} | {r['fma_pipe_pct']} | {r['xu_pipe_pct']} | "
                    f"{r['issue_active_pct']} | {stalls} |\n")
    print(open(args.out + ".md").read())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The table of an ncu run of profile_prefill_ncu.py (``--csv --page raw``): one row per
attention kernel with its time, TFLOP/s, the tensor pipes' active share, issue-slot use and
the largest stall reasons, to JSON and Markdown.

    python3 benchmarks/ncu_table.py ncu_prefill.csv --order ncu_order.json --out results/ncu_prefill
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import sys

WHO = (("_prefill_gluon_kernel", "attnkit gluon"), ("_prefill_tma_kernel", "attnkit triton (shipped tile)"),
       ("cudnn", "sdpa cudnn"), ("sm90", "sdpa cudnn"))
STALL = re.compile(r"smsp__average_warps?_(?:latency_)?issue_stalled_(\w+?)_per_issue_active\.ratio$")


def who(name: str):
    for key, label in WHO:
        if key in name.lower() or key in name:
            return label
    return None


def number(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def rows(path: str):
    with open(path) as f:
        lines = [ln for ln in f if ln.startswith('"')]        # ncu's own log lines are not CSV
    table = list(csv.reader(lines))
    header, units, body = table[0], table[1], table[2:]
    return [{h: (v, u) for h, u, v in zip(header, units, r)} for r in body]


def summarise(kernel: dict, flops: float) -> dict:
    def val(name):
        v = kernel.get(name)
        return number(v[0]) if v else None

    dur, unit = kernel["gpu__time_duration.sum"]
    ms = number(dur) / {"nsecond": 1e6, "usecond": 1e3, "msecond": 1.0}[unit]
    pipes = {k.split("__")[1].split(".")[0]: number(v[0]) for k, v in kernel.items()
             if re.match(r"sm__pipe_tensor\w*_cycles_active\.avg\.pct_of_peak_sustained_active$", k)
             and number(v[0]) is not None}
    stalls = {m.group(1): number(v[0]) for k, v in kernel.items() if (m := STALL.match(k))
              and number(v[0]) is not None}
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:5]
    return dict(kernel=kernel["Kernel Name"][0][:60], ms=round(ms, 3),
                tflops=round(flops / ms / 1e9, 1), tensor_pipes_pct=pipes,
                issue_active_pct=val("sm__inst_issued.avg.pct_of_peak_sustained_active"),
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
        label = who(k["Kernel Name"][0])
        if label is None:
            continue                        # the step's cache write and other helpers
        mine = [o for o in order if o["who"] == label]
        i = seen.get(label, 0)
        seen[label] = i + 1
        if i >= len(mine):
            continue
        out.append(dict(dim=mine[i]["dim"], who=label, **summarise(k, mine[i]["flops"])))
    json.dump(out, open(args.out + ".json", "w"), indent=1)
    with open(args.out + ".md", "w") as f:
        f.write("| d | kernel | ms | TFLOP/s | tensor pipe active % | issue active % | "
                "largest stalls (warp cycles per issue) |\n|---|---|---:|---:|---|---:|---|\n")
        for r in out:
            pipes = ", ".join(f"{k} {v:.1f}" for k, v in r["tensor_pipes_pct"].items()) or "-"
            stalls = ", ".join(f"{k} {v}" for k, v in r["stalls_per_issue"]) or "-"
            f.write(f"| {r['dim']} | {r['who']} | {r['ms']} | {r['tflops']} | {pipes} | "
                    f"{r['issue_active_pct']} | {stalls} |\n")
    print(open(args.out + ".md").read())
    return 0


if __name__ == "__main__":
    sys.exit(main())

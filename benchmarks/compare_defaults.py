"""The same benchmark run twice in one GPU call, by the previous code and by this one: each
attnkit row of this run against the previous default's, as ratios (issue 24's check that a
plan-chosen kernel is no row more than 3 % below the default it replaced).

    python3 benchmarks/compare_defaults.py PREV_DIR[,PREV_DIR...] NEW_DIR[,NEW_DIR...] [--out FILE.md]

Reads bench_triton.json, bench_mla.json and bench_runner.json where both sides hold them. A side
given as several directories (the runs of one call, alternating prev / new) counts each row's best
rate over them: the same rule for both sides.
"""
from __future__ import annotations

import argparse
import json
import os

FLOOR = 0.97


def _rows(path: str, script: str) -> dict:
    with open(path) as f:
        data = json.load(f)
    out = {}
    for r in data["rows"]:
        if script == "bench_triton" and r.get("kind") in ("decode", "extend", "prefill"):
            key = (r["kind"], f"B={r.get('batch', 1)}", f"prefix={r.get('prefix', '-')}",
                   f"new={r.get('new', 1)}", f"ctx={r.get('context', '-')}", f"d{r['head_dim']}")
            out[key] = (r.get("attnkit"), r.get("unit"))
        elif script == "bench_mla" and r.get("kind") == "decode":
            key = ("decode", f"H={r['heads']}", f"B={r['batch']}", f"ctx={r['ctx']}", r.get("kv", ""))
            out[key] = (r.get("fwd_tflops"), "TFLOP/s (forward)")
        elif script == "bench_runner" and str(r.get("peer", "")).startswith("attnkit"):
            out[(r["case"], r["peer"])] = (r.get("tok_s"), "tok/s")
    return out


def _best(dirs: list[str], script: str) -> dict:
    """Each row's best rate over the runs of one side (the directories that hold the script's JSON)."""
    best: dict = {}
    for d in dirs:
        path = os.path.join(d, f"{script}.json")
        if not os.path.exists(path):
            continue
        for key, (rate, unit) in _rows(path, script).items():
            old = best.get(key, (None, unit))[0]
            if not isinstance(old, (int, float)) or (isinstance(rate, (int, float)) and rate > old):
                best[key] = (rate, unit)
    return best


def compare(prev_dir: str, new_dir: str) -> tuple[str, list]:
    """``prev_dir`` / ``new_dir``: a directory, or several separated by commas (best of the runs)."""
    lines, low = [], []
    for script in ("bench_triton", "bench_mla", "bench_runner"):
        old, new = (_best(side.split(","), script) for side in (prev_dir, new_dir))
        if not (old and new):
            lines.append(f"\n{script}: not in both runs")
            continue
        lines += [f"\n### {script}", "", "| row | previous default | plan's choice | ratio |", "|---|---:|---:|---:|"]
        for key in old:
            (x, unit), (y, _) = old[key], new.get(key, (None, None))
            ok = isinstance(x, (int, float)) and isinstance(y, (int, float)) and x > 0
            ratio = y / x if ok else None
            if ratio is not None and ratio < FLOOR:
                low.append((script, key, ratio))
            cell = lambda v: f"{v:.0f}" if isinstance(v, (int, float)) else str(v)  # noqa: E731
            lines.append(f"| {' '.join(key)} | {cell(x)} | {cell(y)} {unit or ''} | "
                         + (f"{ratio:.3f}" + (" **low**" if ratio < FLOOR else "") if ratio else "n/a") + " |")
    lines.append(f"\n{len(low)} row(s) more than {100 - FLOOR * 100:.0f} % below the previous default"
                 + (": " + "; ".join(f"{s} {' '.join(k)} {r:.3f}" for s, k, r in low) if low else "."))
    return "\n".join(lines), low


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prev")
    ap.add_argument("new")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    text, _ = compare(args.prev, args.new)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

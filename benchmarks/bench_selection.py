"""Selection quality: for every shape of bench_triton, bench_mla and bench_dual_chunk, the
(backend, kernel variant) the plan runs (with the shipped profile, or --profile) next to the
fastest valid (backend, variant) pair measured in this run.

    PYTHONPATH=src python3 benchmarks/bench_selection.py [--quick] [--profile FILE] [--out DIR]
    python3 benchmarks/bench_selection.py --render DIR/bench_selection.json   # the table again

"Valid" = the planner's own declaration check passes and the output matches the float64
reference (attnkit.tune: every backend is checked before it is timed, then timed by one
method: CUDA-graph replays of forward, K/V write included, L2 flushed, median; the pairs
within 10 % of the row's fastest, and a backend's variants within 10 % of its fastest, timed
again in 5 interleaved rounds, each one's rate the median of its timings, tune/run.settle).
The planner
is asked twice per row: with the row's shape as its workload (it ranks by the profile's
nearest bucket) and without (what ``attnkit plan`` prints: one backend per phase for every
shape, except that prefill rows over a cached prefix run the plan's extend backend, which may
differ from its prefill backend; see docs/profile.md). The variant is the plan's: the first its
kernel table lists for the row's step (registry/kernels.py). Target: the first within 5 % of the fastest on every row. Every row is
measured at the page size the plan fills for it (its kernel table is read there; a row measured
at another page size compared kernels the plan does not choose between). Dual chunk rows have one valid
backend (only dual_chunk computes it), so they are listed, not timed (bench_dual_chunk
times it against plain attention). Writes bench_selection.json and bench_selection.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

TARGET = 0.95


def _short(status: str) -> str:
    """A status for a table cell: 'skipped: out of memory: CUDA out of ...' -> 'skipped (out of memory)'."""
    kind, _, note = status.partition(": ")
    return f"{kind} ({note.split(':')[0]})" if note else kind

# (script, phase, batch, new, context, shape): the rows of the three benchmark scripts.
MHA = {"d128": ("mha", 32, 8, 128), "d64": ("mha", 32, 8, 64), "d256": ("mha", 16, 8, 256)}
TRITON_ROWS = ([("bench_triton", "decode", b, 1, c, "d128") for b in (1, 16, 64, 128) for c in (1024, 4096, 32768)]
               + [("bench_triton", "decode", 64, 1, 4096, d) for d in ("d64", "d256")]
               + [("bench_triton", "prefill", 1, 2048, 2048 + p, "d128") for p in (8192, 32768)]
               + [("bench_triton", "prefill", 1, 16384, 16384, d) for d in ("d128", "d64", "d256")])
MLA_ROWS = ([("bench_mla", "decode", b, 1, c, f"mla{h}") for h in (16, 128) for b in (1, 32, 128)
             for c in (1024, 4096, 32768)]
            + [("bench_mla", "decode", 128, 1, 4096, f"mla{h}-fp8") for h in (16, 128)]
            + [("bench_mla", "prefill", 1, 2048, 2048 + 32768, f"mla{h}") for h in (128, 16)])
DCA_ROWS = [("bench_dual_chunk", "decode", 1, 1, 131073, "dca"),
            ("bench_dual_chunk", "prefill", 1, 2048, 131072, "dca")]
QUICK = {("decode", 1, 4096), ("decode", 64, 4096), ("decode", 1, 32768), ("decode", 128, 4096),
         ("prefill", 2048, 34816), ("prefill", 16384, 16384)}


def shape_of(key: str):
    from attnkit.planning.profile import Shape
    if key.startswith("mla"):
        heads, _, kv = key[3:].partition("-")
        return Shape("mla", int(heads), 1, 192, 128, "bf16", "fp8_e4m3" if kv else "bf16", 512, 64)
    kind, h, kv, d = MHA[key]
    return Shape(kind, h, kv, d, d, "bf16", "bf16")


def model_of(shape, name: str):
    """A one-layer model of ``shape`` (what the planner plans for the row)."""
    from attnkit.model.spec import ModelAttention
    from attnkit.tune.case import layer_spec
    return ModelAttention(name=name, architecture="bench_selection", layers=(layer_spec(shape),), dtype=shape.dtype)


def plan_page(model, platform, phase: str, shape, batch: int, new: int, context: int, profile) -> int:
    """The page size the plan fills for this row (the planner's, for this shape as its workload)."""
    from attnkit.planning.pages import DEFAULT_PAGE_SIZE
    from attnkit.planning.solver import plan
    p = plan(model, platform, {"dtype": shape.dtype, "kv_cache_dtype": shape.kv_dtype}, profile=profile,
             workload={phase: {"batch": batch, "new": new, "context": context}})
    return p.run.page_size if p.ok else DEFAULT_PAGE_SIZE


def picks(model, platform, phase: str, b, profile):
    """(pick for this shape, pick for every shape) by the planner, at the bucket's page size."""
    from attnkit.planning.solver import plan
    request = {"dtype": b.shape.dtype, "kv_cache_dtype": b.shape.kv_dtype, "page_size": b.page_size}
    workload = {phase: {"batch": b.batch, "new": b.new, "context": b.context}}
    shaped = plan(model, platform, request, profile=profile, workload=workload)
    whole = plan(model, platform, request, profile=profile)
    # the backend the plan runs for this row: a step over a cached prefix runs the extend backend
    role = "extend" if phase == "prefill" and b.prefix > 0 else phase

    def get(p):
        if not p.ok:
            return None, p.error["message"]
        name = getattr(p, f"{role}_backend")
        kernels = p.run.role(role).kernels
        if kernels is not None:     # the variant the backend runs for this step: the table's first
            name = f"{name}/{kernels.candidates(b.batch, b.new, b.context)[0]}"
        return name, p.why.get(role, p.why.get(phase, "")) + " " + p.kernel_why.get(role, "")
    return get(shaped), get(whole)


def run(rows, profile, on_row=None) -> list[dict]:
    import torch

    from attnkit.planning.measured import rank
    from attnkit.planning.profile import UNITS, Profile
    from attnkit.registry import declarations
    from attnkit.tune import grid
    from attnkit.tune.case import make_case
    from attnkit.tune.environment import platform_for
    from attnkit.tune.run import pairs_for, time_bucket

    platform, registry, out = platform_for("cuda"), declarations(), []
    for script, phase, batch, new, context, key in rows:
        row = dict(script=script, phase=phase, batch=batch, new=new, context=context, shape=key)
        if key == "dca":
            row.update(pick="dual_chunk", whole="dual_chunk", fastest="dual_chunk", ratio=1.0,
                       note="only dual_chunk computes dual chunk attention (chosen by the dual-chunk rule); "
                            "not timed here")
            out.append(row)
            continue
        shape = shape_of(key)
        model = model_of(shape, f"{script} {key}")
        # the row is measured where the plan runs: at the page size it fills (its kernel
        # table is read there)
        page = plan_page(model, platform, phase, shape, batch, new, context, profile)
        b = grid.bucket(shape, phase, batch, new, context, page)
        (pick, why), (whole, _) = picks(model, platform, phase, b, profile)
        case = make_case(b, "cuda")
        pairs = pairs_for(b, registry, platform)
        # the tune's method, near-ties settled in interleaved rounds; one candidate per (backend,
        # variant): the ranking compares them as backends
        entries = [dataclasses.replace(e, backend=e.backend if e.variant is None else f"{e.backend}/{e.variant}",
                                       variant=None) for e in time_bucket(case, pairs, "cuda")]
        del case
        torch.cuda.empty_cache()
        here = Profile(device={}, software={}, date="this run", method={}, entries=tuple(entries))
        ranking = rank(here, shape, phase, [e.backend for e in entries])
        rates = ranking.rates if ranking else {}
        fastest = ranking.measured[0] if ranking and ranking.measured else None
        row.update(bucket=b.label(), shape_label=b.shape.label(), pick=pick, whole=whole, why=why,
                   fastest=fastest, method=ranking.method if ranking else None, unit=UNITS[phase],
                   rates={n: rates.get(n) for n in [e.backend for e in entries]},
                   status={e.backend: e.status + (f": {e.note}" if e.status != "ok" else "") for e in entries},
                   notes={e.backend: e.note for e in entries if e.status == "ok"},
                   ratio=(rates[pick] / rates[fastest]) if fastest and pick in rates else None,
                   whole_ratio=(rates[whole] / rates[fastest]) if fastest and whole in rates else None)
        out.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "why"}), flush=True)
        if on_row is not None:
            on_row(out)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| script | phase | shape | bucket | planner (this shape) | fastest valid | rates (this run) "
             "| ratio | within 5 % | planner (every shape) | ratio |", "|" + "---|" * 11]
    fmt = lambda r: "n/a" if r is None else f"{r:.2f}"  # noqa: E731
    for r in rows:
        bucket = r.get("bucket") or f"B={r['batch']} new={r['new']} ctx={r['context']}"
        rates = ", ".join(f"{n} {v:.0f}" if v else f"{n} {_short(r['status'][n])}"
                          for n, v in r.get("rates", {}).items())
        rates = (rates + f" {r['unit']}") if rates else r.get("note", "")
        ok = "yes" if r["ratio"] is not None and r["ratio"] >= TARGET else "**no**"
        lines.append(f"| {r['script']} | {r['phase']} | {r.get('shape_label', r['shape'])} | "
                     f"{bucket} | {r['pick']} | "
                     f"{r['fastest']} | {rates} | {fmt(r['ratio'])} | {ok} | {r['whole']} | "
                     f"{fmt(r.get('whole_ratio', r['ratio']))} |")
    missed = [r for r in rows if r["ratio"] is None or r["ratio"] < TARGET]
    lines += ["", f"{len(rows) - len(missed)} of {len(rows)} rows within 5 % of the fastest valid "
                  "(backend, variant)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few rows per script")
    ap.add_argument("--profile", help="rank by this profile instead of the shipped one")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--render", metavar="JSON", help="print the table of a JSON this script wrote")
    args = ap.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            data = json.load(f)
        print(f"{data['environment']}\n\n{table(data['rows'])}")
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import environment

    rows = TRITON_ROWS + MLA_ROWS + DCA_ROWS
    if args.quick:
        rows = [r for r in rows if (r[1], r[2] if r[1] == "decode" else r[3], r[4]) in QUICK]
    t0 = time.time()
    env = environment()
    os.makedirs(args.out, exist_ok=True)

    def save(result: list[dict], done: bool = False) -> str:
        """JSON and markdown of the rows so far (after every row: a cut run keeps them)."""
        data = {"environment": env, "profile": args.profile or "shipped",
                "seconds": round(time.time() - t0), "complete": done,
                "command": "python3 benchmarks/bench_selection.py " + " ".join(argv or sys.argv[1:]),
                "rows": result}
        with open(os.path.join(args.out, "bench_selection.json"), "w") as f:
            json.dump(data, f, indent=1)
        md = f"{env}\nprofile: {data['profile']}; {data['seconds']} s\n\n{table(result)}\n"
        with open(os.path.join(args.out, "bench_selection.md"), "w") as f:
            f.write(md)
        return md

    print(save(run(rows, args.profile, on_row=save), done=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

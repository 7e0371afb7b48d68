"""Issue 28's decode sweep: for each decode row of bench_triton.py still under 0.95x its best
peer, candidate launch configs, kernel switches (configs.DECODE_TILES: PACK, EDGE_MASK, PDL),
split counts and decode variants, next to cuDNN and flash SDPA and the plan's own choice, in
one process per row on one GPU, by bench_triton's method (CUDA-graph replay of
``backend.forward``, K/V write included, L2 flushed, median of 20; peers on contiguous K/V).

    PYTHONPATH=src python3 benchmarks/sweep_decode.py --only ROW[,ROW] [--out DIR] [--warm]
    PYTHONPATH=src python3 benchmarks/sweep_decode.py --verify --only ROW[,ROW] [--out DIR]
    PYTHONPATH=src python3 benchmarks/sweep_decode.py --table [--out DIR]

``--warm`` runs each candidate once, untimed, so that Triton's on-disk cache holds its
kernels (gpu_decode_sweep.sh warms every row in parallel processes, then times them one
after another). Every candidate's output is compared with SDPA's on the gathered K/V first
(relative L2 error under 2e-2, bench_triton's bound); a wrong one is reported, not timed.
The plan's choice and the three fastest candidates are timed a second time at the end of
their row (``again``): the spread between the two is the row's noise. Rows merge into
$OUT/sweep_decode.json as they finish; ``--table`` writes $OUT/sweep_decode.md from it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, os.path.dirname(__file__))
from bench_triton import Setup, _peer, _planned, rel_err, sdpa_peer, timed  # noqa: E402
from common import environment  # noqa: E402

from attnkit.backends.triton.backend import TritonBackend  # noqa: E402

TOL = 2e-2

# row -> (batch, context, q heads, head dim); 8 KV heads throughout, page 16, bf16
TARGETS = {
    "d256": (64, 4096, 16, 256), "d64": (64, 4096, 32, 64),
    "b1-1k": (1, 1024, 32, 128), "b16-1k": (16, 1024, 32, 128), "b16-4k": (16, 4096, 32, 128),
    "b16-32k": (16, 32768, 32, 128), "b64-1k": (64, 1024, 32, 128),
    "b64-4k": (64, 4096, 32, 128), "b1-32k": (1, 32768, 32, 128),     # guards: met today
    "b1-4k": (1, 4096, 32, 128), "d256-b1-32k": (1, 32768, 16, 256),
    "d64-b1-32k": (1, 32768, 32, 64),
}


def verify(row: str) -> list[tuple[str, int | None, dict]]:
    """``--verify``: the launch shapes and split counts the plan ran before version 5 (the
    defaults of 2026-12-01), spelled out, next to the plan's row, which runs today's."""
    sw, sm, sp = "split_write", "split_merge", "split"
    old = {64: t(64, 4, 3), 128: t(64, 4, 4), 256: t(32, 4, 4)}
    dim = TARGETS[row][3]
    if row == "b1-1k":                      # the split rule gave 8 splits of 128 keys
        return [(sm, 8, {}), (sw, 8, {})]
    if dim == 128:
        return [(sm, None, {}), (sw, None, {}), (sp, None, {})]
    return [(sw, None, old[dim]), (sp, None, old[dim]), (sm, None, old[dim])]


def t(bn, w, s, **switches):
    """A decode launch config: BLOCK_N, warps, stages and kernel switches."""
    return dict(BLOCK_N=bn, num_warps=w, num_stages=s, **switches)


E = dict(EDGE_MASK=True)
P2, P4 = dict(PACK=2), dict(PACK=4)
PDL = dict(PDL=True)       # the reduce launch as a programmatic dependent (split / split_write)


def candidates(row: str) -> list[tuple[str, int | None, dict]]:
    """(variant, splits or None for the backend's rule, config override) per row, the most
    likely first (a row's time budget cuts the tail). Stage counts of 5 are where Triton 3.6
    double-buffers the gathered K/V tiles (static_decode.py: one buffer at 2-4 stages)."""
    sw, sm, sp = "split_write", "split_merge", "split"
    if row == "d256":
        tiles = [t(16, 4, 5), t(16, 4, 4), t(32, 4, 5), t(32, 4, 2), t(32, 4, 3), t(16, 4, 3),
                 t(64, 4, 2), t(64, 8, 2), t(32, 8, 5), t(32, 8, 4), t(16, 8, 5), t(16, 2, 5)]
        return ([(sp, None, c) for c in tiles]
                + [(sp, n, c) for n in (2, 4) for c in ({}, t(16, 4, 5), t(32, 4, 5))]
                + [(sp, None, t(16, 4, 5, **E)), (sp, None, E)]
                + [(sw, None, t(16, 4, 5)), (sw, None, {}), (sm, 2, t(16, 4, 5))])
    if row == "d64":
        return ([(sp, None, t(64, 4, 5)), (sp, None, t(32, 4, 5, **P2)), (sp, None, t(64, 4, 4, **P2)),
                 (sp, 1, t(64, 4, 5, **P2)), (sp, None, t(128, 4, 4)), (sp, None, t(64, 4, 4)),
                 (sp, None, P2), (sp, None, t(64, 4, 5, **P2)), (sp, None, t(128, 8, 3, **P2)),
                 (sp, None, t(32, 4, 5, **P4)), (sp, None, t(64, 4, 3, **P4)),
                 (sp, 2, t(64, 4, 5)), (sp, 2, t(32, 4, 5, **P2)), (sp, None, t(32, 4, 5)),
                 (sp, None, t(64, 4, 5, **E)), (sp, None, t(32, 4, 5, **P2, **E)), (sp, None, E),
                 (sp, None, t(128, 4, 3)), (sp, None, t(64, 8, 5)), (sp, 1, P2), (sp, 4, P2)]
                + [(sw, None, t(64, 4, 5)), (sw, None, t(32, 4, 5, **P2)), (sw, None, {}),
                   (sm, None, t(32, 4, 5, **P2))])
    if row == "b1-1k":
        return ([(sw, n, c) for n in (None, 16) for c in (PDL, t(64, 4, 5, **PDL))]
                + [(v, n, c) for v in (sm, sw) for n in (None, 16) for c in ({}, t(64, 4, 5))]
                + [(v, n, {}) for v in (sm, sw) for n in (4, 32)]
                + [(v, None, E) for v in (sm, sw)] + [(sm, n, t(32, 4, 5)) for n in (16, 32)]
                + [(sm, None, t(64, 4, 2)), (sm, None, t(64, 2, 5)), (sm, 8, t(128, 4, 5)),
                   (sp, None, {}), (sp, 16, {})])
    if row == "b1-32k":
        return [(sw, None, t(64, 4, 5)), (sw, None, PDL), (sw, None, t(64, 4, 5, **PDL)),
                (sw, None, E), (sw, 64, {}), (sw, 32, {}),
                (sw, 64, t(64, 4, 5)), (sm, None, t(64, 4, 5)), (sw, None, t(128, 8, 3))]
    if row == "b64-4k":
        return [(sp, None, t(32, 4, 5)), (sp, None, t(64, 4, 5)), (sp, 2, t(64, 4, 5)),
                (sp, None, E), (sp, None, t(128, 8, 3)), (sw, None, E), (sp, 2, {}),
                (sp, None, t(64, 4, 3, **E))]
    if row == "b64-1k":
        return ([(v, n, {}) for v in (sp, sw, sm) for n in (None, 2, 4)]
                + [(sp, None, t(32, 4, 5)), (sp, None, t(64, 4, 5)), (sp, 2, t(64, 4, 5)),
                   (sp, None, E), (sm, 2, E), (sp, None, t(128, 8, 3)), (sp, None, t(64, 4, 3))])
    splits = {"b16-1k": (None, 1, 2, 4, 8), "b16-4k": (None, 4, 6, 8, 12, 16),
              "b16-32k": (None, 4, 8, 16, 32)}[row]
    return ([(v, n, c) for v in (sm, sw) for n in (None, splits[2]) for c in ({}, t(64, 4, 5))]
            + [(sw, n, t(64, 4, 5, **PDL)) for n in (None, splits[2])] + [(sw, None, PDL)]
            + [(v, n, {}) for n in splits if n not in (None, splits[2]) for v in (sm, sw)]
            + [(v, n, E) for v, n in ((sm, None), (sw, None), (sm, splits[2]))]
            + [(sm, n, t(32, 4, 5)) for n in (None, splits[3])]
            + [(v, None, t(128, 8, 3)) for v in (sm, sw)] + [(sp, None, {}), (sp, None, t(64, 4, 5))])


def run_row(row: str, *, warm: bool, budget_s: float, out_dir: str | None = None,
            pick=None) -> dict:
    """One row: the peers, the plan's choice, every candidate; GB/s of K/V read. With
    ``out_dir`` the row is merged into its JSON after each candidate (a process cut short
    keeps what it measured)."""
    start = time.time()
    batch, ctx, heads, dim = TARGETS[row]
    s = Setup(batch, ctx - 1, 1, heads=heads, dim=dim)
    nbytes = 2 * batch * ctx * s.spec.num_kv_heads * dim * 2
    gbs = lambda ms: nbytes / ms / 1e6  # noqa: E731
    planned = TritonBackend(**_planned(heads, dim))
    step = planned.prepare(s.meta, s.cache)
    plan_fwd = lambda: planned.forward(s.q, s.k, s.v, s.layer, s.cache, step)  # noqa: E731
    out = plan_fwd()                               # writes the step's K/V: the reference sees it
    k_c, v_c = s.gather()
    q = s.q_bhsd()
    ref = sdpa_peer(None, q, k_c, v_c, None, False)()
    flat = lambda o: o.reshape(batch, -1)  # noqa: E731
    result = dict(row=row, batch=batch, context=ctx, heads=heads, head_dim=dim, bytes=nbytes,
                  plan=dict(variants=list(step.prepared.variants), err=rel_err(flat(out), flat(ref.transpose(1, 2)))),
                  candidates=[])
    if not warm:
        for name, kernel in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                             ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            got = _peer(lambda: sdpa_peer(kernel, q, k_c, v_c, None, False), gbs, ref)
            if isinstance(got, str):      # no GQA path: K/V repeated per query head
                got = _peer(lambda: sdpa_peer(kernel, q, k_c, v_c, None, False, expand=True), gbs, ref)
            result[name] = got
        result["plan"]["gbs"] = gbs(timed(plan_fwd)[0])
    for variant, splits, cfg in (pick or candidates)(row):
        if time.time() - start > budget_s:
            result["candidates"].append(dict(variant=variant, splits=splits, config=cfg,
                                             gbs="n/a (row budget spent)"))
            continue
        result["candidates"].append(_candidate(s, ref, variant, splits, cfg, gbs, warm=warm))
        print(json.dumps(result["candidates"][-1], default=str), flush=True)
        if out_dir and not warm:
            merge(out_dir, result)
    if not warm:
        _again(s, result, plan_fwd, gbs)
    result["seconds"] = time.time() - start
    return result


def _backend(variant, splits, cfg):
    return TritonBackend(decode_variant=variant, num_splits=splits, decode_config=cfg or None)


def _candidate(s, ref, variant, splits, cfg, gbs, *, warm):
    row = dict(variant=variant, splits=splits, config=cfg)
    try:
        be = _backend(variant, splits, cfg)
        step = be.prepare(s.meta, s.cache)
        fwd = lambda: be.forward(s.q, s.k, s.v, s.layer, s.cache, step)  # noqa: E731
        out = fwd()
        row["splits_run"] = sorted({n for n, _ in step.prepared.splits.values()}) or [splits]
        # the kernel that ran (a variant that cannot take the call falls back to split)
        row["ran"] = sorted({k[0] if isinstance(k[0], str) else "split" for k in step.prepared.splits})
        row["err"] = rel_err(out.reshape(s.batch, -1), ref.transpose(1, 2).reshape(s.batch, -1))
        if not row["err"] < TOL:
            row["gbs"] = f"n/a (wrong: rel err {row['err']:.3g})"
        elif not warm:
            ms, note = timed(fwd)
            row["timing"] = note or "graph"          # or eager, and why
            row["gbs"] = gbs(ms)
    except Exception as exc:  # noqa: BLE001 - a candidate that fails is reported, not fatal
        torch.cuda.synchronize()
        row["gbs"] = f"n/a ({type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''})"
    return row


def _again(s, result, plan_fwd, gbs):
    """Second timings: the plan's choice and the three fastest candidates."""
    result["plan"]["again"] = gbs(timed(plan_fwd)[0])
    timed_rows = [c for c in result["candidates"] if isinstance(c.get("gbs"), float)]
    for c in sorted(timed_rows, key=lambda c: -c["gbs"])[:3]:
        be = _backend(c["variant"], c["splits"], c["config"])
        step = be.prepare(s.meta, s.cache)
        c["again"] = gbs(timed(lambda: be.forward(s.q, s.k, s.v, s.layer, s.cache, step))[0])


def merge(out_dir: str, result: dict) -> None:
    path = os.path.join(out_dir, "sweep_decode.json")
    data = json.load(open(path)) if os.path.exists(path) else {"environment": environment(), "rows": {}}
    data["rows"][result["row"]] = result
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)


def _f(v):
    return f"{v:.0f}" if isinstance(v, float) else str(v)


def table(out_dir: str) -> str:
    """Per row: peers, the plan's choice, the best candidate and its ratio to the best peer;
    then every candidate, fastest first."""
    path = os.path.join(out_dir, "sweep_decode.json")
    if not os.path.exists(path):
        return f"no rows: {path} was not written (see sweep_decode.log and warm_*.log)"
    data = json.load(open(path))
    head = ["| row | shape | cuDNN | flash | plan (again) | best candidate | GB/s (again) | "
            "best / peer | plan / peer |", "|---|---|---|---|---|---|---|---|---|"]
    detail = []
    for name, r in data["rows"].items():
        peers = [r.get(k) for k in ("sdpa_cudnn", "sdpa_flash") if isinstance(r.get(k), float)]
        peer = max(peers) if peers else None
        ok = sorted((c for c in r["candidates"] if isinstance(c.get("gbs"), float)), key=lambda c: -c["gbs"])
        best = ok[0] if ok else {}
        plan = r["plan"].get("gbs")
        ratio = lambda v: f"{v / peer:.2f}x" if isinstance(v, float) and peer else "n/a"  # noqa: E731
        head.append(f"| {name} | B={r['batch']} ctx={r['context']} d={r['head_dim']} h={r['heads']} | "
                    f"{_f(r.get('sdpa_cudnn'))} | {_f(r.get('sdpa_flash'))} | {_f(plan)} "
                    f"({_f(r['plan'].get('again'))}) {'/'.join(r['plan']['variants'][:1])} | "
                    f"{_label(best)} | {_f(best.get('gbs'))} ({_f(best.get('again'))}) | "
                    f"{ratio(best.get('gbs'))} | {ratio(plan)} |")
        detail += [f"\n### {name} (B={r['batch']} ctx={r['context']} d={r['head_dim']}), "
                   f"{r.get('seconds', 0):.0f} s\n", "| candidate | splits run | GB/s | again | vs peer | err |",
                   "|---|---|---|---|---|---|"]
        rest = [c for c in r["candidates"] if c not in ok]
        detail += [f"| {_label(c)} | {c.get('splits_run', '')} | {_f(c.get('gbs'))} | {_f(c.get('again', ''))} "
                   f"| {ratio(c.get('gbs'))} | {c.get('err', float('nan')):.1e} |" for c in ok + rest]
    text = f"{data['environment']}\n\n" + "\n".join(head) + "\n" + "\n".join(detail) + "\n"
    with open(os.path.join(out_dir, "sweep_decode.md"), "w") as f:
        f.write(text)
    return text


def _label(c: dict) -> str:
    if not c:
        return "-"
    cfg = " ".join(f"{k}={v}" for k, v in (c.get("config") or {}).items()) or "default tile"
    return f"{c['variant']} splits={c['splits'] or 'rule'} [{cfg}]"


def candidate_sweep(candidates, rows, guards, *, budget_s: float, guard_budget_s: float) -> None:
    """The command line of a follow-up sweep (sweep_decode16.py, sweep_decodeb16.py): ``rows``
    then ``guards`` (row names of ROWS), each row's ``candidates(row)`` timed within its budget
    (--budget-s for rows, --guard-budget-s for guards) and merged into OUT's JSON; --slice I/N
    takes candidates I, I + N, ... (parallel warm processes); --table only renders the JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join((*rows, *guards)))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--warm", action="store_true", help="run each candidate once, untimed")
    ap.add_argument("--budget-s", type=float, default=budget_s, help="per row; the rest is skipped")
    ap.add_argument("--guard-budget-s", type=float, default=guard_budget_s, help="per guard row")
    ap.add_argument("--table", action="store_true", help="only write the table from the JSON")
    ap.add_argument("--slice", default="0/1", help="I/N: only candidates I, I + N, ... (parallel warms)")
    args = ap.parse_args()
    i, n = (int(x) for x in args.slice.split("/"))
    os.makedirs(args.out, exist_ok=True)
    if args.table:
        print(table(args.out))
        return
    torch.manual_seed(0)
    for row in args.only.split(","):
        budget = args.guard_budget_s if row in guards else args.budget_s
        result = run_row(row, warm=args.warm, budget_s=budget, out_dir=args.out,
                         pick=lambda r: candidates(r)[i::n])
        if not args.warm:
            merge(args.out, result)
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(TARGETS))
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--warm", action="store_true", help="run each candidate once, untimed")
    ap.add_argument("--budget-s", type=float, default=40.0, help="per row; the rest is skipped")
    ap.add_argument("--table", action="store_true", help="only write the table from the JSON")
    ap.add_argument("--verify", action="store_true",
                    help="the previous defaults as the candidates (see verify())")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.table:
        print(table(args.out))
        return
    torch.manual_seed(0)
    for row in args.only.split(","):
        result = run_row(row, warm=args.warm, budget_s=args.budget_s, out_dir=args.out,
                         pick=verify if args.verify else None)
        if not args.warm:
            merge(args.out, result)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

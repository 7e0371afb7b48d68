"""Issue 24's bench_mla row, taken apart on the GPU: the decode forward of triton_mla by the
previous default's tree and by this one, in one process, side by side.

    PYTHONPATH=src python3 benchmarks/probe_mla_forward.py --prev .prev/src --out DIR [--shapes 128x1x1024,128x128x32768]

The previous tree (``--prev``: the ``src`` of ``git archive fb7aab7``) is copied under DIR as a
package ``attnkit_prev`` (its own imports renamed), so both trees' backends run in one process
on the same inputs. Sides: ``prev`` (its default ``TritonMLABackend()``, what bench_mla timed
as the previous default), ``plan`` (this tree with the plan's kernel tables for this GPU, what
bench_mla times now), ``new`` (this tree, no tables) and ``ws`` (this tree, ``variant="ws"``).

For every shape (heads x batch x context, one new token a request) and side:
1. the forward's output checked (B=1 shapes: against attnkit.reference, float64; every shape:
   against the first side's output), before anything is timed;
2. the core (``attend_latent``) and the forward (cache write + q_nope @ w_kc + core + @ w_vc)
   captured as CUDA graphs and timed by bench_mla's method (tune.timing.time_ms, cold L2),
   in ROUNDS interleaved rounds (side order rotating), medians and the per-round list;
3. a torch.profiler trace of REPLAYS forward replays (L2 flushed before each by a bitwise_not
   of 256 MB, which also marks where a replay starts: a zero-fill in the forward stays in it): per kernel its
   name, launches per replay and mean GPU time; per replay the kernels' busy time and the span
   from the first kernel's start to the last one's end (gaps = span - busy).
Writes DIR/probe.json and prints a markdown summary.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(__file__))
from common import graphed, planned_options, time_ms, wall_ms  # noqa: E402
from two_trees import Tree, load_bench, load_prev  # noqa: E402

L, R, NOPE, DV, PAGE = 512, 64, 128, 128, 64
DT = torch.bfloat16
DEV = "cuda"      # --smoke: cpu, fp16, through the Triton interpreter, wall-clock


def make_inputs(heads: int, batch: int, ctx: int, seed: int = 0) -> dict:
    """Tree-free inputs: weights, latent pages, page order, q, latent k."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device=DEV, dtype=DT, generator=g)  # noqa: E731
    per = -(-ctx // PAGE)
    return dict(heads=heads, batch=batch, ctx=ctx, per=per,
                w_kc=rnd(heads, NOPE, L) / L ** 0.5, w_vc=rnd(heads, L, DV) / L ** 0.5,
                latent=rnd(batch * per, PAGE, L + R),
                perm=torch.randperm(batch * per, generator=torch.Generator().manual_seed(seed)).view(batch, per),
                q=rnd(batch, heads, NOPE + R), k=rnd(batch, L + R))


class Case:
    """One tree's step over ``inp``: spec, layer, cache (a copy of the latent), metadata."""

    def __init__(self, tree: Tree, inp: dict):
        mla = tree.spec.MLAConfig(kv_lora_rank=L, qk_rope_head_dim=R, qk_nope_head_dim=NOPE, v_head_dim=DV)
        self.spec = tree.spec.LayerAttention(layer_id=0, num_heads=inp["heads"], num_kv_heads=1,
                                             head_dim=NOPE + R, v_head_dim=DV, kind="mla", mla=mla)
        self.layer = tree.base.RuntimeLayer(spec=self.spec, w_kc=inp["w_kc"], w_vc=inp["w_vc"])
        self.cache = tree.paged.PagedKVCache([self.spec], num_pages=inp["batch"] * inp["per"],
                                             page_size=PAGE, dtype=DT, device=DEV)
        self.cache.latent[0].copy_(inp["latent"])
        Req = tree.batch.Request
        self.meta = tree.batch.build_batch([Req(inp["ctx"] - 1, 1, row) for row in inp["perm"].tolist()],
                                           page_size=PAGE, device=DEV)
        self.q, self.k = inp["q"], inp["k"]

    def calls(self, backend):
        step = backend.prepare(self.meta, self.cache)
        fwd = lambda: backend.forward(self.q, self.k, None, self.layer, self.cache, step)  # noqa: E731
        q_lat = torch.bmm(self.q[..., :NOPE].transpose(0, 1), self.layer.w_kc)
        q_pe = self.q[..., NOPE:]
        core = lambda: backend.attend_latent(q_lat, q_pe, self.cache.latent[0], self.layer, step)  # noqa: E731
        return fwd, core


def backends(trees: dict, heads: int) -> dict:
    """The sides: (tree, backend) by label."""
    from attnkit.planning.profile import Shape

    new = trees["new"].mla.TritonMLABackend
    out = {}
    if "prev" in trees:
        out["prev"] = (trees["prev"], trees["prev"].mla.TritonMLABackend())
    shape = Shape("mla", heads, 1, NOPE + R, DV, "bf16", "bf16", L, R)
    try:
        out["plan"] = (trees["new"], new(**planned_options("triton_mla", shape, page_size=PAGE)))
    except Exception as exc:  # noqa: BLE001 - no plan here (the CPU smoke): said in its row
        out["plan"] = (trees["new"], exc)
    out["new"] = (trees["new"], new())
    out["ws"] = (trees["new"], new(variant="ws"))
    return out


def launched(tree: Tree, fn):
    """(fn(), the keyword arguments of the core launch it made: variant, tile, splits)."""
    real, seen = tree.mla.absorbed_attention, {}

    def spy(*a, **kw):
        seen.update({k: v for k, v in kw.items() if isinstance(v, (int, float, str, bool))})
        return real(*a, **kw)
    tree.mla.absorbed_attention = spy
    try:
        out = fn()
    finally:
        tree.mla.absorbed_attention = real
    return out, seen


def rel_err(out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def profile_replays(run, replays: int, trace_path: str) -> dict:
    """Kernel table and per-replay busy / span (µs) of ``replays`` replays of ``run``."""
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(replays):
            flush.bitwise_not_()        # the L2 flush, and the replays' separator in the trace
            run()
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace_path)
    with open(trace_path) as f:
        return replay_table(json.load(f)["traceEvents"])


def replay_table(events: list) -> dict:
    """profile_replays' summary of a chrome trace's device events."""
    ks = sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")),
                key=lambda e: e["ts"])
    replays_k, cur = [], None
    for e in ks:
        name = e["name"]
        if e.get("cat") == "kernel" and "bitwise_not" in name.lower():    # the flush: a replay starts after it
            cur = []
            replays_k.append(cur)
            continue
        if cur is not None:
            cur.append(e)
    replays_k = [r for r in replays_k if r]
    table: dict = {}
    for r in replays_k:
        for e in r:
            t = table.setdefault(e["name"][:160], [0, 0.0])
            t[0] += 1
            t[1] += e["dur"]
    n = max(1, len(replays_k))
    busy = [sum(e["dur"] for e in r) for r in replays_k]
    span = [max(e["ts"] + e["dur"] for e in r) - r[0]["ts"] for r in replays_k]
    order = [e["name"][:60] for e in replays_k[0]] if replays_k else []
    return dict(replays=len(replays_k), order=order,
                kernels={k: dict(per_replay=c / n, mean_us=s / c) for k, (c, s) in table.items()},
                busy_us=statistics.median(busy) if busy else None,
                span_us=statistics.median(span) if span else None)


def run_shape(trees, heads, batch, ctx, args, report):
    inp = make_inputs(heads, batch, ctx)
    sides = {k: v for k, v in backends(trees, heads).items() if k in args.sides.split(",")}
    cases = {t.pkg: Case(t, inp) for t in {id(t): t for t, _ in sides.values()}.values()}
    ref = None
    if batch == 1:
        from attnkit import reference
        c = cases["attnkit"]
        ref = reference.attention(c.q, c.k, None, c.layer, c.cache, c.meta).to(torch.float64)
    runs, first = {}, None
    row = dict(heads=heads, batch=batch, ctx=ctx, sides={})
    for label, (tree, be) in sides.items():
        rec = row["sides"][label] = {}
        try:
            if isinstance(be, Exception):
                raise be
            case = cases[tree.pkg]
            fwd, core = case.calls(be)
            out, rec["launch"] = launched(tree, fwd)
            out = out.reshape(batch, -1)
            first = out if first is None else first
            rec["err_vs_first"] = rel_err(out, first)
            if ref is not None:
                rec["err_vs_f64"] = rel_err(out, ref.reshape(batch, -1))
            bad = rec.get("err_vs_f64", rec["err_vs_first"])
            if not bad < 2e-2:
                rec["error"] = f"output differs: relative error {bad:.3g}"
                continue
            if DEV == "cuda":
                (g_fwd, n1), (g_core, n2) = graphed(fwd), graphed(core)
            else:
                (g_fwd, n1), (g_core, n2) = (fwd, "eager"), (core, "eager")
            rec["graph"] = n1 is None and n2 is None
            # the eager calls ride along: their closures hold the step (block tables, work
            # lists) the graphs read; freed, the graphs would read reused memory (round 1's
            # illegal address at B=1)
            runs[label] = (g_fwd, g_core, fwd, core)
        except Exception as exc:  # noqa: BLE001 - a side that cannot run is a result
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            traceback.print_exc()
    labels = list(runs)
    for r in range(args.rounds):
        rot = labels[r % len(labels):] + labels[:r % len(labels)] if labels else []
        for label in rot:
            g_fwd, g_core = runs[label][:2]
            rec = row["sides"][label]
            timer = time_ms if DEV == "cuda" else wall_ms
            rec.setdefault("fwd_us", []).append(1e3 * timer(g_fwd, warmup=3, reps=args.reps, cold_l2=True))
            rec.setdefault("core_us", []).append(1e3 * timer(g_core, warmup=3, reps=args.reps, cold_l2=True))
    for label in labels:
        rec = row["sides"][label]
        rec["fwd_med_us"] = statistics.median(rec["fwd_us"])
        rec["core_med_us"] = statistics.median(rec["core_us"])
        for what, i in (("fwd", 0), ("core", 1)) if DEV == "cuda" else ():
            try:
                rec[f"prof_{what}"] = profile_replays(
                    runs[label][i], args.replays,
                    os.path.join(args.out, f"trace_{heads}x{batch}x{ctx}_{label}_{what}.json"))
            except Exception as exc:  # noqa: BLE001
                rec[f"prof_{what}"] = dict(error=f"{type(exc).__name__}: {str(exc)[:200]}")
    report.append(row)
    del runs, cases
    torch.cuda.empty_cache()


def bench_rows(benches: dict, rows, args) -> list:
    """bench_mla's own decode_row for each tree, with the backend its main builds, alternating
    trees ROUNDS times (same process): core_ms and fwd_ms as the bench reports them."""
    ns = argparse.Namespace(reps=20, quick=True, smoke=False)
    out = []
    for r in range(args.bench_rounds):
        for side in (("prev", "new") if r % 2 == 0 else ("new", "prev")):
            if side not in benches:
                continue
            mod = benches[side]
            for h, b, c in rows:
                try:
                    be = (mod.TritonMLABackend(**mod._planned(h)) if hasattr(mod, "_planned")
                          else mod.TritonMLABackend())
                    row = mod.decode_row(h, b, c, ns, be)
                    out.append(dict(side=side, round=r, heads=h, batch=b, ctx=c,
                                    core_us=1e3 * row["core_ms"], fwd_us=1e3 * row["fwd_ms"],
                                    timing=row["timing"], rel_err=row["rel_err"]))
                except (Exception, SystemExit) as exc:  # noqa: BLE001
                    out.append(dict(side=side, round=r, heads=h, batch=b, ctx=c,
                                    error=f"{type(exc).__name__}: {str(exc)[:200]}"))
                print(out[-1], flush=True)
    return out


def render(report) -> str:
    lines = []
    for row in report:
        lines.append(f"\n## H={row['heads']} B={row['batch']} ctx={row['ctx']}\n")
        lines.append("| side | fwd µs (median of rounds) | core µs | fwd - core | rounds fwd | err f64 | err vs first | prof fwd busy / span µs | kernels a fwd replay |")
        lines.append("|---|---:|---:|---:|---|---:|---:|---|---:|")
        for label, s in row["sides"].items():
            if "error" in s or "fwd_med_us" not in s:
                lines.append(f"| {label} | {s.get('error', 'not timed')} |||||||")
                continue
            p = s.get("prof_fwd", {})
            nk = sum(k["per_replay"] for k in p.get("kernels", {}).values())
            lines.append(f"| {label} | {s['fwd_med_us']:.2f} | {s['core_med_us']:.2f} | "
                         f"{s['fwd_med_us'] - s['core_med_us']:.2f} | "
                         f"{', '.join(f'{x:.1f}' for x in s['fwd_us'])} | {s.get('err_vs_f64', float('nan')):.2e} | "
                         f"{s['err_vs_first']:.1e} | {p.get('busy_us', 0) or 0:.2f} / {p.get('span_us', 0) or 0:.2f} | {nk:g} |")
        for label, s in row["sides"].items():
            lines.append(f"\n{label} core launch: {s.get('launch')}")
        for label, s in row["sides"].items():
            for what in ("fwd", "core"):
                p = s.get(f"prof_{what}")
                if not p or "kernels" not in p:
                    continue
                lines.append(f"\n{label} {what} ({p['replays']} replays), in order: {' -> '.join(p['order'])}\n")
                for name, k in sorted(p["kernels"].items(), key=lambda kv: -kv[1]["mean_us"] * kv[1]["per_replay"]):
                    lines.append(f"- {k['per_replay']:g} x {k['mean_us']:.2f} µs  {name}")
    return "\n".join(lines)


def render_bench(rows) -> str:
    lines = ["\n## bench_mla.decode_row of each tree, alternating (µs)\n",
             "| row | side | rounds core | rounds fwd | median fwd - core |", "|---|---|---|---|---:|"]
    keys = sorted({(r["heads"], r["batch"], r["ctx"], r["side"]) for r in rows})
    for h, b, c, side in keys:
        mine = [r for r in rows if (r["heads"], r["batch"], r["ctx"], r["side"]) == (h, b, c, side)]
        ok = [r for r in mine if "error" not in r]
        if not ok:
            lines.append(f"| {h}x{b}x{c} | {side} | {mine[0].get('error')} | | |")
            continue
        gap = statistics.median(r["fwd_us"] - r["core_us"] for r in ok)
        core = ", ".join(f"{r['core_us']:.1f}" for r in ok)
        fwd = ", ".join(f"{r['fwd_us']:.1f}" for r in ok)
        lines.append(f"| {h}x{b}x{c} | {side} | {core} | {fwd} | {gap:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prev", default=None, help="src of the previous default's tree")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="128x1x1024,128x128x32768")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="CPU, fp16, Triton interpreter, tiny shapes")
    ap.add_argument("--sides", default="prev,plan,new,ws", help="of prev, plan, new, ws")
    ap.add_argument("--bench-rows", default="", help="rows (HxBxCTX,...) of bench_mla.decode_row per tree")
    ap.add_argument("--bench-rounds", type=int, default=4)
    ap.add_argument("--prev-bench", default=None, help="benchmarks/ of the previous default's tree")
    args = ap.parse_args(argv)
    if args.smoke:
        global DEV, DT
        DEV, DT = "cpu", torch.float16
    os.makedirs(args.out, exist_ok=True)
    trees = {"new": Tree("attnkit")}
    if args.prev and os.path.isdir(os.path.join(args.prev, "attnkit")):
        try:
            trees["prev"] = Tree(load_prev(args.prev, os.path.join(args.out, "_pkg")))
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    else:
        print(f"no previous tree at {args.prev!r}: this tree's sides only", flush=True)
    report = []
    for spec in args.shapes.split(","):
        h, b, c = (int(x) for x in spec.split("x"))
        t0 = time.time()
        try:
            run_shape(trees, h, b, c, args, report)
        except Exception:  # noqa: BLE001 - one shape failing leaves the others
            traceback.print_exc()
        print(f"shape {spec}: {time.time() - t0:.1f}s", flush=True)
        with open(os.path.join(args.out, "probe.json"), "w") as f:
            json.dump(report, f, indent=1)
    with open(os.path.join(args.out, "probe.md"), "w") as f:
        f.write(render(report))             # before the bench rows (a timeout keeps it)
    bench = []
    if args.bench_rows and DEV == "cuda":
        benches = {"new": load_bench(trees["new"], os.path.dirname(os.path.abspath(__file__)),
                                     os.path.join(args.out, "_pkg"))}
        if "prev" in trees and args.prev_bench:
            benches["prev"] = load_bench(trees["prev"], args.prev_bench, os.path.join(args.out, "_pkg"))
        rows = [tuple(int(x) for x in r.split("x")) for r in args.bench_rows.split(",")]
        bench = bench_rows(benches, rows, args)
        with open(os.path.join(args.out, "bench_rows.json"), "w") as f:
            json.dump(bench, f, indent=1)
    text = render(report) + (render_bench(bench) if bench else "")
    print(text)
    with open(os.path.join(args.out, "probe.md"), "w") as f:
        f.write(text)
    shutil.rmtree(os.path.join(args.out, "_pkg"), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 24's fresh-prefill rows of bench_triton, by the previous default's tree and by this one,
alternating in one process (the rows' rates moved 5-10 % between separate runs of one tree).

    PYTHONPATH=src python3 benchmarks/probe_prefill_trees.py --prev .prev --out DIR [--rounds 3]

``--prev``: a tree holding src/ and benchmarks/ of the previous default (``git archive fb7aab7
src benchmarks``), loaded as a package ``attnkit_prev`` beside this one (two_trees.py). For each
round (the side order rotating) and each 16k fresh-prefill shape of bench_triton (d256 16 heads,
d128 and d64 32 heads, 8 KV heads, bf16), on the same inputs:

- ``prev`` / ``new``: that tree's bench_triton ``measure`` of its default backend (new: with the
  plan's kernel tables for this GPU, bench_triton's ``_planned``), CUDA-graph replay and eager,
  K/V write included; new records the kernel variant the step ran (TritonStep.ran);
- ``prev_kernel`` / ``new_kernel``: the Gluon prefill kernel alone of each tree on the step's
  own q / k / v (graph replay);
- ``cudnn``: cuDNN SDPA on the same tensors (a clock reference for the round).

Then the sdpa backend's fresh prefill is captured once as ``attnkit tune`` does, and the capture
error (the profile's "eager (RuntimeError)" entries) is written out whole.
Writes DIR/probe_prefill.json and prints a markdown summary (medians over rounds).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from two_trees import Tree, load_bench, load_prev  # noqa: E402

SHAPES = ((256, 16), (128, 32), (64, 32))          # (head dim, query heads), 8 KV heads, 16k tokens
NEW = 16384


def sides(prev_root: str, work: str) -> dict:
    """side -> (its bench_triton module, its prefill_gluon module)."""
    import importlib
    out = {"new": (load_bench(Tree("attnkit"), os.path.dirname(os.path.abspath(__file__)), work,
                              script="bench_triton.py"),
                   importlib.import_module("attnkit.backends.triton.prefill_gluon"))}
    pkg = load_prev(os.path.join(prev_root, "src"), os.path.join(work, "_pkg"))
    out["prev"] = (load_bench(Tree(pkg), os.path.join(prev_root, "benchmarks"), work, script="bench_triton.py"),
                   importlib.import_module(f"{pkg}.backends.triton.prefill_gluon"))
    return out


def one_round(trees: dict, order: list[str]) -> list[dict]:
    rows = []
    for dim, heads in SHAPES:
        flops = 4 * dim * heads * NEW * (NEW + 1) / 2
        tflops = lambda ms: flops / ms / 1e9  # noqa: E731
        for side in order:
            bench, gluon = trees[side]
            torch.manual_seed(0)
            s = bench.Setup(1, 0, NEW, heads=heads, dim=dim)
            opts = bench._planned(heads, dim) if side == "new" else {}
            be = bench.TritonBackend(**opts)
            row = bench.guarded(lambda: bench.measure(s, kind="extend", backend=be, units=tflops,
                                                      peers=False))
            rows.append(dict(row, side=side, head_dim=dim))
            out = torch.empty_like(s.q)
            scale = dim ** -0.5
            kern = lambda: gluon.prefill_gluon_attention(s.q, s.k, s.v, out, qk_scale=scale,  # noqa: E731
                                                         v_scale=1.0)
            try:
                ms, note = bench.timed(kern)
                rows.append(dict(side=f"{side}_kernel", head_dim=dim, attnkit=tflops(ms), note=note))
            except Exception as exc:  # noqa: BLE001 - reported, the round goes on
                rows.append(dict(side=f"{side}_kernel", head_dim=dim, attnkit=f"n/a ({exc!r})"[:200]))
            if side == order[0]:
                q = s.q.view(1, NEW, heads, dim).transpose(1, 2)
                k = s.k.view(1, NEW, -1, dim).transpose(1, 2)
                v = s.v.view(1, NEW, -1, dim).transpose(1, 2)
                cud = bench.sdpa_peer(bench.SDPBackend.CUDNN_ATTENTION, q, k, v, None, True)
                ms, note = bench.timed(cud)
                rows.append(dict(side="cudnn", head_dim=dim, attnkit=tflops(ms), note=note))
            del s
            torch.cuda.empty_cache()
    return rows


def sdpa_capture() -> str:
    """Capture the sdpa backend's fresh prefill (d64, 16k) as the tune does; the error, whole."""
    from attnkit.planning.profile import Shape
    from attnkit.registry import load_backend
    from attnkit.tune import grid
    from attnkit.tune.case import make_case
    b = grid.bucket(Shape("mha", 32, 8, 64, 64, "bf16", "bf16"), "prefill", 1, NEW, NEW, 16)
    case = make_case(b, "cuda")
    be = load_backend("sdpa")
    step = be.prepare(case.meta, case.cache)
    fwd = lambda: be.forward(case.q, case.k, case.v, case.layer, case.cache, step)  # noqa: E731
    fwd()
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fwd()
        return "captured"
    except Exception:  # noqa: BLE001 - the error is the result
        return traceback.format_exc()


def summary(rows: list[dict]) -> str:
    lines = ["| head dim | side | TFLOP/s (median of rounds) | rounds | ran |", "|---|---|---:|---|---|"]
    keys = sorted({(r["head_dim"], r["side"]) for r in rows}, key=lambda k: (-k[0], k[1]))
    for dim, side in keys:
        got = [r["attnkit"] for r in rows if (r["head_dim"], r["side"]) == (dim, side)
               and isinstance(r.get("attnkit"), float)]
        ran = sorted({r.get("ran", "") for r in rows if (r["head_dim"], r["side"]) == (dim, side)} - {""})
        med = f"{statistics.median(got):.1f}" if got else "n/a"
        lines.append(f"| {dim} | {side} | {med} | {', '.join(f'{x:.0f}' for x in got)} | {', '.join(ran)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prev", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    trees = sides(args.prev, os.path.join(args.out, "_work"))
    rows, names = [], ["prev", "new"]
    for r in range(args.rounds):
        order = names[r % 2:] + names[:r % 2]
        got = one_round(trees, order)
        for x in got:
            x["round"] = r
        rows += got
        print(summary(rows), flush=True)
    capture = sdpa_capture()
    with open(os.path.join(args.out, "probe_prefill.json"), "w") as f:
        json.dump({"rows": rows, "sdpa_capture": capture}, f, indent=1, default=str)
    print("\nsdpa fresh-prefill capture:\n" + capture)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

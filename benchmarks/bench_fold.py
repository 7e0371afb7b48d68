"""A decoder layer's four products at the Llama-3-8B shape, 32 layers in a row inside one CUDA
graph, with the work around them done five ways (runner/layers/skinny.py):

    cublas   the separate kernels and cuBLAS: add + RMSNorm (fused.rms_norm), torch.mm,
             silu * up (fused.silu_mul): what the runner runs with ATTNKIT_SKINNY=0
    none     skinny.mm for every product, the residual adds in their epilogues, the norms
             and silu * up as their own kernels (ATTNKIT_SKINNY_FOLD=none, the default)
    norm     ... and the norms folded into the products after them
    silu     ... and silu * up folded into down instead
    norm,silu both

    PYTHONPATH=src python3 benchmarks/bench_fold.py [--out DIR] [--ms 1,16] [--ways cublas none]

ATTNKIT_FUSED_PDL (0, 1, early) and ATTNKIT_SKINNY_PREFETCH are read as the runner reads
them and named in the report.

The attention in the middle is left out (its input is a slice of the qkv product). Timed
by attnkit's method (median of CUDA-event timings of the graph's replay), per layer, next to
the layer's weight-read time at the run's copy rate; each way's output is checked against
the cublas way's (relative to max |y|). Writes bench_fold.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import copy_bandwidth_gbs, environment, graphed, time_ms  # noqa: E402

from attnkit.runner.layers import fused, skinny  # noqa: E402
from attnkit.runner.layers.linear import Linear  # noqa: E402
from attnkit.runner.layers.norm import NormStyle  # noqa: E402

HIDDEN, QKV, INTER, LAYERS = 4096, 6144, 14336, 32
WAYS = ("cublas", "none", "norm", "silu", "norm,silu")
STYLE = NormStyle(1e-5)


def layers(n: int) -> list[dict]:
    def w(out, inp):
        return Linear(torch.randn(out, inp, device="cuda", dtype=torch.bfloat16) / inp ** 0.5)

    return [dict(qkv=w(QKV, HIDDEN), o=w(HIDDEN, HIDDEN), gate_up=w(2 * INTER, HIDDEN),
                 down=w(HIDDEN, INTER),
                 n1=1 + 0.1 * torch.randn(HIDDEN, device="cuda", dtype=torch.bfloat16),
                 n2=1 + 0.1 * torch.randn(HIDDEN, device="cuda", dtype=torch.bfloat16))
            for _ in range(n)]


def forward(way: str, ls: list[dict], h0: torch.Tensor) -> torch.Tensor:
    h, pending = h0, None
    for p in ls:
        if way == "cublas":
            x, h = (fused.rms_norm(h, p["n1"], STYLE), h) if pending is None else \
                fused.rms_norm(pending, p["n1"], STYLE, residual=h)
            a = p["qkv"](x)[:, :HIDDEN]
            x, h = fused.rms_norm(p["o"](a), p["n2"], STYLE, residual=h)
            pending = p["down"](fused.silu_mul(p["gate_up"](x)))
        else:
            a = skinny.project(h, p["qkv"], norm=(p["n1"], STYLE))[:, :HIDDEN]
            h = skinny.project(a, p["o"], residual=h)
            gu = skinny.project(h, p["gate_up"], norm=(p["n2"], STYLE))
            h = skinny.project(gu, p["down"], silu=True, residual=h)
    return h if pending is None else h + pending


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--ms", default="1,16")
    p.add_argument("--layers", type=int, default=LAYERS)
    p.add_argument("--ways", nargs="+", default=list(WAYS), metavar="WAY")
    args = p.parse_args(argv)
    ways = args.ways
    if set(ways) - set(WAYS) or "cublas" not in ways:
        p.error(f"--ways: some of {' '.join(WAYS)}, cublas among them (the reference)")
    if not torch.cuda.is_available():
        print("bench_fold needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    copy = copy_bandwidth_gbs()
    ls = layers(args.layers)
    layer_bytes = 2 * HIDDEN * (QKV + HIDDEN + 3 * INTER)
    report = {"environment": environment(), "copy_gbs": copy, "layer_bytes": layer_bytes,
              "pdl": os.environ.get("ATTNKIT_FUSED_PDL", "0"),
              "prefetch": os.environ.get("ATTNKIT_SKINNY_PREFETCH", "1"), "rows": []}
    for m in (int(v) for v in args.ms.split(",")):
        h0 = torch.randn(m, HIDDEN, device="cuda", dtype=torch.bfloat16)
        want = None
        for way in sorted(ways, key=WAYS.index):           # cublas first: the reference
            os.environ["ATTNKIT_SKINNY_FOLD"] = way if way != "cublas" else "none"
            row = {"m": m, "way": way}
            try:
                got = forward(way, ls, h0)
                want = got if want is None else want
                row["rel_err"] = ((got.float() - want.float()).abs().max()
                                  / want.float().abs().max()).item()
                run, note = graphed(lambda: forward(way, ls, h0))
                if note is not None:
                    raise RuntimeError(f"did not capture: {note}")
                row["us_layer"] = time_ms(run, warmup=3, reps=20) * 1e3 / len(ls)
            except Exception as exc:  # noqa: BLE001 -- a way that fails is a row
                row["error"] = f"{type(exc).__name__}: {exc}"[:200]
            report["rows"].append(row)
    os.environ.pop("ATTNKIT_SKINNY_FOLD", None)
    limit_us = layer_bytes / (copy * 1e9) * 1e6
    lines = [f"## bench_fold ({report['environment']}, PDL {report['pdl']}, "
             f"prefetch {report['prefetch']})", "",
             f"copy rate {copy:.0f} GB/s; a layer's weights {layer_bytes / 1e6:.0f} MB, "
             f"{limit_us:.1f} µs at that rate. µs a layer (32 in one graph).", "",
             "| M | way | µs a layer | limit / time | rel err vs cublas |", "|---:|---|---:|---:|---:|"]
    for r in report["rows"]:
        if "error" in r:
            lines.append(f"| {r['m']} | {r['way']} | {r['error']} | | |")
        else:
            lines.append(f"| {r['m']} | {r['way']} | {r['us_layer']:.1f} | "
                         f"{limit_us / r['us_layer']:.2f} | {r['rel_err']:.1e} |")
    text = "\n".join(lines) + "\n"
    name = ("bench_fold" + (f"_pdl{report['pdl']}" if report["pdl"] != "0" else "")
            + (f"_p{report['prefetch']}" if report["prefetch"] != "1" else ""))
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

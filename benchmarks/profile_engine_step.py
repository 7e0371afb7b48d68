"""What a decode step of the runner spends its GPU time on: the Llama-3-8B shape of
bench_runner.py, one profiler trace of N decode steps per batch size, kernels grouped.

    PYTHONPATH=src python3 benchmarks/profile_engine_step.py [--batches 1,64] [--steps 16] [--out DIR]

Per batch size B (prompts of 128 tokens, prefilled first, not traced): N steps of
``Engine.step(..., logits="argmax")`` (a decode-graph replay each, the greedy tokens read
back) are traced with torch.profiler (CUDA activity). Reported per step: the wall time, the
GPU-busy time (union of the intervals of kernels and memcpy / memset activities), the span
(the trace's first start to its last end over N, host gaps between steps included), and per
kernel name its launches (memcpys and memsets counted too) and microseconds (kernels grouped by kind: GEMM,
attention, norm, rope, activation, other). The weight-read limit is the weight bytes over
the copy rate of the same run. Writes profile_engine_step.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_runner import LLAMA3_8B, TINY, build_model, prompts  # noqa: E402
from common import copy_bandwidth_gbs, environment  # noqa: E402

# first match wins: torch's argmax is a "reduce_kernel", so sampling is tried before attention
KINDS = (("gemm", ("gemm", "nvjet", "cutlass", "sm90_xmma", "skinny", "splitk", "stream_mm")),
         ("sampling", ("argmax",)),
         ("attention", ("decode", "attn", "stream", "merge", "reduce")),
         ("norm", ("rms_norm",)), ("rope", ("rope",)), ("activation", ("silu", "gelu")),
         ("copy", ("copy", "elementwise", "fill")))


def kind_of(name: str) -> str:
    low = name.lower()
    return next((k for k, keys in KINDS if any(s in low for s in keys)), "other")


def trace(engine, ids, tokens, steps: int) -> tuple[list, list[float]]:
    from torch.profiler import ProfilerActivity, profile

    walls = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            out = engine.step({i: [t] for i, t in zip(ids, tokens)}, logits="argmax", _order=ids)
            tokens = [out[i] for i in ids]
            walls.append((time.perf_counter() - t0) * 1e3)
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    return kernels, walls


def summarise(kernels, walls, steps: int) -> dict:
    kernels.sort(key=lambda k: k[1])
    busy, span_end, start = 0.0, None, kernels[0][1] if kernels else 0.0
    for _, s, e in kernels:
        if span_end is None or s >= span_end:
            busy += e - s
            span_end = e
        elif e > span_end:
            busy += e - span_end
            span_end = e
    names: dict[str, dict] = {}
    for name, s, e in kernels:
        r = names.setdefault(name, {"name": name[:90], "kind": kind_of(name), "count": 0, "us": 0.0})
        r["count"] += 1
        r["us"] += e - s
    rows = sorted(names.values(), key=lambda r: -r["us"])
    for r in rows:
        r["per_step"], r["us_per_step"] = r["count"] / steps, r["us"] / steps
    kinds: dict[str, dict] = {}
    for r in rows:
        k = kinds.setdefault(r["kind"], {"launches": 0.0, "us": 0.0})
        k["launches"] += r["per_step"]
        k["us"] += r["us_per_step"]
    return {"wall_ms": statistics.median(walls), "busy_ms": busy / steps / 1e3,
            "span_ms": ((span_end or start) - start) / steps / 1e3,
            "launches": len(kernels) / steps, "kinds": kinds, "kernels": rows[:40]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,64")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--graphs", default="on", choices=("on", "off"))
    p.add_argument("--tiny", action="store_true", help="a tiny model on the CPU (smoke test)")
    args = p.parse_args(argv)
    if not args.tiny and not torch.cuda.is_available():
        print("profile_engine_step needs a CUDA GPU for the 8B shape (use --tiny on CPU)", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    from attnkit.runner import LLM

    batches = [int(b) for b in args.batches.split(",")]
    cfg, dev, dtype = (TINY, "cpu", torch.float32) if args.tiny else (LLAMA3_8B, "cuda", torch.bfloat16)
    model = build_model(cfg, dev, dtype)
    weight_bytes = model.lm_head.weight.element_size() * (sum(q.numel() for q in model.model.layers.parameters())
                        + model.lm_head.weight.numel())
    llm = LLM(model, cuda_graph="off" if args.tiny else args.graphs, device=dev, dtype=dtype,
              max_tokens=max(batches) * (128 + 4 * args.steps + 64), max_num_seqs=max(batches))
    copy = 1.0 if args.tiny else copy_bandwidth_gbs()
    report = {"environment": environment(), "copy_gbs": copy, "weight_bytes": weight_bytes,
              "graphs": "off" if args.tiny else args.graphs, "plan": str(llm.plan.decode_backend),
              "cases": []}
    engine = llm.engine
    for b in batches:
        ps = prompts(b, 128, cfg["vocab_size"], 2)
        ids = engine.new_ids(b)
        logits = engine.prefill(ps, ids=ids)
        tokens = [int(x[-1].argmax()) for x in logits]
        trace(engine, ids, tokens, 4)                              # warm
        kernels, walls = trace(engine, ids, tokens, args.steps)
        case = {"batch": b, "limit_ms": weight_bytes / copy / 1e6, **summarise(kernels, walls, args.steps)}
        report["cases"].append(case)
        engine.release(ids)
        with open(os.path.join(args.out, "profile_engine_step.json"), "w") as f:
            json.dump(report, f, indent=1)
    text = markdown(report)
    with open(os.path.join(args.out, "profile_engine_step.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


def markdown(report: dict) -> str:
    out = [f"## profile_engine_step ({report['environment']})", "",
           f"graphs {report['graphs']}; decode plan {report['plan']}; copy {report['copy_gbs']:.0f} GB/s; "
           f"{report['weight_bytes'] / 1e9:.2f} GB of weights a step", ""]
    for c in report["cases"]:
        out += [f"### B={c['batch']}: wall {c['wall_ms']:.3f} ms a step, GPU busy {c['busy_ms']:.3f}, "
                f"span {c['span_ms']:.3f}, weight-read limit {c['limit_ms']:.3f}; "
                f"{c['launches']:.0f} launches a step", "",
                "| kind | launches a step | µs a step |", "|---|---:|---:|"]
        out += [f"| {k} | {v['launches']:.0f} | {v['us']:.0f} |"
                for k, v in sorted(c["kinds"].items(), key=lambda kv: -kv[1]["us"])]
        out += ["", "| kernel | kind | a step | µs a step | µs each |", "|---|---|---:|---:|---:|"]
        out += [f"| `{r['name']}` | {r['kind']} | {r['per_step']:.0f} | {r['us_per_step']:.1f} | "
                f"{r['us'] / max(r['count'], 1):.2f} |" for r in c["kernels"][:25]]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())

"""Where a decode step's time goes on the GPU: the runner's graphed decode of the
bench_runner model (Llama-3-8B shape, random bf16 weights), kernel by kernel.

    python benchmarks/profile_decode_gpu.py [--batches 1,64] [--json FILE] [--out FILE.md]

Per batch size B (prompts of 128 tokens):
  step ms      the runner's decode step, as bench_runner measures it: (t(65 new) - t(1 new)) / 64
               through ``LLM.generate`` (graphs replayed, host bookkeeping included);
  replay ms    the bucket's captured graph replayed back to back (CUDA events, median): the
               GPU's own time for one step, no host work between steps;
  host gap     step - replay: what the host adds per step (fill, copies, reading tokens);
  kernels      torch.profiler over 5 replays: every kernel's time per step, grouped
               (GEMM, attention, norms/rotary/activation, other), and the 12 largest.
The weight-read limit is the bench_runner one: (weight bytes) / (measured copy rate).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from bench_runner import LLAMA3_8B, build_model, prompts, runner_decode  # noqa: E402
from common import ceilings, environment, time_ms  # noqa: E402


def group_of(name: str) -> str:
    low = name.lower()
    if any(s in low for s in ("gemm", "gemv", "nvjet", "xmma", "cutlass", "sm90_", "splitk")):
        return "GEMM"
    if any(s in low for s in ("_decode_kernel", "_reduce_kernel", "attention", "merge")):
        return "attention"
    if any(s in low for s in ("rms", "norm", "rope", "rotary", "silu", "swiglu")):
        return "norm/rotary/act"
    return "other"


def kernel_table(fn, reps: int = 5) -> list[dict]:
    """[{name, group, us (per call of fn), calls (per call of fn)}], largest first."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            t = totals[ev.name]
            t[0] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
            t[1] += 1
    rows = [dict(name=n, group=group_of(n), us=t / reps, calls=c / reps) for n, (t, c) in totals.items()]
    return sorted(rows, key=lambda r: -r["us"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--json")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_decode_gpu needs a CUDA GPU", file=sys.stderr)
        return 2
    import warnings
    warnings.filterwarnings("ignore")
    from attnkit.runner import LLM

    batches = [int(b) for b in args.batches.split(",")]
    ceil = ceilings()
    model = build_model(LLAMA3_8B, "cuda", torch.bfloat16)
    elem = 2
    weight_bytes = (sum(p.numel() for p in model.model.layers.parameters())
                    + model.lm_head.weight.numel()) * elem
    llm = LLM(model, cuda_graph="on", device="cuda", dtype=torch.bfloat16,
              max_tokens=max(batches) * 200, max_num_seqs=max(batches))
    out = {"environment": environment(), "copy_gbs": ceil["copy_gbs"], "weight_bytes": weight_bytes,
           "limit_ms": weight_bytes / ceil["copy_gbs"] / 1e6, "cases": []}
    lines = [f"## profile_decode_gpu ({out['environment']})", "",
             f"Weight-read limit per step: {out['limit_ms']:.3f} ms "
             f"({weight_bytes / 1e9:.2f} GB at {ceil['copy_gbs']:.0f} GB/s).", ""]
    for b in batches:
        ps = prompts(b, 128, LLAMA3_8B["vocab_size"], 2)
        step_ms, _ = runner_decode(llm, ps, 64, time_ms, 2)
        graph = llm.engine.graphs._bucket[llm.engine.graphs.bucket_for(b)].graph
        replay_ms = time_ms(graph.replay, warmup=3, reps=20)
        kernels = kernel_table(graph.replay)
        groups: dict[str, float] = defaultdict(float)
        for k in kernels:
            groups[k["group"]] += k["us"]
        kernel_us = sum(groups.values())
        case = dict(batch=b, step_ms=step_ms, replay_ms=replay_ms, host_gap_ms=step_ms - replay_ms,
                    kernel_us=kernel_us, kernels_per_step=sum(k["calls"] for k in kernels),
                    groups=dict(groups), top=kernels[:25])
        out["cases"].append(case)
        lines += [f"### B={b}", "",
                  f"step {step_ms:.3f} ms ({b / step_ms * 1e3:,.0f} tok/s), replay {replay_ms:.3f} ms, "
                  f"host gap {step_ms - replay_ms:.3f} ms; kernels {kernel_us / 1e3:.3f} ms in "
                  f"{case['kernels_per_step']:.0f} launches (replay - kernels = "
                  f"{replay_ms - kernel_us / 1e3:.3f} ms of gaps)", "",
                  "| group | ms per step | % of replay |", "|---|---:|---:|"]
        lines += [f"| {g} | {us / 1e3:.3f} | {100 * us / 1e3 / replay_ms:.0f}% |"
                  for g, us in sorted(groups.items(), key=lambda x: -x[1])]
        lines += ["", "| kernel | group | calls | us per step |", "|---|---|---:|---:|"]
        lines += [f"| {k['name'][:90]} | {k['group']} | {k['calls']:.0f} | {k['us']:.1f} |"
                  for k in kernels[:12]]
        lines.append("")
        print("\n".join(lines), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

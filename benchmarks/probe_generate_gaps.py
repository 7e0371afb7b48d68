"""Where the GPU idles during ``LLM.generate`` (issue 28: generate at decode_ahead 16 ran
0.11-0.17 ms a step slower than at 64, i.e. ~2-3 ms a call of 16 steps, which the host
work measured on the CPU does not explain). For each batch, the Llama-3-8B shape, one LLM,
prompts of 128 tokens, 65 new tokens:

  trace     torch.profiler (CPU and CUDA) over one generate: the GPU's busy time (union of
            kernel and memcpy intervals), its span, and every idle gap over --gap-us between
            two GPU activities, with the kernels either side and the CPU ops (runtime calls
            and aten ops) that ran during it, longest gaps first
  cprofile  cProfile over one more generate: the host functions by cumulative time

Each batch is traced twice: as the scheduler runs (each decode-ahead call queued before the
one before it is read back) and with every call read back before the next is queued
("no_follow", the scheduler before session 1204b).

    PYTHONPATH=src python3 benchmarks/probe_generate_gaps.py [--batches 1 64] [--out DIR]

Writes probe_generate_gaps.json and probe_generate_gaps_cprofile.txt; prints a line a batch.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_runner import FULL, LLAMA3_8B, build_model, prompts  # noqa: E402
from common import environment  # noqa: E402


def gaps_of(events, gap_us: float):
    """(busy us, span us, [gap dicts]) of ``events["gpu"]`` ((name, start, end) each); a
    gap lists the ``events["cpu"]`` that overlap it, by overlap."""
    gpu = sorted(events["gpu"], key=lambda e: e[1])
    busy, end, prev, found = 0.0, None, None, []
    for name, s, e in gpu:
        if end is not None and s - end > gap_us:
            found.append({"us": round(s - end, 1), "at_us": round(end - gpu[0][1], 1),
                          "before": prev[:60], "after": name[:60], "start": end, "end": s})
        if end is None or s >= end:
            busy += e - s
            end, prev = e, name
        elif e > end:
            busy += e - end
            end, prev = e, name
    for g in found:
        names: dict[str, float] = {}
        for name, s, e in events["cpu"]:
            lo, hi = max(s, g["start"]), min(e, g["end"])
            if hi > lo:
                names[name] = names.get(name, 0.0) + hi - lo
        g["cpu"] = sorted(((round(v, 1), k[:50]) for k, v in names.items()), reverse=True)[:8]
        del g["start"], g["end"]
    found.sort(key=lambda g: -g["us"])
    return busy, (end - gpu[0][1]) if gpu else 0.0, found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    p.add_argument("--gap-us", type=float, default=10.0)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_generate_gaps needs a CUDA GPU", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    from attnkit.runner import LLM

    model = build_model(LLAMA3_8B, "cuda", torch.bfloat16)
    report = {"environment": environment(), "env": {k: v for k, v in os.environ.items()
                                                     if k.startswith("ATTNKIT_")}, "rows": []}
    texts = []
    for b in args.batches:
        llm = LLM(model, cuda_graph="on", device="cuda", dtype=torch.bfloat16, max_num_seqs=b,
                  max_tokens=b * (FULL.decode_ctx + FULL.decode_steps + 2),
                  max_num_batched_tokens=b * FULL.decode_ctx)
        ps = prompts(b, FULL.decode_ctx, LLAMA3_8B["vocab_size"], 2)
        run = lambda: llm.generate(ps, max_new_tokens=FULL.decode_steps + 1, ignore_eos=True)  # noqa: E731
        for mode in ("follow", "no_follow"):
            row, text = traced(run, b, mode, args.gap_us)
            report["rows"].append(row)
            texts.append(text)
            with open(os.path.join(args.out, "probe_generate_gaps.json"), "w") as f:
                json.dump(report, f, indent=1)
            with open(os.path.join(args.out, "probe_generate_gaps_cprofile.txt"), "w") as f:
                f.write("\n".join(texts))
        del llm
        torch.cuda.empty_cache()
    return 0


def traced(run, b: int, mode: str, gap_us: float):
    """(row, cProfile text) of ``run`` traced under ``mode``."""
    from torch.profiler import ProfilerActivity, profile

    from attnkit.runner.engine.scheduler import Scheduler

    own = Scheduler._follow
    if mode == "no_follow":
        Scheduler._follow = lambda self, call: None
    try:
        run()
        run()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        events = {"gpu": [], "cpu": []}
        for e in prof.events():
            side = "gpu" if e.device_type == torch.autograd.DeviceType.CUDA else "cpu"
            events[side].append((e.name, e.time_range.start, e.time_range.end))
        busy, span, gaps = gaps_of(events, gap_us)
        row = {"batch": b, "mode": mode, "gpu_events": len(events["gpu"]),
               "busy_ms": round(busy / 1e3, 3), "span_ms": round(span / 1e3, 3), "gaps": len(gaps),
               "gap_ms": round(sum(g["us"] for g in gaps) / 1e3, 3), "longest": gaps[:24]}
        print(json.dumps({k: v for k, v in row.items() if k != "longest"}), flush=True)
        for g in gaps[:4]:
            print("  ", json.dumps(g), flush=True)
        pr = cProfile.Profile()
        pr.enable()
        run()
        torch.cuda.synchronize()
        pr.disable()
    finally:
        Scheduler._follow = own
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45)
    return row, f"# batch {b}, {mode}\n{s.getvalue()}"


if __name__ == "__main__":
    sys.exit(main())

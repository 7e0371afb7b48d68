"""Where a decode step's time goes beyond its kernels' GPU-busy time (issue 28: at B=1 the
H200 traced 4.21 ms busy a step, 237 tok/s if the GPU never idled, while bench_runner's rate
was 222: ~0.29 ms a step unaccounted). For each batch, the Llama-3-8B shape, one LLM:

  generate   bench_runner's rate: (t(65 new) - t(1 new)) / 64, CUDA events (time_ms), twice
  loop16     the bucket's graph replayed 16 times back-to-back with the argmax copied into
             the next step's tokens (what GraphRunner.decode does between steps, less the
             table advance), CUDA events over the 16 / 16: the GPU's timeline of the replays,
             kernel-boundary and graph-boundary idle included, no host work between
  replay     one replay then a sync, wall clock, median of 32: a step with the host waiting
  ahead16    Engine.decode_ahead(16 steps) called back to back (fill, 16 replays with the
             table advance between them, one read-back), wall clock / 16, median of 3 calls
  gen_no_follow  generate with each decode-ahead call read back before the next is queued
             (the scheduler before session 1204b: the GPU idles while the host reads, emits,
             schedules and launches)
  gen_ahead64  generate with the scheduler's decode_ahead 64 (one call for the 64 steps)
  busy       profile_engine_step's trace of 8 eager-scheduled steps: the union of kernel
             intervals a step (the figure bench_switch --busy reports), and launches a step

generate - ahead16 is the scheduler's share between calls, ahead16 - loop16 the advance
kernels and one fill and read-back a call; generate - loop16 is the host's share (scheduling, the read-back, the calls' ends);
loop16 - busy the idle between the kernels inside and between the graphs.

    PYTHONPATH=src python3 benchmarks/probe_step_gaps.py [--batches 1 64] [--out DIR]

Writes probe_step_gaps.json; prints one line a batch.
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_runner import FULL, LLAMA3_8B, build_model, prompts, runner_decode  # noqa: E402
from common import environment, time_ms  # noqa: E402
from profile_engine_step import summarise, trace  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    p.add_argument("--rounds", type=int, default=2, help="generate with / without the queued call")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_step_gaps needs a CUDA GPU", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    from attnkit.runner import LLM
    from attnkit.runner.engine import generation
    from attnkit.runner.engine.scheduler import Scheduler

    model = build_model(LLAMA3_8B, "cuda", torch.bfloat16)
    report = {"environment": environment(), "env": {k: v for k, v in os.environ.items()
                                                     if k.startswith("ATTNKIT_")}, "rows": []}
    for b in args.batches:
        llm = LLM(model, cuda_graph="on", device="cuda", dtype=torch.bfloat16, max_num_seqs=b,
                  max_tokens=b * (FULL.decode_ctx + FULL.decode_steps + 2),
                  max_num_batched_tokens=b * FULL.decode_ctx)
        ps = prompts(b, FULL.decode_ctx, LLAMA3_8B["vocab_size"], 2)
        gen, alone, own = [], [], Scheduler._follow
        for _ in range(args.rounds):        # interleaved: with and without the queued call
            gen.append(runner_decode(llm, ps, FULL.decode_steps, time_ms, 3)[0])
            Scheduler._follow = lambda self, call: None
            try:
                alone.append(runner_decode(llm, ps, FULL.decode_steps, time_ms, 3)[0])
            finally:
                Scheduler._follow = own
        generation.Scheduler = functools.partial(Scheduler, decode_ahead=64)
        try:
            gen64 = runner_decode(llm, ps, FULL.decode_steps, time_ms, 3)[0]
        finally:
            generation.Scheduler = Scheduler
        engine, graphs = llm.engine, llm.engine.graphs
        ids = engine.new_ids(b)
        logits = engine.prefill(ps, ids=ids)
        tokens = [int(x[-1].argmax()) for x in logits]
        seqs = [engine.sequence(i) for i in ids]
        for seq, t in zip(seqs, tokens):
            seq.output.append(t)
        calls = []
        for _ in range(4):
            t0 = time.perf_counter()
            rows = engine.decode_ahead(seqs, 16)
            calls.append((time.perf_counter() - t0) * 1e3 / 16)
            for seq, new in zip(seqs, rows):     # the caller appends them
                seq.output.extend(new)
        ahead16 = sorted(calls[1:])[1]
        engine.release(ids)
        ids = engine.new_ids(b)
        logits = engine.prefill(ps, ids=ids)
        tokens = [int(x[-1].argmax()) for x in logits]
        trace(engine, ids, tokens, 2)
        kernels, walls = trace(engine, ids, tokens, 8)
        prof = summarise(kernels, walls, 8)
        size = graphs.bucket_for(b)
        reach = next(r for r in graphs.reaches[size] if r >= FULL.decode_ctx + 12)
        bucket = graphs._bucket[(size, reach)]
        tok = graphs.tokens[:size]

        def loop16():
            for _ in range(16):
                bucket.graph.replay()
                tok.copy_(bucket.argmax)

        loop = time_ms(loop16, warmup=2, reps=9) / 16
        waits = []
        for _ in range(32):
            t0 = time.perf_counter()
            bucket.graph.replay()
            torch.cuda.synchronize()
            waits.append((time.perf_counter() - t0) * 1e3)
        waits.sort()
        engine.release(ids)
        row = {"batch": b, "bucket": [size, reach], "generate_ms": [round(x, 4) for x in gen],
               "gen_no_follow_ms": [round(x, 4) for x in alone],
               "gen_ahead64_ms": round(gen64, 4), "ahead16_ms": round(ahead16, 4),
               "loop16_ms": round(loop, 4), "replay_sync_ms": round(waits[16], 4),
               "busy_ms": round(prof["busy_ms"], 4), "launches": prof["launches"],
               "tok_s_generate": [round(b / x * 1e3, 1) for x in gen],
               "tok_s_loop16": round(b / loop * 1e3, 1), "tok_s_busy": round(b / prof["busy_ms"] * 1e3, 1)}
        report["rows"].append(row)
        print(json.dumps(row), flush=True)
        with open(os.path.join(args.out, "probe_step_gaps.json"), "w") as f:
            json.dump(report, f, indent=1)
        del llm, engine, graphs, bucket
        gc.collect()
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

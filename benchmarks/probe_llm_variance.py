"""Why the engine's decode step moves by several per cent from one LLM to the next with the
same code (bench_switch's noise: results/session-1203b/c2 217-234 tok/s at B=1, session
1203e call 1 231-244): the same model, N LLMs built one after another in one process, and for
each:

  rate      bench_runner's decode timing at batch B (twice: the spread within one LLM)
  products  each of the layer's four products (qkv, o, gate_up, down) over the LLM's own 32
            weights in a row inside one CUDA graph at B rows (skinny.mm, the engine's
            routing and launch options), in GB/s of weights: qkv and gate_up are new tensors
            a build (Linear.stack concatenates the checkpoint's), o and down are the model's
            own (the same memory every build), the control
  profile   a trace of 8 decode steps: GPU busy a step and microseconds a step by kernel kind
  memory    where the stacked weights lie: how many of the 32 start on a 2 MiB boundary, and
            the span of their addresses
  copy      the device-to-device copy rate just before (the GPU's own state)
  ways      (first LLM) o_proj and down_proj over the model's own weights, fresh clones, one
            arena and 5 weights repeated, by skinny's routing and by stream_mm

    PYTHONPATH=src python3 benchmarks/probe_llm_variance.py [--llms 5] [--batch 1] [--out DIR]

Writes probe_llm_variance.json; prints one line an LLM.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_runner import FULL, LLAMA3_8B, build_model, prompts, runner_decode  # noqa: E402
from common import copy_bandwidth_gbs, environment, graphed, time_ms  # noqa: E402
from profile_engine_step import summarise, trace  # noqa: E402

MiB2 = 2 << 20


def products(llm, rows: int) -> dict:
    """GB/s of weights of each product kind over the LLM's 32 layers, one graph a kind."""
    from attnkit.runner.layers import skinny

    blocks = llm.engine.model.blocks
    kinds = {"qkv": [b.attention.qkv for b in blocks], "o": [b.attention.o for b in blocks],
             "gate_up": [b.mlp.gate_up for b in blocks], "down": [b.mlp.down for b in blocks]}
    out = {}
    for name, lins in kinds.items():
        k = lins[0].weight.shape[1]
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        run, note = graphed(lambda: [skinny.mm(x, lin.weight) for lin in lins])
        if note is not None:
            out[name] = {"error": note}
            continue
        ms = time_ms(run, warmup=3, reps=20)
        nbytes = sum(lin.weight.numel() * 2 for lin in lins)
        out[name] = {"gbs": round(nbytes / (ms / 1e3) / 1e9, 1)}
    return out


def weights_ways(llm, rows: int) -> dict:
    """o_proj's and down_proj's 32 weights (the model's own tensors) against copies: each
    weight cloned (a fresh allocation each), all 32 in one arena (one allocation), and the
    first 5 repeated (bench_skinny's L copies); skinny.mm's default routing and stream_mm
    (ATTNKIT_STREAM_MM=1-1) on each: GB/s of weights, one graph a (kind, way)."""
    from attnkit.runner.layers import skinny

    blocks = llm.engine.model.blocks
    out = {}
    for name, ws in (("o", [b.attention.o.weight for b in blocks]),
                     ("down", [b.mlp.down.weight for b in blocks])):
        arena = torch.empty(len(ws), *ws[0].shape, dtype=ws[0].dtype, device=ws[0].device)
        for i, w in enumerate(ws):
            arena[i].copy_(w)
        ways = {"own": ws, "clones": [w.clone() for w in ws], "arena": list(arena),
                "five": [ws[i % 5] for i in range(len(ws))]}
        x = torch.randn(rows, ws[0].shape[1], device="cuda", dtype=torch.bfloat16)
        for way, wl in ways.items():
            for route in ("skinny", "stream"):
                os.environ["ATTNKIT_STREAM_MM"] = "1-128" if route == "stream" else "0-0"
                run, note = graphed(lambda: [skinny.mm(x, w) for w in wl])
                if note is None:
                    ms = time_ms(run, warmup=3, reps=20)
                    out[f"{name} {way} {route}"] = round(sum(w.numel() * 2 for w in wl) / (ms / 1e3) / 1e9)
                del run
        os.environ.pop("ATTNKIT_STREAM_MM", None)
        del ways, arena
        out[f"{name} own 2MiB-aligned"] = sum(w.data_ptr() % MiB2 == 0 for w in ws)
    return out


def placement(llm) -> dict:
    blocks = llm.engine.model.blocks
    out = {}
    for name, get in (("qkv", lambda b: b.attention.qkv.weight), ("gate_up", lambda b: b.mlp.gate_up.weight)):
        ptrs = [get(b).data_ptr() for b in blocks]
        out[name] = {"aligned_2mib": sum(p % MiB2 == 0 for p in ptrs),
                     "offsets_kib": sorted({(p % MiB2) >> 10 for p in ptrs})[:6],
                     "span_gib": round((max(ptrs) - min(ptrs)) / 2**30, 2)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llms", type=int, default=5)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_llm_variance needs a CUDA GPU", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    from attnkit.runner import LLM

    model = build_model(LLAMA3_8B, "cuda", torch.bfloat16)
    b = args.batch
    common = dict(device="cuda", dtype=torch.bfloat16, max_num_seqs=b,
                  max_tokens=b * (FULL.decode_ctx + FULL.decode_steps + 2),
                  max_num_batched_tokens=b * FULL.decode_ctx)
    ps = prompts(b, FULL.decode_ctx, LLAMA3_8B["vocab_size"], 2)
    report = {"environment": environment(), "batch": b, "llms": []}
    for i in range(args.llms):
        copy = copy_bandwidth_gbs()
        llm = LLM(model, cuda_graph="on", **common)
        rates = [round(b / runner_decode(llm, ps, FULL.decode_steps, time_ms, args.reps)[0] * 1e3, 1)
                 for _ in range(2)]
        engine = llm.engine
        ids = engine.new_ids(b)
        logits = engine.prefill(ps, ids=ids)
        tokens = [int(x[-1].argmax()) for x in logits]
        trace(engine, ids, tokens, 2)
        kernels, walls = trace(engine, ids, tokens, 8)
        prof = summarise(kernels, walls, 8)
        engine.release(ids)
        row = {"llm": i, "copy_gbs": round(copy), "tok_s": rates, "busy_ms": round(prof["busy_ms"], 4),
               "kinds_us": {k: round(v["us"], 1) for k, v in prof["kinds"].items()},
               "products_gbs": products(llm, b), "placement": placement(llm),
               **({"weights_ways": weights_ways(llm, b)} if i == 0 else {})}
        report["llms"].append(row)
        print(json.dumps(row), flush=True)
        with open(os.path.join(args.out, "probe_llm_variance.json"), "w") as f:
            json.dump(report, f, indent=1)
        del llm, engine
        gc.collect()
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What ``--require batch-invariant,deterministic`` costs the runner, and whether it holds.

    python benchmarks/bench_deterministic.py [--layers 32] [--json benchmarks/results/bench_deterministic.json]
    python benchmarks/bench_deterministic.py --tiny      # CPU smoke test of the same code

A Llama-3-8B-shaped model (bench_runner.LLAMA3_8B; ``--layers`` of its 32, random bf16 weights,
built with transformers, nothing downloaded) is run by ``attnkit.runner.LLM`` twice: as planned
(CUDA graphs where the plan turns them on) and with the requirement (backends that declare both
properties; GEMMs one row at a time). Per mode: greedy decode throughput of B in --batches
prompts of --prompt tokens for --steps new tokens (tokens/s = B * steps / wall time, prefill
included: both modes pay it), and, with the requirement, the check it promises: request 0's
tokens alone, inside the batch of B and in a second run of the batch, equal token for token.
Results as JSON (--json), one object: environment, model, rows, checks.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_runner import LLAMA3_8B, TINY, build_model, prompts  # noqa: E402
from common import environment  # noqa: E402

import torch  # noqa: E402

REQUIRE = ("batch_invariant", "deterministic")


def run(llm, batch: list[list[int]], steps: int) -> tuple[list[list[int]], float]:
    """Greedy tokens of every prompt, and the wall seconds of the whole generate call."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = llm.generate(batch, max_new_tokens=steps, ignore_eos=True)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return [o.token_ids for o in outs], time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="CPU, tiny model: tests the script")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--json", default="benchmarks/results/bench_deterministic.json")
    args = ap.parse_args(argv)
    from attnkit.runner import LLM

    device = "cpu" if args.tiny else "cuda"
    dtype = torch.float32 if args.tiny else torch.bfloat16
    cfg = dict(TINY) if args.tiny else {**LLAMA3_8B, "num_hidden_layers": args.layers}
    model = build_model(cfg, device, dtype)
    most = max(args.batches) + 1
    kv = most * (args.prompt + args.steps + 16)
    common = dict(device=device, dtype=dtype, max_tokens=kv)
    modes = {"planned": LLM(model, **common), "required": LLM(model, require=",".join(REQUIRE), **common)}
    result = {"environment": environment(), "command": " ".join(sys.argv), "model": cfg,
              "prompt": args.prompt, "steps": args.steps, "rows": [], "checks": []}
    for name, llm in modes.items():
        plan = llm.plan
        backends = {r.role: r.backend for r in plan.run.roles}
        for b in args.batches:
            batch = prompts(b, args.prompt, cfg["vocab_size"], seed=b)
            run(llm, batch[:1], 2)                                   # warm-up
            tokens, seconds = run(llm, batch, args.steps)
            result["rows"].append({"mode": name, "batch": b, "backends": backends,
                                   "numerics": list(plan.run.numerics), "seconds": seconds,
                                   "tokens_per_s": b * args.steps / seconds})
            if name == "required":
                alone, _ = run(llm, batch[:1], args.steps)
                again, _ = run(llm, batch, args.steps)
                result["checks"].append({"batch": b, "alone_equals_in_batch": alone[0] == tokens[0],
                                         "second_run_equal": again == tokens})
            print(json.dumps(result["rows"][-1]), flush=True)
    rates = {(r["mode"], r["batch"]): r["tokens_per_s"] for r in result["rows"]}
    result["cost"] = {str(b): rates[("required", b)] / rates[("planned", b)] for b in args.batches}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"cost": result["cost"], "checks": result["checks"]}))
    return 0 if all(c["alone_equals_in_batch"] and c["second_run_equal"] for c in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())

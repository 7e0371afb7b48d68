"""The engine's decode step with o_proj's weight prefetched into L2 during the attention
(runner/layers/prefetch.py), against the same step without, same process, rounds interleaved.

    python benchmarks/bench_prefetch.py [--modes 0 1 last] [--rounds 3] [--batches 1 16 64]
                                        [--out DIR]

The model, prompts and timing are bench_runner's (Llama-3-8B shape, random bf16 weights,
prompts of 128 tokens, 64 greedy steps, rate = B * 64 / (t(65 new) - t(1 new)), CUDA graphs).
ATTNKIT_L2_PREFETCH is read while the graphs are captured, so every (round, mode) builds its
own LLM over the same model. Greedy tokens of every mode are compared with mode 0's (the
prefetch writes nothing: they must be identical). Writes bench_prefetch.md / .json to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_runner import FULL, LLAMA3_8B, build_model, prompts, runner_decode, same_tokens  # noqa: E402
from common import ceilings, environment, time_ms  # noqa: E402

import torch  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--modes", nargs="+", default=["0", "1", "last"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", nargs="+", type=int, default=[1, 16, 64])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_prefetch needs a CUDA GPU", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")
    from attnkit.runner import LLM

    ceil = ceilings()
    model = build_model(LLAMA3_8B, "cuda", torch.bfloat16)
    weight_bytes = 2 * (sum(q.numel() for q in model.model.layers.parameters())
                        + model.lm_head.weight.numel())
    common = dict(device="cuda", dtype=torch.bfloat16, max_num_seqs=max(args.batches),
                  max_tokens=max(args.batches) * (FULL.decode_ctx + FULL.decode_steps + 2),
                  max_num_batched_tokens=max(args.batches) * FULL.decode_ctx)
    batches = {b: prompts(b, FULL.decode_ctx, LLAMA3_8B["vocab_size"], 2) for b in args.batches}
    rows, reference = [], {}
    for r in range(args.rounds):
        for mode in args.modes:
            os.environ["ATTNKIT_L2_PREFETCH"] = mode
            llm = LLM(model, cuda_graph="on", **common)
            for b, ps in batches.items():
                ms, toks = runner_decode(llm, ps, FULL.decode_steps, time_ms, args.reps)
                rate = b / ms * 1e3
                limit = b * ceil["copy_gbs"] * 1e9 / weight_bytes
                rows.append(dict(round=r, mode=mode, batch=b, ms=ms, tok_s=rate,
                                 pct_limit=100 * rate / limit,
                                 tokens=same_tokens(toks, reference.setdefault(b, toks))))
                print(f"round {r} mode {mode} B={b}: {ms:.3f} ms, {rate:,.0f} tok/s "
                      f"({rows[-1]['pct_limit']:.1f} % of limit), {rows[-1]['tokens']}", flush=True)
            del llm
            torch.cuda.empty_cache()
    head = (f"## bench_prefetch ({environment()})\n\ncopy rate {ceil['copy_gbs']:.0f} GB/s; "
            f"{weight_bytes / 1e9:.2f} GB of weights a step; {args.rounds} rounds, modes interleaved; "
            f"median over rounds (min-max).\n")
    lines = ["| B | ATTNKIT_L2_PREFETCH | ms a step | tok/s | % of limit | vs mode "
             f"{args.modes[0]} | greedy tokens |", "|---:|---|---:|---:|---:|---:|---|"]
    med = {}
    for b in args.batches:
        for mode in args.modes:
            sel = [x for x in rows if x["batch"] == b and x["mode"] == mode]
            rates = [x["tok_s"] for x in sel]
            med[b, mode] = statistics.median(rates)
            toks = "; ".join(sorted({x["tokens"] for x in sel}))
            lines.append(f"| {b} | {mode} | {statistics.median(x['ms'] for x in sel):.3f} | "
                         f"{med[b, mode]:,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | "
                         f"{statistics.median(x['pct_limit'] for x in sel):.1f} | "
                         f"{med[b, mode] / med[b, args.modes[0]]:.3f} | {toks} |")
    text = head + "\n" + "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, "bench_prefetch.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "bench_prefetch.json"), "w") as f:
        json.dump(dict(environment=environment(), copy_gbs=ceil["copy_gbs"],
                       weight_bytes=weight_bytes, rows=rows), f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The engine's decode step under each value of one environment switch, same process,
values interleaved round by round: the A/B the engine's launch switches are decided by.

    python benchmarks/bench_switch.py [--var ATTNKIT_L2_PREFETCH] [--values 0 1 last]
                                      [--rounds 3] [--batches 1 16 64] [--out DIR]

The model, prompts and timing are bench_runner's (Llama-3-8B shape, random bf16 weights,
prompts of 128 tokens, 64 greedy steps, rate = B * 64 / (t(65 new) - t(1 new)), CUDA graphs).
The switches (ATTNKIT_L2_PREFETCH, ATTNKIT_FUSED_PDL, ATTNKIT_SKINNY, ...) are read while the
graphs are captured, so every (round, value) builds its own LLM over the same model, and
rounds are interleaved because the step time moves by several per cent from one LLM to the
next with the same code (results/session-1203b/c2: 217-234 tok/s at B=1). Greedy tokens of
every value are compared with the first value's. Writes bench_switch_<VAR>.md / .json to --out
(this script was bench_prefetch.py, for ATTNKIT_L2_PREFETCH only, in session 1203b's calls 2-3).
``--var env`` takes values that set several switches at once (``assignments``); ``--busy``
adds each LLM's GPU-busy time a step, the steadier measure (``busy_ms``).
"""
from __future__ import annotations

import argparse
import gc
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
    p.add_argument("--var", default="ATTNKIT_L2_PREFETCH")
    p.add_argument("--values", nargs="+", default=["0", "1", "last"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", nargs="+", type=int, default=[1, 16, 64])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--busy", action="store_true",
                   help="also the GPU-busy time a step (profile_engine_step's trace of 8 steps)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_switch needs a CUDA GPU", file=sys.stderr)
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

    def dump():                            # after every row: a run cut short keeps its rows
        with open(os.path.join(args.out, f"bench_switch_{args.var}.json"), "w") as f:
            json.dump(dict(environment=environment(), var=args.var, copy_gbs=ceil["copy_gbs"],
                           weight_bytes=weight_bytes, rows=rows), f, indent=2)

    names = {n for v in args.values for n in assignments(args.var, v)}
    for r in range(args.rounds):
        for value in args.values:
            for name in names:
                os.environ.pop(name, None)
            os.environ.update(assignments(args.var, value))
            llm = LLM(model, cuda_graph="on", **common)
            for b, ps in batches.items():
                ms, toks = runner_decode(llm, ps, FULL.decode_steps, time_ms, args.reps)
                rate = b / ms * 1e3
                limit = b * ceil["copy_gbs"] * 1e9 / weight_bytes
                rows.append(dict(round=r, value=value, batch=b, ms=ms, tok_s=rate,
                                 pct_limit=100 * rate / limit,
                                 tokens=same_tokens(toks, reference.setdefault(b, toks))))
                if args.busy:
                    rows[-1]["busy_ms"] = busy_ms(llm, ps)
                print(f"round {r} {args.var}={value} B={b}: {ms:.3f} ms, {rate:,.0f} tok/s "
                      f"({rows[-1]['pct_limit']:.1f} % of limit), "
                      + (f"GPU busy {rows[-1]['busy_ms']:.3f} ms, " if args.busy else "")
                      + rows[-1]["tokens"], flush=True)
                dump()
            del llm
            gc.collect()                  # the engine and its graphs hold each other
            torch.cuda.empty_cache()
    head = (f"## bench_switch {args.var} ({environment()})\n\ncopy rate {ceil['copy_gbs']:.0f} GB/s; "
            f"{weight_bytes / 1e9:.2f} GB of weights a step; {args.rounds} rounds, values interleaved; "
            f"median over rounds (min-max).\n")
    lines = [f"| B | {args.var} | ms a step | tok/s | % of limit | vs "
             f"{args.values[0]} |" + (" GPU busy ms (min-max) |" if args.busy else "")
             + " greedy tokens |", "|---:|---|---:|---:|---:|---:|" + ("---:|" if args.busy else "")
             + "---|"]
    med = {}
    for b in args.batches:
        for value in args.values:
            sel = [x for x in rows if x["batch"] == b and x["value"] == value]
            rates = [x["tok_s"] for x in sel]
            med[b, value] = statistics.median(rates)
            toks = "; ".join(sorted({x["tokens"] for x in sel}))
            lines.append(f"| {b} | {value} | {statistics.median(x['ms'] for x in sel):.3f} | "
                         f"{med[b, value]:,.0f} ({min(rates):,.0f}-{max(rates):,.0f}) | "
                         f"{statistics.median(x['pct_limit'] for x in sel):.1f} | "
                         f"{med[b, value] / med[b, args.values[0]]:.3f} | "
                         + (busy_cell(sel) if args.busy else "") + f"{toks} |")
    text = head + "\n" + "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, f"bench_switch_{args.var}.md"), "w") as f:
        f.write(text)
    return 0


def assignments(var: str, value: str) -> dict:
    """The environment a value sets: {var: value}, or with --var env a value of
    NAME=VALUE pairs joined by commas ("ATTNKIT_FUSED_PDL=ahead,ATTNKIT_STREAM_MM=1-1"; "-":
    none); names another value sets are unset."""
    if var != "env":
        return {var: value}
    pairs = [a.partition("=") for a in value.split(",") if a and a != "-"]
    return {n: v for n, _, v in pairs}


def busy_ms(llm, ps) -> float:
    """GPU-busy milliseconds a decode step (the union of kernel intervals over 8 traced steps,
    profile_engine_step.py's measure): steady from one LLM build to the next within ~1 %
    where the rate moved by 5 % (results/session-1203e/c2)."""
    from profile_engine_step import summarise, trace

    engine = llm.engine
    ids = engine.new_ids(len(ps))
    logits = engine.prefill(ps, ids=ids)
    tokens = [int(x[-1].argmax()) for x in logits]
    trace(engine, ids, tokens, 2)
    kernels, walls = trace(engine, ids, tokens, 8)
    engine.release(ids)
    return summarise(kernels, walls, 8)["busy_ms"]


def busy_cell(sel: list) -> str:
    v = [x["busy_ms"] for x in sel]
    return f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}) | "


if __name__ == "__main__":
    sys.exit(main())

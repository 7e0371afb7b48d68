"""Are a graphed decode's logits the same bits from one engine to the next, in one process,
while other processes load the GPU? (tests/runner/test_prefetch.py's graphed-decode test
failed once inside the full GPU suite, 16 workers on one H200, and passed alone.)

A tiny bf16 Llama (the test's: hidden 256, 2 layers) is built ``--reps`` times for each
L2-prefetch mode (0, 1, last); each engine prefills three prompts and decodes four steps
of three sequences (bucket 4) and four of one (bucket 1, stream_mm's rows). Every run's
logits are compared with the first run's; after each engine the split-K ticket counters
(skinny.py's, zero between launches by contract) are checked.

    PYTHONPATH=src python3 benchmarks/probe_graph_bits.py [--reps 4] [--tag NAME]

Prints one JSON line a run and a summary line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "runner"))
from runner_helpers import save_tiny  # noqa: E402

from attnkit.runner import Engine  # noqa: E402
from attnkit.runner.layers import skinny  # noqa: E402


def run(path: str) -> dict:
    e = Engine.from_pretrained(path, page_size=16, device="cuda", dtype=torch.bfloat16,
                               max_num_seqs=4, cuda_graph=True)
    e.prefill([[1, 5, 9, 3, 7], [4, 6], [3, 3, 9]])
    three = torch.stack([e.decode([s + 2, 8, 11]) for s in range(4)])
    e.release()
    e.prefill([[2, 7, 1]])
    one = torch.stack([e.decode([s + 3]) for s in range(4)])
    e.release()
    torch.cuda.synchronize()
    return {"three": three.float().cpu(), "one": one.float().cpu()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    path, _ = save_tiny(tempfile.mkdtemp(), "LlamaConfig", "LlamaForCausalLM",
                        dict(vocab_size=128, hidden_size=256, intermediate_size=256,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             initializer_range=0.2), seed=5)
    first, bad = None, 0
    for rep in range(args.reps):
        for mode in ("0", "1", "last"):
            os.environ["ATTNKIT_L2_PREFETCH"] = mode
            out = run(path)
            dirty = sum(int((c != 0).sum()) for c in skinny._COUNTERS.values())
            if first is None:
                first = out
            row = {"tag": args.tag, "pid": os.getpid(), "rep": rep, "mode": mode,
                   "dirty_counters": dirty}
            for key in out:
                same = torch.equal(out[key], first[key])
                row[key] = "same" if same else (
                    f"diff {float((out[key] - first[key]).abs().max()):.3g}, steps "
                    f"{[i for i in range(4) if not torch.equal(out[key][i], first[key][i])]}")
                bad += not same
            bad += dirty > 0
            print(json.dumps(row), flush=True)
    print(json.dumps({"tag": args.tag, "pid": os.getpid(), "summary": "bad" if bad else "ok",
                      "bad": bad}), flush=True)


if __name__ == "__main__":
    main()

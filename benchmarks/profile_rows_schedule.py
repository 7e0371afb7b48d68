"""Host time of the chained rows kernel's walk (tma_path.chain_walk: rows_schedule.block_arrays,
tile_counts and schedule_arrays, once a step), CPU only, perf_counter medians.

    PYTHONPATH=src python benchmarks/profile_rows_schedule.py [--programs 132] [--repeats 30]

Steps of equal fresh prefills (d128 tiles: 128-row blocks, 128-key tiles), every walk kind;
per step: its items ((block, head) pairs), cost classes (distinct item costs: the LPT walk's
loop count) and the median wall time of the whole walk. --heap also times the walk with an
item cost a float sum may round (0.3: rows_schedule's heap path, the model's algorithm item by
item) for comparison.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from attnkit.backends.triton.rows_schedule import block_arrays, tile_counts
from attnkit.backends.triton.tma_path import chain_walk

STEPS = ((8, 2048, 32), (128, 2048, 32), (32, 4096, 64), (16, 16384, 32), (8, 32768, 32))


class _Meta:
    def __init__(self, batch: int, tokens: int):
        self.query_lens_cpu = self.seq_lens_cpu = [tokens] * batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", type=int, default=132)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--heap", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| step | heads | items | cost classes | kind | item cost | chain_walk ms |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for batch, tokens, heads in STEPS:
        meta = _Meta(batch, tokens)
        q_lens, kv_lens = meta.query_lens_cpu, meta.seq_lens_cpu
        tiles = tile_counts(q_lens, kv_lens, *block_arrays(q_lens, kv_lens, 128), block_n=128)
        classes = len(np.unique(tiles))
        for kind in ("lpt", "pairs", "round_robin"):
            for cost in (1.0, 0.3) if args.heap and kind == "lpt" else (1.0,):
                walk = dict(kind=kind, item_cost=cost)
                times = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    chain_walk({}, meta, heads, args.programs, 128, walk, "cpu")
                    times.append(time.perf_counter() - t0)
                print(f"| {batch} x {tokens} | {heads} | {len(tiles) * heads} | {classes} | {kind} | "
                      f"{cost} | {statistics.median(times) * 1e3:.3f} |", flush=True)


if __name__ == "__main__":
    main()

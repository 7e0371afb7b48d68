"""Issue 28's batched fresh prefill on the H200, one process (NOTES-hopper.md version 13): the
chained rows kernel (gluon_rows_chain, prefill_gluon_chain.py) with each walk
(rows_schedule.py: round_robin, lpt, pairs) and tile, against the persistent rows kernel
(gluon_rows_persistent, version 10's best at 8 x 2k) and, on the same shapes contiguous, cuDNN
and flash SDPA; at 8 x 2k also the chain with the backend's own K/V write kernel ("/write
apart") beside its fused write.

    PYTHONPATH=src python3 benchmarks/bench_batched28.py [--out DIR] [--budget-s 50]

Shapes (d128, 32 / 8 heads, bf16, pages of 16): 8 x 2k (the bar), 4 x 4k, 16 x 1k, 1 x 16k
(the one-request default "gluon" beside), and 2k new over a 32k prefix (no regression of the
extend winner, gluon_rows). Backend rows: CUDA-graph replays and eager calls of
backend.forward (the K/V cache write included), checked against SDPA first
(bench_triton.measure), with whether the chained kernel ran. Kernel rows: the kernels alone on
the packed step (or the gathered buffer), each checked against SDPA before it is timed.
Writes every row as it is measured to DIR/bench_batched28.jsonl, then DIR/bench_batched28.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_triton import Setup, measure  # noqa: E402
from rows_step import (PEER_COLUMNS, checked_row, column, failed, md_table,  # noqa: E402
                       sdpa_reference, step_rows)

from attnkit.backends._triton import LOG2E, write_kv  # noqa: E402
from attnkit.backends.triton import configs, tma_path  # noqa: E402
from attnkit.backends.triton.backend import TritonBackend, query_blocks  # noqa: E402

START = time.time()
SHAPES = {"prefill 8x2k": (8, 0, 2048), "prefill 4x4k": (4, 0, 4096), "prefill 16x1k": (16, 0, 1024),
          "prefill 1x16k": (1, 0, 16384), "extend 2k over 32k": (1, 32768, 2048)}
KINDS = ("lpt", "round_robin", "pairs")
CHAIN_LAUNCHES: list = []
ARGS = None


def _count_chain():
    real = tma_path.prefill_gluon_chain_attention

    def counted(*args, **kwargs):
        CHAIN_LAUNCHES.append((kwargs["start"].shape[0] - 1, kwargs.get("write") is not None))
        return real(*args, **kwargs)
    tma_path.prefill_gluon_chain_attention = counted


def flops(s: Setup) -> float:
    return s.batch * 4 * s.spec.head_dim * s.spec.num_heads * (s.new * s.prefix + s.new * (s.new + 1) / 2)


def emit(row: dict) -> None:
    row["t_s"] = round(time.time() - START, 1)
    print(json.dumps(row, default=str), flush=True)
    with open(os.path.join(ARGS.out, "bench_batched28.jsonl"), "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def backend_rows(name, s, variants, *, peers_with):
    """backend.forward per variant (graph and eager), cuDNN / flash beside ``peers_with``."""
    for label in variants:
        if time.time() - START > ARGS.budget_s:
            emit(dict(shape=name, variant=label, attnkit="n/a (skipped: time box)"))
            continue
        variant, _, option = label.partition("/")        # "/write apart": the backend's write kernel
        CHAIN_LAUNCHES.clear()
        configs.GLUON_CHAIN_WRITE = option != "write apart"
        configs.GLUON_CHAIN_GEO = "geo" in option           # the geometry table (version 15)
        configs.GLUON_CHAIN_STORE_TMA = "tma store" in option   # the TMA-stored epilogue
        try:
            row = measure(s, kind="extend", backend=TritonBackend(extend_variant=variant),
                          units=lambda ms: flops(s) / ms / 1e9, peers=variant == peers_with, flex=False)
        except Exception as exc:  # noqa: BLE001 - one variant failing must not stop the others
            row = {"attnkit": failed(exc)}
        finally:
            configs.GLUON_CHAIN_WRITE, configs.GLUON_CHAIN_GEO = True, False
            configs.GLUON_CHAIN_STORE_TMA = False
        row.update(shape=name, variant=label, unit="TFLOP/s")
        if variant == "gluon_rows_chain":
            row["chain_ran"] = bool(CHAIN_LAUNCHES)
            row["fused_write"] = bool(CHAIN_LAUNCHES) and CHAIN_LAUNCHES[0][1]
        emit(row)


def kernel_rows(name, s, forms):
    """The kernels alone (no cache write; at a prefix the gather outside the time), each form
    checked against SDPA first. forms: (label, "rows" | "chain", programs or None, tiles, kind)."""
    from attnkit.backends.triton.prefill_gluon_chain import prefill_gluon_chain_attention
    from attnkit.backends.triton.prefill_gluon_rows import prefill_gluon_rows_attention
    meta = s.meta
    write_kv(s.cache, 0, meta.slot_mapping, s.k, s.v)        # this step's keys in the cache
    k_rows, v_rows, rows, _ = step_rows(s)
    ref = sdpa_reference(s)
    block_req, block_m = query_blocks(list(meta.query_lens_cpu), list(meta.seq_lens_cpu), 128,
                                      device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    common = dict(block_req=block_req, block_m=block_m, qk_scale=s.spec.softmax_scale * LOG2E,
                  v_scale=1.0, **rows)
    for label, kernel, programs, tiles, kind in forms:
        if time.time() - START > ARGS.budget_s:
            emit(dict(shape=name, variant=label, attnkit="n/a (skipped: time box)"))
            continue
        out = torch.full_like(s.q, float("nan"))
        if kernel == "rows":
            fn = lambda: prefill_gluon_rows_attention(s.q, k_rows, v_rows, out, programs=programs,  # noqa: E731
                                                      tiles=tiles, **common)
        else:
            walk, *extras = kind.split("+")       # "lpt+geo", "lpt+tmastore", "lpt+geo+tmastore"
            order, start, geo = tma_path.chain_walk({}, meta, s.q.shape[1], sms, tiles[0],
                                                    dict(kind=walk, item_cost=1.0), "cuda",
                                                    geometry="geo" in extras)
            store = "tmastore" in extras
            fn = lambda: prefill_gluon_chain_attention(s.q, k_rows, v_rows, out, order=order,  # noqa: E731
                                                       start=start, tiles=tiles, geo=geo,
                                                       store_tma=store, **common)
        emit(checked_row(fn, out, ref, units=lambda ms: flops(s) / ms / 1e9, shape=name,
                         variant=label))


def forms(full: bool, *, prefix: bool):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = [("kernel rows persistent", "rows", sms, None, None)]
    if prefix:
        rows.insert(0, ("kernel rows one program an item", "rows", None, None, None))
    tiles = [(128, 3, 2), (128, 2, 2)] if full else [(128, 3, 2)]
    return rows + [(f"kernel chain {kind} tiles={t}", "chain", sms, t, kind) for t in tiles
                   for kind in (*KINDS, "lpt+geo", "lpt+tmastore", "lpt+geo+tmastore")]


def table() -> str:
    return md_table(os.path.join(ARGS.out, "bench_batched28.jsonl"),
                    {"attnkit (graph)": column("attnkit"), **PEER_COLUMNS})


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=50.0)
    ARGS = ap.parse_args()
    os.makedirs(ARGS.out, exist_ok=True)
    torch.manual_seed(0)
    _count_chain()
    first = "prefill 8x2k"
    s = Setup(*SHAPES[first])
    backend_rows(first, s, ["gluon_rows_persistent", "gluon_rows_chain", "gluon_rows_chain/geo",
                            "gluon_rows_chain/tma store", "gluon_rows_chain/geo tma store",
                            "gluon_rows_chain/write apart"],
                 peers_with="gluon_rows_persistent")
    kernel_rows(first, s, forms(True, prefix=False))
    for name, shape in SHAPES.items():
        if name == first:
            continue
        s = Setup(*shape)
        extra = ["gluon"] if name == "prefill 1x16k" else ["gluon_rows"] if shape[1] else []
        backend_rows(name, s, ["gluon_rows_persistent", "gluon_rows_chain", "gluon_rows_chain/geo",
                               "gluon_rows_chain/tma store", "gluon_rows_chain/geo tma store", *extra],
                     peers_with="gluon_rows_persistent")
        kernel_rows(name, s, forms(False, prefix=bool(shape[1])))
        del s
        torch.cuda.empty_cache()
    md = table()
    with open(os.path.join(ARGS.out, "bench_batched28.md"), "w") as fh:
        fh.write(md + "\n")
    print(md, flush=True)


if __name__ == "__main__":
    main()

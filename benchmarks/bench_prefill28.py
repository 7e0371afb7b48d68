"""Issue 28's rows on the H200, one process: the Gluon rows kernel (gluon_rows,
gluon_rows_persistent) against the Triton tile (tma) and, on one fresh request, the Gluon
prefill (gluon), with cuDNN / flash SDPA (and FlexAttention where the time box allows) on the
same shapes, contiguous, in the same run.

    PYTHONPATH=src python3 benchmarks/bench_prefill28.py [--out DIR] [--budget-s 50] [--lengths]

Shapes: 8 fresh prefills of 2048 (batched, causal), 2048 new tokens over a 32k prefix, one
fresh prefill of 16k (no regression of the one-request default); d128, 32 / 8 heads, bf16,
pages of 16. Every attnkit row is checked against SDPA before it is timed (bench_triton.measure:
rel err < 2e-2, else "n/a (wrong ...)"), and a Gluon rows row also records that the kernel ran.
Kernel-only rows time prefill_gluon_rows_attention alone on the packed step / the gathered
buffer (the gather's own time beside), for its tile and program-count forms; --lengths adds the
kernel alone at 16k tokens a step in requests of 1k to 16k (its rate against the item length:
how much a short request's per-block cost weighs).
Writes every row as soon as it is measured to DIR/bench_prefill28.jsonl, then
DIR/bench_prefill28.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_triton import Setup, _peer, flex_peer, measure, sdpa_peer, timed  # noqa: E402
from rows_step import (PEER_COLUMNS, cell, checked_row, column, md_table,  # noqa: E402
                       sdpa_reference, step_rows)

from attnkit.backends._triton import LOG2E  # noqa: E402
from attnkit.backends.triton import tma_path  # noqa: E402
from attnkit.backends.triton.backend import TritonBackend, query_blocks  # noqa: E402

START = time.time()
SHAPES = {"prefill 8x2k": (8, 0, 2048), "extend 2k over 32k": (1, 32768, 2048),
          "prefill 1x16k": (1, 0, 16384)}
TILES = [None, (128, 3, 3), (64, 4, 4)]          # d128 (BN, K slots, V slots); None: GLUON_TILES
LAUNCHES: list = []


def _count_launches():
    real = tma_path.prefill_gluon_rows_attention

    def counted(*args, **kwargs):
        LAUNCHES.append(kwargs.get("programs"))
        return real(*args, **kwargs)
    tma_path.prefill_gluon_rows_attention = counted


def flops(s: Setup) -> float:
    return s.batch * 4 * s.spec.head_dim * s.spec.num_heads * (s.new * s.prefix + s.new * (s.new + 1) / 2)


def emit(row: dict, out_dir: str) -> None:
    row["t_s"] = round(time.time() - START, 1)
    print(json.dumps(row, default=str), flush=True)
    with open(os.path.join(out_dir, "bench_prefill28.jsonl"), "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def variant_rows(name, s, out_dir, variants):
    units = lambda ms: flops(s) / ms / 1e9  # noqa: E731
    for variant in variants:
        LAUNCHES.clear()
        try:
            row = measure(s, kind="extend", backend=TritonBackend(extend_variant=variant), units=units,
                          peers=variant == "tma", flex=False)
        except Exception as exc:  # noqa: BLE001 - one variant failing must not stop the others
            torch.cuda.synchronize()
            row = {"attnkit": f"n/a ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"}
        row.update(shape=name, variant=variant, unit="TFLOP/s")
        if variant.startswith("gluon_rows"):
            row["rows_kernel_ran"] = bool(LAUNCHES)
        emit(row, out_dir)


def kernel_rows(name, s, out_dir, tiles_list=TILES):
    """prefill_gluon_rows_attention alone (no cache write, no gather in the time), each tile and
    grid form, checked against SDPA first."""
    from attnkit.backends.triton.prefill_gluon_rows import prefill_gluon_rows_attention
    meta = s.meta
    be = TritonBackend(extend_variant="tma")
    be.forward(s.q, s.k, s.v, s.layer, s.cache, be.prepare(meta, s.cache))     # the cache write
    k_rows, v_rows, rows, gather = step_rows(s)
    if gather is not None:
        emit(dict(shape=name, variant="gather_rows alone", ms=timed(gather)[0]), out_dir)
    ref = sdpa_reference(s)
    block_req, block_m = query_blocks(list(meta.query_lens_cpu), list(meta.seq_lens_cpu), 128,
                                      device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    scale = s.spec.softmax_scale * LOG2E
    for tiles in tiles_list:
        for programs in (None, sms):
            label = f"kernel tiles={tiles or 'default'} programs={programs or 'items'}"
            if time.time() - START > ARGS.budget_s:
                emit(dict(shape=name, variant=label, attnkit="n/a (skipped: time box)"), out_dir)
                continue
            out = torch.full_like(s.q, float("nan"))
            fn = lambda: prefill_gluon_rows_attention(s.q, k_rows, v_rows, out, block_req=block_req,  # noqa: E731
                                                      block_m=block_m, qk_scale=scale, v_scale=1.0,
                                                      programs=programs, tiles=tiles, **rows)
            emit(checked_row(fn, out, ref, units=lambda ms: flops(s) / ms / 1e9, shape=name,
                             variant=label), out_dir)


def flex_row(name, s, out_dir):
    k_c, v_c = s.gather()
    q = s.q_bhsd()
    from torch.nn.attention.bias import causal_lower_right
    mask = causal_lower_right(s.new, s.prefix + s.new) if s.prefix else None
    ref = sdpa_peer(None, q, k_c, v_c, mask, not s.prefix, expand=True)()
    got = _peer(lambda: flex_peer(q, k_c, v_c, s.prefix, True), lambda ms: flops(s) / ms / 1e9, ref)
    emit(dict(shape=name, variant="flex", flex=got, unit="TFLOP/s"), out_dir)


def table(out_dir: str) -> str:
    ours = lambda r: f"{r['ms']:.3f} ms" if "ms" in r else cell(r.get("attnkit"))  # noqa: E731
    return md_table(os.path.join(out_dir, "bench_prefill28.jsonl"),
                    {"attnkit": ours, **PEER_COLUMNS, "gather+sdpa": column("gather_sdpa"),
                     "flex": column("flex")})


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=50.0)
    ap.add_argument("--lengths", action="store_true",
                    help="also the kernel alone on 16 x 1k, 4 x 4k, 2 x 8k and 1 x 16k fresh prefills")
    ARGS = ap.parse_args()
    os.makedirs(ARGS.out, exist_ok=True)
    torch.manual_seed(0)
    _count_launches()
    setups = {}
    for name, (b, prefix, new) in SHAPES.items():      # the shipped kernels and the peers first
        setups[name] = s = Setup(b, prefix, new)
        variant_rows(name, s, ARGS.out, ["tma"] + (["gluon"] if b == 1 and not prefix else []))
    for name, s in setups.items():                      # then the new kernel (a hang loses only it)
        variant_rows(name, s, ARGS.out, ["gluon_rows", "gluon_rows_persistent"])
    for name in ("prefill 8x2k", "extend 2k over 32k"):
        kernel_rows(name, setups[name], ARGS.out)
    for name in ("prefill 8x2k", "extend 2k over 32k"):
        if time.time() - START < ARGS.budget_s - 15:
            flex_row(name, setups[name], ARGS.out)
    if ARGS.lengths:            # the rate against the request length at 16k tokens a step
        for b, n in ((16, 1024), (4, 4096), (2, 8192), (1, 16384)):
            kernel_rows(f"prefill {b}x{n // 1024}k", Setup(b, 0, n), ARGS.out, [None])
    md = table(ARGS.out)
    with open(os.path.join(ARGS.out, "bench_prefill28.md"), "w") as fh:
        fh.write(md + "\n")
    print(md, flush=True)


ARGS = None
if __name__ == "__main__":
    main()

"""Benchmark triton_dsa (DeepSeek sparse attention: indexer + top-k + sparse MLA) on one GPU,
next to the machine's measured ceilings and, in the same run, its peers.

    PYTHONPATH=src python3 benchmarks/bench_dsa.py [--quick] [--reps N] [--out DIR]
    PYTHONPATH=src python3 benchmarks/bench_dsa.py --render DIR/bench_dsa.json    # its tables again
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/bench_dsa.py --smoke   # CPU: runs, times nothing

DeepSeek-V3.2 sizes: kv_lora_rank 512, rope 64, 128 heads, top-k 2048, indexer 64 heads x 128,
page 64, bf16 latent. Rows:
- decode: ctx {8k, 32k, 128k} x B {1, 8, 64, 128}, one token a request. Sparse core = the
  sparse MLA kernel over the indexer's own selection; TFLOP/s count 2*H*topk*(L+R) +
  2*H*topk*L per token. Indexer = score kernel (bf16 keys; fp8 keys too) + top-k
  (torch.topk over the kernel's packed (score, position) keys; peer: torch.topk of fp32
  scores, ties unordered); "share" = indexer / (indexer + sparse core).
  Peers: the dense triton_mla kernel core over the whole context (the plan's variant), and
  "torch gather": the selected rows gathered, then two batched matmuls. Every sparse row is
  checked against the torch gather result first.
  A shape that does not fit the device (or fails) is a row with its reason ("skipped").
- prefill: 4k new tokens over a 32k context, and a fresh 8k prefill (one request each):
  indexer (2 tokens a tile) + top-k + sparse core; peer: triton_mla's whole forward (the
  plan's MHA form) over the same chunk.
- step (dsa_graph_step.py): one DSA layer's whole triton_dsa forward of a decode step, as a
  captured static step (CUDA graph replay) and eagerly (prepare once, forward each call).
- tiles: a few sparse tiles at B 64, ctx 32k (the target row), and indexer tiles.
Timings: CUDA-graph replays where capture works, L2 flushed between repetitions.
Writes bench_dsa.json and bench_dsa.md under --out.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_mla as mla  # noqa: E402
from bench_mla import L, NOPE, R, Setup, _planned  # noqa: E402
from common import environment, failure_reason  # noqa: E402
from dsa_graph_step import STEP_SHAPES, step_row  # noqa: E402

from attnkit.backends.triton_dsa.indexer import index_scores, topk_of_keys  # noqa: E402
from attnkit.backends.triton_dsa.sparse_mla import (sparse_mla, sparse_tile, ws_ready,  # noqa: E402
                                                    ws_tile)
from attnkit.backends.triton_mla.backend import TritonMLABackend  # noqa: E402

HEADS, TOPK, IH, ID = 128, 2048, 64, 128
SIZES = dict(heads=HEADS, topk=TOPK, index_heads=IH, index_dim=ID)
FP8 = torch.float8_e4m3fn


class DSASetup:
    """bench_mla.Setup (latent cache, shuffled pages, metadata) plus the indexer's inputs."""

    def __init__(self, batch, prefix, new):
        self.s = s = Setup(batch, prefix, new, heads=HEADS)
        dev = s.q.device
        pages, page = s.cache.latent[0].shape[:2]
        self.index_k = torch.randn(pages, page, ID, device=dev, dtype=mla.DT)
        self.index_k8 = (self.index_k / 0.05).to(FP8)
        self.index_scale = torch.full((pages, page), 0.05, device=dev)
        T = batch * new
        self.q_idx = torch.randn(T, IH, ID, device=dev, dtype=mla.DT)
        self.weights = torch.randn(T, IH, device=dev) / IH ** 0.5
        self.req = torch.arange(batch, device=dev, dtype=torch.int32).repeat_interleave(new)
        self.pos = (prefix + torch.arange(new, device=dev, dtype=torch.int32)).repeat(batch)
        self.table = s.meta.block_tables.to(torch.int32)
        self.max_kv = prefix + new
        q_lat = torch.bmm(s.q[..., :NOPE].transpose(0, 1), s.layer.w_kc)    # [H, T, L]
        self.q_lat_hf = q_lat
        self.q_cat = torch.cat([q_lat.transpose(0, 1), s.q[..., NOPE:]], -1).contiguous()
        self.scale = s.spec.softmax_scale

    def scores(self, fp8=False, packed=True, **tile):
        """The score kernel's packed top-k keys [T, S] int64 (packed=False: fp32 scores)."""
        k, ks = (self.index_k8, self.index_scale) if fp8 else (self.index_k, None)
        return index_scores(self.q_idx, self.weights, k, ks, self.table, self.req, self.pos,
                            max_kv=self.max_kv, packed=packed, **tile)

    def sparse(self, idx, tile):
        return sparse_mla(self.q_cat, self.s.cache.latent[0], self.table, self.req, idx,
                          scale=self.scale, L=L, **tile)


def torch_gather(d: DSASetup, idx):
    """Peer: the selected latent rows gathered per token, then two batched matmuls."""
    lat = d.s.cache.latent[0]
    page = lat.shape[1]
    ok = idx >= 0
    safe = idx.clamp(min=0).long()
    slots = d.table.long()[d.req.long()[:, None], safe // page] * page + safe % page
    rows = lat.view(-1, L + R)[slots]                                     # [T, K, L+R]
    s = (d.q_cat @ rows.transpose(1, 2)).float() * d.scale                # [T, H, K]
    s = s.masked_fill(~ok[:, None, :], float("-inf"))
    return torch.softmax(s, -1).to(mla.DT) @ rows[..., :L]


def rel_err(out, ref):
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def backend_tile(d) -> dict:
    """The sparse kernel the backend runs here without a plan (declaration order): the Gluon
    kernel (sparse_ws) where ws_ready admits the call, else the Triton kernel's tile."""
    if ws_ready(d.q_cat, d.s.cache.latent[0], L=L):
        return ws_tile(d.q_cat, TOPK)
    return sparse_tile(d.q_cat, TOPK, L=L)


def tile_text(t: dict) -> str:
    if t.get("kernel", "triton") != "triton":
        return f"gluon {t['kernel']} {t['num_splits']} splits"
    return (f"{t['block_h']}h {t['block_n']}k {t['num_warps']}w {t['num_stages']}s "
            f"{t['num_splits']} splits")


def decode_row(batch, ctx, args, dense):
    d = DSASetup(batch, ctx - 1, 1)
    reps = dict(warmup=3, reps=args.reps, cold_l2=True)
    t_score, _ = mla.graph_ms(lambda: d.scores(), **reps)
    t_score8, _ = mla.graph_ms(lambda: d.scores(fp8=True), **reps)
    keys = d.scores()
    t_topk, topk_how = mla.graph_ms(lambda: topk_of_keys(keys, d.pos, TOPK), **reps)
    idx = topk_of_keys(keys, d.pos, TOPK)
    del keys
    floats = d.scores(packed=False)      # peer: torch.topk of the fp32 scores (ties unordered)
    t_topk32, _ = mla.graph_ms(lambda: torch.topk(floats, min(TOPK, floats.shape[1]), dim=1), **reps)
    del floats
    tile = backend_tile(d)
    err = rel_err(d.sparse(idx, tile), torch_gather(d, idx))
    if not err < 2e-2:
        raise RuntimeError(f"decode B={batch} ctx={ctx}: relative error {err:.3g} vs torch gather")
    t_core, how = mla.graph_ms(lambda: d.sparse(idx, tile), **reps)
    t_gather = mla.time_ms(lambda: torch_gather(d, idx), warmup=2, reps=5, cold_l2=True)
    s = d.s
    step = dense.prepare(s.meta, s.cache)
    q_pe = s.q[..., NOPE:]
    t_dense, _ = mla.graph_ms(lambda: dense.attend_latent(d.q_lat_hf, q_pe, s.cache.latent[0], s.layer,
                                                      step), warmup=1, reps=5, cold_l2=True)
    flops = batch * (2 * HEADS * TOPK * (L + R) + 2 * HEADS * TOPK * L)
    ind = t_score + t_topk
    row = dict(kind="decode", batch=batch, ctx=ctx, tile=tile, timing=how, topk_timing=topk_how,
               core_ms=t_core,
               core_tflops=flops / t_core / 1e9, score_ms=t_score, score_fp8_ms=t_score8,
               topk_ms=t_topk, topk_fp32_ms=t_topk32, indexer_share=ind / (ind + t_core),
               score_gbs=batch * ctx * ID * 2 / t_score / 1e6, gather_ms=t_gather,
               dense_ms=t_dense, dense_tflops=batch * 2 * HEADS * ctx * (2 * L + R) / t_dense / 1e9,
               rel_err=err)
    del d, s, step
    torch.cuda.empty_cache()
    return row


def prefill_row(new, ctx, args, dense):
    d = DSASetup(1, ctx - new, new)
    reps = dict(warmup=1, reps=max(3, args.reps // 4))
    tile_i = dict(block_t=2, block_n=64)
    t_score = mla.time_ms(lambda: d.scores(**tile_i), **reps)
    keys = d.scores(**tile_i)
    t_topk = mla.time_ms(lambda: topk_of_keys(keys, d.pos, TOPK), **reps)
    idx = topk_of_keys(keys, d.pos, TOPK)
    del keys
    tile = backend_tile(d)
    part = slice(new - 64, new)                      # the last 64 tokens, checked
    sub = sparse_mla(d.q_cat[part], d.s.cache.latent[0], d.table, d.req[part], idx[part],
                     scale=d.scale, L=L, **tile)
    ref = torch_gather(_Slice(d, part), idx[part])
    err = rel_err(sub, ref)
    if not err < 2e-2:
        raise RuntimeError(f"prefill {new}/{ctx}: relative error {err:.3g} vs torch gather")
    t_core = mla.time_ms(lambda: d.sparse(idx, tile), **reps)
    s = d.s
    step = dense.prepare(s.meta, s.cache)
    t_dense = mla.time_ms(lambda: dense.forward(s.q, s.k, None, s.layer, s.cache, step), **reps)
    flops = new * (2 * HEADS * TOPK * (L + R) + 2 * HEADS * TOPK * L)
    ind = t_score + t_topk
    row = dict(kind="prefill", new=new, ctx=ctx, tile=tile, core_ms=t_core,
               core_tflops=flops / t_core / 1e9, score_ms=t_score, topk_ms=t_topk,
               indexer_share=ind / (ind + t_core), dense_fwd_ms=t_dense, rel_err=err)
    del d, s, step
    torch.cuda.empty_cache()
    return row


class _Slice:
    """A DSASetup view of some of its tokens (for the torch peer)."""

    def __init__(self, d, part):
        self.s, self.table, self.scale = d.s, d.table, d.scale
        self.req, self.q_cat = d.req[part], d.q_cat[part]


SPARSE_TILES = [(64, 64, 8, 3), (64, 32, 8, 3), (64, 32, 8, 2), (64, 16, 8, 2), (32, 64, 8, 2),
                (64, 64, 8, 2)]
INDEX_TILES = [(64, 4), (128, 4), (128, 8), (256, 8)]
TILE_SHAPE = (64, 32768)       # batch, context of the tile rows (the target row)


def tile_rows(args):
    batch, ctx = TILE_SHAPE
    d = DSASetup(batch, ctx - 1, 1)
    rows = []
    idx = topk_of_keys(d.scores(), d.pos, TOPK)
    flops = batch * (2 * HEADS * TOPK * (L + R) + 2 * HEADS * TOPK * L)
    for bh, bn, w, st in SPARSE_TILES:
        tile = dict(block_h=bh, block_n=bn, num_warps=w, num_stages=st, num_splits=1)
        try:
            t, _ = mla.graph_ms(lambda: d.sparse(idx, tile), warmup=3, reps=args.reps, cold_l2=True)
            rows.append(dict(kind="sparse_tile", tile=tile, core_ms=t, tflops=flops / t / 1e9))
        except Exception as exc:  # noqa: BLE001 - a tile that does not compile is a result
            rows.append(dict(kind="sparse_tile", tile=tile, error=failure_reason(exc)))
        print(rows[-1], flush=True)
    for bn, w in INDEX_TILES:
        tile = dict(block_n=bn, num_warps=w)
        try:
            t, _ = mla.graph_ms(lambda: d.scores(**tile), warmup=3, reps=args.reps, cold_l2=True)
            rows.append(dict(kind="index_tile", tile=tile, score_ms=t,
                             gbs=batch * ctx * ID * 2 / t / 1e6))
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(kind="index_tile", tile=tile, error=failure_reason(exc)))
        print(rows[-1], flush=True)
    return rows


def table(rows, ceil) -> str:
    out = [f"ceilings: copy {ceil['copy_gbs']:.0f} GB/s, bf16 matmul {ceil['matmul_tflops']:.0f} TFLOP/s", "",
           "| decode B | ctx | sparse core ms | TFLOP/s | score ms (bf16 / fp8 keys) | "
           "top-k ms (fp32 topk, ties unordered) | indexer share | torch gather ms | "
           "dense triton_mla ms (TFLOP/s) | tile |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["kind"] == "decode" and not r.get("skipped"):
            t = r["tile"]
            out.append(f"| {r['batch']} | {r['ctx']} | {r['core_ms']:.3f} | {r['core_tflops']:.0f} | "
                       f"{r['score_ms']:.3f} / {r['score_fp8_ms']:.3f} | "
                       f"{r['topk_ms']:.3f} ({r['topk_fp32_ms']:.3f}) | "
                       f"{100 * r['indexer_share']:.0f} % | {r['gather_ms']:.3f} | "
                       f"{r['dense_ms']:.3f} ({r['dense_tflops']:.0f}) | {tile_text(t)} |")
    out += ["", "| prefill new / ctx | sparse core ms | TFLOP/s | score ms | top-k ms | indexer share | "
            "triton_mla forward ms (dense, MHA form) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["kind"] == "prefill" and not r.get("skipped"):
            out.append(f"| {r['new']} / {r['ctx']} | {r['core_ms']:.2f} | {r['core_tflops']:.0f} | "
                       f"{r['score_ms']:.2f} | {r['topk_ms']:.2f} | {100 * r['indexer_share']:.0f} % | "
                       f"{r['dense_fwd_ms']:.2f} |")
    for r in rows:
        if r.get("skipped"):
            out.append(f"\n{r['kind']} {r.get('batch', r.get('new'))} / ctx {r['ctx']} skipped: {r['skipped']}")
    out += ["", "| step B | ctx | static tables reach | eager forward ms | CUDA-graph replay ms | "
            "eager / graph |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if r["kind"] == "step" and not r.get("skipped"):
            out.append(f"| {r['batch']} | {r['ctx']} | {r['reach']} | {r['eager_ms']:.3f} | "
                       f"{r['graph_ms']:.3f} | {r['speedup']:.2f}x |")
    out += ["", f"| tile (B {TILE_SHAPE[0]}, ctx {TILE_SHAPE[1]}) | ms | rate |", "| --- | --- | --- |"]
    for r in rows:
        if r["kind"] in ("sparse_tile", "index_tile"):
            rate = (f"{r['tflops']:.0f} TFLOP/s" if "tflops" in r else
                    f"{r['gbs']:.0f} GB/s of keys" if "gbs" in r else r.get("error", ""))
            ms = r.get("core_ms", r.get("score_ms"))
            out.append(f"| {r['kind']} {r['tile']} | {'' if ms is None else f'{ms:.3f}'} | {rate} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="ctx 32k and B 64 only, no tile rows")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=".")
    ap.add_argument("--smoke", action="store_true",
                    help="CPU + Triton interpreter, tiny shapes: checks the script runs, times nothing real")
    ap.add_argument("--render", metavar="JSON", help="print the tables of an earlier run's bench_dsa.json "
                                                     "(RESULTS.md's DSA section) and exit")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            saved = json.load(f)
        print(f"{saved['env']}\n\n{table(saved['rows'], saved['ceilings'])}")
        return
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    if args.smoke:
        _smoke()
    env, ceil = environment(), mla.ceilings()
    dense = TritonMLABackend(**({} if args.smoke else _planned(HEADS)))   # no plan on a CPU
    rows = []
    shapes = [(64, 32768)] if args.quick else [(b, c) for c in (8192, 32768, 131072)
                                               for b in (1, 8, 64, 128)]
    prefills = [(4096, 32768), (8192, 8192)]
    steps = STEP_SHAPES[:1] if args.quick else STEP_SHAPES
    if args.smoke:
        shapes, prefills, steps = [(2, 100)], [(8, 100)], [(2, 100), (2, 100, 256)]

    def save():
        with open(os.path.join(args.out, "bench_dsa.json"), "w") as f:
            json.dump(dict(env=env, ceilings=ceil, rows=rows, seconds=time.time() - t0), f, indent=1)
        with open(os.path.join(args.out, "bench_dsa.md"), "w") as f:
            f.write(f"{env}\n\n{table(rows, ceil)}\n")

    # the target row first, then the prefill row, then the rest: a run cut by its time box
    # still holds the figures the issue asks for (rows are saved as they come)
    first, rest = shapes[:1], shapes[1:]
    if (64, 32768) in shapes:
        first, rest = [(64, 32768)], [sh for sh in shapes if sh != (64, 32768)]
    def add(kind, fn, *shape, **keys):
        try:
            rows.append(fn(*shape))
        except Exception as exc:  # noqa: BLE001 - a shape that does not fit is a result
            rows.append(dict(kind=kind, ctx=shape[1], skipped=failure_reason(exc), **keys))
        gc.collect()                 # a failed row's tensors (held by its traceback) go too
        torch.cuda.empty_cache()
        print(rows[-1], flush=True)
        save()

    for batch, ctx in first:
        add("decode", lambda b, c: decode_row(b, c, args, dense), batch, ctx, batch=batch)
    add("prefill", lambda n, c: prefill_row(n, c, args, dense), *prefills[0], new=prefills[0][0])
    for shape in steps[:1]:
        add("step", lambda *sh: step_row(*sh, reps=args.reps, rel_err=rel_err, **SIZES), *shape,
            batch=shape[0])
    for new, ctx in prefills[1:]:
        add("prefill", lambda n, c: prefill_row(n, c, args, dense), new, ctx, new=new)
    for batch, ctx in rest:
        add("decode", lambda b, c: decode_row(b, c, args, dense), batch, ctx, batch=batch)
    for shape in steps[1:]:
        add("step", lambda *sh: step_row(*sh, reps=args.reps, rel_err=rel_err, **SIZES), *shape,
            batch=shape[0])
    if not args.quick:
        rows += tile_rows(args)
    save()
    print(f"{env}\n{time.time() - t0:.0f} s\n\n{table(rows, ceil)}")


def _smoke():
    """bench_mla's CPU stand-ins (fp16, eager wall-clock timing), a top-k of 16."""
    global TOPK, TILE_SHAPE, SIZES
    mla._smoke()
    TOPK, TILE_SHAPE = 16, (2, 100)
    SIZES = dict(SIZES, topk=TOPK)


if __name__ == "__main__":
    main()

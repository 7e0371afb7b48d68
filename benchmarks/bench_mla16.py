"""Issue 28, MLA decode at 16 heads: how fast the latent bytes can be read at all under the
timing method, and the decode candidates next to the default, in one process on one GPU.

    PYTHONPATH=src:tests python3 benchmarks/bench_mla16.py [--out FILE.json] [--budget S]

Version 6 (NOTES-mla.md; this is version 8) found the default at H 16, B 32, ctx 4k (63 µs) as fast as a torch
reduction over the same 151 MB (62 µs), both timed with attnkit's method, which zeroes 256 MB
before every repetition: the L2 is left full of dirty lines that drain while the timed
kernel reads. This measures, per shape and per flush mode:
- readers of the same bytes: ``torch sum`` (version 6's reference), ``torch copy`` (read +
  write; its rate counts the bytes read only), ``page read`` (a Triton kernel, one latent
  page of 64 x 576 a program, the pages in the decode's block-table order, 9 independent 8 KB
  loads a program: the contiguous whole-page read the decode could reach);
- the decode core (attend_latent, as bench_mla_candidates.py) of the default (the plan's
  tables) and of each candidate (16 heads: pdl, tiles, split counts; 128 heads: the default
  alone, for no regression), each first checked against the float64 reference on a
  small poisoned case (bench_mla_candidates.small_check) and, at every shape, against
  bench_mla's torch-bmm peer;
flush modes (FLUSHES): ``zero`` (attnkit.tune.timing's: 256 MB zeroed), ``read`` (256 MB
read: the L2 left holding clean lines, nothing to write back during the timed call),
``none`` (no flush; the inputs are 3x the L2 or more, so little is re-used).
Also a torch.profiler split of the default's kernels at the bar shape (split vs reduce), and
of the fused-merge candidate's (version 9: one kernel), and the registers / spills / shared
memory of every column_split kernel compiled (``v2_kernels``).

Version 9's round (NOTES-mla.md): column_split with its splits merged inside the split kernel
(``merge_splits`` 256: at every split count these shapes plan) against column_split with the
reduce launch (``merge_splits`` 0), each timed twice ("again"): a row's again-spread is how far
the two timings of one candidate differ; the decision rule reads it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(__file__))
from bench_mla import NOPE, Setup, _planned, check, torch_bmm_decode, L, R  # noqa: E402
from bench_mla_candidates import Candidate, small_check  # noqa: E402
from common import copy_bandwidth_gbs, environment, graphed  # noqa: E402

from attnkit.backends.triton_mla.decode_column_split import _absorbed_v2_kernel  # noqa: E402

FLUSH_BYTES = 256 << 20
FLUSHES = ("zero", "read", "none")
REDUCE = dict(variant="v2", merge_splits=0)        # column_split, the reduce kernel merges
FUSED = dict(variant="v2", merge_splits=256)       # column_split, its split kernel merges
# heads -> name -> TritonMLABackend options ("default": the plan's, always timed first); each
# version 9 candidate twice, the second timing after the others ("again")
CANDIDATES = {
    16: {"v2": REDUCE, "v2 merge": FUSED, "v2 again": REDUCE, "v2 merge again": FUSED},
    128: {"v2": REDUCE, "v2 merge": FUSED},
}
# Version 8's round (2026-12-02) timed pdl, 32-key / 6-stage tiles (adopted: the default since)
# and 16 / 64 splits at 16 heads (commit 2ee8467's CANDIDATES), and before that ws with 32-key
# tiles and 4 stages at 128 heads (commit 4fd4b3f; 22 % slower at B 128 ctx 4k; removed).
# (heads, batch, ctx, flush modes): the bar first
SHAPES = [(16, 32, 4096, FLUSHES), (128, 128, 4096, ("zero", "read")),
          (16, 32, 1024, FLUSHES), (16, 1, 32768, ("zero", "read")), (128, 1, 32768, ("zero",)),
          (16, 1, 4096, ("zero", "read")),
          (16, 128, 4096, ("zero", "read")), (16, 32, 32768, ("zero", "read")),
          (16, 128, 32768, ("zero", "read"))]
PAGE_CHUNKS = 9          # 64 x 576 bf16 = 36864 elements a page = 9 x 4096


@triton.jit
def _page_read_kernel(Cache, Table, Out, pages_per_req, stride_t, PAGE_ELEMS: tl.constexpr,
                      CHUNK: tl.constexpr, CHUNKS: tl.constexpr):
    """Program p reads page Table[p // pages_per_req, p % pages_per_req] (PAGE_ELEMS
    contiguous elements) as CHUNKS independent loads and stores its float32 sum in Out[p]."""
    p = tl.program_id(0)
    page = tl.load(Table + (p // pages_per_req) * stride_t + p % pages_per_req).to(tl.int64)
    base = Cache + page * PAGE_ELEMS
    acc = tl.zeros([CHUNK], tl.float32)
    for c in tl.static_range(CHUNKS):
        acc += tl.load(base + c * CHUNK + tl.arange(0, CHUNK)).to(tl.float32)
    tl.store(Out + p, tl.sum(acc, 0))


def page_read(lat: torch.Tensor, table: torch.Tensor):
    """lat: [pages, 64, L + R] (contiguous); table: [B, pages a request] -> (launcher, out [B * n])."""
    elems = lat.shape[1] * lat.shape[2]
    out = torch.empty(table.numel(), device=lat.device, dtype=torch.float32)
    tab = table.to(torch.int32).contiguous()

    def run():
        _page_read_kernel[(tab.numel(),)](lat, tab, out, tab.shape[1], tab.stride(0),
                                          PAGE_ELEMS=elems, CHUNK=elems // PAGE_CHUNKS,
                                          CHUNKS=PAGE_CHUNKS, num_warps=8)
    return run, out


def flusher(flush: str, *, nbytes: int = FLUSH_BYTES, device: str = "cuda"):
    """The no-argument call that runs before each timed repetition for ``flush`` (FLUSHES):
    zero ``nbytes`` (attnkit's method), read them into a one-element sum, or nothing."""
    if flush == "none":
        return lambda: None
    buf = torch.empty(nbytes // 4, device=device, dtype=torch.float32)
    if flush == "zero":
        return buf.zero_
    sink = torch.empty(1, device=device, dtype=torch.float32)
    return lambda: torch.sum(buf.view(1, -1), dim=1, out=sink)


def timed_us(fn, flush: str, *, reps: int = 20, warmup: int = 3) -> tuple[float, str]:
    """(median µs, "graph" or why eager) of ``fn`` replayed as a CUDA graph (eager if it does
    not capture), with the L2 flushed before each repetition by ``flush`` (FLUSHES)."""
    run, note = graphed(fn)
    flush_l2 = flusher(flush)
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush_l2()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2], note or "graph"


def reader_rows(s, shape, flushes, reps):
    lat = s.cache.latent[0]
    nbytes = lat.numel() * lat.element_size()
    dst = torch.empty_like(lat)
    pr, pr_out = page_read(lat, s.table)
    pr()
    ref = lat.view(lat.shape[0], -1).float().sum(1)[s.table.flatten()]
    ok = torch.allclose(pr_out, ref, rtol=1e-3, atol=1e-2)
    readers = {"torch sum": lambda: lat.sum(dtype=torch.float32), "torch copy": lambda: dst.copy_(lat),
               "page read": pr}
    rows = []
    for name, fn in readers.items():
        for flush in flushes:
            row = dict(shape, name=name, flush=flush, **({"checked": ok} if name == "page read" else {}))
            try:
                us, how = timed_us(fn, flush, reps=reps)
                row.update(us=us, gbs=nbytes / us / 1e3, timing=how)
            except Exception as exc:  # noqa: BLE001 - one failing mode must not drop the others
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    del dst
    return rows


def decode_rows(s, shape, backends, flushes, reps):
    heads, batch, ctx = shape["heads"], shape["batch"], shape["ctx"]
    ref = torch_bmm_decode(s)
    q_lat = torch.bmm(s.q[..., :NOPE].transpose(0, 1), s.layer.w_kc)
    flops = 2 * heads * ctx * (2 * L + R) * batch
    nbytes = batch * ctx * (L + R) * 2
    rows = []
    for name, cand in backends.items():
        for flush in flushes:
            row = dict(shape, name=name, flush=flush)
            try:
                be = cand.__enter__()
                step = be.prepare(s.meta, s.cache)
                out = be.forward(s.q, s.k, None, s.layer, s.cache, step)
                row["rel_err"] = check(out, ref, f"{name} H={heads} B={batch} ctx={ctx}")
                fn = lambda: be.attend_latent(q_lat, s.q[..., NOPE:], s.cache.latent[0], s.layer, step)  # noqa: E731
                us, how = timed_us(fn, flush, reps=reps)
                row.update(us=us, tflops=flops / us / 1e6, gbs=nbytes / us / 1e3, timing=how)
                if cand.fell_back():
                    row["fell_back"] = cand.fell_back()
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failing candidate is a result
                row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            finally:
                cand.__exit__(None, None, None)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def kernel_stats(fn) -> list[dict]:
    """Registers, spills and shared memory of every compiled form of the Triton kernel ``fn``
    with its MERGE / V_SPLIT / BLOCK_H / BLOCK_N / num_stages (best effort: Triton's caches are
    not an API; an empty list where this Triton keeps them otherwise)."""
    rows = []
    for cache in getattr(fn, "device_caches", {}).values():
        kernels = cache[0] if isinstance(cache, tuple) else cache
        for k in kernels.values():
            try:
                consts = {fn.arg_names[i[0]]: v for i, v in k.src.constants.items()
                          if isinstance(i, tuple) and len(i) == 1}
                rows.append(dict({c: consts.get(c) for c in ("MERGE", "V_SPLIT", "BLOCK_H", "BLOCK_N")},
                                 num_stages=k.metadata.num_stages, regs=k.n_regs,
                                 spills=k.n_spills, shared=k.metadata.shared))
            except Exception as exc:  # noqa: BLE001 - a report, not a check
                rows.append(dict(error=f"{type(exc).__name__}: {str(exc)[:120]}"))
    return rows


def kernel_split(s, backend) -> list[dict]:
    """torch.profiler's per-kernel device time of the default's core (eager, L2 zeroed)."""
    from torch.profiler import ProfilerActivity, profile
    q_lat = torch.bmm(s.q[..., :NOPE].transpose(0, 1), s.layer.w_kc)
    be = backend.__enter__()
    try:
        step = be.prepare(s.meta, s.cache)
        buf = torch.empty(FLUSH_BYTES // 4, device="cuda")
        for _ in range(3):
            be.attend_latent(q_lat, s.q[..., NOPE:], s.cache.latent[0], s.layer, step)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                buf.zero_()
                be.attend_latent(q_lat, s.q[..., NOPE:], s.cache.latent[0], s.layer, step)
            torch.cuda.synchronize()
    finally:
        backend.__exit__(None, None, None)
    return [dict(kernel=e.key[:90], calls=e.count, us_each=e.device_time_total / max(1, e.count))
            for e in prof.key_averages() if e.device_time_total > 0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    t0 = time.time()
    result = dict(env=environment(), copy_gbs=copy_bandwidth_gbs(1 << 30), checks={}, rows=[])
    print(result["env"], f"copy {result['copy_gbs']:.0f} GB/s", flush=True)
    passed = {}
    for heads, cands in CANDIDATES.items():
        passed[heads] = {"default": Candidate(_planned(heads))}
        for name, opts in cands.items():
            status = small_check(heads, opts)
            result["checks"][f"H{heads} {name}"] = status
            print(f"CHECK H={heads} {name}: {status}", flush=True)
            if status == "ok":
                passed[heads][name] = Candidate(opts)
    for heads, batch, ctx, flushes in SHAPES:
        if time.time() - t0 > args.budget:
            print(f"budget spent: {heads} {batch} {ctx} and later shapes not run", flush=True)
            break
        shape = dict(heads=heads, batch=batch, ctx=ctx)
        s = Setup(batch, ctx - 1, 1, heads=heads)
        s.cache.write(0, s.meta.slot_mapping, s.k, None)
        try:
            result["rows"] += reader_rows(s, shape, flushes, args.reps)
        except Exception as exc:  # noqa: BLE001 - a failing reader is a result
            print(f"readers failed at {shape}: {type(exc).__name__}: {exc}", flush=True)
        result["rows"] += decode_rows(s, shape, passed[heads], flushes, args.reps)
        if (heads, batch, ctx) == (16, 32, 4096):
            for key, name in (("kernels", "default"), ("kernels_merge", "v2 merge")):
                if name not in passed[16]:
                    continue
                try:
                    result[key] = kernel_split(s, passed[16][name])
                    print(key.upper(), json.dumps(result[key]), flush=True)
                except Exception as exc:  # noqa: BLE001
                    print(f"profiler failed ({name}): {type(exc).__name__}: {exc}", flush=True)
        del s
        torch.cuda.empty_cache()
        result["v2_kernels"] = kernel_stats(_absorbed_v2_kernel)
        if args.out:            # written after every shape: a time-out keeps what was measured
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
    print("V2_KERNELS", json.dumps(result.get("v2_kernels", [])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

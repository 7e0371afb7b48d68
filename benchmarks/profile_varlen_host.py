"""Where the host time of one eager varlen call goes (issue 29: FLUX.1's ~400 us a call).

    PYTHONPATH=src python3 benchmarks/profile_varlen_host.py [--row flux.1-1024] [--out FILE.json]

For each cell (bare cuDNN SDPA; attnkit's sdpa backend; triton with each varlen variant alone:
tile, gluon, persistent, split; the row's plan) on bench_dit's shape:

- ``idle_us``: host time of one call with the GPU idle (synchronised before; median of N);
- ``busy_us``: the same with a ~20 ms sleep kernel queued first: a call that waits for the GPU
  (a sync) shows ~20 ms here, one that does not shows ~idle_us;
- ``caches_off_us`` (triton cells): the call with this branch's per-shape caches switched off
  (the launch decision made every call, the TMA descriptors built and validated every call,
  the device properties asked every call): the per-call work merge28's path did;
- ``pieces`` (split): each piece of the call timed alone, GPU idle and busy (median per call, us);
- ``cprofile`` (split, plan): bench_dit.host_profile, cProfile of 20 calls in microseconds a call.

Every attnkit cell's output is checked against flash SDPA first (relative error <= 1e-2, else
the cell is "wrong" and not timed). Writes JSON; prints one line per cell.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_dit  # noqa: E402
from common import environment, failure_reason  # noqa: E402

from attnkit.backends.base import RuntimeLayer  # noqa: E402
from attnkit.backends.sdpa.backend import SdpaBackend  # noqa: E402
from attnkit.backends.triton import gluon_host, varlen_path  # noqa: E402
from attnkit.backends.triton.backend import TritonBackend  # noqa: E402
from attnkit.backends.varlen import varlen_batch  # noqa: E402


def per_call_us(fn, *, n: int = 20, busy: bool = False) -> float:
    """Median host microseconds of one ``fn()`` (GPU idle before each, or busy: a sleep queued)."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        if busy:
            torch.cuda._sleep(20_000_000)          # ~10-20 ms of GPU cycles queued ahead
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    return round(sorted(times)[len(times) // 2] * 1e6, 1)


@contextlib.contextmanager
def caches_off(be):
    """merge28's per-call work: no launch memo, descriptors built fresh, properties asked."""
    saved = (be._varlen_memo, gluon_host.descriptor, gluon_host.device_facts)

    def facts(device):
        props = torch.cuda.get_device_properties(device)
        return (props.major, props.minor), props.multi_processor_count

    be._varlen_memo = None
    gluon_host.descriptor, gluon_host.device_facts = gluon_host._build, facts
    try:
        yield
    finally:
        be._varlen_memo, gluon_host.descriptor, gluon_host.device_facts = saved


def _safe(fn) -> dict | str:
    """{"idle": us, "busy": us} of one piece (per_call_us with the GPU idle / busy), or why it
    could not run (the other pieces go on). Round 1 saw every call's host time grow with the
    GPU busy (split 211 -> 557 us, cuDNN 55 -> 90): which pieces grow says where."""
    try:
        return {"idle": per_call_us(fn), "busy": per_call_us(fn, busy=True)}
    except Exception as exc:  # noqa: BLE001
        return failure_reason(exc)


def pieces(q, k, v, layer, batch, be) -> dict:
    """The split cell's call, piece by piece (each alone, median per call)."""
    from attnkit.backends.envelope import check_varlen
    from attnkit.backends.triton.prefill_gluon import launch_args
    from attnkit.backends.triton.prefill_gluon_persistent import _prefill_gluon_persistent_kernel
    from attnkit.backends.triton.split_tail import merge_tail, tail_schedule, workspace
    from attnkit.backends.varlen import validate_varlen

    table = be.kernels["varlen"]
    spec = layer.spec
    out = q.new_empty(q.shape[0], spec.num_heads, spec.value_dim)
    dense = [q, k, v]
    launch = varlen_path._decide(dense, out, layer, batch, table)
    kw = launch.kwargs
    res = {}
    res["validate (varlen checks)"] = _safe(lambda: (validate_varlen(
        q, k, v, layer, batch, backend="triton", features=be.declaration.capabilities.features),
        check_varlen(be, layer, q)))
    res["decide: candidates + runnable + config (merge28: every call)"] = _safe(
        lambda: varlen_path._decide(dense, out, layer, batch, table))
    res["memo lookup (this branch)"] = _safe(
        lambda: be._varlen_memo.get(table, spec, varlen_path.call_key(batch, dense)))
    res["get_device_properties (merge28: every call)"] = _safe(
        lambda: torch.cuda.get_device_properties(q.device).multi_processor_count)
    res["3 descriptors built (merge28)"] = _safe(
        lambda: [gluon_host._build(t, r) for t, r in ((q, 128), (k, 128), (v, 128))])
    res["3 descriptors from templates (this branch)"] = _safe(
        lambda: [gluon_host.descriptor(t, r) for t, r in ((q, 128), (k, 128), (v, 128))])
    res["new_empty out"] = _safe(lambda: q.new_empty(q.shape[0], spec.num_heads, spec.value_dim))
    args, consts = launch_args(q, k, v, out, tiles=kw["tiles"], causal=False, head_major=kw["head_major"])
    blocks = args[-1]
    items = blocks * q.shape[1]
    n = kw["programs"]
    n_tiles = -(-q.shape[0] // consts["BN"])
    full, units, pcs = tail_schedule(items, n_tiles, n)
    res["workspace (2 x torch.empty)"] = _safe(lambda: workspace(items - full, pcs, q.shape[2], q.device))
    work, work_ml = workspace(items - full, pcs, q.shape[2], q.device)
    res["persistent kernel launch (Triton's launcher alone)"] = _safe(
        lambda: _prefill_gluon_persistent_kernel[(n,)](*args, n, kw["qk_scale"], 1.0, work, work_ml, full,
                                                       units, pcs, SPLIT=True, **consts))
    res["merge_tail launch"] = _safe(
        lambda: merge_tail(work, work_ml, out, full=full, num_blocks=blocks, n_tiles=n_tiles, units=units,
                           max_pieces=pcs, v_scale=1.0, head_major=kw["head_major"]))
    res["whole call (this branch)"] = _safe(lambda: be.varlen(q, k, v, layer, batch))
    with caches_off(be):
        res["whole call, caches off (merge28's work)"] = _safe(lambda: be.varlen(q, k, v, layer, batch))
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", default="flux.1-1024", choices=list(bench_dit.ROWS))
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "varlen_host.json"))
    args = parser.parse_args()
    tokens, spec = bench_dit.shape(args.row)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(tokens, n, spec.head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
               for n in (spec.num_heads, spec.num_kv_heads, spec.num_kv_heads))
    layer = RuntimeLayer(spec)
    batch = varlen_batch(torch.tensor([0, tokens], dtype=torch.int32, device="cuda"))
    bhsd = [t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)]
    from torch.nn.attention import SDPBackend
    ref = bench_dit.sdpa_peer(SDPBackend.FLASH_ATTENTION)(*bhsd)[0].transpose(0, 1).reshape(tokens, -1)
    cudnn = bench_dit.sdpa_peer(SDPBackend.CUDNN_ATTENTION)
    cells = {"sdpa_cudnn (bare)": (None, lambda: cudnn(*bhsd)), "attnkit sdpa": (SdpaBackend(), None),
             "triton split": (TritonBackend(varlen_kernel="split"), None)}   # first: its kernels compile first
    options = bench_dit.planned_varlen(args.row)
    if options is not None:
        cells["triton plan"] = (TritonBackend(**options), None)
    for kernel in ("gluon", "persistent", "tile"):
        cells[f"triton {kernel}"] = (TritonBackend(varlen_kernel=kernel), None)
    result = {"environment": environment(), "row": args.row, "tokens": tokens, "heads": spec.num_heads,
              "cells": {}}
    for name, (be, fn) in cells.items():
        fn = fn or (lambda be=be: be.varlen(q, k, v, layer, batch))
        try:
            result["cells"][name] = cell(name, be, fn, ref, (q, k, v, layer, batch))
            c = result["cells"][name]
            print(f"{name}: " + (c if isinstance(c, str) else f"idle {c['idle_us']} us, busy {c['busy_us']} us, "
                                 f"caches off {c.get('caches_off_us', '-')} us (err {c['rel_err']:.1e})"), flush=True)
        except Exception as exc:  # noqa: BLE001 - a cell that cannot run is a cell
            result["cells"][name] = failure_reason(exc)
            print(f"{name}: {result['cells'][name]}", flush=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    for name, c in result["cells"].items():
        if isinstance(c, dict):
            print("\n".join(f"  {name} | {k}: {v}" for k, v in c.get("pieces", {}).items()))
            print("\n".join(f"  {name} | {line}" for line in c.get("cprofile", [])))
    print(f"wrote {args.out}")


def cell(name, be, fn, ref, pieces_args) -> dict | str:
    """One cell: its output checked (the second call's: the cached decision's), then timed."""
    fn()
    got = fn()
    got = got[0].transpose(0, 1) if got.dim() == 4 else got
    err = bench_dit.rel_error(got.reshape(ref.shape), ref)
    if not err <= bench_dit.TOLERANCE:
        return f"wrong: relative error {err:.3g}"
    out = {"rel_err": err, "idle_us": per_call_us(fn), "busy_us": per_call_us(fn, busy=True)}
    if isinstance(be, TritonBackend):
        with caches_off(be):
            out["caches_off_us"] = per_call_us(fn)
    if name in ("triton split", "triton plan"):
        out["cprofile"] = bench_dit.host_profile(fn)
    if name == "triton split":
        try:
            out["pieces"] = pieces(*pieces_args, be)
        except Exception as exc:  # noqa: BLE001 - the cell's totals stand without them
            out["pieces"] = {"error": failure_reason(exc)}
    return out


if __name__ == "__main__":
    main()

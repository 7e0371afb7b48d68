"""Issue 28's MLA decode candidates against the current default, in one process on one GPU.

    PYTHONPATH=src:tests python3 benchmarks/bench_mla_candidates.py [--out FILE.json] [--budget S]

Every candidate (a TritonMLABackend option set) is first checked against the float64
reference (tests/factories.make_case, stale slots poisoned with NaN / inf) on a small case of
its head count; one that fails or raises is reported and not timed. Then the kernel core
(attend_latent, replayed as a CUDA graph, L2 flushed) of each candidate that passed is timed
at the issue's bar shapes and the no-regression shapes, next to the default (the plan's
kernel tables, what bench_mla.py's main rows run), and checked there against bench_mla's
torch-bmm peer. Rates: TFLOP/s of the absorbed FLOPs, GB/s of latent read (bench_mla.py).
``--budget``: seconds after which no new shape starts (the GPU round is time-boxed).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_mla import NOPE, Setup, _planned, check, graph_ms, torch_bmm_decode, L, R  # noqa: E402
from common import copy_bandwidth_gbs, environment  # noqa: E402

from attnkit.backends.triton_mla.backend import TritonMLABackend  # noqa: E402

# name -> TritonMLABackend options; "default" is the plan's tables
CANDIDATES = {
    128: {"ws": dict(variant="ws"), "ws splits 2": dict(variant="ws", num_splits=2),
          # the ws kernel's forms (NOTES-mla.md version 11): (BLOCK_N, NUM_STAGES, AHEAD, OUT16)
          **{f"ws n{n} st{st}" + (" ahead" if ahead else "") + (" out16" if out16 else ""):
             dict(variant="ws", ws_config=dict(BLOCK_N=n, NUM_STAGES=st, AHEAD=ahead, OUT16=out16))
             for n, st, ahead, out16 in ((64, 2, False, True), (32, 4, False, False),
                                         (32, 4, True, False), (32, 4, True, True),
                                         (16, 8, True, True))}},
    16: {"v2": dict(variant="v2"),
         **{f"v2 splits {s}": dict(variant="v2", num_splits=s) for s in (4, 16, 32)},
         **{f"v2 n{n} st{st} w{w}": dict(variant="v2", block_n=n, num_stages=st, num_warps=w)
            for n, st, w in ((64, 4, 4), (32, 6, 4))},
         "v2 n64 st4 splits 16": dict(variant="v2", block_n=64, num_stages=4, num_splits=16),
         "v1": dict(variant="v1")},
}
# The 2026-12-02 round also timed the "seesaw" Gluon kernel (commit 9eaf465, removed after it:
# NOTES-mla.md, version 6; results/bench_mla_candidates.md).


class Candidate:
    """A TritonMLABackend whose warnings are recorded while it runs."""

    def __init__(self, opts: dict):
        self.backend = TritonMLABackend(**opts)

    def __enter__(self):
        self._warnings = warnings.catch_warnings(record=True)
        self.caught = self._warnings.__enter__()
        warnings.simplefilter("always")
        return self.backend

    def __exit__(self, *exc):
        self._warnings.__exit__(*exc)

    def fell_back(self) -> str:
        """The backend's warning where a forced variant could not run ('' when none)."""
        return next((str(w.message)[:160] for w in self.caught if "cannot run" in str(w.message)), "")


# (heads, batch, ctx): the bars first, then the rows that must not regress
SHAPES = [(128, 128, 4096), (16, 32, 4096), (128, 1, 32768), (16, 1, 32768), (16, 32, 32768),
          (128, 32, 32768), (128, 128, 32768), (16, 128, 32768)]


def small_check(heads: int, opts: dict) -> str:
    """'ok' or the failure, on a small poisoned case with KV lengths of odd and even tile counts."""
    from factories import assert_close, make_case, make_layer
    from attnkit.model.spec import MLAConfig
    mla = MLAConfig(kv_lora_rank=L, qk_rope_head_dim=R, qk_nope_head_dim=NOPE, v_head_dim=128)
    layer = make_layer(kind="mla", num_heads=heads, mla=mla, dtype="bf16", device="cuda",
                       scale=1.0 / 192 ** 0.5, seed=heads)
    case = make_case(layer, prefix_lens=[1500, 3, 700, 63, 4095, 130], new_lens=[1] * 6,
                     page_size=64, dtype="bf16", device="cuda", seed=heads, garbage=True)
    try:
        cand = Candidate(opts)
        with cand as be:
            out = be.forward(case.q, case.k, case.v, case.layer, case.cache,
                             be.prepare(case.meta, case.cache))
        torch.cuda.synchronize()
        assert_close(out, case.reference(), dtype="bf16", what="candidate")
        return "ok" if not cand.fell_back() else f"fell back: {cand.fell_back()}"
    except Exception as exc:  # noqa: BLE001 - a failing candidate is a result
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def time_shape(heads, batch, ctx, backends, reps):
    """-> rows of {name, us, tflops, gbs, rel_err} (or error) for one shape."""
    s = Setup(batch, ctx - 1, 1, heads=heads)
    s.cache.write(0, s.meta.slot_mapping, s.k, None)
    ref = torch_bmm_decode(s)
    q_lat = torch.bmm(s.q[..., :NOPE].transpose(0, 1), s.layer.w_kc)
    flops = 2 * heads * ctx * (2 * L + R) * batch
    nbytes = batch * ctx * (L + R) * 2
    rows = []
    # the same bytes read by torch (a reduction over the whole cache), timed the same way: the
    # read rate this timing method allows at this size (the flush leaves dirty L2 lines)
    lat = s.cache.latent[0]
    t_read = graph_ms(lambda: lat.sum(dtype=torch.float32), warmup=3, reps=reps, cold_l2=True)[0]
    rows.append(dict(name="torch sum of the cache", heads=heads, batch=batch, ctx=ctx,
                     us=t_read * 1e3, gbs=lat.numel() * lat.element_size() / t_read / 1e6))
    print(json.dumps(rows[-1]), flush=True)
    for name, cand in backends.items():
        row = dict(name=name, heads=heads, batch=batch, ctx=ctx)
        try:
            be = cand.__enter__()
            step = be.prepare(s.meta, s.cache)
            out = be.forward(s.q, s.k, None, s.layer, s.cache, step)
            row["rel_err"] = check(out, ref, f"{name} H={heads} B={batch} ctx={ctx}")
            fn = lambda: be.attend_latent(q_lat, s.q[..., NOPE:], s.cache.latent[0], s.layer, step)  # noqa: E731
            t, how = graph_ms(fn, warmup=3, reps=reps, cold_l2=True)
            row.update(us=t * 1e3, tflops=flops / t / 1e9, gbs=nbytes / t / 1e6, timing=how)
            if cand.fell_back():
                row["fell_back"] = cand.fell_back()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failing candidate is a result
            row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        finally:
            cand.__exit__(None, None, None)
        rows.append(row)
        print(json.dumps(row), flush=True)
    del s
    torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--budget", type=float, default=70.0)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--heads", default="128,16", help="head counts to check and time")
    args = ap.parse_args(argv)
    heads_wanted = {int(h) for h in args.heads.split(",")}
    t0 = time.time()
    result = dict(env=environment(), copy_gbs=copy_bandwidth_gbs(1 << 30), checks={}, rows=[])
    print(result["env"], f"copy {result['copy_gbs']:.0f} GB/s", flush=True)
    passed = {}
    for heads, cands in CANDIDATES.items():
        if heads not in heads_wanted:
            continue
        passed[heads] = {"default": Candidate(_planned(heads))}
        for name, opts in {"default": None, **cands}.items():
            status = small_check(heads, _planned(heads) if opts is None else opts)
            result["checks"][f"H{heads} {name}"] = status
            print(f"CHECK H={heads} {name}: {status}", flush=True)
            if status == "ok" and opts is not None:
                passed[heads][name] = Candidate(opts)
    for heads, batch, ctx in SHAPES:
        if heads not in heads_wanted:
            continue
        if time.time() - t0 > args.budget:
            print(f"budget spent: {heads} {batch} {ctx} and later shapes not run", flush=True)
            break
        result["rows"] += time_shape(heads, batch, ctx, passed[heads], args.reps)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

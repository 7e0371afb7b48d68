"""DiT attention rows: long non-causal attention, B = 1, bf16, attnkit against cuDNN SDPA, flash
SDPA and FlexAttention in the same run on one GPU.

    PYTHONPATH=src python3 benchmarks/bench_dit.py [--rows wan2.1-720p,flux.1-1024] [--out FILE.json]
    python3 benchmarks/bench_dit.py --table FILE.json ...    (the markdown table of runs)

The rows' shapes come from attnkit's own pipeline presets (docs/models.md: the tokens of one
call from resolution and frames, the heads and head dim of the denoiser's self / joint layers),
not from numbers typed here:

    wan2.1-720p        wan2.1-t2v-14b at 1280 x 720, 81 frames: 75,600 tokens x 40 heads, d128
    wan2.1-480p        wan2.1-t2v-14b at  832 x 480, 81 frames: 32,760 x 40, d128
    flux.1-1024        flux.1-dev at 1024 x 1024: 4,096 image + 512 text = 4,608 x 24, d128
    hunyuanvideo-720p  hunyuanvideo at 1280 x 720, 129 frames: 118,800 + 256 text = 119,056 x 24, d128

attnkit rows: ``varlen`` (the varlen call, no KV cache: each declared variant alone, tile,
gluon, persistent and split, and ``plan``, what the denoiser's plan runs: its varlen kernel table; and
sdpa, attnkit's sdpa backend on the same call), and ``forward`` (the triton backend on a
non-causal encoder layer through the paged API, its K/V write included, extend variants gluon
and tma).

One method for every cell, peers and attnkit alike: attnkit.tune.timing.measure, what
``attnkit tune`` times the profile with (the call replayed as one CUDA graph, as an engine runs
a denoiser step, the L2 flushed before each repetition; medians), and the same call eagerly
(the ``eager`` columns: the host's per-call work counts there). Every cell's output is checked
against flash SDPA's first (relative Frobenius error; over 1e-2 the cell is "wrong" and not
timed). ``kernels`` names the GPU kernels each SDPA cell ran (torch.profiler): which of
flash / cuDNN the sdpa backend's call took. TFLOP/s count the non-causal products once:
4 * T^2 * H * D. Writes JSON (rows, ratios to cuDNN per method, environment);
``--table FILE.json`` renders it as RESULTS.md's markdown table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(__file__))
from common import environment, failure_reason  # noqa: E402

from attnkit.backends.base import RuntimeLayer  # noqa: E402
from attnkit.backends.batch import Request, build_batch  # noqa: E402
from attnkit.backends.triton.backend import TritonBackend  # noqa: E402
from attnkit.backends.varlen import varlen_batch  # noqa: E402
from attnkit.kvcache.paged import PagedKVCache  # noqa: E402
from attnkit.model.pipeline import load_components  # noqa: E402
from attnkit.tune.timing import measure as measure_call  # noqa: E402

BF16 = torch.bfloat16
TOLERANCE = 1e-2          # relative Frobenius error against flash SDPA's output
ROWS = {   # name -> (pipeline preset, inputs)
    "wan2.1-720p": ("wan2.1-t2v-14b", {"height": 720, "width": 1280, "frames": 81}),
    "wan2.1-480p": ("wan2.1-t2v-14b", {"height": 480, "width": 832, "frames": 81}),
    "flux.1-1024": ("flux.1-dev", {"height": 1024, "width": 1024}),
    "hunyuanvideo-720p": ("hunyuanvideo", {"height": 720, "width": 1280, "frames": 129}),
}


def shape(name: str) -> tuple[int, object]:
    """(tokens, the denoiser's first non-causal self / joint layer) of one row, from the preset."""
    preset, inputs = ROWS[name]
    dit = next(c for c in load_components(preset, inputs=inputs).components if c.role == "denoiser")
    layer = next(l for l in dit.attention.layers if l.role == "encoder")
    return dit.workload.tokens, layer


def planned_varlen(name: str) -> dict | None:
    """The triton options the row's denoiser plan hands it on this GPU (its kernel tables, the
    varlen one included), or None where the plan chose another backend (since issue 29's mm3 the
    Wan rows plan triton too: their cross-attention layers are varlen calls, run by varlen_tile)."""
    from attnkit.planning.components import plan_components

    preset, inputs = ROWS[name]
    result = plan_components(load_components(preset, inputs=inputs), "auto")
    dit = next(c for c in result.components if c.component.role == "denoiser")
    if dit.plan is None or not dit.plan.ok or dit.plan.prefill_backend != "triton":
        return None
    return dit.plan.run.backend_options("triton")


def sdpa_peer(kind):
    def run(q, k, v):         # [1, H, T, D]
        with sdpa_kernel(kind):
            return F.scaled_dot_product_attention(q, k, v)
    return run


def flex_peer():
    from torch.nn.attention.flex_attention import flex_attention
    compiled = torch.compile(flex_attention, dynamic=False)
    return lambda q, k, v: compiled(q, k, v)


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| over the whole output (inf where got is not finite)."""
    err = float((got.float() - ref.float()).norm() / ref.float().norm())
    return err if math.isfinite(err) else float("inf")


def timed_cell(fn, flops: float, *, check=None, ref=None, reps: int = 10) -> dict | str:
    """One cell: ``check()``'s output against ``ref`` (both [T, H * D] or [T, H, D]), then ``fn``
    timed by attnkit's one method (CUDA-graph replays and eager calls, cold L2, medians) ->
    {"ms", "tflops" (the graph replay; eager where the call does not capture), "eager_ms",
    "eager_tflops", "rel_err", "note"}; a failure or a wrong output is a string, never a crash."""
    try:
        cell = {}
        if check is not None:
            cell["rel_err"] = rel_error(check().reshape(ref.shape), ref)
            if not cell["rel_err"] <= TOLERANCE:
                return f"wrong: relative error {cell['rel_err']:.3g} > {TOLERANCE:g}"
        t = measure_call(fn, "cuda", warmup=3, reps=reps, budget_s=0.4)
        ms = t["graph_ms"] if t["graph_ms"] is not None else t["eager_ms"]
        cell.update(ms=ms, tflops=flops / ms / 1e9, eager_ms=t["eager_ms"],
                    eager_tflops=flops / t["eager_ms"] / 1e9, note=t["note"])
        if True:                          # the host's share of one call (no sync between)
            cell["host_us"] = host_us(fn)
        return cell
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is a cell, not a crash
        return failure_reason(exc)
    finally:
        if torch.cuda.is_available():
            torch.cuda.synchronize()


def host_us(fn, *, calls: int = 10, runs: int = 3) -> float:
    """Microseconds of host time one call of ``fn`` takes: the median over ``runs`` of
    ``calls`` calls back to back (no sync between: the GPU runs behind; what an eager engine
    pays per layer before the kernel runs). Round 1 saw +-100 us between runs of one path."""
    import time

    per_call = []
    for _ in range(runs):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls)
        torch.cuda.synchronize()
    return round(sorted(per_call)[len(per_call) // 2] * 1e6, 1)


def host_profile(fn, *, calls: int = 20, top: int = 14) -> list[str]:
    """The host functions one call of ``fn`` spends its time in (cProfile over ``calls`` calls,
    by cumulative time): microseconds a call, own and cumulative, and calls a call (pstats'
    own table rounds to milliseconds: every row of a sub-millisecond call read 0.000)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    rows = sorted(pstats.Stats(prof).stats.items(), key=lambda kv: -kv[1][3])[:top]
    return [f"{tt / calls * 1e6:8.1f} us own {ct / calls * 1e6:8.1f} us cum {nc / calls:5.1f}x "
            f"{os.path.basename(f)}:{line}({name})" for (f, line, name), (_, nc, tt, ct, _) in rows]


def kernels_of(fn, *, top: int = 2) -> list[str]:
    """The names of the GPU kernels one call of ``fn`` runs, longest first (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        events = sorted((e for e in prof.key_averages() if e.device_type.name == "CUDA"),
                        key=lambda e: -e.device_time_total)
        return [e.key[:90] for e in events[:top]]
    except Exception as exc:  # noqa: BLE001 - a profiler that cannot run is a note
        return [failure_reason(exc)]


VARLEN_CELLS = ("tile", "gluon", "persistent", "split", "plan", "sdpa")


def measure(name: str, *, reps: int, flex: bool = True, forward: bool = True,
            cells: tuple[str, ...] = VARLEN_CELLS) -> dict:
    """One row: the peers, then the attnkit varlen ``cells`` (of VARLEN_CELLS), then (forward)
    the paged forward rows."""
    from attnkit.backends.sdpa.backend import SdpaBackend

    tokens, spec = shape(name)
    heads, dim = spec.num_heads, spec.head_dim
    flops = 4 * tokens * tokens * heads * dim
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(tokens, n, dim, device="cuda", dtype=BF16, generator=gen)
               for n in (heads, spec.num_kv_heads, spec.num_kv_heads))
    bhsd = [t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)]           # [1, H, T, D] views
    row = {"row": name, "tokens": tokens, "heads": heads, "head_dim": dim, "flops": flops, "kernels": {}}
    ref = sdpa_peer(SDPBackend.FLASH_ATTENTION)(*bhsd)[0].transpose(0, 1).reshape(tokens, -1)
    as_rows = lambda o: o[0].transpose(0, 1).reshape(tokens, -1)  # noqa: E731 - [1, H, T, D] -> [T, H * D]

    def timed(key, fn, check=None):
        row[key] = timed_cell(fn, flops, check=check, ref=ref, reps=reps)

    for key, kind in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
        run = sdpa_peer(kind)
        timed(key, lambda run=run: run(*bhsd), check=lambda run=run: as_rows(run(*bhsd)))
        row["kernels"][key] = kernels_of(lambda run=run: run(*bhsd))
    if flex:
        try:
            flexed = flex_peer()
            timed("flex", lambda: flexed(*bhsd), check=lambda: as_rows(flexed(*bhsd)))
        except Exception as exc:  # noqa: BLE001
            row["flex"] = failure_reason(exc)

    layer = RuntimeLayer(spec)
    batch = varlen_batch(torch.tensor([0, tokens], dtype=torch.int32, device="cuda"))
    options = planned_varlen(name)
    backends = {kernel: TritonBackend(varlen_kernel=kernel) for kernel in ("tile", "gluon", "persistent")}
    if options is not None:                   # what the denoiser's plan runs: its varlen table
        backends["plan"] = TritonBackend(**options)
    backends["sdpa"] = SdpaBackend()          # attnkit's sdpa backend: the profile's peer
    backends["split"] = TritonBackend(varlen_kernel="split")     # last: the newest kernel
    for kernel, be in backends.items():
        if kernel not in cells:
            continue
        call = lambda be=be: be.varlen(q, k, v, layer, batch)  # noqa: E731
        timed(f"attnkit_varlen_{kernel}", call, check=call)
    if "sdpa" in cells:
        row["kernels"]["attnkit_varlen_sdpa"] = kernels_of(lambda: backends["sdpa"].varlen(q, k, v, layer, batch))
    for kernel in ("gluon", "split", "plan"):   # where an eager call's host time goes (20 calls)
        if kernel in cells and kernel in backends:
            try:
                row[f"host_profile_{kernel}"] = host_profile(lambda be=backends[kernel]: be.varlen(q, k, v, layer, batch))
            except Exception as exc:  # noqa: BLE001
                row[f"host_profile_{kernel}"] = [failure_reason(exc)]

    if not forward:
        return _ratios(row)
    pages = -(-tokens // 16)
    cache = PagedKVCache([spec], num_pages=pages, page_size=16, dtype=BF16, device="cuda")
    meta = build_batch([Request(0, tokens, list(range(pages)))], page_size=16, device="cuda")
    for variant in ("gluon", "tma"):
        be = TritonBackend(extend_variant=variant)
        step = be.prepare(meta, cache)
        call = lambda: be.forward(q, k, v, layer, cache, step)  # noqa: E731
        timed(f"attnkit_forward_{variant}", call, check=call)
    return _ratios(row)


def _ratios(row: dict) -> dict:
    """Each cell's rate over cuDNN's, per method: vs_cudnn (graph replays), vs_cudnn_eager."""
    base = row.get("sdpa_cudnn")
    if isinstance(base, dict):
        for out, rate in (("vs_cudnn", "tflops"), ("vs_cudnn_eager", "eager_tflops")):
            row[out] = {key: round(val[rate] / base[rate], 3) for key, val in row.items()
                        if isinstance(val, dict) and rate in val}
    return row


def table(results: dict) -> str:
    """RESULTS.md's DiT rows: per row and cell, TFLOP/s and x cuDNN, graph replays and eager."""
    lines = ["| row | cell | graph TFLOP/s | x cuDNN | eager TFLOP/s | x cuDNN (eager) | host us a call | rel. err |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results["rows"]:
        for key, val in r.items():
            if isinstance(val, dict) and "tflops" in val:
                err = val.get("rel_err")
                lines.append(f"| {r['row']} | {key} | {val['tflops']:.0f} | {r.get('vs_cudnn', {}).get(key, '')} | "
                             f"{val['eager_tflops']:.0f} | {r.get('vs_cudnn_eager', {}).get(key, '')} | "
                             f"{val.get('host_us', '')} | {'' if err is None else f'{err:.1e}'} |")
            elif isinstance(val, str) and key != "row":
                lines.append(f"| {r['row']} | {key} | {val[:60]} | | | | | |")
    kernels = [f"{r['row']} {key}: {', '.join(names)}" for r in results["rows"]
               for key, names in r.get("kernels", {}).items()]
    return "\n".join(lines + ([""] + [f"- {k}" for k in kernels] if kernels else []))


def main() -> None:
    if sys.argv[1:2] == ["--table"]:             # one table of one or more runs' rows
        rows = []
        for path in sys.argv[2:]:
            if not os.path.exists(path):          # a run its time box cut before its first row
                print(f"({path}: missing)")
                continue
            with open(path) as f:
                rows += json.load(f)["rows"]
        print(table({"rows": rows}))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated of {', '.join(ROWS)}")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--no-flex", action="store_true", help="leave FlexAttention out (its compile)")
    parser.add_argument("--no-forward", action="store_true", help="leave the paged forward rows out")
    parser.add_argument("--cells", default=",".join(VARLEN_CELLS),
                        help=f"the attnkit varlen cells, comma-separated of {', '.join(VARLEN_CELLS)}")
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "dit_rows.json"))
    args = parser.parse_args()
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    results = {"environment": environment(), "command": " ".join(sys.argv), "rows": []}
    for name in rows:
        results["rows"].append(measure(name, reps=args.reps, flex=not args.no_flex, forward=not args.no_forward,
                                       cells=tuple(c.strip() for c in args.cells.split(",") if c.strip())))
        r = results["rows"][-1]
        cells = "  ".join(f"{k} {v['tflops']:.0f}/{v['eager_tflops']:.0f}" for k, v in r.items()
                          if isinstance(v, dict) and "tflops" in v)
        print(f"{name}: {r['tokens']} x {r['heads']} x d{r['head_dim']}: {cells} TFLOP/s (graph/eager)", flush=True)
        with open(args.out, "w") as f:          # after every row: a run cut short keeps what it measured
            json.dump(results, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

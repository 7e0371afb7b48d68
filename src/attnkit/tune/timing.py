"""The one timing method of attnkit's measurements (``attnkit tune`` and benchmarks/).

CUDA: medians of CUDA-event timings after warm-up, the L2 flushed before each repetition
where inputs would otherwise be served from cache (``cold_l2``), the call replayed as one
CUDA graph where it captures (host launch overhead out) and timed eagerly as well.
Near-ties (``interleaved``): the calls whose medians lie within a few per cent of each other
are timed again, in rounds that time each of them once (the order rotated from round to
round), so that a drift of the GPU's rate during a run (one kernel's rate moved by up to 10 %
between runs of 2026-12-02 while cuDNN's moved by 2 %) reaches all of them alike.
CPU (smoke runs): medians of wall-clock times.
"""
from __future__ import annotations

import gc
import time

import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024        # over four times the L2 of any current GPU


def time_ms(fn, *, warmup: int = 5, reps: int = 30, cold_l2: bool = False) -> float:
    """Median milliseconds of ``fn()`` on the current CUDA device."""
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda") if cold_l2 else None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if flush is not None:
            flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def wall_ms(fn, *, warmup: int = 1, reps: int = 3, cold_l2: bool = False) -> float:
    """time_ms's CPU stand-in: median wall-clock milliseconds (``cold_l2`` is ignored)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[len(times) // 2]


def graphed(fn):
    """(run, note): ``fn`` as one CUDA-graph replay when it captures (host launch overhead
    out of the timing), else ``fn`` itself and why not."""
    g = None
    try:
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return _Replay(g, fn), None
    except Exception as exc:  # noqa: BLE001 - a call that cannot capture runs eagerly
        first = (str(exc).strip().splitlines() or [""])[0][:120]
        note = f"eager ({type(exc).__name__}{': ' + first if first else ''})"    # why, for the profile
    # A capture that failed half-way still holds its private memory pool (through the graph
    # and the exception's frames): free it before the eager timing, which may need it all.
    torch.cuda.synchronize()
    g = None
    gc.collect()
    torch.cuda.empty_cache()
    return fn, note


class _Replay:
    """A captured graph's replay, holding ``fn`` (and so every tensor the graph reads: a step's
    metadata, a workspace) alive as long as the replay is: a graph whose inputs were freed would
    read memory reused by the next call built."""

    def __init__(self, graph, fn):
        self.graph, self.fn = graph, fn

    def __call__(self):
        self.graph.replay()


def measure(fn, device: str, *, warmup: int = 3, reps: int = 20, budget_s: float = 0.5) -> dict:
    """``{"graph_ms", "eager_ms", "note"}`` of ``fn`` by the method above. Repetitions shrink for
    slow calls so one call costs about ``budget_s`` per method (at least 3 repetitions)."""
    if device != "cuda":        # smoke runs: a few calls are enough to test the path
        return {"graph_ms": None, "eager_ms": wall_ms(fn, warmup=1, reps=min(reps, 3)),
                "note": "wall clock, 3 calls (no CUDA graphs on the CPU)"}
    run, note = graphed(fn)
    once = time_ms(run, warmup=0, reps=1)
    n = _reps(once, reps, budget_s)
    w = warmup if n == reps else 1
    graph = None if note else time_ms(run, warmup=w, reps=n, cold_l2=True)
    eager = time_ms(fn, warmup=w, reps=n, cold_l2=True)
    return {"graph_ms": graph, "eager_ms": eager,
            "note": (note or "CUDA graph") + ("" if n == reps else f"; {n} repetitions (slow call)")}


REPS_CAP = 60       # repetitions a round may give one fast call


def interleaved(runs, device: str, *, rounds: int, budget_s: float = 0.15) -> list[list[float]]:
    """Each of ``runs``' median milliseconds in each of ``rounds`` rounds; a round times every
    run once (about ``budget_s`` each, L2 flushed), starting one place further each round."""
    if device == "cuda":
        reps = [_reps(time_ms(run, warmup=1, reps=1), REPS_CAP, budget_s) for run in runs]
        once = lambda i: time_ms(runs[i], warmup=1, reps=reps[i], cold_l2=True)  # noqa: E731
    else:
        once = lambda i: wall_ms(runs[i], warmup=0, reps=1)  # noqa: E731
    out: list[list[float]] = [[] for _ in runs]
    for r in range(rounds):
        for j in range(len(runs)):
            i = (r + j) % len(runs)
            out[i].append(once(i))
    return out


def _reps(once_ms: float, reps: int, budget_s: float) -> int:
    return max(3, min(reps, int(budget_s * 1e3 / max(once_ms, 1e-3))))

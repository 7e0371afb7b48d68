"""One timing helper and the machine's measured ceilings, shared by every benchmark.

All numbers are medians of CUDA-event timings after warm-up; ``cold_l2`` flushes the L2
between repetitions where inputs would otherwise be served from cache.
"""
from __future__ import annotations

import datetime
import gc
import platform as _platform
import time

import torch


def time_ms(fn, *, warmup: int = 5, reps: int = 30, cold_l2: bool = False) -> float:
    """Median milliseconds of ``fn()`` on the current CUDA device."""
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda") if cold_l2 else None
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
    """time_ms's CPU stand-in (smoke runs without a GPU): median wall-clock milliseconds."""
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
        return g.replay, None
    except Exception as exc:  # noqa: BLE001 - a peer that cannot capture runs eagerly
        note = f"eager ({type(exc).__name__})"
    # A capture that failed half-way still holds its private memory pool (through the graph
    # and the exception's frames): free it before the eager timing, which may need it all.
    torch.cuda.synchronize()
    g = None
    gc.collect()
    torch.cuda.empty_cache()
    return fn, note


def copy_bandwidth_gbs(nbytes: int = 4 << 30) -> float:
    """Device-to-device copy rate, counting bytes read plus bytes written."""
    src = torch.randn(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), warmup=3, reps=10)
    return 2 * nbytes / ms / 1e6


def matmul_tflops(n: int = 8192) -> float:
    """bf16 dense matmul rate on random data."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = time_ms(lambda: a @ b, warmup=3, reps=10)
    return 2 * n**3 / ms / 1e9


def environment() -> str:
    """One line naming date, GPU, torch and triton versions for RESULTS.md."""
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "absent"
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return (f"{datetime.date.today().isoformat()} | {gpu} | torch {torch.__version__} | "
            f"triton {tv} | python {_platform.python_version()}")


def ceilings() -> dict[str, float]:
    return {"copy_gbs": copy_bandwidth_gbs(), "matmul_tflops": matmul_tflops()}


def emit(text: str, out: str | None) -> None:
    """Print a report and, with ``--out FILE``, also write it there."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


def failure_reason(exc: BaseException) -> str:
    """One short table cell for a peer that failed: the exception type and first line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:80]}".rstrip(": ")

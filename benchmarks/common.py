"""The machine's measured ceilings and report helpers, shared by every benchmark.

Timing is attnkit's one method (attnkit.tune.timing, also what ``attnkit tune`` uses): medians
of CUDA-event timings after warm-up; ``cold_l2`` flushes the L2 between repetitions where
inputs would otherwise be served from cache; ``graphed`` replays a call as one CUDA graph.
"""
from __future__ import annotations

import datetime
import platform as _platform

import torch

from attnkit.tune.timing import graphed, time_ms, wall_ms

__all__ = ["graphed", "time_ms", "wall_ms", "copy_bandwidth_gbs", "matmul_tflops", "environment", "ceilings",
           "emit", "failure_reason"]


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


def planned_options(backend: str, shape, *, page_size: int = 16) -> dict:
    """The options the plan hands ``backend`` for a one-layer model of ``shape``
    (attnkit.planning.profile.Shape) on this GPU, with ``backend`` named for every phase: its
    kernel tables from the device profile (Plan.run.backend_options). The benchmarks' attnkit
    rows run what a plan runs."""
    from attnkit.model.spec import ModelAttention
    from attnkit.planning.solver import plan
    from attnkit.tune.case import layer_spec

    model = ModelAttention(name=f"bench {shape.label()}", architecture="bench",
                           layers=(layer_spec(shape),), dtype=shape.dtype)
    p = plan(model, "auto", {"attention_backend": backend, "page_size": page_size,
                             "dtype": shape.dtype, "kv_cache_dtype": shape.kv_dtype}, strict=True)
    return p.run.backend_options(backend)

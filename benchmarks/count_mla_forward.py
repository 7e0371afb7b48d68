"""The kernels one triton_mla decode forward launches, counted on the CPU, for whichever attnkit
is on the path (run it once per tree: ``PYTHONPATH=.prev/src`` and ``PYTHONPATH=src``):
every Triton launch (through the interpreter, with its grid and constexprs) and every torch op
that computes (a kernel on a GPU; views and allocations left out).

    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/count_mla_forward.py [--heads 128] [--batch 1] [--ctx 256]

The forward is bench_mla.py's "forward" row: cache write + q_nope @ w_kc + core + @ w_vc, with
the default backend (``TritonMLABackend()``) and, where this tree has kernel tables, with the
plan's tables for an H200 (what bench_mla.py hands the backend). On the CPU the Gluon kernel
(ws) cannot run, so the core is the one its fallback launches; what is around the core is what
a GPU replay runs too. fp16 (the interpreter's bf16 dot is wrong).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes  # noqa: E402

FREE = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach",
        "lift_fresh", "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel", "is_pinned",
        "alias", "set_")
L, R, NOPE, DV, PAGE = 512, 64, 128, 128, 64


class _Ops(TorchDispatchMode):
    """Records the torch ops that compute (not views, not allocations), with their shapes."""

    def __init__(self, log: list):
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not func.is_view and name not in FREE:
            shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            self.log.append(f"torch {name} {shapes}")
        return func(*args, **(kwargs or {}))


def record(fn) -> list:
    """Run ``fn`` once; the list of its launches in order."""
    from triton.runtime.interpreter import InterpretedFunction

    log: list = []
    real = InterpretedFunction.run

    def run(self, *a, **kw):
        const = {k: v for k, v in kw.items() if k.isupper() or k.startswith("num_")}
        log.append(f"triton {self.fn.__name__} grid={kw.get('grid')} {const}")
        with _disable_current_modes():      # the interpreter's own tensor copies: not kernels
            return real(self, *a, **kw)
    InterpretedFunction.run = run
    try:
        with _Ops(log):
            fn()
    finally:
        InterpretedFunction.run = real
    return log


def setup(heads: int, batch: int, ctx: int):
    from attnkit.backends.base import RuntimeLayer
    from attnkit.backends.batch import Request, build_batch
    from attnkit.kvcache.paged import PagedKVCache
    from attnkit.model.spec import LayerAttention, MLAConfig

    torch.manual_seed(0)
    dt = torch.float16
    mla = MLAConfig(kv_lora_rank=L, qk_rope_head_dim=R, qk_nope_head_dim=NOPE, v_head_dim=DV)
    spec = LayerAttention(layer_id=0, num_heads=heads, num_kv_heads=1, head_dim=NOPE + R,
                          v_head_dim=DV, kind="mla", mla=mla)
    g = lambda *s: torch.randn(*s, dtype=dt) / L ** 0.5  # noqa: E731
    layer = RuntimeLayer(spec=spec, w_kc=g(heads, NOPE, L), w_vc=g(heads, L, DV))
    per = -(-ctx // PAGE)
    cache = PagedKVCache([spec], num_pages=batch * per, page_size=PAGE, dtype=dt, device="cpu")
    cache.latent[0].copy_(torch.randn_like(cache.latent[0]))
    perm = torch.randperm(batch * per).view(batch, per)
    meta = build_batch([Request(ctx - 1, 1, row) for row in perm.tolist()], page_size=PAGE,
                       device="cpu")
    q = torch.randn(batch, heads, NOPE + R, dtype=dt)
    k = torch.randn(batch, L + R, dtype=dt)
    return layer, cache, meta, q, k


def backends(heads: int) -> dict:
    from attnkit.backends.triton_mla.backend import TritonMLABackend

    out = {"default": TritonMLABackend()}
    try:
        from attnkit.model.spec import ModelAttention
        from attnkit.planning.profile import Shape
        from attnkit.planning.solver import plan
        from attnkit.tune.case import layer_spec
    except ImportError:          # the tree before the plan chose kernels
        return out
    shape = Shape("mla", heads, 1, NOPE + R, DV, "bf16", "bf16", L, R)
    model = ModelAttention(name="count", architecture="bench", layers=(layer_spec(shape),),
                           dtype="bf16")
    p = plan(model, "h200", {"attention_backend": "triton_mla", "page_size": PAGE,
                             "dtype": "bf16", "kv_cache_dtype": "bf16"}, strict=True)
    if hasattr(p, "run"):
        out["planned"] = TritonMLABackend(**p.run.backend_options("triton_mla"))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=256)
    args = ap.parse_args(argv)
    import attnkit

    print(f"# attnkit from {os.path.dirname(attnkit.__file__)}; H={args.heads} B={args.batch} "
          f"ctx={args.ctx}")
    layer, cache, meta, q, k = setup(args.heads, args.batch, args.ctx)
    for name, be in backends(args.heads).items():
        step = be.prepare(meta, cache)
        be.forward(q, k, None, layer, cache, step)           # warm (first-call work left out)
        log = record(lambda: be.forward(q, k, None, layer, cache, step))
        print(f"## {name}: {len(log)} launches")
        for line, n in Counter(log).items():
            print(f"  {n} x {line}")


if __name__ == "__main__":
    sys.exit(main())

"""Issue 28's missed rows under Nsight Compute: each op warmed up, then called once between
cudaProfilerStart / Stop, so `ncu --profile-from-start off` profiles exactly that call's
kernels (NOTES-hopper.md version 13 and NOTES-triton.md version 8 asked for this profile
before the next kernel change).

    ncu --profile-from-start off --clock-control none --set full -o REPORT \\
        python3 benchmarks/probe_ncu28.py [OP ...]

OPs (default all): chain8x2k / chain16x1k (gluon_rows_chain through the backend, the
fused write included: bench_batched28's backend rows), decode16x1k (the plan's triton decode
at B 16 ctx 1k, pages of 16: bench_triton's row), cudnn16x1k (its cuDNN peer on the gathered
keys), ws128 (the ws MLA kernel alone at 128 heads, B 128 ctx 4k: bench_mla_candidates' row).
Each op is checked against SDPA / the torch reference first; a wrong output stops the probe.
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_triton import Setup, _planned, rel_err, sdpa_peer  # noqa: E402
from torch.nn.attention import SDPBackend  # noqa: E402

from attnkit.backends.triton.backend import TritonBackend  # noqa: E402


def _profiled(name, fn, check):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    err = check()
    if not err < 2e-2:
        raise SystemExit(f"{name}: wrong output (rel err {err:.3g}); not profiled")
    torch.cuda.profiler.start()
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"{name}: profiled (rel err {err:.2e})", flush=True)


def _attnkit(s, backend, *, causal):
    step = backend.prepare(s.meta, s.cache)
    fwd = lambda: backend.forward(s.q, s.k, s.v, s.layer, s.cache, step)  # noqa: E731
    fwd()                                   # the step's own keys into the cache, then gather
    k_c, v_c = s.gather()
    ref = sdpa_peer(None, s.q_bhsd(), k_c, v_c, None, causal, expand=True)()
    shape = (s.batch, s.new, -1)
    return fwd, lambda: rel_err(fwd().view(shape), ref.transpose(1, 2).reshape(shape))


def chain(batch, new):
    s = Setup(batch, 0, new)
    return _attnkit(s, TritonBackend(extend_variant="gluon_rows_chain"), causal=True)


def decode16x1k():
    s = Setup(16, 1023, 1)
    return _attnkit(s, TritonBackend(**_planned(32, 128)), causal=False)


def cudnn16x1k():
    s = Setup(16, 1023, 1)
    k_c, v_c = s.gather()
    q = s.q_bhsd()
    ref = sdpa_peer(None, q, k_c, v_c, None, False, expand=True)()
    fn = sdpa_peer(SDPBackend.CUDNN_ATTENTION, q, k_c, v_c, None, False)
    return fn, lambda: rel_err(fn(), ref)


def ws128():
    from bench_mla import NOPE, Setup as MLASetup, check, torch_bmm_decode

    from attnkit.backends.triton_mla.backend import TritonMLABackend
    s = MLASetup(128, 4095, 1, heads=128)
    s.cache.write(0, s.meta.slot_mapping, s.k, None)
    be = TritonMLABackend(variant="ws")
    step = be.prepare(s.meta, s.cache)
    ref = torch_bmm_decode(s)
    q_lat = torch.bmm(s.q[..., :NOPE].transpose(0, 1), s.layer.w_kc)
    fn = lambda: be.attend_latent(q_lat, s.q[..., NOPE:], s.cache.latent[0], s.layer, step)  # noqa: E731
    out = be.forward(s.q, s.k, None, s.layer, s.cache, step)
    return fn, lambda: check(out, ref, "ws H=128 B=128 ctx=4k")


OPS = {"chain8x2k": lambda: chain(8, 2048), "chain16x1k": lambda: chain(16, 1024),
       "decode16x1k": decode16x1k, "cudnn16x1k": cudnn16x1k, "ws128": ws128}


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(OPS)
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise SystemExit(f"unknown ops {unknown}; choose from {sorted(OPS)}")
    torch.manual_seed(0)
    for name in names:
        fn, check = OPS[name]()
        _profiled(name, fn, check)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

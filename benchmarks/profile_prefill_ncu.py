"""Hardware counters of one causal 16k prefill (bf16, 32 / 8 heads at d128, 16 / 8 at d256)
for each kernel of a same-run comparison: attnkit's Triton tile (extend_config GLUON=False), its Gluon
kernel (GLUON=True) and cuDNN through SDPA. Each runs once, warm, inside
cudaProfilerStart / Stop, so under ncu only those launches are profiled:

    ncu --clock-control none --profile-from-start off --csv --page details \\
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \\
        --section Occupancy --metrics <the tensor pipe's> \\
        python3 benchmarks/profile_prefill_ncu.py --dims 128,256 > ncu_prefill.csv
    python3 benchmarks/ncu_table.py ncu_prefill.csv --order order.json --out results/ncu_prefill

The order of the profiled launches goes to --order (the table names kernels by it)."""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.nn.attention import SDPBackend  # noqa: E402

from bench_triton import Setup, sdpa_peer  # noqa: E402

from attnkit.backends.triton.backend import TritonBackend  # noqa: E402


def runs(dim):
    heads = 16 if dim == 256 else 32
    s = Setup(batch=1, prefix=0, new=16384, heads=heads, dim=dim)
    out = []
    for label, kernel, be in (
            ("attnkit triton tile", "triton", TritonBackend(extend_variant="tma",
                                                            extend_config=dict(GLUON=False))),
            ("attnkit gluon", "gluon", TritonBackend(extend_variant="tma",
                                                     extend_config=dict(GLUON=True)))):
        step = be.prepare(s.meta, s.cache)
        out.append((label, kernel,
                    lambda be=be, step=step: be.forward(s.q, s.k, s.v, s.layer, s.cache, step)))
    k, v = s.gather()
    out.append(("sdpa cudnn", "cudnn",
                sdpa_peer(SDPBackend.CUDNN_ATTENTION, s.q_bhsd(), k, v, None, True)))
    return s, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", default="128,256")
    ap.add_argument("--order", default="ncu_order.json")
    args = ap.parse_args()
    order = []
    for dim in (int(d) for d in args.dims.split(",")):
        s, fns = runs(dim)
        for _, _, fn in fns:    # compile, autotune, plan outside the profiled range
            fn(), fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for label, kernel, fn in fns:
            fn()
            torch.cuda.synchronize()
            order.append(dict(dim=dim, who=label, kernel=kernel,
                              flops=4 * dim * s.spec.num_heads * 16384 * 16385 / 2))
        torch.cuda.cudart().cudaProfilerStop()
        del s, fns
        torch.cuda.empty_cache()
    with open(args.order, "w") as f:
        json.dump(order, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Static check of the few-row Gluon product (runner/layers/stream_mm.py) for sm_90, with no
GPU: compile it with ``triton.compile`` for GPUTarget("cuda", 90, 32) and report registers,
spill stack, shared memory, ptxas's advisories and the MMA / TMA instructions of the SASS
(static_mla's report).

    PYTHONPATH=<triton 3.6 site>:src python3 benchmarks/static_stream_mm.py \\
        [BN,BK,BM,NS,PDL[,MAXNREG] ...] [--out DIR]

Pointer and integer arguments are marked 16-divisible as the JIT marks them at launch, except
the sizes and the stream-K counts (any value)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from static_mla import compile_report, load_alone  # noqa: E402

TILES = ("128,128,64,4,0", "128,128,64,4,2", "128,64,64,8,0", "128,128,32,4,0",
         "128,128,128,3,0", "64,128,64,6,0")


def compile_tile(out_dir: str, bn: int, bk: int, bm: int, ns: int, pdl: int,
                 maxnreg: int = 0) -> dict:
    kernel = load_alone("runner/layers/stream_mm.py")._stream_mm_kernel
    w_lay = gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)
    x_lay = gl.NVMMASharedLayout.get_default_for([bm, bk], gl.bfloat16)
    sig = {"w_desc": f"tensordesc<bf16[{bn}, {bk}],{w_lay!r}>",
           "x_desc": f"tensordesc<bf16[{bm}, {bk}],{x_lay!r}>", "Y": "*bf16", "BIAS": "*bf16",
           "R": "*bf16", "PART": "*fp32", "COUNTER": "*i32", "TIMES": "*i64", "M": "i32", "N": "i32", "P": "i32",
           "TOTAL": "i32", "KSTEPS": "i32", "stride_ym": "i32", "stride_rm": "i32"}
    consts = dict(BN=bn, BK=bk, BM=bm, NS=ns, PIECES=4, HAS_BIAS=True, HAS_RESIDUAL=True, PDL=pdl,
                  LOADER_REGS=24)
    tag = f"stream_mm_{bn}x{bk}_m{bm}_s{ns}_pdl{pdl}_r{maxnreg}"
    return compile_report(kernel, sig, consts, tag, out_dir, source=GluonASTSource,
                          not_div=("M", "N", "P", "TOTAL", "KSTEPS"), num_warps=4,
                          **({"maxnreg": maxnreg} if maxnreg else {}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tiles", nargs="*", default=list(TILES))
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="static_stream_mm_"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for tile in args.tiles:
        print(compile_tile(args.out, *(int(x) for x in tile.split(","))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Static check of the stream decode kernel (backends/triton/decode_stream.py) for sm_90, with
no GPU: compile it with ``triton.compile`` for GPUTarget("cuda", 90, 32) and report registers,
spill stack, shared memory and the MMA / TMA instructions of the SASS (static_mla's report).

    PYTHONPATH=<triton 3.6 site>:src python3 benchmarks/static_decode_stream.py \\
        [D,BLOCK_N,NUM_STAGES,SPLIT,FUSED_WRITE ...] [--early] [--maxnreg N] [--out DIR]

Default tiles: version 7's sweep (NOTES-triton.md). Pointer and integer arguments are marked
16-divisible as the JIT marks them at launch (not the split stride, chunk, table width)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from static_mla import compile_report, load_alone  # noqa: E402

STRIDES = ("stride_qt", "stride_qh", "stride_ot", "stride_oh", "stride_kt", "stride_vt",
           "stride_bt", "stride_mb", "stride_mh", "stride_ms", "stride_knt", "stride_knh",
           "stride_vnt", "stride_vnh")
TILES = ("128,64,4,0,1", "128,64,4,1,1", "128,64,4,0,0", "128,128,3,0,1", "128,32,8,0,1",
         "128,64,2,0,1", "64,128,4,0,1", "64,64,4,0,1")


def compile_tile(out_dir: str, d: int, bn: int, ns: int, split: bool, fused: bool, *,
                 early: bool, maxnreg: int | None, page: int = 16, group: int = 4) -> dict:
    kernel = load_alone("backends/triton/decode_stream.py")._stream_kernel
    lay = gl.NVMMASharedLayout.get_default_for([page, d], gl.bfloat16)
    desc = f"tensordesc<bf16[{page}, {d}],{lay!r}>"
    sig = {"Q": "*bf16", "k_desc": desc, "v_desc": desc, "K": "*bf16", "V": "*bf16",
           "Out": "*bf16", "MidO": "*fp32", "MidM": "*fp32", "MidL": "*fp32", "SeqLens": "*i32",
           "BlockTables": "*i32", "KN": "*bf16", "VN": "*bf16", "Slots": "*i64",
           "qk_scale": "fp32", "chunk": "i32", "max_pages": "i32", **{n: "i32" for n in STRIDES}}
    consts = dict(GROUP=group, D=d, PAGE=page, BN=bn, NS=ns, SPLIT=split, FUSED_WRITE=fused,
                  LOADER_REGS=24, EARLY=early)
    tag = f"stream_d{d}_{bn}x{ns}_s{int(split)}_w{int(fused)}_e{int(early)}_r{maxnreg or 0}"
    opts = {"maxnreg": maxnreg} if maxnreg else {}
    return compile_report(kernel, sig, consts, tag, out_dir, source=GluonASTSource,
                          not_div=("stride_ms", "stride_bt", "chunk", "max_pages"), num_warps=4,
                          **opts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tiles", nargs="*", default=list(TILES))
    ap.add_argument("--early", action="store_true")
    ap.add_argument("--maxnreg", type=int)
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="static_decode_stream_"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for tile in args.tiles:
        d, bn, ns, split, fused = (int(x) for x in tile.split(","))
        print(compile_tile(args.out, d, bn, ns, bool(split), bool(fused), early=args.early,
                           maxnreg=args.maxnreg))
    return 0


if __name__ == "__main__":
    sys.exit(main())

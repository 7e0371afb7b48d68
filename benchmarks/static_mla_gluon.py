"""Static check of the Gluon MLA decode kernel (triton_mla/decode_gluon.py) for sm_90, with no
GPU: compile it with ``triton.compile`` for GPUTarget("cuda", 90, 32) and report registers,
spill stack, shared memory and the MMA / copy instructions of the SASS.

    PYTHONPATH=<triton 3.6 site>:src python3 benchmarks/static_mla_gluon.py [--out DIR]

Pointer and integer arguments are marked 16-divisible as the JIT marks them at launch."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import triton
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from static_mla import compile_report, load_alone  # noqa: E402


# (BLOCK_N, NUM_STAGES, AHEAD, OUT16): the shipped tile first, then the forms the GPU round
# measures (NOTES-mla.md, version 11)
FORMS = ((64, 2, False, False), (64, 2, False, True), (32, 4, False, False), (32, 4, True, False),
         (32, 4, True, True), (16, 8, True, True))


def compile_kernel(out_dir: str, direct: bool = True, page_size: int = 64,
                   form=FORMS[0]) -> dict:
    mod = load_alone("backends/triton_mla/decode_gluon.py")
    k = mod._absorbed_gluon_kernel
    L, R = 512, 64
    BN, NS, ahead, out16 = form
    lat_l = gl.NVMMASharedLayout.get_default_for([BN, L], gl.bfloat16)
    pe_l = gl.NVMMASharedLayout.get_default_for([BN, R], gl.bfloat16)
    sig = {"QL": "*bf16", "QP": "*bf16", "lat_desc": f"tensordesc<bf16[{BN}, {L}],{lat_l!r}>",
           "pe_desc": f"tensordesc<bf16[{BN}, {R}],{pe_l!r}>", "BlockTables": "*i32",
           "WorkReq": "*i32", "WorkTok": "*i32", "QStart": "*i32", "SeqLens": "*i32",
           "Out": "*bf16" if out16 and direct else "*fp32", "Lse": "*fp32"}
    for n in ("stride_qlh", "stride_qlt", "stride_qpt", "stride_qph", "stride_bt", "stride_ot",
              "stride_oh", "stride_os", "stride_lt", "stride_lh"):
        sig[n] = "i32"
    sig.update(qk_scale="fp32", v_scale="fp32", num_splits="i32")
    consts = dict(L=L, R=R, PAGE_SIZE=page_size, BH=mod.BLOCK_H, BN=BN, NS=NS,
                  DIRECT=direct, VALUES_REGS=mod.VALUES_REGS, LOADER_REGS=mod.LOADER_REGS,
                  AHEAD=ahead)
    tag = f"gluon_direct{int(direct)}_n{BN}_s{NS}" + ("_ahead" if ahead else "") + ("_out16" if out16 and direct else "")
    return compile_report(k, sig, consts, tag, out_dir,
                          not_div=("num_splits", "stride_lh"), source=GluonASTSource,
                          num_warps=4, maxnreg=mod.MAXNREG)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="static_mla_gluon_"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    print(f"triton {triton.__version__}; files in {args.out}")
    for form in FORMS:
        for direct in (True, False):
            if direct or not form[3]:           # OUT16 is a one-split form
                print(compile_kernel(args.out, direct=direct, form=form), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Static check of the Gluon prefill kernel (triton/prefill_gluon.py) for sm_90, with no GPU:
registers, spill stack, shared memory, MMA / copy instructions and ptxas's advisories (a
serialised wgmma) at d64, d128 and d256 (NOTES-hopper.md versions 3-7).

    PYTHONPATH=<triton 3.6 site> python3 benchmarks/static_prefill_gluon.py [--out DIR]"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from static_mla import compile_report, load_alone  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="static_prefill_gluon_"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    mod = load_alone("backends/triton/prefill_gluon.py")
    sys.modules["attnkit.backends.triton.prefill_gluon"] = mod    # the persistent kernel's import
    persistent = load_alone("backends/triton/prefill_gluon_persistent.py")
    # (d, causal, head-major order, persistent): the shipped causal kernels, then the non-causal
    # forms benchmarks/sweep_dit.py times
    forms = [(d, True, False, False) for d in sorted(mod.TILES)] + [
        (128, False, False, False), (128, False, True, False), (128, False, True, True)]
    for d, causal, head_major, persist in forms:
        bn, nsk, nsv = mod.TILES[d]
        q_l = gl.NVMMASharedLayout.get_default_for([mod.BM, d], gl.bfloat16)
        kv_l = gl.NVMMASharedLayout.get_default_for([bn, d], gl.bfloat16)
        kv = f"tensordesc<bf16[{bn}, {d}],{kv_l!r}>"
        sig = {"q_desc": f"tensordesc<bf16[{mod.BM}, {d}],{q_l!r}>", "k_desc": kv, "v_desc": kv,
               "Out": "*bf16", "stride_ot": "i32", "T": "i32", "num_blocks": "i32",
               **({"programs": "i32"} if persist else {}), "qk_scale": "fp32", "v_scale": "fp32"}
        consts = dict(NUM_HEADS=32, GROUP=4, D=d, BN=bn, NSK=nsk, NSV=nsv,
                      CONSUMER_REGS=mod.CONSUMER_REGS, LOADER_REGS=mod.LOADER_REGS,
                      CAUSAL=causal, HEAD_MAJOR=head_major)
        fn = persistent._prefill_gluon_persistent_kernel if persist else mod._prefill_gluon_kernel
        tag = (f"prefill_gluon_d{d}" + ("" if causal else "_noncausal") + ("_head_major" if head_major else "")
               + ("_persistent" if persist else ""))
        print(compile_report(fn, sig, consts, tag, args.out, not_div=("T", "num_blocks", "programs"),
                             source=GluonASTSource, num_warps=4, maxnreg=mod.MAXNREG), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

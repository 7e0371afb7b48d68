"""Static check (no GPU) of the chained rows kernel (triton/prefill_gluon_chain.py) for sm_90:
registers, spill stack, shared memory, MMA / copy instructions, ptxas advisories, at each head
dim and the tiles bench_prefill28.py times (NOTES-hopper.md version 13).

    PYTHONPATH=<triton 3.6 site>:src python3 benchmarks/static_prefill_chain.py [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from static_mla import compile_report, load_alone  # noqa: E402

FORMS = [(64, (128, 4, 4)), (128, (128, 3, 2)), (128, (128, 2, 2))]   # configs.GLUON_CHAIN_TILES and the bench's


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="static_prefill_chain_"))
    args = ap.parse_args(argv)
    mod = load_alone("backends/triton/prefill_gluon.py")
    sys.modules["attnkit.backends.triton.prefill_gluon"] = mod
    sys.modules["attnkit.backends.triton.prefill_gluon_rows"] = load_alone(
        "backends/triton/prefill_gluon_rows.py")
    chain = load_alone("backends/triton/prefill_gluon_chain.py")
    for d, (bn, nsk, nsv) in FORMS:
        q_l = gl.NVMMASharedLayout.get_default_for([mod.BM, d], gl.bfloat16)
        kv_l = gl.NVMMASharedLayout.get_default_for([bn, d], gl.bfloat16)
        kv = f"tensordesc<bf16[{bn}, {d}],{kv_l!r}>"
        sig = {"q_desc": f"tensordesc<bf16[{mod.BM}, {d}],{q_l!r}>", "k_desc": kv, "v_desc": kv,
               "Out": "*bf16", "stride_ot": "i32", "Order": "*i32", "Start": "*i32",
               "BlockReq": "*i32", "BlockM": "*i32", "QStart": "*i32", "KStart": "*i32",
               "SeqLens": "*i32", "Geo": "*i32", "o_desc": None, "qk_scale": "fp32",
               "v_scale": "fp32"}
        o_l = gl.NVMMASharedLayout.get_default_for([64, d], gl.bfloat16)
        # geo / store: version 15's geometry table, the TMA-stored epilogue
        for write, geo, store in ((False, False, False), (True, False, False), (True, True, False),
                                  (True, False, True), (True, True, True)):
            sig["o_desc"] = f"tensordesc<bf16[64, {d}],{o_l!r}>" if store else sig["q_desc"]
            pg = f"tensordesc<bf16[16, {d}],{kv_l!r}>" if write else kv
            sig |= {"kc_desc": pg, "vc_desc": pg, "SlotMap": "*i64" if write else "*i32",
                    "Kin": "*bf16", "Vin": "*bf16", "stride_kin": "i32", "stride_vin": "i32",
                    "Kc": "*bf16", "Vc": "*bf16", "stride_c": "i32"}
            consts = dict(NUM_HEADS=32, GROUP=4, D=d, BN=bn, NSK=nsk, NSV=nsv,
                          CONSUMER_REGS=mod.CONSUMER_REGS, LOADER_REGS=mod.LOADER_REGS, WRITE=write,
                          PAGE=16 if write else 8, GEO=geo, STORE_TMA=store)
            print(compile_report(chain._prefill_gluon_chain_kernel, sig, consts,
                                 f"prefill_gluon_chain_d{d}_{bn}_{nsk}_{nsv}" + ("_write" if write else "")
                                 + ("_geo" if geo else "") + ("_tmastore" if store else ""),
                                 args.out, not_div=(), source=GluonASTSource, num_warps=4,
                                 maxnreg=mod.MAXNREG), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

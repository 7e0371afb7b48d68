"""Static check of the Gluon prefill kernel (triton/prefill_gluon.py) for sm_90, with no GPU:
registers, spill stack, shared memory, MMA / copy instructions and ptxas's advisories (a
serialised wgmma) at d64, d128 and d256 (NOTES-hopper.md versions 3-7).

    PYTHONPATH=<triton 3.6 site>:src python3 benchmarks/static_prefill_gluon.py [--out DIR] [--dit | --rows]

--dit: also every form benchmarks/sweep_dit.py times (non-causal, 40 heads, MHA: its tiles,
orders and the persistent kernel). --rows: only the rows kernel (prefill_gluon_rows.py: batched
prefills, cached prefixes; NOTES-hopper.md version 10) at each head dim's tiles."""
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
    ap.add_argument("--dit", action="store_true", help="also the forms of benchmarks/sweep_dit.py")
    ap.add_argument("--rows", action="store_true", help="only the rows form (prefill_gluon_rows.py)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    mod = load_alone("backends/triton/prefill_gluon.py")
    sys.modules["attnkit.backends.triton.prefill_gluon"] = mod    # the persistent kernel's import
    persistent = load_alone("backends/triton/prefill_gluon_persistent.py")
    if args.rows:
        return rows_forms(mod, load_alone("backends/triton/prefill_gluon_rows.py"), args.out)
    # (d, causal, head-major order, persistent): the shipped causal kernels, then the non-causal
    # forms benchmarks/sweep_dit.py times
    # (d, causal, head-major, persistent, tiles, heads, group)
    forms = [(d, True, False, False, mod.TILES[d], 32, 4) for d in sorted(mod.TILES)] + [
        (128, False, False, False, mod.TILES[128], 32, 4), (128, False, True, False, mod.TILES[128], 32, 4),
        (128, False, True, True, mod.TILES[128], 32, 4)]
    if args.dit:
        from sweep_dit import FORMS
        forms += [(128, False, bool(f.get("head_major")), "programs" in f, f["tiles"], 40, 1, bool(f.get("split_tail")))
                  for f in FORMS.values()]
    for d, causal, head_major, persist, (bn, nsk, nsv), heads, group, *rest in forms:
        split = bool(rest and rest[0])
        q_l = gl.NVMMASharedLayout.get_default_for([mod.BM, d], gl.bfloat16)
        kv_l = gl.NVMMASharedLayout.get_default_for([bn, d], gl.bfloat16)
        kv = f"tensordesc<bf16[{bn}, {d}],{kv_l!r}>"
        sig = {"q_desc": f"tensordesc<bf16[{mod.BM}, {d}],{q_l!r}>", "k_desc": kv, "v_desc": kv,
               "Out": "*bf16", "stride_ot": "i32", "T": "i32", "num_blocks": "i32",
               **({"programs": "i32"} if persist else {}), "qk_scale": "fp32", "v_scale": "fp32",
               **({"Work": "*fp32", "WorkML": "*fp32", "full": "i32", "units": "i32", "max_pieces": "i32"}
                  if persist else {})}
        consts = dict(NUM_HEADS=heads, GROUP=group, D=d, BN=bn, NSK=nsk, NSV=nsv,
                      CONSUMER_REGS=mod.CONSUMER_REGS, LOADER_REGS=mod.LOADER_REGS,
                      CAUSAL=causal, HEAD_MAJOR=head_major, **({"SPLIT": split} if persist else {}))
        fn = persistent._prefill_gluon_persistent_kernel if persist else mod._prefill_gluon_kernel
        tag = (f"prefill_gluon_d{d}" + ("" if causal else "_noncausal") + ("_head_major" if head_major else "")
               + ("_persistent" if persist else "") + ("" if (bn, nsk, nsv) == mod.TILES[d] else f"_{bn}_{nsk}_{nsv}")
               + (f"_h{heads}" if heads != 32 else "") + ("_split_tail" if split else ""))
        print(compile_report(fn, sig, consts, tag, args.out, not_div=("T", "num_blocks", "programs", "full", "units", "max_pieces"),
                             source=GluonASTSource, num_warps=4, maxnreg=mod.MAXNREG), flush=True)
    return 0


def rows_forms(mod, rows, out_dir) -> int:
    """The rows kernel (batched prefills, cached prefixes) at each head dim's tiles."""
    for d in sorted(mod.TILES):
        bn, nsk, nsv = mod.TILES[d]
        q_l = gl.NVMMASharedLayout.get_default_for([mod.BM, d], gl.bfloat16)
        kv_l = gl.NVMMASharedLayout.get_default_for([bn, d], gl.bfloat16)
        kv = f"tensordesc<bf16[{bn}, {d}],{kv_l!r}>"
        sig = {"q_desc": f"tensordesc<bf16[{mod.BM}, {d}],{q_l!r}>", "k_desc": kv, "v_desc": kv,
               "Out": "*bf16", "stride_ot": "i32", "BlockReq": "*i32", "BlockM": "*i32",
               "QStart": "*i32", "KStart": "*i32", "SeqLens": "*i32", "num_items": "i32",
               "programs": "i32", "qk_scale": "fp32", "v_scale": "fp32"}
        consts = dict(NUM_HEADS=32, GROUP=4, D=d, BN=bn, NSK=nsk, NSV=nsv,
                      CONSUMER_REGS=mod.CONSUMER_REGS, LOADER_REGS=mod.LOADER_REGS)
        print(compile_report(rows._prefill_gluon_rows_kernel, sig, consts, f"prefill_gluon_rows_d{d}",
                             out_dir, not_div=("num_items", "programs"), source=GluonASTSource,
                             num_warps=4, maxnreg=mod.MAXNREG), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Static check of the prefill_tma kernel for sm_90, with no GPU: compile a tile with
``triton.compile`` for GPUTarget("cuda", 90, 32) (static_mla.compile_report: registers, spill
stack, shared memory) and count the instructions of each key loop of the SASS.

    PYTHONPATH=<triton 3.6 site>:src python3 benchmarks/static_prefill.py [TAG ...] [--out DIR]

A key loop is a backward branch whose body holds HGMMA. The three-loop form has three in
source order, masked left edge, unmasked middle, masked diagonal; without a window the
left edge is empty (lo = mid_lo = 0) and the compiler drops it, so causal tiles show two:
the unmasked middle (the hot one at 16k: ~97 % of the tiles) and the masked diagonal.
Per score element = count / (BLOCK_M * BLOCK_N / threads), each thread's share of the tile.
"""
from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))
from static_mla import BIN, chosen, compile_report, tag_args  # noqa: E402

COUNT = ("FMUL", "FFMA", "FADD", "MUFU.EX2", "FMNMX", "FSEL", "F2FP.BF16.F32.PACK_AB", "HGMMA")
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def key_loops(sass: str) -> list[dict[str, int]]:
    """Opcode counts of each loop body that holds an HGMMA, in order. A loop is a backward
    branch before the kernel's last EXIT (after it lie the out-of-line barrier-wait retries,
    which branch back into the body)."""
    ins = [(int(m.group(1), 16), m.group(3), m.group(4)) for m in _LINE.finditer(sass)]
    end = max(addr for addr, op, _ in ins if op == "EXIT")
    out = []
    for addr, op, rest in ins:
        target = re.search(r"0x([0-9a-f]+)", rest) if op.startswith("BRA") else None
        if not target or int(target.group(1), 16) >= addr or addr > end:
            continue
        ops: dict[str, int] = {}
        for a, o, _ in ins:
            if int(target.group(1), 16) <= a <= addr:
                key = "HGMMA" if o.startswith("HGMMA") else o
                ops[key] = ops.get(key, 0) + 1
        if ops.get("HGMMA"):
            out.append(ops)
    return out


def signature(bm: int, bn: int, d: int) -> tuple[dict, set]:
    """Argument types by name (bf16, host descriptors as launched without WS) and the names
    the JIT marks 16-divisible at the sweep's shapes."""
    sig = {"q_desc": f"tensordesc<bf16[{bm}, {d}]>", "k_desc": f"tensordesc<bf16[{bn}, {d}]>",
           "v_desc": f"tensordesc<bf16[{bn}, {d}]>", "Out": "*bf16", "Sinks": "*fp32"}
    sig |= {n: "*i32" for n in ("BlockReq", "BlockM", "QStart", "KStart", "SeqLens")}
    sig |= {n: "fp32" for n in ("qk_scale", "v_scale", "softcap")}
    sig |= {n: "i32" for n in ("window", "stride_ot", "stride_oh", "num_q_rows", "stride_qt")}
    return sig, {n for n, t in sig.items() if t.startswith("*")} | {
        "stride_ot", "stride_oh", "num_q_rows", "stride_qt"}


def tiles():
    """tag -> (D, heads, group, BLOCK_M, BLOCK_N, warps, stages, FUSED_SCALE): the sweep's
    default tiles both ways, and d64's extra fused tiles."""
    out = {}
    for d, heads, group, bm, bn, w, st in ((64, 32, 4, 128, 64, 8, 3), (128, 32, 4, 128, 64, 8, 3),
                                           (256, 16, 2, 128, 64, 8, 2)):
        for fused in (False, True):
            out[f"d{d}_{bm}x{bn}_w{w}_s{st}{'_fused' if fused else ''}"] = (
                d, heads, group, bm, bn, w, st, fused)
    for bm, bn, w in ((128, 128, 8), (64, 128, 4)):
        out[f"d64_{bm}x{bn}_w{w}_s3_fused"] = (64, 32, 4, bm, bn, w, 3, True)
    return out


def main():
    from attnkit.backends.triton.prefill_tma import _prefill_tma_kernel as kernel
    import triton

    args = tag_args("/tmp/static_prefill")
    print(f"triton {triton.__version__}, sm_90, causal, no window / softcap / sinks", flush=True)
    for tag, (d, heads, group, bm, bn, w, st, fused) in chosen(tiles(), args.tags).items():
        sig, div = signature(bm, bn, d)
        consts = dict(NUM_HEADS=heads, GROUP=group, D=d, DV=d, BLOCK_M=bm, BLOCK_N=bn,
                      CAUSAL=True, HAS_WINDOW=False, HAS_SOFTCAP=False, HAS_SINKS=False,
                      WS=False, FUSED_SCALE=fused)
        if "FUSED_SCALE" not in kernel.arg_names:      # a kernel from before the option
            if fused:
                continue
            del consts["FUSED_SCALE"]
        r = compile_report(kernel, sig, consts, tag, args.out, not_div=set(sig) - div,
                           num_warps=w, num_stages=st)
        r.pop("ops", None)
        if "error" not in r:
            with open(os.path.join(args.out, f"{tag}.sass")) as f:
                loops = key_loops(f.read())
            share = bm * bn / (32 * r["warps"])
            r["loops"] = [{k: ops.get(k, 0) for k in COUNT} | {"total": sum(ops.values())}
                          for ops in loops]
            r["per_element_unmasked"] = {k: round(v / share, 3)
                                         for k, v in r["loops"][len(loops) - 2].items()}
        print(r, flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""Static check of the triton_dsa kernels for sm_90, with no GPU (static_mla.py's method:
``triton.compile`` for GPUTarget("cuda", 90, 32), then ptxas / cuobjdump from Triton's wheel):
registers, spill stack, shared memory and the MMA / load instructions of each tile.

    PYTHONPATH=src python3 benchmarks/static_dsa.py [TAG ...] [--out DIR]

Run with the device's Triton for numbers that hold there; another Triton is a lead only."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from static_mla import chosen, compile_report, tag_args  # noqa: E402

SPARSE_CONSTS = ("L", "R", "ROW", "BLOCK_H", "BLOCK_N", "DIRECT", "DOT_PREC")
INDEX_CONSTS = ("HP", "D", "PAGE_SIZE", "BLOCK_T", "BLOCK_N", "HAS_SCALE", "DOT_PREC", "PACKED")


def _signature(fn, types: dict, consts) -> dict:
    """Every argument an i32 unless named in ``types``; constexprs left out."""
    return {n: types.get(n, "i32") for n in fn.arg_names if n not in consts}


def tiles() -> dict:
    """tag -> (kernel, signature, constexprs, options, arguments left unmarked)."""
    from attnkit.backends.triton_dsa.indexer import _index_score_kernel as score
    from attnkit.backends.triton_dsa.sparse_mla import _sparse_mla_kernel as sparse
    out = {}
    sig = _signature(sparse, dict(Q="*bf16", Cache="*bf16", Slots="*i32", Out="*fp32", Lse="*fp32",
                                  qk_scale="fp32", v_scale="fp32"), SPARSE_CONSTS)
    for bh, bn, w, st in ((64, 64, 8, 3), (64, 32, 8, 3), (64, 64, 8, 2), (64, 16, 8, 2)):
        out[f"sparse_h{bh}_n{bn}_w{w}_s{st}"] = (
            sparse, sig, dict(L=512, R=64, ROW=576, BLOCK_H=bh, BLOCK_N=bn, DIRECT=True,
                              DOT_PREC="tf32"), dict(num_warps=w, num_stages=st),
            ("H", "topk", "num_splits"))
    sig = _signature(score, dict(Q="*bf16", W="*fp32", K="*bf16", KScale="*fp32",
                                 BlockTables="*i32", TileReq="*i32", TileTok="*i32",
                                 TokReq="*i32", TokPos="*i32", Scores="*i64"), INDEX_CONSTS)
    for bt, bn, w in ((1, 64, 4), (1, 128, 4), (2, 64, 8)):
        out[f"score_t{bt}_n{bn}_w{w}"] = (
            score, sig, dict(HP=64, D=128, PAGE_SIZE=64, BLOCK_T=bt, BLOCK_N=bn,
                             HAS_SCALE=False, DOT_PREC="tf32", PACKED=True),
            dict(num_warps=w, num_stages=2), ("T", "H"))
    out.update(gluon_tiles())
    return out


def gluon_tiles() -> dict:
    """The Gluon sparse kernel's forms (sparse_gluon.GLUON_FORMS), DIRECT and split."""
    from triton.experimental.gluon._runtime import GluonASTSource
    from attnkit.backends.triton_dsa import sparse_gluon as g
    fn = g._sparse_gluon_kernel
    consts_names = ("L", "R", "ROW", "BH", "BN", "NS", "LW", "DIRECT", "VALUES_REGS",
                    "LOADER_REGS", "THREE")
    out = {}
    for form, (bn, ns, lw, regs, three) in g.GLUON_FORMS.items():
        for direct in (True, False):
            sig = _signature(fn, dict(Q="*bf16", Cache="*bf16", Slots="*i32",
                                      Out="*bf16" if direct else "*fp32", Lse="*fp32",
                                      qk_scale="fp32", v_scale="fp32"), consts_names)
            consts = dict(L=512, R=64, ROW=576, BH=g.BLOCK_H, BN=bn, NS=ns, LW=lw, DIRECT=direct,
                          VALUES_REGS=g.MAXNREG if three else g.VALUES_REGS,
                          LOADER_REGS=regs, THREE=three)
            maxnreg = g.MAXNREG
            out[f"gluon_{form}_d{int(direct)}"] = (
                fn, sig, consts, dict(num_warps=4, maxnreg=maxnreg, source=GluonASTSource),
                ("topk", "num_splits", "stride_lh"))
    return out


def main():
    args = tag_args("/tmp/static_dsa")
    for tag, (fn, sig, consts, opts, not_div) in chosen(tiles(), args.tags).items():
        print(compile_report(fn, sig, consts, tag, args.out, not_div=not_div, **opts), flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""Static check of the split-KV decode kernel for sm_90, with no GPU: each launch config of the
decode sweep (sweep_decode.py) compiled by ``triton.compile`` for GPUTarget("cuda", 90, 32),
with registers, spill stack, shared memory and the load instructions of its SASS, and the
programs an SM can hold by registers (64K) and by shared memory (227 KB).

    PYTHONPATH=<triton 3.6 site>:src python3 benchmarks/static_decode.py [TAG ...] [--out DIR]

Shapes: bench_triton's decode rows (8 KV heads, page 16, bf16, one split, no window / softcap
/ sinks, the new K/V written by its own launch: variant split).
"""
from __future__ import annotations

import os
import re
import sys

import triton
from static_mla import chosen, compile_report, tag_args

from attnkit.backends.triton.decode import _decode_kernel

INTS = ("stride_qt", "stride_qp", "stride_qh", "stride_ot", "stride_oh", "stride_kp", "stride_kt",
        "stride_kh", "stride_vp", "stride_vt", "stride_vh", "stride_sp", "stride_bp", "stride_bt",
        "stride_mb", "stride_mh", "stride_ms", "stride_knt", "stride_knh", "stride_vnt",
        "stride_vnh", "window", "attn_chunk", "chunk")
PTRS = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "Out": "*bf16", "MidO": "*fp32", "MidM": "*fp32",
        "MidL": "*fp32", "Sinks": "*bf16", "SeqLens": "*i32", "BlockTables": "*i32", "KN": "*bf16",
        "VN": "*bf16", "Slots": "*i32", "PartStart": "*i32", "Counter": "*i32"}


def signature() -> dict:
    floats = {"qk_scale": "fp32", "v_scale": "fp32", "softcap": "fp32"}
    return {n: PTRS.get(n) or floats.get(n) or "i32" for n in _decode_kernel.arg_names
            if n in PTRS or n in floats or n in INTS}


def consts(group: int, d: int, bn: int, pack: int = 1, edge: bool = False,
           merge: bool = False) -> dict:
    """The kernel's constants; ``merge``: variant split_merge's form (splits, the new K/V
    written in the kernel, the last split program merging: MERGE_ROWS / MERGE_CHUNK as
    decode_merge.merge_shape gives them)."""
    width = triton.next_power_of_2(pack * d)
    rows = triton.next_power_of_2(group * pack)
    return dict(GROUP=group, G_PAD=max(16, rows), D=d, DV=d,
                PAGE=16, BLOCK_N=bn, BLOCK_D=width, BLOCK_DV=width, SPLIT=merge, HAS_WINDOW=False,
                HAS_CHUNK=False, HAS_SOFTCAP=False, HAS_SINKS=False, FUSED_WRITE=merge,
                NUM_PARTS=1, DOT_PREC="ieee", MERGE_ROWS=rows if merge else 0,
                MERGE_CHUNK=min(16, 8192 // (rows * triton.next_power_of_2(d))) if merge else 0,
                EVEN_SPLITS=merge, PACK=pack, MID_W=d, EDGE_MASK=edge)


def tiles() -> dict:
    out = {}
    for bn, w, s in ((32, 4, 4), (32, 4, 2), (32, 4, 5), (16, 4, 4), (16, 4, 5), (64, 4, 2),
                     (64, 8, 2), (32, 8, 4)):
        out[f"d256_n{bn}_w{w}_s{s}"] = (consts(2, 256, bn), dict(num_warps=w, num_stages=s))
    for bn, w, s, pack in ((64, 4, 3, 1), (64, 4, 5, 1), (64, 4, 3, 2), (32, 4, 5, 2),
                           (64, 4, 5, 2), (128, 8, 3, 2), (64, 4, 3, 4)):
        out[f"d64_n{bn}_w{w}_s{s}_p{pack}"] = (consts(4, 64, bn, pack), dict(num_warps=w, num_stages=s))
    for bn, w, s in ((64, 4, 4), (64, 4, 5), (32, 4, 5), (128, 8, 3)):
        out[f"d128_n{bn}_w{w}_s{s}"] = (consts(4, 128, bn), dict(num_warps=w, num_stages=s))
    out["d128_n64_w4_s4_edge"] = (consts(4, 128, 64, edge=True), dict(num_warps=4, num_stages=4))
    # issue 28's B=16 rows: split_merge's form, PACK 1 / 2 / 4, and register caps (maxnreg)
    # that would let 4 programs of 4 warps share an SM
    for bn, w, s, pack, cap in ((64, 4, 4, 1, None), (32, 4, 5, 1, None), (64, 4, 4, 1, 128),
                                (64, 4, 3, 1, None), (64, 8, 4, 1, None), (32, 4, 5, 2, None),
                                (64, 4, 4, 2, None), (16, 4, 5, 2, None), (32, 4, 4, 2, None),
                                (16, 4, 5, 4, None), (32, 4, 4, 4, None), (32, 8, 4, 4, None),
                                (16, 4, 8, 1, None), (32, 4, 5, 2, 128), (64, 4, 4, 2, 128)):
        tag = f"d128m_n{bn}_w{w}_s{s}_p{pack}" + (f"_r{cap}" if cap else "")
        opts = dict(num_warps=w, num_stages=s) | (dict(maxnreg=cap) if cap else {})
        out[tag] = (consts(4, 128, bn, pack, merge=True), opts)
    return out


def main():
    args = tag_args("/tmp/static_decode")
    print(f"triton {triton.__version__}, sm_90", flush=True)
    for tag, (cx, opts) in chosen(tiles(), args.tags).items():
        r = compile_report(_decode_kernel, signature(), cx, tag, args.out, not_div=("window",),
                           **opts)
        if "regs" in r:
            threads = 32 * r["warps"]
            r["per_sm"] = min(65536 // (max(r["regs"], 1) * threads), 232448 // max(r["smem"], 1))
            r["kv_buffers"] = _kv_buffers(os.path.join(args.out, f"{tag}.ttgir"))
        print(r, flush=True)


def _kv_buffers(ttgir: str) -> int:
    """How many K (or V) tiles the pipeliner keeps in shared memory: the leading dimension of
    the widest bf16 buffer it allocates (the tile loop's multi-buffer)."""
    text = open(ttgir).read()
    found = re.findall(r"local_alloc : \(\) -> !ttg.memdesc<(\d+)x\d+x\d+xbf16", text)
    return max((int(n) for n in found), default=0)


if __name__ == "__main__":
    sys.exit(main())

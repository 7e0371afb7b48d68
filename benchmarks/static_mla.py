"""Static check of the triton_mla decode kernels for sm_90, with no GPU: compile each tile with
``triton.compile`` for GPUTarget("cuda", 90, 32) and report what ptxas gave it (registers,
spill stack, shared memory) and the MMA / load instructions of the SASS.

    PYTHONPATH=<triton 3.6 site>:src python3 benchmarks/static_mla.py [TAG ...] [--out DIR]

Run it with the device's Triton (3.6 in NOTES-hopper.md): a different Triton is a lead only.
Pointer and integer arguments are marked 16-divisible as the JIT marks them at launch
(strides of the benchmark's tensors are multiples of 16); without the marks the compile is
not the launch's. ``H`` and ``num_splits`` are left unmarked (any value)."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
NOT_DIV = ("H", "num_splits")
OPS = r"(USETMAXREG[.A-Z0-9]*|HGMMA\.[0-9x]+\.[A-Z0-9.]+|HMMA\.[0-9]+|UTMALDG\.\dD|LDGSTS[.A-Z0-9]*|LDL[.0-9A-Z]*|STL[.0-9A-Z]*)"


def load_alone(relpath: str):
    """A kernel module under src/attnkit loaded by path, alone: the package's __init__ would
    import torch, which the static checks' Triton install need not have."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "attnkit", relpath)
    spec = importlib.util.spec_from_file_location(os.path.basename(relpath)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_report(fn, sig, consts, tag, out_dir, not_div=NOT_DIV, source=ASTSource, **opts):
    """One tile: -> dict(tag, regs, stack, smem, ops) or dict(tag, error). Pointer and integer
    arguments are marked 16-divisible unless named in ``not_div``; ``source``: the front end
    (Gluon kernels: GluonASTSource)."""
    t0 = time.time()
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n, ty in sig.items()
             if n not in not_div and (ty.startswith("*") or ty in ("i32", "i64"))}
    src = source(fn=fn, signature={**sig, **{k: "constexpr" for k in consts}},
                 constexprs=consts, attrs=attrs)
    try:
        c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    except Exception as exc:  # noqa: BLE001 - a tile that does not compile is a result
        cause = exc.__cause__ or exc
        return dict(tag=tag, error=" | ".join(str(cause).strip().splitlines()[-4:])[:600])
    path = os.path.join(out_dir, f"{tag}.cubin")
    with open(path, "wb") as f:
        f.write(c.asm["cubin"])
    with open(path[:-6] + ".ttgir", "w") as f:
        f.write(c.asm["ttgir"])
    with open(path[:-6] + ".ptx", "w") as f:
        f.write(c.asm["ptx"])
    # ptxas's advisories (C7512: wgmma serialised for want of registers, ...) are not in the
    # cubin: compile the PTX once more with -v to read them.
    arch = "sm_90a" if ".target sm_90a" in c.asm["ptx"] else "sm_90"
    verbose = subprocess.run([f"{BIN}/ptxas", f"-arch={arch}", "-v", path[:-6] + ".ptx", "-o",
                              os.devnull], capture_output=True, text=True).stderr
    advisories = sorted(set(re.findall(r"\((C\d+)\) Potential Performance Loss: (.*?) (?:for|in) the"
                                       r" function", verbose)))
    res = subprocess.run([f"{BIN}/cuobjdump", "--dump-resource-usage", path],
                         capture_output=True, text=True).stdout
    sass = subprocess.run([f"{BIN}/cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    with open(path[:-6] + ".sass", "w") as f:
        f.write(sass)
    ops: dict[str, int] = {}
    for m in re.findall(OPS, sass):
        ops[m] = ops.get(m, 0) + 1
    reg, stack = re.search(r"REG:(\d+)", res), re.search(r"STACK:(\d+)", res)
    # an HGMMA waited for at once (WARPGROUP.DEPBAR.LE gsb0, 0x0 next) runs alone: serialised
    alone = len(re.findall(r"HGMMA[^\n]*\n[^\n]*\n\s*/\*[0-9a-f]+\*/\s+WARPGROUP\.DEPBAR\.LE gsb0,"
                           r" 0x0 ;", sass))
    return dict(tag=tag, regs=int(reg.group(1)) if reg else None,
                stack=int(stack.group(1)) if stack else None, smem=c.metadata.shared,
                warps=c.metadata.num_warps, ops=dict(sorted(ops.items())), hgmma_alone=alone,
                advisories=[f"{code}: {text}" for code, text in advisories],
                s=round(time.time() - t0))


_PTRS = {"BlockTables": "*i32", "WorkReq": "*i32", "WorkTok": "*i32", "QStart": "*i32",
         "SeqLens": "*i32", "Out": "*fp32", "Lse": "*fp32"}
_TAIL = {"stride_ot": "i32", "stride_oh": "i32", "stride_os": "i32", "stride_lt": "i32",
         "stride_lh": "i32", "qk_scale": "fp32", "v_scale": "fp32", "H": "i32", "num_splits": "i32"}
_QS = {"stride_qlh": "i32", "stride_qlt": "i32", "stride_qpt": "i32", "stride_qph": "i32"}


def signature(fn, dt="bf16"):
    """The kernel's argument types, by name (every decode kernel takes a subset of these)."""
    known = {"QL": f"*{dt}", "QP": f"*{dt}", "Cache": f"*{dt}", **_PTRS, **_QS,
             "stride_cache": "i32", "stride_bt": "i32", **_TAIL}
    return {n: known[n] for n in fn.arg_names if n in known}


def tiles():
    """tag -> (kernel, constexprs, compile options): the tiles the sweep's rows launch."""
    from attnkit.backends.triton_mla.decode import _absorbed_split_kernel as v1
    from attnkit.backends.triton_mla.decode_column_split import _absorbed_v2_kernel as v2
    base = dict(L=512, R=64, PAGE_SIZE=64, BLOCK_T=1, DIRECT=True, DOT_PREC="tf32")
    out = {}
    for bn, w, st in ((32, 8, 3), (64, 8, 2), (64, 8, 3), (64, 8, 4)):
        out[f"v1_h64_n{bn}_w{w}_s{st}"] = (v1, dict(base, BLOCK_H=64, BLOCK_N=bn), dict(num_warps=w, num_stages=st))
    out["v2_h128_n32_w8_s3_v2"] = (v2, dict(base, ROW=576, BLOCK_H=128, BLOCK_N=32, V_SPLIT=2),
                                   dict(num_warps=8, num_stages=3))
    return out


def tag_args(default_out: str):
    """The static scripts' command line: TAG regexes (none: every tile) and --out DIR (made)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("tags", nargs="*")
    ap.add_argument("--out", default=default_out)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return args


def chosen(tiles: dict, tags) -> dict:
    """The entries of ``tiles`` whose tag matches one of ``tags`` (all of them without tags)."""
    return {t: v for t, v in tiles.items() if not tags or any(re.fullmatch(x, t) for x in tags)}


def main():
    args = tag_args("/tmp/static_mla")
    print(f"triton {triton.__version__}, sm_90", flush=True)
    for tag, (fn, consts, opts) in chosen(tiles(), args.tags).items():
        r = compile_report(fn, signature(fn), consts, tag, args.out, **opts)
        print(r, flush=True)


if __name__ == "__main__":
    sys.exit(main())

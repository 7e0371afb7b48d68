"""The DSA conformance cases (docs/dsa.md), generated from the declarations: every backend that
declares the ``sparse_topk`` feature, on every device tests can reach, gets

    every mode (decode, extend with and without a cached prefix, mixed) at each declared
    dtype, index dtype, page size, top-k and indexer size (covered, not multiplied), with
    contexts shorter and longer than top-k in each;
    garbage: NaN / inf in every slot no request owns and past each request's length (latent,
    index keys and their fp8 scales), for mixed and decode steps, fp8 index cache too;
    ties: index keys from a pool of three, so the top-k boundary splits equal scores;
    short: every context at most top-k (all positions selected);
    fp8 KV: an fp8 latent cache where declared;

and probes: an index dtype, indexer size or top-k outside the declaration must be refused.
Every backend that serves MLA but not sparse_topk gets a DSA layer that it must refuse.

A backend with kernel variants also gets, on CUDA, each variant alone (its kernel table for
every role, as ``attnkit tune`` and a plan hand it) inside its own envelope: the declared
widths its dtypes allow, as many query heads as its ``min_heads``, a top-k of several key tiles
with a partial last one, every mode and the garbage edge (decode).
"""
from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, replace

from attnkit.registry import declarations
from attnkit.registry.capabilities import INDEX_DTYPES, MultipleOf
from conformance_cases import (ANY_MLA_DIMS, INTERPRETER, _devices, _interpreter_skip,
                               _missing_requirement, page_sizes)

DSA_HEADS = 4                             # query heads of the MLA layer
ANY_SPARSE_DIMS = ((4, 32), (2, 16))      # (index_n_heads, index_head_dim) for "any"
ANY_TOPKS = (4, 8)                        # small, so that selection matters
MODES = ("decode", "prefill", "prefix", "mixed")
VARIANT_TOPK = 72     # 64-row tiles: two, the second partial (bf16 index keys at a larger
#                      top-k made prefill rows whose top-k boundary is a near-tie in every draw)


@dataclass(frozen=True)
class DSAConf:
    backend: str
    device: str
    dtype: str
    kv_dtype: str
    index_dtype: str
    page_size: int
    mla_dims: tuple[int, int]
    sparse_dims: tuple[int, int]
    topk: int
    mode: str
    edge: str | None = None          # garbage | ties | short
    probe: str | None = None
    skip: str | None = None
    variant: str | None = None       # a kernel variant run alone (None: the backend's choice)
    heads: int = DSA_HEADS

    @property
    def id(self) -> str:
        return "-".join([self.backend, self.device, "dsa", self.edge or self.probe or self.mode,
                         self.dtype, f"kv-{self.kv_dtype}", f"idx-{self.index_dtype}",
                         f"p{self.page_size}", f"mla{self.mla_dims[0]}-{self.mla_dims[1]}",
                         f"ih{self.sparse_dims[0]}-{self.sparse_dims[1]}", f"top{self.topk}"]
                        + ([self.mode] if (self.edge or self.probe) else [])
                        + ([f"{self.variant}-h{self.heads}"] if self.variant else []))

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())


def lengths(c: DSAConf) -> tuple[list[int], list[int]]:
    """(prefix_lens, new_lens): contexts below, at and above top-k in every mode."""
    k, ps = c.topk, c.page_size
    if c.edge == "short":
        return {"decode": ([0, k - 1, k // 2], [1, 1, 1]), "prefill": ([0, 0], [k, 2]),
                "prefix": ([1, k - 3], [k - 1, 3]), "mixed": ([0, k - 1], [k, 1])}[c.mode]
    if c.edge == "garbage":
        return {"mixed": ([0, 2 * ps + k + 3, 5], [3 * k + 1, 1, k]),
                "decode": ([2 * ps + k + 5, 3, ps + k], [1, 1, 1])}[c.mode]
    return {"decode": ([3, k, 3 * k + 9 + ps], [1, 1, 1]),
            "prefill": ([0, 0], [2 * k + 7, 5]),
            "prefix": ([k + 3 + ps, 2], [6, k + 4]),
            "mixed": ([0, 2 * k + 5], [k + 4, 1])}[c.mode]


def _topks(caps) -> tuple[int, ...]:
    t = caps.sparse_topks
    if t == "any":
        return ANY_TOPKS
    if isinstance(t, MultipleOf):
        return (t.n,)
    return tuple(sorted(t)[:2])


def axes(decl, device: str) -> dict[str, tuple]:
    """The declared values of every DSA axis (the interpreter leaves bf16 to the GPU)."""
    caps = decl.capabilities
    gpu_only = ("bf16",) if device == INTERPRETER else ()
    dtypes = tuple(d for d in caps.dtypes if d not in gpu_only)
    return {
        "dtype": dtypes,
        "index_dtype": tuple(d for d in caps.index_dtypes or () if d not in gpu_only),
        "page_size": page_sizes(caps),
        "mla_dims": ANY_MLA_DIMS if caps.mla_dims == "any" else tuple(caps.mla_dims),
        "sparse_dims": ANY_SPARSE_DIMS if caps.sparse_dims == "any" else tuple(caps.sparse_dims),
        "topk": _topks(caps),
        "mode": tuple(m for m in MODES if ("decode" if m == "decode" else "prefill") in caps.phases),
    }


def _kv_for(caps, dtype: str) -> str:
    return dtype if dtype in caps.kv_cache_dtypes else caps.kv_cache_dtypes[0]


def covering(decl, device: str) -> list[DSAConf]:
    caps = decl.capabilities
    ax = axes(decl, device)
    n = max(len(v) for v in ax.values())
    offsets = {name: zlib.crc32(name.encode()) % 5 for name in ax}
    out = []
    for i in range(n):
        pick = {a: vals[(i + offsets[a]) % len(vals)] for a, vals in ax.items()}
        out.append(DSAConf(decl.name, device, kv_dtype=_kv_for(caps, pick["dtype"]), **pick))
    first = {a: vals[0] for a, vals in ax.items()}
    for axis, vals in ax.items():
        for value in vals:
            if not any(getattr(c, axis) == value for c in out):
                pick = first | {axis: value}
                out.append(DSAConf(decl.name, device, kv_dtype=_kv_for(caps, pick["dtype"]), **pick))
    return out


def edges(decl, device: str) -> list[DSAConf]:
    caps = decl.capabilities
    ax = axes(decl, device)
    dtype = "fp32" if "fp32" in ax["dtype"] else ax["dtype"][0]
    fp8_index = "fp8_e4m3" if "fp8_e4m3" in ax["index_dtype"] else None
    base = DSAConf(decl.name, device, dtype, _kv_for(caps, dtype),
                   dtype if dtype in ax["index_dtype"] else ax["index_dtype"][0],
                   16 if 16 in ax["page_size"] else ax["page_size"][0], ax["mla_dims"][0],
                   ax["sparse_dims"][0], ax["topk"][-1], "decode")
    out = []
    for mode in [m for m in ("mixed", "decode") if m in ax["mode"]]:
        out.append(replace(base, mode=mode, edge="garbage"))
        if fp8_index:
            out.append(replace(base, mode=mode, index_dtype=fp8_index, edge="garbage"))
    for mode in ax["mode"]:
        out.append(replace(base, mode=mode, edge="ties"))
        out.append(replace(base, mode=mode, edge="short"))
    if fp8_index:
        out += [replace(base, mode=m, index_dtype=fp8_index, edge="ties") for m in ("decode", "prefix")
                if m in ax["mode"]]
    fp8_kv = next((d for d in caps.kv_cache_dtypes if d.startswith("fp8")), None)
    if fp8_kv:
        out += [replace(base, mode=m, kv_dtype=fp8_kv) for m in ("decode", "mixed") if m in ax["mode"]]
    return out


def variant_cases(decl, device: str) -> list[DSAConf]:
    """Each declared kernel variant alone, on CUDA, in its own envelope (module docstring)."""
    if device != "cuda":
        return []
    caps = decl.capabilities
    ax = axes(decl, device)
    out = []
    for k in decl.variants:
        dtype = next(d for d in ax["dtype"] if not k.dtypes or d in k.dtypes)
        kv = next(d for d in caps.kv_cache_dtypes if d in (k.kv_cache_dtypes or (dtype,)))
        pages = [p for p in ax["page_size"] if k.page_multiple is None or p % k.page_multiple == 0]
        base = DSAConf(decl.name, device, dtype, kv, dtype if dtype in ax["index_dtype"] else
                       ax["index_dtype"][0], pages[-1], ax["mla_dims"][0], ax["sparse_dims"][0],
                       VARIANT_TOPK, "decode", variant=k.name, heads=max(DSA_HEADS, k.min_heads or 0))
        # no "prefill" mode: its 2k + 7 fresh rows of bf16 index keys at 64 indexer heads gave a
        # near-tie at some row's top-k boundary in every draw; "mixed" has a fresh prefill
        out += [replace(base, mode=m, page_size=pages[i % len(pages)])
                for i, m in enumerate(ax["mode"]) if m != "prefill"]
        out.append(replace(base, mode="decode", edge="garbage"))
    return out


def probes(decl, device: str) -> list[DSAConf]:
    """A DSA input just outside the declaration, each of which must raise AttnkitError."""
    caps = decl.capabilities
    base = edges(decl, device)[0]
    base = replace(base, edge=None, mode=axes(decl, device)["mode"][0])
    out = [replace(base, index_dtype=d, probe=f"no_index_{d}") for d in INDEX_DTYPES
           if d not in (caps.index_dtypes or ()) and not (device == INTERPRETER and d == "bf16")]
    if caps.sparse_dims != "any":
        out.append(replace(base, sparse_dims=next(d for d in ((3, 16), (5, 24)) if d not in caps.sparse_dims),
                           probe="no_sparse_dims"))
    if caps.sparse_topks != "any":
        bad = next(t for t in (3, 5, 7, 9, 11) if not (isinstance(caps.sparse_topks, MultipleOf)
                                                       and t % caps.sparse_topks.n == 0)
                   and not (isinstance(caps.sparse_topks, tuple) and t in caps.sparse_topks))
        out.append(replace(base, topk=bad, probe="no_topk"))
    return out


def refusers() -> list[DSAConf]:
    """A DSA layer handed to each MLA backend that does not declare sparse_topk (CPU only,
    or the interpreter): it must refuse (AK440), never compute dense attention."""
    out = []
    for decl in declarations().values():
        caps = decl.capabilities
        if "mla" not in caps.kinds or "sparse_topk" in caps.features:
            continue
        device = _devices(decl)[-1] if _devices(decl) else "cpu"
        if device == "cuda":
            continue
        dtype = "fp32" if "fp32" in caps.dtypes else caps.dtypes[0]
        mla = ANY_MLA_DIMS[0] if caps.mla_dims == "any" else caps.mla_dims[0]
        out.append(DSAConf(decl.name, device, dtype, _kv_for(caps, dtype), dtype,
                           page_sizes(caps)[0], mla, ANY_SPARSE_DIMS[0], ANY_TOPKS[0], "decode",
                           probe="no_sparse_topk",
                           skip=_missing_requirement(decl) or _interpreter_skip(device)))
    return out


@functools.cache
def interpreter_dots_exact() -> bool:
    """Whether the Triton interpreter's tl.dot (numpy's matmul) gives every column of a product
    the same value when the columns of its right operand are equal: the exact-tie cases need
    equal index keys at two positions to score bitwise equal, which the GPU's kernels give. On
    the CPU it is the BLAS's choice: OpenBLAS's Haswell sgemm (OPENBLAS_CORETYPE=Haswell, set by
    this workplace on AMD EPYC machines, docs of env) rounds columns of one tile differently,
    so the interpreter breaks exact ties by rounding noise (seen 2026-12-02 on the CI machine)."""
    import numpy as np

    rng = np.random.default_rng(0)
    q = rng.standard_normal((64, 128)).astype(np.float32)           # head rows x index dim
    keys = np.repeat(rng.standard_normal((128, 1)).astype(np.float32), 64, axis=1)   # one key, 64 positions
    out = q @ keys
    return bool((out == out[:, :1]).all())


def _ties_skip(c: DSAConf) -> str | None:
    """The exact-tie cases through the interpreter where its dots are not exact (above); the
    same cases run on the GPU and on torch_native, and the tie rule's own test runs on the CPU."""
    if c.device == INTERPRETER and c.edge == "ties" and not interpreter_dots_exact():
        return ("exact ties need equal columns from the interpreter's tl.dot; this CPU's BLAS "
                "(numpy matmul) rounds them differently (dsa_cases.interpreter_dots_exact)")
    return None


def all_cases() -> tuple[list[DSAConf], list[DSAConf]]:
    """(accuracy cases, probes) over every backend declaring sparse_topk, plus the refusers."""
    accuracy, refusals = [], []
    for decl in declarations().values():
        if "sparse_topk" not in decl.capabilities.features:
            continue
        skip = _missing_requirement(decl)
        for device in _devices(decl):
            why = skip or _interpreter_skip(device)
            confs = covering(decl, device) + edges(decl, device) + variant_cases(decl, device)
            accuracy += [replace(c, skip=why or _ties_skip(c)) for c in dict.fromkeys(confs)]
            refusals += [replace(c, skip=why) for c in probes(decl, device)]
    return accuracy, refusals + refusers()

"""Capture/replay cases of the backends' capture contract, generated from the declarations.

Every backend that declares ``cuda_graph`` gets, per kind it declares: a plain layer at a
page size of 16 and at one that does not divide 16 (where it accepts one), and one layer per
decode-relevant layer feature it declares (a backend serving DeepSeek sparse attention: a DSA
layer, its indexer's keys cached and its inputs refilled with q each round). A case plans ONE static decode step for a bucket of
``BUCKET`` rows while every row is padded (so plans sized from the lengths of the moment would
be sized for one key), then replays it over ``ROUNDS``: other lengths (up to the longest the
tables address), other block tables and slots, fewer real requests than rows (padded rows).
Each replay's real rows are compared with the float64 reference and the cache with what the
real requests' writes alone give; a padded row may touch only the scratch page.

On CPU the replay is the same static step run eagerly (Triton through the interpreter), with
the metadata's host lists made unreadable while it runs; on CUDA (marked gpu) it is a
``torch.cuda.graph`` capture replayed. Backends that do not declare ``cuda_graph`` must refuse
``prepare_static`` (AK457).
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from attnkit.registry import declarations

BUCKET = 4
MIN_KEYS = 64          # the static tables address at least this many keys (and 8 pages)
# prefix lengths of the real requests, per round (named ones depend on the page size)
ROUNDS = ([3, "boundary", 17, 0], ["longest", 5], ["page+2"], [40, 9, "half"])
DECODE_FEATURES = ("sliding_window", "logit_softcap", "sinks", "chunked_local", "dual_chunk")
# Options that make the CPU run exercise split reductions sized for the static bound (the
# interpreter's 4 "SMs" would otherwise plan one split).
CPU_OPTIONS = {"triton": {"num_splits": 3}}
# GPU-only decode variants whose envelope is their own (sm_90 Gluon kernels): one plain bf16
# case each, run alone by its option (elsewhere the backend falls back, and the case still holds)
GPU_VARIANTS = {"triton": ({"decode_variant": "stream"},)}
# Launch switches whose state lives in the static step (triton_mla's fused split merge: its
# tickets, reserved by capture_plan and left zero by every replay): one plain case each, on the
# CPU (fp32) and on CUDA (bf16)
SWITCHES = {"triton_mla": ({"variant": "v2", "num_splits": 3, "merge_splits": 256},)}


@dataclass(frozen=True)
class CaptureConf:
    backend: str
    device: str
    kind: str
    dtype: str
    page_size: int
    feature: str | None
    options: tuple = ()
    index_dtype: str | None = None       # DSA layers: the index-key cache's (None: the KV dtype)
    model_sizes: bool = False            # DSA layers: the declaration's first (largest) latent
                                         # and indexer sizes, 64 heads, top-k 64 (else toy sizes)

    @property
    def id(self) -> str:
        opts = "-".join(f"{k}{v}" for k, v in self.options)
        index = f"idx-{self.index_dtype}" if self.index_dtype else ""
        sizes = "model-sizes" if self.model_sizes else ""
        return "-".join(p for p in (self.backend, self.device, self.kind, self.dtype,
                                    f"p{self.page_size}", self.feature or "plain", index, sizes,
                                    opts) if p)


def capturable() -> list:
    return [d for d in declarations().values() if "cuda_graph" in d.capabilities.features]


def not_capturable() -> list:
    return [d for d in declarations().values() if "cuda_graph" not in d.capabilities.features]


def missing(decl) -> str | None:
    for pkg in decl.capabilities.requires:
        if importlib.util.find_spec(pkg) is None:
            return f"{decl.name} needs {pkg}, not installed"
    return None


def _page_sizes(caps) -> tuple[int, ...]:
    if caps.page_sizes == "any":
        return (16, 7)
    sizes = tuple(caps.page_sizes) if isinstance(caps.page_sizes, tuple) else (caps.page_sizes.n,)
    return tuple(dict.fromkeys([16 if 16 in sizes else sizes[0], min(sizes)]))


def cases() -> list[CaptureConf]:
    out = []
    for decl in capturable():
        caps = decl.capabilities
        features = [None] + [f for f in DECODE_FEATURES if f in caps.features]
        if "dual_chunk" in caps.features:
            features = ["dual_chunk"]          # it serves only dual chunk layers
        if "sparse_topk" in caps.features:
            features = ["sparse_topk"]         # DSA layers (the indexer's top-k), docs/dsa.md
        for kind in caps.kinds:
            for i, feature in enumerate(features):
                pages = _page_sizes(caps) if i == 0 else _page_sizes(caps)[:1]
                for j, page in enumerate(pages):
                    # CPU: fp32 (the interpreter's bf16 dots are wrong); CUDA: bf16, one fp32
                    out.append(CaptureConf(decl.name, "cpu", kind, "fp32", page, feature,
                                           tuple(CPU_OPTIONS.get(decl.name, {}).items())
                                           if j == 0 else ()))
                    if "cuda" in caps.platforms:
                        dtype = "fp32" if (i, j) == (0, 1) else (
                            "bf16" if "bf16" in caps.dtypes else caps.dtypes[0])
                        out.append(CaptureConf(decl.name, "cuda", kind, dtype, page, feature))
        if "cuda" in caps.platforms:
            for opts in GPU_VARIANTS.get(decl.name, ()):
                out.append(CaptureConf(decl.name, "cuda", caps.kinds[0], "bf16", 16, None,
                                       tuple(opts.items())))
        for opts in SWITCHES.get(decl.name, ()):
            out.append(CaptureConf(decl.name, "cpu", caps.kinds[0], "fp32", 16, None, tuple(opts.items())))
            if "cuda" in caps.platforms:
                out.append(CaptureConf(decl.name, "cuda", caps.kinds[0], "bf16", 16, None,
                                       tuple(opts.items())))
        if "sparse_topk" in caps.features and "fp8_e4m3" in (caps.index_dtypes or ()):
            # fp8 index keys: each new key quantised with its own scale inside the graph
            page = _page_sizes(caps)[0]
            out.append(CaptureConf(decl.name, "cpu", caps.kinds[0], "fp32", page, "sparse_topk",
                                   index_dtype="fp8_e4m3"))
            if "cuda" in caps.platforms:
                out.append(CaptureConf(decl.name, "cuda", caps.kinds[0], "bf16", page, "sparse_topk",
                                       index_dtype="fp8_e4m3"))
        if "sparse_topk" in caps.features and "cuda" in caps.platforms and "bf16" in caps.dtypes:
            # a model's sizes (DeepSeek-V3.2's where declared: the kernels a served model
            # runs, e.g. a variant only such shapes take), on the page size it uses
            pages = caps.page_sizes if isinstance(caps.page_sizes, tuple) else ()
            out.append(CaptureConf(decl.name, "cuda", caps.kinds[0], "bf16",
                                   64 if 64 in pages else _page_sizes(caps)[0], "sparse_topk",
                                   model_sizes=True))
    return out


def max_pages(page_size: int) -> int:
    return max(8, -(-MIN_KEYS // page_size))


def lengths(round_: list, page_size: int) -> list[int]:
    """The prefix lengths of one round (each request decodes the token after its prefix):
    "longest" fills its block table, "boundary" ends the KV on a page boundary."""
    longest = max_pages(page_size) * page_size - 1
    named = {"boundary": 2 * page_size - 1, "longest": longest, "page+2": page_size + 2,
             "half": longest // 2}
    return [min(named.get(p, p), longest) for p in round_]

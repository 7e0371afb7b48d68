"""Backend capability declarations: plain, torch-free data.

Each backend package holds ``declaration.py`` with ``DECLARATION = BackendDeclaration(...)``.
The registry discovers them; the solver turns every mismatch into a reason automatically.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

PLATFORM_KINDS = ("cuda", "rocm", "cpu", "mps", "xpu")
KINDS = ("mha", "mla")
PHASES = ("prefill", "decode")
DTYPES = ("fp32", "fp16", "bf16")
KV_CACHE_DTYPES = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")
HALF_DTYPES = ("fp16", "bf16")
# Every spelling of a dtype that attnkit reads (config.json's torch names, what users type),
# lower case, mapped onto the names above (fp64 too: configs name it, nothing computes in it).
# The one name table; its torch side is kvcache/paged.py's TORCH_KV_DTYPES.
DTYPE_SPELLINGS = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "fp64": "fp64", "float64": "fp64", "double": "fp64",
}


# The DSA index-key cache's dtypes (kvcache/index_keys.py: fp8 keys carry a scale per token).
INDEX_DTYPES = ("fp32", "fp16", "bf16", "fp8_e4m3")


def default_index_dtype(kv_dtype: str) -> str:
    """The index-key dtype beside a KV cache of ``kv_dtype`` when none is given (the one rule,
    for the cache and the planner): fp8 e4m3 beside an fp8 cache, else the KV dtype."""
    return "fp8_e4m3" if kv_dtype.startswith("fp8") else kv_dtype


def dtype_spelled(text: str) -> str | None:
    """attnkit's name for a dtype spelling ("bfloat16", "torch.float16", " FP32 "), else None."""
    return DTYPE_SPELLINGS.get(text.strip().lower().removeprefix("torch."))
FEATURES = (
    "sliding_window", "logit_softcap", "sinks", "cross_attention", "non_causal",
    "dual_chunk", "verify", "cuda_graph", "chunked_local", "sparse_topk",
    # the varlen call: packed non-causal sequences without a KV cache (backends/varlen.py)
    "varlen",
    *("batch_invariant", "deterministic"),
)
# Numerics a backend (or one of its options) proves bitwise, not to a tolerance
# (tests/conformance/test_bitwise.py): ``batch_invariant`` — a request's output does not
# depend on the other requests of its step (their number, lengths, order, phase);
# ``deterministic`` — the same step gives the same bits run after run. Requirable with
# ``--require`` (planning/requirements.py); never inferred from a layer.
NUMERICS = ("batch_invariant", "deterministic")

# page_sizes: "any", an explicit tuple of sizes, or MultipleOf(n)
@dataclass(frozen=True)
class MultipleOf:
    n: int

    def to_dict(self) -> dict[str, int]:
        return {"multiple_of": self.n}


PageSizes = Union[str, tuple, MultipleOf]


@dataclass(frozen=True)
class Verified:
    """One run that proved a declaration on real hardware: the backend's GPU tests (conformance
    against the float64 reference) passed on ``device`` (``capability``) on ``date``, as recorded
    in ``record``. A declaration may claim a wider range than it has verified; the planner
    warns when it plans for an architecture no run has covered (planning/verified.py)."""
    platform: str                          # platform kind: cuda, rocm, ...
    capability: tuple[int, int] | None     # compute capability of the device that ran it
    device: str                            # e.g. "NVIDIA H200"
    date: str                              # ISO date of the run
    record: str = ""                       # where the run is written down

    def to_dict(self) -> dict[str, Any]:
        return {"platform": self.platform, "capability": list(self.capability) if self.capability else None,
                "device": self.device, "date": self.date, "record": self.record}


@dataclass(frozen=True)
class Capabilities:
    """What a backend really does. Every field is checked by the conformance suite."""
    platforms: tuple[str, ...]
    kinds: tuple[str, ...]
    head_dims: tuple[int, ...] | str          # q/k head dims (MHA form), or "any"
    dtypes: tuple[str, ...]
    kv_cache_dtypes: tuple[str, ...]
    page_sizes: PageSizes
    phases: tuple[str, ...] = PHASES
    features: frozenset[str] = frozenset()
    requires: tuple[str, ...] = ()             # importable packages, e.g. ("torch", "triton")
    compute_capability: tuple[tuple[int, int], tuple[int, int] | None] | None = None  # (min, max)
    # MLA latent sizes served: ((kv_lora_rank, qk_rope_head_dim), ...) or "any"; None if no MLA.
    mla_dims: tuple[tuple[int, int], ...] | str | None = None
    # MHA value head dims served when they differ from the q/k head dim (v_head_dim != head_dim):
    # a tuple, or "any"; None (the default) = values as wide as queries and keys only.
    v_head_dims: tuple[int, ...] | str | None = None
    # DeepSeek sparse attention (feature sparse_topk; docs/dsa.md), None where not declared:
    # indexer sizes served, ((index_n_heads, index_head_dim), ...) or "any"; top-k values
    # served, a tuple, MultipleOf(n) or "any"; index-key cache dtypes (fp32, fp16, bf16,
    # fp8_e4m3: kvcache/index_keys.py) served.
    sparse_dims: tuple[tuple[int, int], ...] | str | None = None
    sparse_topks: tuple[int, ...] | MultipleOf | str | None = None
    index_dtypes: tuple[str, ...] | None = None
    # Runs on accelerators that proved this declaration (CPU is proven by every test run).
    verified: tuple[Verified, ...] = ()

    def accepts_page_size(self, size: int) -> bool:
        if self.page_sizes == "any":
            return size >= 1
        if isinstance(self.page_sizes, MultipleOf):
            return size >= 1 and size % self.page_sizes.n == 0
        return size in self.page_sizes

    def accepts_head_dim(self, dim: int) -> bool:
        return self.head_dims == "any" or dim in self.head_dims

    def accepts_v_head_dim(self, v_dim: int, head_dim: int) -> bool:
        """MHA only (MLA's value width is part of mla_dims' layout)."""
        if v_dim == head_dim:
            return True
        return self.v_head_dims == "any" or (isinstance(self.v_head_dims, tuple) and v_dim in self.v_head_dims)

    def accepts_sparse(self, sparse) -> list[tuple[str, Any, Any]]:
        """What of a layer's SparseTopK (model/spec.py) this declaration does not serve, as
        (field, served, actual) triples; [] when it serves it (or the layer is not DSA)."""
        if sparse is None:
            return []
        out = []
        dims = (sparse.index_n_heads, sparse.index_head_dim)
        if self.sparse_dims != "any" and dims not in (self.sparse_dims or ()):
            out.append(("sparse_dims", _listed(self.sparse_dims), list(dims)))
        topks = self.sparse_topks
        ok = (topks == "any" or (isinstance(topks, MultipleOf) and sparse.topk % topks.n == 0)
              or (isinstance(topks, tuple) and sparse.topk in topks))
        if not ok:
            out.append(("sparse_topks", topks.to_dict() if isinstance(topks, MultipleOf) else _listed(topks),
                        sparse.topk))
        return out

    def to_dict(self) -> dict[str, Any]:
        cc = None
        if self.compute_capability is not None:
            lo, hi = self.compute_capability
            cc = {"min": list(lo), "max": list(hi) if hi else None}
        pages: Any = self.page_sizes
        if isinstance(pages, MultipleOf):
            pages = pages.to_dict()
        elif pages != "any":
            pages = list(pages)
        return {
            "platforms": list(self.platforms),
            "compute_capability": cc,
            "kinds": list(self.kinds),
            "head_dims": self.head_dims if self.head_dims == "any" else list(self.head_dims),
            "dtypes": list(self.dtypes),
            "kv_cache_dtypes": list(self.kv_cache_dtypes),
            "page_sizes": pages,
            "phases": list(self.phases),
            "features": sorted(self.features),
            "requires": list(self.requires),
            "mla_dims": (self.mla_dims if self.mla_dims in (None, "any")
                         else [list(d) for d in self.mla_dims]),
            "v_head_dims": self.v_head_dims if self.v_head_dims in (None, "any") else list(self.v_head_dims),
            "sparse_dims": _listed(self.sparse_dims),
            "sparse_topks": (self.sparse_topks.to_dict() if isinstance(self.sparse_topks, MultipleOf)
                             else _listed(self.sparse_topks)),
            "index_dtypes": None if self.index_dtypes is None else list(self.index_dtypes),
            "verified": [v.to_dict() for v in self.verified],
        }


def _listed(value: Any) -> Any:
    """A declared tuple (of values or of tuples) as JSON lists; None and "any" as they are."""
    if value in (None, "any"):
        return value
    return [list(v) if isinstance(v, tuple) else v for v in value]


@dataclass(frozen=True)
class BackendDeclaration:
    """A backend as the planner sees it. ``impl`` is "module:Class", imported only to run."""
    name: str
    impl: str
    capabilities: Capabilities
    description: str = ""
    aliases: dict[str, str] = field(default_factory=dict)   # old name -> deprecation note
    explicit_only: bool = False      # never chosen automatically; only when named
    # Optional "module:function" for what data cannot say, called by the planner as
    # check(*, model, platform, phase, settings) -> iterable of messages (str) or
    # (field, required, actual, message) tuples; each becomes an AK110 reason.
    check: str | None = None
    # Optional "module:function" for page sizes that depend on the model, called by the planner
    # as page_sizes_for(model) -> the sizes allowed for it (any iterable), or None for no limit
    # beyond ``capabilities.page_sizes``; every page size the planner picks or suggests obeys it.
    page_sizes_for: str | None = None
    # Optional "module:function" for what data cannot say at run time, called by the backends'
    # shared check layer (backends/envelope.py) once per layer spec and cache page size as
    # runtime_check(spec, *, page_size) -> None, raising an AttnkitError for what it refuses.
    runtime_check: str | None = None
    # The backend's kernel variants (registry/kernels.py), each with an envelope of its own;
    # () for a backend with one kernel per phase. attnkit tune measures each; the plan picks.
    variants: tuple = ()
    # Optional "module:function" (torch-free) giving a variant's launch configuration,
    # launch_config(variant, *, role, shape, dtype, platform) -> dict | None (shape: the
    # model's layer shape a rank, planning.profile.Shape; platform: its geometry, such as
    # shared_memory_kb); the plan prints it, the backend's kernels read the same function.
    launch_config: str | None = None

    def variants_for(self, role: str) -> tuple:
        return tuple(k for k in self.variants if role in k.roles)

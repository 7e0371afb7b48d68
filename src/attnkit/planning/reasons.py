"""Why a backend cannot serve: every constraint of a declaration checked against the input.

Nothing here names a backend. Each failed constraint becomes a ``Reason`` generated from the
declaration's data (``Capabilities``) and the model/platform/settings; a declaration may add a
``check`` function for what data cannot say. ALL failures of a backend are listed.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from attnkit.errors import _jsonable
from attnkit.model.spec import ModelAttention
from attnkit.model.summary import layer_ranges
from attnkit.registry.capabilities import BackendDeclaration, MultipleOf, default_index_dtype
from attnkit.registry.discovery import load_hook


VARLEN_WHY = (" (the varlen call: packed non-causal sequences without a KV cache, which a component "
              "that keeps no cache runs for every layer)")


@dataclass(frozen=True)
class Reason:
    """One failed constraint: ``backend`` needs ``required`` for ``field`` but got ``actual``."""
    code: str
    backend: str
    field: str
    required: Any
    actual: Any
    message: str
    layers: tuple[int, ...] = ()
    phases: tuple[str, ...] = ()

    def key(self) -> tuple:
        """Identity of the cause regardless of backend and phase (used to find shared causes)."""
        return (self.code, self.field, _hashable(self.actual), self.layers)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "backend": self.backend, "field": self.field,
                "required": _jsonable(self.required), "actual": _jsonable(self.actual),
                "message": self.message, "layers": list(self.layers), "phases": list(self.phases)}


@dataclass(frozen=True)
class ModelNeeds:
    """What the whole model asks of attention, grouped so each check is one dict lookup."""
    kind: str
    head_dims: dict[int, tuple[int, ...]]              # head dim -> layer ids
    features: dict[str, tuple[int, ...]]               # feature -> layer ids
    mla_dims: dict[tuple[int, int], tuple[int, ...]]   # (kv_lora_rank, rope) -> layer ids
    # MHA (head_dim, v_head_dim) -> layer ids, for layers whose values are not as wide as q/k
    v_head_dims: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)


def model_needs(model: ModelAttention, *, dual_chunk: bool = True) -> ModelNeeds:
    """Group the layers' needs; ``dual_chunk=False`` drops that feature (``--dual-chunk off``).
    A component without a KV cache whose layers the varlen call computes (``varlen_only``: a
    DiT, a vision tower) needs that call, ``varlen``, for every layer, self- and cross-attention
    alike, instead of the paged path's ``non_causal`` / ``cross_attention``."""
    head_dims: dict[int, list[int]] = {}
    features: dict[str, list[int]] = {}
    mla: dict[tuple[int, int], list[int]] = {}
    v_dims: dict[tuple[int, int], list[int]] = {}
    varlen = model.varlen_only       # every layer is the varlen call: that is what it needs
    for layer in model.layers:
        head_dims.setdefault(layer.head_dim, []).append(layer.layer_id)
        if layer.kind == "mha" and layer.value_dim != layer.head_dim:
            v_dims.setdefault((layer.head_dim, layer.value_dim), []).append(layer.layer_id)
        for feat in ("varlen",) if varlen else layer.features():
            if feat != "dual_chunk" or dual_chunk:
                features.setdefault(feat, []).append(layer.layer_id)
        if layer.mla is not None:
            mla.setdefault((layer.mla.kv_lora_rank, layer.mla.qk_rope_head_dim), []).append(layer.layer_id)
    freeze = lambda d: {k: tuple(v) for k, v in d.items()}  # noqa: E731
    return ModelNeeds(model.kind, freeze(head_dims), freeze(features), freeze(mla), freeze(v_dims))


def check_backend(decl: BackendDeclaration, *, model: ModelAttention, needs: ModelNeeds, platform,
                  phase: str, settings: Mapping[str, Any]) -> list[Reason]:
    """Every constraint ``decl`` fails for ``phase``; empty means it serves every layer.

    ``settings``: dtype, kv_cache_dtype, page_size (None = not fixed yet), speculative_tokens,
    cuda_graph. ``platform`` has kind, name, capability, packages.
    """
    caps, name = decl.capabilities, decl.name
    out = platform_reasons(decl, platform, phase=phase)

    def add(code, field, required, actual, message, layers=()):
        out.append(Reason(code, name, field, required, actual, message, tuple(layers), (phase,)))

    if needs.kind not in caps.kinds:
        add("AK101", "kind", list(caps.kinds), needs.kind,
            f"serves {_words(k.upper() for k in caps.kinds)} attention; {model.name} uses {needs.kind.upper()}")
    elif needs.kind == "mla" and caps.mla_dims not in ("any", None):
        for dims, layers in needs.mla_dims.items():
            if dims not in caps.mla_dims:
                add("AK101", "mla_dims", [list(d) for d in caps.mla_dims], list(dims),
                    f"serves MLA latent sizes (kv_lora_rank, rope) {_words(caps.mla_dims)}, not {dims} "
                    f"(layers {layer_ranges(layers)})", layers)
    for dim, layers in needs.head_dims.items():
        if not caps.accepts_head_dim(dim):
            add("AK102", "head_dim", caps.head_dims, dim,
                f"supports head dims {_words(caps.head_dims)}, not {dim} (layers {layer_ranges(layers)})", layers)
    for (dim, v_dim), layers in needs.v_head_dims.items():
        if not caps.accepts_v_head_dim(v_dim, dim):
            served = "equal to the q/k head dim" if caps.v_head_dims is None else _words(caps.v_head_dims)
            add("AK102", "v_head_dim", caps.v_head_dims, v_dim,
                f"supports value head dims {served}, not {v_dim} with q/k head dim {dim} "
                f"(layers {layer_ranges(layers)})", layers)
    if phase not in caps.phases:
        add("AK104", "phase", list(caps.phases), phase, f"does not implement the {phase} phase")
    dtype, kv_dtype, page = settings.get("dtype"), settings.get("kv_cache_dtype"), settings.get("page_size")
    if dtype is not None and dtype not in caps.dtypes:
        add("AK105", "dtype", list(caps.dtypes), dtype, f"computes in {_words(caps.dtypes)}, not {dtype}")
    cached = not model.varlen_only      # the varlen call keeps no KV cache: no cache dtype, no pages
    if cached and kv_dtype is not None and kv_dtype not in caps.kv_cache_dtypes:
        add("AK106", "kv_cache_dtype", list(caps.kv_cache_dtypes), kv_dtype,
            f"stores the KV cache as {_words(caps.kv_cache_dtypes)}, not {kv_dtype}")
    if cached and page is not None and not caps.accepts_page_size(page):
        add("AK107", "page_size", page_sizes_text(caps.page_sizes), page,
            f"accepts page sizes {page_sizes_text(caps.page_sizes)}, not {page}")
    for feat, layers in sorted(needs.features.items()):
        if feat not in caps.features:
            add("AK103", "features", sorted(caps.features), feat,     # what it serves / what the model needs
                f"does not support {feat}{VARLEN_WHY if feat == 'varlen' else ''}, needed by layers "
                f"{layer_ranges(layers)}", layers)
    if "sparse_topk" in needs.features and "sparse_topk" in caps.features:
        for field_, served, actual, message, layers in sparse_reasons(caps, model, dtype, kv_dtype):
            add("AK111", field_, served, actual, message, layers)
    # VERIFY steps run on the backend of prefill-like steps (HybridBackend), and a backend that
    # serves both phases runs them too: both phases must verify
    if settings.get("speculative_tokens", 0) > 0 and "verify" not in caps.features:
        add("AK108", "speculative_tokens", "verify", settings["speculative_tokens"],
            "cannot verify speculative draft tokens (no 'verify' feature)")
    if phase == "decode" and settings.get("cuda_graph") and "cuda_graph" not in caps.features:
        add("AK109", "cuda_graph", "cuda_graph", True, "cannot be captured in a CUDA graph")
    if decl.check:
        for item in load_hook(decl.check)(model=model, platform=platform, phase=phase, settings=settings) or ():
            field, required, actual, message = (("check", None, None, item) if isinstance(item, str) else item)
            add("AK110", field, required, actual, message)
    return out


def index_dtype(dtype: str | None, kv_dtype: str | None) -> str | None:
    """The DSA index-key cache's dtype a plan runs: the cache's default beside its KV dtype."""
    kv = kv_dtype or dtype
    return None if kv is None else default_index_dtype(kv)


def sparse_reasons(caps, model: ModelAttention, dtype, kv_dtype) -> list[tuple]:
    """What of the model's DSA layers ``caps`` (declaring sparse_topk) does not serve: indexer
    sizes, top-k (Capabilities.accepts_sparse) and the index dtype, as (field, served, actual,
    message, layers)."""
    by_config: dict = {}
    for layer in model.layers:
        if layer.sparse_topk is not None:
            by_config.setdefault(layer.sparse_topk, []).append(layer.layer_id)
    out = []
    for sparse, layers in by_config.items():
        for field_, served, actual in caps.accepts_sparse(sparse):
            what = "indexer sizes (heads, head dim)" if field_ == "sparse_dims" else "top-k"
            out.append((field_, served, actual, f"serves DSA {what} {served}, not {actual} "
                                                f"(layers {layer_ranges(layers)})", tuple(layers)))
    index = index_dtype(dtype, kv_dtype)
    if index is not None and index not in (caps.index_dtypes or ()):
        every = tuple(lid for ids in by_config.values() for lid in ids)
        out.append(("index_dtype", list(caps.index_dtypes or ()), index,
                    f"reads DSA index keys as {_words(caps.index_dtypes or ('nothing',))}, not {index} "
                    f"(the KV-cache dtype {kv_dtype or dtype} stores them so)", every))
    return out


def platform_reasons(decl: BackendDeclaration, platform, *, phase: str | None = None) -> list[Reason]:
    """Installed (required packages) and usable here (platform kind, compute capability)."""
    caps, name = decl.capabilities, decl.name
    out: list[Reason] = []

    def add(code, field, required, actual, message):
        out.append(Reason(code, name, field, required, actual, message, (), (phase,) if phase else ()))

    if platform.kind not in caps.platforms:
        add("AK210", "platform", list(caps.platforms), platform.kind,
            f"runs on {_words(caps.platforms)}, not on {platform.kind} ({platform.name})")
    if caps.compute_capability is not None and platform.capability is not None and platform.kind == "cuda":
        lo, hi = caps.compute_capability
        cc = tuple(platform.capability)
        if cc < tuple(lo) or (hi is not None and cc > tuple(hi)):
            span = f"sm{lo[0]}{lo[1]}" + (f"-sm{hi[0]}{hi[1]}" if hi else "+")
            add("AK211", "compute_capability", span, f"sm{cc[0]}{cc[1]}",
                f"needs compute capability {span}; {platform.name} is sm{cc[0]}{cc[1]}")
    for pkg in caps.requires:   # one reason per package, so "torch missing" is shared by all
        if pkg not in (platform.packages or {}):
            preset = getattr(platform, "preset", None)
            add("AK212", "requires", list(caps.requires), pkg,
                f"needs package {pkg}, which the {preset} preset does not assume" if preset else
                f"needs package {pkg}, not installed on {platform.name}")
    return out


def page_sizes_text(pages) -> str:
    if pages == "any":
        return "any"
    if isinstance(pages, MultipleOf):
        return f"multiples of {pages.n}"
    return _words(pages)


def _words(items) -> str:
    if items == "any":
        return "any"
    return ", ".join(str(tuple(i)) if isinstance(i, (list, tuple)) else str(i) for i in items) or "none"


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def merge(reasons: list[Reason]) -> list[Reason]:
    """One reason per cause, with the phases it applies to."""
    out: dict[tuple, Reason] = {}
    for r in reasons:
        key = (r.backend,) + r.key()
        if key in out:
            phases = tuple(dict.fromkeys(out[key].phases + r.phases))
            out[key] = dataclasses.replace(out[key], phases=phases)
        else:
            out[key] = r
    return list(out.values())

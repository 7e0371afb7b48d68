"""The backends' declared envelope as runtime checks: one layer for every backend, derived from
its declaration (``Capabilities``, registry/capabilities.py), with one code per concept.

A backend states what it serves once, in ``backends/<name>/declaration.py``, and names it on
its class (``AttentionBackend.declaration``); ``AttentionBackend`` (base.py) calls
  ``check_step(backend, meta, cache)``  once per step, in ``prepare``: the step's phase, and the
      cache's page size, KV dtype and device;
  ``check_layer(backend, layer, cache)``  in ``forward``: the layer's kind, features and head
      dims, once per declaration, layer spec (the object) and page size (a dict lookup after);
  ``check_tensors(backend, layer, q)``  in ``forward``: q's dtype, the tensors the layer needs.
What the data cannot say is the declaration's ``runtime_check`` hook, called inside the
memoised check. The codes, one per concept:
  AK420 step not served (phase, verify)    AK440 layer kind or feature not served
  AK444 dtype not served (compute, KV or DSA index keys)
  AK445 head dim not served (MHA, value or MLA sizes; DSA indexer sizes and top-k)
  AK446 page size not served               AK447 device not served
  AK443 layer tensor missing
A backend without a declaration (``declaration = None``: test doubles) is checked for shapes
only (validation.py).
"""
from __future__ import annotations

import functools
import os

import torch

from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.backends.step import Passed, RuntimeLayer
from attnkit.errors import fail
from attnkit.kvcache.paged import dtype_name
from attnkit.registry.capabilities import Capabilities

def interpreting() -> bool:
    """Whether Triton kernels run through the Triton interpreter (CPU tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# ---- once per step ------------------------------------------------------------------------
def check_step(backend, meta: BatchMetadata, cache) -> None:
    """The step's phase and the cache's layout against ``backend``'s declaration."""
    decl = backend.declaration
    if decl is None:
        return
    caps = decl.capabilities
    needs = {ForwardMode.DECODE: "decode", ForwardMode.IDLE: None}.get(meta.mode, "prefill")
    if needs is not None and needs not in caps.phases:
        fail("AK420", f"backend {decl.name!r} does not serve the {needs} phase "
                      f"({meta.mode.name} step); it declares {', '.join(caps.phases)}",
             field="meta.mode", expected=list(caps.phases), actual=needs)
    if meta.mode is ForwardMode.VERIFY and "verify" not in caps.features:
        fail("AK420", f"backend {decl.name!r} does not serve VERIFY steps (no 'verify' feature)",
             field="meta.mode", expected="a backend declaring verify", actual=meta.mode.name)
    check_cache(backend, cache)


def check_cache(backend, cache, *, role: str | None = None) -> None:
    """The cache's page size, KV dtype and device against ``backend``'s declaration (also
    for the inner backends of a hybrid that are idle this step: they share the cache)."""
    decl = backend.declaration
    if decl is None:
        return
    caps = decl.capabilities
    who = f"{role} backend {decl.name!r}" if role else f"backend {decl.name!r}"
    if not caps.accepts_page_size(cache.page_size):
        fail("AK446", f"{who} does not serve page size {cache.page_size}; it accepts "
                      f"{caps.to_dict()['page_sizes']}", field="page_size",
             expected=caps.to_dict()["page_sizes"], actual=cache.page_size)
    kv = dtype_name(cache.dtype) or str(cache.dtype)
    if kv not in caps.kv_cache_dtypes:
        fail("AK444", f"{who} does not serve a {kv} KV cache; it stores "
                      f"{', '.join(caps.kv_cache_dtypes)}", field="kv_cache_dtype",
             expected=list(caps.kv_cache_dtypes), actual=kv)
    index = dtype_name(cache.index_dtype) if getattr(cache, "index_k", None) else None
    if index is not None and "sparse_topk" in caps.features and index not in (caps.index_dtypes or ()):
        fail("AK444", f"{who} does not serve a {index} indexer-key cache (DSA layers); it reads "
                      f"{', '.join(caps.index_dtypes or ()) or 'none'}", field="index_dtype",
             expected=list(caps.index_dtypes or ()), actual=index)
    _check_device(decl.name, caps, cache.device, who)


def _device_problem(caps: Capabilities, device: torch.device) -> tuple | None:
    """(what, expected, actual) if ``caps`` does not run on ``device``."""
    kind = device.type
    if kind == "cuda" and torch.version.hip is not None:
        kind = "rocm"
    if kind == "cpu" and "cpu" not in caps.platforms and "triton" in caps.requires and interpreting():
        return None                 # Triton kernels on CPU tensors through the interpreter
    if kind not in caps.platforms:
        return kind, list(caps.platforms), str(device)
    if kind == "cuda" and caps.compute_capability is not None:
        lo, hi = caps.compute_capability
        cc = _capability(device)
        if cc < tuple(lo) or (hi is not None and cc > tuple(hi)):
            span = f"sm{lo[0]}{lo[1]}" + (f"-sm{hi[0]}{hi[1]}" if hi else "+")
            return f"sm{cc[0]}{cc[1]}", span, f"{device} (sm{cc[0]}{cc[1]})"
    return None


@functools.lru_cache(maxsize=16)
def _capability(device: torch.device) -> tuple[int, int]:
    """A CUDA device's compute capability, asked of the driver once."""
    return tuple(torch.cuda.get_device_capability(device))


def _check_device(name: str, caps: Capabilities, device: torch.device, who: str) -> None:
    problem = _device_problem(caps, torch.device(device))
    if problem is not None:
        what, expected, actual = problem
        hint = (" (on a CPU, Triton kernels run only through the interpreter, TRITON_INTERPRET=1)"
                if "triton" in caps.requires else "")
        fail("AK447", f"{who} runs on {expected}, not on {actual}{hint}", field="device",
             expected=expected, actual=actual)


# ---- per layer ----------------------------------------------------------------------------
def check_layer(backend, layer: RuntimeLayer, cache) -> None:
    """The layer against ``backend``'s declaration: kind, features, head dims and the
    declaration's ``runtime_check``, once per declaration, layer spec (the object) and page size
    (a dict lookup after that)."""
    decl, spec = backend.declaration, layer.spec
    if decl is not None:
        key = (id(decl), id(spec), cache.page_size)
        if not _LAYERS_PASSED.has(key, decl, spec):
            _served(decl, spec, cache.page_size)
            _LAYERS_PASSED.add(key, decl, spec)


def check_tensors(backend, layer: RuntimeLayer, q) -> None:
    """q's dtype against the declaration (AK444), then the tensors the layer needs (AK443)."""
    decl = backend.declaration
    if decl is not None:
        dt = dtype_name(q.dtype) or str(q.dtype)
        if dt not in decl.capabilities.dtypes:
            fail("AK444", f"backend {decl.name!r} does not compute in {dt} (layer "
                          f"{layer.layer_id}); it computes in {', '.join(decl.capabilities.dtypes)}",
                 field="q.dtype", expected=list(decl.capabilities.dtypes), actual=dt)
    required_tensors(layer)


_LAYERS_PASSED = Passed()       # (declaration, spec, page size) that passed _served


def _served(decl, spec, page_size: int) -> None:
    """Returns only if ``decl`` serves ``spec`` at ``page_size``."""
    caps, name = decl.capabilities, decl.name
    if spec.kind not in caps.kinds or not spec.features() <= caps.features:
        _not_served(name, spec, caps)
    if decl.runtime_check:
        from attnkit.registry.discovery import load_hook

        load_hook(decl.runtime_check)(spec, page_size=page_size)
    _check_dims(name, caps, spec)


def check_varlen(backend, layer: RuntimeLayer, q) -> None:
    """The dense varlen call (backends/varlen.py checks its shapes and the layer's form):
    q's device, dtype and the layer's head dims against ``backend``'s declaration."""
    decl = backend.declaration
    if decl is not None:
        caps = decl.capabilities
        _check_device(decl.name, caps, q.device, f"backend {decl.name!r}")
        _check_dims(decl.name, caps, layer.spec)
        check_tensors(backend, layer, q)


def _check_dims(name: str, caps: Capabilities, spec) -> None:
    """AK445 for a head dim, value width, MLA latent size or DSA indexer size / top-k
    ``caps`` does not serve."""
    lid = spec.layer_id
    dims = []
    if not caps.accepts_head_dim(spec.head_dim):
        dims.append(("head_dim", caps.head_dims, spec.head_dim))
    if spec.kind == "mha" and not caps.accepts_v_head_dim(spec.value_dim, spec.head_dim):
        dims.append(("v_head_dim", caps.v_head_dims or "equal to head_dim", spec.value_dim))
    if spec.kind == "mla" and caps.mla_dims not in ("any", None):
        latent = (spec.mla.kv_lora_rank, spec.mla.qk_rope_head_dim)
        if latent not in caps.mla_dims:
            dims.append(("mla_dims", [list(d) for d in caps.mla_dims], list(latent)))
    if "sparse_topk" in caps.features:
        dims += caps.accepts_sparse(spec.sparse_topk)        # DSA: indexer sizes and top-k
    if dims:
        field, expected, actual = dims[0]
        fail("AK445", f"backend {name!r} does not serve layer {lid}'s {field} {actual} "
                      f"(it serves {expected})", field=f"layer.spec.{field}", expected=expected,
             actual=actual, details={"all": [{"field": f, "expected": e, "actual": a}
                                             for f, e, a in dims]})


def _not_served(name: str, spec, caps: Capabilities) -> None:
    """AK440 naming what is missing and the registered backends that serve the layer (the
    registry is read only to word the refusal)."""
    from attnkit.registry import declarations

    needs = spec.features()
    others = sorted(n for n, d in declarations().items()
                    if spec.kind in d.capabilities.kinds and needs <= d.capabilities.features)
    missing = sorted(needs - caps.features)
    what = (f"{spec.kind.upper()} layers" if spec.kind not in caps.kinds else ", ".join(missing))
    fail("AK440", f"backend {name!r} does not serve {what} (layer {spec.layer_id}); backends that "
                  f"do: {', '.join(others) or 'none'}",
         field="layer.kind" if spec.kind not in caps.kinds else "layer.features",
         expected=list(caps.kinds) if spec.kind not in caps.kinds else sorted(caps.features),
         actual=spec.kind if spec.kind not in caps.kinds else missing,
         details={"backends": others})


def required_tensors(layer: RuntimeLayer) -> None:
    """Raise AK443 if the spec needs a per-layer tensor the layer lacks (validation checks
    the shapes of those that are set)."""
    spec = layer.spec
    needed = (["w_kc", "w_vc"] if spec.kind == "mla" else []) + (["sinks"] if spec.sinks else [])
    missing = [name for name in needed if getattr(layer, name) is None]
    if missing:
        fail("AK443", f"layer {spec.layer_id} ({spec.kind.upper()}{', sinks' if spec.sinks else ''}) "
                      f"needs {', '.join(missing)}, which the RuntimeLayer does not carry",
             field=f"layer.{missing[0]}", expected="a tensor", actual=None,
             details={"missing": missing})

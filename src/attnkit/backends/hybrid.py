"""A hybrid backend: one backend for prefill-like steps, another for decode, one cache.

    backend = HybridBackend(prefill=load_backend("sdpa"), decode=load_backend("triton"))
    step = backend.prepare(meta, cache)        # routes by meta.mode, prepares that backend once
    out = backend.forward(q, k, v, layer, cache, step)

EXTEND, MIXED and VERIFY go to ``prefill``; DECODE and IDLE to ``decode``. Both must accept
the shared cache's page size and KV dtype (checked from their declarations, AK420).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnkit.backends.base import AttentionBackend, RuntimeLayer, StepState
from attnkit.backends.metadata import BatchMetadata
from attnkit.errors import fail
from attnkit.kvcache.paged import TORCH_KV_DTYPES

_KV_NAMES = {dtype: name for name, dtype in TORCH_KV_DTYPES.items()}


@dataclass(slots=True)
class HybridStep:
    """Which inner backend serves this step, and the state its ``prepare`` built."""
    backend: AttentionBackend
    state: StepState


class HybridBackend(AttentionBackend):
    """Routes each step to ``prefill`` or ``decode`` by its forward mode."""

    name = "hybrid"
    validate_inputs = False          # the inner backend validates what it is handed

    def __init__(self, prefill: AttentionBackend, decode: AttentionBackend):
        self.prefill = prefill
        self.decode = decode

    def route(self, meta: BatchMetadata) -> AttentionBackend:
        return self.prefill if meta.mode.is_prefill_like else self.decode

    def _prepare(self, meta: BatchMetadata, cache) -> StepState:
        for role, backend in (("prefill", self.prefill), ("decode", self.decode)):
            _check_shared_cache(role, backend, cache)
        inner = self.route(meta)
        return StepState(meta=meta, prepared=HybridStep(inner, inner.prepare(meta, cache)))

    def capture_plan(self, meta: BatchMetadata, cache, *, max_seq_len: int) -> StepState:
        """Static steps are DECODE steps: the decode backend's static plan."""
        for role, backend in (("prefill", self.prefill), ("decode", self.decode)):
            _check_shared_cache(role, backend, cache)
        inner = self.decode.prepare_static(meta, cache, max_seq_len=max_seq_len)
        return StepState(meta=meta, prepared=HybridStep(self.decode, inner))

    def refill_static(self, step: StepState) -> None:
        plan = step.prepared
        plan.backend.refill_static(plan.state)

    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState):
        """q: [T, H_q, D]; k/v as for any backend. Returns [T, H_q * D_v]."""
        plan: Any = step.prepared
        if not isinstance(plan, HybridStep):
            fail("AK406", "HybridBackend.forward needs the StepState built by HybridBackend.prepare",
                 field="step.prepared", expected="HybridStep", actual=type(plan).__name__)
        return plan.backend.forward(q, k, v, layer, cache, plan.state)


def _check_shared_cache(role: str, backend: AttentionBackend, cache) -> None:
    """The shared cache's layout must suit both halves, even the one idle this step."""
    from attnkit.registry import declarations

    decl = declarations().get(backend.name)
    if decl is None:
        return                       # an unregistered backend (tests) declares nothing
    caps = decl.capabilities
    kv = _KV_NAMES.get(cache.dtype, str(cache.dtype))
    for field, ok, allowed, actual in (
            ("page_size", caps.accepts_page_size(cache.page_size), caps.to_dict()["page_sizes"], cache.page_size),
            ("kv_cache_dtype", kv in caps.kv_cache_dtypes, list(caps.kv_cache_dtypes), kv)):
        if not ok:
            fail("AK420", f"hybrid {role} backend {backend.name!r} does not accept the shared "
                          f"cache's {field} {actual!r} (it accepts {allowed})",
                 field=field, expected=allowed, actual=actual)

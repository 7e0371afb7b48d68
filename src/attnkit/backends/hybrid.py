"""A hybrid backend: one backend for prefill-like steps, another for decode, one cache.

    backend = HybridBackend(prefill=load_backend("sdpa"), decode=load_backend("triton"),
                            extend=load_backend("triton"))
    step = backend.prepare(meta, cache)        # routes by the step, prepares that backend once
    out = backend.forward(q, k, v, layer, cache, step)

DECODE and IDLE go to ``decode``. Without ``extend``, EXTEND, MIXED and VERIFY go to
``prefill``. With it, ``prefill`` serves only fresh prefills (EXTEND steps where no request has
a cached prefix) and ``extend`` every other prefill-like step: EXTEND over a cached prefix
(chunked-prefill continuations, prefix-cache hits), MIXED and VERIFY. All of them must accept
the shared cache's page size, KV dtype and device (checked from their declarations by
backends/envelope.py: AK446, AK444, AK447).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnkit.backends.base import AttentionBackend, RuntimeLayer, StepState
from attnkit.backends.envelope import check_cache
from attnkit.backends.metadata import BatchMetadata, ForwardMode
from attnkit.errors import fail


@dataclass(slots=True)
class HybridStep:
    """Which inner backend serves this step, and the state its ``prepare`` built."""
    backend: AttentionBackend
    state: StepState


class HybridBackend(AttentionBackend):
    """Routes each step to ``prefill``, ``extend`` or ``decode`` (see the module docstring)."""

    name = "hybrid"
    validate_inputs = False          # the inner backend validates what it is handed

    def __init__(self, prefill: AttentionBackend, decode: AttentionBackend,
                 extend: AttentionBackend | None = None):
        for role, backend in (("prefill", prefill), ("decode", decode), ("extend", extend)):
            if not isinstance(backend, AttentionBackend) and not (role == "extend" and backend is None):
                fail("AK407", f"HybridBackend: {role} must be an AttentionBackend"
                              f"{' or None' if role == 'extend' else ''} (load_backend(name)), got "
                              f"{type(backend).__name__}", field=role, expected="AttentionBackend",
                     actual=repr(backend)[:80])
        self.prefill = prefill
        self.decode = decode
        self.extend = extend         # None: prefill serves steps over a cached prefix too

    def route(self, meta: BatchMetadata) -> AttentionBackend:
        if not meta.mode.is_prefill_like:
            return self.decode
        if self.extend is None or (meta.mode is ForwardMode.EXTEND and not any(meta.prefix_lens_cpu)):
            return self.prefill
        return self.extend

    def _roles(self) -> tuple[tuple[str, AttentionBackend], ...]:
        return (("prefill", self.prefill), ("decode", self.decode)) + (
            (("extend", self.extend),) if self.extend is not None else ())

    def _prepare(self, meta: BatchMetadata, cache) -> StepState:
        for role, backend in self._roles():
            check_cache(backend, cache, role=f"hybrid {role}")     # idle ones share it too
        inner = self.route(meta)
        return StepState(meta=meta, prepared=HybridStep(inner, inner.prepare(meta, cache)))

    def capture_plan(self, meta: BatchMetadata, cache, *, max_seq_len: int) -> StepState:
        """Static steps are DECODE steps: the decode backend's static plan."""
        for role, backend in self._roles():
            check_cache(backend, cache, role=f"hybrid {role}")     # idle ones share it too
        inner = self.decode.prepare_static(meta, cache, max_seq_len=max_seq_len)
        return StepState(meta=meta, prepared=HybridStep(self.decode, inner))

    def static_reaches(self, batch: int, max_seq_len: int) -> tuple[int, ...]:
        return self.decode.static_reaches(batch, max_seq_len)

    def refill_static(self, step: StepState) -> None:
        plan = step.prepared
        plan.backend.refill_static(plan.state)

    def _forward(self, q, k, v, layer: RuntimeLayer, cache, step: StepState, *, indexer=None):
        """q: [T, H_q, D]; k/v (and a DSA layer's indexer inputs) as for any backend.
        Returns [T, H_q * D_v]."""
        plan: Any = step.prepared
        if not isinstance(plan, HybridStep):
            fail("AK406", "HybridBackend.forward needs the StepState built by HybridBackend.prepare",
                 field="step.prepared", expected="HybridStep", actual=type(plan).__name__)
        return plan.backend.forward(q, k, v, layer, cache, plan.state, indexer=indexer)

"""The backend interface every attention implementation plugs into.

Per step: ``step = backend.prepare(meta, cache)`` once; then per layer
``out = backend.forward(q, k, v, layer, cache, step)``, which writes the new K/V into the
cache through ``meta.slot_mapping`` and returns ``[T, H_q * D_v]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from attnkit.backends.metadata import BatchMetadata
from attnkit.model.spec import LayerAttention


@dataclass(slots=True)
class AttentionLayer:
    """One layer at run time: its spec plus per-layer tensors.

    sinks: [H_q] float32 | None       learned per-head sink logits (gpt-oss)
    w_kc:  [H_q, qk_nope, L] | None   MLA key up-projection (latent -> per-head nope key)
    w_vc:  [H_q, L, v_head_dim] | None  MLA value up-projection (latent -> per-head value)
    Head counts here are per rank (after tensor-parallel split).
    """
    spec: LayerAttention
    sinks: Any = None
    w_kc: Any = None
    w_vc: Any = None
    extra: dict = field(default_factory=dict)

    @property
    def layer_id(self) -> int:
        return self.spec.layer_id


@dataclass(slots=True)
class StepState:
    """What ``prepare`` returns: the shared batch metadata plus a backend's own plan."""
    meta: BatchMetadata
    plan: Any = None


class AttentionBackend:
    """Base class. Subclasses set ``name`` and implement ``forward``; ``prepare`` may add
    backend-specific per-step state (split counts, index tensors) in ``StepState.plan``."""

    name: ClassVar[str] = "base"

    def prepare(self, meta: BatchMetadata, cache) -> StepState:
        return StepState(meta=meta)

    def forward(self, q, k, v, layer: AttentionLayer, cache, step: StepState):
        """q: [T, H_q, D]; k: [T, H_kv, D] (MLA: latent [T, L + R]); v: [T, H_kv, D_v] (MLA:
        None). Writes k/v into ``cache`` for ``layer`` and returns [T, H_q * D_v]."""
        raise NotImplementedError

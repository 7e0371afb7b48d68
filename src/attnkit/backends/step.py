"""What a backend is handed per layer and returns per step, torch-free: ``RuntimeLayer`` (one
layer's spec and tensors) and ``StepState`` (what ``prepare`` built for the whole step).

Apart from base.py so that the checks (validation.py, envelope.py) and the static-step module
can name them without importing the API that calls those checks (no import cycle).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnkit.backends.metadata import BatchMetadata
from attnkit.model.spec import LayerAttention


@dataclass(slots=True)
class RuntimeLayer:
    """One layer as a backend sees it at run time: its spec (``LayerAttention``, the model
    side) plus per-layer tensors.

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
    """What ``prepare`` returns: the shared batch metadata plus what the backend's
    ``_prepare`` built from it for every layer (``prepared``: index tensors, split counts).

    ``validated`` is True when ``AttentionBackend.prepare`` made it (after checking ``meta``
    against the cache); ``made_for`` then records for which backend class and cache layout
    (page size, pages, device). A StepState made by hand, by another backend, or handed to
    ``forward`` with a cache of another layout is checked against that cache and prepared
    again by the backend on every call (slow, but never an out-of-range page or a foreign plan)."""
    meta: BatchMetadata
    prepared: Any = None
    validated: bool = False
    made_for: Any = field(default=None, repr=False, compare=False)


class Passed:
    """What passed a check, by identity: ``has(key, *objs)`` after ``add(key, *objs)`` while
    ``objs`` are the same objects. Keys hold their ``id``; equality would not do (a spec with
    ``attention_chunk=True`` equals one with 1, and ``64.0`` equals ``64``). Bounded: cleared
    when full (then things are checked again)."""

    def __init__(self, limit: int = 4096):
        self._seen: dict[tuple, Any] = {}
        self._limit = limit

    def has(self, key: tuple, *objs: Any) -> bool:
        seen = self._seen.get(key)
        return seen is not None and all(a is b for a, b in zip(seen, objs))

    def add(self, key: tuple, *objs: Any) -> None:
        if len(self._seen) >= self._limit:
            self._seen.clear()
        self._seen[key] = objs

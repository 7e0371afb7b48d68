"""The per-step object: built once per step by the model and passed to every layer.

    ctx = StepContext.build(model.rotary, backend, cache, step)
    h = block(h, ctx)                      # every block, every layer of it, reads the same ctx

It holds what is the same for every layer of a step: the attention backend, the KV cache
and the backend's StepState (its metadata and plan), the RoPE table at the step's positions,
the dual chunk tables (built by the first layer that needs them) and whether the step is a
captured one (``static``: no host round trip anywhere, e.g. in MoE dispatch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from attnkit.backends.base import AttentionBackend, RuntimeLayer, StepState
from attnkit.model.spec import LayerAttention
from attnkit.runner.layers.rotary import (DualChunkRotary, RopeTable, Rotary, decode_length_scales,
                                          step_length_scales)


@dataclass(slots=True)
class StepContext:
    """backend / cache / step: the attention of this step (``step.meta`` its BatchMetadata);
    rope: RopeTable [T, 1, rotary_dim] at the step's positions (attention factor in);
    dca_lengths: per request, the L of the dual chunk length scale (None: KV length after the
    step); dca: (DualChunkRotary, rotary width) -> (tables, length scale [T]), built on first
    use; static: a captured (static) decode step; halves: ``rope`` in neox halves, on first use."""
    backend: AttentionBackend
    cache: Any
    step: StepState
    rope: RopeTable
    dca_lengths: list[int] | None = None
    static: bool = False
    dca: dict = field(default_factory=dict)
    halves: RopeTable | None = None

    @classmethod
    def build(cls, rotary: Rotary, backend: AttentionBackend, cache, step: StepState, *,
              dca_lengths: list[int] | None = None, static: bool = False) -> "StepContext":
        return cls(backend, cache, step, rotary.table(step.meta.positions), dca_lengths, static)

    @property
    def meta(self):
        return self.step.meta

    @property
    def num_tokens(self) -> int:
        return self.rope.cos.shape[0]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None,
               layer: RuntimeLayer, *, indexer=None) -> torch.Tensor:
        """The backend's forward for ``layer`` this step: [T, H_q * D_v]. indexer: a DSA
        layer's IndexerInputs (docs/dsa.md)."""
        if indexer is None:
            return self.backend.forward(q, k, v, layer, self.cache, self.step)
        return self.backend.forward(q, k, v, layer, self.cache, self.step, indexer=indexer)

    def rope_halves(self) -> RopeTable:
        """The step's RoPE table in neox halves (DeepSeek-V3.2's indexer), built on first use."""
        if self.halves is None:
            self.halves = self.rope.in_halves()
        return self.halves

    def dual_chunk(self, dca: DualChunkRotary, spec: LayerAttention, rotary_dim: int):
        """(tables, length scale [T]) of ``dca`` for this step, built on first use. A static
        step computes the scales on the device (its lengths change every replay)."""
        key = (dca, rotary_dim)
        if key not in self.dca:
            meta = self.meta
            scales = (decode_length_scales(meta, spec.dual_chunk) if self.static else
                      step_length_scales(meta, spec.dual_chunk, lengths=self.dca_lengths))
            self.dca[key] = (dca.tables(meta.positions, rotary_dim=rotary_dim), scales)
        return self.dca[key]

"""The attention half of an MHA/GQA/MQA block (MLA: runner/mla.py): projections, rotary, and
the attnkit backend in the middle.

    q, k, v = q_proj(x), k_proj(x), v_proj(x)        (biases if the checkpoint has them)
    q, k = q_norm(q), k_norm(k)                       (Qwen3: per-head RMSNorm)
    q, k = rotary(q), rotary(k)                       (DCA: queries three ways, see rotary.py)
    out = o_proj(backend.forward(q, k, v, layer, cache, step))

Both attention kinds take ``(x, backend, cache, step, ctx)`` with x: [T, hidden] and return
[T, hidden]; ``ctx`` is the per-step ``AttentionContext`` the model builds once.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnkit.backends.base import AttentionBackend, RuntimeLayer, StepState
from attnkit.backends.metadata import BatchMetadata
from attnkit.errors import fail
from attnkit.model.spec import LayerAttention
from attnkit.runner.layers import Linear, NormStyle, rms_norm
from attnkit.runner.rotary import DualChunkRotary, RopeTable, Rotary, step_length_scales
from attnkit.runner.weights import Weights


@dataclass(slots=True)
class AttentionContext:
    """What every layer needs from this step besides the backend's StepState; the model builds
    it once per step (``AttentionContext.build``) and every layer reads it.

    meta: the step's BatchMetadata; a layer handed a context of another step refuses it (AK488)
    rope: RopeTable [T, 1, rotary_dim] at the step's positions (attention factor in)
    dca_lengths: per request, the L of the dual chunk length scale (None: KV length after
    the step)
    dca: the dual chunk tables and length scales [T], built by the first layer that needs them
    (keyed by rotary and rotary width) and reused by the rest
    """
    meta: BatchMetadata
    rope: RopeTable
    dca_lengths: list[int] | None = None
    dca: dict = field(default_factory=dict)

    @classmethod
    def build(cls, rotary: Rotary, meta: BatchMetadata,
              dca_lengths: list[int] | None = None) -> "AttentionContext":
        return cls(meta, rotary.table(meta.positions), dca_lengths)

    def check(self, step: StepState) -> None:
        """Refuse a context built for another step: its tables hold other positions."""
        if step.meta is not self.meta:
            fail("AK488", "the AttentionContext was built for another step's metadata than the "
                          "StepState it is used with", field="ctx.meta",
                 expected="the StepState's meta", actual="another BatchMetadata")

    def dual_chunk(self, dca: DualChunkRotary, spec: LayerAttention, rotary_dim: int):
        """(tables, length scale [T]) of ``dca`` for this step, built on first use."""
        key = (dca, rotary_dim)
        if key not in self.dca:
            self.dca[key] = (dca.tables(self.meta.positions, rotary_dim=rotary_dim),
                             step_length_scales(self.meta, spec.dual_chunk, lengths=self.dca_lengths))
        return self.dca[key]


class MHAAttention:
    """One MHA/GQA/MQA layer. gpt-oss sinks go to the backend in ``RuntimeLayer.sinks``;
    a dual chunk layer is rotated by ``DualChunkRotary`` and needs the ``dual_chunk`` backend."""

    def __init__(self, w: Weights, prefix: str, spec: LayerAttention, *, hidden: int,
                 norm: NormStyle, rotary: Rotary, dca: DualChunkRotary | None = None):
        """prefix: "model.layers.{i}.self_attn."."""
        heads, kv_heads, d = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.spec, self.norm, self.rotary, self.dca = spec, norm, rotary, dca
        self.q = Linear.load(w, f"{prefix}q_proj", heads * d, hidden)
        self.k = Linear.load(w, f"{prefix}k_proj", kv_heads * d, hidden)
        self.v = Linear.load(w, f"{prefix}v_proj", kv_heads * spec.value_dim, hidden)
        self.o = Linear.load(w, f"{prefix}o_proj", hidden, heads * spec.value_dim)
        self.q_norm = w.maybe(f"{prefix}q_norm.weight", shape=(d,))
        self.k_norm = w.maybe(f"{prefix}k_norm.weight", shape=(d,))
        sinks = w.get(f"{prefix}sinks", shape=(heads,)).float() if spec.sinks else None
        self.layer = RuntimeLayer(spec=spec, sinks=sinks)

    def __call__(self, x: torch.Tensor, backend: AttentionBackend, cache, step: StepState,
                 ctx: AttentionContext) -> torch.Tensor:
        """x: [T, hidden] -> [T, hidden]."""
        spec, n = self.spec, x.shape[0]
        q = self.q(x).view(n, spec.num_heads, spec.head_dim)
        k = self.k(x).view(n, spec.num_kv_heads, spec.head_dim)
        v = self.v(x).view(n, spec.num_kv_heads, spec.value_dim)
        if self.q_norm is not None:
            q, k = rms_norm(q, self.q_norm, self.norm), rms_norm(k, self.k_norm, self.norm)
        ctx.check(step)
        if self.dca is not None:
            tables, scale = ctx.dual_chunk(self.dca, spec, self.dca.rotary_dim_of(q))
            q, k = self.dca(q, k, step.meta.positions, length_scale=scale,
                            tables=tables)                                 # q: [T, 3, H_q, D]
        else:
            q, k = self.rotary(q, ctx.rope), self.rotary(k, ctx.rope)
        out = backend.forward(q, k, v, self.layer, cache, step)           # [T, H_q * D_v]
        return self.o(out)

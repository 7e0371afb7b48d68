"""The attention half of an MHA/GQA/MQA block (MLA: mla.py): projections, rotary, and the
attnkit backend in the middle.

    q, k, v = qkv_proj(x)                             (q_proj, k_proj, v_proj as one GEMM;
                                                       biases if the checkpoint has them)
    q, k = q_norm(q), k_norm(k)                       (Qwen3: per-head RMSNorm)
    q, k = rotary(q), rotary(k)                       (DCA: queries three ways, see rotary.py)
    out = o_proj(ctx.attend(q, k, v, layer))          (the step's backend, cache and plan)

Both attention kinds map ``(x, ctx)`` with x: [T, hidden] to [T, hidden]; ``ctx`` is the
step's StepContext (context.py), built once by the model. Under tensor parallelism
(parallel.py) a rank holds its query heads' rows of q_proj, its KV heads' rows of k_proj /
v_proj (replicated when ranks outnumber KV heads), and o_proj's matching input columns; the
o_proj partials are summed over ranks (one all-reduce).
"""
from __future__ import annotations

import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.model.spec import LayerAttention
from attnkit.runner.layers import prefetch, skinny
from attnkit.runner.layers.context import StepContext
from attnkit.runner.layers.linear import Linear
from attnkit.runner.layers.norm import NormStyle, rms_norm
from attnkit.runner.layers.parallel import SINGLE, TensorParallel
from attnkit.runner.layers.rotary import DualChunkRotary, Rotary


class MHAAttention:
    """One MHA/GQA/MQA layer. gpt-oss sinks go to the backend in ``RuntimeLayer.sinks``;
    a dual chunk layer is rotated by ``DualChunkRotary`` and needs the ``dual_chunk`` backend."""

    def __init__(self, w, prefix: str, spec: LayerAttention, *, hidden: int,
                 norm: NormStyle, rotary: Rotary, dca: DualChunkRotary | None = None,
                 tp: TensorParallel = SINGLE):
        """w: the model's Weights; prefix: "model.layers.{i}.self_attn."; spec: the whole
        layer (this rank's share of it: ``tp.local(spec)``)."""
        heads, kv_heads, d, dv = spec.num_heads, spec.num_kv_heads, spec.head_dim, spec.value_dim
        (h0, h1), (k0, k1) = tp.heads(heads), tp.kv_heads(kv_heads)
        self.spec, self.norm, self.rotary, self.dca = tp.local(spec), norm, rotary, dca
        parts = (Linear.load(w, f"{prefix}q_proj", heads * d, hidden, rows=(h0 * d, h1 * d)),
                 Linear.load(w, f"{prefix}k_proj", kv_heads * d, hidden, rows=(k0 * d, k1 * d)),
                 Linear.load(w, f"{prefix}v_proj", kv_heads * dv, hidden, rows=(k0 * dv, k1 * dv)))
        self.qkv = Linear.stack(parts)
        self.sizes = [p.out_features for p in parts]
        self.o = Linear.load_row_parallel(w, f"{prefix}o_proj", hidden, heads * dv, tp=tp,
                                          cols=(h0 * dv, h1 * dv))
        self.q_norm = w.maybe(f"{prefix}q_norm.weight", shape=(d,))
        self.k_norm = w.maybe(f"{prefix}k_norm.weight", shape=(d,))
        sinks = w.get(f"{prefix}sinks", shape=(heads,), span=(h0, h1)).float() if spec.sinks else None
        self.layer = RuntimeLayer(spec=self.spec, sinks=sinks)

    def folds(self, h: torch.Tensor) -> bool:
        """Whether a step of residual stream h can run both projections through skinny.project,
        taking the input norm and the residual add (``__call__``'s norm / residual)."""
        return skinny.usable(h, self.qkv) and skinny.usable(h, self.o)

    def __call__(self, x: torch.Tensor, ctx: StepContext, *, norm: tuple | None = None,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
        """x: [T, hidden] -> [T, hidden]. With ``norm`` (weight, NormStyle) x is the residual
        stream, normalised before (or, skinny.folds, inside) the qkv product; with
        ``residual`` the result is residual + out, added inside the o product. Both only
        where ``folds``."""
        spec, n = self.spec, x.shape[0]
        if norm is not None:
            qkv = skinny.project(x, self.qkv, norm=norm)
        else:
            qkv = self.qkv(x)
        ahead = prefetch.start(self.o.weight, n)        # o's weight into L2 during attention
        q, k, v = qkv.split(self.sizes, dim=-1)
        q = q.view(n, spec.num_heads, spec.head_dim)
        k = k.view(n, spec.num_kv_heads, spec.head_dim)
        v = v.view(n, spec.num_kv_heads, spec.value_dim)
        if self.q_norm is not None:
            q, k = rms_norm(q, self.q_norm, self.norm), rms_norm(k, self.k_norm, self.norm)
        if self.dca is not None:
            tables, scale = ctx.dual_chunk(self.dca, spec, self.dca.rotary_dim_of(q))
            q, k = self.dca(q, k, ctx.meta.positions, length_scale=scale,
                            tables=tables)                                 # q: [T, 3, H_q, D]
        else:
            q, k = self.rotary.pair(q, k, ctx.rope)
        out = ctx.attend(q, k, v, self.layer)                              # [T, H_q * D_v]
        prefetch.finish(ahead)
        if residual is not None:
            return skinny.project(out, self.o, residual=residual)
        return self.o(out)

"""What the family modules build a decoder layer from: ``Block`` (norms, attention, MLP, and
the residual adds in the norms' kernels), its norm weights, and the MHA/GQA block most
families use. Below base.py's ``DecoderModel``, which looks each family up (families.py)
and calls its ``block``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.model.spec import LayerAttention
from attnkit.runner.layers.attention import MHAAttention
from attnkit.runner.layers.context import StepContext
from attnkit.runner.layers.moe import feed_forward
from attnkit.runner.layers.norm import add_rms_norm, rms_norm
from attnkit.runner.models.weights import Weights

# Annotations name base.py's DecoderModel and config.py's Architecture without importing them:
# both build on the family table, which builds on this module.


@dataclass(slots=True)
class Block:
    """One decoder layer. Norm weights are [hidden]; attention and mlp map ([T, hidden], ctx)
    to [T, hidden]."""
    attention: Callable
    mlp: Callable
    input_norm: torch.Tensor
    post_attn_norm: torch.Tensor
    pre_mlp_norm: torch.Tensor | None = None      # Gemma-2 sandwich norms
    post_mlp_norm: torch.Tensor | None = None

    @property
    def attn(self) -> RuntimeLayer:
        """The layer as the backend sees it (spec, sinks, MLA up-projections)."""
        return self.attention.layer

    def __call__(self, h: torch.Tensor, ctx: StepContext, style,
                 pending: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """h: [T, hidden] residual stream; pending: the block before's output, not yet added
        to it (None: nothing pending). -> (residual stream, this block's output to add):
        each residual add runs in the next norm's kernel (``add_rms_norm``), the last one in
        the model's final norm; or, for a step of few tokens on CUDA (the attention's and
        MLP's ``folds``), inside the product before it, leaving nothing pending.
        ``style``: the family's NormStyle."""
        if pending is None and self.pre_mlp_norm is None and self._folds(h):
            # Few tokens: each residual add runs inside the product before it, each norm on
            # its own or inside the product after it (layers/skinny.py's folds); nothing is
            # left pending.
            h = self.attention(h, ctx, norm=(self.input_norm, style), residual=h)
            return self.mlp(h, ctx, norm=(self.post_attn_norm, style), residual=h), None
        if pending is None:
            x = rms_norm(h, self.input_norm, style)
        else:
            x, h = add_rms_norm(pending, h, self.input_norm, style)
        a = self.attention(x, ctx)
        if self.pre_mlp_norm is not None:
            x, h = add_rms_norm(rms_norm(a, self.post_attn_norm, style), h, self.pre_mlp_norm, style)
            return h, rms_norm(self.mlp(x, ctx), self.post_mlp_norm, style)
        x, h = add_rms_norm(a, h, self.post_attn_norm, style)
        return h, self.mlp(x, ctx)

    def _folds(self, h: torch.Tensor) -> bool:
        folds_a, folds_m = getattr(self.attention, "folds", None), getattr(self.mlp, "folds", None)
        return folds_a is not None and folds_m is not None and folds_a(h) and folds_m(h)


def norms(arch: Architecture, w: Weights, prefix: str) -> tuple:
    """(input, post-attention, pre-MLP, post-MLP) norm weights of layer ``prefix``; the last
    two only with sandwich norms."""
    shape, sandwich = (arch.hidden_size,), arch.sandwich_norms
    return (w.get(f"{prefix}input_layernorm.weight", shape=shape),
            w.get(f"{prefix}post_attention_layernorm.weight", shape=shape),
            w.get(f"{prefix}pre_feedforward_layernorm.weight", shape=shape) if sandwich else None,
            w.get(f"{prefix}post_feedforward_layernorm.weight", shape=shape) if sandwich else None)


def mha_block(model: "DecoderModel", w: Weights, spec: LayerAttention) -> Block:
    """An MHA/GQA block: self_attn (with sinks / q-k norms / dual chunk rotation as the
    checkpoint has them) and the family's MLP or experts."""
    arch, p = model.arch, f"model.layers.{spec.layer_id}."
    attention = MHAAttention(w, f"{p}self_attn.", spec, hidden=arch.hidden_size, norm=arch.norm,
                             rotary=model.rotary, dca=model.dual_chunk_rotary(spec), tp=model.tp)
    mlp = feed_forward(arch.moe, w, f"{p}mlp.", layer_id=spec.layer_id, hidden=arch.hidden_size,
                       inter=arch.intermediate_size, act=arch.activation, tp=model.tp)
    return Block(attention, mlp, *norms(arch, w, p))

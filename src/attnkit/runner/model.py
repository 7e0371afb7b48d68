"""A decoder-only transformer whose attention runs through any attnkit backend.

Tokens of a step are packed (request after request, as in ``BatchMetadata``): every tensor
here is [T, ...] with no batch or padding axis. Per layer:

    h = h + attention(norm(h))       MHA/GQA (runner/attention.py) or MLA (runner/mla.py)
    h = h + mlp(norm(h))             dense gated MLP or experts (runner/mlp.py)

(Gemma-2 also norms each half's output: "sandwich" norms), then the final norm and the LM
head. RoPE is computed once per step (runner/rotary.py) and shared by every layer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from attnkit.backends.base import AttentionBackend, RuntimeLayer, StepState
from attnkit.errors import fail
from attnkit.model.spec import LayerAttention
from attnkit.runner.arch import Architecture
from attnkit.runner.attention import AttentionContext, MHAAttention
from attnkit.runner.layers import rms_norm
from attnkit.runner.mla import MLAAttention
from attnkit.runner.mlp import feed_forward
from attnkit.runner.rotary import DualChunkRotary, Rotary
from attnkit.runner.weights import Weights


@dataclass(slots=True)
class Block:
    """One decoder layer. Norm weights are [hidden]; attention and mlp map [T, hidden] to
    [T, hidden] (attention also takes the backend, cache, step and AttentionContext)."""
    attention: MHAAttention | MLAAttention
    mlp: Callable[[torch.Tensor], torch.Tensor]
    input_norm: torch.Tensor
    post_attn_norm: torch.Tensor
    pre_mlp_norm: torch.Tensor | None = None      # Gemma-2 sandwich norms
    post_mlp_norm: torch.Tensor | None = None

    @property
    def attn(self) -> RuntimeLayer:
        """The layer as the backend sees it (spec, sinks, MLA up-projections)."""
        return self.attention.layer


class DecoderModel:
    """Weights plus the forward pass; holds no per-request state (the cache and metadata do)."""

    def __init__(self, arch: Architecture, weights: Weights, *,
                 layers: tuple[LayerAttention, ...]):
        self.arch = arch
        hidden, vocab = arch.hidden_size, arch.vocab_size
        self.embed = weights.get("model.embed_tokens.weight", shape=(vocab, hidden))
        self.final_norm = weights.get("model.norm.weight", shape=(hidden,))
        head = weights.maybe("lm_head.weight", shape=(vocab, hidden))
        self.lm_head = self.embed if arch.tie_word_embeddings or head is None else head
        self.rotary = Rotary(arch.rope, interleaved=arch.rope_interleaved, device=weights.device)
        self.norm_style = arch.norm              # arch.norm builds a new NormStyle per read
        self._dcas: dict = {}                    # DualChunkConfig -> its one DualChunkRotary
        self.blocks = [self._block(weights, spec) for spec in layers]

    def _block(self, w: Weights, spec: LayerAttention) -> Block:
        arch, p, hidden = self.arch, f"model.layers.{spec.layer_id}.", self.arch.hidden_size
        if spec.kind == "mla":
            attention = MLAAttention(w, f"{p}self_attn.", spec, hidden=hidden, norm=arch.norm,
                                     rotary=self.rotary)
        else:
            attention = MHAAttention(w, f"{p}self_attn.", spec, hidden=hidden, norm=arch.norm,
                                     rotary=self.rotary, dca=self._dca(spec))
        mlp = feed_forward(arch.moe, w, f"{p}mlp.", layer_id=spec.layer_id, hidden=hidden,
                           inter=arch.intermediate_size, act=arch.activation)
        norm = (hidden,)
        sandwich = arch.sandwich_norms
        return Block(
            attention=attention, mlp=mlp,
            input_norm=w.get(f"{p}input_layernorm.weight", shape=norm),
            post_attn_norm=w.get(f"{p}post_attention_layernorm.weight", shape=norm),
            pre_mlp_norm=w.get(f"{p}pre_feedforward_layernorm.weight", shape=norm) if sandwich else None,
            post_mlp_norm=w.get(f"{p}post_feedforward_layernorm.weight", shape=norm) if sandwich else None,
        )

    def _dca(self, spec: LayerAttention) -> DualChunkRotary | None:
        if spec.dual_chunk is None:
            return None
        rope = self.arch.rope
        if rope.rope_type != "default":
            fail("AK480", f"dual chunk attention rotates with plain RoPE; rope type "
                          f"{rope.rope_type!r} with dual_chunk_attention_config is not one the "
                          "runner computes (dual_chunk=False runs the scaled RoPE instead)",
                 field="rope_parameters.rope_type", expected="default", actual=rope.rope_type)
        if spec.dual_chunk not in self._dcas:    # one per config: layers share its step tables
            self._dcas[spec.dual_chunk] = DualChunkRotary(spec.dual_chunk, base=rope.theta,
                                                          rotary_dim=rope.rotary_dim)
        return self._dcas[spec.dual_chunk]

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, weight, self.norm_style)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, backend: AttentionBackend, cache, step: StepState, *,
                rows: torch.Tensor | None = None,
                dca_lengths: list[int] | None = None) -> torch.Tensor:
        """tokens: [T] int64 (the step's new tokens, packed); rows: [R] int64 | None, which
        token rows get logits (None: all); dca_lengths: per request, the length L of the dual
        chunk length scale (None: KV length after the step). Returns [R or T, vocab] float32."""
        h = self.embed[tokens]                                        # [T, hidden]
        if self.arch.embed_scale is not None:
            h = h * torch.tensor(self.arch.embed_scale, dtype=h.dtype)  # rounded like transformers
        ctx = AttentionContext.build(self.rotary, step.meta, dca_lengths)
        for block in self.blocks:
            a = block.attention(self.norm(h, block.input_norm), backend, cache, step, ctx)
            if block.pre_mlp_norm is not None:
                h = h + self.norm(a, block.post_attn_norm)
                m = block.mlp(self.norm(h, block.pre_mlp_norm))
                h = h + self.norm(m, block.post_mlp_norm)
            else:
                h = h + a
                h = h + block.mlp(self.norm(h, block.post_attn_norm))
        if rows is not None:
            h = h[rows]
        logits = F.linear(self.norm(h, self.final_norm), self.lm_head).float()
        cap = self.arch.final_logit_softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)

"""A decoder-only transformer whose attention runs through any attnkit backend.

Tokens of a step are packed (request after request, as in ``BatchMetadata``): every tensor
here is [T, ...] with no batch or padding axis. Per layer:

    x = norm(h);  q, k, v = proj(x);  (q/k norms);  rotary(q, k, meta.positions)
    h = h + o_proj(backend.forward(q, k, v, layer, cache, step))      (Gemma-2: normed first)
    h = h + mlp(norm(h))                                              (Gemma-2: normed first)

then the final norm and the LM head. The MLP is dense (gated) or gpt-oss's experts; gpt-oss
layers hand their per-head sink logits to the backend in ``AttentionLayer.sinks``. Dual chunk
layers are rotated by ``DualChunkRotary`` (queries three ways, keys at chunk-local
positions) and need the ``dual_chunk`` backend.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from attnkit.backends.base import AttentionBackend, AttentionLayer, StepState
from attnkit.model.spec import LayerAttention
from attnkit.runner.arch import Architecture
from attnkit.runner.mlp import GatedMLP, GptOssMoE, Linear
from attnkit.runner.rotary import DualChunkRotary, apply_rope, step_length_scales
from attnkit.runner.weights import Weights


@dataclass(slots=True)
class Block:
    """One decoder layer's tensors. Norm weights are [hidden] (q/k norms: [head_dim])."""
    attn: AttentionLayer
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    mlp: Callable[[torch.Tensor], torch.Tensor]   # GatedMLP or GptOssMoE: [T, hidden] -> same
    input_norm: torch.Tensor
    post_attn_norm: torch.Tensor
    pre_mlp_norm: torch.Tensor | None = None      # Gemma-2 sandwich norms
    post_mlp_norm: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None            # Qwen3 per-head norms
    k_norm: torch.Tensor | None = None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, *, eps: float, offset: float,
             weight_in_fp32: bool) -> torch.Tensor:
    """x: [..., N]; weight: [N] -> (offset + weight) * x / rms(x), normalised in float32 like
    transformers. Llama casts back to x's dtype before the weight; Gemma and gpt-oss after it
    (``weight_in_fp32``). Only low-precision results differ."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight_in_fp32:
        return (xf * (offset + weight.float())).to(x.dtype)
    return (offset + weight) * xf.to(x.dtype)


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
        self.blocks = [self._block(weights, spec) for spec in layers]
        self.dca = {spec.layer_id: DualChunkRotary(spec.dual_chunk, base=arch.rope_theta,
                                                   rotary_dim=arch.rotary_dim)
                    for spec in layers if spec.dual_chunk is not None}

    def _block(self, w: Weights, spec: LayerAttention) -> Block:
        p, hidden, inter = f"model.layers.{spec.layer_id}.", self.arch.hidden_size, self.arch.intermediate_size
        q_out = spec.num_heads * spec.head_dim
        kv_out, v_out = spec.num_kv_heads * spec.head_dim, spec.num_kv_heads * spec.value_dim

        def linear(name: str, out: int, inp: int) -> Linear:
            return Linear.load(w, f"{p}{name}", out, inp)

        if self.arch.moe is not None:
            mlp = GptOssMoE(w, f"{p}mlp.", hidden=hidden, inter=inter, moe=self.arch.moe)
        else:
            mlp = GatedMLP(w, f"{p}mlp.", hidden=hidden, inter=inter, act=self.arch.activation)
        sinks = w.get(f"{p}self_attn.sinks", shape=(spec.num_heads,)).float() if spec.sinks else None
        norm = (hidden,)
        sandwich = self.arch.sandwich_norms
        return Block(
            attn=AttentionLayer(spec=spec, sinks=sinks),
            q=linear("self_attn.q_proj", q_out, hidden), k=linear("self_attn.k_proj", kv_out, hidden),
            v=linear("self_attn.v_proj", v_out, hidden),
            o=linear("self_attn.o_proj", hidden, spec.num_heads * spec.value_dim),
            mlp=mlp,
            input_norm=w.get(f"{p}input_layernorm.weight", shape=norm),
            post_attn_norm=w.get(f"{p}post_attention_layernorm.weight", shape=norm),
            pre_mlp_norm=w.get(f"{p}pre_feedforward_layernorm.weight", shape=norm) if sandwich else None,
            post_mlp_norm=w.get(f"{p}post_feedforward_layernorm.weight", shape=norm) if sandwich else None,
            q_norm=w.maybe(f"{p}self_attn.q_norm.weight", shape=(spec.head_dim,)),
            k_norm=w.maybe(f"{p}self_attn.k_norm.weight", shape=(spec.head_dim,)),
        )

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, weight, eps=self.arch.rms_norm_eps, offset=self.arch.norm_offset,
                        weight_in_fp32=self.arch.norm_weight_fp32)

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
        for block in self.blocks:
            a = self._attention(block, self.norm(h, block.input_norm), backend, cache, step,
                                dca_lengths)
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

    def _attention(self, block: Block, x: torch.Tensor, backend: AttentionBackend, cache,
                   step: StepState, dca_lengths: list[int] | None) -> torch.Tensor:
        """x: [T, hidden] -> [T, hidden]."""
        spec, n = block.attn.spec, x.shape[0]
        q = block.q(x).view(n, spec.num_heads, spec.head_dim)
        k = block.k(x).view(n, spec.num_kv_heads, spec.head_dim)
        v = block.v(x).view(n, spec.num_kv_heads, spec.value_dim)
        if block.q_norm is not None:
            q, k = self.norm(q, block.q_norm), self.norm(k, block.k_norm)
        positions = step.meta.positions
        rotary = self.dca.get(spec.layer_id)
        if rotary is not None:
            scale = step_length_scales(step.meta, spec.dual_chunk, lengths=dca_lengths)
            q, k = rotary(q, k, positions, length_scale=scale)    # q: [T, 3, H_q, D]
        else:
            theta, rd = self.arch.rope_theta, self.arch.rotary_dim
            q = apply_rope(q, positions, base=theta, rotary_dim=rd)
            k = apply_rope(k, positions, base=theta, rotary_dim=rd)
        out = backend.forward(q, k, v, block.attn, cache, step)     # [T, H_q * D_v]
        return block.o(out)

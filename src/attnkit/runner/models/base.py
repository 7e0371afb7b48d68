"""A decoder-only transformer whose attention runs through any attnkit backend.

Tokens of a step are packed (request after request, as in ``BatchMetadata``): every tensor
here is [T, ...] with no batch or padding axis. Per layer:

    h = h + attention(norm(h), ctx)   MHA/GQA (layers/attention.py) or MLA (layers/mla.py)
    h = h + mlp(norm(h), ctx)         dense gated MLP or experts (layers/mlp.py, moe.py)

(each add in the kernel of the norm after it: the MLP's output is added by the next block's
input norm, the last one by the final norm)
(Gemma-2 also norms each half's output: "sandwich" norms), then the final norm and the LM
head. ``ctx`` is the step's StepContext (layers/context.py), built once by ``context`` and
passed to every layer: RoPE at the step's positions, the backend and its per-step plan.
Each family's module (llama.py, gemma2.py, gpt_oss.py, deepseek.py) builds its blocks
(from blocks.py); families.py is the table of them.

Under tensor parallelism (``tp``, layers/parallel.py) the model holds this rank's shard: its
slice of the vocabulary (embedding rows, LM head rows; the logits of every rank's slice are
all-gathered, so every rank returns the whole [R, vocab]), and each layer its heads and its
slice of the MLP / experts. Norms and rotary are replicated; the residual stream is whole
on every rank.
"""
from __future__ import annotations

import torch

from attnkit.backends.base import AttentionBackend, StepState
from attnkit.errors import fail
from attnkit.model.spec import LayerAttention
from attnkit.runner.layers.context import StepContext
from attnkit.runner.layers import skinny
from attnkit.runner.layers.linear import Linear, linear
from attnkit.runner.layers.norm import add_rms_norm, rms_norm
from attnkit.runner.layers.parallel import SINGLE, TensorParallel, vocab_lookup
from attnkit.runner.layers.rotary import DualChunkRotary, Rotary
from attnkit.runner.models.config import Architecture
from attnkit.runner.models.families import FAMILIES
from attnkit.runner.models.weights import Weights


class DecoderModel:
    """Weights plus the forward pass; holds no per-request state (the cache and metadata do)."""

    def __init__(self, arch: Architecture, weights: Weights, *,
                 layers: tuple[LayerAttention, ...], tp: TensorParallel = SINGLE):
        """layers: the whole model's layer specs (each block takes its rank's share);
        tp: this process's rank of the tensor-parallel group."""
        self.arch, self.tp = arch, tp
        hidden, vocab = arch.hidden_size, arch.vocab_size
        self.vocab_span = tp.span(vocab)                     # this rank's token ids
        self.embed = weights.get("model.embed_tokens.weight", shape=(vocab, hidden),
                                 span=self.vocab_span)
        self.final_norm = weights.get("model.norm.weight", shape=(hidden,))
        head = weights.maybe("lm_head.weight", shape=(vocab, hidden), span=self.vocab_span)
        self.lm_head = self.embed if arch.tie_word_embeddings or head is None else head
        self.head = Linear(self.lm_head)         # the same weight, for skinny.usable
        self.rotary = Rotary(arch.rope, interleaved=arch.rope_interleaved, device=weights.device)
        self.norm_style = arch.norm              # arch.norm builds a new NormStyle per read
        self._dcas: dict = {}                    # DualChunkConfig -> its one DualChunkRotary
        family = FAMILIES[arch.model_type]
        self.blocks = [family.block(self, weights, spec) for spec in layers]

    def dual_chunk_rotary(self, spec: LayerAttention) -> DualChunkRotary | None:
        """The DCA rotation of a dual chunk layer (one per config: layers share its tables)."""
        if spec.dual_chunk is None:
            return None
        rope = self.arch.rope
        if rope.rope_type != "default":
            fail("AK480", f"dual chunk attention rotates with plain RoPE; rope type "
                          f"{rope.rope_type!r} with dual_chunk_attention_config is not one the "
                          "runner computes (dual_chunk=False runs the scaled RoPE instead)",
                 field="rope_parameters.rope_type", expected="default", actual=rope.rope_type)
        if spec.dual_chunk not in self._dcas:
            self._dcas[spec.dual_chunk] = DualChunkRotary(spec.dual_chunk, base=rope.theta,
                                                          rotary_dim=rope.rotary_dim)
        return self._dcas[spec.dual_chunk]

    def norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, weight, self.norm_style)

    def context(self, backend: AttentionBackend, cache, step: StepState, *,
                dca_lengths: list[int] | None = None, static: bool = False) -> StepContext:
        """The step's per-step object, for ``forward`` and every layer it runs."""
        return StepContext.build(self.rotary, backend, cache, step, dca_lengths=dca_lengths,
                                 static=static)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, ctx: StepContext, *,
                rows: torch.Tensor | None = None) -> torch.Tensor:
        """tokens: [T] int64 (the step's new tokens, packed); ctx: this step's StepContext;
        rows: [R] int64 | None, which token rows get logits (None: all).
        Returns [R or T, vocab] float32."""
        if tokens.shape[0] != ctx.num_tokens:
            fail("AK488", f"the step context was built for a step of {ctx.num_tokens} token(s), "
                          f"not these {tokens.shape[0]}", field="ctx",
                 expected=tokens.shape[0], actual=ctx.num_tokens)
        h = vocab_lookup(self.embed, tokens, self.tp, self.vocab_span[0])   # [T, hidden]
        if self.arch.embed_scale is not None:
            h = h * torch.tensor(self.arch.embed_scale, dtype=h.dtype)  # rounded like transformers
        pending = None
        for block in self.blocks:
            h, pending = block(h, ctx, self.norm_style, pending)
        if rows is not None:
            h, pending = h[rows], None if pending is None else pending[rows]
        if pending is None and self.tp.size == 1 and skinny.usable(h, self.head):
            logits = skinny.project(h, self.head, norm=(self.final_norm, self.norm_style)).float()
        else:
            normed = (self.norm(h, self.final_norm) if pending is None else
                      add_rms_norm(pending, h, self.final_norm, self.norm_style)[0])
            logits = self.tp.all_gather(linear(normed, self.lm_head), self.arch.vocab_size).float()
        cap = self.arch.final_logit_softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)

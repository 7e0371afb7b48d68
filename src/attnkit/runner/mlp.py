"""The feed-forward halves of a block: a dense gated MLP and gpt-oss's mixture of experts.

Both map x: [T, hidden] -> [T, hidden]. Weights use Hugging Face's names and layouts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from attnkit.runner.weights import Weights


@dataclass(slots=True)
class Linear:
    """weight: [out, in]; bias: [out] | None."""
    weight: torch.Tensor
    bias: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    @classmethod
    def load(cls, w: Weights, name: str, out: int, inp: int) -> "Linear":
        """``name``.weight [out, in] and, if the checkpoint has it, ``name``.bias [out]."""
        return cls(w.get(f"{name}.weight", shape=(out, inp)), w.maybe(f"{name}.bias", shape=(out,)))


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name == "silu":
        return F.silu
    if name in ("gelu_pytorch_tanh", "gelu_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    return F.gelu


class GatedMLP:
    """down(act(gate(x)) * up(x)): SwiGLU (Llama, Qwen, Mistral) or GeGLU (Gemma)."""

    def __init__(self, w: Weights, prefix: str, *, hidden: int, inter: int, act: str):
        self.gate = Linear.load(w, f"{prefix}gate_proj", inter, hidden)
        self.up = Linear.load(w, f"{prefix}up_proj", inter, hidden)
        self.down = Linear.load(w, f"{prefix}down_proj", hidden, inter)
        self.act = activation(act)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


@dataclass(frozen=True, slots=True)
class MoEConfig:
    num_experts: int
    top_k: int
    swiglu_alpha: float
    swiglu_limit: float


class GptOssMoE:
    """gpt-oss experts: a linear router picks top_k experts per token, weighted by a softmax
    over the chosen logits; each expert is a clamped SwiGLU with biases whose gate and up
    columns interleave (gate = even columns, up = odd) and whose up branch adds 1.

    router: [E, hidden] (+ [E]); gate_up_proj: [E, hidden, 2I] (+ [E, 2I]);
    down_proj: [E, I, hidden] (+ [E, hidden]).
    """

    def __init__(self, w: Weights, prefix: str, *, hidden: int, inter: int, moe: MoEConfig):
        e = moe.num_experts
        self.moe = moe
        self.router = Linear.load(w, f"{prefix}router", e, hidden)
        p = f"{prefix}experts."
        self.gate_up = w.get(f"{p}gate_up_proj", shape=(e, hidden, 2 * inter))
        self.gate_up_bias = w.get(f"{p}gate_up_proj_bias", shape=(e, 2 * inter))
        self.down = w.get(f"{p}down_proj", shape=(e, inter, hidden))
        self.down_bias = w.get(f"{p}down_proj_bias", shape=(e, hidden))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        top, chosen = torch.topk(self.router(x), self.moe.top_k, dim=-1)     # [T, k]
        weights = torch.softmax(top, dim=-1)
        out = torch.zeros_like(x)
        for expert in chosen.unique().tolist():          # only experts some token picked
            token, slot = torch.where(chosen == expert)
            gate_up = x[token] @ self.gate_up[expert] + self.gate_up_bias[expert]
            gate = gate_up[:, ::2].clamp(max=self.moe.swiglu_limit)
            up = gate_up[:, 1::2].clamp(-self.moe.swiglu_limit, self.moe.swiglu_limit)
            h = (up + 1) * gate * torch.sigmoid(gate * self.moe.swiglu_alpha)
            y = h @ self.down[expert] + self.down_bias[expert]
            out.index_add_(0, token, y * weights[token, slot, None])
        return out

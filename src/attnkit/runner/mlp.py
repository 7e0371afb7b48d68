"""The feed-forward halves of a block: a dense gated MLP and two mixtures of experts.

All map x: [T, hidden] -> [T, hidden]. Weights use Hugging Face's names and layouts.
``feed_forward`` picks a layer's MLP: gpt-oss's experts on every layer; DeepSeek's (V2, V3,
Kimi-K2) routed + shared experts from ``first_k_dense_replace`` on, dense gated MLPs before
it. DeepSeek's routers (softmax or sigmoid scores, three selections) are runner/routing.py.
Experts run as a plain loop over the experts some token picked.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from attnkit.runner.layers import Linear
from attnkit.runner.routing import route
from attnkit.runner.weights import Weights


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name == "silu":
        return F.silu
    if name in ("gelu_pytorch_tanh", "gelu_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    return F.gelu


@dataclass(slots=True)
class GatedMLP:
    """down(act(gate(x)) * up(x)): SwiGLU (Llama, Qwen, Mistral, DeepSeek) or GeGLU (Gemma)."""
    gate: Linear
    up: Linear
    down: Linear
    act: Callable[[torch.Tensor], torch.Tensor]

    @classmethod
    def load(cls, w: Weights, prefix: str, *, hidden: int, inter: int, act: str) -> "GatedMLP":
        """``prefix``{gate,up,down}_proj.weight (+ .bias if present)."""
        return cls(Linear.load(w, f"{prefix}gate_proj", inter, hidden),
                   Linear.load(w, f"{prefix}up_proj", inter, hidden),
                   Linear.load(w, f"{prefix}down_proj", hidden, inter), activation(act))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


@dataclass(frozen=True, slots=True)
class GptOssMoEConfig:
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

    def __init__(self, w: Weights, prefix: str, *, hidden: int, inter: int, moe: GptOssMoEConfig):
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


@dataclass(frozen=True, slots=True)
class DeepseekMoEConfig:
    num_experts: int              # n_routed_experts
    top_k: int                    # num_experts_per_tok
    inter: int                    # moe_intermediate_size (per expert)
    num_shared: int               # n_shared_experts: one dense MLP of num_shared * inter
    scaling: float                # routed_scaling_factor
    first_dense: int              # first_k_dense_replace: layers before it are dense
    topk_method: str = "greedy"   # "greedy" | "group_limited_greedy" (V2), "noaux_tc" (V3)
    num_groups: int | None = None     # n_group
    topk_groups: int | None = None    # topk_group
    scoring: str = "softmax"          # "softmax" (V2) | "sigmoid" (V3)
    norm_topk_prob: bool = False      # renormalise the chosen weights (V3)


class DeepseekMoE:
    """DeepSeek experts (V2, V3, Kimi-K2). The router (runner/routing.py) gives each token
    top_k SwiGLU experts and their float32 weights; the shared experts' MLP is added for every
    token.

    gate.weight: [E, hidden] and, for noaux_tc, gate.e_score_correction_bias: [E] (both kept
    float32, as transformers keeps them); experts either per expert
    (experts.{e}.{gate,up,down}_proj.weight, as saved) or fused (experts.gate_up_proj
    [E, 2I, hidden] gate rows first, experts.down_proj [E, hidden, I], as in memory).
    """

    def __init__(self, w: Weights, prefix: str, *, hidden: int, moe: DeepseekMoEConfig, act: str):
        self.moe = moe
        e, inter = moe.num_experts, moe.inter
        self.router = w.get(f"{prefix}gate.weight", shape=(e, hidden), dtype=torch.float32)
        self.bias = None
        if moe.topk_method == "noaux_tc":
            self.bias = w.get(f"{prefix}gate.e_score_correction_bias", shape=(e,),
                              dtype=torch.float32)
        p = f"{prefix}experts."
        if w.has(f"{p}gate_up_proj"):
            gate_up = w.get(f"{p}gate_up_proj", shape=(e, 2 * inter, hidden))
            down = w.get(f"{p}down_proj", shape=(e, hidden, inter))
            self.experts = [GatedMLP(Linear(gate_up[i, :inter]), Linear(gate_up[i, inter:]),
                                     Linear(down[i]), activation(act)) for i in range(e)]
        else:
            self.experts = [GatedMLP.load(w, f"{p}{i}.", hidden=hidden, inter=inter, act=act)
                            for i in range(e)]
        self.shared = None
        if moe.num_shared:
            self.shared = GatedMLP.load(w, f"{prefix}shared_experts.", hidden=hidden,
                                        inter=inter * moe.num_shared, act=act)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [T, hidden] -> (weights [T, k] float32, experts [T, k] int64)."""
        return route(F.linear(x.float(), self.router), self.moe, self.bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.route(x)
        out = torch.zeros_like(x)
        for expert in chosen.unique().tolist():          # only experts some token picked
            token, slot = torch.where(chosen == expert)
            y = self.experts[expert](x[token]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(x.dtype))
        return out if self.shared is None else out + self.shared(x)


def feed_forward(moe, w: Weights, prefix: str, *, layer_id: int, hidden: int, inter: int,
                 act: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The MLP of layer ``layer_id`` (``prefix`` = "model.layers.{i}.mlp."); ``moe`` is the
    architecture's experts config or None; ``inter`` the dense MLP width."""
    if isinstance(moe, GptOssMoEConfig):
        return GptOssMoE(w, prefix, hidden=hidden, inter=inter, moe=moe)
    if isinstance(moe, DeepseekMoEConfig) and layer_id >= moe.first_dense:
        return DeepseekMoE(w, prefix, hidden=hidden, moe=moe, act=act)
    return GatedMLP.load(w, prefix, hidden=hidden, inter=inter, act=act)

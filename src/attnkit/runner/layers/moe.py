"""Mixtures of experts: gpt-oss's and DeepSeek's (V2, V3, Kimi-K2). Both map x: [T, hidden]
to [T, hidden] and take the step's context (``ctx.static``: a captured step).

Two dispatches compute the same sum (each token's chosen experts in ascending expert order,
weighted, accumulated in the compute dtype):
- eager steps loop over the experts some token chose (``chosen.unique().tolist()``: one host
  round trip per layer, each expert's weights read once);
- static (captured) steps cannot ask the host: with fewer token-expert pairs than experts
  each pair gathers its expert's weights (reads T * k experts), otherwise every expert runs
  on every token as one batched GEMM and each token keeps its own experts' rows (reads every
  expert once). Unchosen experts' rows are selected out, never multiplied by zero.

Under tensor parallelism (parallel.py) the experts are tensor-parallel, not expert-parallel:
every rank holds every expert's slice ``tp.span(I)`` of the intermediate (those gate / up
rows, those down columns; the shared experts likewise) and the whole router, so every rank
routes every token identically from the same replicated hidden state and runs the same
dispatch; each block's partial output (routed + shared) is summed over ranks with one
all-reduce. An expert bias on the output (gpt-oss) is added by rank 0 only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from attnkit.runner.layers.linear import Linear
from attnkit.runner.layers.mlp import GatedMLP, activation
from attnkit.runner.layers.parallel import SINGLE, TensorParallel
from attnkit.runner.layers.routing import route


def _in_expert_order(weights: torch.Tensor, chosen: torch.Tensor):
    """Each token's (weights, experts) [T, k] sorted by expert id: the loop's summation order."""
    chosen, order = chosen.sort(dim=-1)
    return weights.gather(-1, order), chosen


def _gather_rows(per_expert: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """per_expert: [E, T, ...] (every expert on every token) -> [T, k, ...] (token t's k experts)."""
    tokens = torch.arange(chosen.shape[0], device=chosen.device)[:, None]
    return per_expert[chosen, tokens]


def _weighted_sum(y: torch.Tensor, weights: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """y: [T, k, hidden], weights: [T, k] -> sum over k in slot order, accumulated in ``dtype``
    (as the loop's index_add_ does)."""
    out = torch.zeros(y.shape[0], y.shape[2], dtype=dtype, device=y.device)
    for s in range(y.shape[1]):
        out = out + (y[:, s] * weights[:, s, None]).to(dtype)
    return out


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

    def __init__(self, w, prefix: str, *, hidden: int, inter: int, moe: GptOssMoEConfig,
                 tp: TensorParallel = SINGLE):
        e = moe.num_experts
        self.moe, self.tp = moe, tp
        self.router = Linear.load(w, f"{prefix}router", e, hidden)
        p = f"{prefix}experts."
        i0, i1 = tp.span(inter)                  # gate / up columns interleave: pairs i0..i1
        self.gate_up = w.get(f"{p}gate_up_proj", shape=(e, hidden, 2 * inter),
                             span=(2 * i0, 2 * i1), dim=2)
        self.gate_up_bias = w.get(f"{p}gate_up_proj_bias", shape=(e, 2 * inter),
                                  span=(2 * i0, 2 * i1), dim=1)
        self.down = w.get(f"{p}down_proj", shape=(e, inter, hidden), span=(i0, i1), dim=1)
        self.down_bias = w.get(f"{p}down_proj_bias", shape=(e, hidden))
        if tp.rank:
            self.down_bias = torch.zeros_like(self.down_bias)    # rank 0 adds it

    def _swiglu(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate = gate_up[..., ::2].clamp(max=self.moe.swiglu_limit)
        up = gate_up[..., 1::2].clamp(-self.moe.swiglu_limit, self.moe.swiglu_limit)
        return (up + 1) * gate * torch.sigmoid(gate * self.moe.swiglu_alpha)

    def __call__(self, x: torch.Tensor, ctx=None) -> torch.Tensor:
        top, chosen = torch.topk(self.router(x), self.moe.top_k, dim=-1)     # [T, k]
        weights = torch.softmax(top, dim=-1)
        if ctx is not None and ctx.static:
            return self.tp.all_reduce(self._static(x, *_in_expert_order(weights, chosen)))
        out = torch.zeros_like(x)
        for expert in chosen.unique().tolist():          # only experts some token picked
            token, slot = torch.where(chosen == expert)
            h = self._swiglu(x[token] @ self.gate_up[expert] + self.gate_up_bias[expert])
            y = h @ self.down[expert] + self.down_bias[expert]
            out.index_add_(0, token, y * weights[token, slot, None])
        return self.tp.all_reduce(out)

    def _static(self, x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        if chosen.numel() < self.moe.num_experts:        # gather the chosen experts' weights
            h = self._swiglu(torch.einsum("th,tkhj->tkj", x, self.gate_up[chosen])
                             + self.gate_up_bias[chosen])
            y = torch.einsum("tki,tkih->tkh", h, self.down[chosen]) + self.down_bias[chosen]
        else:                                            # every expert on every token
            h = self._swiglu(torch.matmul(x, self.gate_up) + self.gate_up_bias[:, None])
            y = _gather_rows(torch.matmul(h, self.down) + self.down_bias[:, None], chosen)
        return _weighted_sum(y, weights, x.dtype)


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
    """DeepSeek experts (V2, V3, Kimi-K2). The router (routing.py) gives each token top_k
    SwiGLU experts and their float32 weights; the shared experts' MLP is added for every
    token.

    gate.weight: [E, hidden] and, for noaux_tc, gate.e_score_correction_bias: [E] (both kept
    float32, as transformers keeps them); experts either per expert
    (experts.{e}.{gate,up,down}_proj.weight, as saved) or fused (experts.gate_up_proj
    [E, 2I, hidden] gate rows first, experts.down_proj [E, hidden, I], as in memory). Held as
    gate_up [E, 2I, hidden] and down [E, hidden, I]; ``experts[e]`` are GatedMLPs over views.
    """

    def __init__(self, w, prefix: str, *, hidden: int, moe: DeepseekMoEConfig, act: str,
                 tp: TensorParallel = SINGLE):
        self.moe, self.tp = moe, tp
        e, inter = moe.num_experts, moe.inter
        i0, i1 = tp.span(inter)
        self.inter = i1 - i0                     # this rank's slice of each expert
        self.router = w.get(f"{prefix}gate.weight", shape=(e, hidden), dtype=torch.float32)
        self.bias = None
        if moe.topk_method == "noaux_tc":
            self.bias = w.get(f"{prefix}gate.e_score_correction_bias", shape=(e,),
                              dtype=torch.float32)
        p = f"{prefix}experts."
        if w.has(f"{p}gate_up_proj"):
            fused = lambda a, b: w.get(f"{p}gate_up_proj", shape=(e, 2 * inter, hidden),  # noqa: E731
                                       span=(a, b), dim=1)
            self.gate_up = torch.cat([fused(i0, i1), fused(inter + i0, inter + i1)], dim=1)
            self.down = w.get(f"{p}down_proj", shape=(e, hidden, inter), span=(i0, i1), dim=2)
        else:
            one = lambda i, name, shape, dim: w.get(f"{p}{i}.{name}.weight", shape=shape,  # noqa: E731
                                                    span=(i0, i1), dim=dim)
            self.gate_up = torch.stack([torch.cat([one(i, "gate_proj", (inter, hidden), 0),
                                                   one(i, "up_proj", (inter, hidden), 0)])
                                        for i in range(e)])
            self.down = torch.stack([one(i, "down_proj", (hidden, inter), 1) for i in range(e)])
        self.act: Callable[[torch.Tensor], torch.Tensor] = activation(act)
        self.experts = [GatedMLP(Linear(self.gate_up[i]), Linear(self.down[i]), self.act)
                        for i in range(e)]
        self.shared = None
        if moe.num_shared:
            self.shared = GatedMLP.load(w, f"{prefix}shared_experts.", hidden=hidden,
                                        inter=inter * moe.num_shared, act=act, tp=tp,
                                        reduce=False)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [T, hidden] -> (weights [T, k] float32, experts [T, k] int64)."""
        return route(F.linear(x.float(), self.router), self.moe, self.bias)

    def __call__(self, x: torch.Tensor, ctx=None) -> torch.Tensor:
        weights, chosen = self.route(x)
        if ctx is not None and ctx.static:
            out = self._static(x, *_in_expert_order(weights, chosen))
        else:
            out = torch.zeros_like(x)
            for expert in chosen.unique().tolist():          # only experts some token picked
                token, slot = torch.where(chosen == expert)
                y = self.experts[expert](x[token]) * weights[token, slot, None]
                out.index_add_(0, token, y.to(x.dtype))
        return self.tp.all_reduce(out if self.shared is None else out + self.shared(x))

    def _static(self, x: torch.Tensor, weights: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        inter = self.inter
        if chosen.numel() < self.moe.num_experts:            # gather the chosen experts' weights
            h = torch.einsum("th,tkjh->tkj", x, self.gate_up[chosen])           # [T, k, 2I]
            y = torch.einsum("tki,tkhi->tkh", self.act(h[..., :inter]) * h[..., inter:],
                             self.down[chosen])
        else:                                                # every expert on every token
            h = torch.matmul(x, self.gate_up.transpose(1, 2))                   # [E, T, 2I]
            y = _gather_rows(torch.matmul(self.act(h[..., :inter]) * h[..., inter:],
                                          self.down.transpose(1, 2)), chosen)  # [T, k, hidden]
        return _weighted_sum(y, weights, x.dtype)


def feed_forward(moe, w, prefix: str, *, layer_id: int, hidden: int, inter: int, act: str,
                 tp: TensorParallel = SINGLE):
    """The MLP of layer ``layer_id`` (``prefix`` = "model.layers.{i}.mlp."); ``moe`` is the
    architecture's experts config or None; ``inter`` the dense MLP width; ``tp`` this rank."""
    if isinstance(moe, GptOssMoEConfig):
        return GptOssMoE(w, prefix, hidden=hidden, inter=inter, moe=moe, tp=tp)
    if isinstance(moe, DeepseekMoEConfig) and layer_id >= moe.first_dense:
        return DeepseekMoE(w, prefix, hidden=hidden, moe=moe, act=act, tp=tp)
    return GatedMLP.load(w, prefix, hidden=hidden, inter=inter, act=act, tp=tp)

"""The dense gated MLP: down(act(gate(x)) * up(x)), SwiGLU (Llama, Qwen, Mistral, DeepSeek) or
GeGLU (Gemma). gate and up run as one GEMM (gate rows first). Under tensor parallelism
(parallel.py) a rank holds its slice of the intermediate: those rows of gate / up and those
columns of down, whose partials are summed over ranks (one all-reduce)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from attnkit.runner.layers import skinny
from attnkit.runner.layers.linear import Linear
from attnkit.runner.layers.parallel import SINGLE, TensorParallel


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name == "silu":
        return F.silu
    if name in ("gelu_pytorch_tanh", "gelu_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    return F.gelu


class GatedMLP:
    """gate_up: weight [2I, hidden] (gate rows, then up rows); down: [hidden, I] (a Linear,
    or a RowParallel over this rank's I). x: [T, hidden] -> [T, hidden]."""

    __slots__ = ("gate_up", "down", "act", "inter")

    def __init__(self, gate_up: Linear, down, act: Callable[[torch.Tensor], torch.Tensor]):
        self.gate_up, self.down, self.act = gate_up, down, act
        self.inter = gate_up.out_features // 2

    @classmethod
    def load(cls, w, prefix: str, *, hidden: int, inter: int, act: str,
             tp: TensorParallel = SINGLE, reduce: bool = True) -> "GatedMLP":
        """``prefix``{gate,up,down}_proj.weight (+ .bias if present) of the model's Weights:
        this rank's ``tp.span(inter)`` of the intermediate. reduce False: the output is this
        rank's partial (the caller sums it with others, e.g. the routed experts')."""
        rows = tp.span(inter)
        gate_up = Linear.stack([Linear.load(w, f"{prefix}gate_proj", inter, hidden, rows=rows),
                                Linear.load(w, f"{prefix}up_proj", inter, hidden, rows=rows)])
        down = Linear.load_row_parallel(w, f"{prefix}down_proj", hidden, inter, tp=tp, cols=rows,
                                        reduce=reduce)
        return cls(gate_up, down, activation(act))

    def folds(self, h: torch.Tensor) -> bool:
        """Whether a step of residual stream h can run as two skinny.project: the norm before
        gate_up, silu(gate) * up before down and the residual add in it (``__call__``)."""
        return (self.act is F.silu and skinny.usable(h, self.gate_up)
                and skinny.usable(h, self.down))

    def __call__(self, x: torch.Tensor, ctx=None, *, norm: tuple | None = None,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
        """x: [T, hidden] -> [T, hidden]. With ``norm`` and ``residual`` (only where
        ``folds``): x is the residual stream, and the result residual + mlp(norm(x))."""
        if norm is not None:
            gate_up = skinny.project(x, self.gate_up, norm=norm)
            return skinny.project(gate_up, self.down, silu=True, residual=residual)
        gate_up = self.gate_up(x)
        if self.act is F.silu and gate_up.dim() == 2:
            from attnkit.runner.layers import fused

            if fused.enabled(gate_up):                # one kernel for silu(gate) * up
                return self.down(fused.silu_mul(gate_up))
        gate, up = gate_up.split(self.inter, dim=-1)
        return self.down(self.act(gate) * up)

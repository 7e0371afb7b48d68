"""The two building blocks every part of a block uses: a linear map and RMSNorm.

Weights use Hugging Face's names and layouts (``name.weight`` [out, in], ``name.bias`` [out]).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attnkit.runner.weights import Weights


@dataclass(frozen=True, slots=True)
class Linear:
    """weight: [out, in]; bias: [out] | None. x: [..., in] -> [..., out]."""
    weight: torch.Tensor
    bias: torch.Tensor | None = None
    weight_t: torch.Tensor | None = field(default=None, repr=False)   # weight.t(), a view

    def __post_init__(self):
        object.__setattr__(self, "weight_t", self.weight.t())       # frozen: never stale

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # For 2-D x, F.linear runs exactly mm(x, weight.t()) (addmm with a bias); calling
        # those with the transpose taken once skips linear's dispatch and the per-call t().
        if x.dim() != 2:
            return F.linear(x, self.weight, self.bias)
        if self.bias is None:
            return torch.mm(x, self.weight_t)
        return torch.addmm(self.bias, x, self.weight_t)

    @classmethod
    def load(cls, w: Weights, name: str, out: int, inp: int) -> "Linear":
        """``name``.weight [out, in] and, if the checkpoint has it, ``name``.bias [out]."""
        return cls(w.get(f"{name}.weight", shape=(out, inp)), w.maybe(f"{name}.bias", shape=(out,)))


@dataclass(frozen=True, slots=True)
class NormStyle:
    """How a family's RMSNorm applies its weight (see ``rms_norm``)."""
    eps: float
    offset: float = 0.0            # multiply by (offset + w): Gemma's (1 + w)
    weight_in_fp32: bool = False   # apply w before casting back (Gemma, gpt-oss)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, style: NormStyle) -> torch.Tensor:
    """x: [..., N]; weight: [N] -> (offset + weight) * x / rms(x), normalised in float32 like
    transformers. Llama casts back to x's dtype before the weight; Gemma and gpt-oss after it
    (``weight_in_fp32``). Only low-precision results differ."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + style.eps)
    if style.weight_in_fp32:
        w = weight.float()
        return cast(xf * (w if style.offset == 0 else style.offset + w), x.dtype)
    w = weight if style.offset == 0 else style.offset + weight    # 0 + w is w: skip the op
    return w * cast(xf, x.dtype)


def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x.to(dtype)``, without the call when x already has it (a no-op that still costs a
    dispatch, per layer)."""
    return x if x.dtype == dtype else x.to(dtype)

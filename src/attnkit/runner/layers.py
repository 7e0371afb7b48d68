"""The two building blocks every part of a block uses: a linear map and RMSNorm.

Weights use Hugging Face's names and layouts (``name.weight`` [out, in], ``name.bias`` [out]).
"""
from __future__ import annotations

from dataclasses import dataclass

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
        return (xf * (style.offset + weight.float())).to(x.dtype)
    return (style.offset + weight) * xf.to(x.dtype)

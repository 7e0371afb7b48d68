"""RMSNorm as each family applies its weight, and the dtype cast every layer uses."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class NormStyle:
    """How a family's RMSNorm applies its weight (see ``rms_norm``)."""
    eps: float
    offset: float = 0.0            # multiply by (offset + w): Gemma's (1 + w)
    weight_in_fp32: bool = False   # apply w before casting back (Gemma, gpt-oss)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, style: NormStyle) -> torch.Tensor:
    """x: [..., N]; weight: [N] -> (offset + weight) * x / rms(x), normalised in float32 like
    transformers. Llama casts back to x's dtype before the weight; Gemma and gpt-oss after it
    (``weight_in_fp32``). Only low-precision results differ. On CUDA one fused kernel
    (fused.py) computes the same."""
    from attnkit.runner.layers import fused

    if fused.enabled(x):
        return fused.rms_norm(x, weight, style)
    return _rms_norm(x, weight, style)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 style: NormStyle) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(residual + x), residual + x): the residual add and the next norm, one kernel
    on CUDA. x, residual: [..., N] in one dtype."""
    from attnkit.runner.layers import fused

    if fused.enabled(x):
        return fused.rms_norm(x, weight, style, residual=residual)
    h = residual + x
    return _rms_norm(h, weight, style), h


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, style: NormStyle) -> torch.Tensor:
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

"""Which rotary frequencies a model uses: RoPE's inverse frequencies and attention factor.

One place for every family (runner/rotary.py applies the result). With d = rotary_dim and
base theta, plain RoPE rotates feature pair j by ``t * f_j`` with ``f_j = theta ** (-2j / d)``;
the scaled types change the f_j and may scale cos/sin (the "attention factor" a):

- ``default``: f_j as is, a = 1.
- ``linear``:  f_j / factor.
- ``llama3``:  Llama-3.1. With wavelength w_j = 2*pi / f_j and L = original_max_position_embeddings:
  w_j < L / high_freq_factor keeps f_j; w_j > L / low_freq_factor uses f_j / factor; in between
  blend linearly in s = (L / w_j - low) / (high - low): (1 - s) * f_j / factor + s * f_j.
- ``yarn``:    YaRN (gpt-oss, DeepSeek). Feature pairs below a correction range keep f_j, pairs
  above it use f_j / factor, a linear ramp blends the range. The range comes from
  beta_fast / beta_slow (rotations per L): pair index r(b) = d * ln(L / (2*pi*b)) / (2 ln theta),
  from r(beta_fast) to r(beta_slow), floored / ceiled unless ``truncate`` is false, clipped to
  [0, d - 1]. a = attention_factor if given, else m(factor, mscale) / m(factor, mscale_all_dim)
  when both are set, else m(factor, 1), with m(s, k) = 0.1 * k * ln(s) + 1 for s > 1, else 1.

Config format: transformers 5 writes ``rope_parameters`` (rope_theta inside); older configs
``rope_scaling`` plus a top-level ``rope_theta``. The attention factor multiplies the rotated
features of q and of k (so the rotary part of a logit grows by a**2); DeepSeek's separate
softmax mscale is the planner's (attnkit.model.config sets the layer's scale).
This module is torch-free except ``inv_freq``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from attnkit.errors import fail

ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True, slots=True)
class RopeConfig:
    """A model's rotary recipe. ``params`` holds the type's own fields (factor, ...)."""
    rope_type: str
    theta: float
    rotary_dim: int                  # features per head that rotate (partial rotary)
    params: tuple[tuple[str, object], ...] = ()
    attention_factor: float = 1.0    # multiplies cos and sin

    def get(self, key: str, default=None):
        return dict(self.params).get(key, default)


def rope_config(cfg: dict, head_dim: int) -> RopeConfig:
    """The RopeConfig of a parsed config.json whose rotated head width (before any
    partial_rotary_factor) is ``head_dim``; AK480 for a rope type the runner lacks."""
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    if isinstance(params.get("full_attention"), dict):
        params = dict(params["full_attention"])        # per-layer-type rope parameters
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        fail("AK480", f"rope type {rope_type!r} is not one the runner computes (it has "
                      f"{', '.join(ROPE_TYPES)})",
             field="rope_parameters.rope_type", expected=list(ROPE_TYPES), actual=rope_type)
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    partial = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    rotary_dim = int(head_dim * partial)
    if rope_type == "default":
        return RopeConfig("default", theta, rotary_dim)
    factor = params.get("factor")
    # transformers: a top-level original_max_position_embeddings (Phi-3) wins over the one
    # in the rope parameters; without either, max_position_embeddings.
    original = cfg.get("original_max_position_embeddings") or params.get(
        "original_max_position_embeddings") or cfg.get("max_position_embeddings")
    if rope_type == "yarn" and factor is None and original:
        factor = cfg.get("max_position_embeddings", original) / original
    _need(rope_type, "factor", factor)
    keep = {"factor": float(factor)}
    if rope_type == "llama3":
        for key in ("low_freq_factor", "high_freq_factor"):
            _need(rope_type, key, params.get(key))
            keep[key] = float(params[key])
    if rope_type in ("llama3", "yarn"):
        _need(rope_type, "original_max_position_embeddings", original)
        keep["original_max_position_embeddings"] = float(original)
    factor_a = 1.0
    if rope_type == "yarn":
        keep.update(beta_fast=float(params.get("beta_fast") or 32),
                    beta_slow=float(params.get("beta_slow") or 1),
                    truncate=bool(params.get("truncate", True)))
        factor_a = _yarn_attention_factor(params, keep["factor"])
    return RopeConfig(rope_type, theta, rotary_dim, tuple(sorted(keep.items())), factor_a)


def _need(rope_type: str, key: str, value) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        fail("AK480", f"rope type {rope_type!r} needs a positive number in rope_parameters."
                      f"{key}, got {value!r}", field=f"rope_parameters.{key}",
             expected="a number > 0", actual=value)


def yarn_mscale(scale: float, k: float = 1.0) -> float:
    """m(s, k) = 0.1 * k * ln(s) + 1 for s > 1, else 1."""
    return 0.1 * k * math.log(scale) + 1.0 if scale > 1 else 1.0


def _yarn_attention_factor(params: dict, factor: float) -> float:
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])
    mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
    if mscale and mscale_all:
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all)
    return yarn_mscale(factor)


def inv_freq(rope: RopeConfig, *, device=None):
    """f_j for j < rotary_dim / 2 as a float64 tensor [rotary_dim // 2] (see the module doc)."""
    import torch

    d = rope.rotary_dim
    f = rope.theta ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)
    if rope.rope_type == "default":
        return f
    factor = rope.get("factor")
    if rope.rope_type == "linear":
        return f / factor
    original = rope.get("original_max_position_embeddings")
    if rope.rope_type == "llama3":
        low, high = rope.get("low_freq_factor"), rope.get("high_freq_factor")
        wavelen = 2 * math.pi / f
        s = (original / wavelen - low) / (high - low)
        blended = (1 - s) * f / factor + s * f
        out = torch.where(wavelen > original / low, f / factor, f)
        middle = (wavelen >= original / high) & (wavelen <= original / low)
        return torch.where(middle, blended, out)
    # yarn
    def pair(rotations: float) -> float:
        return d * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(rope.theta))

    lo, hi = pair(rope.get("beta_fast")), pair(rope.get("beta_slow"))
    if rope.get("truncate"):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if lo == hi:
        hi += 0.001                                   # a zero-width ramp would divide by 0
    ramp = ((torch.arange(d // 2, dtype=torch.float64, device=device) - lo) / (hi - lo)).clamp(0, 1)
    return f / factor * ramp + f * (1 - ramp)

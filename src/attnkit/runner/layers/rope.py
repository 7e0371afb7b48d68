"""Which rotary frequencies a model uses: RoPE's inverse frequencies and attention factor.

One place for every family (rotary.py applies the result). With d = rotary_dim and
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
``rope_scaling`` plus a top-level ``rope_theta`` (where both are set, ``rope_scaling`` wins, as
in transformers 5 and the planner). Every value is read by the planner's typed reader
(``ConfigReader``): a malformed one is AK503 / AK504 / AK505 naming the field; theta must be
a finite number > 0 (theta <= 0 gives NaN frequencies), the rotated width an even number of
features in (0, head_dim]. The attention factor multiplies the rotated
features of q and of k (so the rotary part of a logit grows by a**2); DeepSeek's separate
softmax mscale is the planner's (attnkit.model.config sets the layer's scale).
This module is torch-free except ``inv_freq``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from attnkit.errors import fail
from attnkit.model._fields import ConfigReader

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


def rope_config(cfg: dict | ConfigReader, head_dim: int) -> RopeConfig:
    """The RopeConfig of a parsed config.json whose rotated head width (before any
    partial_rotary_factor) is ``head_dim``; AK480 for a rope type the runner lacks, AK5xx for
    a malformed value."""
    top = cfg if isinstance(cfg, ConfigReader) else ConfigReader(cfg, source="config.json")
    params = _rope_parameters(top)
    rope_type = params.str("rope_type", default=None) or params.str("type", default="default")
    if rope_type not in ROPE_TYPES:
        fail("AK480", f"rope type {rope_type!r} is not one the runner computes (it has "
                      f"{', '.join(ROPE_TYPES)})",
             field=params.path("rope_type"), expected=list(ROPE_TYPES), actual=rope_type)
    theta = _either(params, top, "rope_theta", 10000.0)
    rotary_dim = _rotary_dim(params, top, head_dim)
    if rope_type == "default":
        return RopeConfig("default", theta, rotary_dim)
    factor = params.float("factor", default=None)
    # transformers: a top-level original_max_position_embeddings (Phi-3) wins over the one
    # in the rope parameters; without either, max_position_embeddings.
    original = (top.int("original_max_position_embeddings", default=None, minimum=0)
                or params.int("original_max_position_embeddings", default=None, minimum=0)
                or top.int("max_position_embeddings", default=None, minimum=0))
    if rope_type == "yarn" and factor is None and original:
        factor = top.int("max_position_embeddings", default=original) / original
    keep = {"factor": factor if factor is not None else params.float("factor")}
    if rope_type == "llama3":
        for key in ("low_freq_factor", "high_freq_factor"):
            keep[key] = params.float(key)
    if rope_type in ("llama3", "yarn"):
        if original is None:
            params.int("original_max_position_embeddings")          # AK503 naming it
        keep["original_max_position_embeddings"] = float(original)
    factor_a = 1.0
    if rope_type == "yarn":
        if theta == 1.0:
            raise params.error("AK505", "rope_theta", "YaRN's correction range divides by "
                               "ln(rope_theta): rope_theta must not be 1", expected="!= 1",
                               actual=theta)
        keep.update(beta_fast=_or_default(params, "beta_fast", 32.0),
                    beta_slow=_or_default(params, "beta_slow", 1.0),
                    truncate=params.flag("truncate", default=True))
        factor_a = _yarn_attention_factor(params, keep["factor"])
    return RopeConfig(rope_type, theta, rotary_dim, tuple(sorted(keep.items())), factor_a)


def _rope_parameters(top: ConfigReader) -> ConfigReader:
    """rope_scaling, else rope_parameters (per layer type: the full-attention layers' entry),
    else an empty reader; AK504 when the field is not a JSON object."""
    params = top.sub("rope_scaling")
    if params is None or not params.cfg:            # transformers: rope_scaling or rope_parameters
        params = top.sub("rope_parameters")
    if params is None:
        return ConfigReader({}, source=top.source, prefix=top.path("rope_parameters."))
    if isinstance(params.cfg.get("full_attention"), dict):
        return params.sub("full_attention")              # per-layer-type rope parameters
    return params


def _either(params: ConfigReader, top: ConfigReader, key: str, default: float) -> float:
    """A number > 0 from the rope parameters, else from the top level, else ``default``."""
    value = params.float(key, default=None)
    return value if value is not None else top.float(key, default=default)


def _rotary_dim(params: ConfigReader, top: ConfigReader, head_dim: int) -> int:
    """Features per head that rotate: head_dim * partial_rotary_factor, an even number > 0."""
    reader = params if params.has("partial_rotary_factor") else top
    partial = reader.float("partial_rotary_factor", default=1.0)
    dim = int(head_dim * partial)
    if partial > 1 or dim < 2 or dim % 2:
        raise reader.error("AK505", "partial_rotary_factor",
                           f"{reader.path('partial_rotary_factor')} = {partial} rotates {dim} of "
                           f"{head_dim} features per head; RoPE rotates pairs: an even number "
                           f"in 2 .. {head_dim}", expected="in (0, 1], an even rotated width",
                           actual=partial)
    return dim


def _or_default(params: ConfigReader, key: str, default: float) -> float:
    """transformers' ``params.get(key) or default``: unset, null or 0 take the default;
    anything else must be a number > 0."""
    value = params.float(key, default=None, positive=False)
    return params.float(key) if value else default


def yarn_mscale(scale: float, k: float = 1.0) -> float:
    """m(s, k) = 0.1 * k * ln(s) + 1 for s > 1, else 1."""
    return 0.1 * k * math.log(scale) + 1.0 if scale > 1 else 1.0


def _yarn_attention_factor(params: ConfigReader, factor: float) -> float:
    given = params.float("attention_factor", default=None)
    if given is not None:
        return given
    mscale = _or_default(params, "mscale", 0.0)
    mscale_all = _or_default(params, "mscale_all_dim", 0.0)
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

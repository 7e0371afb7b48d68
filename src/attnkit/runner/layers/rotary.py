"""Rotary position embeddings: RoPE (every family, every rope type) and the dual-chunk
(DCA) rotation.

RoPE rotates the first ``rotary_dim`` features of each head. Feature pair j turns by the angle
t * f_j at position t, with f_j from rope.py (default, linear, llama3, yarn), and cos
and sin are multiplied by the rope type's attention factor. Two layouts of the pairs:
- neox (rotate-half; Llama, Qwen, Gemma, gpt-oss): pair j is features (j, j + rotary_dim / 2);
- interleaved (DeepSeek-V2 as transformers runs it): pair j is features (2j, 2j + 1).
``Rotary`` is one model's RoPE; ``apply_rope`` is plain RoPE from a base (used by DCA). A step
computes its cos / sin once (``RopeTable``: ``Rotary.table``, ``DualChunkRotary.tables``) and
every layer rotates with it.
Angles are computed in float64 (positions reach 10^6), the rotation in float32.

DCA (shared/DUAL_CHUNK.md): cs = chunk_size, ls = local_size, cl = cs - ls.
- keys are rotated at the chunk-local position ``k % cl`` (and cached that way);
- each query p (i = p % cl) is rotated three ways, stacked on dim 1 in this order:
  intra ``i``, successor ``min(i + cl, cs)``, inter ``min(2 * cl - 1, cs)``.
- length scale ``s = max(1, 0.1 * ln(L / omax) + 1)`` (omax = original_max_position_embeddings
  > 0, else s = 1) multiplies the rotated keys and all three query variants, so logits grow
  by s². L is chosen by the caller, per request: ``step_length_scales`` uses the KV length
  after the step (the whole prompt for a prefill in one go, the current length in decode)
  unless ``lengths`` names the whole prompt length for a prefill split in pieces.
  Keys keep the s of the step that cached them; nothing is rescaled later.
The backend (attnkit.backends.dual_chunk) knows nothing of positions: it gets these tensors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from attnkit.backends.dual_chunk.config import require_valid_config
from attnkit.errors import fail
from attnkit.model.spec import DualChunkConfig
from attnkit.runner.layers.norm import cast
from attnkit.runner.layers.rope import RopeConfig, inv_freq

VARIANTS = ("intra", "successor", "inter")      # order of dim 1 of the DCA queries


def rope_cos_sin(positions: torch.Tensor, *, rotary_dim: int, base: float,
                 freqs: torch.Tensor | None = None, factor: float = 1.0):
    """positions: [N] int -> cos, sin: [N, rotary_dim // 2] float32, times ``factor``.
    freqs: [rotary_dim // 2] float64 (default: base ** (-2j / rotary_dim))."""
    if freqs is None:
        freqs = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64,
                                       device=positions.device) / rotary_dim)
    angles = positions.to(torch.float64)[:, None] * freqs.to(positions.device)[None, :]
    if factor == 1.0:                           # x * 1.0 is x: skip two ops per step
        return angles.cos().float(), angles.sin().float()
    return (angles.cos() * factor).float(), (angles.sin() * factor).float()


@dataclass(frozen=True, slots=True)
class RopeTable:
    """cos and sin at a set of positions, laid out for ``rotate``; a step builds one and every
    layer uses it.

    cos, sin: [N, 1, rd] float32 (rd = rotary_dim). Feature pair j's cos sits on both of its
    features; its sin is signed for the swap, -sin on the pair's first feature and +sin on the
    second. Rotating is then ``x * cos + swap(x) * sin``, where swap exchanges the two features
    of each pair (neox: the halves; interleaved: neighbours): the same products and sums as
    (x1 cos - x2 sin, x2 cos + x1 sin), so the same bits, in fewer ops.
    """
    cos: torch.Tensor
    sin: torch.Tensor
    interleaved: bool = False

    @classmethod
    def build(cls, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False) -> "RopeTable":
        """cos, sin: [N, rd / 2] float32 (as ``rope_cos_sin`` returns them)."""
        if interleaved:
            c = torch.stack([cos, cos], dim=-1).flatten(-2)
            s = torch.stack([-sin, sin], dim=-1).flatten(-2)
        else:
            c, s = torch.cat([cos, cos], dim=-1), torch.cat([-sin, sin], dim=-1)
        return cls(c[:, None], s[:, None], interleaved)

    def in_halves(self) -> "RopeTable":
        """The same angles laid out for neox halves (DeepSeek-V3.2's indexer rotates so while
        its MLA uses interleaved pairs)."""
        if not self.interleaved:
            return self
        return RopeTable.build(self.cos[:, 0, 0::2], self.sin[:, 0, 1::2], interleaved=False)

    def rotate(self, x: torch.Tensor, *, scale: torch.Tensor | float = 1.0) -> torch.Tensor:
        """x: [N, H, D]. Rotates the first rd features; the rest pass through. ``scale`` (a
        float or [N]) multiplies the whole result. Returns x's shape and dtype."""
        if x.shape[0] != self.cos.shape[0]:       # a table of another step would broadcast
            fail("AK411", f"rotary table of {self.cos.shape[0]} position(s) applied to "
                          f"{x.shape[0]} token(s)", field="x.shape[0]",
                 expected=self.cos.shape[0], actual=x.shape[0])
        rd = self.cos.shape[-1]
        if not isinstance(scale, torch.Tensor) and scale == 1.0 and x.stride(-1) == 1:
            from attnkit.runner.layers import fused

            if fused.enabled(x):
                return fused.rope(x, self.cos, self.sin, interleaved=self.interleaved)
        xf = x.float()
        part = xf if rd == xf.shape[-1] else xf[..., :rd]
        if self.interleaved:
            swapped = torch.stack([part[..., 1::2], part[..., 0::2]], dim=-1).flatten(-2)
        else:
            swapped = torch.cat([part[..., rd // 2:], part[..., :rd // 2]], dim=-1)
        out = part * self.cos + swapped * self.sin
        if rd != xf.shape[-1]:
            out = torch.cat([out, xf[..., rd:]], dim=-1)
        if isinstance(scale, torch.Tensor):
            out = out * scale.to(device=out.device, dtype=torch.float32).view(-1, 1, 1)
        elif scale != 1.0:
            out = out * scale
        return cast(out, x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, interleaved: bool = False,
           scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """x: [N, H, D]; cos, sin: [N, rd / 2] float32. Rotates the first rd features (neox or
    interleaved pairs); the rest pass through. ``scale`` (a float or [N]) multiplies the
    whole result. Returns x's shape and dtype. (Per step, build a RopeTable once instead.)"""
    return RopeTable.build(cos, sin, interleaved=interleaved).rotate(x, scale=scale)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, *, base: float,
               rotary_dim: int | None = None, scale: torch.Tensor | float = 1.0) -> torch.Tensor:
    """Rotate x: [N, H, D] at positions [N] (plain RoPE, neox form); features past rotary_dim
    pass through. ``scale`` (a float or [N]) multiplies the result. Returns x's shape and dtype."""
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    cos, sin = rope_cos_sin(positions, rotary_dim=rd, base=base)
    return rotate(x, cos, sin, scale=scale)


class Rotary:
    """One model's RoPE: ``table = rotary.table(positions)`` once per step, then
    ``rotary(x, table)`` for q [T, H_q, D] and k [T, H_kv, D] of every layer."""

    def __init__(self, rope: RopeConfig, *, interleaved: bool = False,
                 device: torch.device | str | None = None):
        self.rope = rope
        self.interleaved = interleaved
        self.freqs = inv_freq(rope, device=device)               # [rotary_dim // 2] float64

    def table(self, positions: torch.Tensor) -> RopeTable:
        """positions: [T] int -> the RopeTable [T, 1, rotary_dim] (attention factor in)."""
        cos, sin = rope_cos_sin(positions, rotary_dim=self.rope.rotary_dim, base=self.rope.theta,
                                freqs=self.freqs, factor=self.rope.attention_factor)
        return RopeTable.build(cos, sin, interleaved=self.interleaved)

    def __call__(self, x: torch.Tensor, table: RopeTable) -> torch.Tensor:
        return table.rotate(x)

    def pair(self, q: torch.Tensor, k: torch.Tensor, table: RopeTable):
        """(rotate(q), rotate(k)): one fused launch for both on CUDA."""
        from attnkit.runner.layers import fused

        if q.shape[-1] == k.shape[-1] and q.stride(-1) == k.stride(-1) == 1 \
                and q.shape[0] == table.cos.shape[0] and fused.enabled(q):
            return fused.rope(q, table.cos, table.sin, interleaved=table.interleaved, other=k)
        return table.rotate(q), table.rotate(k)


def dca_length_scale(length: int, original_max_position_embeddings: int) -> float:
    """s = max(1, 0.1 * ln(L / omax) + 1); 1 when omax is 0 (scale off)."""
    if length < 1:
        fail("AK474", f"the DCA length scale needs a length >= 1, got {length}",
             field="length", expected=">= 1", actual=length)
    omax = original_max_position_embeddings
    if omax <= 0:
        return 1.0
    return max(1.0, 0.1 * math.log(length / omax) + 1.0)


def step_length_scales(meta, config: DualChunkConfig, *,
                       lengths: Sequence[int] | None = None) -> torch.Tensor:
    """Per-token length scale [T] float32 on meta's device: request i's tokens get
    s(L_i) with L_i = lengths[i] if given, else meta.seq_lens_cpu[i] (KV length after the
    step). Pass the whole prompt lengths to make a prefill in pieces scale like one in one go."""
    lens = list(meta.seq_lens_cpu) if lengths is None else list(lengths)
    if len(lens) != meta.num_reqs:
        fail("AK474", f"lengths names {len(lens)} request(s), the batch has {meta.num_reqs}",
             field="lengths", expected=meta.num_reqs, actual=len(lens))
    omax = config.original_max_position_embeddings
    per_req = [dca_length_scale(n, omax) for n in lens]
    per_tok = [s for s, n in zip(per_req, meta.query_lens_cpu) for _ in range(n)]
    return torch.tensor(per_tok, dtype=torch.float32, device=meta.seq_lens.device)


def decode_length_scales(meta, config: DualChunkConfig) -> torch.Tensor:
    """``step_length_scales`` of a DECODE step (one token per request, L its KV length) from
    the device's seq_lens, with no host list: what a captured step computes. The same
    float64 formula, so the same float32 values up to the last bit of a logarithm."""
    omax = config.original_max_position_embeddings
    if omax <= 0:
        return torch.ones(meta.seq_lens.shape[0], dtype=torch.float32, device=meta.seq_lens.device)
    s = 0.1 * torch.log(meta.seq_lens.to(torch.float64) / omax) + 1.0
    return s.clamp(min=1.0).to(torch.float32)


class DualChunkRotary:
    """The DCA rotation of one model: ``q3, k = rotary(q, k, positions, length_scale=s)``.

    q: [T, H_q, D], k: [T, H_kv, D] raw projections; positions: [T] absolute positions;
    length_scale: a float or [T] (see step_length_scales).
    -> q3 [T, 3, H_q, D] (intra, successor, inter), k [T, H_kv, D] at chunk-local positions;
    both in the input dtype, both multiplied by the length scale.
    """

    def __init__(self, config: DualChunkConfig, *, base: float, rotary_dim: int | None = None):
        self.chunk_len = require_valid_config(config)
        self.config = config
        self.base = base
        self.rotary_dim = rotary_dim

    def positions(self, positions: torch.Tensor) -> dict[str, torch.Tensor]:
        """The rotation positions [T] of keys ("key") and of each query variant."""
        cs, cl = self.config.chunk_size, self.chunk_len
        local = positions % cl
        return {"key": local, "intra": local,
                "successor": (local + cl).clamp(max=cs),
                "inter": torch.full_like(positions, min(2 * cl - 1, cs))}

    def tables(self, positions: torch.Tensor, *, rotary_dim: int) -> dict[str, RopeTable]:
        """The RopeTable of keys ("key") and of each query variant at positions [T]: built once
        per step, shared by every layer (keys and intra queries share one)."""
        pos = self.positions(positions)

        def table(p: torch.Tensor) -> RopeTable:
            return RopeTable.build(*rope_cos_sin(p, rotary_dim=rotary_dim, base=self.base))

        local = table(pos["key"])
        return {"key": local, "intra": local, "successor": table(pos["successor"]),
                "inter": table(pos["inter"])}

    def keys(self, k: torch.Tensor, positions: torch.Tensor, *,
             length_scale: torch.Tensor | float = 1.0,
             tables: dict[str, RopeTable] | None = None) -> torch.Tensor:
        self._check(k, positions, length_scale)
        if tables is None:
            tables = self.tables(positions, rotary_dim=self.rotary_dim_of(k))
        return tables["key"].rotate(k, scale=length_scale)

    def queries(self, q: torch.Tensor, positions: torch.Tensor, *,
                length_scale: torch.Tensor | float = 1.0,
                tables: dict[str, RopeTable] | None = None) -> torch.Tensor:
        self._check(q, positions, length_scale)
        if tables is None:
            tables = self.tables(positions, rotary_dim=self.rotary_dim_of(q))
        return torch.stack([tables[name].rotate(q, scale=length_scale) for name in VARIANTS], dim=1)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, *,
                 length_scale: torch.Tensor | float = 1.0,
                 tables: dict[str, RopeTable] | None = None):
        """``tables``: this step's ``self.tables(positions, ...)`` (None: computed here)."""
        return (self.queries(q, positions, length_scale=length_scale, tables=tables),
                self.keys(k, positions, length_scale=length_scale, tables=tables))

    def rotary_dim_of(self, x: torch.Tensor) -> int:
        """Features per head that rotate: rotary_dim, or all of x's last dim when unset."""
        return x.shape[-1] if self.rotary_dim is None else self.rotary_dim

    @staticmethod
    def _check(x: torch.Tensor, positions: torch.Tensor, length_scale) -> None:
        n = x.shape[0]
        if positions.dim() != 1 or positions.shape[0] != n or positions.is_floating_point():
            fail("AK474", f"positions must be [T] integers with T = {n} tokens, got "
                          f"{list(positions.shape)} {positions.dtype}",
                 field="positions", expected=[n], actual=list(positions.shape))
        if isinstance(length_scale, torch.Tensor) and length_scale.numel() != n:
            fail("AK474", f"length_scale must be a float or [T] with T = {n}, got "
                          f"{list(length_scale.shape)}",
                 field="length_scale", expected=[n], actual=list(length_scale.shape))

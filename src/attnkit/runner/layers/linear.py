"""A linear map with Hugging Face's weight layout (``name.weight`` [out, in], ``name.bias`` [out]).

``row_by_row()`` (the engine enters it for plans with ``--require batch-invariant``): every 2-D
product inside runs one token row at a time, so a row's bits never depend on how many rows
share the GEMM (a GEMM library picks its tiling, and so its summation order, by M). Slow by
design; the mode's cost is measured by benchmarks/bench_deterministic.py.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from attnkit.runner.models.weights import Weights


# Whether 2-D products run one row at a time (a mode like torch.no_grad: set for one forward
# by the engine, read here; never set elsewhere).
_ROW_BY_ROW = contextvars.ContextVar("attnkit_row_by_row", default=False)


@contextmanager
def row_by_row(on: bool = True):
    """Within: ``Linear`` and ``linear`` compute [T, in] x [in, out] as T products of one row."""
    token = _ROW_BY_ROW.set(bool(on))
    try:
        yield
    finally:
        _ROW_BY_ROW.reset(token)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear (x [..., in], weight [out, in]), one row at a time inside ``row_by_row``."""
    if _ROW_BY_ROW.get() and x.dim() == 2 and x.shape[0] > 1:
        return torch.cat([F.linear(x[i:i + 1], weight, bias) for i in range(x.shape[0])])
    return F.linear(x, weight, bias)


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
        if x.shape[0] > 1 and _ROW_BY_ROW.get():
            return torch.cat([self(x[i:i + 1]) for i in range(x.shape[0])])
        if self.bias is None:
            return torch.mm(x, self.weight_t)
        return torch.addmm(self.bias, x, self.weight_t)

    @classmethod
    def stack(cls, parts: Sequence["Linear"]) -> "Linear":
        """One map whose output is the parts' outputs side by side (one GEMM instead of
        several: q/k/v, gate/up). A part without a bias adds zeros where the others have one."""
        weight = torch.cat([p.weight for p in parts])
        if all(p.bias is None for p in parts):
            return cls(weight)
        bias = torch.cat([p.bias if p.bias is not None else
                          p.weight.new_zeros(p.weight.shape[0]) for p in parts])
        return cls(weight, bias)

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @classmethod
    def load(cls, w: "Weights", name: str, out: int, inp: int, *,
             rows: tuple[int, int] | None = None) -> "Linear":
        """``name``.weight [out, in] and, if the checkpoint has it, ``name``.bias [out].
        rows: only output features [start, stop) (a column-parallel shard), read alone."""
        return cls(w.get(f"{name}.weight", shape=(out, inp), span=rows),
                   w.maybe(f"{name}.bias", shape=(out,), span=rows))

    @classmethod
    def load_row_parallel(cls, w: "Weights", name: str, out: int, inp: int, *, tp,
                          cols: tuple[int, int], reduce: bool = True):
        """The row-parallel map of ``name`` [out, in]: this rank's input features ``cols``
        (layers/parallel.py RowParallel: partial products summed over ranks, the bias added
        once). With one rank, the whole map, as ``load``."""
        if tp.size == 1:
            return cls.load(w, name, out, inp)
        from attnkit.runner.layers.parallel import RowParallel

        part = cls(w.get(f"{name}.weight", shape=(out, inp), span=cols, dim=1))
        return RowParallel(part, w.maybe(f"{name}.bias", shape=(out,)), tp, reduce=reduce)

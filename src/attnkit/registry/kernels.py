"""Kernel variants and the plan's kernel tables: what runs inside a backend, as torch-free data.

A backend may hold several implementations of one role (a split-KV decode that writes the new
K/V in its own launch or inside the kernel; a paged extend or a TMA one). Each is a
``KernelVariant``: a name, the roles it serves, and an envelope of its own (compute
capability, Triton versions, dtypes, head dims, page sizes, features it cannot serve, which
steps it can take), declared beside the backend's capabilities and read by the planner like
them. ``attnkit tune`` measures every variant on every bucket; the planner turns the
measurements into one ``KernelTable`` per role: for each measured bucket, the variants that
serve the model here, fastest first, with their rates. The backend is handed the tables and,
per step, runs the first variant listed for the bucket nearest the step that serves the
step (``KernelTable.pick``): the plan decides, the backend looks up (STYLE.md 16).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

ROLES = ("prefill", "extend", "decode", "varlen")  # fresh prefills, steps over a cached prefix,
#   decodes, and the varlen call (packed non-causal sequences, no KV cache: backends/varlen.py)
STEP_SCOPES = ("any", "one_fresh_request")  # which steps a variant can take


@dataclass(frozen=True)
class KernelVariant:
    """One implementation of a backend's role(s). Empty/None envelope fields mean "whatever
    the backend's capabilities allow"; a set field narrows them."""
    name: str
    roles: tuple[str, ...]
    description: str
    compute_capability: tuple[tuple[int, int], tuple[int, int] | None] | None = None  # (min, max)
    triton: tuple[str, str | None] | None = None     # [min, max) Triton versions it builds with
    dtypes: tuple[str, ...] = ()
    kv_cache_dtypes: tuple[str, ...] = ()
    head_dims: tuple[int, ...] = ()                  # MHA q/k head dims
    min_heads: int | None = None                     # query heads per rank
    page_multiple: int | None = None                 # page sizes: a multiple of this
    excludes: frozenset[str] = frozenset()           # layer features it does not serve
    causal_only: bool = False
    step: str = "any"                                # STEP_SCOPES
    # numerics it holds (capabilities.NUMERICS: batch_invariant, deterministic), declared only
    # where tests/conformance/test_bitwise.py proves them for this variant; a plan that
    # requires one (--require) runs only the variants that declare it
    numerics: frozenset[str] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        cc = self.compute_capability
        return {"name": self.name, "roles": list(self.roles), "description": self.description,
                "compute_capability": None if cc is None else
                {"min": list(cc[0]), "max": list(cc[1]) if cc[1] else None},
                "triton": None if self.triton is None else {"min": self.triton[0], "max": self.triton[1]},
                "dtypes": list(self.dtypes) or None, "kv_cache_dtypes": list(self.kv_cache_dtypes) or None,
                "head_dims": list(self.head_dims) or None, "min_heads": self.min_heads,
                "page_multiple": self.page_multiple, "excludes": sorted(self.excludes),
                "causal_only": self.causal_only, "step": self.step, "numerics": sorted(self.numerics)}


def version_tuple(text: str) -> tuple[int, ...]:
    """``"3.6.0+git"`` -> (3, 6, 0): the leading numeric fields."""
    out = []
    for part in str(text).split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def in_version_range(version: str | None, bounds: tuple[str, str | None] | None) -> bool:
    if bounds is None:
        return True
    if version is None:
        return False
    v = version_tuple(version)
    return v >= version_tuple(bounds[0]) and (bounds[1] is None or v < version_tuple(bounds[1]))


# ---- the plan's tables ----------------------------------------------------------------------
@dataclass(frozen=True)
class KernelRate:
    """A variant as the profile measured it at one bucket."""
    variant: str
    rate: float | None            # GB/s (decode) or TFLOP/s (prefill); None: not measured
    unit: str

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "rate": self.rate, "unit": self.unit}


@dataclass(frozen=True)
class KernelRow:
    """One measured bucket: its runtime point and the variants that serve it, fastest first."""
    batch: int
    new: int
    context: int
    order: tuple[KernelRate, ...]

    def point(self) -> tuple[int, int, int]:
        return (self.batch, self.new, self.context)

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "new": self.new, "context": self.context,
                "order": [k.to_dict() for k in self.order]}


@dataclass(frozen=True)
class KernelTable:
    """One role's kernels: ``rows`` (one per measured bucket) or, unmeasured, ``fallback``
    alone (the variants in declaration order). ``configs``: variant -> the launch
    configuration it runs with at the model's shape, where the backend declares one
    (backends/<name>/configs.py, the function its kernels read: one owner)."""
    role: str
    rows: tuple[KernelRow, ...] = ()
    fallback: tuple[str, ...] = ()
    configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def candidates(self, batch: int, new: int, context: int) -> tuple[str, ...]:
        """The variants for a step of ``batch`` requests of ``new`` tokens over ``context``
        keys: those of the nearest measured bucket (|log2| distance over the three, as the
        planner matches a workload), fastest first, then the unmeasured ones."""
        if not self.rows:
            return self.fallback
        w = (max(1, batch), max(1, new), max(1, context))
        row = min(self.rows, key=lambda r: (sum(abs(math.log2(a / b)) for a, b in zip(r.point(), w)),
                                            r.point()))
        listed = tuple(k.variant for k in row.order)
        return listed + tuple(v for v in self.fallback if v not in listed)

    def reaches(self, batch: int, new: int, max_context: int) -> tuple[int, ...]:
        """The context tiers of a static step of ``batch`` requests sized for up to
        ``max_context`` keys: ascending KV lengths up to which one variant is the first, the
        last ``max_context``. A step sized for one reach runs ``candidates(batch, new, reach)``
        for every context it holds, so a CUDA graph per reach runs at each context the variant
        of that context's tier (runner/engine/graphs.py), not the one of the longest context.
        The contexts are sampled at quarter powers of two from 16 (the nearest row changes at
        the log-midpoint between two rows' contexts, so a tier ends within a factor 2^(1/4)
        below it; a context in between runs the next tier's variant)."""
        top = max(1, max_context)
        points = sorted({round(2 ** (k / 4)) for k in range(16, 4 * top.bit_length())} - {top})
        points = [c for c in points if c < top] + [top]
        first = [self.candidates(batch, new, c)[0] for c in points]
        return tuple(c for c, v, after in zip(points, first, first[1:] + [None]) if v != after)

    def variants(self) -> tuple[str, ...]:
        seen = [k.variant for r in self.rows for k in r.order] + list(self.fallback)
        return tuple(dict.fromkeys(seen))

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "rows": [r.to_dict() for r in self.rows],
                "fallback": list(self.fallback), "configs": {k: dict(v) for k, v in self.configs.items()}}

    @classmethod
    def only(cls, role: str, variant: str, config: Mapping[str, Any] | None = None) -> "KernelTable":
        """A table that always runs ``variant`` (tests, benchmarks, ``attnkit tune``)."""
        return cls(role, fallback=(variant,), configs={variant: dict(config or {})})


def variant_misfits(variant: KernelVariant, *, platform, dtype: str, kv_dtype: str, head_dim: int,
                    heads: int, page_size: int | None, features: frozenset[str] | set[str],
                    causal: bool, require: tuple[str, ...] = ()) -> list[str]:
    """Why ``variant`` cannot run for a model of this shape on ``platform`` (empty: it can).
    ``features``: what the model's layers need; ``page_size`` None: not fixed yet;
    ``require``: the numerics the plan requires (--require)."""
    out = [f"does not declare {name} (--require)" for name in require if name not in variant.numerics]
    cc = getattr(platform, "capability", None)
    if variant.compute_capability is not None:
        lo, hi = variant.compute_capability
        if cc is None or tuple(cc) < lo or (hi is not None and tuple(cc) > hi):
            span = f"sm{lo[0]}{lo[1]}" + ("+" if hi is None else "" if hi == lo else f"-sm{hi[0]}{hi[1]}")
            out.append(f"needs {span}" + (f", not sm{cc[0]}{cc[1]}" if cc else ""))
    if variant.triton is not None:
        have = (getattr(platform, "packages", None) or {}).get("triton")
        if not in_version_range(have, variant.triton):
            lo, hi = variant.triton
            out.append(f"builds with Triton >= {lo}" + (f", < {hi}" if hi else "")
                       + f"; {'Triton ' + have if have else 'no Triton'} here")
    if variant.dtypes and dtype not in variant.dtypes:
        out.append(f"computes in {', '.join(variant.dtypes)}, not {dtype}")
    if variant.kv_cache_dtypes and kv_dtype not in variant.kv_cache_dtypes:
        out.append(f"reads a {', '.join(variant.kv_cache_dtypes)} KV cache, not {kv_dtype}")
    if variant.head_dims and head_dim not in variant.head_dims:
        out.append(f"head dims {', '.join(map(str, variant.head_dims))}, not {head_dim}")
    if variant.min_heads is not None and heads < variant.min_heads:
        out.append(f"needs >= {variant.min_heads} query heads a rank, not {heads}")
    if variant.page_multiple is not None and page_size is not None and page_size % variant.page_multiple:
        out.append(f"needs pages of a multiple of {variant.page_multiple} keys, not {page_size}")
    bad = sorted(set(features) & variant.excludes)
    if bad:
        out.append(f"does not serve {', '.join(bad)}")
    if variant.causal_only and not causal:
        out.append("serves causal attention only")
    return out


def takes_step(variant: KernelVariant, *, num_reqs: int, has_prefix: bool) -> bool:
    """Whether ``variant``'s step scope admits a step of ``num_reqs`` requests (``has_prefix``:
    some request extends a cached prefix)."""
    return variant.step == "any" or (num_reqs == 1 and not has_prefix)


def step_point(query_lens, seq_lens, *, max_kv: int | None = None) -> tuple[int, int, int]:
    """(batch, new, context) of a step, as the profile's buckets describe one: the number of
    requests and their mean new tokens and mean keys (``max_kv``: a static step sized for any
    refill up to that many keys)."""
    n = max(1, len(query_lens))
    new = max(1, round(sum(query_lens) / n))
    context = max_kv if max_kv is not None else max(1, round(sum(seq_lens) / n))
    return (len(query_lens), new, max(new, context))

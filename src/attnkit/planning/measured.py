"""Choose by measurement: rank the backends that serve a phase by a device profile (torch-free).

The matching rule (docs/profile.md says the same):
  1. The model's shape: its most common layer shape (kind, per-rank query and KV heads, head
     and value dims, MLA latent sizes) with the plan's dtype and KV-cache dtype.
  2. The nearest measured shape of that phase: same kind (and latent sizes for MLA; a DSA
     shape only a DSA one, and a dense one only a dense one); dtype
     equal, else the other 16-bit one (fp32 only matches fp32); then KV dtype equal, else the
     same family (16-bit, fp8), else any; then the smallest |log2| head-dim ratio (DSA: plus
     those of the top-k, indexer heads and indexer head dim); then the
     smallest |log2| ratio of query heads plus that of the GQA group size.
  3. Its runtime buckets, all at one page size (the plan's, where the user fixed one and the
     shape was measured with it; else the default 16; else the smallest measured): given a
     workload (batch, new tokens, context), the one nearest by |log2| batch + new + context
     ratios; without one, all of them (a plan serves them all). Entries at another page size
     never enter the comparison (planning/page_gain.py reads them for the page size rule).
  4. Backends measured ``ok`` in every one of those buckets are compared by the geometric
     mean of their rates, all by one method: CUDA-graph replays when every one of them has
     a graph time in every bucket, else eager calls.
  5. The order: those, fastest first; then the candidates measured in some buckets only or
     not at all, in priority order; last, those the profile found wrong (failed the reference
     check) or erroring, in priority order, each named in a warning.
A prefill ranking may be asked for one of its two workloads only (``role``): "prefill", fresh
prefills (the buckets with prefix 0), or "extend", steps over a cached prefix (prefix > 0).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from attnkit.errors import AttnkitError, preview
from attnkit.planning.pages import DEFAULT_PAGE_SIZE
from attnkit.planning.profile import UNITS, Bucket, Entry, Profile, Shape
from attnkit.registry.capabilities import HALF_DTYPES as HALF
WORKLOAD_KEYS = ("batch", "new", "context")
MAX_WORKLOAD = 1 << 31       # far above any batch or context; 10**400 broke the log2 distance


def model_shape(model, settings: Mapping[str, Any]) -> Shape | None:
    """The model's most common layer shape, per rank (``settings``: dtype, kv_cache_dtype, tp_size)."""
    tp = settings.get("tp_size") or 1
    dtype = settings.get("dtype") or "bf16"
    kv_dtype = settings.get("kv_cache_dtype") or dtype
    shapes: Counter = Counter()
    for l in model.layers:
        mla = l.mla if l.kind == "mla" else None
        kv = 1 if mla else max(1, l.num_kv_heads // tp)
        sparse = l.sparse_topk
        shapes[Shape(l.kind, max(1, l.num_heads // tp), kv, l.head_dim, l.value_dim, dtype, kv_dtype,
                     mla.kv_lora_rank if mla else None, mla.qk_rope_head_dim if mla else None,
                     *((sparse.topk, sparse.index_n_heads, sparse.index_head_dim) if sparse else ()))] += 1
    return shapes.most_common(1)[0][0] if shapes else None


def check_workload(workload: Any) -> dict[str, dict[str, int]]:
    """``{phase: {batch, new, context}}`` with every value an int >= 1 and new <= context (AK306)."""
    if workload is None:
        return {}
    out: dict[str, dict[str, int]] = {}
    if not isinstance(workload, Mapping):
        raise _bad_workload("workload", workload, "a mapping phase -> {batch, new, context}")
    for phase, w in workload.items():
        if phase not in UNITS or not isinstance(w, Mapping) or set(w) - set(WORKLOAD_KEYS):
            raise _bad_workload(f"workload[{phase!r}]", w, f"phase in {list(UNITS)} -> keys {list(WORKLOAD_KEYS)}")
        vals = {"batch": 1, "new": 1 if phase == "decode" else None, **w}
        vals.setdefault("context", vals["new"])
        if vals["new"] is None:
            vals["new"] = vals["context"]
        if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_WORKLOAD
                   for v in vals.values()) or vals["new"] > vals["context"]:
            raise _bad_workload(f"workload[{phase!r}]", dict(w), "integers 1 .. 2**31, new <= context")
        out[phase] = vals
    return out


def _bad_workload(field_: str, value: Any, expected: str) -> AttnkitError:
    shown = preview(value)
    return AttnkitError("AK306", f"invalid {field_}: {shown}; expected {expected}",
                        field=field_, expected=expected, actual=shown)


@dataclass
class Ranking:
    """How ``profile`` orders ``candidates`` for ``phase`` (see the module docstring)."""
    phase: str
    profile: Profile
    buckets: list[Bucket]
    method: str                                          # "graph" or "eager"
    rates: dict[str, float]                              # measured in every bucket: geomean rate
    order: list[str]
    failed: dict[str, str] = field(default_factory=dict)  # backend -> what the profile recorded
    shape: Shape | None = None                           # the model's, when it differs from the buckets'
    role: str | None = None                              # "prefill" / "extend": one workload only
    page_sizes: tuple[int, ...] = ()                     # the shape's measured page sizes, if several

    @property
    def name(self) -> str:
        """What the ranking chose for, in reasons: the phase, or the prefill workload."""
        return self.role or self.phase

    @property
    def measured(self) -> list[str]:
        return [n for n in self.order if n in self.rates]

    @property
    def unit(self) -> str:
        return UNITS[self.phase]

    def why(self, chosen: str, platform) -> str:
        """``prefill: sdpa, <rate> vs <rate> TFLOP/s (triton); NVIDIA H200 profile <date>, ...``."""
        others = [n for n in self.measured if n != chosen]
        head = f"{self.name}: {chosen}, {rate_text(self.rates[chosen])}"
        if others:
            head += " vs " + ", ".join(f"{rate_text(self.rates[n])}" + (f" {self.unit}" if i == 0 else "") + f" ({n})"
                                       for i, n in enumerate(others))
        else:
            head += f" {self.unit} (the only candidate measured)"
        if others and self.rates[others[0]] > self.rates[chosen]:
            head += f"; {others[0]} is faster but shares no page size with the other backends chosen"
        return f"{head}; {self.source(platform)}"

    def evidence(self, platform) -> str:
        """The measured rates of every candidate, for a priority-table reason on another device."""
        rates = ", ".join(f"{n} {rate_text(self.rates[n])}" for n in self.measured)
        return f"Measured: {rates} {self.unit}; {self.source(platform)}"

    def source(self, platform) -> str:
        return source_text(self.profile, platform, self.method, self.buckets, self.shape, self.page_sizes)

    def failure_warnings(self, tail: str = ": not chosen automatically") -> list[str]:
        return [f"{self.profile.name} records {n} as {what} for {self.name}{tail}"
                for n, what in self.failed.items()]


ROLES = {"prefill": lambda b: b.prefix == 0, "extend": lambda b: b.prefix > 0, "varlen": lambda b: True}


def rank(profile: Profile, shape: Shape, phase: str, candidates: Sequence[str],
         workload: Mapping[str, int] | None = None, *, role: str | None = None,
         page_size: int | None = None, allowed: Allowed = None) -> Ranking | None:
    """The profile's order of ``candidates`` (priority order) for ``phase`` (``role``: only its
    fresh-prefill or its extend buckets, see ROLES; ``page_size``: the plan's, when the user
    fixed it; ``allowed``: the kernel variants that can run here, see best_entries); None when
    the profile has no such bucket that matches ``shape`` at all."""
    group = nearest_static(profile, shape, phase)
    buckets = checked = at_page(group, page_size)
    if role is not None:                 # a backend wrong at any of the phase's buckets stays
        buckets = [b for b in buckets if ROLES[role](b)]        # out of both roles
    if not buckets:
        return None
    if workload:
        buckets = checked = [nearest_runtime(buckets, workload)]
    got = best_entries(profile, set(checked), allowed)
    failed, complete = {}, []
    for name in candidates:
        rows = [got.get((name, b)) for b in buckets]
        bad = [e for e in (got.get((name, b)) for b in checked)
               if e is not None and e.status in ("wrong", "error")]
        if bad:
            e = bad[0]
            failed[name] = ("wrong (failed the reference check" + (f", rel err {e.rel_err:.2g}" if e.rel_err else "")
                            + f") at {e.bucket.label()}" if e.status == "wrong" else f"erroring at {e.bucket.label()}: {e.note}")
        elif all(e is not None and e.status == "ok" for e in rows):
            complete.append(name)
    method = "graph" if all(got[(n, b)].graph_ms for n in complete for b in buckets) else "eager"
    complete = [n for n in complete if all(got[(n, b)].rate(method) for b in buckets)]
    rates = {n: geomean([got[(n, b)].rate(method) for b in buckets]) for n in complete}
    fast = sorted(complete, key=lambda n: -rates[n])
    rest = [n for n in candidates if n not in rates and n not in failed]
    near = shape if shape != buckets[0].shape else None
    pages = tuple(sorted({b.page_size for b in group}))
    return Ranking(phase, profile, sorted(buckets, key=lambda b: b.runtime()), method, rates,
                   fast + rest + [n for n in candidates if n in failed], failed, near, role,
                   pages if len(pages) > 1 else ())


Allowed = Mapping[str, frozenset[str]] | None


def best_entries(profile: Profile, buckets: set[Bucket], allowed: Allowed = None) -> dict[tuple, Entry]:
    """(backend, bucket) -> the entry that stands for the backend there: of a backend with kernel
    variants, its fastest ``ok`` variant among ``allowed[backend]`` (the variants that can run
    for this model here, None for an entry naming none; a backend absent from ``allowed`` keeps
    all), else one that failed
    (wrong / error), else one skipped. A backend is as fast as the best kernel the plan can
    give it, and the plan's kernel table (planning/kernel_table.py) names that kernel."""
    def score(e: Entry) -> tuple:
        rate = e.rate("graph") or e.rate("eager") or 0.0
        return ({"ok": 3, "wrong": 2, "error": 2}.get(e.status, 1), rate)
    out: dict[tuple, Entry] = {}
    for e in profile.entries:
        if e.bucket not in buckets:
            continue
        if allowed is not None and e.backend in allowed and e.variant not in allowed[e.backend]:
            continue
        key = (e.backend, e.bucket)
        if key not in out or score(e) > score(out[key]):
            out[key] = e
    return out


def at_page(buckets: list[Bucket], wanted: int | None) -> list[Bucket]:
    """The buckets of one page size: ``wanted`` if measured, else the default, else the smallest."""
    pages = {b.page_size for b in buckets}
    if not pages:
        return []
    page = wanted if wanted in pages else DEFAULT_PAGE_SIZE if DEFAULT_PAGE_SIZE in pages else min(pages)
    return [b for b in buckets if b.page_size == page]


def nearest_runtime(buckets: list[Bucket], workload: Mapping[str, int]) -> Bucket:
    w = (workload["batch"], workload["new"], workload["context"])
    return min(buckets, key=lambda b: (_runtime_distance(b, w), b.runtime()))


def nearest_static(profile: Profile, shape: Shape, phase: str) -> list[Bucket]:
    """The buckets of ``phase`` of the measured shape nearest ``shape``, at every page size."""
    groups: dict[tuple, dict[Bucket, None]] = {}     # an ordered set per shape: linear, not quadratic
    for e in profile.entries:
        b = e.bucket
        if b.phase == phase:
            groups.setdefault(b.static(), {})[b] = None
    scored = [(d, key) for key, bs in groups.items() if (d := _static_distance(next(iter(bs)).shape, shape)) is not None]
    if not scored:
        return []
    return list(groups[min(scored, key=lambda t: (t[0], repr(t[1])))[1]])


def _static_distance(b: Shape, s: Shape) -> tuple | None:
    """How far a measured shape ``b`` is from the model's ``s`` (None: not comparable)."""
    if b.kind != s.kind or (s.kind == "mla" and (b.kv_lora_rank, b.rope_dim) != (s.kv_lora_rank, s.rope_dim)):
        return None
    if (b.topk is None) != (s.topk is None):      # dense and DSA steps do different work
        return None
    if b.dtype == s.dtype:
        dt = 0
    elif b.dtype in HALF and s.dtype in HALF:
        dt = 1
    else:
        return None
    kv = 0 if b.kv_dtype == s.kv_dtype else 1 if _family(b.kv_dtype) == _family(s.kv_dtype) else 2
    dims = abs(math.log2(b.head_dim / s.head_dim)) + abs(math.log2(b.v_head_dim / s.v_head_dim))
    if s.topk is not None:
        dims += sum(abs(math.log2(x / y)) for x, y in ((b.topk, s.topk), (b.index_heads, s.index_heads),
                                                          (b.index_dim, s.index_dim)))
    heads = abs(math.log2(b.heads / s.heads)) + abs(math.log2((b.heads / b.kv_heads) / (s.heads / s.kv_heads)))
    return (dt, kv, dims, heads)


def _family(dtype: str) -> str:
    return "fp8" if dtype.startswith("fp8") else "half" if dtype in HALF else dtype


def _runtime_distance(b: Bucket, w: tuple[int, int, int]) -> float:
    return sum(abs(math.log2(x / y)) for x, y in zip(b.runtime(), w))


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def source_text(profile: Profile, platform, method: str, buckets: list[Bucket], shape: Shape | None = None,
                page_sizes: tuple[int, ...] = ()) -> str:
    """Where a comparison's rates come from: the profile (and its device, where not this one),
    the timing method, the buckets (``shape``: the model's, when not the buckets'); the page
    size of the buckets where the shape was measured at several (``page_sizes``)."""
    where = profile.name
    if profile.device.get("name", "").lower() != str(getattr(platform, "name", "")).lower():
        cap = profile.device.get("capability")
        where += (f" (measured on {profile.device.get('name')}, not on {platform.name}: same sm{cap[0]}{cap[1]} "
                  "architecture, so its order is used)"
                  if cap and tuple(cap) == tuple(platform.capability or ()) else f" (not {platform.name})")
    how = "CUDA-graph replays" if method == "graph" else "eager calls"
    near = f" (the nearest measured to {shape.label()})" if shape else ""
    pages = f", {buckets[0].page_size}-key pages" if page_sizes else ""
    return f"{where}, {how}, {_buckets_text(buckets)}{pages}{near}"


def rate_text(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.2g}"


def _buckets_text(buckets: list[Bucket]) -> str:
    b = buckets[0]
    if len(buckets) == 1:
        return f"{b.label()}, {b.shape.label()}"
    span = lambda vals: f"{min(vals)}-{max(vals)}" if min(vals) != max(vals) else f"{vals[0]}"  # noqa: E731
    if b.phase == "decode":
        ranges = f"B {span([x.batch for x in buckets])}, ctx {span([x.context for x in buckets])}"
    else:
        ranges = f"new {span([x.new for x in buckets])}, prefix {span([x.prefix for x in buckets])}"
    return f"geometric mean over {len(buckets)} buckets ({ranges}), {b.shape.label()}"

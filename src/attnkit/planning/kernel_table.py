"""Kernel choice: which of a chosen backend's kernel variants run, per role and measured bucket.

A backend with variants (registry/kernels.py) is ranked by the planner as fast as the best
variant it can run here (measured.best_entries). Once the backends and the page size are
fixed, this module turns the profile into each role's ``KernelTable``: for every bucket the
profile measured for the model's shape (that role's buckets, at the plan's page size), the
variants that can run here, fastest first, with their rates; and, for steps no bucket lists,
the variants in declaration order. Variants that cannot run here (the Triton installed, the
compute capability, the model's dtypes, head dims, features) are left out and named in the
reason, so the plan never silently changes kernel.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from attnkit.planning.measured import ROLES as BUCKET_ROLES
from attnkit.planning.measured import at_page, geomean, model_shape, nearest_static, rate_text
from attnkit.planning.profile import UNITS, Profile
from attnkit.registry.capabilities import BackendDeclaration
from attnkit.registry.kernels import KernelRate, KernelRow, KernelTable, variant_misfits

PHASE_OF = {"prefill": "prefill", "extend": "prefill", "decode": "decode", "varlen": "varlen"}


def model_facts(model, settings: Mapping[str, Any], require: tuple[str, ...] = ()) -> dict[str, Any]:
    """What a variant's envelope is checked against: the model's most common layer shape per
    rank, its features and whether every layer is causal, the plan's dtypes and page size, and
    the numerics the plan requires (``require``, --require)."""
    shape = model_shape(model, settings)
    features = set()
    for layer in model.layers:
        features |= set(layer.features())
    return {"dtype": settings.get("dtype") or "bf16",
            "kv_dtype": settings.get("kv_cache_dtype") or settings.get("dtype") or "bf16",
            "head_dim": shape.head_dim if shape else 0, "heads": shape.heads if shape else 0,
            "page_size": settings.get("page_size"), "features": frozenset(features),
            "causal": all(layer.causal for layer in model.layers), "require": tuple(require)}


def misfits(decl: BackendDeclaration, platform, facts: Mapping[str, Any]) -> dict[str, list[str]]:
    """variant -> why it cannot run here (only the variants that cannot). A requirement the
    backend declares for all its kernels leaves every variant in."""
    facts = {**facts, "require": tuple(r for r in facts.get("require", ())
                                       if r not in decl.capabilities.features)}
    out = {}
    for k in decl.variants:
        why = variant_misfits(k, platform=platform, **facts)
        if why:
            out[k.name] = why
    return out


def allowed_variants(registry: Mapping[str, BackendDeclaration], platform, facts, *,
                     roles: tuple[str, ...] | None = None) -> dict[str, frozenset]:
    """backend -> the names of its variants that can run here (backends with variants only;
    ``roles``: only variants of these roles), and None (a profile entry that names no variant)
    unless a requirement leaves the backend only its declaring variants."""
    out = {}
    for name, d in registry.items():
        if d.variants:
            plain = set() if any(r not in d.capabilities.features for r in facts.get("require", ())) else {None}
            names = {k.name for k in d.variants if roles is None or set(k.roles) & set(roles)}
            out[name] = frozenset(names - set(misfits(d, platform, facts))) | plain
    return out


def kernel_table(profile: Profile | None, decl: BackendDeclaration, role: str, model, settings,
                 allowed: frozenset[str], *, platform) -> KernelTable:
    """``role``'s table for backend ``decl`` (see the module docstring)."""
    fallback = tuple(k.name for k in decl.variants_for(role) if k.name in allowed)
    shape = model_shape(model, settings)
    configs = launch_configs(decl, role, fallback, shape, settings, platform)
    if profile is None or shape is None:
        return KernelTable(role, fallback=fallback, configs=configs)
    phase = PHASE_OF[role]
    buckets = {b for b in at_page(nearest_static(profile, shape, phase), settings.get("page_size"))
               if phase == "decode" or BUCKET_ROLES[role](b)}         # a set: entries x buckets is quadratic
    by_bucket = defaultdict(list)
    for e in profile.entries:
        if e.backend == decl.name and e.bucket in buckets and e.variant in fallback and e.status == "ok":
            by_bucket[e.bucket].append(e)
    rows = []
    for b in sorted(by_bucket, key=lambda b: b.runtime()):
        entries = by_bucket[b]
        method = "graph" if all(e.graph_ms for e in entries) else "eager"
        order = sorted(entries, key=lambda e: -(e.rate(method) or 0.0))
        rows.append(KernelRow(b.batch, b.new, b.context,
                              tuple(KernelRate(e.variant, e.rate(method), UNITS[phase]) for e in order)))
    return KernelTable(role, rows=tuple(rows), fallback=fallback, configs=configs)


def runs_varlen(model) -> bool:
    """Whether the model's attention can run as the varlen call: no decode (nothing cached
    between calls) and every layer non-causal (a DiT, a vision tower, an encoder)."""
    return "decode" not in model.phases and bool(model.layers) and not any(l.causal for l in model.layers)


def varlen_groups(model) -> dict[str, tuple[frozenset[str], tuple[int, ...]]]:
    """The layers the varlen call runs, by kind: ``self-attention`` (role encoder: self or
    joint attention) and ``cross-attention`` (role cross) -> (their features, their layer ids),
    for the kinds the model has. A variant's envelope is checked per kind: one that serves
    self-attention only still runs those layers' calls."""
    out: dict[str, tuple[frozenset[str], tuple[int, ...]]] = {}
    for layer in model.layers:
        kind = "cross-attention" if layer.cross_attention else "self-attention"
        features, ids = out.get(kind, (frozenset(), ()))
        out[kind] = (features | layer.features(), ids + (layer.layer_id,))
    return out


def varlen_misfits(decl: BackendDeclaration, platform, model, facts) -> dict[str, dict[str, list[str]]]:
    """kind (varlen_groups) -> varlen variant of ``decl`` -> why it cannot run that kind's calls
    (only the variants that cannot)."""
    out = {}
    for kind, (features, _) in varlen_groups(model).items():
        here = misfits(decl, platform, {**facts, "features": features})
        out[kind] = {k.name: here[k.name] for k in decl.variants_for("varlen") if k.name in here}
    return out


def with_varlen_kinds(allowed: dict[str, frozenset], registry: Mapping[str, BackendDeclaration], platform,
                      model, facts) -> dict[str, frozenset]:
    """``allowed`` (allowed_variants at the whole model's facts) plus each varlen variant that
    can run some kind of the model's layers (varlen_groups)."""
    out = dict(allowed)
    for name, d in registry.items():
        if d.variants_for("varlen") and name in out:
            some = set()
            for features, _ in varlen_groups(model).values():
                some |= allowed_variants({name: d}, platform, {**facts, "features": features},
                                         roles=("varlen",))[name]
            out[name] = out[name] | frozenset(some)
    return out


def kinds_text(table: KernelTable, by_kind: Mapping[str, Mapping[str, list[str]]], model) -> str:
    """``; cross-attention layers 1, 3 (+38 more runs): varlen_tile (not varlen_gluon: does not
    serve cross_attention)``: for each kind of layer some of the table's variants cannot run,
    which of them its calls take; empty when every kind takes them all."""
    from attnkit.model.summary import layer_ranges
    listed = table.variants()
    groups = varlen_groups(model)
    parts = []
    for kind, why in by_kind.items():
        refused = [v for v in listed if v in why]
        if refused and len(refused) < len(listed):
            takes = [v for v in listed if v not in why]
            reasons: dict[str, list[str]] = {}
            for v in refused:
                reasons.setdefault(", ".join(why[v]), []).append(v)
            parts.append(f"{kind} layers {layer_ranges(groups[kind][1])}: {', '.join(takes)} (not "
                         + "; ".join(f"{', '.join(vs)}: {w}" for w, vs in reasons.items()) + ")")
    return "".join(f"; {p}" for p in parts)


def launch_configs(decl: BackendDeclaration, role: str, variants, shape, settings,
                   platform) -> dict[str, dict]:
    """variant -> its launch configuration in ``role`` at ``shape`` on ``platform`` (the
    declaration's launch_config hook)."""
    if decl.launch_config is None or shape is None:
        return {}
    from attnkit.planning.reasons import load_hook
    hook = load_hook(decl.launch_config)
    out = {}
    for v in variants:
        cfg = hook(v, role=role, shape=shape, dtype=settings.get("dtype") or shape.dtype, platform=platform)
        if cfg:
            out[v] = dict(cfg)
    return out


def config_text(cfg: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


def kernel_tables(profile: Profile | None, registry: Mapping[str, BackendDeclaration],
                  backends: Mapping[str, str | None], model, settings,
                  allowed: Mapping[str, frozenset[str]], *, platform) -> dict[str, KernelTable]:
    """role -> table, for the roles whose backend has kernel variants; ``varlen`` (the varlen
    call) where the model runs it (runs_varlen) and its prefill backend declares it."""
    out = {}
    for role in ("prefill", "extend", "decode", "varlen"):
        if role == "varlen":
            name = backends.get("prefill")
            if name is not None and runs_varlen(model) and registry[name].variants_for("varlen") \
                    and "varlen" in registry[name].capabilities.features:
                out[role] = kernel_table(profile, registry[name], role, model, settings,
                                         allowed.get(name, frozenset()), platform=platform)
            continue
        name = backends.get(role) or (backends.get("prefill") if role == "extend" else None)
        if name is None or not registry[name].variants or role == "decode" and "decode" not in model.phases:
            continue
        if role == "extend" and "decode" not in model.phases:
            continue
        out[role] = kernel_table(profile, registry[name], role, model, settings,
                                 allowed.get(name, frozenset()), platform=platform)
    return out


def role_tables(profile: Profile | None, registry: Mapping[str, BackendDeclaration], backends, model, *,
                platform, settings, allowed, free, require) -> tuple[dict[str, KernelTable], dict[str, str]]:
    """The plan's kernel tables (role -> ``KernelTable`` of its chosen backend) and, per role,
    the reason's line naming the variants that run, those left out here and those unproven for
    ``require``. ``allowed``: backend -> variants that can run (with --require's numerics);
    ``free``: the model's facts without them."""
    tables = kernel_tables(profile, registry, backends, model, settings, allowed, platform=platform)
    why: dict[str, str] = {}
    for role, table in tables.items():
        name = backends.get(role) or backends["prefill"]
        decl = registry[name]
        here = misfits(decl, platform, free)
        by_kind = varlen_misfits(decl, platform, model, free) if role == "varlen" else {}
        if by_kind:      # left out: the variants no kind of layer can run
            here = {k: w for k, w in here.items() if all(k in m for m in by_kind.values())}
        left_out = {k: w for k, w in here.items() if role in next(v for v in decl.variants if v.name == k).roles}
        unproven = [k.name for k in decl.variants_for(role) if k.name not in here and k.name not in allowed.get(name, ())]
        why[role] = describe(table, left_out, unproven=unproven, require=require)
        if by_kind:
            why[role] += kinds_text(table, by_kind, model)
    return tables, why


def describe(table: KernelTable, left_out: Mapping[str, list[str]] | None = None, *,
             unproven: list[str] = (), require: tuple[str, ...] = ()) -> str:
    """One line for a role's reason: which variant leads in how many measured buckets, with its
    rate there (geometric mean), then the variants left out and why (``unproven``: those that
    could run here but do not declare ``require``, --require's numerics)."""
    if not table.rows:
        text = (f"kernels: {', '.join(_with_config(v, table) for v in table.fallback) or 'none'} "
                "(first that takes the step; no bucket measured)")
    else:
        won = defaultdict(list)
        for r in table.rows:
            won[r.order[0].variant].append(r)
        unit = table.rows[0].order[0].unit
        parts = []
        for variant, rows in won.items():
            rate = geomean([r.order[0].rate for r in rows if r.order[0].rate])
            parts.append(f"{_with_config(variant, table)} in {len(rows)} of {len(table.rows)} buckets ({_span(rows)}; "
                         f"{rate_text(rate)} {unit})")
        text = "kernels: " + ", ".join(parts)
    if unproven:
        text += (f"; only variants that declare {' and '.join(require)} (--require): not "
                 + ", ".join(unproven))
    if left_out:
        text += "; not here: " + "; ".join(f"{k} ({', '.join(why)})" for k, why in left_out.items())
    return text


def _with_config(variant: str, table: KernelTable) -> str:
    """``split [BLOCK_N=64 num_warps=4 num_stages=4]``: a variant and its launch configuration."""
    return f"{variant} [{config_text(table.configs[variant])}]" if variant in table.configs else variant


def _span(rows) -> str:
    def span(vals):
        return f"{min(vals)}-{max(vals)}" if min(vals) != max(vals) else f"{vals[0]}"
    if all(r.new == 1 for r in rows):
        return f"B {span([r.batch for r in rows])}, ctx {span([r.context for r in rows])}"
    return f"new {span([r.new for r in rows])}, ctx {span([r.context for r in rows])}, B {span([r.batch for r in rows])}"

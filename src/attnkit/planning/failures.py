"""When planning fails: pick the error that names the real cause, with every fix; build the Plan.

The solver calls these with its state (``Solve``). Every reason of every candidate stays in
``Plan.rejected``; the error's message repeats the ones that decided it.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from attnkit.errors import CATALOG, AttnkitError
from attnkit.planning.capabilities import PHASES
from attnkit.planning.plan import Plan
from attnkit.planning.reasons import Reason
from attnkit.planning.rules import common_page_sizes, conflict

if TYPE_CHECKING:
    from attnkit.planning.solver import Solve


def denied_but_named(s: "Solve", phase: str) -> AttnkitError:
    name = s.explicit[phase]
    rest = [n for n in s.request.deny if n != name]
    return conflict("AK307", f"{name} is named as the {phase} backend but is also denied "
                    "(--deny / ATTNKIT_DENY_BACKENDS)", field="deny", actual=name, expected=rest,
                    solutions=[f"remove {name} from --deny / ATTNKIT_DENY_BACKENDS",
                               "name a backend that is not denied"],
                    before=s.command(), after=s.command(deny=rest))


def bad_name(s: "Solve", field: str, name: str, err: AttnkitError) -> AttnkitError:
    """AK300/AK301 from names.resolve, plus the backends that serve this model here and a fix."""
    if field == "deny":
        close = err.details.get("did_you_mean") or []
        fixed = [n for n in s.typed.deny if n != name] + close[:1]
        return conflict(err.code, f"--deny: {err.message}", field="deny", actual=name, expected=err.expected,
                        solutions=[f"use --deny {close[0]}" if close else f"remove {name} from --deny"],
                        before=s.command(), after=s.command(deny=fixed), **err.details)
    alts = serving(s, list(PHASES))
    close = err.details.get("did_you_mean") or []
    suggested = [c for c in close if c in alts] + close + alts    # a close name that also serves, first
    message = err.message + (f". Backends that serve {s.model.name} on {s.platform.name}: {', '.join(alts)}"
                             if alts else "")
    flag = field.replace("_", "-")
    fixes = ([f"use --{flag} {suggested[0]}"] if suggested else []) + [f"omit --{flag} and let attnkit choose"]
    return conflict(err.code, message, field=field, actual=name, expected=err.expected, solutions=fixes,
                    before=s.command(), after=s.command(**{field: suggested[0] if suggested else None}),
                    alternatives=alts, **err.details)


def fixed_backend_fails(s: "Solve", name: str, phases: list[str], reasons: list[Reason]) -> AttnkitError:
    """A backend the user (or a rule) fixed cannot serve: the most specific error, all reasons."""
    reasons = merge(reasons)
    fields = {r.field for r in reasons}
    flag = s.request.backend_field(phases[0]).replace("_", "-")
    if fields == {"page_size"} and s.request.page_size is not None:
        valid = common_page_sizes([s.registry[name].capabilities], s.settings.get("dual_chunk_len"))
        near = nearest(valid, s.request.page_size)
        return conflict("AK303", f"--page-size {s.request.page_size} is not accepted by {name}: "
                        f"{_text(reasons)}; valid sizes: {', '.join(map(str, valid[:8])) or 'none'}",
                        field="page_size", actual=s.request.page_size, expected=valid,
                        solutions=[f"use --page-size {v}" for v in near] + ["omit --page-size"],
                        before=s.command(), after=s.command(page_size=near[0] if near else None))
    if fields == {"kv_cache_dtype"} and s.request.kv_cache_dtype is not None:
        return kv_dtype_conflict(s, phases, [name])
    alts = serving(s, phases, exclude=name)
    where = f"{s.model.name} ({s.model.kind.upper()}) on {s.platform.name}"
    by_rule = [s.chosen_by[p] for p in phases if p in s.chosen_by]
    if by_rule:
        return conflict("AK302", f"{name} (chosen by rule {by_rule[0]}: {s.why[phases[0]]}) cannot serve "
                        f"{where}: {_text(reasons)}", field="dual_chunk", actual="on", expected=["off"],
                        solutions=["use --dual-chunk off (plain attention; quality drops beyond chunk_size)"],
                        before=s.command(), after=s.command(dual_chunk="off"), reasons=_dicts(reasons))
    fixes = [f"use --{flag} {a}" for a in alts] + [f"omit --{flag} and let attnkit choose"]
    return conflict("AK121", f"--{flag} {name} cannot serve {where}: {_text(reasons)}. "
                    + (f"Backends that serve it here: {', '.join(alts)}" if alts
                       else "No attnkit backend serves it here."),
                    field=flag.replace("-", "_"), actual=name, expected=alts, solutions=fixes,
                    before=s.command(), after=s.command(**{flag.replace("-", "_"): alts[0] if alts else None}),
                    reasons=_dicts(reasons), alternatives=alts)


def nothing_serves(s: "Solve", phase: str, pool: list[str]) -> AttnkitError:
    """No automatic candidate serves ``phase``; blame a user setting if only it stands in the way."""
    by_name = {n: s.reasons(phase, n) for n in pool}
    for field, value in (("page_size", s.request.page_size), ("kv_cache_dtype", s.request.kv_cache_dtype)):
        blocked = [n for n, rs in by_name.items() if rs and {r.field for r in rs} == {field}]
        if value is not None and blocked:
            if field == "kv_cache_dtype":
                return kv_dtype_conflict(s, [phase], pool)
            valid = common_page_sizes([s.registry[blocked[0]].capabilities], s.settings.get("dual_chunk_len"))
            near = nearest(valid, value)
            return conflict("AK303", f"--page-size {value} is not accepted by {', '.join(blocked)} and no "
                            f"other candidate serves {s.model.name} {phase} on {s.platform.name}; "
                            f"{blocked[0]} accepts {', '.join(map(str, valid[:8]))}", field="page_size",
                            actual=value, expected=valid,
                            solutions=[f"use --page-size {v}" for v in near] + ["omit --page-size"],
                            before=s.command(), after=s.command(page_size=near[0] if near else None))
    why = ("no priority table covers this platform" if s.entry(phase) is None
           else "every candidate is denied or not registered" if not pool else
           "; ".join(f"{n}: {_text(rs, named=False)}" for n, rs in by_name.items()))
    device = other_device(s) if any(r.code in ("AK210", "AK211", "AK212")
                                    for rs in by_name.values() for r in rs) or not pool else None
    hints = _hints([r for rs in by_name.values() for r in rs], s)
    # a setting the user chose that every candidate refuses: dropping it is the fix
    user_fields = {f for f in ("cuda_graph", "speculative_tokens", "dtype", "kv_cache_dtype", "page_size")
                   if s.typed.is_set(f)}
    blocking = sorted(set.intersection(*({r.field for r in rs} for rs in by_name.values())) & user_fields
                      ) if by_name else []
    if blocking:
        value = s.settings.get(blocking[0])
        flag = f"--{blocking[0].replace('_', '-')}" + ("" if value is True else f" {value}")
        hints.insert(0, f"drop {flag} (every candidate refuses it)")
        return conflict("AK120", f"no attnkit backend serves {s.model.name} {phase} on {s.platform.name} with "
                        f"{flag}: {why}",
                        field=blocking[0], actual=s.settings.get(blocking[0]), expected=pool, solutions=hints,
                        before=s.command(), after=s.command(**{blocking[0]: None}), candidates=pool)
    if device:
        hints.insert(0, f"plan for --device {device}, where a backend serves this model with these settings")
    return conflict("AK120", f"no attnkit backend serves {s.model.name} ({s.model.kind.upper()}) {phase} on "
                    f"{s.platform.name} ({s.platform.kind}): {why}", field=f"{phase}_backend", actual=None,
                    expected=pool, solutions=hints, before=s.command(),
                    after=s.command(device=device) if device else s.command(), candidates=pool)


def other_device(s: "Solve") -> str | None:
    """The first device preset where some automatic candidate serves both phases (for the example fix)."""
    from attnkit.hardware import get_preset, preset_names
    from attnkit.planning.reasons import check_backend

    here = getattr(s.platform, "preset", None)
    settings = {k: v for k, v in s.settings.items() if v is not None}
    for preset in sorted(preset_names(), key=lambda n: (n not in ("h100", "cpu"), n)):
        if preset == here:
            continue
        platform = get_preset(preset)
        names = [n for n in s.registry if not s.registry[n].explicit_only and n not in s.request.deny]
        if any(all(not check_backend(s.registry[n], model=s.model, needs=s.needs, platform=platform,
                                     phase=p, settings=settings) for p in PHASES) for n in names):
            return preset
    return None


def kv_dtype_conflict(s: "Solve", phases: list[str], refusing: list[str]) -> AttnkitError:
    kv = s.request.kv_cache_dtype
    declared = [n for n, d in s.registry.items() if kv in d.capabilities.kv_cache_dtypes]
    here = [n for n in declared if n not in refusing and all(not s.reasons(p, n) for p in phases)]
    fixes = [f"use --attention-backend {n} (stores {kv} KV and serves this model here)" for n in here]
    fixes.append(f"omit --kv-cache-dtype (the KV cache then uses the compute dtype {s.settings.get('dtype')})")
    return conflict("AK304", f"--kv-cache-dtype {kv} is not supported by {', '.join(refusing)}; backends "
                    f"that declare {kv} KV: {', '.join(declared) or 'none'}"
                    + (f" (serving {s.model.name} here: {', '.join(here)})" if here else ""),
                    field="kv_cache_dtype", actual=kv, expected=declared, solutions=fixes,
                    before=s.command(),
                    after=s.command(attention_backend=here[0]) if here else s.command(kv_cache_dtype=None))


def no_common_layout(s: "Solve", options: dict[str, list[str]]) -> AttnkitError:
    return conflict("AK308", f"no page size is accepted by both a prefill backend ({', '.join(options['prefill'])}) "
                    f"and a decode backend ({', '.join(options['decode'])})", field="page_size", actual=None,
                    expected=[], solutions=["use one --attention-backend for both phases"],
                    before=s.command(), after=s.command(prefill_attention_backend=None, decode_attention_backend=None))


def nearest(sizes: list[int], target: int, n: int = 3) -> list[int]:
    """The ``n`` sizes closest to ``target`` (ties to the smaller)."""
    return sorted(sizes, key=lambda v: (abs(v - target), v))[:n]


def serving(s: "Solve", phases: list[str], *, exclude: str | None = None) -> list[str]:
    """Backends that serve every layer in ``phases`` here, priority order first."""
    order = [n for p in phases for n in s.pool(p)] + list(s.registry)
    return [n for n in dict.fromkeys(order) if n != exclude and not s.registry[n].explicit_only
            and n not in s.request.deny and all(not s.reasons(p, n) for p in phases)]


def merge(reasons: list[Reason]) -> list[Reason]:
    """One reason per cause, with the phases it applies to."""
    out: dict[tuple, Reason] = {}
    for r in reasons:
        key = (r.backend,) + r.key()
        if key in out:
            phases = tuple(dict.fromkeys(out[key].phases + r.phases))
            out[key] = dataclasses.replace(out[key], phases=phases)
        else:
            out[key] = r
    return list(out.values())


def build_plan(s: "Solve", error: AttnkitError | None) -> Plan:
    considered = {n for e in s.table for n in e.backends} | set(s.explicit.values()) | set(s.backends.values())
    rejected: dict[str, list[Reason]] = {}
    for name in s.registry:
        if name not in considered or (s.registry[name].explicit_only and name not in s.explicit.values()):
            continue
        reasons = merge([r for p in PHASES if s.backends.get(p) != name for r in s.reasons(p, name)])
        if reasons:
            rejected[name] = reasons
    shared: list[Reason] = []
    if len(rejected) >= 2:
        common = set.intersection(*({r.key() for r in rs} for rs in rejected.values()))
        shared = [r for r in next(iter(rejected.values())) if r.key() in common]
    ok = error is None
    settings = dict(s.settings)
    if ok:
        settings["kv_layout"] = "latent" if s.model.kind == "mla" else "per_head_kv"
    return Plan(
        ok=ok, model=s.model.name, platform=_platform_dict(s.platform), request=s.typed.to_dict(),
        model_info={"name": s.model.name, "architecture": s.model.architecture, "kind": s.model.kind,
                    "num_layers": len(s.model.layers), "source": s.model.source,
                    "features": sorted(s.model.features())},
        prefill_backend=s.backends["prefill"] if ok else None, decode_backend=s.backends["decode"] if ok else None,
        why=dict(s.why) if ok else {}, settings=settings, adjustments=s.adjustments, rejected=rejected,
        shared=shared, alternatives=s.alternatives if ok else {}, warnings=s.warnings,
        error=None if ok else error_dict(error))


def error_dict(err: AttnkitError) -> dict[str, Any]:
    d = err.to_dict()
    fix = d["details"].pop("example_fix", None)
    if (fix is None or fix["before"] == fix["after"]) and err.code in CATALOG:
        fix = {"before": CATALOG[err.code].example_before, "after": CATALOG[err.code].example_after}
    d["example_fix"] = fix
    return d


def _platform_dict(platform) -> dict[str, Any]:
    d = dict(platform.to_dict()) if hasattr(platform, "to_dict") else {
        "kind": platform.kind, "name": platform.name, "packages": dict(platform.packages or {})}
    d["capability"] = list(platform.capability) if platform.capability is not None else None
    return d


def _hints(reasons: list[Reason], s: "Solve") -> list[str]:
    hints = []
    missing = sorted({r.actual for r in reasons if r.code == "AK212"})
    if missing:
        hints.append(f"install {' and '.join(missing)} on {s.platform.name}")
    if any(r.code in ("AK210", "AK211") for r in reasons):
        hints.append("plan for a device these backends run on (attnkit backends --device D shows which)")
    if s.request.deny:
        hints.append("remove backends from --deny / ATTNKIT_DENY_BACKENDS")
    return hints + list(CATALOG["AK120"].solutions if "AK120" in CATALOG else ())


def _text(reasons: list[Reason], *, named: bool = False) -> str:
    return "; ".join((f"{r.backend}: " if named else "") + r.message for r in reasons)


def _dicts(reasons: list[Reason]) -> list[dict[str, Any]]:
    return [r.to_dict() for r in reasons]


"""When planning fails: pick the error that names the real cause, with every fix; build the Plan.

The solver calls these with its state (``Solve``). Every reason of every candidate stays in
``Plan.rejected``; the error's message repeats the ones that decided it.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from attnkit.errors import CATALOG, AttnkitError
from attnkit.model.summary import model_info
from attnkit.planning.plan import Plan
from attnkit.planning.reasons import Reason
from attnkit.planning.rules import common_page_sizes, conflict
from attnkit.planning.suggest import device_for, nearest, other_device, serving

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
    alts = serving(s, list(s.phases))
    close = err.details.get("did_you_mean") or []
    suggested = [c for c in close if c in alts] + close + alts    # a close name that also serves, first
    message = err.message + (f". Backends that serve {s.model.name} on {s.platform.name}: {', '.join(alts)}"
                             if alts else "")
    flag = field.replace("_", "-")
    fixes = ([f"use --{flag} {suggested[0]}"] if suggested else []) + [f"omit --{flag} and let attnkit choose"]
    return conflict(err.code, message, field=field, actual=name, expected=err.expected, solutions=fixes,
                    before=s.command(), after=s.command(**{field: suggested[0] if suggested else None}),
                    alternatives=alts, **err.details)


# Settings the user chose that a rule-chosen backend may refuse; dropping them is then the fix.
USER_SETTINGS = ("cuda_graph", "speculative_tokens", "kv_cache_dtype", "page_size")
PLATFORM_CODES = ("AK210", "AK211", "AK212")       # wrong device kind, compute capability, package


def fixed_backends_fail(s: "Solve", failing: dict[str, list[str]], reasons: list[Reason]) -> AttnkitError:
    """Backends the user (or a rule) fixed cannot serve: the most specific error, all reasons.

    ``failing``: backend -> the phases it was fixed for. One error covers every failing backend,
    so its example fix replaces each of them at once.
    """
    reasons = merge(reasons)
    names = list(failing)
    phases = [p for p in s.phases if any(p in ps for ps in failing.values())]
    fields = {r.field for r in reasons}
    who = ", ".join(names)
    if fields == {"page_size"} and s.request.page_size is not None:
        valid = common_page_sizes([s.registry[n].capabilities for n in names], s.settings.get("dual_chunk_len"))
        near = nearest(valid, s.request.page_size)
        return conflict("AK303", f"--page-size {s.request.page_size} is not accepted by {who}: "
                        f"{_text(reasons)}; valid sizes: {', '.join(map(str, valid[:8])) or 'none'}",
                        field="page_size", actual=s.request.page_size, expected=valid,
                        solutions=[f"use --page-size {v}" for v in near] + ["omit --page-size"],
                        before=s.command(), after=s.command(page_size=near[0] if near else None))
    if fields == {"kv_cache_dtype"} and s.request.kv_cache_dtype is not None:
        return kv_dtype_conflict(s, phases, names)
    where = f"{s.model.name} ({s.model.kind.upper()}) on {s.platform.name}"
    ruled = [p for p in phases if p in s.chosen_by]
    if ruled:
        rule, why = s.chosen_by[ruled[0]], s.why[ruled[0]]
        chosen = f"{who} (chosen by rule {rule}: {why})"
        if fields <= set(USER_SETTINGS) and all(s.typed.is_set(f) for f in fields):
            # only the user's own settings stand in the way: turning dual chunk off would not help
            flags = [_flag(s, f) for f in USER_SETTINGS if f in fields]
            return conflict("AK120", f"{chosen} is the backend that serves {where}, and it refuses "
                            f"{' and '.join(flags)}: {_text(reasons)}", field=sorted(fields)[0],
                            actual=s.settings.get(sorted(fields)[0]), expected=names,
                            solutions=[f"drop {f} ({who} refuses it)" for f in flags],
                            before=s.command(), after=s.command(**{f: None for f in fields}),
                            reasons=_dicts(reasons))
        fixes = ["use --dual-chunk off (plain attention; quality drops beyond chunk_size)"]
        after = s.command(dual_chunk="off")
        if any(r.code in PLATFORM_CODES for r in reasons):    # it does not run here: another device
            device, keep = device_for(s, failing)
            drop = [] if device else [f for f in USER_SETTINGS if f in fields and s.typed.is_set(f)]
            if drop:
                device, keep = device_for(s, failing, without=drop)
            if device:
                fixes.insert(0, f"plan for --device {device}, where "
                              + (f"{who} serves this model" if keep else "a backend serves this model")
                              + (f" without {' and '.join(_flag(s, f) for f in drop)}" if drop else ""))
                after = s.command(device=device, **{f: None for f in drop})
        return conflict("AK302", f"{chosen} cannot serve {where}: {_text(reasons)}", field="dual_chunk",
                        actual="on", expected=["off"], solutions=fixes,
                        before=s.command(), after=after, reasons=_dicts(reasons))
    # field -> (backend, phases): every request field that names a failing backend
    named: dict[str, tuple[str, list[str]]] = {}
    for name, ps in failing.items():
        for p in ps:
            f = s.request.backend_field(p)
            named[f] = (name, named.get(f, (name, []))[1] + [p])
    alts = {f: serving(s, ps, exclude=name) for f, (name, ps) in named.items()}
    first = next(iter(named))
    flag = first.replace("_", "-")
    shown = alts[first]
    if all(alts.values()):
        change = {f: a[0] for f, a in alts.items()}
        if len(named) == 1:
            fixes = [f"use --{flag} {a}" for a in shown]
        else:
            fixes = [f"use {_flags(change)}"]
        fixes.append(f"omit {' and '.join('--' + f.replace('_', '-') for f in named)} and let attnkit choose")
        after = s.command(**change)
        tail = f"Backends that serve it here: {', '.join(shown)}"
    else:
        # another device with these settings; else here (or elsewhere) without the settings refused
        device, keep = device_for(s, failing)
        drop = [f for f in USER_SETTINGS if f in fields and s.typed.is_set(f)] if not device else []
        if drop and not fields <= set(drop):
            device, keep = device_for(s, failing, without=drop)
        fixes = ([f"plan for --device {device}, where " + (f"{who} serves this model" if keep else
                  "a backend serves this model with these settings")
                  + (f" without {' and '.join(_flag(s, f) for f in drop)}" if drop else "")] if device else [])
        fixes += [f"drop {_flag(s, f)} ({who} refuses it)" for f in drop if not device] + _hints(reasons, s)
        unnamed = {} if keep or (drop and not device) else {f: None for f in named}
        after = s.command(device=device, **unnamed, **{f: None for f in drop})
        tail = "No attnkit backend serves it here."
    text = " ".join(f"--{f.replace('_', '-')} {n}" for f, (n, _) in named.items())
    return conflict("AK121", f"{text} cannot serve {where}: {_text(reasons, named=len(names) > 1)}. " + tail,
                    field=first, actual=named[first][0], expected=shown, solutions=fixes,
                    before=s.command(), after=after, reasons=_dicts(reasons), alternatives=shown)


def _flags(change: dict[str, str]) -> str:
    return " ".join(f"--{f.replace('_', '-')} {n}" for f, n in change.items())


def _flag(s: "Solve", field: str) -> str:
    value = s.settings.get(field) if field != "page_size" else s.request.page_size
    return f"--{field.replace('_', '-')}" + ("" if value is True else f" {value}")


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
    drop: list[str] = []
    if device is None and any(r.code in ("AK210", "AK211", "AK212") for rs in by_name.values() for r in rs):
        # no device serves with these settings: one that does without the settings they also refuse
        drop = [f for f in USER_SETTINGS if s.typed.is_set(f)
                and any(r.field == f for n in pool for p in s.phases for r in s.reasons(p, n))]
        device = other_device(s, without=drop) if drop else None
        if device:
            hints.insert(0, f"plan for --device {device} without {' and '.join(_flag(s, f) for f in drop)}")
    elif device:
        hints.insert(0, f"plan for --device {device}, where a backend serves this model with these settings")
    if not pool and s.request.deny and s.entry(phase) is not None:
        # every candidate is denied: the user's command without the deny list (and the variable unset)
        after = s.command(deny=None)
        if "ATTNKIT_DENY_BACKENDS" in s.env_used:
            after = f"unset ATTNKIT_DENY_BACKENDS; {after}"
    else:
        after = s.command(device=device, **{f: None for f in drop}) if device else s.command()
    return conflict("AK120", f"no attnkit backend serves {s.model.name} ({s.model.kind.upper()}) {phase} on "
                    f"{s.platform.name} ({s.platform.kind}): {why}", field=f"{phase}_backend", actual=None,
                    expected=pool, solutions=hints, before=s.command(), after=after, candidates=pool)


def kv_dtype_conflict(s: "Solve", phases: list[str], refusing: list[str]) -> AttnkitError:
    kv = s.request.kv_cache_dtype
    declared = [n for n, d in s.registry.items() if kv in d.capabilities.kv_cache_dtypes]
    here = [n for n in declared if n not in refusing and all(not s.reasons(p, n) for p in phases)]
    # the request fields that choose these phases' backends: a phase flag beats --attention-backend
    fields = list(dict.fromkeys(s.request.backend_field(p) if s.explicit[p] else "attention_backend"
                                for p in phases))
    flags = lambda n: " ".join(f"--{f.replace('_', '-')} {n}" for f in fields)  # noqa: E731
    fixes = [f"use {flags(n)} (stores {kv} KV and serves this model here)" for n in here]
    fixes.append(f"omit --kv-cache-dtype (the KV cache then uses the compute dtype {s.settings.get('dtype')})")
    return conflict("AK304", f"--kv-cache-dtype {kv} is not supported by {', '.join(refusing)}; backends "
                    f"that declare {kv} KV: {', '.join(declared) or 'none'}"
                    + (f" (serving {s.model.name} here: {', '.join(here)})" if here else ""),
                    field="kv_cache_dtype", actual=kv, expected=declared, solutions=fixes,
                    before=s.command(),
                    after=s.command(**{f: here[0] for f in fields}) if here else s.command(kv_cache_dtype=None))


def no_common_layout(s: "Solve", options: dict[str, list[str]]) -> AttnkitError:
    which = " and ".join(f"a {p} backend ({', '.join(options[p])})" for p in s.phases)
    return conflict("AK308", f"no page size is accepted by {which}", field="page_size", actual=None,
                    expected=[], solutions=["use one --attention-backend for both phases"],
                    before=s.command(), after=s.command(prefill_attention_backend=None, decode_attention_backend=None))


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
        reasons = merge([r for p in s.phases if s.backends.get(p) != name for r in s.reasons(p, name)])
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
        model_info=model_info(s.model),
        prefill_backend=s.backends["prefill"] if ok else None, decode_backend=s.backends["decode"] if ok else None,
        why=dict(s.why) if ok else {}, settings=settings, adjustments=s.adjustments, rejected=rejected,
        shared=shared, alternatives=s.alternatives if ok else {}, warnings=s.warnings,
        error=None if ok else error_dict(error, s))


def error_dict(err: AttnkitError, s: "Solve") -> dict[str, Any]:
    """The error as JSON; its example fix is always the user's own command (never a catalog example)."""
    d = err.to_dict()
    fix = d["details"].pop("example_fix", None)
    if fix is not None and s.env_used:
        # the environment took part: show it in "before"; if only it differs, unsetting is the fix
        if fix["before"] == fix["after"]:
            fix["after"] = f"unset {' '.join(s.env_used)}; {fix['after']}"
        env = " ".join(f"{k}={v}" for k, v in s.env_used.items())
        fix["before"] = f"{env} {fix['before']}"
    d["example_fix"] = fix if fix is None or fix["before"] != fix["after"] else None
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


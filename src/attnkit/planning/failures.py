"""When planning fails: pick the error that names the real cause, with every fix.

The solver calls these with a read-only ``View`` of its run (view.py); each error code has
one builder. Every reason of every candidate stays in ``Plan.rejected`` (outcome.py); the
error's message repeats the ones that decided it.
"""
from __future__ import annotations

from typing import Any

from attnkit.errors import CATALOG, AttnkitError
from attnkit.planning.conflicts import conflict, page_size_refused
from attnkit.planning.pages import common_page_sizes
from attnkit.planning.reasons import Reason, merge
from attnkit.planning.suggest import device_for, other_device, serving
from attnkit.planning.view import View


def denied_but_named(v: View, phase: str) -> AttnkitError:
    name = v.explicit[phase]
    rest = [n for n in v.request.deny if n != name]
    return conflict("AK307", f"{name} is named as the {phase} backend but is also denied "
                    "(--deny / ATTNKIT_DENY_BACKENDS)", field="deny", actual=name, expected=rest,
                    solutions=[f"remove {name} from --deny / ATTNKIT_DENY_BACKENDS",
                               "name a backend that is not denied"],
                    before=v.command(), after=v.command(deny=rest))


def bad_name(v: View, field: str, name: str, err: AttnkitError) -> AttnkitError:
    """AK300/AK301 from names.resolve, plus the backends that serve this model here and a fix."""
    if field == "deny":
        close = err.details.get("did_you_mean") or []
        fixed = [n for n in v.typed.deny if n != name] + close[:1]
        return conflict(err.code, f"--deny: {err.message}", field="deny", actual=name, expected=err.expected,
                        solutions=[f"use --deny {close[0]}" if close else f"remove {name} from --deny"],
                        before=v.command(), after=v.command(deny=fixed), **err.details)
    alts = serving(v, list(v.phases))
    close = err.details.get("did_you_mean") or []
    suggested = [c for c in close if c in alts] + close + alts    # a close name that also serves, first
    message = err.message + (f". Backends that serve {v.model.name} on {v.platform.name}: {', '.join(alts)}"
                             if alts else "")
    flag = field.replace("_", "-")
    fixes = ([f"use --{flag} {suggested[0]}"] if suggested else []) + [f"omit --{flag} and let attnkit choose"]
    return conflict(err.code, message, field=field, actual=name, expected=err.expected, solutions=fixes,
                    before=v.command(), after=v.command(**{field: suggested[0] if suggested else None}),
                    alternatives=alts, **err.details)


# Settings the user chose that a rule-chosen backend may refuse; dropping them is then the fix.
USER_SETTINGS = ("cuda_graph", "speculative_tokens", "kv_cache_dtype", "page_size")
PLATFORM_CODES = ("AK210", "AK211", "AK212")       # wrong device kind, compute capability, package


def fixed_backends_fail(v: View, failing: dict[str, list[str]], reasons: list[Reason]) -> AttnkitError:
    """Backends the user (or a rule) fixed cannot serve: the most specific error, all reasons.

    ``failing``: backend -> the phases it was fixed for. One error covers every failing backend,
    so its example fix replaces each of them at once.
    """
    reasons = merge(reasons)
    names = list(failing)
    phases = [p for p in v.phases if any(p in ps for ps in failing.values())]
    fields = {r.field for r in reasons}
    if fields == {"page_size"} and v.request.page_size is not None:
        valid = common_page_sizes([v.registry[n] for n in names], v.model)
        return page_size_refused(v, f"--page-size {v.request.page_size} is not accepted by {', '.join(names)}: "
                                    f"{_text(reasons)}; valid sizes: {{valid}}", valid)
    if fields == {"kv_cache_dtype"} and v.request.kv_cache_dtype is not None:
        return kv_dtype_conflict(v, phases, names)
    ruled = [p for p in phases if p in v.chosen_by]
    if ruled:
        return rule_choice_fails(v, failing, reasons, ruled[0])
    return named_backends_fail(v, failing, reasons)


def _where(v: View) -> str:
    return f"{v.model.name} ({v.model.kind.upper()}) on {v.platform.name}"


def rule_choice_fails(v: View, failing: dict[str, list[str]], reasons: list[Reason], phase: str) -> AttnkitError:
    """A backend a rule chose for ``phase`` cannot serve: AK120 if only the user's own settings
    stand in the way (dropping them is the fix), else the rule's release (e.g. AK302, whose
    fix turns the rule off), with another device first where the backend does not run here."""
    names, fields = list(failing), {r.field for r in reasons}
    who, where = ", ".join(names), _where(v)
    chosen = f"{who} (chosen by rule {v.chosen_by[phase]}: {v.why[phase]})"
    if fields <= set(USER_SETTINGS) and all(v.typed.is_set(f) for f in fields):
        # only the user's own settings stand in the way: turning the rule off would not help
        flags = [_flag(v, f) for f in USER_SETTINGS if f in fields]
        return conflict("AK120", f"{chosen} is the backend that serves {where}, and it refuses "
                        f"{' and '.join(flags)}: {_text(reasons)}", field=sorted(fields)[0],
                        actual=v.settings.get(sorted(fields)[0]), expected=names,
                        solutions=[f"drop {f} ({who} refuses it)" for f in flags],
                        before=v.command(), after=v.command(**{f: None for f in fields}),
                        reasons=_dicts(reasons))
    release = v.releases[phase]
    fixes = [release.fix]
    after = v.command(**release.changes)
    if any(r.code in PLATFORM_CODES for r in reasons):    # it does not run here: another device
        device, keep = device_for(v, failing)
        drop = [] if device else [f for f in USER_SETTINGS if f in fields and v.typed.is_set(f)]
        if drop:
            device, keep = device_for(v, failing, without=drop)
        if device:
            fixes.insert(0, f"plan for --device {device}, where "
                          + (f"{who} serves this model" if keep else "a backend serves this model")
                          + (f" without {' and '.join(_flag(v, f) for f in drop)}" if drop else ""))
            after = v.command(device=device, **{f: None for f in drop})
    return conflict(release.code, f"{chosen} cannot serve {where}: {_text(reasons)}", field=release.field,
                    actual=release.actual, expected=[release.changes[release.field]], solutions=fixes,
                    before=v.command(), after=after, reasons=_dicts(reasons))


def named_backends_fail(v: View, failing: dict[str, list[str]], reasons: list[Reason]) -> AttnkitError:
    """AK121: backends the user named cannot serve; the fix names backends that serve here, or
    else a device where these do (or where some backend does), or the settings to drop."""
    names, fields = list(failing), {r.field for r in reasons}
    who = ", ".join(names)
    # field -> (backend, phases): every request field that names a failing backend
    named: dict[str, tuple[str, list[str]]] = {}
    for name, ps in failing.items():
        for p in ps:
            f = v.request.backend_field(p)
            named[f] = (name, named.get(f, (name, []))[1] + [p])
    alts = {f: serving(v, ps, exclude=name) for f, (name, ps) in named.items()}
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
        after = v.command(**change)
        tail = f"Backends that serve it here: {', '.join(shown)}"
    else:
        # another device with these settings; else here (or elsewhere) without the settings refused
        device, keep = device_for(v, failing)
        drop = [f for f in USER_SETTINGS if f in fields and v.typed.is_set(f)] if not device else []
        if drop and not fields <= set(drop):
            device, keep = device_for(v, failing, without=drop)
        fixes = ([f"plan for --device {device}, where " + (f"{who} serves this model" if keep else
                  "a backend serves this model with these settings")
                  + (f" without {' and '.join(_flag(v, f) for f in drop)}" if drop else "")] if device else [])
        fixes += [f"drop {_flag(v, f)} ({who} refuses it)" for f in drop if not device] + _hints(reasons, v)
        unnamed = {} if keep or (drop and not device) else {f: None for f in named}
        after = v.command(device=device, **unnamed, **{f: None for f in drop})
        tail = "No attnkit backend serves it here."
    text = " ".join(f"--{f.replace('_', '-')} {n}" for f, (n, _) in named.items())
    return conflict("AK121", f"{text} cannot serve {_where(v)}: {_text(reasons, named=len(names) > 1)}. " + tail,
                    field=first, actual=named[first][0], expected=shown, solutions=fixes,
                    before=v.command(), after=after, reasons=_dicts(reasons), alternatives=shown)


def _flags(change: dict[str, str]) -> str:
    return " ".join(f"--{f.replace('_', '-')} {n}" for f, n in change.items())


def _flag(v: View, field: str) -> str:
    value = v.settings.get(field) if field != "page_size" else v.request.page_size
    return f"--{field.replace('_', '-')}" + ("" if value is True else f" {value}")


def nothing_serves(v: View, phase: str, pool: list[str]) -> AttnkitError:
    """No automatic candidate serves ``phase``; blame a user setting if only it stands in the way."""
    by_name = {n: v.reasons(phase, n) for n in pool}
    for field, value in (("page_size", v.request.page_size), ("kv_cache_dtype", v.request.kv_cache_dtype)):
        blocked = [n for n, rs in by_name.items() if rs and {r.field for r in rs} == {field}]
        if value is not None and blocked:
            if field == "kv_cache_dtype":
                return kv_dtype_conflict(v, [phase], pool)
            valid = common_page_sizes([v.registry[blocked[0]]], v.model)
            return page_size_refused(v, f"--page-size {value} is not accepted by {', '.join(blocked)} and no "
                                        f"other candidate serves {v.model.name} {phase} on {v.platform.name}; "
                                        f"{blocked[0]} accepts {{valid}}", valid)
    # a setting the user chose that every candidate refuses: dropping it is the fix
    user_fields = {f for f in ("cuda_graph", "speculative_tokens", "dtype", "kv_cache_dtype", "page_size")
                   if v.typed.is_set(f)}
    blocking = sorted(set.intersection(*({r.field for r in rs} for rs in by_name.values())) & user_fields
                      ) if by_name else []
    if blocking:
        return setting_refused_by_all(v, phase, pool, by_name, blocking[0])
    return no_candidate(v, phase, pool, by_name)


def _why_none(v: View, phase: str, pool: list[str], by_name: dict[str, list[Reason]]) -> str:
    return ("no priority table covers this platform" if v.entry(phase) is None
            else "every candidate is denied or not registered" if not pool else
            "; ".join(f"{n}: {_text(rs, named=False)}" for n, rs in by_name.items()))


def setting_refused_by_all(v: View, phase: str, pool: list[str], by_name: dict[str, list[Reason]],
                           field: str) -> AttnkitError:
    """AK120: every candidate refuses a setting the user chose (``field``); drop it."""
    value = v.settings.get(field)
    flag = f"--{field.replace('_', '-')}" + ("" if value is True else f" {value}")
    hints = [f"drop {flag} (every candidate refuses it)"] + _hints([r for rs in by_name.values() for r in rs], v)
    return conflict("AK120", f"no attnkit backend serves {v.model.name} {phase} on {v.platform.name} with "
                    f"{flag}: {_why_none(v, phase, pool, by_name)}",
                    field=field, actual=value, expected=pool, solutions=hints,
                    before=v.command(), after=v.command(**{field: None}), candidates=pool)


def no_candidate(v: View, phase: str, pool: list[str], by_name: dict[str, list[Reason]]) -> AttnkitError:
    """AK120: no candidate serves ``phase`` here; the fix is another device (with or without the
    settings the candidates also refuse), or the deny list dropped, or what the reasons name."""
    hints = _hints([r for rs in by_name.values() for r in rs], v)
    not_here = any(r.code in PLATFORM_CODES for rs in by_name.values() for r in rs)
    device = other_device(v) if not_here or not pool else None
    drop: list[str] = []
    if device is None and not_here:
        # no device serves with these settings: one that does without the settings they also refuse
        drop = [f for f in USER_SETTINGS if v.typed.is_set(f)
                and any(r.field == f for n in pool for p in v.phases for r in v.reasons(p, n))]
        device = other_device(v, without=drop) if drop else None
        if device:
            hints.insert(0, f"plan for --device {device} without {' and '.join(_flag(v, f) for f in drop)}")
    elif device and _missing(by_name) and getattr(v.platform, "preset", None) is None:
        # this machine lacks a package (torch): installing it is the fix here; a preset only assumes it
        hints.insert(1, f"or plan for --device {device}, a preset that assumes {' and '.join(_missing(by_name))} "
                        "installed (the plan is for that device, not this machine)")
    elif device:
        hints.insert(0, f"plan for --device {device}, where a backend serves this model with these settings")
    if not pool and v.request.deny and v.entry(phase) is not None:
        # every candidate is denied: the user's command without the deny list (and the variable unset)
        after = v.command(deny=None)
        if "ATTNKIT_DENY_BACKENDS" in v.env_used:
            after = f"unset ATTNKIT_DENY_BACKENDS; {after}"
    else:
        after = v.command(device=device, **{f: None for f in drop}) if device else v.command()
    return conflict("AK120", f"no attnkit backend serves {v.model.name} ({v.model.kind.upper()}) {phase} on "
                    f"{v.platform.name} ({v.platform.kind}): {_why_none(v, phase, pool, by_name)}",
                    field=f"{phase}_backend", actual=None, expected=pool, solutions=hints,
                    before=v.command(), after=after, candidates=pool)


def kv_dtype_conflict(v: View, phases: list[str], refusing: list[str]) -> AttnkitError:
    kv = v.request.kv_cache_dtype
    declared = [n for n, d in v.registry.items() if kv in d.capabilities.kv_cache_dtypes]
    here = [n for n in declared if n not in refusing and all(not v.reasons(p, n) for p in phases)]
    # the request fields that choose these phases' backends: a phase flag beats --attention-backend
    fields = list(dict.fromkeys(v.request.backend_field(p) if v.explicit[p] else "attention_backend"
                                for p in phases))
    flags = lambda n: " ".join(f"--{f.replace('_', '-')} {n}" for f in fields)  # noqa: E731
    fixes = [f"use {flags(n)} (stores {kv} KV and serves this model here)" for n in here]
    fixes.append(f"omit --kv-cache-dtype (the KV cache then uses the compute dtype {v.settings.get('dtype')})")
    return conflict("AK304", f"--kv-cache-dtype {kv} is not supported by {', '.join(refusing)}; backends "
                    f"that declare {kv} KV: {', '.join(declared) or 'none'}"
                    + (f" (serving {v.model.name} here: {', '.join(here)})" if here else ""),
                    field="kv_cache_dtype", actual=kv, expected=declared, solutions=fixes,
                    before=v.command(),
                    after=v.command(**{f: here[0] for f in fields}) if here else v.command(kv_cache_dtype=None))


def no_common_layout(v: View, options: dict[str, list[str]]) -> AttnkitError:
    which = " and ".join(f"a {p} backend ({', '.join(options[p])})" for p in v.phases)
    return conflict("AK308", f"no page size is accepted by {which}", field="page_size", actual=None,
                    expected=[], solutions=["use one --attention-backend for both phases"],
                    before=v.command(), after=v.command(prefill_attention_backend=None, decode_attention_backend=None))


def _missing(by_name: dict[str, list[Reason]]) -> list[str]:
    return sorted({r.actual for rs in by_name.values() for r in rs if r.code == "AK212"})


EXTRAS = ("torch", "triton", "transformers")      # pyproject's extras: pip install 'attnkit[torch]'


def _hints(reasons: list[Reason], v: View) -> list[str]:
    hints = []
    missing = sorted({r.actual for r in reasons if r.code == "AK212"})
    preset = getattr(v.platform, "preset", None)
    if missing and preset:
        hints.append(f"the {preset} preset assumes no {' and '.join(missing)}: plan for a preset that "
                     "assumes it (attnkit devices --json lists each preset's packages)")
    elif missing:
        hints += [f"pip install 'attnkit[{p}]' (to install {p} here; planning needs no torch, running does)"
                  if p in EXTRAS else f"install {p} on {v.platform.name}" for p in missing]
    if any(r.code in ("AK210", "AK211") for r in reasons):
        hints.append("plan for a device these backends run on (attnkit backends --device D shows which)")
    if v.request.deny:
        hints.append("remove backends from --deny / ATTNKIT_DENY_BACKENDS")
    return hints + list(CATALOG["AK120"].solutions if "AK120" in CATALOG else ())


def _text(reasons: list[Reason], *, named: bool = False) -> str:
    return "; ".join((f"{r.backend}: " if named else "") + r.message for r in reasons)


def _dicts(reasons: list[Reason]) -> list[dict[str, Any]]:
    return [r.to_dict() for r in reasons]


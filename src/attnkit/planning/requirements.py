"""Numerics the user requires (``--require batch-invariant``): which backends serve them, what
they cost, and the refusal when none does.

A requirement is a capability of the vocabulary's ``NUMERICS`` (registry/capabilities.py),
declared only where tests/conformance/test_bitwise.py proves it bit for bit: by a backend for
all its kernels, or by some of its kernel variants (``KernelVariant.numerics``), and then the
backend serves the requirement when every role of the phase has a declaring variant that can
run here, and the plan's kernel tables list only those (kernel_table.py). A backend without it
gets an AK312 reason like any other failed constraint; when no candidate serves a phase with
it, the plan fails with AK313 and says what would. What it costs is read from the device
profile: the measured rate of the backend (its declaring variants) chosen under the
requirement next to the rate of the one (its variants) chosen without it, never a typed figure.
"""
from __future__ import annotations

from typing import Any

from attnkit.errors import AttnkitError
from attnkit.planning import measured
from attnkit.planning.conflicts import conflict
from attnkit.planning.kernel_table import allowed_variants
from attnkit.planning.reasons import Reason
from attnkit.planning.request import spelled
from attnkit.planning.view import View
from attnkit.registry.capabilities import NUMERICS
from attnkit.registry.kernels import variant_misfits

ROLES = {"prefill": ("prefill", "extend"), "decode": ("decode",)}   # a phase's kernel roles

WHAT = {"batch_invariant": "a request's output does not depend on the other requests of its batch",
        "deterministic": "the same step gives the same bits run after run"}


def flag(require: tuple[str, ...]) -> str:
    return "--require " + ",".join(spelled(n) for n in require)


def reasons(decl, require: tuple[str, ...], phase: str, *, platform=None, facts=None) -> list[Reason]:
    """An AK312 reason per required property ``decl`` does not declare, neither itself nor
    through a variant per role of ``phase`` that can run here (``facts``: kernel_table.model_facts;
    None: variants are not considered)."""
    have = sorted(set(decl.capabilities.features) & set(NUMERICS))
    out = []
    for name in require:
        if name in decl.capabilities.features:
            continue
        why = _variant_gap(decl, name, phase, platform, facts) if decl.variants and facts is not None else ""
        if why is None:
            continue
        out.append(Reason("AK312", decl.name, "require", name, have,
                          f"does not declare {name} ({WHAT[name]}: declared only where a bitwise test "
                          f"proves it){why}", phases=(phase,)))
    return out


def _variant_gap(decl, name: str, phase: str, platform, facts) -> str | None:
    """None when every role of ``phase`` has a variant declaring ``name`` that runs here, else
    what is missing (appended to the AK312 message)."""
    gaps = []
    for role in ROLES[phase]:
        declaring = [k for k in decl.variants_for(role) if name in k.numerics]
        if not declaring:
            gaps.append(f"no {role} variant does")
            continue
        misfit = {k.name: variant_misfits(k, platform=platform, **{**facts, "require": ()}) for k in declaring}
        if all(misfit.values()):
            gaps.append("; ".join(f"its {role} variant {k} does but cannot run here ({', '.join(w)})"
                                  for k, w in misfit.items()))
    return "; ".join(gaps) if gaps else None


def unmet(v: View, phase: str, pool: list[str]) -> AttnkitError:
    """AK313: candidates serve ``phase`` but none with the requirement."""
    require = v.request.require
    serving = [n for n in v.registry if set(require) <= v.registry[n].capabilities.features]
    without = [n for n in pool if all(r.code == "AK312" for r in v.reasons(phase, n))]
    others = "; ".join(f"{n}: {', '.join(r.message for r in v.reasons(phase, n) if r.code != 'AK312')}"
                       for n in serving if n in v.registry and v.reasons(phase, n)
                       and any(r.code != "AK312" for r in v.reasons(phase, n)))
    solutions = [f"drop {flag(require)}: {', '.join(without)} then serve{'s' if len(without) == 1 else ''} "
                 f"{v.model.name} {phase}, without a bitwise guarantee"] if without else []
    if serving:
        solutions.append(f"backends that declare {' and '.join(require)}: {', '.join(serving)}"
                         + (f" (here: {others})" if others else ""))
    return conflict("AK313", f"no attnkit backend serves {v.model.name} {phase} on {v.platform.name} "
                    f"with {flag(require)}" + (f"; {', '.join(without)} would without it" if without else ""),
                    field="require", actual=list(require), expected=serving, solutions=solutions,
                    before=v.command(), after=v.command(require=None), candidates=pool)


def unconstrained(profile_choice, phase: str, candidates: list[str], model, settings, *,
                  allowed: measured.Allowed = None) -> str | None:
    """The backend the phase would get without the requirement: the first of ``candidates``
    (priority order) by the profile's order where it measured them, else the first
    (``allowed``: the kernel variants that can run here without the requirement)."""
    if not candidates:
        return None
    prof = getattr(profile_choice, "profile", None)
    shape = measured.model_shape(model, settings)
    if prof is not None and shape is not None:
        ranking = measured.rank(prof, shape, phase, candidates, profile_choice.workload.get(phase),
                                page_size=settings.get("page_size"), allowed=allowed)
        if ranking is not None and ranking.measured:
            return ranking.order[0]
    return candidates[0]


def cost(profile_choice, phase: str, chosen: str, unconstrained: str | None, model, settings, *,
         allowed: tuple[measured.Allowed, measured.Allowed] = (None, None)) -> dict[str, Any]:
    """What the requirement costs ``phase``: the profile's rates of ``chosen`` (its variants of
    ``allowed[0]``, those that declare the requirement) and of the backend chosen without it
    (``unconstrained``, its variants of ``allowed[1]``), their ratio, the variants that stand
    for each (the fastest per bucket) and the profile; rates are None where the profile has no
    measurement (then nothing is claimed). The same backend both ways costs nothing unless its
    variants differ."""
    out: dict[str, Any] = {"chosen": chosen, "unconstrained": unconstrained, "chosen_rate": None,
                           "unconstrained_rate": None, "unit": measured.UNITS.get(phase), "ratio": None,
                           "profile": None, "chosen_variants": [], "unconstrained_variants": []}
    if unconstrained is None:
        return out
    variants = [(a or {}).get(chosen) for a in allowed]
    if unconstrained == chosen and variants[0] == variants[1]:
        out["ratio"] = 1.0
        return out
    for key, name, a in (("chosen", chosen, allowed[0]), ("unconstrained", unconstrained, allowed[1])):
        # what would run, until the profile says which of them stand for each side
        out[f"{key}_variants"] = sorted(v for v in (a or {}).get(name, ()) if v)
    prof = getattr(profile_choice, "profile", None)
    shape = measured.model_shape(model, settings)
    if prof is None or shape is None:
        return out
    workload, page = profile_choice.workload.get(phase), settings.get("page_size")
    sides = [(chosen, allowed[0]), (unconstrained, allowed[1])]
    rankings = [measured.rank(prof, shape, phase, [name], workload, page_size=page, allowed=a)
                for name, a in sides]
    if any(r is None for r in rankings):
        return out
    out["profile"] = prof.name
    for key, (name, a), r in zip(("chosen", "unconstrained"), sides, rankings):
        out[f"{key}_rate"] = r.rates.get(name)
        best = measured.best_entries(prof, set(r.buckets), a)
        out[f"{key}_variants"] = (sorted({e.variant for (n, _), e in best.items() if n == name and e.variant})
                                  or out[f"{key}_variants"])
    a, b = out["chosen_rate"], out["unconstrained_rate"]
    if a is not None and b and rankings[0].method == rankings[1].method:
        out["ratio"] = a / b
    return out


def unmeasured(profile_choice, phase: str, serving: list[str], model, settings, *, allowed: measured.Allowed,
               require: tuple[str, ...]) -> list[str]:
    """A warning per backend of ``serving`` (it serves ``phase`` under the requirement, not
    chosen) that the profile measured for this shape but not with its declaring variants
    (``allowed``): ranked after the measured ones, it may be the faster; tune measures it."""
    prof = getattr(profile_choice, "profile", None)
    shape = measured.model_shape(model, settings)
    if prof is None or shape is None:
        return []
    out = []
    page, workload = settings.get("page_size"), profile_choice.workload.get(phase)
    for name in serving:
        if name not in (allowed or {}):
            continue
        with_them = measured.rank(prof, shape, phase, [name], workload, page_size=page, allowed=allowed)
        without = measured.rank(prof, shape, phase, [name], workload, page_size=page)
        if with_them is not None and name not in with_them.rates and without is not None and name in without.rates:
            variants = ", ".join(sorted(v for v in allowed[name] if v))
            out.append(f"{prof.name} has no {phase} measurement of {name}'s {variants} (the variants that "
                       f"serve {flag(require)}), so {name} ranks after the measured backends: "
                       f"`attnkit tune --backends {name} --out <profile>` measures them")
    return out


def price(profile_choice, phase: str, chosen: str, registry, platform, model, settings, *, facts,
          candidates: list[str], serving: list[str], planner_pick: bool, require: tuple[str, ...]):
    """What ``require`` costs ``phase``: ``(cost, reason line, warnings)``. ``facts``: the model's
    facts with and without the required numerics; ``candidates``: the backends that fail nothing
    but the requirement (the unconstrained pick is the first of them, by the profile, unless the
    user or a rule fixed the backend: ``planner_pick`` False); ``serving``: the other backends
    that meet it (warned about when unmeasured)."""
    allowed = tuple(allowed_variants(registry, platform, f, roles=ROLES[phase]) for f in facts)
    other = (unconstrained(profile_choice, phase, candidates, model, settings, allowed=allowed[1])
             if planner_pick else chosen)
    c = cost(profile_choice, phase, chosen, other, model, settings, allowed=allowed)
    line = f"Required {', '.join(require)}: {cost_text(phase, c)}"
    warnings = unmeasured(profile_choice, phase, serving, model, settings, allowed=allowed[0], require=require)
    return c, line, warnings


def _named(name: str, variants: list[str]) -> str:
    return f"{name} ({', '.join(variants)})" if variants else name


def cost_text(phase: str, c: dict[str, Any]) -> str:
    """One line for the plan's reasons."""
    if c["unconstrained"] is None or c["ratio"] == 1.0 and c["profile"] is None:
        return f"{phase}: {c['chosen']} is also the choice without the requirement (no cost)"
    head = (f"{phase}: {_named(c['chosen'], c['chosen_variants'])} instead of "
            f"{_named(c['unconstrained'], c['unconstrained_variants'])}")
    if c["ratio"] is None:
        missing = [_named(c[k], c[f"{k}_variants"]) for k in ("chosen", "unconstrained") if c[f"{k}_rate"] is None]
        return head + (f" (cost not measured: the profile has no {phase} rate of {' or '.join(missing)} "
                       "for this model)" if missing and c["profile"] else
                       " (cost not measured: no profile measured this model's shape)")
    return (f"{head}: {measured.rate_text(c['chosen_rate'])} vs {measured.rate_text(c['unconstrained_rate'])} "
            f"{c['unit']} ({c['ratio']:.2f}x), measured by {c['profile']}")

"""Numerics the user requires (``--require batch-invariant``): which backends serve them, what
they cost, and the refusal when none does.

A requirement is a capability of the vocabulary's ``NUMERICS`` (registry/capabilities.py),
declared by a backend only where tests/conformance/test_bitwise.py proves it bit for bit. A
backend without it gets an AK312 reason like any other failed constraint; when no candidate
serves a phase with it, the plan fails with AK313 and says what would. What it costs is read
from the device profile: the measured rate of the backend chosen under the requirement next to
the rate of the one chosen without it, never a typed figure.
"""
from __future__ import annotations

from typing import Any

from attnkit.errors import AttnkitError
from attnkit.planning import measured
from attnkit.planning.conflicts import conflict
from attnkit.planning.reasons import Reason
from attnkit.planning.request import spelled
from attnkit.planning.view import View
from attnkit.registry.capabilities import NUMERICS

WHAT = {"batch_invariant": "a request's output does not depend on the other requests of its batch",
        "deterministic": "the same step gives the same bits run after run"}


def flag(require: tuple[str, ...]) -> str:
    return "--require " + ",".join(spelled(n) for n in require)


def reasons(decl, require: tuple[str, ...], phase: str) -> list[Reason]:
    """An AK312 reason per required property ``decl`` does not declare."""
    have = sorted(set(decl.capabilities.features) & set(NUMERICS))
    return [Reason("AK312", decl.name, "require", name, have,
                   f"does not declare {name} ({WHAT[name]}: declared only where a bitwise test proves it)",
                   phases=(phase,))
            for name in require if name not in decl.capabilities.features]


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


def unconstrained(profile_choice, phase: str, candidates: list[str], model, settings) -> str | None:
    """The backend the phase would get without the requirement: the first of ``candidates``
    (priority order) by the profile's order where it measured them, else the first."""
    if not candidates:
        return None
    prof = getattr(profile_choice, "profile", None)
    shape = measured.model_shape(model, settings)
    if prof is not None and shape is not None:
        ranking = measured.rank(prof, shape, phase, candidates, profile_choice.workload.get(phase),
                                page_size=settings.get("page_size"))
        if ranking is not None and ranking.measured:
            return ranking.order[0]
    return candidates[0]


def cost(profile_choice, phase: str, chosen: str, unconstrained: str | None, model, settings) -> dict[str, Any]:
    """What the requirement costs ``phase``: the profile's rates of ``chosen`` and of the backend
    chosen without the requirement (``unconstrained``), their ratio, and the profile; rates are
    None where the profile has no measurement (then nothing is claimed)."""
    out: dict[str, Any] = {"chosen": chosen, "unconstrained": unconstrained, "chosen_rate": None,
                           "unconstrained_rate": None, "unit": measured.UNITS.get(phase), "ratio": None,
                           "profile": None}
    if unconstrained in (None, chosen):
        out["ratio"] = 1.0 if unconstrained == chosen else None
        return out
    prof = getattr(profile_choice, "profile", None)
    shape = measured.model_shape(model, settings)
    if prof is None or shape is None:
        return out
    ranking = measured.rank(prof, shape, phase, [chosen, unconstrained],
                            profile_choice.workload.get(phase), page_size=settings.get("page_size"))
    if ranking is None:
        return out
    out["profile"] = prof.name
    a, b = ranking.rates.get(chosen), ranking.rates.get(unconstrained)
    out["chosen_rate"], out["unconstrained_rate"] = a, b
    if a is not None and b:
        out["ratio"] = a / b
    return out


def cost_text(phase: str, c: dict[str, Any]) -> str:
    """One line for the plan's reasons."""
    if c["unconstrained"] in (None, c["chosen"]):
        return f"{phase}: {c['chosen']} is also the choice without the requirement (no cost)"
    head = f"{phase}: {c['chosen']} instead of {c['unconstrained']}"
    if c["ratio"] is None:
        return head + " (the profile " + ("measured neither" if c["profile"] is None else "did not measure both") \
            + " for this model: cost not known)"
    return (f"{head}: {measured.rate_text(c['chosen_rate'])} vs {measured.rate_text(c['unconstrained_rate'])} "
            f"{c['unit']} ({c['ratio']:.2f}x), measured by {c['profile']}")
